"""Lowering a schedule to an MSCCL program that meets every runtime limit: the search over channel layouts.

Channels are tried upwards from the fewest that can fit (a transfer's channel is its chunk, or its pair
of ranks, modulo the channel count, or its chunk's block of consecutive ids) until every runtime limit
holds; among the fitting layouts the first one that adds no false wait wins, else the one with the fewest.
Above :data:`SEARCH_TRANSFERS` transfers, where false waits are not counted, the first fitting layout
wins, trying :data:`LARGE_CHANNELS` channels and its doubles first, then the other counts from it up.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from synth.collectives import Kind
from synth.errors import InputError, LimitError, NotApplicable
from synth.export import without_cycle_collection
from synth.export.msccl.locations import Lowering, lower_locations
from synth.export.msccl.program import (
    COLL_NAME,
    DEFAULT_MAX_BYTES,
    PROTOCOLS,
    MscclLimits,
    MscclProgram,
    Threadblock,
)
from synth.export.msccl.threadblocks import PARSER_NODES, Columns, LimitViolation, build
from synth.export.msccl.writer import escape_attribute
from synth.schedule import Schedule

#: Up to this many transfers, channel layouts are searched for one that adds no false waits.
SEARCH_TRANSFERS = 5_000
#: Above :data:`SEARCH_TRANSFERS`, the channel counts tried first: this one and its doubles, then the others
#: from it up, then fewer. With fewer, a threadblock serialises more unrelated messages: the optimal
#: allgather on 256 and 512 DGX A100 gpus fits in 2 and 4 channels, whose programs the flow model finds 11%
#: and 18% slower than the schedule at 1 GiB, and with 8 they take the schedule's own time. Doubles before
#: the counts between: on 2,048 gpus the first count that fits from 8 up, 15, made a program 2.4 times
#: slower than the schedule (18.75 against 7.82 ms), and 16 one 6% slower (8.32 ms).
LARGE_CHANNELS = 8
#: Longest attribute value the runtime's XML parser reads (``MAX_STR_LEN``; it copies without checking).
MAX_ATTRIBUTE = 255

ALLTOALLV_REFUSAL = (
    "MSCCL XML cannot carry an alltoallv: its runtime cuts every buffer into chunks of one size, the call's "
    "count / nchunksperloop, and its coll names only uniform collectives (a coll=\"custom\" program would fix "
    "one demand's per-pair chunk counts into the XML, which the next step's ncclAllToAllv sendcounts break); "
    "use `synth export chakra` instead (each Chakra message carries its own size)")
"""Why :func:`lower_msccl` refuses an alltoallv schedule, and what to use instead."""

SHARDS_REFUSAL = (
    "MSCCL XML cannot carry uneven shards: its runtime cuts an allgather's input and a reduce-scatter's output "
    "into equal per-rank shares of the call's count (ncclAllGather and ncclReduceScatter take one count for every "
    "rank); use `synth export chakra` instead (each Chakra message carries its own size)")
"""Why :func:`lower_msccl` refuses a schedule with uneven shards (allgatherv, reduce-scatterv)."""


def _channels(schedule: Schedule, channels: int, policy: str, columns: Columns | None = None) -> np.ndarray:
    """Each transfer's channel: its chunk modulo the count (``chunk``), its pair of ranks (``pair``), or
    its chunk's block of consecutive chunk ids (``block``: how NCCL deals chunks to channels, so channels
    that share a ring each keep their own chain of chunks)."""
    columns = columns or Columns.of(schedule)
    if policy == "block":
        return columns.chunk * channels // schedule.collective.num_chunk_ids
    return (columns.chunk if policy == "chunk" else columns.src + columns.dst) % channels


def _split_ok(schedule: Schedule, lowering: Lowering, chan: np.ndarray | list[int],
              columns: Columns | None = None) -> bool:
    """True when no connection carries two messages of one dependency level, so sends may run a half
    step ahead of recvs (which lets a ring fuse its recv with the next send) without a FIFO filling up."""
    columns = columns or Columns.of(schedule)
    remote = columns.src != columns.dst
    level = np.asarray(lowering.level, dtype=np.int64)[remote]
    keys = (columns.src[remote], columns.dst[remote], np.asarray(chan, dtype=np.int64)[remote], level)
    order = np.lexsort(keys)
    rows = np.stack([key[order] for key in keys])
    return not bool(np.any(np.all(rows[:, 1:] == rows[:, :-1], axis=0)))


def _ancestors(schedule: Schedule, lowering: Lowering) -> list[int]:
    """Bitmask of every transfer's transitive dependencies (for schedules of moderate size)."""
    ancestors = [0] * len(schedule.transfers)
    for tid in lowering.order:
        mask = 0
        for dep in schedule.transfers[tid].deps:
            mask |= ancestors[dep] | (1 << dep)
        ancestors[tid] = mask
    return ancestors


