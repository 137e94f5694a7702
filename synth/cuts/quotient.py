"""Quotient networks: exact max-flows on a fabric's symmetry classes instead of its nodes.

The cut bound's flow test asks, for every gpu v, whether max-flow(s -> v) reaches a requirement (see
:mod:`~synth.cuts.allgather`). On a cluster of identical boxes, rails and pods two things make
that cheap without giving up exactness:

1. **One gpu per orbit.** An automorphism of the network that keeps every root's weight maps the flow
   problem for v onto the one for its image, so gpus in one orbit have the same max-flow value; the
   test asks one representative per orbit (:func:`~synth.cuts.symmetry.gpu_orbits` finds
   verified automorphisms).
2. **A quotient per representative.** Take a partition of the nodes in which s and v are cells of their
   own and which is *equitable* for every bandwidth class: any two nodes of a cell A have, for every cell
   B and every bandwidth b, the same number of arcs of bandwidth b into B, and the same number out of B.
   Contract each cell to one node and give the arc A -> B the summed capacity of the arcs from A to B.
   Then max-flow(s -> v) is the same in the quotient as in the network: a flow of the network sums to a
   quotient flow of the same value, and a quotient flow spreads back over the arcs in proportion to their
   capacities (equitability makes every node of a cell send and receive exactly ``1/|A|`` of its
   cell's share, so conservation and capacities hold). A minimum cut of the quotient, read as a union of
   cells, is a minimum cut of the network. No automorphism is needed for this step.

The partition is the coarsest one found by colour refinement (1-dimensional Weisfeiler-Leman) starting
from gpus by weight, switches, and v on its own. Refinement hashes the neighbour multisets, so it is
followed by an exact check of equitability (integer counts); a check that fails (a hash collision, which
has not been seen) falls back to the network itself. On ``dgx-a100:boxes=8192`` (65,536 gpus, 139,266
nodes) the quotient for a gpu has a few dozen cells.

Partitions depend on the network only (not on capacities that are functions of the bandwidth), so they
are computed once per representative and reused by every test of the parametric search and of the tree
count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from synth.cuts.network import FlowSolver, Network

_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_SEEDS = (0x9E3779B97F4A7C15, 0xD1B54A32D192ED03)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _C1
        x = x ^ (x >> np.uint64(27))
        x = x * _C2
        return x ^ (x >> np.uint64(31))


@dataclass
class _Arrays:
    """The network as numpy arrays, arcs grouped by tail and by head."""

    tails: np.ndarray
    heads: np.ndarray
    classes: np.ndarray  # bandwidth class of each arc (index into ``class_units``)
    class_units: list[int]
    first_arc: list[int]  # one arc of each class
    by_tail: np.ndarray
    tail_ptr: np.ndarray
    by_head: np.ndarray
    head_ptr: np.ndarray


def arrays(net: Network) -> _Arrays:
    """The network's numpy form (cached on the network)."""
    cached = net.cache.get("arrays")
    if cached is not None:
        return cached
    tails = np.asarray(net.tails, dtype=np.int64)
    heads = np.asarray(net.heads, dtype=np.int64)
    class_of: dict[int, int] = {}
    first_arc: list[int] = []
    classes = np.empty(len(net.units), dtype=np.int64)
    for arc, unit in enumerate(net.units):
        index = class_of.get(unit)
        if index is None:
            index = class_of[unit] = len(first_arc)
            first_arc.append(arc)
        classes[arc] = index
    by_tail = np.argsort(tails, kind="stable")
    by_head = np.argsort(heads, kind="stable")
    nodes = net.num_nodes
    tail_ptr = np.concatenate(([0], np.cumsum(np.bincount(tails, minlength=nodes))))
    head_ptr = np.concatenate(([0], np.cumsum(np.bincount(heads, minlength=nodes))))
    result = _Arrays(tails, heads, classes, list(class_of), first_arc, by_tail, tail_ptr, by_head, head_ptr)
    net.cache["arrays"] = result
    return result


