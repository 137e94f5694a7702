"""The exact cut bound and the best tree rate for a given number of trees per root.

Roots carry integer weights ``w`` (allgather: 1 per gpu; broadcast: 1 at the root). Each root r sends
``w_r`` units of data to every compute node; the largest common rate x (GB/s per unit of weight) is

    x* = min over cuts S (S holds some weight, S misses some gpu) of  B+(S) / w(S)

where B+(S) is the bandwidth leaving S (see ``shared/facts/cost-models.md``: every byte owned inside S
must leave S at least once; multicast lets one copy serve everyone outside). x is feasible iff, with a
super source s joined to every root by an arc of capacity x*w_r and every link at its bandwidth, every
gpu v has max-flow(s -> v) >= x*W (Edmonds' branching theorem in its flow form).

:func:`cut_bound` finds x* by parametric (Newton / Dinkelbach) search on that test rather than by
bisection: a failed test at x returns a minimum cut S with B+(S)/w(S) < x, which becomes the next x, so
every step is exact, x decreases strictly and the last S *is* the bottleneck cut. The answer comes with
its certificate: feasibility at x* (a max-flow per gpu) and the cut S whose ratio equals x* (so nothing
above x* is feasible). :func:`bisect_bound` is the classic binary search with denominator recovery, kept
as a cross-check.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from synth.cuts.network import FlowSolver, Network
from synth.cuts.quotient import QuotientCutOracle, arrays, gpu_quotient
from synth.cuts.symmetry import gpu_orbits


@dataclass(frozen=True)
class CutBound:
    """The optimal rate and its bottleneck cut.

    Attributes
    ----------
    rate : Fraction
        x*: GB/s per unit of root weight (for allgather, per gpu: algbw = N * rate).
    cut : tuple of int
        Node indices of the bottleneck cut S (ratio B+(S)/w(S) == rate).
    egress : Fraction
        B+(S) in GB/s.
    weight : int
        w(S): root weight inside S (for allgather, gpus inside S).
    flows : int
        Max-flow calls spent.
    """

    rate: Fraction
    cut: tuple[int, ...]
    egress: Fraction
    weight: int
    flows: int


class CutOracle:
    """Tests "max-flow(s -> v) >= requirement for every gpu v" on integer capacities.

    Arc capacities and the source arcs' scale are set with :meth:`configure`; :meth:`violation`
    returns the source side of a violated cut (without s) or None. The gpu that failed last is tried
    first next time, which is where violations tend to repeat.
    """

    def __init__(self, net: Network, weights: Sequence[int]) -> None:
        self.net = net
        self.weights = list(weights)
        self.total_weight = sum(self.weights)
        self.source = net.num_nodes
        self.solver = FlowSolver(net.num_nodes + 1)
        self.arcs = [self.solver.add_arc(t, h, 0) for t, h in zip(net.tails, net.heads, strict=True)]
        self.root_arcs = [(r, self.solver.add_arc(self.source, r, 0)) for r, w in enumerate(self.weights) if w]
        self.requirement = 0
        self._start = 0

    def configure(self, capacities: Sequence[int], root_scale: int) -> None:
        """Set every arc's capacity and the source arcs to ``root_scale * w_r``."""
        self.solver.set_capacities(self.arcs, list(capacities))
        self.solver.set_capacities([a for _, a in self.root_arcs], [root_scale * self.weights[r] for r, _ in self.root_arcs])
        self.requirement = root_scale * self.total_weight

    def violation(self) -> list[int] | None:
        """A cut S (node indices) that some gpu's max-flow test exposes, or None if all gpus pass."""
        n = self.net.num_compute
        for step in range(n):
            v = (self._start + step) % n
            if self.solver.max_flow(self.source, v) < self.requirement:
                self._start = v
                return [u for u in self.solver.source_side() if u != self.source]
        return None

    @property
    def flows(self) -> int:
        """Max-flow calls so far."""
        return self.solver.calls


def _weight(weights: Sequence[int], nodes: Sequence[int]) -> int:
    return sum(weights[v] for v in nodes if v < len(weights))


