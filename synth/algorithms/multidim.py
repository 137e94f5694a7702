"""Collectives on multi-dimensional systems: one ring per dimension in turn, and a Themis-style scheduler.

A multi-dimensional system (``topology.dimensions``, built by the ``multidim``, ``torus``, ``tpu-v4``,
``hypercube``... builders) places rank r at coordinates (x0, x1, ...) with r = x0 + n0*(x1 + n1*x2 ...);
dimension d joins the p_d ranks that differ only in x_d (a *line*).

Hierarchical allreduce over dimensions in the order d1, d2, ..., dD: reduce-scatter along d1 (a ring in
every line), then along d2 on the 1/p_d1 share each rank kept, ..., then allgather back along dD, ...,
d1. Reduce-scatter is the first half, allgather the second. On dimensions with per-link bandwidth B_d
the time is T = Σ_d 2((p_d-1)/p_d)·(n / Π_{e<d} p_e) / B_d (cost-models.md), which depends on the order:
a slow dimension placed first carries the most data.

``scheduler="baseline"`` runs every chunk through the dimensions in one fixed order (``order``,
default 0, 1, ..., D-1). ``scheduler="themis"`` splits the data into ``splits`` parts and picks each
part's order greedily, as Themis (ISCA 2022) does: it keeps the load (seconds of transfer) already put on
every dimension, and gives the part's first phase, the one with the most data, to the least-loaded
dimension, the next phase to the next least loaded, and so on (ties: faster dimension first). Parts
then run concurrently on different dimensions, which approaches the bound 2((P-1)/P)·n / Σ_d B_d.

Per-chunk chains: each chunk c has a target rank q (its owner for reduce-scatter and allgather; for
allreduce the data is cut into N equal shares, share q "owned" by rank q). In a reduce-scatter phase
along d, every line that holds partial sums of c reduces them around its ring towards the member with
x_d = q_d; an allgather phase copies c around the ring from that member. The engine,
:func:`grid_schedule`, is shared with :mod:`synth.algorithms.hierarchical`. Ring neighbours that no path
through switches and forwarding gpus joins exchange through relay gpus' scratch
(:func:`synth.algorithms.utils.send`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

from synth.algorithms.utils import OrderedBuilder, make_collective, send
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.schedule import COPY, REDUCE, Schedule
from synth.topology import Topology

SCHEDULERS = ("baseline", "themis")

#: ``line_order(d, line)`` -> the coordinate values along dimension d in ring order for the line whose
#: other coordinates are ``line`` (a tuple with None at position d).
LineOrder = Callable[[int, tuple[int | None, ...]], list[int]]


def grid_schedule(topology: Topology, kind: Kind, sizes: Sequence[int], rank_at: dict[tuple[int, ...], int],
                  chunks: int, dim_orders: Sequence[Sequence[int]], algorithm: str,
                  params: dict[str, object], line_order: LineOrder | None = None) -> Schedule:
    """Build a hierarchical ring schedule on a grid of ranks (see the module docstring).

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``allgather``, ``reducescatter`` or ``allreduce``.
    sizes : sequence of int
        Grid sizes p_d (their product is the rank count).
    rank_at : dict
        Coordinates -> rank, for every rank.
    chunks : int
        Total chunks C, a multiple of N * len(dim_orders).
    dim_orders : sequence of sequences of int
        One dimension order per part; chunk c (local index l within its share) belongs to part
        l mod len(dim_orders). Reduce-scatter phases follow the order, allgather phases the reverse.
    algorithm, params : str, dict
        Recorded in the schedule.
    line_order : callable, optional
        Ring order of each line (default: coordinates 0..p_d-1).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> topo = load_topology("torus:dims=2x2")
    >>> at = {(r % 2, r // 2): r for r in range(4)}
    >>> s = grid_schedule(topo, Kind.ALLGATHER, (2, 2), at, 4, [[0, 1]], "demo", {})
    >>> len(s.transfers)  # each chunk: 1 copy along dim 1, then 2 along dim 0
    12
    """
    n = topology.num_ranks
    dims = len(sizes)
    if math.prod(sizes) != n or len(rank_at) != n:
        raise InputError("", "dimensions", f"grid {list(sizes)} does not cover the {n} ranks")
    coll = make_collective(topology, kind, chunks, None, default_chunks=n)
    parts = len(dim_orders)
    if coll.chunks % (n * parts):
        raise InputError("", "chunks", f"{algorithm} needs chunks to be a multiple of {n * parts} (ranks x parts), "
                         f"got {coll.chunks}")
    for order in dim_orders:
        if sorted(order) != list(range(dims)):
            raise InputError("", "order", f"expected a permutation of the dimensions 0..{dims - 1}, got {list(order)}")
    coords_of = {rank: coords for coords, rank in rank_at.items()}
    per = coll.chunks // n
    builder = OrderedBuilder(coll, topology.name, topology.gpus, algorithm, params)
    rings: dict[tuple[int, tuple[int | None, ...]], list[int]] = {}

    def ring_of(d: int, line: tuple[int | None, ...]) -> list[int]:
        key = (d, line)
        if key not in rings:
            values = line_order(d, line) if line_order else list(range(sizes[d]))
            if sorted(values) != list(range(sizes[d])):
                raise InputError("", "order", f"ring order {values} of dimension {d} is not a permutation")
            rings[key] = values
        return rings[key]

    def move(a: int, b: int, chunk: int, op: str) -> None:
        send(builder, topology, a, b, chunk, op)  # type: ignore[arg-type]

    def lines(fixed: dict[int, int], d: int) -> list[tuple[int | None, ...]]:
        """Every line along d whose coordinates agree with ``fixed`` (dim -> value)."""
        free = [e for e in range(dims) if e != d and e not in fixed]
        result = []
        for values in _product_range([sizes[e] for e in free]):
            line: list[int | None] = [None] * dims
            for e, v in fixed.items():
                line[e] = v
            for e, v in zip(free, values, strict=True):
                line[e] = v
            result.append(tuple(line))
        return result

    def member(line: tuple[int | None, ...], d: int, value: int) -> int:
        coords = tuple(value if e == d else line[e] for e in range(dims))
        return rank_at[coords]  # type: ignore[index]

    for chunk in range(coll.chunks):
        target = chunk // per
        order = dim_orders[(chunk % per) % parts]
        goal = coords_of[target]
        if kind in (Kind.REDUCESCATTER, Kind.ALLREDUCE):
            fixed: dict[int, int] = {}
            for d in order:
                for line in lines(fixed, d):
                    ring = ring_of(d, line)
                    t = ring.index(goal[d])
                    p = len(ring)
                    for step in range(p - 1):
                        move(member(line, d, ring[(t + 1 + step) % p]), member(line, d, ring[(t + 2 + step) % p]),
                             chunk, REDUCE)
                fixed[d] = goal[d]
        if kind in (Kind.ALLGATHER, Kind.ALLREDUCE):
            fixed = {d: goal[d] for d in order}
            for d in reversed(order):
                del fixed[d]
                for line in lines(fixed, d):
                    ring = ring_of(d, line)
                    t = ring.index(goal[d])
                    p = len(ring)
                    for step in range(p - 1):
                        move(member(line, d, ring[(t + step) % p]), member(line, d, ring[(t + step + 1) % p]),
                             chunk, COPY)
    return builder.build()


def _product_range(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    result: list[tuple[int, ...]] = [()]
    for size in sizes:
        result = [prefix + (v,) for prefix in result for v in range(size)]
    return result


def themis_orders(sizes: Sequence[int], bandwidths: Sequence[float], parts: int, kind: Kind) -> list[list[int]]:
    """Themis-style greedy dimension order for each of ``parts`` equal parts of the data.

    Each part's phases, in order, carry 1, 1/p_first, 1/(p_first p_second), ... of the part; a phase on
    dimension d costs (p_d-1)/p_d x (its data) / B_d (twice for allreduce) of that dimension's time.
    Keeping the load already given to every dimension, each part takes the order that leaves the
    loads most balanced: the smallest largest load, then the smallest second largest, and so on (every
    order is tried for up to 5 dimensions; beyond that the least-loaded dimension goes first, as in
    Themis). Ties go to the lower order, so the result is deterministic.

    Examples
    --------
    >>> themis_orders([4, 4], [50.0, 400.0], 4, Kind.ALLREDUCE)
    [[1, 0], [1, 0], [1, 0], [1, 0]]
    >>> themis_orders([2, 2], [50.0, 50.0], 2, Kind.ALLREDUCE)
    [[0, 1], [1, 0]]
    """
    factor = 2.0 if kind == Kind.ALLREDUCE else 1.0
    count = len(sizes)
    loads = [0.0] * count

    def added(order: Sequence[int]) -> list[float]:
        extra = [0.0] * count
        data = 1.0 / parts
        for d in order:
            extra[d] = factor * (sizes[d] - 1) / sizes[d] * data / bandwidths[d]
            data /= sizes[d]
        return extra

    if count <= 5:
        candidates = [list(order) for order in itertools.permutations(range(count))]
    else:
        candidates = []
    orders: list[list[int]] = []
    for _ in range(parts):
        if candidates:
            now = tuple(loads)
            best = min(candidates, key=lambda order: _balance(now, added(order), order))
        else:
            best = sorted(range(count), key=lambda d: (loads[d], -bandwidths[d], d))
        extra = added(best)
        loads = [loads[d] + extra[d] for d in range(count)]
        orders.append(best)
    return orders


def _balance(loads: Sequence[float], extra: Sequence[float], order: list[int]) -> tuple[list[float], list[int]]:
    """Sort key of an order: the resulting loads, largest first, then the order itself."""
    return sorted((a + b for a, b in zip(loads, extra, strict=True)), reverse=True), order


def multidim(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
             scheduler: str = "baseline", order: Sequence[int] | None = None, splits: int | None = None) -> Schedule:
    """Hierarchical collective over the topology's dimensions (baseline order or Themis).

    Parameters
    ----------
    topology : Topology
        Must have ``dimensions``.
    kind : Kind
        ``allgather``, ``reducescatter`` or ``allreduce``.
    chunks : int, optional
        Total chunks C, a multiple of N * splits (default N * splits).
    scheduler : {"baseline", "themis"}
        Fixed order for every chunk, or Themis's per-part greedy orders.
    order : list of int, optional
        The baseline's dimension order (default 0, 1, ..., D-1).
    splits : int, optional
        Parts the data is split into (default 1 for baseline, 2 x D for themis).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> topo = load_topology("multidim:sizes=4x2,bandwidths=50x400")
    >>> multidim(topo, Kind.ALLREDUCE, scheduler="themis").params["orders"][:2]
    [[1, 0], [1, 0]]
    """
    if topology.dimensions is None:
        raise NotApplicable(f"topology {topology.name!r} has no dimensions (build it with multidim, torus, tpu-v4 "
                            "or hypercube, or give 'dimensions' in the file)")
    if scheduler not in SCHEDULERS:
        raise InputError("", "scheduler", f"expected one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    dims = topology.dimensions
    sizes = [d.size for d in dims]
    if splits is None:
        splits = 2 * len(dims) if scheduler == "themis" else 1
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise InputError("", "splits", f"expected a positive integer, got {splits!r}")
    n = topology.num_ranks
    if scheduler == "themis":
        if order is not None:
            raise InputError("", "order", "themis chooses the orders itself; 'order' is for the baseline")
        orders = themis_orders(sizes, [d.bandwidth for d in dims], splits, kind)
    else:
        fixed = list(order) if order is not None else list(range(len(dims)))
        orders = [fixed] * splits
    at: dict[tuple[int, ...], int] = {}
    for rank in range(n):
        coords = []
        rest = rank
        for size in sizes:
            coords.append(rest % size)
            rest //= size
        at[tuple(coords)] = rank
    total = chunks if chunks is not None else n * splits
    params: dict[str, object] = {"scheduler": scheduler, "chunks": total, "splits": splits, "sizes": sizes,
                                 "orders": orders}
    return grid_schedule(topology, kind, sizes, at, total, orders, "multidim", params)
