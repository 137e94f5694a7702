"""Buffer locations of a lowered schedule: where each transfer reads and writes, found by replaying the
schedule in one topological order.

Every data cell and scratch slot of the schedule lives in one buffer position at a time: a rank's own
data in the input buffer ``i``; what it receives in the output buffer ``o`` when the chunk belongs in its
output, else in the scratch buffer ``s`` (one position per cell or scratch slot, never reused). Chunks a
rank must show in its output without receiving them get a copy at the start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from synth.collectives import Collective, Kind
from synth.errors import InputError
from synth.export.msccl.program import Location
from synth.rank_deps import NearestTouching
from synth.schedule import REDUCE, Schedule

#: Collectives whose chunks are split evenly among the ranks.
_PER_RANK = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL)


@dataclass
class Lowering:
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
    #: (transfer, gpu) -> its deps that have gpu as an end (see local_deps), kept when they cost a walk
    local_deps: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    #: (transfer, gpu) -> the one transfer that has it among its deps on gpu, or -1 when several do
    dependent: dict[tuple[int, int], int] = field(default_factory=dict)
    near: NearestTouching | None = None
    #: per gpu, the transfers it is an end of, in ``order``
    touching: list[list[int]] = field(default_factory=list)


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
            raise InputError("", "deps", "the schedule's dependencies form a cycle (the verifier refuses this schedule)")
    return level


class _Placement:
    """Where a (rank, chunk) starts and where a new value of it is written; scratch slots are handed out
    in the order they are first written (one per cell or scratch slot of the schedule, never reused)."""

    def __init__(self, collective: Collective) -> None:
        self.coll = collective
        self.kind, self.n, self.chunks = collective.kind, collective.num_ranks, collective.chunks
        self.per = self.chunks // self.n if self.kind in _PER_RANK else 0
        self.scratch = [0] * self.n
        self.scratch_slot: dict[tuple[int, int], int] = {}

    def initial(self) -> tuple[dict[tuple[int, int], Location], list[list[tuple[Location, Location]]]]:
        """Where each rank's own data starts, and the copies into its output buffer at the start."""
        kind, chunks, per, coll = self.kind, self.chunks, self.per, self.coll
        loc: dict[tuple[int, int], Location] = {}
        copies: list[list[tuple[Location, Location]]] = [[] for _ in range(self.n)]
        for g in range(self.n):
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
        return loc, copies

    def scratch_of(self, g: int, c: int) -> Location:
        slot = self.scratch_slot.get((g, c))
        if slot is None:
            slot = self.scratch_slot[(g, c)] = self.scratch[g]
            self.scratch[g] += 1
        return ("s", slot)

    def write_loc(self, g: int, c: int) -> Location:
        """Where rank ``g`` writes chunk ``c`` (a negative ``c``: scratch slot ``-1 - c`` of the schedule)."""
        kind, coll, per = self.kind, self.coll, self.per
        if c < 0:  # a scratch slot of the schedule: a slot of the scratch buffer of its own
            return self.scratch_of(g, c)
        if kind in (Kind.ALLREDUCE, Kind.ALLGATHER, Kind.BROADCAST):
            return ("o", c)
        if kind == Kind.REDUCESCATTER:
            return ("o", c - g * per) if coll.owner(c) == g else self.scratch_of(g, c)
        if kind == Kind.REDUCE:
            return ("o", c) if g == coll.root else self.scratch_of(g, c)
        local = c % self.chunks  # alltoall
        return ("o", coll.origin(c) * per + local % per) if coll.owner(c) == g else self.scratch_of(g, c)

    def buffers(self) -> list[tuple[int, int, int]]:
        """(i_chunks, o_chunks, s_chunks) per gpu, once every write is placed."""
        chunks, per, n = self.chunks, self.per, self.n
        if self.kind == Kind.ALLGATHER:
            return [(per, chunks, self.scratch[g]) for g in range(n)]
        if self.kind == Kind.REDUCESCATTER:
            return [(chunks, per, self.scratch[g]) for g in range(n)]
        return [(chunks, chunks, self.scratch[g]) for g in range(n)]


@dataclass
class _Replay:
    """What replaying the transfers in order found: their locations, and who reads each write."""

    src_loc: list[Location]
    operand_loc: list[Location | None]
    dst_loc: list[Location]
    writer: dict[tuple[int, int], int] = field(default_factory=dict)
    #: write -> transfers that read its value (a reduce reads the old value)
    readers: dict[int, list[int]] = field(default_factory=dict)
    next_write_reduces: dict[int, bool] = field(default_factory=dict)


