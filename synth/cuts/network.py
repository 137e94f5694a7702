"""Exact flow networks built from a topology, and compiled max-flow on integer capacities.

A :class:`Network` indexes the topology's nodes (compute nodes first, in rank order, then switches)
and holds every directed link's bandwidth as an exact decimal :class:`~fractions.Fraction` and as an
integer in units of ``1/scale`` GB/s (``scale`` is the LCM of the bandwidths' denominators), so every
cut test below is exact integer arithmetic.

:class:`FlowSolver` wraps OR-Tools' compiled push-relabel ``SimpleMaxFlow`` (int64 capacities). Arcs
are created once and re-capacitated between solves, which is what makes thousands of max-flow calls
cheap. When capacities could overflow int64 it falls back to networkx on Python integers (exact, slow).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import networkx as nx
import numpy as np
from ortools.graph.python import max_flow

from synth.topology import Topology

#: Direction-independent results per topology object (see ``Network.shared``).
_SHARED: weakref.WeakKeyDictionary[Topology, dict] = weakref.WeakKeyDictionary()

#: The capacity that stands for "unbounded" (forcing arcs); finite totals are kept far below it.
INFINITY = 1 << 60
#: Above this total of finite capacity the compiled solver could overflow: use exact Python integers.
_SAFE_TOTAL = 1 << 58
#: Capacities below this are kept in an int64 array (exactly); a larger one switches it to Python integers.
_INT64_EXACT = 1 << 62
#: From this many arcs on, ``set_capacities`` works on arrays (below, one arc at a time is faster).
_BULK_ARCS = 32


@dataclass
class Network:
    """A directed network with exact capacities: node ``i < num_compute`` is rank ``i``.

    Parameters
    ----------
    names : list of str
        Node id per index (ranks first, then switches).
    num_compute : int
        Number of compute nodes (gpus).
    tails, heads : list of int
        Arc end points.
    bandwidth : list of Fraction
        Arc bandwidth in GB/s.
    reversed : bool
        True when every link was reversed (used for reduce-scatter and reduce).

    Examples
    --------
    >>> topo = Topology.build("pair", ["a", "b"], [], [("a", "b", 12.5)])
    >>> net = Network.from_topology(topo)
    >>> net.scale, net.units
    (2, [25, 25])
    """

    names: list[str]
    num_compute: int
    tails: list[int]
    heads: list[int]
    bandwidth: list[Fraction]
    reversed: bool = False
    scale: int = field(init=False)
    units: list[int] = field(init=False)
    out_arcs: list[list[int]] = field(init=False, repr=False)
    in_arcs: list[list[int]] = field(init=False, repr=False)
    #: Work derived from the network and kept with it (gpu orbits, refined partitions): see
    #: :mod:`~synth.cuts.quotient`.
    cache: dict = field(init=False, repr=False, default_factory=dict)
    #: Like ``cache`` for results that do not depend on the direction of the links (automorphisms,
    #: equitable partitions): shared by a topology's network and its reversed network.
    shared: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        by_identity = {id(b): b for b in self.bandwidth}  # from_topology shares one Fraction per value
        distinct = set(by_identity.values())
        self.scale = math.lcm(*(b.denominator for b in distinct)) if distinct else 1
        unit_of = {key: int(b * self.scale) for key, b in by_identity.items()}
        self.units = [unit_of[id(b)] for b in self.bandwidth]
        self.out_arcs = [[] for _ in self.names]
        self.in_arcs = [[] for _ in self.names]
        for arc, (tail, head) in enumerate(zip(self.tails, self.heads, strict=True)):
            self.out_arcs[tail].append(arc)
            self.in_arcs[head].append(arc)

    @classmethod
    def from_topology(cls, topology: Topology, reverse: bool = False) -> Network:
        """The topology's network (every link reversed when ``reverse``)."""
        members = set(topology.gpus)  # a process group's view: other gpus relay only where they forward
        others = [n for n in topology.graph.nodes if topology.is_gpu(n) and n not in members
                  and topology.forwards(n)]
        names = list(topology.gpus) + list(topology.switches) + others
        index = {name: i for i, name in enumerate(names)}
        tails: list[int] = []
        heads: list[int] = []
        bandwidth: list[Fraction] = []
        exact: dict[float, Fraction] = {}  # one Fraction per distinct bandwidth (as Topology.exact_bandwidth)
        for src, dst, value in topology.graph.edges(data="bandwidth"):
            if src not in index or dst not in index:
                continue
            a, b = (index[dst], index[src]) if reverse else (index[src], index[dst])
            tails.append(a)
            heads.append(b)
            value = float(value)
            fraction = exact.get(value)
            if fraction is None:
                fraction = exact[value] = Fraction(repr(value))
            bandwidth.append(fraction)
        net = cls(names, topology.num_ranks, tails, heads, bandwidth, reverse)
        net.shared = _SHARED.setdefault(topology, {})
        return net

    @property
    def num_nodes(self) -> int:
        """Number of nodes (gpus and switches)."""
        return len(self.names)

    @property
    def num_arcs(self) -> int:
        """Number of directed arcs."""
        return len(self.tails)

    def egress_units(self, nodes: Iterable[int]) -> int:
        """Total capacity (in units of ``1/scale`` GB/s) of the arcs leaving the node set."""
        inside = set(nodes)
        if len(inside) < 1024:
            return sum(self.units[a] for v in inside for a in self.out_arcs[v] if self.heads[a] not in inside)
        mask = np.zeros(self.num_nodes, dtype=bool)
        mask[list(inside)] = True
        leaving = mask[self.tails] & ~mask[self.heads]
        return sum(self.units[a] for a in np.flatnonzero(leaving).tolist())

    def physical_path(self, path: Sequence[int]) -> tuple[str, ...]:
        """Node ids of a path of arcs of this network, in the topology's direction of travel."""
        names = tuple(self.names[v] for v in path)
        return names[::-1] if self.reversed else names

    def is_symmetric(self) -> bool:
        """True when every arc has a reverse arc of the same bandwidth (then reversing changes nothing)."""
        forward = {(t, h): b for t, h, b in zip(self.tails, self.heads, self.bandwidth, strict=True)}
        return all(forward.get((h, t)) == b for (t, h), b in forward.items())


