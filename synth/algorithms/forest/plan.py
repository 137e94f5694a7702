"""The forest plan: bound, tree count, edge splitting and packing, cached per topology and direction."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction

from synth.algorithms.forest.packing import (
    SHALLOW_ARC_BUDGET,
    TreeClass,
    pack_trees,
    shallower_trees,
    tree_arcs,
)
from synth.algorithms.forest.splitting import LogicalGraph, SplitFailed, split_switches
from synth.cuts.allgather import (
    CutBound,
    cut_bound,
    lcd_trees,
    optimal_tree_counts,
    rate_with_trees,
)
from synth.cuts.network import Network
from synth.cuts.symmetry import box_translation, free_group, powers
from synth.errors import InfeasibleError, InputError, LimitError
from synth.topology import Topology


@dataclass
class ForestPlan:
    """Trees that reach (or, with a tree limit, approach) the optimum for one direction and root set.

    Attributes
    ----------
    net : Network
        The network the trees live in (reversed for reduce-scatter and reduce).
    weights : list of int
        Root weights: 1 per gpu (all-to-all roots), 1 at a single root, or each gpu's share (uneven shards).
    optimum : CutBound
        The exact optimal rate and its bottleneck cut.
    trees : int
        Trees per unit of root weight (k).
    rate : Fraction
        The rate these trees reach, GB/s per unit of weight (== optimum.rate unless limited).
    classes : list of TreeClass
        The packed trees, identical ones grouped with a multiplicity.
    logical : LogicalGraph
        The switch-free logical graph and its physical paths.
    """

    net: Network
    weights: list[int]
    optimum: CutBound
    trees: int
    rate: Fraction
    classes: list[TreeClass]
    logical: LogicalGraph
    timings: dict[str, float] = field(default_factory=dict)
    flows: dict[str, int] = field(default_factory=dict)
    symmetric: bool = False

    @property
    def optimal(self) -> bool:
        """True when the trees reach the exact optimum."""
        return self.rate == self.optimum.rate


def _weights(topology: Topology, root: int | None, weights: tuple[int, ...] | None = None) -> list[int]:
    if weights is not None:
        return list(weights)
    if root is None:
        return [1] * topology.num_ranks
    return [1 if r == root else 0 for r in topology.ranks]


def _tree_limit(net: Network, weights: list[int], max_arcs: int | None) -> int:
    arcs_per_tree = max(1, net.num_compute - 1)
    return max(1, _arc_cap(max_arcs) // (sum(weights) * arcs_per_tree))


def _arc_cap(max_arcs: int | None) -> int:
    return max_tree_arcs() if max_arcs is None else min(max_arcs, max_tree_arcs())


def max_tree_arcs() -> int:
    """The ``max_tree_arcs`` limit in force (:mod:`synth.limits`): most arcs a plan's trees may have."""
    from synth import limits

    return int(limits.limit_value("max_tree_arcs"))


#: Most tree counts tried when looking for the fewest trees that reach the optimum.
MAX_TREE_COUNT_TRIES = 256