def _replay(schedule: Schedule, order: list[int], placement: _Placement,
            loc: dict[tuple[int, int], Location]) -> _Replay:
    count = len(order)
    replay = _Replay([("i", 0)] * count, [None] * count, [("i", 0)] * count)
    writer, readers = replay.writer, replay.readers
    for tid in order:
        t = schedule.transfers[tid]
        src, dst = t.ends()
        source = (src, t.chunk) if t.src_scratch is None else (src, -1 - t.src_scratch)
        target = (dst, t.chunk) if t.dst_scratch is None else (dst, -1 - t.dst_scratch)
        if source not in loc:
            raise InputError("", f"transfers.{tid}", f"rank {t.src} sends chunk {t.chunk} it never holds "
                             "(the verifier refuses this schedule)")
        replay.src_loc[tid] = loc[source]
        if source in writer:
            readers.setdefault(writer[source], []).append(tid)
        previous = writer.get(target)
        if t.op == REDUCE:
            if target not in loc:
                raise InputError("", f"transfers.{tid}", f"reduce into rank {t.dst} chunk {t.chunk}, which holds "
                                 "nothing (the verifier refuses this schedule)")
            replay.operand_loc[tid] = loc[target]
            if previous is not None:
                readers.setdefault(previous, []).append(tid)
        if previous is not None:
            replay.next_write_reduces[previous] = t.op == REDUCE
        replay.dst_loc[tid] = placement.write_loc(*target)
        loc[target] = replay.dst_loc[tid]
        writer[target] = tid
    return replay


def _needed(collective: Collective, replay: _Replay, count: int) -> list[bool]:
    """Per transfer: whether its result must stay in its buffer (a final value, the operand of the next
    reduction, or read more than once)."""
    final_writes = set()
    for g in range(collective.num_ranks):
        for c, _ in collective.final(g):
            if (g, c) in replay.writer:
                final_writes.add(replay.writer[(g, c)])
    return [tid in final_writes or replay.next_write_reduces.get(tid, False) or len(replay.readers.get(tid, [])) > 1
            for tid in range(count)]


def lower_locations(schedule: Schedule) -> Lowering:
    """Replay ``schedule`` in (level, id) order and give every transfer its buffer locations."""
    level = _levels(schedule)
    order = sorted(range(len(level)), key=lambda tid: (level[tid], tid))
    position = [0] * len(order)
    for index, tid in enumerate(order):
        position[tid] = index
    placement = _Placement(schedule.collective)
    loc, copies = placement.initial()
    replay = _replay(schedule, order, placement, loc)
    needed = _needed(schedule.collective, replay, len(order))
    buffers = placement.buffers()
    lowering = Lowering(order, position, level, replay.src_loc, replay.operand_loc, replay.dst_loc, copies,
                        placement.scratch, needed, buffers, max(max(b[0], b[1]) for b in buffers))
    near = lowering.near = NearestTouching(schedule.transfers)
    touching = lowering.touching = [[] for _ in range(schedule.collective.num_ranks)]
    for tid in order:
        src, dst = schedule.transfers[tid].ends()
        touching[src].append(tid)
        if dst != src:
            touching[dst].append(tid)
    for rank, tids in enumerate(touching):  # rank by rank, so the walk's memo holds one rank at a time
        for tid in tids:
            for dep in local_deps(schedule, tid, rank, lowering):
                key = (dep, rank)
                lowering.dependent[key] = tid if lowering.dependent.get(key, tid) == tid else -1
        near.forget(rank)
    return lowering


def local_deps(schedule: Schedule, tid: int, rank: int, lowering: Lowering) -> list[int]:
    """Deps of ``tid`` that have ``rank`` as an end, non-local ones replaced by their nearest such ancestors
    (kept in ``lowering.local_deps`` unless the dependencies form a forest, where asking costs nothing)."""
    if lowering.near is None:
        lowering.near = NearestTouching(schedule.transfers)
    near = lowering.near
    if rank in (schedule.transfers[tid].src, schedule.transfers[tid].dst) and near.answers_ends():
        return near.deps(tid, rank)
    key = (tid, rank)
    cache = lowering.local_deps
    if key not in cache:
        cache[key] = near.deps(tid, rank)
    return cache[key]
