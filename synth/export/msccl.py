"""MSCCL XML export (``synth export msccl``) and import (``synth import msccl``).

Export lowers a schedule to the XML the MSCCL executor runs, out of place (``inplace="0"
outofplace="1"``), with ``minBytes`` and ``maxBytes`` always present and ``coll`` spelled the way the
runtime's parser wants it (``reducescatter``):

Buffers
    Every data cell and scratch slot of the schedule lives in one buffer position at a time: a rank's
    own data in the input buffer ``i``; what it receives in the output buffer ``o`` when the chunk
    belongs in its output, else in the scratch buffer ``s`` (one position per cell or scratch slot,
    never reused). A reduction reads its local operand where the cell is and writes the result where it
    belongs. Chunks a rank must show in its output without receiving them (its own allgather chunk, its
    alltoall chunk to itself, the broadcast root's data) get a ``cpy`` step first.
Local ops
    A local copy is a ``cpy`` step, a local reduction a ``re`` step (dst = dst + src in place, preceded
    by a ``cpy`` when the partial value is not yet where the result belongs), on the threadblock that
    wrote what it reads (else on that of its latest dependency on the gpu).
Threadblocks and channels
    Each transfer is a send step on the source and a recv step on the destination, on one channel. On
    every gpu and channel, send peers and recv peers are paired into threadblocks (one send peer and
    one recv peer each), preferring pairs where a received chunk is forwarded. Channels are tried from
    1 upwards (a transfer's channel is its chunk, or its pair of ranks, modulo the channel count) until
    every runtime limit holds.
Order and dependencies
    All steps follow one topological order of the transfers, so send and recv orders agree on every
    connection and no cycle of waits can form. A step waits for the steps of the same gpu that the
    transfer depends on (``depid``/``deps``, ``hasdep="1"`` on the awaited step); a dependency on
    another threadblock beyond the first becomes a ``nop`` step; dependencies on ranks that are not an
    end of the transfer are replaced by their nearest ancestors that are.
Fused steps
    A recv followed on the same threadblock by the send of the chunk it received becomes one step:
    ``rcs`` (copy), ``rrcs`` (reduce, keep the result) or ``rrs`` (reduce, result needed only by the
    send); a reduction that is not forwarded is ``rrc``.
Limits (checked before writing; a :class:`~synth.errors.LimitError` names the limit, by how much it is
exceeded and the fix): channels at most ``max_channels`` (32), threadblocks per channel per gpu at
most 32, threadblocks per gpu at most the SM count (``sms``, 108 on an A100), steps per threadblock
below ``max_steps`` (256; some builds 64), ``cnt`` below 72, offsets within the declared chunk counts.

Import reads MSCCL XML (safely: ``defusedxml``, no DTDs or entities) from MSCCLang/msccl-tools, TACCL,
ForestColl or synth, executes it symbolically (threadblocks in step order, ``depid``/``deps``, FIFO
connections per (sender, receiver, channel)) and records one transfer per chunk sent and one local op per
``cpy``/``re`` that must move data. Buffer positions map onto the schedule's buffers (see
:class:`_Cells`): a chunk's output position is its data cell, its input position shares that cell until
the output is written, every other position is a scratch slot of its own; values a later step still
reads are kept by local copies. Dependencies are the data hazards on those buffers in the simulated
order: a transfer waits for the write of the data it sends, and for the previous write and the reads
since of what it overwrites. Two steps that touch one buffer position, one of them writing, must be
ordered by the program itself (threadblock order, ``depid``/``deps``, a send before its receive), else
the import reports the race (see :class:`_Races`).
Accepts ``reduce_scatter``, files without ``outofplace``, ``minBytes`` or ``maxBytes``, in-place buffers
(``o_chunks="0"`` / ``i_chunks="0"``) and ``nop`` steps with ``cnt="0"`` and offsets -1; refuses
``coll="custom"`` (no pre- or postcondition to verify) and an output position that is never written.
Routes: see :class:`synth.export.RouteBalancer` (switches and forwarding gpus only).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from synth.collectives import Collective, Kind, parse_kind
from synth.errors import InputError, LimitError, VerificationError
from synth.export import RouteBalancer
from synth.rank_deps import NearestTouching
from synth.schedule import COPY, REDUCE, Schedule, Transfer
from synth.topology import Topology

#: The runtime's ``coll`` spelling per collective.
COLL_NAME = {Kind.ALLREDUCE: "allreduce", Kind.ALLGATHER: "allgather", Kind.REDUCESCATTER: "reducescatter",
             Kind.ALLTOALL: "alltoall", Kind.BROADCAST: "broadcast", Kind.REDUCE: "reduce"}
PROTOCOLS = ("Simple", "LL", "LL128")
#: Largest accepted XML file, in bytes.
MAX_XML_BYTES = 64 * 1024 * 1024
#: Default ``maxBytes``: 1 TiB (the algorithm applies to every practical size).
DEFAULT_MAX_BYTES = 1 << 40
#: Up to this many transfers, channel layouts are searched for one that adds no false waits.
SEARCH_TRANSFERS = 5_000


@dataclass(frozen=True)
class MscclLimits:
    """The MSCCL runtime's limits (see the module docstring)."""

    max_channels: int = 32
    max_tbs_per_channel: int = 32
    sms: int = 108
    max_steps: int = 256
    max_cnt: int = 72

    def check(self) -> None:
        """Reject impossible settings with a clear message."""
        for name, value, lower, upper in (("--max-channels", self.max_channels, 1, 32),
                                          ("--max-tbs-per-channel", self.max_tbs_per_channel, 1, 1024),
                                          ("--sms", self.sms, 1, 100_000), ("--max-steps", self.max_steps, 2, 1 << 20)):
            if not lower <= value <= upper:
                raise InputError("", name, f"expected {lower}..{upper}, got {value}")


# ---------------------------------------------------------------------------------------- export
@dataclass
class _Step:
    type: str
    srcbuf: str = "i"
    srcoff: int = -1
    dstbuf: str = "i"
    dstoff: int = -1
    cnt: int = 1
    depid: int = -1
    deps: int = -1
    hasdep: int = 0


@dataclass
class _Tb:
    send: int
    recv: int
    chan: int
    steps: list[_Step] = field(default_factory=list)


