"""Lower bounds on time (synth.bounds.time_bound): valid for every schedule of every algorithm, exact where
they claim to be optima, and the "% of bound" every command prints never above 100%."""

from __future__ import annotations

from fractions import Fraction

import pytest
from helpers import every_schedule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import topologies

from synth import Kind, Topology, load_topology, synthesize
from synth.bounds import time_bound
from synth.compare import run_all
from synth.evaluate import PlanOptions, evaluate_sizes

GIGA = 10**9
SIZES = [1024, 2**20, 2**26]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=topologies(max_gpus=5, max_switches=2), kind=st.sampled_from(list(Kind)))
def test_no_schedule_beats_the_bound_on_random_directed_topologies(topology, kind):
    bound = time_bound(topology, kind)
    for name, schedule in every_schedule(topology, kind):
        for plan in (None, PlanOptions(protocol="ideal", slices=16, window=1024)):
            for result in evaluate_sizes(schedule, topology, SIZES, options=plan):
                assert result.time_s >= bound.time(result.size) * (1 - 1e-9), (name, result, bound)
                # the bandwidth term alone is also below the schedule's own congestion time
                assert result.congestion_time_s >= float(bound.seconds_per_byte * result.size) * (1 - 1e-12)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_allreduce_bound_on_a_switch_is_the_classic_two_times_n_minus_one_over_n(p):
    topology = load_topology(f"switch:n={p},bandwidth=25,latency=0")
    bound = time_bound(topology, Kind.ALLREDUCE)
    assert bound.seconds_per_byte == Fraction(2 * (p - 1), p) / (25 * GIGA)
    assert bound.label == "bound" and bound.reach_s == 0.0


def test_allgather_bound_is_the_exact_optimum_with_its_cut_latency():
    topology = load_topology("dgx-a100:boxes=2")
    bound = time_bound(topology, Kind.ALLGATHER)
    assert bound.label == "optimum"
    assert round(bound.bandwidth_algbw_GBps(), 2) == 346.67
    # the bottleneck cut is one gpu's egress (0.7 us to the NVSwitch, 0.3 us to its NIC): the last byte
    # out still takes the cheaper of those hops. Farthest pair: box 0's gpu 0 to box 1's gpu 1 (rails
    # 0 and 1 differ): NIC 0.3, rail 1.0 + 1.0, NIC 0.3, then gpu -> NVSwitch -> gpu 0.7 + 0.7
    term = bound.terms[0]
    assert term.latency_s == pytest.approx(0.3e-6)
    assert bound.reach_s == pytest.approx((0.3 + 1.0 + 1.0 + 0.3 + 0.7 + 0.7) * 1e-6)
    assert bound.time(1) == bound.reach_s
    assert bound.time(2**30) == pytest.approx(2**30 / (346.66666 * GIGA) + 0.3e-6, rel=1e-5)


def test_a_switch_with_more_bandwidth_out_than_in_makes_the_cut_figures_bounds_not_optima():
    """A star whose switch sends three times faster than it receives. The allgather cut bound (M/30 here)
    assumes the switch could copy one byte to two leaves; point-to-point transfers cannot, so it is
    labelled a bound, and the allreduce bound (2(N-1) messages over the gpus' 30 GB/s of egress) lies
    above reduce-scatter plus allgather's cut figures: every schedule still takes at least as long."""
    gpus = ["g0", "g1", "g2"]
    topology = Topology.from_dict({"name": "star", "nodes": [{"id": g, "type": "gpu"} for g in gpus] + [
        {"id": "s", "type": "switch"}], "links": [
        {"src": g, "dst": "s", "bandwidth": 10.0, "bidirectional": False} for g in gpus] + [
        {"src": "s", "dst": g, "bandwidth": 30.0, "bidirectional": False} for g in gpus]}, "star")
    ag = time_bound(topology, Kind.ALLGATHER)
    ar = time_bound(topology, Kind.ALLREDUCE)
    assert ag.label == "bound" and ar.label == "bound"
    assert ag.seconds_per_byte == Fraction(1, 30 * GIGA)
    assert ar.seconds_per_byte == Fraction(4, 30 * GIGA)
    for kind, bound in ((Kind.ALLGATHER, ag), (Kind.ALLREDUCE, ar)):
        for name, schedule in every_schedule(topology, kind):
            for result in evaluate_sizes(schedule, topology, SIZES):
                assert result.time_s >= bound.time(result.size), name


@pytest.mark.parametrize("spec", ["dgx-a100:boxes=2", "ndv2:boxes=2", "mi250", "torus:dims=3x3"])
def test_compare_never_prints_more_than_100_percent(spec):
    topology = load_topology(spec)
    rows, _, _ = run_all(topology, [Kind.ALLGATHER, Kind.ALLREDUCE, Kind.BROADCAST], [2**10, 2**20, 2**24],
                         include_slow=False, keep_going=True)
    assert rows
    for row in rows:
        assert row.percent_of_bound is not None and 0 < row.percent_of_bound <= 100 + 1e-9, row


@pytest.mark.parametrize("spec, groups, algbw, algorithms", [
    ("dgx-a100:boxes=4", 4, Fraction(800, 6), ("forest", "hierarchical", "nccl", "ring")),
    ("mi250:boxes=2", 16, None, ("hierarchical", "nccl", "ring"))])  # forest on 32 GCDs: in the catalog check
def test_allreduce_gossip_among_groups_of_gpus_tightens_the_bound(spec, groups, algbw, algorithms):
    """Groups joined by fast links (DGX boxes over their 8 x 25 GB/s of NICs; MI250 packages, two GCDs
    each) need 2(G-1) messages between groups per element. On 4 DGX A100 boxes that is 6 M over 800 GB/s,
    below the 2(N-1) messages over every gpu's NVLink + NIC egress (167.74 GB/s); on 2 x MI250 it equals
    reduce-scatter then allgather at their optima. No schedule synth makes beats it at any size."""
    topology = load_topology(spec)
    bound = time_bound(topology, Kind.ALLREDUCE)
    assert any(f"G={groups} groups" in term.argument for term in bound.terms)
    if algbw is not None:
        assert bound.seconds_per_byte == 1 / (algbw * GIGA)
    else:
        rs, ag = time_bound(topology, Kind.REDUCESCATTER), time_bound(topology, Kind.ALLGATHER)
        assert bound.seconds_per_byte == rs.seconds_per_byte + ag.seconds_per_byte
    for algorithm in algorithms:
        schedule = synthesize(topology, Kind.ALLREDUCE, algorithm)
        for result in evaluate_sizes(schedule, topology, SIZES):
            assert result.time_s >= bound.time(result.size), (algorithm, result.size)