def _node_sums(net: Network) -> tuple[list[int], list[int]]:
    """Every node's total outgoing and incoming capacity, in units."""
    if sum(net.units) < 2**62:
        a = arrays(net)
        units = np.asarray(net.units, dtype=np.int64)
        outward = np.zeros(net.num_nodes, dtype=np.int64)
        inward = np.zeros(net.num_nodes, dtype=np.int64)
        np.add.at(outward, a.tails, units)
        np.add.at(inward, a.heads, units)
        return outward.tolist(), inward.tolist()
    return ([sum(net.units[a] for a in arcs) for arcs in net.out_arcs],
            [sum(net.units[a] for a in arcs) for arcs in net.in_arcs])


def _initial_cut(net: Network, weights: Sequence[int]) -> tuple[Fraction, list[int]]:
    """The best of the obvious cuts: one root alone, and everything but one gpu."""
    best: tuple[Fraction, int, bool] | None = None  # (ratio, node, True: the node alone / False: all but it)
    total = sum(weights)
    outward, inward = _node_sums(net)
    for r, w in enumerate(weights):
        if w:
            ratio = Fraction(outward[r], w)
            if best is None or ratio < best[0]:
                best = (ratio, r, True)
    for v in range(net.num_compute):
        rest = total - (weights[v] if v < len(weights) else 0)
        if rest > 0:
            ratio = Fraction(inward[v], rest)
            if best is None or ratio < best[0]:
                best = (ratio, v, False)
    assert best is not None
    ratio, node, alone = best
    return ratio, [node] if alone else [u for u in range(net.num_nodes) if u != node]


#: From this many gpus on, :func:`make_oracle` looks for symmetry by default.
QUOTIENT_MIN_GPUS = 64
#: The quotient test is used when it needs at most this many representatives (and at most a quarter of
#: the gpus); otherwise every gpu is tested on the network itself.
QUOTIENT_MAX_REPRESENTATIVES = 256


def make_oracle(net: Network, weights: Sequence[int], symmetric: bool | None = None) -> CutOracle | QuotientCutOracle:
    """The flow test for ``net``: on quotient networks, one gpu per orbit, when the network has enough
    symmetry (see :mod:`~synth.cuts.quotient`), else a max-flow per gpu on the network.

    ``symmetric``: None (default) tries symmetry from :data:`QUOTIENT_MIN_GPUS` gpus on, True always,
    False never. Both tests give the same answers; only the time differs.
    """
    n = net.num_compute
    if symmetric is False or symmetric is None and n < QUOTIENT_MIN_GPUS:
        return CutOracle(net, weights)
    labels = gpu_orbits(net, weights)
    representatives = sorted(set(labels))
    if len(representatives) > QUOTIENT_MAX_REPRESENTATIVES or (symmetric is None and 4 * len(representatives) > n):
        return CutOracle(net, weights)
    quotients = []
    for v in representatives:
        q = gpu_quotient(net, weights, v)
        if q is None:
            return CutOracle(net, weights)
        quotients.append(q)
    return QuotientCutOracle(net, weights, representatives, quotients)


def cut_bound(net: Network, weights: Sequence[int], symmetric: bool | None = None) -> CutBound:
    """The exact optimal rate x* and a bottleneck cut, by parametric max-flow search.

    ``symmetric`` chooses the flow test (see :func:`make_oracle`); the answer does not depend on it.

    Examples
    --------
    >>> from synth.topology import Topology
    >>> topo = Topology.build("star", ["a", "b", "c"], ["sw"], [(g, "sw", 10.0) for g in "abc"])
    >>> bound = cut_bound(Network.from_topology(topo), [1, 1, 1])
    >>> bound.rate, bound.weight  # 2 gpus behind 10 GB/s: 5 GB/s per gpu, algbw 15 GB/s
    (Fraction(5, 1), 2)
    """
    if not any(weights):
        raise ValueError("no root weight")
    oracle = make_oracle(net, weights, symmetric)
    ratio, cut = _initial_cut(net, weights)
    while True:
        p, q = ratio.numerator, ratio.denominator
        oracle.configure([q * u for u in net.units], p)
        found = oracle.violation()
        if found is None:
            break
        new_ratio = Fraction(net.egress_units(found), _weight(weights, found))
        if new_ratio >= ratio:  # cannot happen with an exact solver; guard against an endless loop
            raise RuntimeError("max-flow returned a cut that is not violated")
        ratio, cut = new_ratio, found
    rate = ratio / net.scale
    return CutBound(rate, tuple(sorted(cut)), Fraction(net.egress_units(cut), net.scale), _weight(weights, cut),
                    oracle.flows)