@dataclass
class MscclProgram:
    """A lowered schedule: per gpu its buffer sizes and threadblocks."""

    name: str
    coll: str
    proto: str
    ngpus: int
    nchunksperloop: int
    nchannels: int
    buffers: list[tuple[int, int, int]]
    tbs: list[list[_Tb]]
    min_bytes: int = 0
    max_bytes: int = DEFAULT_MAX_BYTES
    #: the runtime's paths against the schedule's (set by :func:`export_msccl` when given the topology)
    routing: RuntimeRouting | None = None

    def xml(self) -> str:
        """The XML text (deterministic: same program, same bytes)."""
        lines = [f'<algo name="{_escape(self.name)}" proto="{self.proto}" nchannels="{self.nchannels}" '
                 f'nchunksperloop="{self.nchunksperloop}" ngpus="{self.ngpus}" coll="{self.coll}" inplace="0" '
                 f'outofplace="1" minBytes="{self.min_bytes}" maxBytes="{self.max_bytes}">']
        for gpu, (i_chunks, o_chunks, s_chunks) in enumerate(self.buffers):
            lines.append(f'  <gpu id="{gpu}" i_chunks="{i_chunks}" o_chunks="{o_chunks}" s_chunks="{s_chunks}">')
            for tb_id, tb in enumerate(self.tbs[gpu]):
                lines.append(f'    <tb id="{tb_id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
                for s, step in enumerate(tb.steps):
                    lines.append(f'      <step s="{s}" type="{step.type}" srcbuf="{step.srcbuf}" srcoff="{step.srcoff}" '
                                 f'dstbuf="{step.dstbuf}" dstoff="{step.dstoff}" cnt="{step.cnt}" '
                                 f'depid="{step.depid}" deps="{step.deps}" hasdep="{step.hasdep}"/>')
                lines.append("    </tb>")
            lines.append("  </gpu>")
        lines.append("</algo>")
        return "\n".join(lines) + "\n"

    def stats(self) -> dict[str, int]:
        """Threadblocks, steps and channels, for reports."""
        steps = [len(tb.steps) for gpu in self.tbs for tb in gpu]
        return {"gpus": self.ngpus, "channels": self.nchannels, "threadblocks": sum(len(g) for g in self.tbs),
                "max_tbs_per_gpu": max(len(g) for g in self.tbs), "steps": sum(steps),
                "max_steps_per_tb": max(steps, default=0)}


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


Location = tuple[str, int]


@dataclass
class _Lowering:
    """Buffer locations per transfer from replaying the schedule in order."""

    order: list[int]
    position: list[int]
    level: list[int]
    src_loc: list[Location]
    operand_loc: list[Location | None]
    dst_loc: list[Location]
    copies: list[list[tuple[Location, Location]]]
    scratch: list[int]
    needed: list[bool]
    buffers: list[tuple[int, int, int]]
    nchunksperloop: int
    #: (transfer, gpu) -> its deps that have gpu as an end (see _local_deps), and the reverse
    local_deps: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    dependents: dict[tuple[int, int], set[int]] = field(default_factory=dict)


def _levels(schedule: Schedule) -> list[int]:
    level = [0] * len(schedule.transfers)
    remaining = {t.id for t in schedule.transfers}
    done: set[int] = set()
    # deps may point forward in id order; resolve levels iteratively (the schedule is verified acyclic)
    while remaining:
        progressed = False
        for tid in sorted(remaining):
            t = schedule.transfers[tid]
            if all(d in done for d in t.deps):
                level[tid] = 1 + max((level[d] for d in t.deps), default=-1)
                done.add(tid)
                progressed = True
        remaining -= done
        if not progressed:
            raise InputError("", "deps", "the schedule's dependencies form a cycle (run synth verify)")
    return level


def _lower_locations(schedule: Schedule) -> _Lowering:
    coll = schedule.collective
    kind, n, chunks = coll.kind, coll.num_ranks, coll.chunks
    per = chunks // n if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL) else 0
    level = _levels(schedule)
    order = sorted(range(len(level)), key=lambda tid: (level[tid], tid))
    position = [0] * len(order)
    for index, tid in enumerate(order):
        position[tid] = index
    scratch = [0] * n
    scratch_slot: dict[tuple[int, int], int] = {}
    loc: dict[tuple[int, int], Location] = {}
    copies: list[list[tuple[Location, Location]]] = [[] for _ in range(n)]
    for g in range(n):
        if kind in (Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.REDUCE):
            for c in range(chunks):
                loc[(g, c)] = ("i", c)
        elif kind == Kind.ALLGATHER:
            for j in range(per):
                loc[(g, g * per + j)] = ("i", j)
                copies[g].append((("i", j), ("o", g * per + j)))
        elif kind == Kind.ALLTOALL:
            for j in range(chunks):
                loc[(g, g * chunks + j)] = ("i", j)
            for j in range(g * per, (g + 1) * per):
                copies[g].append((("i", j), ("o", g * per + j % per)))
        elif kind == Kind.BROADCAST and g == coll.root:
            for c in range(chunks):
                loc[(g, c)] = ("i", c)
                copies[g].append((("i", c), ("o", c)))

    def scratch_of(g: int, c: int) -> Location:
        slot = scratch_slot.get((g, c))
        if slot is None:
            slot = scratch_slot[(g, c)] = scratch[g]
            scratch[g] += 1
        return ("s", slot)

    def write_loc(g: int, c: int) -> Location:
        if c < 0:  # a scratch slot of the schedule: a slot of the scratch buffer of its own
            return scratch_of(g, c)
        if kind in (Kind.ALLREDUCE, Kind.ALLGATHER, Kind.BROADCAST):
            return ("o", c)
        if kind == Kind.REDUCESCATTER:
            return ("o", c - g * per) if coll.owner(c) == g else scratch_of(g, c)
        if kind == Kind.REDUCE:
            return ("o", c) if g == coll.root else scratch_of(g, c)
        local = c % chunks  # alltoall
        return ("o", coll.origin(c) * per + local % per) if coll.owner(c) == g else scratch_of(g, c)

    count = len(order)
    src_loc: list[Location] = [("i", 0)] * count
    operand_loc: list[Location | None] = [None] * count
    dst_loc: list[Location] = [("i", 0)] * count
    writer: dict[tuple[int, int], int] = {}
    readers: dict[int, list[int]] = {}  # write -> transfers that read its value (a reduce reads the old value)
    next_write_reduces: dict[int, bool] = {}
    for tid in order:
        t = schedule.transfers[tid]
        source = (t.src, t.chunk) if t.src_scratch is None else (t.src, -1 - t.src_scratch)
        target = (t.dst, t.chunk) if t.dst_scratch is None else (t.dst, -1 - t.dst_scratch)
        if source not in loc:
            raise InputError("", f"transfers.{tid}", f"rank {t.src} sends chunk {t.chunk} it never holds "
                             "(run synth verify)")
        src_loc[tid] = loc[source]
        if source in writer:
            readers.setdefault(writer[source], []).append(tid)
        previous = writer.get(target)
        if t.op == REDUCE:
            if target not in loc:
                raise InputError("", f"transfers.{tid}", f"reduce into rank {t.dst} chunk {t.chunk}, which holds "
                                 "nothing (run synth verify)")
            operand_loc[tid] = loc[target]
            if previous is not None:
                readers.setdefault(previous, []).append(tid)
        if previous is not None:
            next_write_reduces[previous] = t.op == REDUCE
        dst_loc[tid] = write_loc(*target)
        loc[target] = dst_loc[tid]
        writer[target] = tid
    final_writes = set()
    for g in range(n):
        for c, _ in coll.final(g):
            if (g, c) in writer:
                final_writes.add(writer[(g, c)])
    needed = [False] * count
    for tid in range(count):
        needed[tid] = tid in final_writes or next_write_reduces.get(tid, False) or len(readers.get(tid, [])) > 1
    if kind == Kind.ALLGATHER:
        buffers = [(per, chunks, scratch[g]) for g in range(n)]
    elif kind == Kind.REDUCESCATTER:
        buffers = [(chunks, per, scratch[g]) for g in range(n)]
    else:
        buffers = [(chunks, chunks, scratch[g]) for g in range(n)]
    lowering = _Lowering(order, position, level, src_loc, operand_loc, dst_loc, copies, scratch, needed, buffers,
                         max(max(b[0], b[1]) for b in buffers))
    near = NearestTouching(schedule.transfers)
    for t in schedule.transfers:
        for rank in (t.src, t.dst):
            for dep in _local_deps(schedule, t.id, rank, lowering.local_deps, near):
                lowering.dependents.setdefault((dep, rank), set()).add(t.id)
    return lowering


def _local_deps(schedule: Schedule, tid: int, rank: int, cache: dict[tuple[int, int], list[int]],
                near: NearestTouching | None = None) -> list[int]:
    """Deps of ``tid`` that have ``rank`` as an end, non-local ones replaced by their nearest such ancestors."""
    key = (tid, rank)
    if key not in cache:
        cache[key] = (near or NearestTouching(schedule.transfers)).deps(tid, rank)
    return cache[key]


@dataclass
class _Op:
    time: tuple[int, int]  # (2 level [+1 for a split recv], transfer id); copies (-1, -1)
    kind: str  # "send", "recv", "local" (a local op of the schedule) or "cpy" (a buffer copy at the start)
    tid: int = -1
    copy: tuple[Location, Location] | None = None


class _Violation(Exception):
    def __init__(self, limit: str, value: int, allowed: int, where: str) -> None:
        self.limit, self.value, self.allowed, self.where = limit, value, allowed, where
        super().__init__(f"{limit} is {value} on {where}, {value - allowed} over the limit of {allowed}")


def _channels(schedule: Schedule, channels: int, policy: str) -> list[int]:
    return [(t.chunk if policy == "chunk" else t.src + t.dst) % channels for t in schedule.transfers]


def _split_ok(schedule: Schedule, lowering: _Lowering, chan: list[int]) -> bool:
    """True when no connection carries two messages of one dependency level, so sends may run a half
    step ahead of recvs (which lets a ring fuse its recv with the next send) without a FIFO filling up."""
    seen: set[tuple[int, int, int, int]] = set()
    for t in schedule.transfers:
        if t.src == t.dst:
            continue
        key = (t.src, t.dst, chan[t.id], lowering.level[t.id])
        if key in seen:
            return False
        seen.add(key)
    return True


def _ancestors(schedule: Schedule, lowering: _Lowering) -> list[int]:
    """Bitmask of every transfer's transitive dependencies (for schedules of moderate size)."""
    ancestors = [0] * len(schedule.transfers)
    for tid in lowering.order:
        mask = 0
        for dep in schedule.transfers[tid].deps:
            mask |= ancestors[dep] | (1 << dep)
        ancestors[tid] = mask
    return ancestors


def _build(schedule: Schedule, lowering: _Lowering, chan: list[int], split: bool, limits: MscclLimits,
           pair_rest: bool = False, ancestors: list[int] | None = None) -> tuple[list[list[_Tb]], int]:
    """Threadblocks and steps for one channel assignment. Every op has a time: a transfer's send at
    (2 level, id) and its recv at (2 level + 1, id) when ``split``, else both at (2 level, id); each
    threadblock runs its ops in time order, which keeps send and recv orders equal on every connection."""
    transfers = schedule.transfers
    n = schedule.collective.num_ranks
    level = lowering.level

    def send_time(tid: int) -> tuple[int, int]:
        return (2 * level[tid], tid)

    def recv_time(tid: int) -> tuple[int, int]:
        return (2 * level[tid] + (1 if split else 0), tid)

    def time_at(tid: int, rank: int) -> tuple[int, int]:
        return recv_time(tid) if transfers[tid].dst == rank else send_time(tid)
    # pair send peers with recv peers per (gpu, channel), forwarding pairs first
    weight: dict[tuple[int, int, int, int], int] = {}
    send_peers: dict[tuple[int, int], set[int]] = {}
    recv_peers: dict[tuple[int, int], set[int]] = {}
    has_local = [False] * n
    for t in transfers:
        if t.src == t.dst:
            has_local[t.src] = True
            continue
        send_peers.setdefault((t.src, chan[t.id]), set()).add(t.dst)
        recv_peers.setdefault((t.dst, chan[t.id]), set()).add(t.src)
        for dep in t.deps:
            d = transfers[dep]
            if d.dst == t.src and d.src != d.dst and d.chunk == t.chunk and chan[dep] == chan[t.id]:
                key = (t.src, chan[t.id], t.dst, d.src)
                weight[key] = weight.get(key, 0) + 1
    tb_of: dict[tuple[int, int, str, int], int] = {}  # (gpu, channel, "send"/"recv", peer) -> tb index
    tbs: list[list[_Tb]] = [[] for _ in range(n)]
    for g in range(n):
        keys = sorted({ch for (gpu, ch) in send_peers if gpu == g} | {ch for (gpu, ch) in recv_peers if gpu == g})
        for ch in keys:
            sends = set(send_peers.get((g, ch), ()))
            recvs = set(recv_peers.get((g, ch), ()))
            pairs: list[tuple[int, int]] = []
            ranked = sorted(((weight.get((g, ch, p, q), 0), p, q) for p in sends for q in recvs),
                            key=lambda item: (-item[0], item[1], item[2]))
            for w, p, q in ranked:
                if w and p in sends and q in recvs:
                    pairs.append((p, q))
                    sends.discard(p)
                    recvs.discard(q)
            rest_s, rest_r = sorted(sends), sorted(recvs)
            if pair_rest:  # fewer threadblocks, but unrelated sends and recvs then wait for each other
                for k in range(max(len(rest_s), len(rest_r))):
                    pairs.append((rest_s[k] if k < len(rest_s) else -1, rest_r[k] if k < len(rest_r) else -1))
            else:
                pairs.extend((p, -1) for p in rest_s)
                pairs.extend((-1, q) for q in rest_r)
            if len(pairs) > limits.max_tbs_per_channel:
                raise _Violation("threadblocks per channel", len(pairs), limits.max_tbs_per_channel,
                                 f"gpu {g} channel {ch}")
            for p, q in sorted(pairs, key=lambda pq: (pq[0] if pq[0] >= 0 else n + pq[1], pq[1])):
                tbs[g].append(_Tb(p, q, ch))
                if p >= 0:
                    tb_of[(g, ch, "send", p)] = len(tbs[g]) - 1
                if q >= 0:
                    tb_of[(g, ch, "recv", q)] = len(tbs[g]) - 1
        if (lowering.copies[g] or has_local[g]) and not tbs[g]:
            tbs[g].append(_Tb(-1, -1, 0))
        if len(tbs[g]) > limits.sms:
            raise _Violation("threadblocks per gpu", len(tbs[g]), limits.sms, f"gpu {g} (one threadblock per SM)")

    # ops per threadblock in the global order
    ops: list[list[list[_Op]]] = [[[] for _ in gpu_tbs] for gpu_tbs in tbs]
    for g in range(n):
        for copy in lowering.copies[g]:
            ops[g][0].append(_Op((-1, -1), "cpy", copy=copy))
    cache, dependents = lowering.local_deps, lowering.dependents
    local_tb: dict[int, int] = {}
    for tid in lowering.order:
        t = transfers[tid]
        if t.src == t.dst:
            # a local op runs on the threadblock that wrote what it reads (so reductions of data received
            # from different peers run in parallel), else on that of its latest dependency, else on tb 0
            near = _local_deps(schedule, tid, t.src, cache)
            source = [d for d in t.deps if transfers[d].dst == t.src and transfers[d].dst_scratch == t.src_scratch
                      and (t.src_scratch is not None or transfers[d].chunk == t.chunk)]
            latest = max(source or near, key=lambda d: time_at(d, t.src), default=None)
            if latest is None:
                b = 0
            else:
                d = transfers[latest]
                b = local_tb[latest] if d.src == d.dst else \
                    tb_of[(t.src, chan[latest], "recv", d.src)] if d.dst == t.src else \
                    tb_of[(t.src, chan[latest], "send", d.dst)]
            local_tb[tid] = b
            ops[t.src][b].append(_Op(recv_time(tid), "local", tid))
            continue
        ops[t.src][tb_of[(t.src, chan[tid], "send", t.dst)]].append(_Op(send_time(tid), "send", tid))
        ops[t.dst][tb_of[(t.dst, chan[tid], "recv", t.src)]].append(_Op(recv_time(tid), "recv", tid))
    for gpu_ops in ops:
        for tb_ops in gpu_ops:
            tb_ops.sort(key=lambda op: op.time)

    # fuse a recv with the next op on its threadblock when that sends the same chunk onward
    units: list[list[list[tuple[_Op, ...]]]] = []
    for g in range(n):
        gpu_units = []
        for tb_ops in ops[g]:
            merged: list[tuple[_Op, ...]] = []
            k = 0
            while k < len(tb_ops):
                op = tb_ops[k]
                if op.kind == "recv" and k + 1 < len(tb_ops) and tb_ops[k + 1].kind == "send":
                    nxt = tb_ops[k + 1]
                    t, u = transfers[op.tid], transfers[nxt.tid]
                    others = [d for d in _local_deps(schedule, u.id, g, cache) if d != t.id]
                    # fusing makes whatever waits for the recv wait for the send too: only when nothing else does
                    if (u.chunk == t.chunk and t.id in u.deps and lowering.src_loc[u.id] == lowering.dst_loc[t.id]
                            and all(time_at(d, g) < op.time for d in others)
                            and dependents.get((t.id, g), set()) <= {u.id}):
                        merged.append((op, nxt))
                        k += 2
                        continue
                merged.append((op,))
                k += 1
            gpu_units.append(merged)
        units.append(gpu_units)

    # false waits: a step starts only after the previous steps of its threadblock (back to its last
    # send) complete; count the waits for transfers that are not among the sender's dependencies
    false_waits = 0
    if ancestors is not None:
        for gpu_units in units:
            for tb_units in gpu_units:
                before: list[int] = []
                for unit in tb_units:
                    sends = [op.tid for op in unit if op.kind == "send"]
                    if sends:
                        mask = ancestors[sends[0]]
                        false_waits += sum(1 for a in before if not mask >> a & 1)
                        before = sends
                    else:
                        before = before + [op.tid for op in unit if op.kind in ("recv", "local")]

    # emit steps gpu by gpu in the global order, with dependencies and nops. A threadblock runs its steps
    # in order, so a wait that an earlier step of it (or a step that one awaited, transitively) already
    # made is left out: each step's clock holds, per threadblock, the last step known complete before it
    for g in range(n):
        placed: dict[tuple[str, int], tuple[int, int]] = {}  # ("send"/"recv", tid) -> (tb, step)
        clock: list[dict[int, int]] = [{} for _ in tbs[g]]
        step_clock: dict[tuple[int, int], dict[int, int]] = {}
        queue = sorted(((unit[0].time, b, u) for b, tb_units in enumerate(units[g]) for u, unit in enumerate(tb_units)),
                       key=lambda item: (item[0], item[1], item[2]))
        for _, b, u in queue:
            unit = units[g][b][u]
            tb = tbs[g][b]
            needs: dict[int, int] = {}
            inside = {op.tid for op in unit}
            for op in unit:
                if op.kind == "cpy":
                    continue
                for dep in _local_deps(schedule, op.tid, g, cache):
                    if dep in inside:
                        continue
                    d = transfers[dep]
                    target = placed.get(("recv", dep) if d.dst == g else ("send", dep))
                    if target is None:
                        raise InputError("", f"transfers.{op.tid}", f"depends on transfer {dep}, which comes later "
                                         "in the order (run synth verify)")
                    if target[0] != b and clock[b].get(target[0], -1) < target[1]:
                        needs[target[0]] = max(needs.get(target[0], -1), target[1])
            awaited = [(x, k) for x, k in sorted(needs.items())
                       if not any(step_clock[(y, j)].get(x, -1) >= k for y, j in needs.items() if y != x)]
            if awaited:
                merged = dict(clock[b])
                for x, k in awaited:
                    merged[x] = max(merged.get(x, -1), k)
                    for y, j in step_clock[(x, k)].items():
                        if y != b and merged.get(y, -1) < j:
                            merged[y] = j
                clock[b] = merged
            for dep_tb, dep_step in awaited[:-1]:
                tb.steps.append(_Step("nop", cnt=0, depid=dep_tb, deps=dep_step))
                tbs[g][dep_tb].steps[dep_step].hasdep = 1
            steps = _make_steps(unit, schedule, lowering)
            if awaited:
                steps[0].depid, steps[0].deps = awaited[-1]
                tbs[g][steps[0].depid].steps[steps[0].deps].hasdep = 1
            tb.steps.extend(steps)
            step_clock[(b, len(tb.steps) - 1)] = clock[b]
            for op in unit:
                if op.kind != "cpy":
                    placed[("send" if op.kind == "send" else "recv", op.tid)] = (b, len(tb.steps) - 1)
    longest = max(((len(tb.steps), g, b) for g, gpu_tbs in enumerate(tbs) for b, tb in enumerate(gpu_tbs)),
                  default=(0, 0, 0))
    if longest[0] >= limits.max_steps:
        raise _Violation("steps per threadblock", longest[0], limits.max_steps - 1,
                         f"gpu {longest[1]} threadblock {longest[2]}")
    return tbs, false_waits


def _make_steps(unit: tuple[_Op, ...], schedule: Schedule, lowering: _Lowering) -> list[_Step]:
    first = unit[0]
    if first.kind == "cpy":
        (sb, so), (db, do) = first.copy  # type: ignore[misc]
        return [_Step("cpy", sb, so, db, do)]
    t = schedule.transfers[first.tid]
    (sb, so), (db, do) = lowering.src_loc[t.id], lowering.dst_loc[t.id]
    operand = lowering.operand_loc[t.id]
    if first.kind == "local":
        if t.op == COPY:
            return [_Step("cpy", sb, so, db, do)]
        assert operand is not None
        # re: dst = dst + src in place; a partial value kept elsewhere is first copied where it belongs
        moved = [] if operand == (db, do) else [_Step("cpy", operand[0], operand[1], db, do)]
        return [*moved, _Step("re", sb, so, db, do)]
    if first.kind == "send":
        return [_Step("s", sb, so, db, do)]
    if len(unit) == 1:
        if t.op == REDUCE:
            return [_Step("rrc", operand[0], operand[1], db, do)]  # type: ignore[index]
        return [_Step("r", sb, so, db, do)]
    if t.op == COPY:
        return [_Step("rcs", db, do, db, do)]
    kind = "rrcs" if lowering.needed[t.id] else "rrs"
    return [_Step(kind, operand[0], operand[1], db, do)]  # type: ignore[index]


def lower_msccl(schedule: Schedule, proto: str | None = None, limits: MscclLimits | None = None,
                max_channels: int | None = None, min_bytes: int = 0, max_bytes: int = DEFAULT_MAX_BYTES,
                name: str | None = None) -> MscclProgram:
    """Lower a verified schedule to an :class:`MscclProgram` that meets every runtime limit.

    ``proto`` is the protocol the XML names (the runtime runs the whole program with it); default the
    protocol the schedule pins in ``params["plan"]`` when it pins an MSCCL one, else ``Simple``.

    Raises :class:`~synth.errors.LimitError` naming the limit, the excess and the fix when no channel
    count up to ``max_channels`` fits.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> program = lower_msccl(synthesize(load_topology("switch:n=4"), "allreduce", "ring"))
    >>> program.stats()["threadblocks"], sorted({s.type for g in program.tbs for tb in g for s in tb.steps})
    (16, ['r', 'rcs', 'rrcs', 'rrs', 's'])
    """
    limits = limits or MscclLimits()
    if max_channels is not None:
        limits = MscclLimits(max_channels, limits.max_tbs_per_channel, limits.sms, limits.max_steps, limits.max_cnt)
    limits.check()
    if proto is None:
        pinned_protocol = (schedule.params.get("plan") or {}).get("protocol") \
            if isinstance(schedule.params.get("plan"), dict) else None
        proto = pinned_protocol if pinned_protocol in PROTOCOLS else "Simple"
    if proto not in PROTOCOLS:
        raise InputError("", "--proto", f"expected one of {', '.join(PROTOCOLS)}, got {proto!r}")
    if min_bytes < 0 or max_bytes <= min_bytes:
        raise InputError("", "--max-bytes", f"expected 0 <= minBytes < maxBytes, got {min_bytes} and {max_bytes}")
    if not schedule.transfers:
        raise InputError("", "transfers", "the schedule has no transfers")
    lowering = _lower_locations(schedule)
    # the first fitting layout that makes no step wait for a transfer it does not depend on; failing
    # that, the fitting layout with the fewest such waits (fewest channels first)
    ancestors = _ancestors(schedule, lowering) if len(schedule.transfers) <= SEARCH_TRANSFERS else None
    distinct = len({t.chunk for t in schedule.transfers})
    top = min(limits.max_channels, max(distinct, 2 * schedule.collective.num_ranks))
    counts = [k for k in sorted({1, 2, 4, 8, 16, 32, distinct, limits.max_channels}) if k <= top]
    if ancestors is None:
        counts = list(range(1, limits.max_channels + 1))
    first: _Violation | None = None
    best: tuple[int, int, list[list[_Tb]]] | None = None
    attempt = 0
    for channels in counts:
        fitted = False
        for policy, pair_rest in (("chunk", False), ("pair", False), ("chunk", True), ("pair", True)):
            if (channels == 1 and policy == "pair") or (pair_rest and fitted):
                continue  # the same layout as "chunk"; pairing unrelated peers only when nothing else fits
            chan = _channels(schedule, channels, policy)
            try:
                tbs, waits = _build(schedule, lowering, chan, _split_ok(schedule, lowering, chan), limits, pair_rest,
                                    ancestors)
            except _Violation as violation:  # report the attempt that came closest
                if first is None or violation.value / violation.allowed < first.value / first.allowed:
                    first = violation
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
        raise LimitError(_limit_message(schedule, first, limits))
    tbs = best[2]
    used = 1 + max(tb.chan for gpu in tbs for tb in gpu)
    label = name or f"synth_{schedule.algorithm}_{schedule.kind.value}"
    return MscclProgram(label, COLL_NAME[schedule.kind], proto, schedule.collective.num_ranks,
                        lowering.nchunksperloop, used, lowering.buffers, tbs, min_bytes, max_bytes)


def _limit_message(schedule: Schedule, violation: _Violation, limits: MscclLimits) -> str:
    fixes = []
    if violation.limit == "steps per threadblock":
        fixes.append(f"use fewer chunks (the schedule has {schedule.chunks}; e.g. synth generate --chunks "
                     f"{max(1, schedule.chunks // 2)})")
        if limits.max_channels < 32:
            fixes.append("allow more channels (--max-channels, up to 32)")
        fixes.append(f"raise --max-steps if your MSCCL build allows more than {limits.max_steps - 1} steps")
    else:
        fixes.append("use fewer channels or a schedule with fewer peers per gpu")
        if violation.limit == "threadblocks per gpu":
            fixes.append(f"pass --sms for a gpu with more than {limits.sms} SMs")
    if schedule.algorithm.startswith("forest") or "tree" in schedule.algorithm:
        fixes.insert(0, "pack fewer trees (the forest algorithm's --option max_trees_per_root=K with a smaller K)")
    return (f"the schedule does not fit the MSCCL runtime: {violation} (tried 1 to {limits.max_channels} channels). "
            f"Fix: " + "; or ".join(fixes))


@dataclass
class RuntimeRouting:
    """The paths the MSCCL runtime takes for an exported program, against the schedule's own.

    MSCCL XML names only the two ends of each message; the runtime picks the path (NCCL's transport
    between the two gpus). synth models that choice as :func:`import_msccl` does (a shortest path through
    switches and forwarding gpus only, balanced among equal ones, :class:`synth.export.RouteBalancer`), so
    the schedule the runtime runs is the XML read back. A schedule whose paths differ from those (a
    ``forest`` schedule that spreads trees over NICs) can lose bandwidth: its congestion time grows.

    Attributes
    ----------
    planned : Fraction
        Congestion time per byte (s/B) of the schedule as synthesized, with its own paths.
    runtime : Fraction
        Congestion time per byte of what the runtime runs.
    rerouted : int
        Transfers whose path the runtime chooses differently (counted as a multiset of (src, dst, path)).
    transfers : int
    schedule : Schedule
        What the runtime runs: the XML read back on the topology.
    """

    planned: Fraction
    runtime: Fraction | None
    rerouted: int
    transfers: int
    schedule: Schedule | None
    #: why the XML could not be read back as the runtime routes it (e.g. a pair of ranks with no path through
    #: switches and forwarding gpus), else ""
    problem: str = ""

    @property
    def loss(self) -> Fraction:
        """Relative growth of the congestion time, runtime / planned - 1 (0 when nothing is lost)."""
        if self.runtime is None or not self.planned:
            return Fraction(0)
        return self.runtime / self.planned - 1

    def to_dict(self, size: int) -> dict[str, Any]:
        """JSON-ready fields for ``export msccl --json`` at a message of ``size`` bytes."""
        return {"size": size, "planned_congestion_time_s": float(self.planned * size),
                "runtime_congestion_time_s": None if self.runtime is None else float(self.runtime * size),
                "loss": float(self.loss), "rerouted_transfers": self.rerouted, "transfers": self.transfers,
                "problem": self.problem or None}


def runtime_routing(schedule: Schedule, topology: Topology, program: MscclProgram) -> RuntimeRouting:
    """Read ``program``'s XML back as the runtime would route it and compare congestion with ``schedule``.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("switch:n=4")
    >>> schedule = synthesize(topo, "allreduce", "ring")
    >>> routing = runtime_routing(schedule, topo, lower_msccl(schedule))
    >>> routing.rerouted, routing.loss
    (0, Fraction(0, 1))
    """
    from collections import Counter

    from synth.evaluate import congestion

    planned = congestion(schedule, topology).seconds_per_byte
    try:
        back = import_msccl("exported XML", topology, topology_name=schedule.topology, text=program.xml())
    except InputError as error:
        return RuntimeRouting(planned, None, 0, len(schedule.transfers), None, error.problem)
    before = Counter((t.src, t.dst, t.path) for t in schedule.transfers)
    after = Counter((t.src, t.dst, t.path) for t in back.transfers)
    rerouted = sum((after - before).values())
    return RuntimeRouting(planned, congestion(back, topology).seconds_per_byte, rerouted, len(schedule.transfers), back)


def export_msccl(schedule: Schedule, path: str | Path, topology: Topology | None = None,
                 **options: Any) -> MscclProgram:
    """Lower ``schedule`` (see :func:`lower_msccl`) and write the XML atomically to ``path``.

    With ``topology``, also works out the paths the runtime takes (:func:`runtime_routing`) and stores
    them in the program's ``routing``.
    """
    from synth.fileio import atomic_write_text

    program = lower_msccl(schedule, **options)
    if topology is not None:
        program.routing = runtime_routing(schedule, topology, program)
    atomic_write_text(path, program.xml())
    return program


# ---------------------------------------------------------------------------------------- import
@dataclass
class _XmlStep:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int


@dataclass
class _XmlTb:
    id: int
    send: int
    recv: int
    chan: int
    steps: list[_XmlStep]


def parse_xml(text: str, source: str = "") -> tuple[dict[str, str], list[dict[str, int]], list[list[_XmlTb]]]:
    """Parse MSCCL XML safely into (algo attributes, per-gpu buffer counts, per-gpu threadblocks)."""
    import defusedxml
    from defusedxml.ElementTree import ParseError, fromstring

    try:
        root = fromstring(text, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except defusedxml.DefusedXmlException as error:
        raise InputError(source, "", f"refused: the XML declares a DTD or entities ({type(error).__name__}); "
                         "MSCCL files need neither") from None
    except ParseError as error:
        raise InputError(source, "", f"invalid XML: {error}") from None
    if root.tag != "algo":
        raise InputError(source, "", f"expected an <algo> root element, got <{root.tag}>")
    algo = dict(root.attrib)

    def number(element: Any, name: str, where: str, default: int | None = None) -> int:
        value = element.get(name)
        if value is None:
            if default is not None:
                return default
            raise InputError(source, f"{where}.{name}", "missing attribute")
        if len(value) > 20:  # checked before converting: 2^63 has 19 digits
            raise InputError(source, f"{where}.{name}", f"expected an integer, got a text of {len(value)} characters")
        try:
            return int(value)
        except ValueError:
            raise InputError(source, f"{where}.{name}", f"expected an integer, got {value!r}") from None

    ngpus = number(root, "ngpus", "algo")
    if not 2 <= ngpus <= 100_000:
        raise InputError(source, "algo.ngpus", f"expected at least 2 gpus, got {ngpus}")
    buffers: list[dict[str, int] | None] = [None] * ngpus
    tbs: list[list[_XmlTb]] = [[] for _ in range(ngpus)]
    for gpu_element in root:
        if gpu_element.tag != "gpu":
            raise InputError(source, "algo", f"unexpected element <{gpu_element.tag}> (expected <gpu>)")
        gpu = number(gpu_element, "id", "gpu")
        where = f"gpu {gpu}"
        if not 0 <= gpu < ngpus or buffers[gpu] is not None:
            raise InputError(source, f"{where}.id", f"expected a new gpu id in 0..{ngpus - 1}")
        buffers[gpu] = {b: number(gpu_element, f"{b}_chunks", where, 0) for b in "ios"}
        if any(v < 0 for v in buffers[gpu].values()):  # type: ignore[union-attr]
            raise InputError(source, where, "chunk counts must be >= 0")
        seen_tbs: set[int] = set()
        for tb_element in gpu_element:
            if tb_element.tag != "tb":
                raise InputError(source, where, f"unexpected element <{tb_element.tag}> (expected <tb>)")
            tb_id = number(tb_element, "id", f"{where} tb")
            tb_where = f"{where} tb {tb_id}"
            if tb_id in seen_tbs:
                raise InputError(source, f"{tb_where}.id", "duplicate threadblock id")
            seen_tbs.add(tb_id)
            send, recv = number(tb_element, "send", tb_where, -1), number(tb_element, "recv", tb_where, -1)
            for label, peer in (("send", send), ("recv", recv)):
                if peer != -1 and (not 0 <= peer < ngpus or peer == gpu):
                    raise InputError(source, f"{tb_where}.{label}", f"expected -1 or another gpu in 0..{ngpus - 1}, "
                                     f"got {peer}")
            steps = []
            for step_element in tb_element:
                if step_element.tag != "step":
                    raise InputError(source, tb_where, f"unexpected element <{step_element.tag}> (expected <step>)")
                s = number(step_element, "s", f"{tb_where} step")
                step_where = f"{tb_where} step {s}"
                steps.append(_XmlStep(
                    s, step_element.get("type", ""), step_element.get("srcbuf", "i"),
                    number(step_element, "srcoff", step_where, -1), step_element.get("dstbuf", "i"),
                    number(step_element, "dstoff", step_where, -1), number(step_element, "cnt", step_where, 1),
                    number(step_element, "depid", step_where, -1), number(step_element, "deps", step_where, -1)))
            steps.sort(key=lambda st: st.s)
            if [st.s for st in steps] != list(range(len(steps))):
                raise InputError(source, tb_where, "step numbers must be 0, 1, 2, ... without gaps or repeats")
            tbs[gpu].append(_XmlTb(tb_id, send, recv, number(tb_element, "chan", tb_where, 0), steps))
        tbs[gpu].sort(key=lambda tb: tb.id)
    missing = [g for g, b in enumerate(buffers) if b is None]
    if missing:
        raise InputError(source, "algo", f"no <gpu> element for gpu(s) {missing[:8]}")
    return algo, buffers, tbs  # type: ignore[return-value]


RECEIVING = {"r": COPY, "rcs": COPY, "rrc": REDUCE, "rrs": REDUCE, "rrcs": REDUCE}
FORWARDING = {"rcs", "rrs", "rrcs"}
#: A buffer of one rank in the schedule IR: ``("d", chunk)`` is the data cell of a chunk,
#: ``("s", slot)`` a scratch slot.
Cell = tuple[str, int]


@dataclass
class _Record:
    """A transfer or local op of the imported schedule, before renumbering."""

    src: int
    dst: int
    chunk: int
    op: str
    deps: set[int]
    src_cell: Cell | None = None
    dst_cell: Cell | None = None
    #: (log entry, emission order) where it got its final form; orders the renumbering
    position: tuple[int, int] = (-1, -1)
    #: a copy between two buffer locations that share one cell: no op in the schedule
    elided: bool = False


@dataclass
class _Entry:
    """One executed step for one chunk of its ``cnt``, in execution order.

    ``send``: ``src`` is read for transfer ``record``. ``recv``: transfer ``record`` arrives and is
    written to ``dst`` (None for ``rrs``), reduced with ``operand`` when it reduces, and sent on as
    transfer ``forward`` by ``rcs``/``rrs``/``rrcs``. ``cpy``: ``dst`` takes ``src``. ``re``: ``dst``
    becomes ``dst`` + ``src``. Local steps own the placeholder ``record``.
    """

    kind: str
    gpu: int
    record: int
    chunk: int
    src: Location | None = None
    dst: Location | None = None
    operand: Location | None = None
    forward: int | None = None


def _read_text(path: str | Path, source: str) -> str:
    file = Path(path)
    try:
        if file.stat().st_size > MAX_XML_BYTES:
            raise InputError(source, "", f"file is larger than {MAX_XML_BYTES} bytes")
        return file.read_bytes().decode("utf-8")
    except OSError as error:
        raise InputError(source, "", f"cannot read file: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(source, "", f"not valid UTF-8 at byte {error.start}") from None


def import_msccl(path: str | Path, topology: Topology, topology_name: str | None = None,
                 text: str | None = None) -> Schedule:
    """Read MSCCL XML into a verified schedule on ``topology`` (see the module docstring).

    Raises :class:`InputError` naming the element and attribute for malformed files, deadlocks, data
    the program cannot hold, pairs of ranks with no path through switches and forwarding gpus, custom
    collectives, or a result that is not the declared collective.

    Examples
    --------
    A two-gpu allreduce that gathers the peer's data in scratch and reduces it locally (``re``):

    >>> from synth.library import load_topology
    >>> tb = '<tb id="0" send="{p}" recv="{p}" chan="0">'
    >>> steps = ('<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1"/>'
    ...          '<step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1"/>'
    ...          '<step s="2" type="re" srcbuf="s" srcoff="0" dstbuf="i" dstoff="0" cnt="1"/></tb>')
    >>> gpus = "".join(f'<gpu id="{g}" i_chunks="1" o_chunks="0" s_chunks="1">' + tb.format(p=1 - g) + steps
    ...                + "</gpu>" for g in (0, 1))
    >>> xml = f'<algo name="pair" ngpus="2" coll="allreduce" nchunksperloop="1" inplace="1">{gpus}</algo>'
    >>> s = import_msccl("pair.xml", load_topology("switch:n=2"), text=xml)
    >>> [(t.src, t.dst, t.op, t.src_scratch, t.dst_scratch) for t in s.transfers]
    [(0, 1, 'copy', None, 0), (1, 0, 'copy', None, 0), (1, 1, 'reduce', 0, None), (0, 0, 'reduce', 0, None)]
    """
    source = str(path)
    if text is None:
        text = _read_text(path, source)
    algo, buffers, tbs = parse_xml(text, source)
    n = len(buffers)
    if n != topology.num_ranks:
        raise InputError(source, "algo.ngpus", f"{n} gpus but topology {topology.name!r} has {topology.num_ranks}")
    if algo.get("coll", "") == "custom":
        raise InputError(source, "algo.coll", "a custom collective: the XML does not say what it computes (its pre- "
                         "and postconditions), so synth cannot verify it; it imports allgather, reducescatter, "
                         "allreduce, alltoall, broadcast and reduce")
    kind = parse_kind(algo.get("coll", ""), source, "algo.coll")
    first = buffers[0]
    if kind == Kind.ALLGATHER:
        chunks = max(b["o"] or b["i"] * n for b in buffers)
    elif kind == Kind.REDUCESCATTER:
        chunks = max(b["i"] or b["o"] * n for b in buffers)
    else:
        chunks = max(max(b["i"], b["o"]) for b in buffers)
    if chunks <= 0:
        raise InputError(source, "gpu 0", f"no input or output chunks declared (i_chunks={first['i']}, "
                         f"o_chunks={first['o']})")
    # the declared size, before anything is expanded: a 1 KB file declaring 10^9 chunks is refused here
    from synth import limits

    limits.check_transfers(limits.min_transfers(kind, n, chunks), f"the MSCCL program in {source} ({chunks:,} "
                           f"chunks on {n} gpus)", hint="")
    moved = sum(max(1, st.cnt) for gpu_tbs in tbs for tb in gpu_tbs for st in tb.steps)
    if n * chunks > 2 * moved + 1_000_000:
        raise InputError(source, "algo", f"declares {chunks:,} chunks on {n} gpus, but its {moved:,} step chunk "
                         "counts could not move a fraction of them")
    per = chunks // n if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL) else 0
    if per and chunks % n:
        raise InputError(source, "gpu", f"{kind} needs a chunk count that is a multiple of {n}, got {chunks}")

    senders = {g for g in range(n) if any(st.type == "s" or st.type in FORWARDING for tb in tbs[g] for st in tb.steps)}
    receivers = {g for g in range(n) if any(st.type in RECEIVING for tb in tbs[g] for st in tb.steps)}
    root: int | None = None
    if kind == Kind.BROADCAST:
        roots = sorted(senders - receivers)
        if len(roots) != 1:
            raise InputError(source, "", f"cannot tell the broadcast root: gpus that only send: {roots}")
        root = roots[0]
    elif kind == Kind.REDUCE:
        roots = sorted(receivers - senders)
        if len(roots) != 1:
            raise InputError(source, "", f"cannot tell the reduce root: gpus that only receive: {roots}")
        root = roots[0]
    collective = Collective(kind, n, chunks, root)

    def resolve(g: int, buf: str, off: int, where: str) -> Location:
        counts = buffers[g]
        if buf not in ("i", "o", "s"):
            raise InputError(source, where, f"unknown buffer {buf!r} (expected i, o or s)")
        if buf == "o" and counts["o"] == 0 and counts["i"]:
            buf, off = "i", off + (g * per if kind == Kind.REDUCESCATTER else 0)
        elif buf == "i" and counts["i"] == 0 and counts["o"]:
            buf, off = "o", off + (g * per if kind == Kind.ALLGATHER else 0)
        if not 0 <= off < counts[buf]:
            raise InputError(source, where, f"offset {off} is outside buffer {buf} of {counts[buf]} chunks")
        return (buf, off)

    # where each chunk starts (the input buffer) and where it must end (the output buffer)
    inputs: list[dict[Location, int]] = [{} for _ in range(n)]
    homes: list[dict[Location, int]] = [{} for _ in range(n)]
    for g in range(n):
        for c, _ in collective.initial(g):
            offset = c - g * per if kind == Kind.ALLGATHER else c - g * chunks if kind == Kind.ALLTOALL else c
            inputs[g][resolve(g, "i", offset, f"gpu {g} (input of chunk {c})")] = c
        for c, _ in collective.final(g):
            if kind == Kind.REDUCESCATTER:
                offset = c - g * per
            elif kind == Kind.ALLTOALL:
                offset = collective.origin(c) * per + c % chunks % per
            else:
                offset = c
            homes[g][resolve(g, "o", offset, f"gpu {g} (output of chunk {c})")] = c

    home_of = [{c: location for location, c in gpu_homes.items()} for gpu_homes in homes]
    records, log, content = _execute(source, tbs, resolve, inputs)
    cells = _Cells(records, log, homes, inputs)
    cells.run()
    for g in range(n):
        for c, _ in collective.final(g):
            location = home_of[g][c]
            if cells.cell.get((g, location)) != ("d", c):
                held = content.get((g, location))
                what = "is never written" if held is None else f"ends holding chunk {held}"
                raise InputError(source, f"gpu {g}", f"buffer {location[0]}[{location[1]}] must end holding chunk {c} "
                                 f"(the {kind}'s output) but it {what}")

    order = _renumber(records, log, source)
    number = {rid: k for k, rid in enumerate(order)}
    balancer = RouteBalancer(topology, source)
    transfers = []
    for k, rid in enumerate(order):
        r = records[rid]
        assert r.src_cell is not None and r.dst_cell is not None
        path = (topology.gpus[r.src],) if r.src == r.dst else balancer.route(r.src, r.dst)
        transfers.append(Transfer(k, r.src, r.dst, r.chunk, r.op, path,  # type: ignore[arg-type]
                                  tuple(sorted(number[d] for d in r.deps)),
                                  None if r.src_cell[0] == "d" else r.src_cell[1],
                                  None if r.dst_cell[0] == "d" else r.dst_cell[1]))
    params = {"imported_from": "msccl", "name": algo.get("name", ""), "proto": algo.get("proto", ""),
              "nchannels": algo.get("nchannels", "")}
    if params["proto"] in PROTOCOLS:  # the runtime runs the program with the protocol the XML names
        params["plan"] = {"protocol": params["proto"]}
    schedule = Schedule(collective, topology_name or topology.name, topology.gpus, "msccl-import", params,
                        tuple(transfers))
    from synth.verify import verify

    try:
        verify(schedule, topology)
    except VerificationError as error:
        raise InputError(source, "", f"the program is not a correct {kind} in synth's model: {error}") from None
    return schedule


class _Races:
    """Happens-before between the executed steps of an MSCCL program, and the race check on buffer positions.

    A step happens after the previous step of its threadblock, after its ``depid``/``deps`` step and,
    for a receive, after the sends whose chunks it receives. Two steps that touch one buffer position of
    a gpu, at least one of them writing, must be ordered so; otherwise the runtime's result depends on
    timing and the import is refused. Each threadblock's steps form a chain, so "a before b" searches
    back from ``b`` over the edges that enter other chains, pruned by execution order.
    """

    def __init__(self, tbs: list[list[_XmlTb]], source: str) -> None:
        self.source = source
        self.base: list[int] = []
        total = 0
        for gpu_tbs in tbs:
            self.base.append(total)
            total += len(gpu_tbs)
        self.order: dict[tuple[int, int], int] = {}
        #: per threadblock: positions where an edge enters, and the edges' sources, in step order
        self.into: list[list[int]] = [[] for _ in range(total)]
        self.sources: list[list[tuple[int, int]]] = [[] for _ in range(total)]
        self.sent: dict[int, tuple[int, int]] = {}
        self.current: tuple[int, int] = (0, 0)
        self.where: str = ""
        self.access: dict[tuple[int, Location], tuple[tuple[tuple[int, int], str] | None,
                                                       list[tuple[tuple[int, int], str]]]] = {}

    def start(self, g: int, k_tb: int, s: int, where: str) -> None:
        self.current = (self.base[g] + k_tb, s)
        self.where = where
        self.order[self.current] = len(self.order)

    def edge(self, a: tuple[int, int]) -> None:
        """``a`` happens before the current step."""
        tb, s = self.current
        if a[0] != tb:
            self.into[tb].append(s)
            self.sources[tb].append(a)

    def step_of(self, g: int, k_tb: int, s: int) -> tuple[int, int]:
        return (self.base[g] + k_tb, s)

    def before(self, a: tuple[int, int], b: tuple[int, int]) -> bool:
        if a[0] == b[0]:
            return a[1] < b[1]
        limit = self.order[a]
        explored: dict[int, int] = {}
        stack = [b]
        while stack:
            tb, s = stack.pop()
            low = explored.get(tb, -1)
            if low >= s:
                continue
            explored[tb] = s
            into, sources = self.into[tb], self.sources[tb]
            for k in range(bisect_right(into, low), bisect_right(into, s)):
                source = sources[k]
                if source[0] == a[0]:
                    if source[1] >= a[1]:
                        return True
                elif self.order[source] > limit:
                    stack.append(source)
        return False

    def _race(self, other: tuple[tuple[int, int], str], location: Location, what: str) -> None:
        raise InputError(self.source, self.where, f"{what} buffer {location[0]}[{location[1]}] and {other[1]} also "
                         "touches it, with nothing ordering the two (a race: add a depid/deps or a nop)")

    def read(self, g: int, location: Location) -> None:
        writer, readers = self.access.get((g, location), (None, []))
        if writer is not None and writer[0] != self.current and not self.before(writer[0], self.current):
            self._race(writer, location, "reads")
        readers.append((self.current, self.where))
        self.access[(g, location)] = (writer, readers)

    def write(self, g: int, location: Location) -> None:
        writer, readers = self.access.get((g, location), (None, []))
        for other in ([writer] if writer is not None else []) + readers:
            if other[0] != self.current and not self.before(other[0], self.current):
                self._race(other, location, "writes")
        self.access[(g, location)] = ((self.current, self.where), [])


def _execute(source: str, tbs: list[list[_XmlTb]], resolve: Callable[[int, str, int, str], Location],
             inputs: list[dict[Location, int]]) -> tuple[list[_Record], list[_Entry], dict[tuple[int, Location], int]]:
    """Run the program symbolically: threadblocks in step order, ``depid``/``deps`` waits, FIFO
    connections per (sender, receiver, channel). Returns the records (one per chunk sent and per local
    step), the log of executed steps, and which chunk each buffer location holds at the end."""
    n = len(tbs)
    content: dict[tuple[int, Location], int] = {(g, loc): c for g in range(n) for loc, c in inputs[g].items()}
    records: list[_Record] = []
    log: list[_Entry] = []
    queues: dict[tuple[int, int, int], deque[int]] = {}
    # (gpu, tb index, step) -> records whose completion implies the step's (a step starts only after the
    # previous step of its threadblock and its depid step complete; a send's transfer carries that)
    completed: dict[tuple[int, int, int], set[int]] = {}
    position = [[0] * len(gpu_tbs) for gpu_tbs in tbs]
    tb_index = [{tb.id: k for k, tb in enumerate(gpu_tbs)} for gpu_tbs in tbs]
    races = _Races(tbs, source)

    def send(g: int, tb: _XmlTb, chunk: int, where: str, before: set[int]) -> int:
        if tb.send < 0:
            raise InputError(source, where, "sends, but its threadblock has send=\"-1\"")
        tid = len(records)
        records.append(_Record(g, tb.send, chunk, COPY, set(before)))
        races.sent[tid] = races.current
        queues.setdefault((g, tb.send, tb.chan), deque()).append(tid)
        return tid

    def holding(g: int, step: _XmlStep, k: int, where: str, verb: str) -> tuple[Location, int]:
        location = resolve(g, step.srcbuf, step.srcoff + k, f"{where}.srcoff")
        chunk = content.get((g, location))
        if chunk is None:
            raise InputError(source, where, f"{verb} buffer {location[0]}[{location[1]}], which holds no data yet")
        races.read(g, location)
        return location, chunk

    def execute(g: int, k_tb: int, tb: _XmlTb, step: _XmlStep) -> bool:
        """Run one step if it can run now; record what its completion implies."""
        where = f"gpu {g} tb {tb.id} step {step.s}"
        before = set(completed[(g, k_tb, step.s - 1)]) if step.s else set()
        if step.depid != -1:
            target = tb_index[g].get(step.depid)
            if target is None:
                raise InputError(source, f"{where}.depid", f"no threadblock {step.depid} on gpu {g}")
            if not 0 <= step.deps < len(tbs[g][target].steps):
                raise InputError(source, f"{where}.deps", f"threadblock {step.depid} has no step {step.deps}")
            if (g, target, step.deps) not in completed:
                return False
            before |= completed[(g, target, step.deps)]
        key = (g, k_tb, step.s)
        kind_ = step.type
        if kind_ in RECEIVING:
            if tb.recv < 0:
                raise InputError(source, where, "receives, but its threadblock has recv=\"-1\"")
            queue = queues.get((tb.recv, g, tb.chan))
            if queue is None or len(queue) < step.cnt:
                return False
        races.start(g, k_tb, step.s, where)
        if step.depid != -1:
            races.edge(races.step_of(g, tb_index[g][step.depid], step.deps))
        if kind_ == "nop":
            completed[key] = before
            return True
        if not 0 <= step.cnt < 10**6 or (step.cnt == 0 and kind_ != "nop"):
            raise InputError(source, f"{where}.cnt", f"expected a positive chunk count, got {step.cnt}")
        if kind_ in RECEIVING:
            assert queue is not None
            received, forwarded = [], []
            for k in range(step.cnt):
                tid = queue.popleft()
                races.edge(races.sent[tid])
                record = records[tid]
                chunk = record.chunk
                destination = resolve(g, step.dstbuf, step.dstoff + k, f"{where}.dstoff")
                operand = None
                if RECEIVING[kind_] == REDUCE:
                    operand = resolve(g, step.srcbuf, step.srcoff + k, f"{where}.srcoff")
                    if content.get((g, operand)) != chunk:
                        raise InputError(source, where, f"reduces received chunk {chunk} with buffer {operand[0]}"
                                         f"[{operand[1]}], which holds {content.get((g, operand), 'nothing')}")
                    races.read(g, operand)
                    record.op = REDUCE
                if kind_ != "rrs":
                    races.write(g, destination)
                forward = send(g, tb, chunk, where, before) if kind_ in FORWARDING else None
                if kind_ != "rrs":
                    content[(g, destination)] = chunk
                log.append(_Entry("recv", g, tid, chunk, None, None if kind_ == "rrs" else destination, operand,
                                  forward))
                received.append(tid)
                if forward is not None:
                    forwarded.append(forward)
            completed[key] = set(forwarded) if forwarded else before | set(received)
            return True
        if kind_ == "s":
            sent = []
            for k in range(step.cnt):
                location, chunk = holding(g, step, k, where, "sends")
                tid = send(g, tb, chunk, where, before)
                log.append(_Entry("send", g, tid, chunk, location))
                sent.append(tid)
            completed[key] = set(sent)
            return True
        if kind_ in ("cpy", "re"):
            done = set(before)
            for k in range(step.cnt):
                location, chunk = holding(g, step, k, where, "copies" if kind_ == "cpy" else "reduces")
                destination = resolve(g, step.dstbuf, step.dstoff + k, f"{where}.dstoff")
                if kind_ == "re" and content.get((g, destination)) != chunk:
                    raise InputError(source, where, f"reduces buffer {location[0]}[{location[1]}] (chunk {chunk}) into "
                                     f"buffer {destination[0]}[{destination[1]}], which holds "
                                     f"{content.get((g, destination), 'nothing')}")
                if kind_ == "re":
                    races.read(g, destination)
                races.write(g, destination)
                rid = len(records)
                records.append(_Record(g, g, chunk, COPY if kind_ == "cpy" else REDUCE, set(before)))
                content[(g, destination)] = chunk
                log.append(_Entry(kind_, g, rid, chunk, location, destination))
                done.add(rid)
            completed[key] = done
            return True
        raise InputError(source, f"{where}.type", f"unknown step type {kind_!r} (expected s, r, rcs, rrs, rrc, rrcs, "
                         "cpy, re or nop)")

    total = sum(len(tb.steps) for gpu_tbs in tbs for tb in gpu_tbs)
    finished = 0
    # Run threadblocks from a work list: one that cannot go on waits for the step or the message queue it
    # needs and is woken when that completes (linear in steps, even for a long chain of threadblocks that
    # unblock each other in reverse order)
    ready = deque((g, k) for g in range(n) for k in range(len(tbs[g])))
    waiting: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    while ready:
        g, k = ready.popleft()
        tb = tbs[g][k]
        while position[g][k] < len(tb.steps) and execute(g, k, tb, tb.steps[position[g][k]]):
            done_step = tb.steps[position[g][k]].s
            position[g][k] += 1
            finished += 1
            ready.extend(waiting.pop(("step", g, k, done_step), ()))
            if tb.send >= 0:
                ready.extend(waiting.pop(("queue", g, tb.send, tb.chan), ()))
        if position[g][k] < len(tb.steps):
            step = tb.steps[position[g][k]]
            target = tb_index[g].get(step.depid) if step.depid != -1 else None
            if target is not None and (g, target, step.deps) not in completed:
                waiting.setdefault(("step", g, target, step.deps), []).append((g, k))
            elif step.s and (g, k, step.s - 1) not in completed:
                waiting.setdefault(("step", g, k, step.s - 1), []).append((g, k))
            else:
                waiting.setdefault(("queue", tb.recv, g, tb.chan), []).append((g, k))
    if finished < total:
        g, tb, step = next((g, tb, tb.steps[position[g][k]]) for g in range(n) for k, tb in enumerate(tbs[g])
                           if position[g][k] < len(tb.steps))
        raise InputError(source, f"gpu {g} tb {tb.id} step {step.s}", "the program deadlocks here: it waits for a "
                         "dependency or a message that never comes")
    leftover = [(key, len(q)) for key, q in queues.items() if q]
    if leftover:
        (src, dst, chan), count = leftover[0]
        raise InputError(source, f"gpu {src}", f"{count} chunk(s) sent to gpu {dst} on channel {chan} are never received")
    if not any(r.src != r.dst for r in records):
        raise InputError(source, "", "the program moves no data")
    return records, log, content


class _Cells:
    """Second pass of the import: which buffer of the schedule IR holds each buffer location's value.

    A location that must end holding chunk ``c`` (its *home*: the output position of ``c``) writes
    the data cell of ``c``; every other location writes a scratch slot of its own. A chunk's input
    location shares the data cell until the home is written. Copies between locations that share a
    cell are no ops; a value that is overwritten while another location still reads it later is first
    copied to that location's own slot (a local copy). A reduction writes in place when nothing reads
    the old value later, else into a copy. Dependencies are the data hazards on these buffers in
    execution order: a transfer or local op waits for the write of what it reads, and for the
    previous write and the reads since of what it writes (plus the sender's program order).
    """

    def __init__(self, records: list[_Record], log: list[_Entry], homes: list[dict[Location, int]],
                 inputs: list[dict[Location, int]]) -> None:
        self.records = records
        self.log = log
        self.homes = homes
        self.cell: dict[tuple[int, Location], Cell] = {}
        self.aliases: dict[tuple[int, Cell], set[Location]] = {}
        self.chunk_of: dict[tuple[int, Cell], int] = {}
        self.slot_of: dict[tuple[int, Location], int] = {}
        self.slots = [0] * len(homes)
        self.last_writer: dict[tuple[int, Cell], int] = {}
        self.readers: dict[tuple[int, Cell], list[int]] = {}
        self.entry = -1
        self.emitted = 0
        # per location: the log entries that touch it, and whether each one reads it
        self.touches: dict[tuple[int, Location], tuple[list[int], list[bool]]] = {}
        for j, e in enumerate(log):
            reads = {"send": (e.src,), "recv": (e.operand,), "cpy": (e.src,), "re": (e.src, e.dst)}[e.kind]
            for location, read in [(e.dst, False)] + [(loc, True) for loc in reads]:
                if location is None or (e.kind == "send" and not read):
                    continue
                indices, flags = self.touches.setdefault((e.gpu, location), ([], []))
                if indices and indices[-1] == j:
                    flags[-1] = flags[-1] or read
                else:
                    indices.append(j)
                    flags.append(read)
        for g, gpu_inputs in enumerate(inputs):
            for location, chunk in gpu_inputs.items():
                self.bind(g, location, ("d", chunk))
                self.chunk_of[(g, ("d", chunk))] = chunk

    # ------------------------------------------------------------------ state
    def live(self, g: int, location: Location) -> bool:
        """True when the location's value is read after the current entry, or is its final output."""
        found = self.touches.get((g, location))
        if found:
            indices, flags = found
            k = bisect_right(indices, self.entry)
            if k < len(indices):
                return flags[k]
        return location in self.homes[g]

    def bind(self, g: int, location: Location, cell: Cell) -> None:
        self.unbind(g, location)
        self.cell[(g, location)] = cell
        self.aliases.setdefault((g, cell), set()).add(location)

    def unbind(self, g: int, location: Location) -> None:
        old = self.cell.pop((g, location), None)
        if old is not None:
            self.aliases[(g, old)].discard(location)

    def scratch(self, g: int, location: Location | None = None) -> Cell:
        """The scratch slot of ``location`` (a fresh one when None)."""
        if location is not None and (g, location) in self.slot_of:
            return ("s", self.slot_of[(g, location)])
        slot = self.slots[g]
        self.slots[g] += 1
        if location is not None:
            self.slot_of[(g, location)] = slot
        return ("s", slot)

    def target(self, g: int, location: Location, chunk: int) -> Cell:
        """Where a new value of ``chunk`` at ``location`` goes."""
        return ("d", chunk) if self.homes[g].get(location) == chunk else self.scratch(g, location)

    # ------------------------------------------------------------------ hazards
    def read(self, g: int, cell: Cell, rid: int) -> None:
        writer = self.last_writer.get((g, cell))
        if writer is not None and writer != rid:
            self.records[rid].deps.add(writer)
        self.readers.setdefault((g, cell), []).append(rid)

    def write(self, g: int, cell: Cell, rid: int, chunk: int) -> None:
        key = (g, cell)
        deps = self.records[rid].deps
        writer = self.last_writer.get(key)
        if writer is not None:
            deps.add(writer)
        deps.update(self.readers.get(key, ()))
        deps.discard(rid)
        self.last_writer[key] = rid
        self.readers[key] = []
        self.chunk_of[key] = chunk

    def finish(self, rid: int) -> None:
        self.records[rid].position = (self.entry, self.emitted)
        self.emitted += 1

    def local(self, g: int, chunk: int, op: str, src: Cell, dst: Cell, rid: int | None = None) -> int:
        """A local op (copy ``src`` to ``dst`` or reduce it into ``dst``); a new record unless ``rid``."""
        if rid is None:
            rid = len(self.records)
            self.records.append(_Record(g, g, chunk, op, set()))
        record = self.records[rid]
        record.src_cell, record.dst_cell = src, dst
        self.read(g, src, rid)
        self.write(g, dst, rid, chunk)
        self.finish(rid)
        return rid

    def evict(self, g: int, cell: Cell, keep: set[Location], reading: set[Location]) -> None:
        """Before ``cell`` is overwritten: the other locations whose value it holds and that are read
        later (or by the current step: ``reading``) move to their own slot; the rest lose their value."""
        for location in sorted(self.aliases.get((g, cell), set()) - keep):
            if location in reading or self.live(g, location):
                slot = self.scratch(g, location)
                if slot == cell:
                    raise AssertionError("a location evicted from its own slot")
                self.evict(g, slot, {location}, reading)
                self.local(g, self.chunk_of[(g, cell)], COPY, cell, slot)
                self.bind(g, location, slot)
            else:
                self.unbind(g, location)

    def modifiable(self, g: int, operand: Location, dest: Location | None, chunk: int,
                   reading: set[Location]) -> Cell:
        """A cell that holds ``operand``'s value and may take ``dest``'s new value (a reduction's result)."""
        held = self.cell[(g, operand)]
        goal = self.target(g, dest, chunk) if dest is not None else None
        keep = {dest} if dest is not None else set()
        if held == goal:
            self.evict(g, held, keep, reading)
            return held
        others = self.aliases[(g, held)] - keep
        if (dest is None or self.homes[g].get(dest) != chunk) and \
                not any(location in reading or self.live(g, location) for location in others):
            for location in sorted(others):  # nobody reads the old value again: reduce in place
                self.unbind(g, location)
            return held
        cell = goal if goal is not None else self.scratch(g)
        self.evict(g, cell, keep, reading)
        self.local(g, chunk, COPY, held, cell)
        return cell

    # ------------------------------------------------------------------ the pass
    def run(self) -> None:
        """Give every record its cells and dependencies, in execution order."""
        records = self.records
        for j, e in enumerate(self.log):
            self.entry = j
            g = e.gpu
            record = records[e.record]
            if e.kind == "send":
                assert e.src is not None
                record.src_cell = self.cell[(g, e.src)]
                self.read(g, record.src_cell, e.record)
            elif e.kind == "recv":
                if record.op == COPY:
                    assert e.dst is not None
                    cell = self.target(g, e.dst, e.chunk)
                    self.evict(g, cell, {e.dst}, set())
                else:
                    assert e.operand is not None
                    cell = self.modifiable(g, e.operand, e.dst, e.chunk, set())
                record.dst_cell = cell
                self.write(g, cell, e.record, e.chunk)
                self.finish(e.record)
                if e.dst is not None:
                    self.bind(g, e.dst, cell)
                if e.forward is not None:
                    records[e.forward].src_cell = cell
                    self.read(g, cell, e.forward)
            elif e.kind == "cpy":
                assert e.src is not None and e.dst is not None
                held = self.cell[(g, e.src)]
                cell = self.target(g, e.dst, e.chunk)
                if held == cell:  # the value is already there
                    record.elided = True
                    writer = self.last_writer.get((g, cell))
                    if writer is not None:
                        record.deps.add(writer)
                else:
                    self.evict(g, cell, {e.dst}, {e.src})
                    self.local(g, e.chunk, COPY, held, cell, e.record)
                self.bind(g, e.dst, cell)
            else:  # re: dst += src
                assert e.src is not None and e.dst is not None
                cell = self.modifiable(g, e.dst, e.dst, e.chunk, {e.src})
                held = self.cell[(g, e.src)]
                if held == cell:  # a location reduced into itself: reduce a copy (the verifier reports it)
                    held = self.scratch(g)
                    self.local(g, e.chunk, COPY, cell, held)
                self.local(g, e.chunk, REDUCE, held, cell, e.record)
                self.bind(g, e.dst, cell)


def _renumber(records: list[_Record], log: list[_Entry], source: str) -> list[int]:
    """Records in a topological order of their deps (earliest finished first), elided copies replaced
    by what they wait for."""
    stands_for: dict[int, set[int]] = {}
    for e in log:  # an elided copy waits only for records finished or elided before it
        record = records[e.record]
        if record.elided:
            stands_for[e.record] = set().union(*(stands_for.get(d, {d}) for d in record.deps))
    live = [rid for rid, r in enumerate(records) if not r.elided]
    for rid in live:
        record = records[rid]
        if any(d in stands_for for d in record.deps):
            record.deps = set().union(*(stands_for.get(d, {d}) for d in record.deps))
    waiting = {rid: len(records[rid].deps) for rid in live}
    children: dict[int, list[int]] = {}
    for rid in live:
        for d in records[rid].deps:
            children.setdefault(d, []).append(rid)
    ready = [(records[rid].position, rid) for rid in live if not waiting[rid]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, rid = heapq.heappop(ready)
        order.append(rid)
        for child in children.get(rid, ()):
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(ready, (records[child].position, child))
    if len(order) != len(live):
        raise InputError(source, "", "the program's steps wait for each other in a cycle in synth's model (a "
                         "send is taken to complete when its data arrives)")
    return order


def iter_steps(program: MscclProgram) -> Iterator[tuple[int, int, _Step]]:
    """(gpu, threadblock, step) for every step of a lowered program."""
    for g, gpu_tbs in enumerate(program.tbs):
        for b, tb in enumerate(gpu_tbs):
            for step in tb.steps:
                yield g, b, step
