"""Exact bandwidth bounds: the optimal allgather time on any topology and the cut that causes it.

For allgather of M bytes (each of the N gpus owns M/N), ForestColl's cut bound is exact and reachable
(:mod:`synth.algorithms.forest` builds schedules that meet it):

    T* = (M/N) * max over cuts S of |S ∩ gpus| / B+(S)

with B+(S) the bandwidth of the links leaving S. The maximizing S is the *bottleneck cut*: the gpus in S
own |S ∩ gpus|/N of the data, all of which must leave S through B+(S) — the answer to "why is my fabric
slow". Reduce-scatter has the same optimum on the reversed links, allreduce as reduce-scatter then
allgather takes the sum of the two, and broadcast/reduce from one root are bounded by the root's
smallest cut (max-flow from the root).

Every bound holds on the fabric as described, switch capabilities included
(:class:`~synth.topology.SwitchCapabilities`): a multicast copy made inside S still crosses out of S,
and a sum combined outside S still enters S, so the allgather, reduce-scatter, broadcast and reduce cut
bounds are unchanged by switches that reduce or multicast; the allreduce bound of :func:`time_bound`
takes them into account. ``topology.passive()`` gives the passive-switch figures.

Examples
--------
>>> from synth.library import load_topology
>>> bound = optimal_bound(load_topology("switch:n=4"))
>>> bound.rate_GBps, round(bound.algbw_GBps, 2), bound.cut_gpus
(Fraction(50, 3), 66.67, ('gpu1', 'gpu2', 'gpu3'))
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from synth.collectives import Kind, uneven_weights
from synth.cuts.allgather import CutBound, cut_bound, lcd_trees, optimal_tree_counts, rate_with_trees
from synth.cuts.alltoall import AlltoallBound
from synth.cuts.network import Network
from synth.errors import InputError
from synth.topology import Topology

GIGA = 10**9


@dataclass(frozen=True)
class Bound:
    """The exact allgather optimum of a topology, the trees it needs and its bottleneck cut.

    Attributes
    ----------
    topology : str
        Topology name.
    num_ranks : int
        N, the number of gpus.
    seconds_per_byte : Fraction
        Optimal allgather time per byte of total output M (seconds = M * seconds_per_byte).
    rate_GBps : Fraction
        x* = B+(S) / |S ∩ gpus|: what each gpu's shard can stream at; algbw = N * x*.
    algbw_GBps : float
        Optimal allgather algbw (M / T*), GB/s.
    reducescatter_algbw_GBps, allreduce_algbw_GBps : float
        Optimal reduce-scatter algbw (the reversed links' allgather optimum) and allreduce as
        reduce-scatter then allgather.
    trees_per_root : int
        k: the fewest out-trees per root that reach the optimum.
    tree_unit_GBps : Fraction
        g: the largest bandwidth that divides every link's bandwidth.
    trees_per_unit : Fraction
        U = k * g / x*: how many of the N*k trees one link of g GB/s carries (1/x* = U / (k g)).
    cut_gpus, cut_switches : tuple of str
        The bottleneck cut S: its gpus (rank order) and switches.
    cut_egress_GBps : Fraction
        B+(S).
    cut_links : tuple of (str, str, float)
        The links leaving S with their bandwidth (the bottleneck links).
    flows : int
        Max-flow calls spent on the bound.
    seconds : float
        Wall time spent.
    """

    topology: str
    num_ranks: int
    seconds_per_byte: Fraction
    rate_GBps: Fraction
    algbw_GBps: float
    reducescatter_algbw_GBps: float
    allreduce_algbw_GBps: float
    trees_per_root: int
    tree_unit_GBps: Fraction
    trees_per_unit: Fraction
    cut_gpus: tuple[str, ...]
    cut_switches: tuple[str, ...]
    cut_egress_GBps: Fraction
    cut_links: tuple[tuple[str, str, float], ...]
    flows: int
    seconds: float

    @property
    def outside_gpus(self) -> int:
        """Number of gpus outside the bottleneck cut."""
        return self.num_ranks - len(self.cut_gpus)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; exact fractions are strings like ``"65/3"``."""
        return {
            "topology": self.topology, "gpus": self.num_ranks,
            "allgather_seconds_per_byte": str(self.seconds_per_byte),
            "rate_per_gpu_GBps": str(self.rate_GBps),
            "allgather_algbw_GBps": self.algbw_GBps,
            "reducescatter_algbw_GBps": self.reducescatter_algbw_GBps,
            "allreduce_algbw_GBps": self.allreduce_algbw_GBps,
            "trees_per_root": self.trees_per_root, "tree_unit_GBps": str(self.tree_unit_GBps),
            "trees_per_unit": str(self.trees_per_unit),
            "cut": {"gpus": list(self.cut_gpus), "switches": list(self.cut_switches),
                    "egress_GBps": str(self.cut_egress_GBps),
                    "links": [{"src": u, "dst": v, "bandwidth": b} for u, v, b in self.cut_links]},
            "flows": self.flows, "seconds": self.seconds,
        }


@dataclass(frozen=True)
class LimitedTrees:
    """The best allgather rate with at most K trees per root and its gap: the percentage of the optimal
    algbw it loses."""

    max_trees_per_root: int
    trees_per_root: int
    rate_GBps: Fraction
    algbw_GBps: float
    gap_percent: float


def _cut(topology: Topology, reverse: bool = False, root: int | None = None,
         weights: tuple[int, ...] | None = None) -> tuple[CutBound, Network]:
    """The exact cut bound (memoized per topology object, direction, root and root weights: one per gpu,
    one at ``root``, or ``weights``)."""
    def compute() -> tuple[CutBound, Network]:
        net = Network.from_topology(topology, reverse=reverse)
        per_rank = weights
        if per_rank is None:
            per_rank = tuple(1 for _ in topology.ranks) if root is None else \
                tuple(int(r == root) for r in topology.ranks)
        return cut_bound(net, per_rank), net

    return topology.memoized(__name__, (reverse, root, weights), compute, maxsize=16)


def _fraction_gcd(values: list[Fraction]) -> Fraction:
    denominator = math.lcm(*(v.denominator for v in values))
    return Fraction(math.gcd(*(int(v * denominator) for v in values)), denominator)


def quotient_representatives(topology: Topology) -> int | None:
    """The gpu orbits the quotient method would test for the allgather bound of ``topology`` (one max-flow
    each, on a quotient network), or None when it falls back to a max-flow per gpu on the whole network.

    Takes the same decision as :func:`synth.cuts.allgather.make_oracle` (the orbit search's result is kept
    with the topology, so the bound reuses it).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> quotient_representatives(load_topology("dgx-a100:boxes=8")), quotient_representatives(load_topology("ring:n=8"))
    (1, None)
    """
    from synth.cuts.allgather import QUOTIENT_MAX_REPRESENTATIVES, QUOTIENT_MIN_GPUS
    from synth.cuts.symmetry import gpu_orbits

    n = topology.num_ranks
    if n < QUOTIENT_MIN_GPUS:
        return None
    count = len(set(gpu_orbits(Network.from_topology(topology), [1] * n)))
    return count if count <= QUOTIENT_MAX_REPRESENTATIVES and 4 * count <= n else None


def optimal_bound(topology: Topology) -> Bound:
    """The exact optimal allgather time, the trees it needs, and the bottleneck cut.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> b = optimal_bound(load_topology("ndv2:boxes=2"))
    >>> b.algbw_GBps, b.trees_per_root, b.cut_egress_GBps, len(b.cut_gpus)
    (25.0, 1, Fraction(25, 2), 8)
    """
    started = time.perf_counter()
    gather, net = _cut(topology)
    scatter, _ = _cut(topology, reverse=True)
    n = topology.num_ranks
    trees = next(optimal_tree_counts(net, [1] * n, gather, lcd_trees(net, gather.rate)))[0]
    unit = _fraction_gcd(net.bandwidth)
    inside = set(gather.cut)
    links = sorted(((net.names[t], net.names[h], float(b)) for t, h, b in zip(net.tails, net.heads, net.bandwidth, strict=True)
                    if t in inside and h not in inside), key=lambda link: (-link[2], link[0], link[1]))
    ag = float(n * gather.rate)
    rs = float(n * scatter.rate)
    return Bound(
        topology=topology.name, num_ranks=n,
        seconds_per_byte=Fraction(1, n) / (gather.rate * GIGA),
        rate_GBps=gather.rate, algbw_GBps=ag, reducescatter_algbw_GBps=rs,
        allreduce_algbw_GBps=1 / (1 / ag + 1 / rs),
        trees_per_root=trees, tree_unit_GBps=unit, trees_per_unit=trees * unit / gather.rate,
        cut_gpus=tuple(net.names[v] for v in gather.cut if v < n),
        cut_switches=tuple(net.names[v] for v in gather.cut if v >= n),
        cut_egress_GBps=gather.egress, cut_links=tuple(links),
        flows=gather.flows + scatter.flows, seconds=time.perf_counter() - started)


@dataclass(frozen=True)
class ShardBound:
    """The exact optimum of an allgather or reduce-scatter with uneven shards (allgatherv, reduce-scatterv).

    ``weights``: the shards in lowest terms (rank r owns weights[r] / W of the M bytes); ``seconds_per_byte``:
    the optimal time per byte of M, w(S) / (W B+(S)) at the bottleneck cut S (on the reversed links for
    reduce-scatter), exact as Fractions; ``cut_gpus``: S's gpus (rank order); ``cut_weight``: w(S);
    ``cut_egress_GBps``: B+(S).
    """

    kind: Kind
    weights: tuple[int, ...]
    seconds_per_byte: Fraction
    algbw_GBps: float
    cut_gpus: tuple[str, ...]
    cut_weight: int
    cut_egress_GBps: Fraction

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; exact fractions are strings like ``"1/150000000000"``."""
        return {"collective": self.kind.value, "shards": list(self.weights),
                "seconds_per_byte": str(self.seconds_per_byte), "algbw_GBps": self.algbw_GBps,
                "cut": {"gpus": list(self.cut_gpus), "weight": self.cut_weight,
                        "egress_GBps": str(self.cut_egress_GBps)}}


def shard_bound(topology: Topology, kind: Kind, shards: Any) -> ShardBound:
    """The exact optimum of ``kind`` (allgather or reducescatter) with uneven ``shards`` (one size per rank,
    any unit) and its bottleneck cut; forest reaches it (``forest(..., shards=...)``).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> b = shard_bound(load_topology("switch:n=4"), Kind.ALLGATHER, [1, 1, 1, 5])
    >>> round(b.algbw_GBps, 2), b.cut_gpus, b.cut_weight  # gpu0 receives 7/8 of M over one 50 GB/s link
    (57.14, ('gpu1', 'gpu2', 'gpu3'), 7)
    """
    weights = uneven_weights(kind, shards, topology.num_ranks)
    if weights is None:
        weights = tuple(1 for _ in topology.ranks)
    cut, net = _cut(topology, reverse=kind == Kind.REDUCESCATTER, weights=weights)
    seconds = Fraction(1, sum(weights)) / (cut.rate * GIGA)
    return ShardBound(kind, weights, seconds, float(1 / (seconds * GIGA)),
                      tuple(net.names[v] for v in cut.cut if v < topology.num_ranks), cut.weight, cut.egress)


def limited_trees(topology: Topology, max_trees_per_root: int) -> LimitedTrees:
    """The best allgather rate with at most ``max_trees_per_root`` trees per root (flow test only).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> limited = limited_trees(load_topology("mi250:boxes=2"), 1)
    >>> round(limited.algbw_GBps, 2), round(limited.gap_percent, 2)
    (320.0, 9.64)
    """
    if isinstance(max_trees_per_root, bool) or not isinstance(max_trees_per_root, int) or max_trees_per_root < 1:
        raise InputError("", "max_trees_per_root", f"expected a positive integer, got {max_trees_per_root!r}")
    gather, net = _cut(topology)
    n = topology.num_ranks
    best: tuple[Fraction, int] | None = None
    for k in range(1, max_trees_per_root + 1):
        rate, _ = rate_with_trees(net, [1] * n, k, gather.rate)
        if best is None or rate > best[0]:
            best = (rate, k)
        if rate == gather.rate:
            break
    assert best is not None
    rate, k = best
    return LimitedTrees(max_trees_per_root, k, rate, float(n * rate), float((1 - rate / gather.rate) * 100))


def algbw_bound(topology: Topology, kind: Kind, demand: Any = None, shards: Any = None) -> float | None:
    """The optimal algbw (GB/s) for ``kind`` on ``topology``, or None when no exact bound is known.

    Allgather and reduce-scatter: M / T* (the reversed links for reduce-scatter); allreduce: as
    reduce-scatter then allgather (half the allgather figure on symmetric links); broadcast and reduce:
    the single-root bound from rank 0 (the default root); alltoall: the maximum concurrent flow LP
    optimum (:func:`alltoall_bound`); alltoallv: the same LP for ``demand`` (algbw with M = the whole
    demand; :func:`synth.demand.as_chunk_matrix` says what ``demand`` may be, None: 1 chunk per pair);
    allgather and reduce-scatter with ``shards`` (each rank's shard size, uneven shards): the same cut bound
    with those root weights, M the whole gathered buffer.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> round(algbw_bound(load_topology("dgx-a100:boxes=2"), Kind.ALLREDUCE), 2)
    173.33
    >>> switch = load_topology("switch:n=4")  # 50 GB/s links: gpu 0 must receive 7/8 of M over one
    >>> round(algbw_bound(switch, Kind.ALLGATHER), 2), round(algbw_bound(switch, Kind.ALLGATHER, shards=[1, 1, 1, 5]), 2)
    (66.67, 57.14)
    """
    n = topology.num_ranks
    weights = uneven_weights(kind, shards, n)
    if weights is not None:
        return float(sum(weights) * _cut(topology, reverse=kind == Kind.REDUCESCATTER, weights=weights)[0].rate)
    if kind == Kind.ALLGATHER:
        return float(n * _cut(topology)[0].rate)
    if kind == Kind.REDUCESCATTER:
        return float(n * _cut(topology, reverse=True)[0].rate)
    if kind == Kind.ALLREDUCE:
        ag = n * _cut(topology)[0].rate
        rs = n * _cut(topology, reverse=True)[0].rate
        return float(1 / (1 / ag + 1 / rs))
    if kind == Kind.BROADCAST:
        return float(_cut(topology, root=0)[0].rate)
    if kind == Kind.REDUCE:
        return float(_cut(topology, reverse=True, root=0)[0].rate)
    if kind == Kind.ALLTOALL:
        return alltoall_bound(topology).lp_algbw_GBps
    if kind == Kind.ALLTOALLV:
        return alltoall_bound(topology, demand if demand is not None else _uniform(n)).lp_algbw_GBps
    return None


# ------------------------------------------------------------------------------------- alltoall
def alltoall_bound(topology: Topology, demand: Any = None) -> AlltoallBound:
    """The optimal alltoall algbw (maximum concurrent flow LP, GLOP) beside the best cut bound found; with
    a ``demand`` (a Demand, its chunks or a chunk-count matrix), the optimal alltoallv algbw for it.

    Returns an :class:`~synth.cuts.alltoall.AlltoallBound` (``lp_algbw_GBps``, ``cut``, ``gap``,
    ``to_dict()``); see :mod:`synth.cuts.alltoall` for the LP and the cut candidates.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> bound = alltoall_bound(load_topology("ndv2:boxes=2"))
    >>> round(bound.lp_algbw_GBps, 9), bound.cut.algbw_GBps
    (3.125, Fraction(25, 8))
    """
    from synth.cuts.alltoall import alltoall_bound as solve

    if demand is None:
        return solve(topology)
    from synth.demand import as_chunk_matrix

    return solve(topology, demand=as_chunk_matrix(demand, topology.num_ranks))


def _uniform(n: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(0 if s == d else 1 for d in range(n)) for s in range(n))


# ---------------------------------------------------------------------------------- time bounds
@dataclass(frozen=True)
class BoundTerm:
    """One proven lower bound on time: ``size * seconds_per_byte + latency_s``, and the argument."""

    argument: str
    seconds_per_byte: Fraction
    latency_s: float

    def time(self, size: int) -> float:
        """Seconds for a message of ``size`` bytes."""
        return float(self.seconds_per_byte * size) + self.latency_s


@dataclass(frozen=True)
class TimeBound:
    """A proven lower bound on the time of one collective on one topology, at every message size.

    ``time(n) = max(max over terms of (n * seconds_per_byte + latency), reach_s)``:

    - each term is a bandwidth argument (a cut every byte of some data must cross) plus the smallest
      latency of a link crossing that cut, since the last byte across still has to arrive;
    - ``reach_s`` is the longest of the shortest (by latency) paths that some data must travel.

    No protocol cost is included: this is what the links alone allow. ``optimum`` is True when the
    bandwidth term is known to be reachable: the allgather, reduce-scatter, broadcast and reduce cut
    bounds on topologies whose every switch has as much bandwidth in as out (the condition under which
    ForestColl's edge splitting keeps them reachable by point-to-point trees), and the alltoall LP
    optimum; then tables call it the *optimum*, else the *bound*. ``in_switch`` is True when the argument
    counts switches that reduce or multicast (the allreduce bound on such a fabric); the label then
    reads ``"in-switch bound"``, so a percentage of it says which fabric it is for.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> bound = time_bound(load_topology("ring:n=4,latency=1"), Kind.ALLGATHER)
    >>> bound.reach_s, bound.time(1) == bound.reach_s
    (2e-06, True)
    """

    topology: str
    collective: Kind
    terms: tuple[BoundTerm, ...]
    reach_s: float
    optimum: bool
    in_switch: bool = False

    @property
    def seconds_per_byte(self) -> Fraction:
        """The bandwidth term alone (the largest over the terms), exact."""
        return max(term.seconds_per_byte for term in self.terms)

    @property
    def label(self) -> str:
        """``"optimum"`` when the bandwidth term is reachable, else ``"bound"``; prefixed ``"in-switch "``
        when the argument counts in-switch reduction or multicast."""
        base = "optimum" if self.optimum else "bound"
        return f"in-switch {base}" if self.in_switch else base

    def time(self, size: int) -> float:
        """The lower bound on time in seconds for a message of ``size`` bytes."""
        return max(max(term.time(size) for term in self.terms), self.reach_s)

    def algbw_GBps(self, size: int) -> float:
        """The largest algbw (GB/s) any schedule can reach at ``size`` bytes."""
        return size / self.time(size) / GIGA

    def bandwidth_algbw_GBps(self) -> float:
        """The largest algbw (GB/s) at large sizes (latencies negligible)."""
        return float(1 / (self.seconds_per_byte * GIGA))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields; exact seconds per byte as strings like ``"1/2600000000000"``."""
        return {"collective": self.collective.value, "label": self.label, "in_switch": self.in_switch,
                "reach_s": self.reach_s,
                "bandwidth_algbw_GBps": self.bandwidth_algbw_GBps(),
                "terms": [{"argument": t.argument, "seconds_per_byte": str(t.seconds_per_byte),
                           "latency_s": t.latency_s} for t in self.terms]}


def _latencies_us(topology: Topology) -> dict[tuple[str, str], float]:
    return {(u, v): float(d["latency"]) for u, v, d in topology.graph.edges(data=True)}


def _cut_latency_s(topology: Topology, cut: CutBound, net: Network) -> float:
    """The smallest latency (s) of a physical link crossing the cut in the direction data must cross."""
    inside = {net.names[v] for v in cut.cut}
    latency = _latencies_us(topology)
    crossing = [lat for (u, v), lat in latency.items()
                if (u in inside and v not in inside) != net.reversed and (u in inside) != (v in inside)]
    return min(crossing, default=0.0) * 1e-6


def _reach_s(topology: Topology, sources: list[int], targets: list[int]) -> float:
    """max over (source, target) rank pairs of the smallest path latency, in seconds (any path: data may
    be relayed by any gpu)."""
    import numpy as np
    import scipy.sparse as sparse
    from scipy.sparse.csgraph import dijkstra

    names = list(topology.graph.nodes)
    index = {name: i for i, name in enumerate(names)}
    edges = list(topology.graph.edges(data="latency"))
    if not edges or all(lat == 0 for _, _, lat in edges):
        return 0.0
    matrix = sparse.csr_matrix((np.array([float(lat) for _, _, lat in edges]),
                                (np.array([index[u] for u, _, _ in edges]), np.array([index[v] for _, v, _ in edges]))),
                               shape=(len(names), len(names)))
    gpu_index = [index[g] for g in topology.gpus]
    distances = dijkstra(matrix, indices=[gpu_index[s] for s in sources])
    worst = 0.0
    for row, source in enumerate(sources):
        for target in targets:
            if target != source:
                worst = max(worst, float(distances[row, gpu_index[target]]))
    return worst * 1e-6


def _min_cut_units(net: Network) -> tuple[int, int]:
    """(min over gpu sets S of B+(S), min of B-(S)) in the network's integer units, S holding some but not
    all gpus: max-flows from gpu 0 to every other gpu and back (every such S separates gpu 0 from one)."""
    from synth.cuts.network import FlowSolver

    solver = FlowSolver(net.num_nodes)
    for tail, head, units in zip(net.tails, net.heads, net.units, strict=True):
        solver.add_arc(tail, head, units)
    out_cut = min(solver.max_flow(0, v) for v in range(1, net.num_compute))
    in_cut = min(solver.max_flow(v, 0) for v in range(1, net.num_compute))
    return out_cut, in_cut


def _groups_label(groups: int, num_ranks: int) -> str:
    return f"the G={num_ranks} gpus" if groups == num_ranks else f"G={groups} groups of gpus (fast links joined)"


def _gossip_candidates(topology: Topology) -> list[tuple[int, Fraction, Fraction]]:
    """The partitions of the gpus into G >= 2 groups tried by the allreduce gossip terms, as (G, the
    groups' external egress, their external ingress).

    The candidates are, for each link bandwidth t, the groups of gpus joined by links of at least t (the
    weakly connected components of those links, switches included; the largest t leaves every gpu alone).
    A group's external egress is the bandwidth of the links leaving its nodes, ingress of those entering.
    """
    import networkx as nx

    graph = topology.graph
    gpus = set(topology.gpus)
    bandwidth = {(u, v): Fraction(topology.exact_bandwidth(u, v)) for u, v in graph.edges()}
    thresholds = sorted(set(bandwidth.values()))
    found: list[tuple[int, Fraction, Fraction]] = []
    for threshold in [*thresholds, thresholds[-1] + 1] if thresholds else []:
        fast = nx.DiGraph()
        fast.add_nodes_from(graph.nodes)
        fast.add_edges_from(edge for edge, value in bandwidth.items() if value >= threshold)
        group_of: dict[str, int] = {}
        count = 0
        for component in nx.weakly_connected_components(fast):
            if component & gpus:
                group_of.update(dict.fromkeys(component, count))
                count += 1
        if count < 2:
            continue
        egress = sum((value for (u, v), value in bandwidth.items() if u in group_of and group_of[u] != group_of.get(v)),
                     Fraction(0))
        ingress = sum((value for (u, v), value in bandwidth.items() if v in group_of and group_of[v] != group_of.get(u)),
                      Fraction(0))
        found.append((count, egress, ingress))
    return found


def _gossip_seconds_per_byte(groups: int, bandwidth: Fraction, messages: int, reduces: bool,
                             reduce_GBps: Fraction | None) -> Fraction:  # noqa: N803
    """The gossip term's seconds per byte of M for G groups whose external links in one direction have
    ``bandwidth`` GB/s: each element not combined in a switch crosses them ``messages`` times; when
    switches reduce (``reduces``), one that a switch combines crosses them at least G times, and the
    switches produce at most ``reduce_GBps`` of sums (None: without limit). The best split of the elements between the two is the bound (see
    :func:`time_bound`): with a = messages, b = G, R = reduce_GBps, I = bandwidth, the fraction f
    combined in switches meets f/R = (a - (a - b) f)/I, so T/M = a / (I + (a - b) R), or b / I when
    R >= I / b."""
    a, b = Fraction(messages), Fraction(groups)
    if not reduces or a <= b:
        return min(a, b) / (bandwidth * GIGA) if reduces else a / (bandwidth * GIGA)
    if reduce_GBps is not None and reduce_GBps < bandwidth / b:
        return a / ((bandwidth + (a - b) * reduce_GBps) * GIGA)
    return b / (bandwidth * GIGA)


def _switch_reduction_GBps(topology: Topology) -> Fraction | None:  # noqa: N802
    """The summed reduction throughput (GB/s of reduced output) of the switches that reduce; 0 when none
    does, None when one reduces without a throughput limit."""
    total = Fraction(0)
    for switch in topology.switches:
        reduction = topology.reduction(switch)
        if reduction is None:
            continue
        if reduction.throughput is None:
            return None
        total += Fraction(repr(reduction.throughput))
    return total


def _allreduce_terms(topology: Topology) -> list[BoundTerm]:
    """The allreduce bound's terms (the argument is in :func:`time_bound`)."""
    n = topology.num_ranks
    net = Network.from_topology(topology)
    out_units, in_units = _min_cut_units(net)
    smallest = min((float(lat) for _, _, lat in topology.graph.edges(data="latency")), default=0.0) * 1e-6
    terms = [
        BoundTerm("every cut: M bytes of partial sums leave it", Fraction(net.scale, out_units) / GIGA, smallest),
        BoundTerm("every cut: M bytes of partial sums enter it", Fraction(net.scale, in_units) / GIGA, smallest),
    ]
    reduce_GBps = _switch_reduction_GBps(topology)  # noqa: N806
    reduces = reduce_GBps != 0
    multicast = any(topology.multicasts(s) for s in topology.switches)
    # without in-switch ops every element crosses the groups' links 2(G-1) times; a multicast copy or a
    # reduced result need not leave a group, so then each group sends at least once: G messages
    out_messages = (lambda g: g) if (reduces or multicast) else (lambda g: 2 * (g - 1))
    candidates = _gossip_candidates(topology)
    for direction in ("egress", "ingress"):
        best: tuple[Fraction, int] | None = None
        for groups, egress, ingress in candidates:
            width = egress if direction == "egress" else ingress
            if not width:
                continue
            if direction == "egress":
                spb = Fraction(out_messages(groups)) / (width * GIGA)
            else:
                spb = _gossip_seconds_per_byte(groups, width, 2 * (groups - 1), reduces, reduce_GBps)
            if best is None or spb > best[0]:
                best = (spb, groups)
        spb, groups = best if best is not None else (Fraction(0), 1)
        terms.append(BoundTerm(_gossip_label(direction, groups, n, reduces, multicast, reduce_GBps), spb, smallest))
    return terms


def _gossip_label(direction: str, groups: int, n: int, reduces: bool, multicast: bool,
                  reduce_GBps: Fraction | None) -> str:  # noqa: N803
    who = _groups_label(groups, n)
    if direction == "egress":
        if reduces or multicast:
            return f"every group sends each element at least once (G messages) over the egress of {who}"
        return f"2(G-1) messages per element over the egress of {who}"
    if not reduces:
        return f"2(G-1) messages per element over the ingress of {who}"
    rate = "no limit" if reduce_GBps is None else f"{float(reduce_GBps):g} GB/s"
    return (f"2(G-1) messages per element over the ingress of {who}, G for the elements switches reduce "
            f"(switch reduction throughput: {rate})")


def balanced_switches(topology: Topology) -> bool:
    """True when every switch has as much bandwidth coming in as going out (exactly).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> balanced_switches(load_topology("dgx-a100:boxes=2"))
    True
    """
    for switch in topology.switches:
        inward = sum((topology.exact_bandwidth(u, v) for u, v in topology.graph.in_edges(switch)), Fraction(0))
        outward = sum((topology.exact_bandwidth(u, v) for u, v in topology.graph.out_edges(switch)), Fraction(0))
        if inward != outward:
            return False
    return True


def time_bound(topology: Topology, kind: Kind | str, root: int = 0, demand: Any = None,
               shards: Any = None) -> TimeBound:
    """A proven lower bound on the time of ``kind`` on ``topology`` (see :class:`TimeBound`).

    The arguments, per collective, for a message of M bytes on N gpus:

    - allgather: ForestColl's exact cut bound (M/N)|S|/B+(S) (every byte owned in S leaves S once);
      reduce-scatter: the same on the reversed links (bytes reduced into S must enter S); both exact;
      with uneven ``shards`` (allgatherv, reduce-scatterv; rank r owns w_r / W of M) the same with weights,
      M w(S) / (W B+(S)), exact too (forest packs k w_r trees at root r);
    - broadcast / reduce: M / (the root's smallest cut) (exact: arborescence packing reaches it);
    - alltoall: the maximum concurrent flow LP optimum (exact in the bandwidth model); alltoallv: the
      same LP for ``demand`` (None: 1 chunk per pair), M the whole demand;
    - allreduce (valid on directed links, where reduce-scatter then allgather in series is *not* a
      bound): (a) for every cut S with gpus on both sides, the gpus outside need the sum of all M
      elements, which depends on the inputs inside S, so at least M bytes leave S, and likewise M
      bytes enter S: M / min B+(S) and M / min B-(S); (b) for any partition of the gpus into G >= 2
      groups, one element's sum must reach every group, which takes at least 2(G-1) messages between
      groups (one-way gossip among the groups, each taken as one node that knows what any of its gpus
      knows: before the first group knows the sum, each other group must have sent; after it, each
      other group must receive), each leaving one group's external links: 2(G-1) M / (sum of the
      groups' external egress), and the same with ingress. The partitions tried join gpus by their
      fastest links (every gpu alone; DGX boxes; MI250 packages; see :func:`_gossip_groups`). With
      every gpu alone on symmetric switch fabrics (b) equals reduce-scatter + allgather (2(N-1)/N M/B
      per gpu); elsewhere this is a bound, not known to be tight.
    - allreduce with in-switch operations (switches with ``capabilities``): (a) holds unchanged (it is an
      information argument, wherever sums are formed). (b) changes. An element that no switch combines
      is moved by forwarding and copying only, so on the ingress side the gossip count 2(G-1) holds
      (each of the G-1 groups that learn the sum last must have sent a message before the first knew it,
      each such message enters some group, and each of those G-1 groups receives after), but a multicast
      copy or a switch-made sum need not leave a group, so on the egress side only "each group sends
      the element at least once" (G messages) is left. An element a switch combines still costs G
      ingress messages (every group receives it) and at least one element of the switches' reduced
      output, of which they produce at most R GB/s in all (the summed ``reduction.throughput``; no
      limit when one switch has none). With a fraction f of the elements combined in switches, T >=
      max(f M / R, ((1 - f) 2(G-1) + f G) M / I) for the groups' external ingress I; the smallest
      over f is T >= 2(G-1) M / (I + (G-2) R) when R < I/G, else G M / I. Group-size, operation and
      type limits only restrict the switch, so leaving them out keeps the bound valid (it assumes the
      collective's operation and type are ones the switch serves). On one NVSwitch box of N gpus this
      falls from 2(N-1)/N M/B towards M/B as R grows.

    Every term adds the smallest latency of a link the data must cross after its last byte does; the
    reach term is the longest shortest-latency path some data must take (all gpu pairs; from the root
    for broadcast; to the root for reduce).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> topo = load_topology("dgx-a100:boxes=2")
    >>> ag, ar = time_bound(topo, Kind.ALLGATHER), time_bound(topo, Kind.ALLREDUCE)
    >>> round(ag.bandwidth_algbw_GBps(), 2), round(ar.bandwidth_algbw_GBps(), 2), ar.label
    (346.67, 173.33, 'bound')
    >>> h100 = load_topology("dgx-h100")
    >>> [round(time_bound(t, Kind.ALLREDUCE).bandwidth_algbw_GBps(), 2) for t in (h100, h100.passive())]
    [400.5, 257.14]
    """
    kind = kind if isinstance(kind, Kind) else Kind(kind)
    n = topology.num_ranks
    all_ranks = list(range(n))
    terms: list[BoundTerm]
    optimum = balanced_switches(topology)
    weights = uneven_weights(kind, shards, n)
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        reverse = kind == Kind.REDUCESCATTER
        cut, net = _cut(topology, reverse=reverse, weights=weights)
        terms = [BoundTerm("cut: the data owned inside the bottleneck cut must cross it",
                           Fraction(1, n if weights is None else sum(weights)) / (cut.rate * GIGA),
                           _cut_latency_s(topology, cut, net))]
        owners = all_ranks if weights is None else [r for r in all_ranks if weights[r]]
        reach = _reach_s(topology, owners, all_ranks) if not reverse else _reach_s(topology, all_ranks, owners)
    elif kind in (Kind.BROADCAST, Kind.REDUCE):
        reverse = kind == Kind.REDUCE
        cut, net = _cut(topology, reverse=reverse, root=root)
        terms = [BoundTerm("cut: the root's smallest cut", 1 / (cut.rate * GIGA), _cut_latency_s(topology, cut, net))]
        others = [r for r in all_ranks if r != root]
        reach = _reach_s(topology, [root], others) if not reverse else _reach_s(topology, others, [root])
    elif kind in (Kind.ALLTOALL, Kind.ALLTOALLV):
        lp = alltoall_bound(topology) if kind == Kind.ALLTOALL else alltoall_bound(
            topology, demand if demand is not None else _uniform(topology.num_ranks))
        smallest = min((float(lat) for _, _, lat in topology.graph.edges(data="latency")), default=0.0) * 1e-6
        terms = [BoundTerm("maximum concurrent flow (LP optimum)", 1 / (Fraction(repr(lp.lp_algbw_GBps)) * GIGA),
                           smallest)]
        optimum = True
        if lp.demand is None:
            reach = _reach_s(topology, all_ranks, all_ranks)
        else:  # only the pairs that send anything must be reached
            reach = max((_reach_s(topology, [s], [d for d in all_ranks if row[d]])
                         for s, row in enumerate(lp.demand) if any(row)), default=0.0)
    elif kind == Kind.ALLREDUCE:
        optimum = False
        terms = _allreduce_terms(topology)
        reach = _reach_s(topology, all_ranks, all_ranks)
    else:  # pragma: no cover - every Kind is handled above
        raise InputError("", "collective", f"no bound for {kind}")
    in_switch = kind == Kind.ALLREDUCE and bool(topology.capabilities)
    return TimeBound(topology.name, kind, tuple(terms), reach, optimum, in_switch)
