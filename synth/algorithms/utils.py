"""Shared helpers for algorithms: routing between gpus, rank orders, collective set-up."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Literal

from synth.collectives import ROOTED, Collective, Kind
from synth.errors import InputError, NotApplicable
from synth.schedule import ScheduleBuilder
from synth.topology import Topology


def make_collective(topology: Topology, kind: Kind, chunks: int | None, root: int | None,
                    default_chunks: int | None = None) -> Collective:
    """Build the :class:`Collective` for an algorithm call, with clear errors for bad options."""
    n = topology.num_ranks
    if chunks is None:
        chunks = default_chunks if default_chunks is not None else (1 if kind in ROOTED or kind == Kind.ALLREDUCE else n)
    if kind in ROOTED and root is None:
        root = 0
    if kind not in ROOTED and root is not None:
        raise InputError("", "root", f"{kind} takes no root")
    collective = Collective(kind, n, chunks, root)
    from synth import limits  # refuse up front what no schedule could do within the transfer limit

    limits.check_transfers(limits.min_transfers(kind, n, chunks), f"{kind} on {n} gpus with {chunks} chunks")
    return collective


@lru_cache(maxsize=128)
def _routes(topology: Topology, source: str, through_gpus: bool) -> dict[str, tuple[str, ...]]:
    """Shortest paths (fewest hops, then widest bottleneck, then node order) from ``source`` to every gpu.
    Unless ``through_gpus``, paths enter only switches on the way (gpus may only be path ends)."""
    graph = topology.graph
    order = {node: i for i, node in enumerate(graph.nodes)}
    best: dict[str, tuple[int, float, tuple[str, ...]]] = {source: (0, float("inf"), (source,))}
    queue = deque([source])
    while queue:
        node = queue.popleft()
        hops, width, path = best[node]
        if not through_gpus and node != source and topology.is_gpu(node):
            continue
        for nxt in sorted(graph.successors(node), key=order.__getitem__):
            candidate = (hops + 1, min(width, topology.bandwidth(node, nxt)), path + (nxt,))
            known = best.get(nxt)
            if known is None:
                best[nxt] = candidate
                queue.append(nxt)
            elif known[0] == candidate[0] and candidate[1] > known[1]:
                best[nxt] = candidate
    return {node: entry[2] for node, entry in best.items() if node != source and topology.is_gpu(node)}


def _switch_routes(topology: Topology, source: str) -> dict[str, tuple[str, ...]]:
    return _routes(topology, source, False)


def _any_routes(topology: Topology, source: str) -> dict[str, tuple[str, ...]]:
    return _routes(topology, source, True)


def route(topology: Topology, src: int, dst: int) -> tuple[str, ...]:
    """A deterministic shortest path from rank ``src`` to rank ``dst``: through switches only when
    possible, otherwise through other gpus (which then forward the bytes)."""
    a, b = topology.gpus[src], topology.gpus[dst]
    path = _switch_routes(topology, a).get(b)
    if path is None:
        path = _any_routes(topology, a).get(b)
    if path is None:  # connectivity is checked on load, so this is a bug
        raise NotApplicable(f"no path from {a} to {b}")
    return path


def direct_neighbors(topology: Topology, rank: int) -> list[int]:
    """Ranks reachable from ``rank`` through switches only (no other gpu on the way), in rank order."""
    routes = _switch_routes(topology, topology.gpus[rank])
    return sorted(topology.rank_of[g] for g in routes)


def hamiltonian_cycle(adjacency: dict[int, set[int]], budget: int = 100_000) -> list[int] | None:
    """A cycle through every key of ``adjacency`` (undirected neighbour sets), by depth-first search
    that tries the neighbour with the fewest free onward choices first; None within ``budget`` steps.

    Deterministic: ties are broken by node number.

    Examples
    --------
    >>> hamiltonian_cycle({0: {1, 3}, 1: {0, 2}, 2: {1, 3}, 3: {0, 2}})
    [0, 1, 2, 3]
    """
    nodes = sorted(adjacency)
    if len(nodes) < 2:
        return nodes or None
    if len(nodes) == 2:
        a, b = nodes
        return nodes if b in adjacency[a] else None
    start = nodes[0]
    path = [start]
    on_path = {start}
    steps = 0

    def candidates(node: int) -> list[int]:
        free = [v for v in adjacency[node] if v not in on_path]
        return sorted(free, key=lambda v: (sum(1 for w in adjacency[v] if w not in on_path), v))

    stack = [iter(candidates(start))]
    while stack:
        steps += 1
        if steps > budget:
            return None
        if len(path) == len(nodes):
            if start in adjacency[path[-1]]:
                return path
            on_path.discard(path.pop())
            stack.pop()
            continue
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            if len(path) > 1:
                on_path.discard(path.pop())
            continue
        path.append(nxt)
        on_path.add(nxt)
        stack.append(iter(candidates(nxt)))
    return None


def hamiltonian_ring(topology: Topology, budget: int = 200_000) -> list[int] | None:
    """A cycle through every rank using switch-only hops (see :func:`hamiltonian_cycle`), or None."""
    n = topology.num_ranks
    adjacency = {rank: set(direct_neighbors(topology, rank)) for rank in range(n)}
    if any(not neighbours for neighbours in adjacency.values()):
        return None
    if all(len(neighbours) == n - 1 for neighbours in adjacency.values()):
        return list(range(n))
    return hamiltonian_cycle(adjacency, budget)
    if all(len(adj) == n - 1 for adj in adjacency):
        return list(range(n))
    start = 0
    path = [start]
    on_path = [False] * n
    on_path[start] = True
    steps = 0

    def candidates(node: int) -> list[int]:
        free = [v for v in adjacency[node] if not on_path[v]]
        return sorted(free, key=lambda v: (sum(1 for w in adjacency[v] if not on_path[w]), v))

    stack = [iter(candidates(start))]
    while stack:
        steps += 1
        if steps > budget:
            return None
        if len(path) == n:
            if start in adjacency[path[-1]]:
                return path
            on_path[path.pop()] = False
            stack.pop()
            continue
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            if len(path) > 1:
                on_path[path.pop()] = False
            continue
        path.append(nxt)
        on_path[nxt] = True
        stack.append(iter(candidates(nxt)))
    return None


class OrderedBuilder(ScheduleBuilder):
    """A :class:`~synth.schedule.ScheduleBuilder` that adds the deps the verifier's ordering rules need.

    Transfers are added in a valid sequential program order; each new transfer automatically depends on
    the last writer of the cell it reads, the last writer of the cell it writes, and every reader of the
    cell it writes since that write (read-after-write, write-after-write, write-after-read). ``deps``
    passed to :meth:`add` are kept as extra ordering (for example lock-step rounds).

    Examples
    --------
    >>> from synth.collectives import Collective, Kind
    >>> b = OrderedBuilder(Collective(Kind.ALLREDUCE, 3, 1), "t", ("a", "b", "c"), "manual")
    >>> b.add(0, 2, 0, ("a", "c"), "reduce"), b.add(1, 2, 0, ("b", "c"), "reduce")
    (0, 1)
    >>> b.transfers[1].deps  # the second reduce into rank 2 is chained after the first
    (0,)
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_writer: dict[tuple[int, int], int] = {}
        self._readers: dict[tuple[int, int], list[int]] = {}

    def add(self, src: int, dst: int, chunk: int, path: Iterable[str], op: Literal["copy", "reduce"] = "copy",
            deps: Iterable[int] = ()) -> int:
        """Append a transfer ordered after every earlier access it conflicts with; return its id."""
        source, target = (src, chunk), (dst, chunk)
        needed = set(deps)
        for cell in (source, target):
            writer = self._last_writer.get(cell)
            if writer is not None:
                needed.add(writer)
        needed.update(self._readers.get(target, ()))
        tid = super().add(src, dst, chunk, path, op, needed)
        self._readers.setdefault(source, []).append(tid)
        self._last_writer[target] = tid
        self._readers[target] = []
        return tid
