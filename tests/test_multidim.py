"""Multi-dimensional collectives: baseline dimension order and the Themis-style scheduler."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.algorithms import synthesize
from synth.algorithms.multidim import themis_orders
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.evaluate import evaluate
from synth.library import SHIPPED_FILES, load_topology
from synth.verify import verify

#: The plain chunk-level α-β model of the closed forms: no protocol costs, every chunk one message.
IDEAL = {"protocol": "ideal", "slices": 1}

KINDS = [Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE]
GIGA = 1e9


def relative(a: float, b: float) -> float:
    return abs(a - b) / b


def hierarchical_formula(sizes: list[int], bandwidths: list[float], size: int, phases: int) -> float:
    """cost-models.md: Σ_d phases·((p_d-1)/p_d)·(n / Π_{e<d} p_e) / B_d (phases 2 for allreduce)."""
    total, data = 0.0, float(size)
    for p, bandwidth in zip(sizes, bandwidths, strict=True):
        total += phases * (p - 1) / p * data / (bandwidth * GIGA)
        data /= p
    return total


@pytest.mark.parametrize("spec", ["torus:dims=4x4", "tpu-v4:dims=2x2x2", "hypercube:d=3", "multidim",
                                  "multidim:kinds=Ring/FullyConnected/Switch,sizes=3x2x2,bandwidths=50x100x25,latencies=0.5",
                                  "ring:n=5", "switch:n=4"])
@pytest.mark.parametrize("scheduler", ["baseline", "themis"])
def test_verifies_on_multidimensional_systems(spec, scheduler):
    topo = load_topology(spec)
    for kind in KINDS:
        schedule = synthesize(topo, kind, "multidim", scheduler=scheduler)
        verify(schedule, topo)
        assert len(schedule.params["orders"]) == schedule.params["splits"]


@pytest.mark.parametrize("spec", sorted(set(SHIPPED_FILES.values())))
def test_shipped_topologies_verify_or_say_why(spec):
    topo = load_topology(spec)
    if topo.dimensions is None:
        with pytest.raises(NotApplicable, match="has no dimensions"):
            synthesize(topo, Kind.ALLREDUCE, "multidim")
        return
    for kind in KINDS:
        verify(synthesize(topo, kind, "multidim"), topo)
    verify(synthesize(topo, Kind.ALLREDUCE, "multidim", scheduler="themis", splits=2), topo)


@pytest.mark.parametrize("bandwidths", [(50.0, 400.0), (400.0, 50.0), (100.0, 100.0)])
def test_reducescatter_baseline_matches_the_hierarchical_formula(bandwidths):
    """Reduce-scatter along dim 0 then dim 1, data shrinking by p_0: exactly the formula (one phase each)."""
    topo = load_topology(f"multidim:sizes=4x4,bandwidths={bandwidths[0]}x{bandwidths[1]},latencies=0")
    schedule = synthesize(topo, Kind.REDUCESCATTER, "multidim")
    verify(schedule, topo)
    for size in (2**20, 2**30):
        expected = hierarchical_formula([4, 4], list(bandwidths), size, 1)
        assert relative(evaluate(schedule, topo, size, **IDEAL).time_s, expected) < 1e-9


def test_allreduce_baseline_between_bound_and_formula():
    """Allreduce: at most the sequential formula (a chunk's allgather along dim 0 may start inside the
    line that already holds it) and at least the overlap bound 2((P-1)/P)·n / Σ_d B_d."""
    topo = load_topology("multidim:sizes=4x4,bandwidths=50x400,latencies=0")
    size = 2**30
    time = evaluate(synthesize(topo, Kind.ALLREDUCE, "multidim"), topo, size, **IDEAL).time_s
    assert time <= hierarchical_formula([4, 4], [50, 400], size, 2) * (1 + 1e-9)
    assert time >= 2 * 15 / 16 * size / (450 * GIGA)


def test_themis_beats_the_fixed_orders_with_unequal_bandwidths():
    """2 dimensions, 100 and 200 GB/s: Themis's per-chunk orders beat both fixed orders in flow time."""
    topo = load_topology("multidim:sizes=4x4,bandwidths=100x200,latencies=0.5")
    size = 2**30
    themis = synthesize(topo, Kind.ALLREDUCE, "multidim", scheduler="themis")
    verify(themis, topo)
    assert {tuple(order) for order in themis.params["orders"]} == {(0, 1), (1, 0)}
    themis_time = evaluate(themis, topo, size, **IDEAL).time_s
    for order in ([0, 1], [1, 0]):
        fixed = synthesize(topo, Kind.ALLREDUCE, "multidim", order=order)
        verify(fixed, topo)
        assert themis_time < 0.95 * evaluate(fixed, topo, size, **IDEAL).time_s
    bound = 2 * 15 / 16 * size / (300 * GIGA)
    assert themis_time >= bound


def test_themis_on_a_torus_approaches_the_overlap_bound():
    """Equal dimensions: the baseline uses one dimension at a time, Themis keeps both busy (the Themis
    paper reports 1.88x average bandwidth utilization over the baseline order)."""
    topo = load_topology("torus:dims=4x4,latency=0")
    size = 2**30
    baseline = evaluate(synthesize(topo, Kind.ALLREDUCE, "multidim"), topo, size, **IDEAL).time_s
    themis = evaluate(synthesize(topo, Kind.ALLREDUCE, "multidim", scheduler="themis"), topo, size, **IDEAL).time_s
    assert baseline / themis > 1.7


def test_themis_orders():
    assert themis_orders([4, 4], [50.0, 400.0], 3, Kind.ALLREDUCE) == [[1, 0]] * 3
    assert themis_orders([2, 2], [10.0, 10.0], 4, Kind.ALLGATHER) == [[0, 1], [1, 0], [0, 1], [1, 0]]
    orders = themis_orders([2, 2, 2], [10.0, 10.0, 10.0], 3, Kind.ALLREDUCE)
    assert sorted(order[0] for order in orders) == [0, 1, 2]  # each dimension leads once


@settings(max_examples=10, deadline=None)
@given(sizes=st.lists(st.integers(2, 3), min_size=2, max_size=3),
       kinds=st.lists(st.sampled_from(["Ring", "Switch", "FullyConnected"]), min_size=3, max_size=3),
       splits=st.integers(1, 3))
def test_random_grids_verify(sizes, kinds, splits):
    spec = (f"multidim:kinds={'/'.join(kinds[:len(sizes)])},sizes={'x'.join(map(str, sizes))},"
            f"bandwidths={'x'.join(str(25 * (d + 1)) for d in range(len(sizes)))},latencies=0.5")
    topo = load_topology(spec)
    for kind in KINDS:
        for scheduler in ("baseline", "themis"):
            verify(synthesize(topo, kind, "multidim", scheduler=scheduler, splits=splits), topo)


def test_bad_options_are_clear():
    topo = load_topology("torus:dims=4x4")
    with pytest.raises(InputError, match="scheduler"):
        synthesize(topo, Kind.ALLREDUCE, "multidim", scheduler="fastest")
    with pytest.raises(InputError, match="permutation of the dimensions"):
        synthesize(topo, Kind.ALLREDUCE, "multidim", order=[0, 0])
    with pytest.raises(InputError, match="multiple of 32"):
        synthesize(topo, Kind.ALLREDUCE, "multidim", splits=2, chunks=16)
    with pytest.raises(NotApplicable, match="no dimensions"):
        synthesize(load_topology("dgx1"), Kind.ALLREDUCE, "multidim")