def _options(schedule: Schedule, proto: str | None, limits: MscclLimits | None, max_channels: int | None,
             min_bytes: int, max_bytes: int) -> tuple[str, MscclLimits]:
    """The protocol and limits to lower with, after checking every option."""
    limits = limits or MscclLimits()
    if max_channels is not None:
        limits = replace(limits, max_channels=max_channels)
    limits.check()
    if proto is None:
        pinned_protocol = (schedule.params.get("plan") or {}).get("protocol") \
            if isinstance(schedule.params.get("plan"), dict) else None
        proto = pinned_protocol if pinned_protocol in PROTOCOLS else "Simple"
    if proto not in PROTOCOLS:
        raise InputError("", "proto", f"expected one of {', '.join(PROTOCOLS)}, got {proto!r}")
    if min_bytes < 0 or max_bytes <= min_bytes:
        raise InputError("", "max_bytes", f"expected 0 <= minBytes < maxBytes, got {min_bytes} and {max_bytes}")
    if not schedule.transfers:
        raise InputError("", "transfers", "the schedule has no transfers")
    ranks = schedule.collective.num_ranks
    if ranks > limits.max_gpus:
        raise LimitError(f"the schedule does not fit the MSCCL runtime: it has {ranks} gpus, {ranks - limits.max_gpus} over "
                         f"the limit of {limits.max_gpus} (the executor's XML parser keeps at most {limits.max_gpus} "
                         "<gpu> elements, MAX_SUBS in msccl_parser.h, without checking: a larger program overwrites "
                         "its memory). Fix: raise `max_gpus` only for an executor built with a larger MAX_SUBS")
    busiest = _busiest_end(schedule)
    if busiest is not None:
        nodes, gpu = busiest
        if nodes >= limits.parser_nodes:
            raise LimitError(_limit_message(schedule, LimitViolation(PARSER_NODES, nodes, limits.parser_nodes - 1,
                                                                     f"gpu {gpu}", at_least=True), limits))
    return proto, limits


def _busiest_end(schedule: Schedule) -> tuple[int, int] | None:
    """The fewest nodes the runtime's XML parser keeps for the busiest gpu, and that gpu: every step moves
    one chunk (``cnt="1"``) and carries at most one send and one receive, so a gpu has at least as many steps
    as it sends or receives transfers, in at least one threadblock."""
    remote = [ends for ends in (t.ends() for t in schedule.transfers) if ends[0] != ends[1]]
    if not remote:
        return None
    sends, recvs = Counter(src for src, _ in remote), Counter(dst for _, dst in remote)
    gpu = max(sorted(sends.keys() | recvs.keys()), key=lambda g: max(sends[g], recvs[g]))
    return 1 + schedule.collective.num_ranks + 1 + max(sends[gpu], recvs[gpu]), gpu


