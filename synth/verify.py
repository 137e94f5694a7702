"""The exact data-flow verifier.

It replays a schedule symbolically. Every (rank, chunk) cell holds a value: the set of ranks whose
contribution it holds (an int bitmask). It rejects, naming the transfer and the reason:

- a transfer whose ``path`` is not made of links, or does not start at ``src`` and end at ``dst``;
- a dependency cycle;
- a send of data the source does not hold yet (the transfer that produced it is not among the
  transitive deps), or of a chunk the source never holds;
- a race: two transfers that write the same cell, or one that writes a cell another reads, with no
  order between them (so the outcome would depend on timing);
- a reduce that would count a contribution twice, or a reduce in a collective that reduces nothing;
- a postcondition not met at the end.

Order is the transitive closure of ``deps``. Transfers are replayed in a topological order; since all
accesses to a cell are checked to be ordered, every topological order gives the same values, so one
replay proves the result for every execution the deps allow.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from synth.errors import VerificationError
from synth.schedule import REDUCE, Schedule
from synth.topology import Topology


@dataclass(frozen=True)
class VerifyReport:
    """Facts about a schedule that passed: sizes and the longest dependency chain."""

    transfers: int
    depth: int
    max_chunks_on_a_link: int


def verify(schedule: Schedule, topology: Topology) -> VerifyReport:
    """Check ``schedule`` on ``topology``; return a report or raise :class:`VerificationError`.

    Examples
    --------
    >>> from synth.collectives import Collective, Kind
    >>> from synth.schedule import Transfer
    >>> topo = Topology.build("pair", ["a", "b"], [], [("a", "b", 10.0)])
    >>> coll = Collective(Kind.BROADCAST, 2, 1, root=0)
    >>> s = Schedule(coll, "pair", ("a", "b"), "manual", {}, (Transfer(0, 0, 1, 0, "copy", ("a", "b")),))
    >>> verify(s, topo).transfers
    1
    """
    _check_ranks(schedule, topology)
    link_load = _check_paths(schedule, topology)
    order, topo_index = _topological_order(schedule)
    depth = _replay(schedule, order, topo_index)
    return VerifyReport(
        transfers=len(schedule.transfers),
        depth=depth,
        max_chunks_on_a_link=max(link_load.values(), default=0),
    )


def _check_ranks(schedule: Schedule, topology: Topology) -> None:
    if len(schedule.ranks) != topology.num_ranks:
        raise VerificationError(
            f"the schedule has {len(schedule.ranks)} ranks but topology {topology.name!r} has "
            f"{topology.num_ranks} gpus")
    if len(set(schedule.ranks)) != len(schedule.ranks):
        raise VerificationError("the schedule lists a gpu twice in 'ranks'")
    for rank, gpu in enumerate(schedule.ranks):
        if gpu not in topology.graph or not topology.is_gpu(gpu):
            raise VerificationError(f"rank {rank} is {gpu!r}, which is not a gpu of topology {topology.name!r}")


def _check_paths(schedule: Schedule, topology: Topology) -> dict[tuple[str, str], int]:
    graph = topology.graph
    ranks = schedule.ranks
    num_ids = schedule.collective.num_chunk_ids
    load: dict[tuple[str, str], int] = {}
    checked: set[tuple[str, ...]] = set()
    for t in schedule.transfers:
        if t.src == t.dst:
            raise VerificationError(f"transfer {t.id}: src and dst are both rank {t.src}", t.id)
        if not 0 <= t.chunk < num_ids:
            raise VerificationError(f"transfer {t.id}: chunk {t.chunk} is out of range 0..{num_ids - 1}", t.id)
        path = t.path
        if path not in checked:
            if len(path) < 2:
                raise VerificationError(f"transfer {t.id}: path {list(path)} has fewer than 2 nodes", t.id)
            if len(set(path)) != len(path):
                raise VerificationError(f"transfer {t.id}: path {list(path)} visits a node twice", t.id)
            for u, v in zip(path, path[1:], strict=False):
                if not graph.has_edge(u, v):
                    raise VerificationError(f"transfer {t.id}: path hop {u} -> {v} is not a link", t.id)
            checked.add(path)
        if path[0] != ranks[t.src] or path[-1] != ranks[t.dst]:
            raise VerificationError(
                f"transfer {t.id}: path runs {path[0]} -> {path[-1]} but src/dst are ranks {t.src} "
                f"({ranks[t.src]}) and {t.dst} ({ranks[t.dst]})", t.id)
        for hop in zip(path, path[1:], strict=False):
            load[hop] = load.get(hop, 0) + 1
    return load


def _topological_order(schedule: Schedule) -> tuple[list[int], list[int]]:
    transfers = schedule.transfers
    count = len(transfers)
    if all(dep < t.id for t in transfers for dep in t.deps):
        order = list(range(count))
        return order, order
    indegree = [len(set(t.deps)) for t in transfers]
    children: list[list[int]] = [[] for _ in range(count)]
    for t in transfers:
        for dep in set(t.deps):
            children[dep].append(t.id)
    heap = [i for i in range(count) if indegree[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        node = heapq.heappop(heap)
        order.append(node)
        for child in children[node]:
            indegree[child] -= 1
            if indegree[child] == 0:
                heapq.heappush(heap, child)
    if len(order) != count:
        stuck = min(i for i in range(count) if indegree[i] > 0)
        raise VerificationError(f"transfer {stuck}: its deps form a cycle", stuck)
    topo_index = [0] * count
    for position, node in enumerate(order):
        topo_index[node] = position
    return order, topo_index


class _Reachability:
    """Answers 'is a an ancestor of b' with a pruned backward search, caching nothing global."""

    def __init__(self, schedule: Schedule, topo_index: list[int]) -> None:
        self.deps = [t.deps for t in schedule.transfers]
        self.topo_index = topo_index

    def before(self, a: int, b: int) -> bool:
        deps = self.deps
        if a in deps[b]:
            return True
        topo = self.topo_index
        limit = topo[a]
        if limit >= topo[b]:
            return False
        stack = [d for d in deps[b] if topo[d] > limit]
        seen = set(stack)
        while stack:
            node = stack.pop()
            for dep in deps[node]:
                if dep == a:
                    return True
                if dep not in seen and topo[dep] > limit:
                    seen.add(dep)
                    stack.append(dep)
        return False


def _replay(schedule: Schedule, order: list[int], topo_index: list[int]) -> int:
    collective = schedule.collective
    transfers = schedule.transfers
    reducing = collective.reducing
    value: dict[tuple[int, int], int] = {}
    for rank in range(collective.num_ranks):
        for chunk, mask in collective.initial(rank):
            value[(rank, chunk)] = mask
    last_writer: dict[tuple[int, int], int] = {}
    readers: dict[tuple[int, int], list[int]] = {}
    reach = _Reachability(schedule, topo_index)
    depth = [0] * len(transfers)

    for tid in order:
        t = transfers[tid]
        depth[tid] = 1 + max((depth[d] for d in t.deps), default=0)
        source = (t.src, t.chunk)
        target = (t.dst, t.chunk)
        held = value.get(source, 0)
        writer = last_writer.get(source)
        if writer is not None and not reach.before(writer, tid):
            raise VerificationError(
                f"transfer {tid}: rank {t.src} sends chunk {t.chunk} that transfer {writer} writes, but "
                f"{writer} is not among its transitive deps (it may not have arrived yet)", tid)
        if held == 0:
            raise VerificationError(
                f"transfer {tid}: rank {t.src} sends chunk {t.chunk}, which it does not hold at that point", tid)
        readers.setdefault(source, []).append(tid)

        previous = last_writer.get(target)
        if previous is not None and not reach.before(previous, tid):
            raise VerificationError(
                f"transfer {tid}: race on rank {t.dst} chunk {t.chunk}: transfers {previous} and {tid} both write "
                f"it with no order between them", tid)
        for reader in readers.get(target, ()):
            if not reach.before(reader, tid):
                raise VerificationError(
                    f"transfer {tid}: race on rank {t.dst} chunk {t.chunk}: it overwrites the value that transfer "
                    f"{reader} reads, with no order between them", tid)
        current = value.get(target, 0)
        if t.op == REDUCE:
            if not reducing:
                raise VerificationError(f"transfer {tid}: op 'reduce' in a {collective.kind} (nothing is reduced)", tid)
            if current == 0:
                raise VerificationError(
                    f"transfer {tid}: reduce into rank {t.dst} chunk {t.chunk}, which holds no partial value "
                    f"(use 'copy')", tid)
            twice = current & held
            if twice:
                counted = [r for r in range(collective.num_ranks) if twice >> r & 1]
                raise VerificationError(
                    f"transfer {tid}: reduce into rank {t.dst} chunk {t.chunk} would count the contribution of "
                    f"rank(s) {counted[:8]} twice", tid)
            value[target] = current | held
        else:
            value[target] = held
        last_writer[target] = tid
        readers[target] = []

    for rank in range(collective.num_ranks):
        for chunk, mask in collective.final(rank):
            got = value.get((rank, chunk), 0)
            if got != mask:
                raise VerificationError(
                    f"postcondition: rank {rank} ends with chunk {chunk} holding {_describe(got, collective.num_ranks)}"
                    f", expected {_describe(mask, collective.num_ranks)}")
    return max(depth, default=0)


def _describe(mask: int, num_ranks: int) -> str:
    if mask == 0:
        return "nothing"
    members = [r for r in range(num_ranks) if mask >> r & 1]
    if len(members) == num_ranks:
        return "every rank's contribution"
    shown = ", ".join(map(str, members[:8])) + (", ..." if len(members) > 8 else "")
    return f"the contribution(s) of rank(s) {shown}"