class FlowSolver:
    """Max-flow on a fixed node set with arcs that can be added and re-capacitated between solves.

    Examples
    --------
    >>> solver = FlowSolver(3)
    >>> first = solver.add_arc(0, 1, 5)
    >>> _ = solver.add_arc(1, 2, 3)
    >>> solver.max_flow(0, 2), sorted(solver.source_side())
    (3, [0, 1])
    """

    def __init__(self, num_nodes: int) -> None:
        self.num_nodes = num_nodes
        self._solver = max_flow.SimpleMaxFlow()
        # arcs' ends, and their exact capacities: int64 while they fit, Python integers (dtype object) once
        # one does not; each array has room for more arcs than there are (``_num_arcs``)
        self._tails = np.zeros(64, dtype=np.int64)
        self._heads = np.zeros(64, dtype=np.int64)
        self._caps: np.ndarray = np.zeros(64, dtype=np.int64)
        self._num_arcs = 0
        self._finite_total = 0
        self._python_side: list[int] | None = None
        self.calls = 0

    def _count_finite(self, old: int, new: int) -> None:
        """Keep the total of finite capacities as an arc's capacity goes from ``old`` to ``new``."""
        if old != INFINITY:
            self._finite_total -= old
        if new != INFINITY:
            self._finite_total += new

    def _make_room(self, count: int, largest: int) -> None:
        """Room for ``count`` more arcs, and an array type that holds ``largest`` exactly."""
        if largest >= _INT64_EXACT and self._caps.dtype != object:
            self._caps = self._caps.astype(object)
        needed = self._num_arcs + count
        if needed > len(self._caps):
            size = max(needed, 2 * len(self._caps))
            self._tails, self._heads, self._caps = (
                np.concatenate([array[:self._num_arcs], np.zeros(size - self._num_arcs, dtype=array.dtype)])
                for array in (self._tails, self._heads, self._caps))

    @staticmethod
    def _finite_sum(values: np.ndarray) -> int:
        """The exact sum of the values that are not :data:`INFINITY`."""
        finite = values[values != INFINITY]
        if len(finite) == 0:
            return 0
        if finite.dtype != object and int(finite.max()) * len(finite) < _INT64_EXACT:
            return int(finite.sum())
        return int(finite.astype(object).sum())

    def add_arc(self, tail: int, head: int, capacity: int = 0) -> int:
        """Add an arc and return its index."""
        if self._num_arcs == len(self._caps) or capacity >= _INT64_EXACT:
            self._make_room(1, capacity)
        self._tails[self._num_arcs] = tail
        self._heads[self._num_arcs] = head
        self._caps[self._num_arcs] = capacity
        self._num_arcs += 1
        self._count_finite(0, capacity)
        return self._solver.add_arc_with_capacity(tail, head, min(capacity, INFINITY))

    def capacity(self, arc: int) -> int:
        """The arc's current capacity."""
        return int(self._caps[arc])

    def set_capacity(self, arc: int, capacity: int) -> None:
        """Change one arc's capacity."""
        if capacity >= _INT64_EXACT:
            self._make_room(0, capacity)
        self._count_finite(int(self._caps[arc]), capacity)
        self._caps[arc] = capacity
        self._solver.set_arc_capacity(arc, min(capacity, INFINITY))

    def set_capacities(self, arcs: Sequence[int], capacities: Sequence[int]) -> None:
        """Change many arcs' capacities at once (an arc named twice takes its last capacity)."""
        if len(arcs) != len(capacities):
            raise ValueError(f"{len(arcs)} arcs but {len(capacities)} capacities")
        if not len(arcs):
            return
        values = list(capacities)
        if len(arcs) < _BULK_ARCS:  # a few arcs: array set-up would cost more than it saves
            for arc, capacity in zip(arcs, values, strict=True):
                self.set_capacity(arc, capacity)
            return
        index = np.asarray(arcs, dtype=np.int64)
        if len(np.unique(index)) < len(index):
            for arc, capacity in zip(index.tolist(), values, strict=True):
                self.set_capacity(arc, capacity)
            return
        self._make_room(0, max(values))
        self._assign(index, np.asarray(values, dtype=self._caps.dtype))

    def _assign(self, arcs: np.ndarray, values: np.ndarray) -> None:
        """Store distinct ``arcs``' new capacities and pass them to the compiled solver."""
        self._finite_total += self._finite_sum(values) - self._finite_sum(self._caps[arcs])
        self._caps[arcs] = values
        self._solver.set_arcs_capacity(arcs.astype(np.int32), np.minimum(values, INFINITY).astype(np.int64))

    def add_arcs(self, tails: np.ndarray, heads: np.ndarray, capacity: int) -> np.ndarray:
        """Add one arc per (tail, head) pair, all of capacity ``capacity``; return their indices.

        The bulk form of :meth:`add_arc`, for callers that add thousands of arcs at a time."""
        count = len(tails)
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        self._make_room(count, capacity)
        self._tails[self._num_arcs:self._num_arcs + count] = tails
        self._heads[self._num_arcs:self._num_arcs + count] = heads
        self._caps[self._num_arcs:self._num_arcs + count] = capacity
        self._num_arcs += count
        if capacity != INFINITY:
            self._finite_total += capacity * count
        capacities = np.full(count, min(capacity, INFINITY), dtype=np.int64)
        return np.asarray(self._solver.add_arcs_with_capacity(tails.astype(np.int32), heads.astype(np.int32),
                                                              capacities), dtype=np.int64)

    def fill_capacities(self, arcs: np.ndarray, capacities: np.ndarray | int) -> None:
        """Set distinct ``arcs`` (an index array) to ``capacities`` (one each, or one for all): the bulk
        form of :meth:`set_capacity`."""
        if len(arcs) == 0:
            return
        if isinstance(capacities, int):
            self._make_room(0, capacities)
            values = np.full(len(arcs), capacities, dtype=self._caps.dtype)
        else:
            self._make_room(0, int(capacities.max()))
            values = capacities.astype(self._caps.dtype)
        self._assign(arcs, values)

    def max_flow(self, source: int, sink: int) -> int:
        """The maximum flow value from ``source`` to ``sink`` (``>= INFINITY`` means unbounded).

        Capacities equal to :data:`INFINITY` are unbounded; any other value is taken exactly."""
        self.calls += 1
        self._python_side = None
        if self._finite_total < _SAFE_TOTAL:
            status = self._solver.solve(source, sink)
            if status == self._solver.OPTIMAL:
                return int(self._solver.optimal_flow())
        return self._python_max_flow(source, sink)

    def source_side(self) -> list[int]:
        """Nodes on the source side of a minimum cut of the last solve."""
        if self._python_side is not None:
            return list(self._python_side)
        return list(self._solver.get_source_side_min_cut())

    def _python_max_flow(self, source: int, sink: int) -> int:
        unbounded = self._finite_total + 1
        graph = nx.DiGraph()
        graph.add_nodes_from(range(self.num_nodes))
        count = self._num_arcs
        for tail, head, cap in zip(self._tails[:count].tolist(), self._heads[:count].tolist(),
                                   self._caps[:count].tolist(), strict=True):
            if cap == INFINITY:
                cap = unbounded
            if cap <= 0 or tail == head:
                continue
            if graph.has_edge(tail, head):
                graph.edges[tail, head]["capacity"] += cap
            else:
                graph.add_edge(tail, head, capacity=cap)
        value, (side, _) = nx.minimum_cut(graph, source, sink)
        self._python_side = sorted(side)
        return INFINITY if value >= unbounded else int(value)
