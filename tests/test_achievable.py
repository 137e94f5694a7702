"""Achievable link rates (``SPEC@achievable``): link classes, scaling, and the suffix through files and commands."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import topologies

from synth import Kind, load_topology, synthesize, verify
from synth.evaluate import evaluate
from synth.library import library_topology
from synth.library.achievable import (
    ACHIEVABLE,
    NETWORK_OVERHEAD_US,
    SCALE_OUT,
    SCALE_UP,
    SCALE_UP_STEP_US,
    achievable,
    line_rate,
    link_classes,
    split_suffix,
)
from synth.schedule import Schedule


def test_link_classes_of_a_two_box_dgx():
    topology = load_topology("dgx-h100:boxes=2")
    classes = link_classes(topology)
    assert classes[("b0.gpu0", "b0.nvs")] == SCALE_UP
    assert classes[("b1.nvs", "b1.gpu7")] == SCALE_UP
    assert classes[("b0.gpu0", "b0.nic0")] == SCALE_OUT
    assert classes[("rail3", "b1.nic3")] == SCALE_OUT


def test_every_link_is_scaled_by_its_class():
    line = load_topology("mi300x:boxes=2")
    scaled = load_topology("mi300x:boxes=2@achievable")
    classes = link_classes(line)
    assert scaled.name == "mi300x:boxes=2@achievable"
    for link in line.links():
        expected = float(Fraction(str(link.bandwidth)) * ACHIEVABLE[classes[(link.src, link.dst)]])
        assert scaled.bandwidth(link.src, link.dst) == pytest.approx(expected, rel=1e-12)
        if classes[(link.src, link.dst)] == SCALE_OUT:
            assert scaled.latency(link.src, link.dst) == link.latency
        else:  # mi300x's xGMI links join gpus directly: one link is one step
            assert scaled.latency(link.src, link.dst) == SCALE_UP_STEP_US
    assert achievable(scaled) is scaled
    assert scaled.capabilities == line.capabilities


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 9), fraction=st.fractions(Fraction(1, 10), Fraction(1)))
def test_a_ring_at_a_fraction_of_line_rate_takes_longer_by_that_fraction(n, fraction):
    """Bandwidth-bound (ideal protocol, no latency): time scales by exactly 1 / fraction."""
    line = load_topology(f"ring:n={n}")
    scaled = achievable(line, {SCALE_UP: fraction, SCALE_OUT: fraction})
    schedule = synthesize(line, Kind.ALLGATHER, "ring")
    size = n * 2**20
    slow = evaluate(schedule, scaled, size, protocol="ideal").congestion_time_s
    fast = evaluate(schedule, line, size, protocol="ideal").congestion_time_s
    assert slow == pytest.approx(fast / float(fraction), rel=1e-9)


def test_the_suffix_survives_a_schedule_file(tmp_path):
    topology = load_topology("dgx-a100:boxes=2@achievable")
    schedule = synthesize(topology, Kind.ALLREDUCE, "nccl", size=2**28)
    verify(schedule, topology)
    path = tmp_path / "s.json"
    path.write_text(schedule.to_json())
    again = Schedule.from_file(path)
    assert again.topology == "dgx-a100:boxes=2@achievable"
    recorded = library_topology(again.topology)
    verify(again, recorded)
    line = evaluate(again, load_topology("dgx-a100:boxes=2"), 2**28).time_s
    assert evaluate(again, recorded, 2**28).time_s > line * 1.05


def test_split_suffix_leaves_other_specs_alone():
    assert split_suffix("@achievable") == ("@achievable", None)
    assert split_suffix("x.json@achievable") == ("x.json", "ib")
    assert split_suffix("x.json@achievable:efa") == ("x.json", "efa")
    assert split_suffix("x@achievablez") == ("x@achievablez", None)


def test_a_step_through_an_nvswitch_takes_nccls_per_step_latency():
    topology = load_topology("dgx-h100@achievable")
    assert topology.latency("gpu0", "nvs") + topology.latency("nvs", "gpu5") == SCALE_UP_STEP_US
    # a 4-byte allreduce on one box (ring, LL): within 5% of the 12.5 us measured on H20 (deepseek-ai/DeepEP#303)
    schedule = synthesize(topology, Kind.ALLREDUCE, "nccl", size=4)
    assert evaluate(schedule, topology, 4).time_s * 1e6 == pytest.approx(12.5, rel=0.05)


@pytest.mark.parametrize("network", ["efa", "tcpxo"])
def test_another_network_costs_its_overhead_once_per_collective_across_boxes(network):
    """The overhead is a fixed cost: the same links, and every collective spanning boxes takes exactly that
    much longer at any size; one box (or a group inside one) pays nothing."""
    from synth.flow import NETWORK_OVERHEAD_KEY as FLOW_KEY
    from synth.groups import group_view, parse_group
    from synth.library.achievable import NETWORK_OVERHEAD_KEY

    assert FLOW_KEY == NETWORK_OVERHEAD_KEY
    ib, other = load_topology("dgx-h100:boxes=2@achievable"), load_topology(f"dgx-h100:boxes=2@achievable:{network}")
    assert other.name.endswith(f"@achievable:{network}") and network in other.description
    assert all(other.bandwidth(link.src, link.dst) == link.bandwidth for link in ib.links())
    assert all(other.latency(link.src, link.dst) == link.latency for link in ib.links())
    overhead = NETWORK_OVERHEAD_US[network]
    for size in (8, 2**28):
        schedule = synthesize(ib, Kind.ALLREDUCE, "nccl", size=size)
        slower = evaluate(schedule, other, size).time_s - evaluate(schedule, ib, size).time_s
        assert slower * 1e6 == pytest.approx(overhead, rel=1e-6)
    inside = group_view(other, parse_group(other, "tp=8"))
    schedule = synthesize(inside, Kind.ALLREDUCE, "ring")
    plain = group_view(ib, parse_group(ib, "tp=8"))
    assert evaluate(schedule, inside, 2**20).time_s == evaluate(schedule, plain, 2**20).time_s


def test_an_unknown_network_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    outcome = run_cli(["show", "dgx-h100@achievable:myrinet"], capsys, monkeypatch)
    assert outcome.code == 2 and "unknown network 'myrinet'" in outcome.err and "efa" in outcome.err


@pytest.mark.parametrize(("spec", "expect"), [("nosuch@achievable", "neither a file nor a library name"),
                                              ("missing.json@achievable", "no such file"),
                                              ("dgx-h100:boxes=0@achievable", "boxes must be at least 1")])
def test_a_bad_spec_with_the_suffix_is_refused_cleanly(spec, expect, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    outcome = run_cli(["show", spec], capsys, monkeypatch)
    assert outcome.code == 2 and "Traceback" not in outcome.err
    assert outcome.err.startswith("error: ") and expect in outcome.err
    assert list(tmp_path.iterdir()) == []


def test_a_schedule_made_at_line_rate_runs_on_the_same_fabric_at_achievable_rates(capsys, monkeypatch, tmp_path):
    """The same fabric at achievable rates takes the schedules made for its line rates (only the rates
    differ), and every timing command names the link rates it assumed; another fabric is still refused."""
    monkeypatch.chdir(tmp_path)
    assert run_cli(["generate", "dgx-a100:boxes=2", "-c", "allreduce", "-a", "ring", "-o", "ar.json"],
                   capsys, monkeypatch).code == 0
    line = run_cli(["evaluate", "ar.json", "-s", "1GiB", "--json"], capsys, monkeypatch)
    real = run_cli(["evaluate", "ar.json", "-t", "dgx-a100:boxes=2@achievable", "-s", "1GiB", "--json"],
                   capsys, monkeypatch)
    assert line.code == real.code == 0
    line_s, real_s = json.loads(line.out)[0]["time_s"], json.loads(real.out)[0]["time_s"]
    assert real_s > line_s / 0.93  # the NIC rails carry 92% of their line rate
    shown = run_cli(["evaluate", "ar.json", "-t", "dgx-a100:boxes=2@achievable", "-s", "1GiB"], capsys, monkeypatch)
    assert "links: at achievable rates (scale-out 92%, scale-up 82% of line rate" in " ".join(shown.out.split())
    plain = run_cli(["evaluate", "ar.json", "-s", "1GiB"], capsys, monkeypatch)
    assert "links: at their line rates" in " ".join(plain.out.split())
    other = run_cli(["evaluate", "ar.json", "-t", "dgx-a100:boxes=3@achievable", "-s", "1GiB"], capsys, monkeypatch)
    assert other.code == 2 and "different topology" in other.err


@settings(max_examples=40, deadline=None)
@given(topologies(max_gpus=6, max_switches=2), st.sampled_from(["ib", "efa"]))
def test_the_bound_on_achievable_rates_is_the_line_rate_bound(topology, network):
    """A bound is one the hardware cannot beat: on a fabric at achievable rates every link gets back at least
    its line rate (exactly, where it has at most 9 decimals), and the bounds' bandwidth terms are the
    line-rate fabric's, never above them."""
    from synth.bounds import time_bound
    from synth.compare import lower_bound

    real = achievable(topology, network=network)
    back = line_rate(real)
    for src, dst, data in topology.graph.edges(data=True):
        restored = back.bandwidth(src, dst)
        assert restored >= data["bandwidth"]
        if (Fraction(repr(data["bandwidth"])) * 10**9).denominator == 1:
            assert restored == data["bandwidth"]
    assert line_rate(topology) is topology
    for kind in (Kind.ALLGATHER, Kind.ALLREDUCE):
        line = time_bound(topology, kind)
        rated = lower_bound(real, kind)
        assert rated is not None and rated.seconds_per_byte <= line.seconds_per_byte


@pytest.mark.parametrize("spec", ["dgx-a100:boxes=2", "dgx-h100:boxes=2", "mi250:boxes=2", "tpu-v4:dims=2x2x4"])
def test_bound_prints_the_line_rate_figures_for_an_achievable_fabric(spec, capsys, monkeypatch):
    line = run_cli(["bound", spec, "--json"], capsys, monkeypatch)
    real = run_cli(["bound", f"{spec}@achievable", "--json"], capsys, monkeypatch)
    assert line.code == real.code == 0
    line_data, real_data = json.loads(line.out), json.loads(real.out)
    for key in ("allgather_seconds_per_byte", "allgather_algbw_GBps", "allreduce_bound_algbw_GBps"):
        assert real_data[key] == line_data[key]
    shown = run_cli(["bound", f"{spec}@achievable"], capsys, monkeypatch)
    assert "bounds at the links' line rates" in " ".join(shown.out.split())
