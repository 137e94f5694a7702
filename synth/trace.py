"""Chakra execution traces (ET) in memory: a schedule as per-rank send/recv/compute node graphs.

An :class:`EtProgram` holds, for every rank, the nodes ASTRA-sim runs for one collective at one
message size. :func:`schedule_to_et` builds it from a schedule, :func:`encode_rank` /
:func:`decode_et_file` convert one rank to and from the protobuf file form (``<prefix>.<rank>.et``).
The same program feeds the ``astra`` evaluator model (:mod:`synth.astra`), so what the model predicts
is what ASTRA-sim runs.

How a schedule becomes nodes
----------------------------
Every transfer ``t`` (rank ``s`` -> rank ``d``, chunk ``c``) is one COMM_SEND_NODE on ``s`` and one
COMM_RECV_NODE on ``d`` with the same unique tag (``tag_base + t``), so every send matches exactly its
recv. A transfer whose path crosses switches or other gpus is still one message ``s -> d``: ASTRA-sim
routes it inside its own network model. A reducing transfer adds a COMP_NODE on ``d`` after the recv
(the local reduction; ``duration_micros`` from ``comp_duration_us``, 0 by default, which ASTRA-sim
runs as 1 ns). A transfer is *done* on ``d`` when its COMP (or, for a copy, its recv) is done.

A local op (``src == dst``: a copy or reduction between two buffers of one rank) sends nothing. A
local reduction is one COMP_NODE on its rank, its duration by the same rule as every reduction; a local
copy gets no node: whatever waits for it waits for what it waits for, and it is listed in the
metadata (``local_copies``) so synth's importer restores it.

A dependency ``t`` -> ``u`` of the schedule becomes an ET dependency on the rank that can see it:

- ``u.src`` received ``t`` (``t.dst == u.src``): u's send waits for t's recv/COMP on that rank, so a
  rank forwards or reduces a chunk only after it has it;
- ``u.src`` sent ``t``: u's send waits for t's send (which completes when t's data arrives);
- otherwise, when ``t`` touches ``u.dst``, u's recv waits for t's node there (ordering two reductions
  into one cell, or a write after a read);
- a dependency between ranks that touch neither end is replaced by its nearest ancestors that touch
  ``u.src`` (sound: they precede ``t``); if none exists it cannot be expressed in per-rank traces and
  is counted in :attr:`EtProgram.dropped_deps`.

A rank with nothing to do gets one zero-duration COMP node (ASTRA-sim exits on an empty trace).

Slices (an execution plan's, ``slices=S``, ``window=W``): every transfer becomes ``S`` sends and recvs
(and COMP nodes) of :func:`slice_sizes` bytes, the chunk's bytes spread as evenly as integers allow (the
first ``bytes % S`` slices one byte more), with tag ``tag_base + t * S + j``; slice ``j`` of a transfer
depends on slice ``j`` of the nodes above, and with a window its send also waits for the send (that is,
the delivery) of slice ``j - W`` of the same transfer. ``S = 1`` is the plain form above.

What this module builds is not yet what ``export chakra`` writes: :func:`synth.astra.sequence_sends`
then adds *ordering nodes* where ASTRA-sim's order of issuing simultaneously ready nodes would decide the
outcome (see :func:`synth.astra.lower`, which does both).

Schedule parameters read here (all optional, under ``schedule.params["et"]``; the Chakra importer
writes them so an imported trace converts back to the same nodes):

``comp_us``
    COMP duration in µs for every reducing transfer (default 0).
``comp_us_by_transfer``
    ``{"<transfer id>": µs}``: a COMP after that transfer's recv, overriding ``comp_us``; a copy
    transfer listed here gets a COMP too.
``recv_after``
    ``{"<transfer id>": [ids]}``: extra transfers the receiving rank waits for before it posts the
    recv (ASTRA-sim still moves the data as soon as it is sent).
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synth.collectives import Kind
from synth.errors import InputError, LimitError, SynthError
from synth.proto import et_def
from synth.proto.et_def import CollectiveCommType, NodeType
from synth.rank_deps import NearestTouching
from synth.schedule import REDUCE, Schedule, ScheduleForm, Transfer

if TYPE_CHECKING:
    pass

#: ``GlobalMetadata.version`` written into every file (nobody checks it; it must not be empty).
ET_VERSION = "0.0.4"
#: Marker in the metadata of the files synth writes.
FORMAT = "synth.chakra/1"
#: Tags must stay below this (ASTRA-sim's limit).
MAX_TAG = 500_000_000
#: Largest accepted ET file (bytes).
MAX_ET_BYTES = 1 << 30

COMM_TYPE: dict[Kind, CollectiveCommType] = {
    Kind.ALLREDUCE: CollectiveCommType.ALL_REDUCE,
    Kind.REDUCE: CollectiveCommType.REDUCE,
    Kind.ALLGATHER: CollectiveCommType.ALL_GATHER,
    Kind.BROADCAST: CollectiveCommType.BROADCAST,
    Kind.ALLTOALL: CollectiveCommType.ALL_TO_ALL,
    Kind.ALLTOALLV: CollectiveCommType.ALL_TO_ALL,
    Kind.REDUCESCATTER: CollectiveCommType.REDUCE_SCATTER,
}


@dataclass
class EtNode:
    """One node of a rank's trace.

    ``peer`` is ``comm_dst`` of a send and ``comm_src`` of a recv; ``extras`` are attributes the
    simulator ignores (synth writes ``chunk``, ``transfer``, ``op``, ``deps``, ``path`` and, where
    a transfer uses scratch slots, ``src_scratch`` and ``dst_scratch``).
    """

    id: int
    name: str
    type: NodeType
    deps: tuple[int, ...] = ()
    peer: int = -1
    size: int = 0
    tag: int = 0
    duration_us: int = 0
    transfer: int | None = None
    slice: int = 0
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class EtProgram:
    """Per-rank node lists of one collective at one message size, plus the metadata to write."""

    num_ranks: int
    nodes: list[list[EtNode]]
    metadata: dict[str, Any] = field(default_factory=dict)
    dropped_deps: int = 0
    #: transfer id -> path, for simulating on the physical links of a topology
    paths: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: ordering COMP nodes appended by :func:`synth.astra.sequence_sends`
    order_nodes: int = 0

    def counts(self) -> dict[str, int]:
        """Node counts by type over all ranks."""
        result: dict[str, int] = {}
        for rank_nodes in self.nodes:
            for node in rank_nodes:
                result[node.type.name] = result.get(node.type.name, 0) + 1
        return dict(sorted(result.items()))


def chunk_bytes(schedule: ScheduleForm, size: int) -> int:
    """Bytes per message for a collective of ``size`` bytes: size / chunks rounded up (at least 1)."""
    return max(1, math.ceil(size / schedule.collective.chunks))


def et_params(schedule: ScheduleForm, count: int | None = None) -> tuple[int, dict[int, int], dict[int, list[int]]]:
    """(default COMP µs, per-transfer COMP µs, recv_after) from ``schedule.params["et"]``, validated;
    transfer ids must be below ``count`` (default: the schedule's transfers)."""
    raw = schedule.params.get("et") if isinstance(schedule.params, Mapping) else None
    if raw is None:
        return 0, {}, {}
    if not isinstance(raw, Mapping):
        raise InputError("", "params.et", "expected an object")
    if count is None:
        count = schedule.num_transfers()

    def transfer_id(key: Any, where: str) -> int:
        try:
            tid = int(key)
        except (TypeError, ValueError):
            raise InputError("", where, f"expected a transfer id, got {key!r}") from None
        if not 0 <= tid < count:
            raise InputError("", where, f"transfer id {tid} is out of range 0..{count - 1}")
        return tid

    def mapping(name: str) -> Mapping[Any, Any]:
        value = raw.get(name, {})
        if not isinstance(value, Mapping):
            raise InputError("", f"params.et.{name}", f"expected an object, got {type(value).__name__}")
        return value

    comp_us = raw.get("comp_us", 0)
    if isinstance(comp_us, bool) or not isinstance(comp_us, int) or not 0 <= comp_us <= MAX_COMP_US:
        raise InputError("", "params.et.comp_us", f"expected a whole number of µs from 0 to {MAX_COMP_US}, "
                         f"got {comp_us!r}")
    by_transfer: dict[int, int] = {}
    for key, value in mapping("comp_us_by_transfer").items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COMP_US:
            raise InputError("", f"params.et.comp_us_by_transfer.{key}", f"expected µs from 0 to {MAX_COMP_US}, "
                             f"got {value!r}")
        by_transfer[transfer_id(key, "params.et.comp_us_by_transfer")] = value
    recv_after: dict[int, list[int]] = {}
    for key, value in mapping("recv_after").items():
        if not isinstance(value, list):
            raise InputError("", f"params.et.recv_after.{key}", "expected a list of transfer ids")
        recv_after[transfer_id(key, "params.et.recv_after")] = [transfer_id(v, f"params.et.recv_after.{key}")
                                                               for v in value]
    return comp_us, by_transfer, recv_after


def slice_sizes(message: int, slices: int) -> list[int]:
    """Bytes of each of ``slices`` slices of a ``message``-byte chunk: ``message // slices`` each, and the
    first ``message % slices`` slices one byte more (so they add up to the message).

    Examples
    --------
    >>> slice_sizes(10, 4)
    [3, 3, 2, 2]
    """
    if slices < 1:
        raise InputError("", "slices", f"expected at least 1 slice per chunk, got {slices}")
    if message < slices:
        raise InputError("", "slices", f"{slices} slices of a {message}-byte chunk would leave slices without "
                         "bytes; use fewer slices or a larger size")
    base, extra = divmod(message, slices)
    return [base + 1 if j < extra else base for j in range(slices)]
#: Longest COMP duration accepted in ``params["et"]``, in µs (1000 s).
MAX_COMP_US = 10**9


def schedule_to_et(schedule: Schedule, size: int, comp_duration_us: int | None = None, tag_base: int = 0,
                   extras: bool = True, slices: int = 1, window: int | None = None) -> EtProgram:
    """The per-rank traces ASTRA-sim runs for ``schedule`` at ``size`` bytes (see the module docstring).

    Parameters
    ----------
    schedule : Schedule
    size : int
        Message size in bytes as nccl-tests counts it; each chunk is ``size / chunks`` bytes (rounded up).
    comp_duration_us : int, optional
        Duration of every reduction COMP node, overriding the schedule's ``params["et"]``.
    tag_base : int
        First tag; slice ``j`` of transfer ``t`` uses ``tag_base + t * slices + j``.
    extras : bool
        Write synth's extra attributes (chunk, transfer, op, deps, path, slice) on comm nodes.
    slices : int
        Messages per transfer (an execution plan's slices): slice ``j`` carries :func:`slice_sizes` bytes
        and depends on slice ``j`` of the transfer's dependencies.
    window : int, optional
        Slices in flight per transfer: slice ``j``'s send also waits for the send (the delivery) of slice
        ``j - window``. None: no limit.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> program = schedule_to_et(synthesize(load_topology("switch:n=4"), "allreduce", "ring"), 2**20)
    >>> program.counts()
    {'COMM_RECV_NODE': 24, 'COMM_SEND_NODE': 24, 'COMP_NODE': 12}
    >>> schedule_to_et(synthesize(load_topology("switch:n=4"), "allreduce", "ring"), 2**20, slices=4).counts()
    {'COMM_RECV_NODE': 96, 'COMM_SEND_NODE': 96, 'COMP_NODE': 48}
    """
    schedule.require_point_to_point("Chakra traces (ASTRA-sim)")
    transfers = schedule.transfers
    _check_slicing(len(transfers), tag_base, slices, window)
    default_us, comp_by_transfer, recv_after = et_params(schedule)
    if comp_duration_us is not None:
        if comp_duration_us < 0:
            raise InputError("", "comp_duration_us", f"expected a duration >= 0, got {comp_duration_us}")
        default_us, comp_by_transfer = comp_duration_us, {}
    message = chunk_bytes(schedule, size)
    n = schedule.collective.num_ranks
    builder = _RankTraces(transfers, n, slice_sizes(message, slices), tag_base, extras, default_us, comp_by_transfer)
    for t in transfers:
        builder.add_transfer(t)
    dropped = builder.link_dependencies(recv_after, window)
    for rank_nodes in builder.nodes:
        if not rank_nodes:
            rank_nodes.append(EtNode(0, "idle", NodeType.COMP_NODE, duration_us=0))
    local_copies = [t for t in transfers if t.id in builder.nodeless]
    metadata = _et_metadata(schedule, len(transfers), size, message, tag_base, slices, window, extras, local_copies)
    return EtProgram(n, builder.nodes, metadata, dropped, {t.id: t.path for t in transfers})


def _check_slicing(transfers: int, tag_base: int, slices: int, window: int | None) -> None:
    """Refuse a slice count or window that is not a whole number >= 1, or tags past ASTRA-sim's limit."""
    if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
        raise InputError("", "slices", f"expected a whole number of slices >= 1, got {slices!r}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise InputError("", "window", f"expected a whole number of slices in flight >= 1, got {window!r}")
    messages = transfers * slices
    if tag_base < 0 or tag_base + messages > MAX_TAG:
        raise LimitError(f"tags {tag_base}..{tag_base + messages - 1} exceed ASTRA-sim's tag limit of "
                         f"{MAX_TAG} ({transfers} transfers x {slices} slices); use fewer chunks or slices, "
                         "or a smaller tag base")


class _RankTraces:
    """The per-rank node lists :func:`schedule_to_et` builds, and every transfer's nodes slice by slice.

    ``send_node[t][j]`` is slice ``j``'s send of transfer ``t``, ``recv_node[t][j]`` its recv and
    ``done_node[t][j]`` the node after which it is done on its destination (its COMP, or its recv); a
    local reduction's one COMP node is all three, and a node-less local copy has None.
    """

    def __init__(self, transfers: tuple[Transfer, ...] | dict[int, Transfer], num_ranks: int, sizes: list[int],
                 tag_base: int, extras: bool, default_us: int, comp_by_transfer: dict[int, int]) -> None:
        self.transfers = transfers  # indexed by transfer id: all of them, or (streaming) those of some ranks
        self.sizes = sizes
        self.slices = len(sizes)
        self.sliced = self.slices > 1
        self.tag_base = tag_base
        self.extras = extras
        self.default_us = default_us
        self.comp_by_transfer = comp_by_transfer
        self.nodes: list[list[EtNode]] = [[] for _ in range(num_ranks)]
        self.send_node: dict[int, list[EtNode] | None] = {}
        self.recv_node: dict[int, list[EtNode] | None] = {}
        self.done_node: dict[int, list[EtNode] | None] = {}
        self.nodeless = {t.id for t in (transfers.values() if isinstance(transfers, dict) else transfers)
                         if t.src == t.dst and t.op != REDUCE and t.id not in comp_by_transfer}

    def add_transfer(self, t: Transfer) -> None:
        """Append transfer ``t``'s nodes (every slice) to its ranks; transfers come in id order."""
        if t.id in self.nodeless:  # a local copy: no node (see the module docstring)
            self.send_node[t.id] = self.recv_node[t.id] = self.done_node[t.id] = None
            return
        sends, recvs, dones = [], [], []
        for j, nbytes in enumerate(self.sizes):
            info: dict[str, Any] = {"chunk": t.chunk, "transfer": t.id, "op": t.op} if self.extras else {}
            if self.extras and self.sliced:
                info["slice"] = j
            if t.src == t.dst:  # a local reduction: one COMP node, no message
                send = recv = done = self._local_reduction(t, j, info)
            else:
                send, recv, done = self._message(t, j, nbytes, info)
            sends.append(send)
            recvs.append(recv)
            dones.append(done)
        self.send_node[t.id] = sends
        self.recv_node[t.id] = recvs
        self.done_node[t.id] = dones

    def _suffix(self, j: int) -> str:
        return f"_s{j}" if self.sliced else ""

    def _local_reduction(self, t: Transfer, j: int, info: dict[str, Any]) -> EtNode:
        """Slice ``j`` of a local reduction: one COMP node on its rank."""
        rank = t.ends()[0]
        local = EtNode(len(self.nodes[rank]), f"local_{t.op}_t{t.id}_c{t.chunk}{self._suffix(j)}", NodeType.COMP_NODE,
                       duration_us=self.comp_by_transfer.get(t.id, self.default_us), transfer=t.id, slice=j,
                       extras={**info, "deps": list(t.deps), "local": True, **t.scratch_slots()} if self.extras else {})
        self.nodes[rank].append(local)
        return local

    def _message(self, t: Transfer, j: int, nbytes: int, info: dict[str, Any]) -> tuple[EtNode, EtNode, EtNode]:
        """Slice ``j`` of a transfer between two ranks: its send, its recv and the node that finishes it
        (a COMP after the recv for a reduction or a listed COMP duration, else the recv)."""
        src, dst = t.ends()
        tag = self.tag_base + t.id * self.slices + j
        suffix = self._suffix(j)
        send = EtNode(len(self.nodes[src]), f"send_t{t.id}_c{t.chunk}_to{dst}{suffix}", NodeType.COMM_SEND_NODE,
                      peer=dst, size=nbytes, tag=tag, transfer=t.id, slice=j,
                      extras={**info, "deps": list(t.deps), "path": list(t.path), **t.scratch_slots()} if self.extras else {})
        self.nodes[src].append(send)
        recv = EtNode(len(self.nodes[dst]), f"recv_t{t.id}_c{t.chunk}_from{src}{suffix}", NodeType.COMM_RECV_NODE,
                      peer=src, size=nbytes, tag=tag, transfer=t.id, slice=j, extras=dict(info))
        self.nodes[dst].append(recv)
        done = recv
        if t.op == REDUCE or t.id in self.comp_by_transfer:
            duration = self.comp_by_transfer.get(t.id, self.default_us)
            comp_extras: dict[str, Any] = {"transfer": t.id} if self.extras else {}
            if self.extras and self.sliced:
                comp_extras["slice"] = j
            done = EtNode(len(self.nodes[dst]), f"reduce_t{t.id}_c{t.chunk}{suffix}", NodeType.COMP_NODE, (recv.id,),
                          duration_us=duration, transfer=t.id, slice=j, extras=comp_extras)
            self.nodes[dst].append(done)
        return send, recv, done

    def on_rank(self, dep: int, rank: int) -> list[EtNode] | None:
        """Transfer ``dep``'s nodes (per slice) on ``rank``: its done nodes where it ends there, its sends
        where it starts there, else None."""
        d = self.transfers[dep]
        if d.dst == rank:
            return self.done_node[dep]
        if d.src == rank:
            return self.send_node[dep]
        return None

    def link_dependencies(self, recv_after: dict[int, list[int]], window: int | None) -> int:
        """Set every node's deps from the schedule's (see the module docstring); returns how many
        dependencies could not be expressed and were dropped."""
        dropped = 0
        effective = _bypass(self.transfers, self.nodeless)  # type: ignore[arg-type]  # the whole tuple here
        near = _Near(effective)
        for t in effective:
            if t.id in self.nodeless:
                continue
            src, dst = t.ends()
            send_deps: set[int] = set()  # transfer ids whose node on src precedes t's send (slice by slice)
            recv_deps: set[int] = set()
            for dep in t.deps:
                if self.on_rank(dep, src) is not None:
                    send_deps.add(dep)
                elif self.on_rank(dep, dst) is not None:
                    recv_deps.add(dep)
                else:
                    found = near.deps_of(dep, src)
                    if found:
                        send_deps.update(found)
                    else:
                        dropped += 1
            recv_deps |= {dep for dep in recv_after.get(t.id, ()) if self.on_rank(dep, dst) is not None}
            if src == dst:  # a local reduction waits for everything on its rank
                send_deps |= recv_deps
            self._set_slice_deps(t, send_deps, recv_deps, window)
        return dropped

    def _set_slice_deps(self, t: Transfer, send_deps: set[int], recv_deps: set[int], window: int | None) -> None:
        """Slice ``j`` of ``t``'s send waits for slice ``j`` of ``send_deps`` on its rank (and for the send
        ``window`` slices back), its recv for slice ``j`` of ``recv_deps``."""
        src, dst = t.ends()
        for j in range(self.slices):
            ids = {self.on_rank(dep, src)[j].id for dep in send_deps}  # type: ignore[index]
            if window is not None and j >= window and src != dst:
                ids.add(self.send_node[t.id][j - window].id)  # type: ignore[index]
            self.send_node[t.id][j].deps = tuple(sorted(ids))  # type: ignore[index]
            if src != dst:
                waits = {self.on_rank(dep, dst)[j].id for dep in recv_deps}  # type: ignore[index]
                self.recv_node[t.id][j].deps = tuple(sorted(waits))  # type: ignore[index]


    def link_ranks(self, ranks: range, src: array, dst: array, recv_after: dict[int, list[int]],
                   window: int | None) -> None:
        """:meth:`link_dependencies` for a build that holds only the transfers touching ``ranks``
        (streaming): the nodes on those ranks get exactly their full build's deps. ``src`` and ``dst`` give
        the ends of every transfer so far, so a dependency outside the build is still classified; one that
        touches neither end of its transfer would need the whole graph, so it is refused."""
        for t in self.transfers.values():  # type: ignore[union-attr]
            send_deps: set[int] = set()
            recv_deps: set[int] = set()
            for dep in t.deps:
                if src[dep] == t.src or dst[dep] == t.src:
                    send_deps.add(dep)
                elif src[dep] == t.dst or dst[dep] == t.dst:
                    recv_deps.add(dep)
                else:
                    raise SynthError(f"transfer {t.id} depends on transfer {dep}, which touches neither of its "
                                     "ranks: its traces cannot be written rank by rank")
            recv_deps |= {dep for dep in recv_after.get(t.id, ()) if t.dst in (src[dep], dst[dep])}
            if t.src == t.dst:
                send_deps |= recv_deps
            self._set_slice_deps(t, send_deps if t.src in ranks else set(), recv_deps if t.dst in ranks else set(),
                                 window)


#: Transfers whose nodes one pass of :func:`stream_rank_traces` builds (about 3 KB each while it holds them).
STREAM_TRANSFERS_PER_PASS = 1_000_000


def stream_rank_traces(form: ScheduleForm, size: int, comp_duration_us: int | None = None, tag_base: int = 0,
                       extras: bool = True, slices: int = 1, window: int | None = None,
                       per_pass: int = STREAM_TRANSFERS_PER_PASS) -> tuple[dict[str, Any], Iterator[tuple[int, list[EtNode]]]]:
    """The traces of :func:`schedule_to_et` for a schedule (in either form: the trees form is the one whose
    transfers are not held), rank by rank, without holding every transfer: the metadata, and an iterator of
    ``(rank, nodes)`` in rank order.

    Each pass reads the transfers once (:meth:`~synth.schedule.ScheduleForm.iter_transfers`), keeps the
    transfers that touch a block of ranks (about ``per_pass`` of them) and builds those ranks' nodes, so
    memory is bounded by ``per_pass`` while time grows with the number of passes. Every rank's nodes are
    those :func:`schedule_to_et` builds from :meth:`~synth.schedule.ScheduleForm.expand`, node for node.
    (What ``export chakra`` adds after that, the ``astra`` model's ordering nodes, needs every transfer
    at once and is not built here.)

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms.forest import forest_trees
    >>> form = forest_trees(load_topology("dgx1"), Kind.ALLREDUCE)
    >>> metadata, ranks = stream_rank_traces(form, 2**20, per_pass=100)
    >>> program = schedule_to_et(form.expand(), 2**20)
    >>> all(nodes == program.nodes[rank] for rank, nodes in ranks) and metadata == program.metadata
    True
    """
    count = form.num_transfers()
    _check_slicing(count, tag_base, slices, window)
    default_us, comp_by_transfer, recv_after = et_params(form, count)
    if comp_duration_us is not None:
        if comp_duration_us < 0:
            raise InputError("", "comp_duration_us", f"expected a duration >= 0, got {comp_duration_us}")
        default_us, comp_by_transfer = comp_duration_us, {}
    if per_pass < 1:
        raise InputError("", "per_pass", f"expected at least 1 transfer per pass, got {per_pass}")
    message = chunk_bytes(form, size)
    sizes = slice_sizes(message, slices)
    n = form.collective.num_ranks
    metadata = _et_metadata(form, count, size, message, tag_base, slices, window, extras, [])
    block = max(1, per_pass * n // max(1, 2 * count))  # a transfer touches two of the n ranks

    def ranks() -> Iterator[tuple[int, list[EtNode]]]:
        for first in range(0, n, block):
            block_ranks = range(first, min(n, first + block))
            src, dst = array("i"), array("i")
            held: dict[int, Transfer] = {}
            for t in form.iter_transfers():
                t_src, t_dst = t.ends()
                src.append(t_src)
                dst.append(t_dst)
                if t_src in block_ranks or t_dst in block_ranks:
                    held[t.id] = t
            builder = _RankTraces(held, n, sizes, tag_base, extras, default_us, comp_by_transfer)
            if builder.nodeless:
                raise SynthError(f"transfer {min(builder.nodeless)} is a local copy, which the trees form never "
                                 "makes: its traces cannot be written rank by rank")
            for t in held.values():
                builder.add_transfer(t)
            builder.link_ranks(block_ranks, src, dst, recv_after, window)
            for rank in block_ranks:
                yield rank, builder.nodes[rank] or [EtNode(0, "idle", NodeType.COMP_NODE, duration_us=0)]

    return metadata, ranks()


def _et_metadata(schedule: ScheduleForm, count: int, size: int, message: int, tag_base: int, slices: int,
                 window: int | None, extras: bool, local_copies: list[Transfer]) -> dict[str, Any]:
    """The metadata :func:`schedule_to_et` writes into every file (see :class:`EtProgram`) for a schedule of
    ``count`` transfers, ``local_copies`` of which get no node."""
    coll = schedule.collective
    metadata: dict[str, Any] = {
        "producer": "synth", "format": FORMAT, "collective": coll.kind.value, "chunks": coll.chunks,
        "num_ranks": coll.num_ranks, "size": size, "message_bytes": message, "algorithm": schedule.algorithm,
        "topology": schedule.topology, "transfers": count, "tag_base": tag_base,
    }
    if slices > 1:
        metadata["slices"] = slices
    if window is not None:
        metadata["window"] = window
    if coll.root is not None:
        metadata["root"] = coll.root
    if coll.demand is not None:  # alltoallv: the chunk-count matrix, in rank 0's file only (see encode_nodes)
        metadata["demand"] = json.dumps([list(row) for row in coll.demand])
    if coll.shards is not None:  # allgatherv, reduce-scatterv: the chunks each rank owns
        metadata["shards"] = json.dumps(list(coll.shards))
    if extras:
        metadata["ranks"] = list(schedule.ranks)
        metadata["params"] = json.dumps(_plain(schedule.params), sort_keys=True)
        if local_copies:
            metadata["local_copies"] = json.dumps([
                {"transfer": t.id, "rank": t.src, "chunk": t.chunk, "deps": list(t.deps), **t.scratch_slots()}
                for t in local_copies])
    return metadata


def _bypass(transfers: tuple[Transfer, ...], nodeless: set[int]) -> tuple[Transfer, ...]:
    """The transfers with every dependency on a node-less local copy replaced by what that copy waits
    for (transitively)."""
    if not nodeless:
        return transfers
    stands_for: dict[int, frozenset[int]] = {}

    def expand(deps: tuple[int, ...]) -> frozenset[int]:
        found: set[int] = set()
        for dep in deps:
            found |= stands_for[dep] if dep in nodeless else {dep}
        return frozenset(found)

    for tid in sorted(nodeless):
        stack = [tid]
        while stack:
            top = stack[-1]
            if top in stands_for:
                stack.pop()
                continue
            missing = [d for d in transfers[top].deps if d in nodeless and d not in stands_for]
            if missing:
                stack.extend(missing)
                continue
            stands_for[top] = expand(transfers[top].deps)
            stack.pop()
    return tuple(replace(t, deps=tuple(sorted(expand(t.deps)))) if any(d in nodeless for d in t.deps) else t
                 for t in transfers)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class _Near(NearestTouching):
    def deps_of(self, dep: int, rank: int) -> list[int]:
        """Nearest ancestors of transfer ``dep`` (following deps) that have ``rank`` as an end."""
        found: set[int] = set()
        for parent in self.transfers[dep].deps:
            found |= self._near(parent, rank)
        return sorted(found)


# ------------------------------------------------------------------------------------ protobuf
def _set_attr(node: Any, name: str, value: Any, kind: str) -> None:
    attr = node.attr.add(name=name)
    if kind == "bool":
        attr.bool_val = bool(value)
    elif kind == "int32":
        attr.int32_val = int(value)
    elif kind == "int64":
        attr.int64_val = int(value)
    elif kind == "string":
        attr.string_val = str(value)
    elif kind == "int64_list":
        attr.int64_list.values.extend(int(v) for v in value)
    elif kind == "string_list":
        attr.string_list.values.extend(str(v) for v in value)
    elif kind == "bool_list":
        attr.bool_list.values.extend(bool(v) for v in value)
    else:  # pragma: no cover - programming error
        raise ValueError(kind)


def _extra_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return "int64_list"
    if isinstance(value, list):
        return "string_list"
    return "string"


def metadata_message(metadata: Mapping[str, Any]) -> Any:
    """The ``GlobalMetadata`` record: version plus one attribute per metadata entry."""
    message = et_def.GlobalMetadata(version=ET_VERSION)
    for name, value in metadata.items():
        _set_attr(message, name, value, _extra_kind(value))
    return message


def node_message(node: EtNode, rank: int) -> Any:
    """The protobuf ``Node`` for one :class:`EtNode` on ``rank``, with the attribute types ASTRA-sim's
    old and new readers both accept."""
    message = et_def.Node(id=node.id, name=node.name, type=int(node.type))
    message.data_deps.extend(node.deps)
    if node.type == NodeType.COMP_NODE:
        message.duration_micros = node.duration_us
    _set_attr(message, "is_cpu_op", False, "bool")
    if node.type == NodeType.COMM_SEND_NODE:
        _set_attr(message, "comm_src", rank, "int32")
        _set_attr(message, "comm_dst", node.peer, "int32")
        _set_attr(message, "comm_size", node.size, "int64")
        _set_attr(message, "comm_tag", node.tag, "int32")
    elif node.type == NodeType.COMM_RECV_NODE:
        _set_attr(message, "comm_src", node.peer, "int32")
        _set_attr(message, "comm_size", node.size, "int64")
        _set_attr(message, "comm_tag", node.tag, "int32")
    for name, value in node.extras.items():
        _set_attr(message, name, value, _extra_kind(value))
    return message


def encode_rank(program: EtProgram, rank: int) -> bytes:
    """The bytes of ``<prefix>.<rank>.et``: metadata record first, then every node."""
    return encode_nodes(program.metadata, program.nodes[rank], rank)


def encode_nodes(metadata: Mapping[str, Any], nodes: list[EtNode], rank: int) -> bytes:
    """The bytes of ``<prefix>.<rank>.et`` for ``rank``'s ``nodes`` under a program's ``metadata``.

    An alltoallv's ``demand`` (N x N chunk counts) is written into rank 0's file only, so a trace set holds
    it once."""
    own = {key: value for key, value in metadata.items() if rank == 0 or key != "demand"}
    records = [metadata_message({**own, "rank": rank}).SerializeToString()]
    records.extend(node_message(node, rank).SerializeToString() for node in nodes)
    return et_def.encode_records(records)


def workload_bytes(kind: Kind, size: int, rank: int, dims: int = 1, comm_type: CollectiveCommType | None = None,
                   pg_name: str | None = None) -> bytes:
    """A workload trace for one rank: metadata and one COMM_COLL_NODE calling the collective; on a
    process group the node carries Chakra's ``pg_name`` (the communicator group's name)."""
    node = et_def.Node(id=0, name=f"{kind.value}_{size}B", type=int(NodeType.COMM_COLL_NODE))
    _set_attr(node, "is_cpu_op", False, "bool")
    _set_attr(node, "comm_type", int(COMM_TYPE[kind] if comm_type is None else comm_type), "int64")
    _set_attr(node, "comm_size", size, "int64")
    _set_attr(node, "involved_dim", [True] * dims, "bool_list")
    if pg_name is not None:
        _set_attr(node, "pg_name", pg_name, "string")
    meta = metadata_message({"producer": "synth", "rank": rank})
    return et_def.encode_records([meta.SerializeToString(), node.SerializeToString()])


def attribute_value(attr: Any) -> Any:
    """The Python value of an ``AttributeProto`` (lists as lists), or None when no value is set."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    if which.endswith("_list"):
        return list(value.values)
    return value


@dataclass
class EtFile:
    """One decoded ET file: metadata attributes and nodes (comm attributes read into fields)."""

    version: str
    metadata: dict[str, Any]
    nodes: list[EtNode]


def decode_et_bytes(data: bytes, source: str = "") -> EtFile:
    """Decode one rank's ET bytes; raises :class:`InputError` naming the record and field.

    Integer attributes are accepted in any integer type; a missing ``is_cpu_op`` means false (the
    reader's default). A zero-length record ends the trace, as in Chakra's own reader.
    """
    from google.protobuf.message import DecodeError

    records = et_def.decode_records(data, source)
    if not records:
        raise InputError(source, "", "empty file: expected a GlobalMetadata record then nodes")
    try:
        meta = et_def.GlobalMetadata.FromString(records[0])
    except DecodeError as error:
        raise InputError(source, "record 0", f"not a GlobalMetadata message: {error}") from None
    metadata = {a.name: attribute_value(a) for a in meta.attr}
    nodes: list[EtNode] = []
    ids: set[int] = set()
    for index, record in enumerate(records[1:], start=1):
        if not record:
            break
        try:
            message = et_def.Node.FromString(record)
        except DecodeError as error:
            raise InputError(source, f"record {index}", f"not a Node message: {error}") from None
        where = f"node {message.id} (record {index})"
        if message.id in ids:
            raise InputError(source, where, "duplicate node id")
        ids.add(message.id)
        try:
            kind = NodeType(message.type)
        except ValueError:
            raise InputError(source, f"{where}.type", f"unknown node type {message.type}") from None
        attrs = {a.name: attribute_value(a) for a in message.attr}
        node = EtNode(message.id, message.name, kind, tuple(dict.fromkeys([*message.data_deps, *message.ctrl_deps])),
                      duration_us=int(message.duration_micros))
        if kind in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            peer_name = "comm_dst" if kind == NodeType.COMM_SEND_NODE else "comm_src"
            for name in (peer_name, "comm_size", "comm_tag"):
                value = attrs.get(name)
                if isinstance(value, bool) or not isinstance(value, int):
                    raise InputError(source, f"{where}.{name}", f"expected an integer attribute, got {value!r}")
            node.peer, node.size, node.tag = attrs[peer_name], attrs["comm_size"], attrs["comm_tag"]
            if node.size <= 0:
                raise InputError(source, f"{where}.comm_size", f"expected a positive size, got {node.size}")
        if attrs.get("is_cpu_op"):
            raise InputError(source, f"{where}.is_cpu_op", "true: a collective's ET must run on the device")
        node.extras = {k: v for k, v in attrs.items()
                       if k not in ("is_cpu_op", "comm_src", "comm_dst", "comm_size", "comm_tag")}
        nodes.append(node)
    for node in nodes:
        for dep in node.deps:
            if dep not in ids:
                raise InputError(source, f"node {node.id}.data_deps", f"unknown node id {dep}")
    return EtFile(meta.version, metadata, nodes)


def decode_et_file(path: str | Path) -> EtFile:
    """Read and decode one ``.et`` file (size-checked)."""
    from synth.fileio import note_input

    path = Path(path)
    note_input(path)
    try:
        size = path.stat().st_size
        if size > MAX_ET_BYTES:
            raise InputError(str(path), "", f"file is {size} bytes, more than the limit of {MAX_ET_BYTES}")
        data = path.read_bytes()
    except OSError as error:
        raise InputError(str(path), "", f"cannot read file: {error.strerror or error}") from None
    return decode_et_bytes(data, str(path))