def _segment_sums(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Wrapping uint64 sums of consecutive segments ``values[ptr[i]:ptr[i+1]]``."""
    with np.errstate(over="ignore"):
        cumulative = np.concatenate((np.zeros(1, dtype=np.uint64), np.cumsum(values, dtype=np.uint64)))
        return cumulative[ptr[1:]] - cumulative[ptr[:-1]]


def refine(net: Network, colours: np.ndarray, seed: int = 0) -> np.ndarray:
    """The coarsest refinement of ``colours`` that colour refinement reaches (hash-based; see
    :func:`quotient` for the exact check). Colours are renumbered 0..C-1.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> net = Network.from_topology(load_topology("ring:n=6"))
    >>> start = np.zeros(net.num_nodes, dtype=np.int64); start[0] = 1
    >>> colours = refine(net, start).tolist()  # cells by distance from gpu0 on the ring: 0, 1, 2, 3
    >>> len(set(colours)), colours[1] == colours[5], colours[2] == colours[4], colours[1] == colours[2]
    (4, True, True, False)
    """
    a = arrays(net)
    salt = np.uint64(_SEEDS[seed % 2] + seed)
    class_key = _mix(a.classes.astype(np.uint64) + salt)
    class_key_in = _mix(class_key ^ salt)
    _, colours = np.unique(colours, return_inverse=True)
    count = int(colours.max()) + 1 if len(colours) else 0
    while True:
        with np.errstate(over="ignore"):
            node_key = _mix(colours.astype(np.uint64) * np.uint64(0x100000001B3) + salt)
            outward = _mix(node_key[a.heads] ^ class_key)
            inward = _mix(node_key[a.tails] + class_key_in)
            out_sum = _segment_sums(outward[a.by_tail], a.tail_ptr)
            in_sum = _segment_sums(inward[a.by_head], a.head_ptr)
            key = _mix(out_sum ^ salt) + _mix(_mix(in_sum) + salt)
        order = np.lexsort((key, colours))
        sorted_colours = colours[order]
        sorted_keys = key[order]
        change = np.empty(len(order), dtype=bool)
        change[0] = True
        change[1:] = (sorted_colours[1:] != sorted_colours[:-1]) | (sorted_keys[1:] != sorted_keys[:-1])
        fresh = np.empty(len(order), dtype=np.int64)
        fresh[order] = np.cumsum(change) - 1
        new_count = int(fresh.max()) + 1
        colours = fresh
        if new_count == count:
            return colours
        count = new_count


@dataclass
class Quotient:
    """A network contracted along an equitable partition.

    Attributes
    ----------
    colours : numpy.ndarray
        Cell of every node.
    cells : int
        Number of cells.
    tails, heads, classes, counts : list of int
        Quotient arcs: cell -> cell, the bandwidth class, and how many network arcs of that class run
        from the one cell to the other.
    """

    colours: np.ndarray
    cells: int
    tails: list[int]
    heads: list[int]
    classes: list[int]
    counts: list[int]


def _grouped_counts(node: np.ndarray, other_cell: np.ndarray, classes: np.ndarray, colours: np.ndarray,
                    sizes: np.ndarray, cells: int, num_classes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """For arcs (node, a node of cell other_cell, class): check that every node of a cell has the same count
    per (other cell, class); return the groups (cell, other cell, class) as one key and their total counts,
    or None when the partition is not equitable."""
    width = cells * num_classes
    per_node = (node * cells + other_cell) * num_classes + classes
    keys, counts = np.unique(per_node, return_counts=True)
    owners = keys // width
    rest = keys % width
    group_keys = colours[owners] * width + rest
    order = np.lexsort((counts, group_keys))
    group_keys, counts = group_keys[order], counts[order]
    starts = np.flatnonzero(np.concatenate(([True], group_keys[1:] != group_keys[:-1])))
    ends = np.concatenate((starts[1:], [len(group_keys)]))
    groups = group_keys[starts]
    cell_of_group = groups // width
    if not np.array_equal(ends - starts, sizes[cell_of_group]):  # some node of the cell has none
        return None
    if not np.array_equal(counts[starts], counts[ends - 1]):  # counts differ inside a cell
        return None
    return groups, counts[starts] * (ends - starts)


def quotient(net: Network, colours: np.ndarray) -> Quotient | None:
    """The quotient along ``colours`` when that partition is equitable for every bandwidth class, else None.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> net = Network.from_topology(load_topology("switch:n=4"))
    >>> q = quotient(net, np.array([0, 1, 1, 1, 2]))  # gpu0 | gpus 1-3 | the switch
    >>> sorted(zip(q.tails, q.heads, q.counts))
    [(0, 2, 1), (1, 2, 3), (2, 0, 1), (2, 1, 3)]
    """
    a = arrays(net)
    colours = np.asarray(colours, dtype=np.int64)
    cells = int(colours.max()) + 1
    sizes = np.bincount(colours, minlength=cells)
    num_classes = len(a.class_units)
    if (net.num_nodes * cells + cells) * num_classes >= 2**62:
        return None
    outward = _grouped_counts(a.tails, colours[a.heads], a.classes, colours, sizes, cells, num_classes)
    inward = _grouped_counts(a.heads, colours[a.tails], a.classes, colours, sizes, cells, num_classes)
    if outward is None or inward is None:
        return None
    groups, totals = outward
    width = cells * num_classes
    # the inward view must describe the same arcs: (head cell, tail cell, class) with the same totals
    in_groups, in_totals = inward
    swapped = ((in_groups % width) // num_classes * cells + in_groups // width) * num_classes + in_groups % num_classes
    order = np.argsort(swapped)
    if not (np.array_equal(swapped[order], groups) and np.array_equal(in_totals[order], totals)):
        return None
    tails = (groups // width).tolist()
    heads = ((groups % width) // num_classes).tolist()
    classes = (groups % num_classes).tolist()
    return Quotient(colours, cells, tails, heads, classes, totals.tolist())


def base_partition(net: Network, weights: Sequence[int]) -> np.ndarray:
    """Colour refinement from gpus by root weight and switches (cached on the network per weights)."""
    key = ("base", tuple(weights))
    cached = net.shared.get(key)
    if cached is not None:
        return cached
    start = np.full(net.num_nodes, -1, dtype=np.int64)
    start[:len(weights)] = np.asarray(weights, dtype=np.int64)
    colours = refine(net, start)
    net.shared[key] = colours
    return colours


def gpu_quotient(net: Network, weights: Sequence[int], gpu: int) -> Quotient | None:
    """The quotient in which ``gpu`` is a cell of its own (None when no equitable partition was found).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> net = Network.from_topology(load_topology("dgx-a100:boxes=64"))
    >>> q = gpu_quotient(net, [1] * 512, 0)
    >>> net.num_nodes, q.cells
    (1090, 14)
    """
    key = ("gpu", tuple(weights), gpu)
    if key in net.cache:
        return net.cache[key]
    shared = net.shared.get(key)  # the partition found for the other direction
    if shared is not None:
        net.cache[key] = quotient(net, shared)
        if net.cache[key] is not None:
            return net.cache[key]
    base = base_partition(net, weights)
    result = None
    for seed in range(2):
        start = base * 2
        start[gpu] = 2 * int(base.max()) + 3
        colours = refine(net, start, seed)
        if np.count_nonzero(colours == colours[gpu]) != 1:
            continue
        result = quotient(net, colours)
        if result is not None:
            net.shared[key] = colours
            break
    net.cache[key] = result
    return result


class QuotientCutOracle:
    """:class:`~synth.cuts.allgather.CutOracle`'s test on quotient networks, one per orbit.

    ``representatives`` are one gpu per orbit of a weight-preserving automorphism group (the caller's
    promise; :func:`~synth.cuts.symmetry.gpu_orbits` keeps it); ``quotients`` their quotient
    networks. Capacities passed to :meth:`configure` must be a function of the arc's bandwidth (every
    caller's are: multiples of it, or trees per link rounded down).
    """

    def __init__(self, net: Network, weights: Sequence[int], representatives: Sequence[int],
                 quotients: Sequence[Quotient]) -> None:
        self.net = net
        self.weights = list(weights)
        self.total_weight = sum(self.weights)
        self.representatives = list(representatives)
        self.quotients = list(quotients)
        a = arrays(net)
        self._classes = a.classes
        self._first_arc = a.first_arc
        self.solvers: list[FlowSolver] = []
        self.arcs: list[list[int]] = []
        self.root_arcs: list[list[tuple[int, int]]] = []
        for q in self.quotients:
            solver = FlowSolver(q.cells + 1)
            self.arcs.append([solver.add_arc(t, h, 0) for t, h in zip(q.tails, q.heads, strict=True)])
            cell_weight = [0] * q.cells
            for cell, w in zip(q.colours[:len(self.weights)].tolist(), self.weights, strict=True):
                cell_weight[cell] += w
            self.root_arcs.append([(solver.add_arc(q.cells, cell, 0), w) for cell, w in enumerate(cell_weight) if w])
            self.solvers.append(solver)
        self.requirement = 0
        self._start = 0

    def configure(self, capacities: Sequence[int], root_scale: int) -> None:
        """Set every arc's capacity (a function of its bandwidth) and the source arcs to ``root_scale * w``."""
        per_class = [capacities[arc] for arc in self._first_arc]
        if len(capacities) != len(self._classes) or \
                any(c != per_class[k] for c, k in zip(capacities, self._classes.tolist(), strict=True)):
            raise ValueError("quotient capacities must be a function of the arc's bandwidth")
        for q, solver, arcs, roots in zip(self.quotients, self.solvers, self.arcs, self.root_arcs, strict=True):
            solver.set_capacities(arcs, [count * per_class[k] for count, k in zip(q.counts, q.classes, strict=True)])
            solver.set_capacities([arc for arc, _ in roots], [root_scale * w for _, w in roots])
        self.requirement = root_scale * self.total_weight

    def violation(self) -> list[int] | None:
        """A cut S (node indices) that some representative's max-flow test exposes, or None if all pass."""
        count = len(self.representatives)
        for step in range(count):
            index = (self._start + step) % count
            q, solver = self.quotients[index], self.solvers[index]
            sink = int(q.colours[self.representatives[index]])
            if solver.max_flow(q.cells, sink) < self.requirement:
                self._start = index
                side = np.zeros(q.cells + 1, dtype=bool)
                side[solver.source_side()] = True
                return np.flatnonzero(side[q.colours]).tolist()
        return None

    @property
    def flows(self) -> int:
        """Max-flow calls so far."""
        return sum(solver.calls for solver in self.solvers)
