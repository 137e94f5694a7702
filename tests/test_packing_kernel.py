"""The compiled packer (synth.algorithms.forest.packing_kernel) grows the Python packer's trees."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.algorithms.forest import packing, plan
from synth.algorithms.forest.packing import PackingError, _DepthBound, run_packer, shallower_trees
from synth.cuts.allgather import cut_bound, rate_with_trees
from synth.cuts.network import Network
from synth.library import load_topology
from tests.strategies import forest_topologies


def _outcome(num_compute, capacity, copies, order, bound, hops, limit, compiled):
    """What run_packer returns, or the signal it raises with the arcs it had grown."""
    fresh = None if bound is None else _DepthBound(list(bound.old), bound.lexicographic)
    try:
        return run_packer(num_compute, capacity, copies, order, fresh, hops, limit, compiled)
    except (packing._TooDeep, packing._OverBudget) as signal:
        return type(signal).__name__, signal.grown
    except PackingError as error:
        return "PackingError", str(error)


def _logical(topo, trees):
    net = Network.from_topology(topo)
    weights = [1] * net.num_compute
    _, capacities = rate_with_trees(net, weights, trees, cut_bound(net, weights).rate)
    from synth.algorithms.forest.splitting import split_switches

    return net, split_switches(net, capacities, weights, trees)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=forest_topologies(max_gpus=6), trees=st.integers(1, 3), data=st.data())
def test_compiled_packer_grows_the_python_packers_trees(topo, trees, data):
    """Any root order, copies per root, arc lengths, depth bound and arc limit: the same tree classes in
    the same order, or the same signal after the same number of arcs."""
    net, logical = _logical(topo, trees)
    n = net.num_compute
    copies = data.draw(st.lists(st.integers(0, trees), min_size=n, max_size=n), label="copies")
    order = data.draw(st.permutations(list(range(n))), label="order")
    hops = {arc: data.draw(st.integers(1, 3)) for arc in sorted(logical.capacity)} \
        if data.draw(st.booleans(), label="lengths") else None
    bound = None
    if sum(copies) and data.draw(st.booleans(), label="bounded"):
        old = sorted(data.draw(st.lists(st.integers(1, 2 * n), min_size=sum(copies), max_size=sum(copies))),
                     reverse=True)
        bound = _DepthBound(old, data.draw(st.booleans(), label="lexicographic"))
    limit = data.draw(st.one_of(st.none(), st.integers(0, n * sum(copies) + 1)), label="arc limit")
    python = _outcome(n, logical.capacity, copies, order, bound, hops, limit, compiled=False)
    compiled = _outcome(n, logical.capacity, copies, order, bound, hops, limit, compiled=True)
    assert compiled == python


def test_compiled_packer_reports_a_capacity_that_cannot_hold_the_trees():
    """Too little capacity: both packers stop with the same PackingError."""
    capacity = {(0, 1): 1, (1, 2): 1, (2, 0): 1}
    python = _outcome(3, capacity, [2, 0, 0], None, None, None, None, compiled=False)
    assert python[0] == "PackingError" and "root 0" in python[1]
    assert _outcome(3, capacity, [2, 0, 0], None, None, None, None, compiled=True) == python


def test_compiled_depth_pass_matches_the_python_pass_on_mi250():
    """A named system, its classes split by the packing: the depth pass gives the same forest either way."""
    forest_plan = plan.build_plan(load_topology("mi250"), max_trees=4, shallow_budget=0)
    hops = {arc: max(len(path) - 1 for path, _ in bundles) for arc, bundles in forest_plan.logical.paths.items()}
    capacity, classes = forest_plan.logical.capacity, forest_plan.classes
    n = forest_plan.net.num_compute
    assert any(tree.copies < forest_plan.trees for tree in classes)  # the packing split some classes
    budget = 8_000
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing, "compiled_pays", lambda arcs, saving: False)
        python = shallower_trees(n, capacity, classes, hops, budget)
        patch.setattr(packing, "compiled_pays", lambda arcs, saving: True)
        compiled = shallower_trees(n, capacity, classes, hops, budget)
    assert compiled == python
    assert compiled != classes  # the pass changed the trees
