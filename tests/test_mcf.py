"""mcf: the maximum concurrent flow LP for alltoall, its path decomposition and chunk rounding, and the
alltoall cut bound beside it."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from strategies import topologies

from synth import Kind, load_topology, synthesize, verify
from synth.algorithms.mcf import mcf
from synth.cuts.alltoall import alltoall_bound, alltoall_cut_bound, solve_alltoall_lp
from synth.errors import InfeasibleError, InputError, NotApplicable
from synth.evaluate import GIGA, congestion
from synth.topology import Topology

#: shipped systems small enough for the test suite (the 32- and 64-gpu ones run in bench/bench_milp.py)
SMALL_SHIPPED = ["dgx1", "ndv2:boxes=2", "dgx2", "dgx-a100", "dgx-a100:boxes=2", "dgx-h100", "mi250",
                 "hypercube", "torus:dims=4x4"]


def schedule_algbw(schedule, topology) -> Fraction:
    """The exact congestion-only algbw (GB/s) of a schedule: n / (n x seconds per byte)."""
    return 1 / (congestion(schedule, topology).seconds_per_byte * GIGA)


@pytest.mark.parametrize(("spec", "exact"), [
    ("switch:n=8,bandwidth=50", Fraction(400, 7)),      # a gpu's 7 pairs leave over its 50 GB/s link
    ("ndv2:boxes=2", Fraction(25, 8)),                 # 64 pairs cross a 12.5 GB/s box link
    ("ring:n=6,bandwidth=50", Fraction(200, 3)),       # 9 pairs cross the 2 links of a half ring
    ("fully-connected:n=5,bandwidth=10", Fraction(50, 1)),
])
def test_lp_optimum_equals_the_cut_bound_where_they_coincide(spec, exact):
    topology = load_topology(spec)
    bound = alltoall_bound(topology)
    assert bound.cut.algbw_GBps == exact
    assert bound.lp_algbw_GBps == pytest.approx(float(exact), rel=1e-9)
    assert abs(bound.gap) < 1e-9
    record = bound.to_dict()
    assert record["cut_algbw_exact"] == str(exact) and record["collective"] == "alltoall"


def test_ndv2_schedule_reaches_the_optimum_exactly():
    topology = load_topology("ndv2:boxes=2")
    schedule = mcf(topology, Kind.ALLTOALL)
    verify(schedule, topology)
    assert schedule.params["rounding_loss"] == 0.0
    assert schedule_algbw(schedule, topology) == Fraction(25, 8)  # 3.125 GB/s, exactly
    assert schedule.params["lp_algbw_GBps"] == pytest.approx(3.125, rel=1e-9)


@pytest.mark.parametrize("spec", SMALL_SHIPPED)
def test_schedules_verify_and_reach_the_lp_optimum_within_the_reported_loss(spec):
    topology = load_topology(spec)
    schedule = synthesize(topology, "alltoall", "mcf")
    verify(schedule, topology)
    params = schedule.params
    assert 0.0 <= params["rounding_loss"] <= params["max_loss"] == 0.02
    reached = float(schedule_algbw(schedule, topology))
    # the congestion time is exactly the LP time times (1 + loss), up to the LP's float precision
    assert reached == pytest.approx(params["lp_algbw_GBps"] / (1 + params["rounding_loss"]), rel=1e-6)
    assert reached <= params["lp_algbw_GBps"] * (1 + 1e-9)
    assert schedule.chunks == params["chunks"] == topology.num_ranks * params["chunks_per_pair"]


def test_gpu_relays_give_the_true_optimum_on_switchless_dgx1():
    topology = load_topology("dgx1")
    with pytest.raises(InfeasibleError, match="through switches and forwarding gpus only"):
        solve_alltoall_lp(topology, relays=False)
    flow = solve_alltoall_lp(topology)
    cut = alltoall_cut_bound(topology, flow)
    assert cut.exhaustive  # 8 gpus: every subset was tried
    assert flow.algbw_GBps == pytest.approx(75.0, rel=1e-9) == float(cut.algbw_GBps)
    schedule = mcf(topology, Kind.ALLTOALL)
    verify(schedule, topology)
    relayed = [t for t in schedule.transfers if t.deps]
    assert relayed, "pairs without NVLink must be relayed through a gpu"
    for t in relayed:  # store-and-forward: the relay gpu first received the same chunk
        (dep,) = t.deps
        first = schedule.transfers[dep]
        assert (first.dst, first.chunk) == (t.src, t.chunk)


def test_forbidding_relays_changes_nothing_on_a_switch():
    topology = load_topology("switch:n=6")
    assert solve_alltoall_lp(topology, relays=False).algbw_GBps == \
        pytest.approx(solve_alltoall_lp(topology).algbw_GBps, rel=1e-9)
    schedule = mcf(topology, Kind.ALLTOALL, relays=False)
    verify(schedule, topology)
    assert not any(t.deps for t in schedule.transfers)


def test_fixed_chunks_are_respected_and_deterministic():
    topology = load_topology("torus:dims=3x3")
    first = mcf(topology, Kind.ALLTOALL, chunks=27)
    second = mcf(topology, Kind.ALLTOALL, chunks=27)
    assert first.to_json() == second.to_json()
    assert first.chunks == 27 and first.params["chunks_per_pair"] == 3
    verify(first, topology)


def test_bad_options_are_refused_clearly():
    topology = load_topology("switch:n=4")
    with pytest.raises(InputError, match="max_loss"):
        mcf(topology, Kind.ALLTOALL, max_loss=1.5)
    with pytest.raises(InputError, match="chunks"):
        mcf(topology, Kind.ALLTOALL, chunks=6)
    with pytest.raises(NotApplicable):
        synthesize(topology, "allgather", "mcf")


def test_hop_byte_cleanup_survives_glop_calling_the_optimum_infeasible():
    """Found by the property test below: two gpus beside a cycle of two switches, where GLOP called the
    re-solve at 1e-9 below the optimal rate infeasible."""
    link = {"latency": 0.0, "bidirectional": False}
    pairs = [("gpu0", "sw1", 1.0), ("gpu0", "gpu1", 12.5), ("gpu1", "gpu0", 12.5), ("sw0", "sw1", 1.0),
             ("sw0", "gpu0", 1.0), ("sw1", "sw0", 1.0), ("sw1", "gpu0", 1.0)]
    topology = Topology.from_dict({
        "name": "cycle", "nodes": [{"id": "gpu0", "type": "gpu"}, {"id": "gpu1", "type": "gpu"},
                                   {"id": "sw0", "type": "switch"}, {"id": "sw1", "type": "switch"}],
        "links": [{"src": src, "dst": dst, "bandwidth": bandwidth, **link} for src, dst, bandwidth in pairs]})
    flow = solve_alltoall_lp(topology)
    assert flow.algbw_GBps == pytest.approx(float(alltoall_cut_bound(topology, flow).algbw_GBps))
    schedule = mcf(topology, Kind.ALLTOALL)
    verify(schedule, topology)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(max_gpus=5, max_switches=2))
def test_random_topologies(topology):
    flow = solve_alltoall_lp(topology)
    cut = alltoall_cut_bound(topology, flow)
    assert cut.exhaustive
    assert flow.algbw_GBps <= float(cut.algbw_GBps) * (1 + 1e-7)  # the cut bound is never below the LP
    schedule = mcf(topology, Kind.ALLTOALL)
    verify(schedule, topology)
    reached = float(schedule_algbw(schedule, topology))
    assert reached <= flow.algbw_GBps * (1 + 1e-7)
    assert reached == pytest.approx(flow.algbw_GBps / (1 + schedule.params["rounding_loss"]), rel=1e-6)


def test_cli_bound_alltoall(capsys, monkeypatch):
    from helpers import run_cli

    outcome = run_cli(["bound", "ndv2:boxes=2", "--collective", "alltoall", "--json"], capsys, monkeypatch)
    assert outcome.code == 0, outcome.err
    record = json.loads(outcome.out)
    assert record["cut_algbw_exact"] == "25/8" and record["lp_algbw_GBps"] == pytest.approx(3.125)
    outcome = run_cli(["bound", "switch:n=4", "-c", "a2a"], capsys, monkeypatch)
    assert outcome.code == 0 and "optimal alltoall algbw (LP)" in outcome.out and "every gpu subset" in outcome.out
    outcome = run_cli(["bound", "switch:n=4", "-c", "gather"], capsys, monkeypatch)
    assert outcome.code == 2 and "unknown collective" in outcome.err


# ------------------------------------------------------------- the LP on series-contracted switches
def _without_nics(topology: Topology) -> Topology:
    """The topology with each switch that joins two nodes in series replaced by a direct link of the smaller
    capacity (what the LP is written on), built independently of the LP code."""
    graph = topology.graph
    series: list[str] = []
    for w in topology.switches:  # not two in a row: a chain keeps its other switches
        around = set(graph.successors(w))
        if around == set(graph.predecessors(w)) and len(around) == 2 and not around & set(series):
            series.append(w)
    links = [(u, v, float(d["bandwidth"]), float(d["latency"])) for u, v, d in graph.edges(data=True)
             if u not in series and v not in series]
    for w in series:
        a, b = sorted(graph.successors(w))
        links += [(x, y, min(graph.edges[x, w]["bandwidth"], graph.edges[w, y]["bandwidth"]), 0.0)
                  for x, y in ((a, b), (b, a))]
    return Topology.build("direct", topology.gpus, [s for s in topology.switches if s not in series], links,
                          bidirectional=False)


@pytest.mark.parametrize("spec", ["dgx-a100:boxes=2", "dgx-h100:boxes=2", "dgx-superpod:sus=1,nodes_per_su=2,sus_per_pod=1"])
def test_series_switches_keep_the_optimum_and_paths_stay_on_the_topology(spec):
    from synth.demand import moe

    topology = load_topology(spec)
    n = topology.num_ranks
    demand = tuple(tuple(row) for row in moe(n, experts_per_gpu=8, top_k=2, zipf=1.0, seed=0).to_chunks().matrix)
    flow = solve_alltoall_lp(topology, demand=demand)
    assert flow.algbw_GBps == pytest.approx(solve_alltoall_lp(_without_nics(topology), demand=demand).algbw_GBps,
                                            rel=1e-9)
    graph = topology.graph
    for (src, dst), options in flow.paths.items():
        for path, _ in options:
            assert path[0] == topology.gpus[src] and path[-1] == topology.gpus[dst]
            assert all(graph.has_edge(u, v) for u, v in zip(path, path[1:], strict=False))
    assert set(flow.link_flow) == set(graph.edges)
    for (u, v), amount in flow.link_flow.items():
        assert amount <= float(graph.edges[u, v]["bandwidth"]) * (1 + 1e-6)
    # a NIC carries what its gpu sends out of the box, both hops of the contracted link alike
    nic = next(w for w in topology.switches if "nic" in w)
    (a, b) = sorted(graph.successors(nic))
    assert flow.link_flow[(a, nic)] == pytest.approx(flow.link_flow[(nic, b)])


def test_parallel_series_switches_are_not_merged():
    """Two NICs between the same gpu and switch: only one is folded, so each keeps its own capacity."""
    links = [("g0", "nic0a", 10.0), ("nic0a", "net", 10.0), ("g0", "nic0b", 10.0), ("nic0b", "net", 10.0),
             ("g1", "nic1", 20.0), ("nic1", "net", 20.0)]
    topology = Topology.build("two-nics", ["g0", "g1"], ["nic0a", "nic0b", "nic1", "net"], links)
    flow = solve_alltoall_lp(topology)
    assert flow.algbw_GBps == pytest.approx(40.0)  # 20 GB/s each way per pair, g0 over both of its NICs
    for (u, v), amount in flow.link_flow.items():
        assert amount <= float(topology.graph.edges[u, v]["bandwidth"]) * (1 + 1e-6)
    assert flow.link_flow[("g0", "nic0a")] == pytest.approx(10.0)
    assert flow.link_flow[("g0", "nic0b")] == pytest.approx(10.0)
    schedule = mcf(topology, Kind.ALLTOALL)
    verify(schedule, topology)