def feasible_rate(net: Network, weights: Sequence[int], rate: Fraction, symmetric: bool | None = None) -> bool:
    """True when every root can send ``rate`` GB/s per unit of weight at once (the flow test)."""
    oracle = make_oracle(net, weights, symmetric)
    x = rate * net.scale
    oracle.configure([x.denominator * u for u in net.units], x.numerator)
    return oracle.violation() is None


def bisect_bound(net: Network, weights: Sequence[int]) -> Fraction:
    """x* by binary search on the rate with the same flow test, then exact recovery.

    Every cut ratio B+(S)/w(S) is a fraction with denominator at most ``W * scale`` (W the total weight),
    so two distinct candidates differ by more than ``1 / (W*scale)**2``: bisect until the interval is
    that narrow, recover the fraction with ``limit_denominator`` and confirm it (feasible at x*,
    infeasible just above). A cross-check for :func:`cut_bound`.
    """
    total = sum(weights)
    denominator_bound = total * net.scale
    low = Fraction(0)
    high = Fraction(_initial_cut(net, weights)[0], net.scale)
    while high - low > Fraction(1, 2 * denominator_bound**2):
        middle = (low + high) / 2
        if feasible_rate(net, weights, middle):
            low = middle
        else:
            high = middle
    candidate = ((low + high) / 2).limit_denominator(denominator_bound)
    if not feasible_rate(net, weights, candidate):
        candidate = low.limit_denominator(denominator_bound)
    assert feasible_rate(net, weights, candidate)
    assert not feasible_rate(net, weights, candidate + Fraction(1, 4 * denominator_bound**2))
    return candidate


def tree_capacities(net: Network, rate: Fraction, trees: int) -> list[int]:
    """Arc capacities in trees: ``floor(trees * b(e) / rate)`` (how many of the trees each arc can carry)."""
    x = rate * net.scale
    return [trees * u * x.denominator // x.numerator for u in net.units]


def lcd_trees(net: Network, rate: Fraction) -> int:
    """The smallest k that makes every ``k * b(e) / rate`` an integer (always enough trees per root)."""
    return math.lcm(*((b / rate).denominator for b in set(net.bandwidth)))


def _largest_rate_for_cut(units: list[int], trees: int, need: int, start: Fraction) -> Fraction:
    """The largest x <= start (in units) with sum(floor(trees*u/x)) >= need over the cut's arcs."""
    x = start
    while True:
        floors = [trees * u * x.denominator // x.numerator for u in units]
        if sum(floors) >= need:
            return x
        x = max(Fraction(trees * u, f + 1) for u, f in zip(units, floors, strict=True))


def rate_with_trees(net: Network, weights: Sequence[int], trees: int, optimum: Fraction) -> tuple[Fraction, list[int]]:
    """The best rate reachable with ``trees`` trees per unit of root weight, and its arc capacities.

    Arc e can carry ``floor(trees * b(e) / x)`` trees at rate x; the answer is the largest x <= optimum
    at which those capacities pass the flow test. A failing test names a cut; x drops to the largest
    value at which that cut's rounded-down capacity suffices, and the test repeats.
    """
    oracle = make_oracle(net, weights)
    x = optimum * net.scale
    while True:
        capacities = [trees * u * x.denominator // x.numerator for u in net.units]
        oracle.configure(capacities, trees)
        found = oracle.violation()
        if found is None:
            return x / net.scale, capacities
        inside = set(found)
        units = [net.units[a] for v in inside for a in net.out_arcs[v] if net.heads[a] not in inside]
        x = _largest_rate_for_cut(units, trees, trees * _weight(weights, found), x)


def optimal_tree_counts(net: Network, weights: Sequence[int], optimum: CutBound, limit: int) -> Iterator[tuple[int, list[int]]]:
    """Tree counts k (ascending, at most ``limit``) at which the optimum is reachable, with capacities.

    On the bottleneck cut S every arc leaving S is saturated at the optimum, so ``k * b(e) / x*`` must be
    an integer on each of them: only multiples of that cut's common denominator are tried."""
    rate = optimum.rate
    inside = set(optimum.cut)
    step = math.lcm(*((b / rate).denominator for b in {net.bandwidth[a] for v in inside for a in net.out_arcs[v]
                                                         if net.heads[a] not in inside}))
    oracle = make_oracle(net, weights)
    for trees in range(step, limit + 1, step):
        capacities = tree_capacities(net, rate, trees)
        oracle.configure(capacities, trees)
        if oracle.violation() is None:
            yield trees, capacities
