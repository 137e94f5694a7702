"""Shared helpers for algorithms: relayed sends, rank orders, collective set-up, ordered building.

Routing itself (paths through forwarding nodes, relay chains) is a property of the topology and lives in
:mod:`synth.routing`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from synth.collectives import ROOTED, Collective, Kind, min_transfers, uneven_weights
from synth.errors import InputError
from synth.routing import chain_paths, neighbors, relay_chain
from synth.schedule import ScheduleBuilder
from synth.topology import Topology


@dataclass(frozen=True)
class Progress:
    """A progress event of a long synthesis, for a status line (the algorithms themselves print nothing).

    ``phase``: milp's ``"greedy"``, ``"solve"`` or ``"done"``; forest's ``"size choice"`` or ``"done"``.
    ``best_epochs`` and ``bound_epochs`` are milp's; ``message`` says what was just found.
    """

    phase: str
    collective: str
    best_epochs: int | None = None
    bound_epochs: int | None = None
    elapsed_s: float = 0.0
    message: str = ""


ProgressFunction = Callable[[Progress], None]


def check_progress(progress: object) -> None:
    """Refuse a ``progress`` option that is not a callable (or None)."""
    if progress is not None and not callable(progress):
        raise InputError("", "progress", f"expected a callable or None, got {progress!r}")


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

    limits.check_transfers(min_transfers(kind, n, chunks), f"{kind} on {n} gpus with {chunks} chunks")
    return collective


def sharded_collective(topology: Topology, kind: Kind, shards: Any, chunks: int | None = None,
                       root: int | None = None) -> Collective | None:
    """The allgatherv or reduce-scatterv :class:`Collective` of ``shards`` (one size per rank, any unit:
    :func:`synth.collectives.shard_weights`), ``chunks`` in all (a multiple of the weights' sum, default
    that sum: one chunk per unit of weight); None without shards or when they are all the same size."""
    weights = uneven_weights(kind, shards, topology.num_ranks)
    if weights is None:
        return None
    if root is not None:
        raise InputError("", "root", f"{kind} takes no root")
    total = sum(weights)
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1 or chunks % total):
        raise InputError("", "chunks", f"uneven shards {list(weights)} need chunks to be a multiple of {total}, "
                         f"got {chunks!r}")
    per_unit = 1 if chunks is None else chunks // total
    from synth import limits

    limits.check_transfers(min_transfers(kind, topology.num_ranks, total * per_unit),
                           f"{kind} on {topology.num_ranks} gpus with {total * per_unit} chunks")
    return Collective.uneven(kind, [w * per_unit for w in weights])


def alltoallv_collective(topology: Topology, demand: Any, chunks: int | None = None, root: int | None = None
                         ) -> Collective:
    """The alltoallv :class:`Collective` of an algorithm's ``demand`` option (see
    :func:`synth.demand.as_chunk_matrix`: a Demand, a Chunked, a chunk-count matrix, or None for 1 chunk per
    pair). ``chunks=K`` rounds that demand, as weights, to K chunks in all (:meth:`synth.demand.Demand.to_chunks`);
    ``root`` is refused."""
    from synth import limits
    from synth.demand import Demand, as_chunk_matrix

    if root is not None:
        raise InputError("", "root", "alltoallv takes no root")
    matrix = as_chunk_matrix(demand, topology.num_ranks)
    if chunks is not None:
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise InputError("", "chunks", f"expected a whole number of chunks >= 1, got {chunks!r}")
        matrix = Demand(topology.num_ranks, "weights", matrix).to_chunks(chunks=chunks).matrix
    collective = Collective.alltoallv(matrix)
    limits.check_transfers(collective.chunks, f"alltoallv on {topology.num_ranks} gpus with {collective.chunks} chunks")
    return collective


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

    def candidates(node: int, on_path: set[int]) -> list[int]:
        free = [v for v in adjacency[node] if v not in on_path]
        return sorted(free, key=lambda v: (sum(1 for w in adjacency[v] if w not in on_path), v))

    return spanning_walk(start, len(nodes), candidates, lambda path: start in adjacency[path[-1]], budget)


def spanning_walk(start: int, count: int, candidates: Callable[[int, set[int]], list[int]],
                  complete: Callable[[list[int]], bool], budget: int) -> list[int] | None:
    """A path of ``count`` distinct nodes from ``start`` that ``complete`` accepts, by depth-first search
    taking each node's onward choices in the order ``candidates(node, on_path)`` gives; None when none is
    found within ``budget`` steps. The search behind :func:`hamiltonian_cycle` and the rings' paths.

    Examples
    --------
    >>> line = {0: [1], 1: [0, 2], 2: [1]}
    >>> spanning_walk(0, 3, lambda v, seen: [w for w in line[v] if w not in seen], lambda p: True, 100)
    [0, 1, 2]
    """
    path = [start]
    on_path = {start}
    steps = 0
    stack = [iter(candidates(start, on_path))]
    while stack:
        steps += 1
        if steps > budget:
            return None
        if len(path) == count:
            if complete(path):
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
        stack.append(iter(candidates(nxt, on_path)))
    return None


def hamiltonian_ring(topology: Topology, budget: int = 200_000) -> list[int] | None:
    """A cycle through every rank using switch-only hops (see :func:`hamiltonian_cycle`), or None."""
    n = topology.num_ranks
    adjacency = {rank: set(neighbors(topology, rank, via_gpus=False)) for rank in range(n)}
    if any(not neighbours for neighbours in adjacency.values()):
        return None
    if all(len(neighbours) == n - 1 for neighbours in adjacency.values()):
        return list(range(n))
    return hamiltonian_cycle(adjacency, budget)


def relay_free_mapping(topology: Topology, pairs: Iterable[tuple[int, int]], budget: int = 50_000) -> list[int] | None:
    """A rank mapping under which every virtual pair talks without a relay, or None.

    ``pairs`` are the (virtual) rank pairs an algorithm exchanges data between, in both directions.
    Returns ``mapping`` with ``mapping[v]`` the physical rank playing virtual rank v such that a path
    through switches and forwarding gpus joins ``mapping[a]`` and ``mapping[b]`` both ways for every
    pair: the identity when it works, else the first one a depth-first search finds (virtual ranks in
    breadth-first order from rank 0; for virtual rank v, physical rank v first, then the others in rank
    order) within ``budget`` steps.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> relay_free_mapping(load_topology("ring:n=4,bandwidth=1"), [(0, 2), (1, 3)])  # ring gpus forward
    [0, 1, 2, 3]
    >>> relay_free_mapping(load_topology("dgx1"), [(0, 5), (5, 2)])  # no NVLink 0-5: 5 is played by 1
    [0, 3, 2, 4, 5, 1, 6, 7]
    """
    n = topology.num_ranks
    wanted: dict[int, set[int]] = {v: set() for v in range(n)}
    for a, b in pairs:
        if a != b:
            wanted[a].add(b)
            wanted[b].add(a)
    near = [set(neighbors(topology, r)) for r in range(n)]
    both = [{v for v in near[r] if r in near[v]} for r in range(n)]
    if all(b in both[a] for a in range(n) for b in wanted[a]):
        return list(range(n))
    order: list[int] = []
    seen: set[int] = set()
    for start in range(n):
        if start in seen:
            continue
        seen.add(start)
        queue = [start]
        while queue:
            v = queue.pop(0)
            order.append(v)
            for w in sorted(wanted[v] - seen):
                seen.add(w)
                queue.append(w)
    mapping: list[int] = [-1] * n
    used = [False] * n
    steps = 0

    def place(index: int) -> bool:
        nonlocal steps
        if index == n:
            return True
        v = order[index]
        placed = [mapping[w] for w in wanted[v] if mapping[w] >= 0]
        for physical in (v, *range(n)):  # the identity first, then rank order
            steps += 1
            if steps > budget:
                return False
            if used[physical] or not all(physical in both[p] for p in placed):
                continue
            mapping[v], used[physical] = physical, True
            if place(index + 1):
                return True
            mapping[v], used[physical] = -1, False
        return False

    import sys

    limit = sys.getrecursionlimit()
    if n + 100 > limit:
        sys.setrecursionlimit(n + 100)
    try:
        return mapping if place(0) else None
    finally:
        sys.setrecursionlimit(limit)


def send(builder: ScheduleBuilder, topology: Topology, src: int, dst: int, chunk: int,
         op: Literal["copy", "reduce"] = "copy", deps: Iterable[int] = (), *, src_scratch: int | None = None,
         dst_scratch: int | None = None) -> int:
    """Add the transfers that move ``chunk`` from rank ``src`` to rank ``dst`` and return the id of the
    last one (the one that writes ``dst``).

    One transfer when a path through switches and forwarding gpus joins them; otherwise a relay chain
    (:func:`synth.routing.relay_chain`): a copy into a fresh scratch slot of the first relay gpu, a
    dependent copy onward into the next one's, ..., and the last hop applies ``op``. Scratch keeps a
    relayed partial sum away from the relay's own contribution. ``deps`` go on the first transfer.

    Examples
    --------
    >>> from synth.collectives import Collective, Kind
    >>> from synth.library import load_topology
    >>> dgx1 = load_topology("dgx1")
    >>> b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 8, 1), dgx1.name, dgx1.gpus, "manual")
    >>> send(b, dgx1, 0, 5, 0, "reduce")
    1
    >>> [(t.src, t.dst, t.op, t.dst_scratch, t.deps) for t in b.transfers]
    [(0, 1, 'copy', 0, ()), (1, 5, 'reduce', None, (0,))]
    """
    paths = chain_paths(topology, src, dst)
    if len(paths) == 1:
        return builder.add(src, dst, chunk, paths[0], op, deps, src_scratch, dst_scratch)
    chain = relay_chain(topology, src, dst)
    at, slot, hop_deps = src, src_scratch, list(deps)
    for relay, path in zip(chain[1:-1], paths, strict=False):
        into = builder.new_scratch(relay)
        tid = builder.add(at, relay, chunk, path, "copy", hop_deps, slot, into)
        at, slot, hop_deps = relay, into, [tid]
    return builder.add(at, dst, chunk, paths[-1], op, hop_deps, slot, dst_scratch)


class OrderedBuilder(ScheduleBuilder):
    """A :class:`~synth.schedule.ScheduleBuilder` that adds the deps the verifier's ordering rules need.

    Transfers are added in a valid sequential program order; each new transfer automatically depends on
    the last writer of the cell it reads, the last writer of the cell it writes, and every reader of the
    cell it writes since that write (read-after-write, write-after-write, write-after-read); a cell is a
    data cell (rank, chunk) or a scratch slot of a rank. ``deps``
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
            deps: Iterable[int] = (), src_scratch: int | None = None, dst_scratch: int | None = None) -> int:
        """Append a transfer ordered after every earlier access it conflicts with; return its id."""
        source = (src, chunk) if src_scratch is None else (src, -1 - src_scratch)
        target = (dst, chunk) if dst_scratch is None else (dst, -1 - dst_scratch)
        needed = set(deps)
        for cell in (source, target):
            writer = self._last_writer.get(cell)
            if writer is not None:
                needed.add(writer)
        needed.update(self._readers.get(target, ()))
        tid = super().add(src, dst, chunk, path, op, needed, src_scratch, dst_scratch)
        self._readers.setdefault(source, []).append(tid)
        self._last_writer[target] = tid
        self._readers[target] = []
        return tid