def _candidates(net: Network, weights: list[int], optimum: CutBound, max_trees: int | None,
                max_arcs: int | None = None, min_trees: int | None = None) -> Iterator[tuple[Fraction, int, list[int]]]:
    """(rate, k, capacities) to try in order: the best rate first, then the fewest trees; at most
    ``max_arcs`` tree arcs (and the ``max_tree_arcs`` limit). With ``min_trees``: the optimum with at least
    that many trees per root (a multiple of the count that always reaches it, where no smaller one does)."""
    limit = _tree_limit(net, weights, max_arcs)
    if min_trees is not None:
        if isinstance(min_trees, bool) or not isinstance(min_trees, int) or min_trees < 1:
            raise InputError("", "min_trees_per_root", f"expected a positive integer, got {min_trees!r}")
        if max_trees is not None:
            raise InputError("", "min_trees_per_root", "give min_trees_per_root or max_trees_per_root, not both")
        enough = lcd_trees(net, optimum.rate)
        least = -(-min_trees // enough) * enough  # k * b(e) / rate is an integer on every arc: always feasible
        if least > limit:
            raise LimitError(f"min_trees_per_root={min_trees} needs {least} trees per root, over the "
                             f"{_arc_cap(max_arcs):,} tree arcs allowed (SYNTH_MAX_TREE_ARCS): use at most {limit}")
        for k, caps in optimal_tree_counts(net, weights, optimum, least):  # ends with least at the latest
            if k >= min_trees:
                yield optimum.rate, k, caps
        return
    if max_trees is None:
        enough = lcd_trees(net, optimum.rate)  # always reaches the optimum; a smaller k often does too
        tries = 0
        for k, caps in optimal_tree_counts(net, weights, optimum, min(enough, limit)):
            yield optimum.rate, k, caps
            tries += 1
            if tries >= MAX_TREE_COUNT_TRIES:
                break
        if enough > limit:
            raise LimitError(
                f"the optimum needs up to {enough} trees per root, and {_arc_cap(max_arcs):,} tree arcs allow "
                f"{limit} (SYNTH_MAX_TREE_ARCS, or SYNTH_MAX_TRANSFERS for a schedule of transfers); pass "
                f"max_trees_per_root to trade a little bandwidth for fewer trees")
        return
    if max_trees < 1:
        raise InputError("", "max_trees_per_root", f"expected a positive integer, got {max_trees}")
    if max_trees > limit:
        raise LimitError(f"max_trees_per_root={max_trees} would make more than {_arc_cap(max_arcs):,} tree arcs "
                         f"(SYNTH_MAX_TREE_ARCS, or SYNTH_MAX_TRANSFERS for a schedule of transfers); use at most {limit}")
    results = []
    for k in range(1, max_trees + 1):
        rate, caps = rate_with_trees(net, weights, k, optimum.rate)
        results.append((rate, k, caps))
        if rate == optimum.rate:
            break
    results.sort(key=lambda item: (-item[0], item[1]))
    yield from results


#: From this many gpus on, box symmetry (when the topology has it) is used by default.
SYMMETRY_MIN_GPUS = 64


def build_plan(topology: Topology, reverse: bool = False, root: int | None = None,
               max_trees: int | None = None, symmetric: bool | None = None, max_arcs: int | None = None,
               spread: bool = False, shallow_budget: int = SHALLOW_ARC_BUDGET,
               min_trees: int | None = None, shallow_share: float | None = None,
               weights: tuple[int, ...] | None = None) -> ForestPlan:
    """Compute the bound, pick the tree count, split the switches off and pack the trees.

    ``weights``: every gpu's root weight (uneven shards: root r packs k x weights[r] trees), instead of one
    per gpu or one at ``root``; such plans are packed without symmetry.

    ``symmetric``: use the box-translation symmetry (see :mod:`~synth.cuts.symmetry`) when
    the topology has it: None (default) from :data:`SYMMETRY_MIN_GPUS` gpus on, True whenever possible,
    False never. It needs one root per gpu (allgather, reduce-scatter, allreduce). ``spread``: split the
    switches into many light pairs (see :func:`~synth.algorithms.forest.splitting.split_switches`).
    ``shallow_budget``: the depth pass's budget in tree arcs (:func:`~synth.algorithms.forest.packing.shallower_trees`),
    for plans packed without symmetry; with ``shallow_share`` the pass is quick (``quick`` there) and its
    budget also at most that share of the packed trees' arcs
    (:func:`~synth.algorithms.forest.packing.tree_arcs`), which bounds its time by a share of the packing's
    (:data:`~synth.algorithms.forest.packing.QUICK_SHALLOW_SHARE` keeps it within a fifth of the rest of the
    synthesis). ``min_trees``: the optimum with at least that many trees per root."""
    started = time.perf_counter()
    net = Network.from_topology(topology, reverse=reverse)
    uneven = weights is not None
    root_weights = _weights(topology, root, weights)
    optimum = cut_bound(net, root_weights)
    timings = {"bound": time.perf_counter() - started}
    flows = {"bound": optimum.flows}
    group = None
    if root is None and not uneven and (symmetric or symmetric is None and topology.num_ranks >= SYMMETRY_MIN_GPUS):
        group = symmetry_group(net, topology, root_weights)
    failures = []
    for rate, trees, capacities in _candidates(net, root_weights, optimum, max_trees, max_arcs, min_trees):
        mark = time.perf_counter()
        used = group
        try:
            logical = split_switches(net, capacities, root_weights, trees, group=used, spread=spread)
        except SplitFailed as reason:
            # splitting an orbit of pairs by one amount everywhere can be impossible where a splitting
            # exists (a dragonfly's routers): fall back to splitting switch by switch, without the group
            failures.append(f"k={trees}: {reason}")
            if used is None:
                continue
            used = None
            try:
                logical = split_switches(net, capacities, root_weights, trees, spread=spread)
            except SplitFailed as generic_reason:
                failures.append(f"k={trees}: {generic_reason}")
                continue
        timings["split"] = time.perf_counter() - mark
        mark = time.perf_counter()
        classes, pack_flows = pack_trees(net.num_compute, logical.capacity, [trees * w for w in root_weights], group=used)
        timings["pack"] = time.perf_counter() - mark
        if used is None:
            mark = time.perf_counter()
            # an arc through switches is as many hops as its path has links
            hops = {arc: max(len(path) - 1 for path, _ in bundles) for arc, bundles in logical.paths.items()}
            budget = shallow_budget if shallow_share is None else \
                min(shallow_budget, int(shallow_share * tree_arcs(classes)))
            classes = shallower_trees(net.num_compute, logical.capacity, classes, hops, budget,
                                      quick=shallow_share is not None)
            timings["shallow"] = time.perf_counter() - mark
        flows.update(split=logical.flows, pack=pack_flows)
        timings["total"] = time.perf_counter() - started
        return ForestPlan(net, root_weights, optimum, trees, rate, classes, logical, timings, flows, used is not None)
    unbalanced = unbalanced_switches(topology)
    why = ("switches do not multicast, so a switch that can send more than it receives cannot serve the cut "
           "bound: " + ", ".join(f"{name} receives {inward} GB/s, sends {outward} GB/s"
                                 for name, inward, outward in unbalanced[:4])) if unbalanced else \
        "; ".join(failures[:3])
    raise InfeasibleError(f"forest cannot reach the cut bound on {topology.name!r}: {why}")


def symmetry_group(net: Network, topology: Topology, weights: list[int]) -> list[list[int]] | None:
    """The larger of the box translations (:func:`~synth.cuts.symmetry.box_translation`) and
    the free rotation group (:func:`~synth.cuts.symmetry.free_group`), or None."""
    sigma = box_translation(net, topology)
    boxes = powers(sigma) if sigma is not None else None
    rotations = free_group(net, weights)
    if rotations is not None and (boxes is None or len(rotations) > len(boxes)):
        return rotations
    return boxes


def unbalanced_switches(topology: Topology) -> list[tuple[str, Fraction, Fraction]]:
    """Switches whose total ingress and egress bandwidth differ: (name, ingress, egress) in GB/s."""
    exact: dict[float, Fraction] = {}

    def total(values: Iterator[float]) -> Fraction:
        result = Fraction(0)
        for value in values:
            fraction = exact.get(value)
            if fraction is None:
                fraction = exact[value] = Fraction(repr(float(value)))
            result += fraction
        return result

    graph = topology.graph
    result = []
    for switch in topology.switches:
        inward = total(bandwidth for _, _, bandwidth in graph.in_edges(switch, data="bandwidth"))
        outward = total(bandwidth for _, _, bandwidth in graph.out_edges(switch, data="bandwidth"))
        if inward != outward:
            result.append((switch, inward, outward))
    return result


def is_symmetric(topology: Topology) -> bool:
    """True when every link has a reverse link of the same bandwidth."""
    graph = topology.graph
    return all(graph.has_edge(v, u) and graph.edges[v, u]["bandwidth"] == data["bandwidth"]
               for u, v, data in graph.edges(data=True))


#: Tree plans kept per topology (the most recently used).
PLANS_KEPT = 8


def get_plan(topology: Topology, reverse: bool = False, root: int | None = None,
             max_trees: int | None = None, symmetric: bool | None = None, max_arcs: int | None = None,
             spread: bool = False, shallow_budget: int = SHALLOW_ARC_BUDGET,
             min_trees: int | None = None, shallow_share: float | None = None,
             weights: tuple[int, ...] | None = None) -> ForestPlan:
    """:func:`build_plan`, memoized per topology object (the demo asks for the same trees several times).

    On a symmetric topology (every link has a reverse link of the same bandwidth) the reversed network is
    the network itself, so reduce-scatter and reduce reuse the allgather and broadcast trees, read
    backwards."""
    if reverse and is_symmetric(topology):
        reverse = False
    key = (reverse, root, max_trees, symmetric, max_arcs, spread, shallow_budget, min_trees, shallow_share, weights)
    return topology.memoized(__name__, key, lambda: build_plan(topology, reverse, root, max_trees, symmetric,
                                                               max_arcs, spread, shallow_budget, min_trees,
                                                               shallow_share, weights), maxsize=PLANS_KEPT)