def channel_floor(schedule: Schedule, limits: MscclLimits) -> int:
    """The fewest channels that can keep every threadblock under the steps limit.

    All messages between two gpus on one channel are sends of one threadblock (one step each at least),
    so the busiest pair of gpus needs its messages spread over this many channels.
    """
    pairs = Counter((t.src, t.dst) for t in schedule.transfers if t.src != t.dst)
    messages = max(pairs.values(), default=0)
    return max(1, -(-messages // (limits.max_steps - 1)))


def _best_layout(schedule: Schedule, lowering: Lowering, limits: MscclLimits) -> list[list[Threadblock]]:
    """The first fitting layout that makes no step wait for a transfer it does not depend on; failing
    that, the fitting layout with the fewest such waits (fewest channels first, from the fewest that can
    fit: :func:`channel_floor`)."""
    ancestors = _ancestors(schedule, lowering) if len(schedule.transfers) <= SEARCH_TRANSFERS else None
    distinct = len({t.chunk for t in schedule.transfers})
    top = min(limits.max_channels, max(distinct, 2 * schedule.collective.num_ranks))
    counts = [k for k in sorted({1, 2, 4, 8, 16, 32, distinct, limits.max_channels}) if k <= top]
    floor = channel_floor(schedule, limits)
    if ancestors is None:  # LARGE_CHANNELS and its doubles, then the other counts from it up, then fewer
        start, most = min(LARGE_CHANNELS, limits.max_channels), limits.max_channels
        doubles = [start << shift for shift in range(most.bit_length()) if start << shift <= most]
        counts = doubles + [k for k in range(start, most + 1) if k not in doubles] + list(range(1, start))
    counts = [k for k in counts if k >= floor] or [limits.max_channels]  # fewer channels cannot fit
    columns = Columns.of(schedule)
    first: tuple[LimitViolation, tuple[np.ndarray, bool]] | None = None
    best: tuple[int, int, list[list[Threadblock]]] | None = None
    attempt = 0
    for channels in counts:
        fitted = False
        for policy, pair_rest in (("chunk", False), ("pair", False), ("block", False), ("chunk", True), ("pair", True)):
            if (channels == 1 and policy in ("pair", "block")) or (pair_rest and fitted):
                continue  # the same layout as "chunk"; pairing unrelated peers only when nothing else fits
            chan = _channels(schedule, channels, policy, columns)
            try:
                tbs, waits = build(schedule, lowering, chan, _split_ok(schedule, lowering, chan, columns), limits,
                                   pair_rest, ancestors, columns=columns)
            except LimitViolation as violation:  # report the attempt that came closest
                if first is None or violation.value / violation.allowed < first[0].value / first[0].allowed:
                    first = (violation, (chan, pair_rest))
                continue
            fitted = True
            attempt += 1
            if best is None or waits < best[0]:
                best = (waits, attempt, tbs)
            if waits == 0 or ancestors is None:
                break
        if best is not None and (best[0] == 0 or ancestors is None):
            break
    if best is None:
        assert first is not None
        closest, (chan, pair_rest) = first
        if closest.at_least:  # finish that layout, for the count itself
            try:
                build(schedule, lowering, chan, _split_ok(schedule, lowering, chan, columns), limits, pair_rest,
                      exact=True, columns=columns)
            except LimitViolation as exact:
                closest = exact
        raise LimitError(_limit_message(schedule, closest, limits))
    return best[2]


@without_cycle_collection
def lower_msccl(schedule: Schedule, proto: str | None = None, limits: MscclLimits | None = None,
                max_channels: int | None = None, min_bytes: int = 0, max_bytes: int = DEFAULT_MAX_BYTES,
                name: str | None = None) -> MscclProgram:
    """Lower a verified schedule to an :class:`MscclProgram` that meets every runtime limit.

    ``proto`` is the protocol the XML names (the runtime runs the whole program with it); default the
    protocol the schedule pins in ``params["plan"]`` when it pins an MSCCL one, else ``Simple``.

    Raises :class:`~synth.errors.LimitError` naming the limit, the excess and the fix when no channel
    count up to ``max_channels`` fits, and :class:`~synth.errors.NotApplicable` for an alltoallv
    (see :data:`ALLTOALLV_REFUSAL`) or a schedule with uneven shards (:data:`SHARDS_REFUSAL`).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> program = lower_msccl(synthesize(load_topology("switch:n=4"), "allreduce", "ring"))
    >>> program.stats()["threadblocks"], sorted({s.type for g in program.tbs for tb in g for s in tb.steps})
    (16, ['r', 'rcs', 'rrcs', 'rrs', 's'])
    """
    schedule.require_point_to_point("MSCCL XML export")
    if schedule.kind == Kind.ALLTOALLV:
        raise NotApplicable(ALLTOALLV_REFUSAL)
    if schedule.collective.shards is not None:
        raise NotApplicable(SHARDS_REFUSAL)
    proto, limits = _options(schedule, proto, limits, max_channels, min_bytes, max_bytes)
    label = name or f"synth_{schedule.algorithm}_{schedule.kind.value}"
    written = len(escape_attribute(label))
    if written > MAX_ATTRIBUTE:
        raise InputError("", "name", f"expected at most {MAX_ATTRIBUTE} characters once escaped for XML (the "
                         f"runtime's parser reads an attribute into {MAX_ATTRIBUTE + 1} bytes), got {written}")
    lowering = lower_locations(schedule)
    tbs = _best_layout(schedule, lowering, limits)
    used = 1 + max(tb.chan for gpu in tbs for tb in gpu)
    return MscclProgram(label, COLL_NAME[schedule.kind], proto, schedule.collective.num_ranks,
                        lowering.nchunksperloop, used, lowering.buffers, tbs, min_bytes, max_bytes)


def _limit_message(schedule: Schedule, violation: LimitViolation, limits: MscclLimits) -> str:
    fixes = []
    if violation.limit == "steps per threadblock":
        fixes.append(f"use fewer chunks (the schedule has {schedule.chunks}; e.g. generate it with the option "
                     f"chunks={max(1, schedule.chunks // 2)})")
        if limits.max_channels < 32:
            fixes.append("allow more channels (`max_channels`, up to 32)")
        fixes.append(f"raise `max_steps` if your MSCCL build allows more than {limits.max_steps - 1} steps")
    elif violation.limit == PARSER_NODES:
        fixes.append(f"use fewer chunks (fewer steps per gpu: the schedule has {schedule.chunks})")
        fixes.append(f"raise `parser_nodes` only for an executor built with MAX_NODES above {limits.parser_nodes}")
    else:
        fixes.append("use fewer channels or a schedule with fewer peers per gpu")
        if violation.limit == "threadblocks per gpu":
            fixes.append(f"raise `sms` for a gpu with more than {limits.sms} SMs")
    if any(key.endswith("_trees_per_root") for key in schedule.params):  # a packing of spanning trees (forest)
        fixes.insert(0, "pack fewer trees (the forest algorithm's option max_trees_per_root=K with a smaller K)")
    return (f"the schedule does not fit the MSCCL runtime: {violation} (no layout of 1 to {limits.max_channels} channels fits). "
            f"Fix: " + "; or ".join(fixes))
