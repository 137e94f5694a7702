"""Switches that reduce and multicast: the ``capabilities`` node attribute (reading, writing, refusals),
the library systems that declare it (NVLS, InfiniBand SHARP), and the bounds for the fabric as described."""

from __future__ import annotations

import copy
import json
from fractions import Fraction

import pytest
from helpers import every_schedule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import capable_topology_documents
from typer.testing import CliRunner

from synth import Kind, Topology, load_topology
from synth.bounds import time_bound
from synth.cli import app
from synth.errors import InputError
from synth.evaluate import evaluate_sizes
from synth.topology import Multicast, Reduction, SwitchCapabilities

NVLS = {"version": 1, "reduction": {"ops": ["sum", "max"], "dtypes": ["f32", "bf16"], "throughput": 100.0,
                                    "max_group": 4}, "multicast": {}}


def _document(capabilities: dict | None = None, on: str = "s") -> dict:
    nodes = [{"id": "a", "type": "gpu"}, {"id": "b", "type": "gpu"}, {"id": "c", "type": "gpu"},
             {"id": "s", "type": "switch"}]
    if capabilities is not None:
        next(node for node in nodes if node["id"] == on)["capabilities"] = capabilities
    return {"name": "star", "description": "", "nodes": nodes,
            "links": [{"src": g, "dst": "s", "bandwidth": 10.0} for g in "abc"]}


# ------------------------------------------------------------------------------ the attribute
def test_capabilities_read_and_write_back_unchanged(tmp_path):
    topology = Topology.from_dict(_document(NVLS), "star.json")
    assert topology.capabilities == {"s": SwitchCapabilities(Reduction(("sum", "max"), ("f32", "bf16"), 100.0, 4),
                                                             Multicast())}
    assert topology.reduction("s") is not None and topology.multicasts("s") and topology.reduction("a") is None
    again = Topology.from_dict(json.loads(json.dumps(topology.to_dict())), "again.json")
    assert again.to_dict() == topology.to_dict() and again.capabilities == topology.capabilities
    assert topology.to_dict()["nodes"][3]["capabilities"] == NVLS


def test_yaml_reads_capabilities_through_the_same_reader(tmp_path):
    path = tmp_path / "star.yaml"
    path.write_text("name: star\nnodes:\n  - {id: a, type: gpu}\n  - {id: b, type: gpu}\n"
                    "  - id: s\n    type: switch\n    capabilities:\n      version: 1\n"
                    "      reduction: {ops: [sum], dtypes: [f16]}\n"
                    "links:\n  - {src: a, dst: s, bandwidth: 5}\n  - {src: b, dst: s, bandwidth: 5}\n")
    topology = Topology.from_file(path)
    assert topology.capabilities["s"] == SwitchCapabilities(Reduction(("sum",), ("f16",)))
    assert not topology.multicasts("s")


def test_a_passive_switch_writes_no_attribute_and_capabilities_leave_the_fingerprint_alone():
    from synth.topology import fingerprint

    passive = Topology.from_dict(_document(), "star.json")
    assert "capabilities" not in json.dumps(passive.to_dict())
    capable = Topology.from_dict(_document(NVLS), "star.json")
    assert capable.passive().to_dict() == passive.to_dict() and passive.passive() is passive
    assert fingerprint(capable) == fingerprint(passive)  # point-to-point schedules stay valid


@pytest.mark.parametrize(("capabilities", "on", "field", "words"), [
    ({"version": 2, "multicast": {}}, "s", "nodes.3.capabilities.version", "expected 1"),
    ({"multicast": {}}, "s", "nodes.3.capabilities.version", "missing required field"),
    ({"version": 1}, "s", "nodes.3.capabilities", "expected a reduction, a multicast or both"),
    ({"version": 1, "reduction": {"ops": ["add"], "dtypes": ["f32"]}}, "s", "nodes.3.capabilities.reduction.ops.0",
     "'sum'"),
    ({"version": 1, "reduction": {"ops": [], "dtypes": ["f32"]}}, "s", "nodes.3.capabilities.reduction.ops",
     "at least one operation"),
    ({"version": 1, "reduction": {"ops": ["sum", "sum"], "dtypes": ["f32"]}}, "s",
     "nodes.3.capabilities.reduction.ops", "once"),
    ({"version": 1, "reduction": {"ops": ["sum"], "dtypes": ["f33"]}}, "s",
     "nodes.3.capabilities.reduction.dtypes.0", "'bf16'"),
    ({"version": 1, "reduction": {"ops": ["sum"], "dtypes": ["f32"], "throughput": 0}}, "s",
     "nodes.3.capabilities.reduction.throughput", "> 0"),
    ({"version": 1, "reduction": {"ops": ["sum"], "dtypes": ["f32"], "throughput": "fast"}}, "s",
     "nodes.3.capabilities.reduction.throughput", "expected a number"),
    ({"version": 1, "reduction": {"ops": ["sum"], "dtypes": ["f32"], "max_group": 1}}, "s",
     "nodes.3.capabilities.reduction.max_group", "from 2"),
    ({"version": 1, "multicast": {"fanout": 2}}, "s", "nodes.3.capabilities.multicast.fanout", "unknown field"),
    ({"version": 1, "multicast": {"throughput": -1}}, "s", "nodes.3.capabilities.multicast.throughput", "> 0"),
    (NVLS, "a", "nodes.0.capabilities", "switches only"),
])
def test_bad_capabilities_are_refused_naming_file_and_field(capabilities, on, field, words):
    with pytest.raises(InputError) as caught:
        Topology.from_dict(_document(copy.deepcopy(capabilities), on), "star.json")
    text = str(caught.value)
    assert text.startswith(f"star.json: {field}: ") and words in text, text


# ------------------------------------------------------------------------------ the library
def test_library_nvidia_systems_are_sold_with_nvls_and_fabrics_take_a_sharp_option():
    h100 = load_topology("dgx-h100")
    assert h100.reduction("nvs") is not None and h100.reduction("nvs").throughput == 334.5 and h100.multicasts("nvs")
    assert load_topology("dgx-h100:nvls=false").capabilities == {}
    assert set(load_topology("dgx-h100:boxes=2").capabilities) == {"b0.nvs", "b1.nvs"}
    nvl72 = load_topology("gb200-nvl72")
    assert nvl72.reduction("nvs") is not None and nvl72.reduction("nvs").throughput is None
    pod = load_topology("dgx-superpod:sus=1,nodes_per_su=2,sharp=true")
    assert pod.reduction("su0.leaf3") is not None and pod.reduction("b0.nic3") is None
    assert not any(s.startswith("su") for s in load_topology("dgx-superpod:sus=1,nodes_per_su=2").capabilities)
    assert set(load_topology("leaf-spine:sharp=true").capabilities) == {"leaf0", "leaf1", "leaf2", "leaf3",
                                                                         "spine0", "spine1"}
    assert load_topology("dgx-h200").reduction("nvs") == h100.reduction("nvs")
    b200 = load_topology("dgx-b200")
    assert b200.bandwidth("gpu0", "nvs") == 900.0 and b200.reduction("nvs").throughput is None
    assert time_bound(b200, Kind.ALLREDUCE).seconds_per_byte == Fraction(1, 900 * 10**9)
    assert time_bound(b200.passive(), Kind.ALLREDUCE).seconds_per_byte == Fraction(14, 8 * 900 * 10**9)
    with pytest.raises(InputError, match="nvls"):
        load_topology("dgx-h100:nvls=3")


# ------------------------------------------------------------------------------ the bounds
def test_nvls_raises_the_dgx_h100_allreduce_bound_above_the_passive_ceiling():
    h100 = load_topology("dgx-h100")
    bound, passive = time_bound(h100, Kind.ALLREDUCE), time_bound(h100.passive(), Kind.ALLREDUCE)
    # one box of 8 gpus at 450 GB/s, switch reduction R = 334.5 GB/s: T/M = 14 / (3600 + 6 R)
    assert 1 / (bound.seconds_per_byte * 10**9) == Fraction(3600 + 6 * Fraction("334.5"), 14) == Fraction(801, 2)
    assert 1 / (passive.seconds_per_byte * 10**9) == Fraction(1800, 7)  # 257.14: 2(n-1)/n M / B
    assert bound.label == "in-switch bound" and passive.label == "bound"
    for kind in (Kind.ALLGATHER, Kind.REDUCESCATTER):  # copies and sums still cross every cut
        assert time_bound(h100, kind).seconds_per_byte == time_bound(h100.passive(), kind).seconds_per_byte


def test_a_switch_without_a_throughput_limit_leaves_one_buffer_each_way():
    nvl72 = load_topology("gb200-nvl72")
    assert 1 / (time_bound(nvl72, Kind.ALLREDUCE).seconds_per_byte * 10**9) == 900
    assert 1 / (time_bound(nvl72.passive(), Kind.ALLREDUCE).seconds_per_byte * 10**9) == Fraction(72 * 900, 142)


def test_synth_bound_prints_the_in_switch_figure_and_the_passive_one_with_the_flag():
    runner = CliRunner()
    nvls = " ".join(runner.invoke(app, ["bound", "dgx-h100", "-c", "allreduce"]).output.split())
    assert "allreduce bound │ 400.50 GB/s" in nvls and "allreduce bound argument: 2(G-1) messages" in nvls
    assert "switches: 1 reduce (nvs)" in nvls
    flag = " ".join(runner.invoke(app, ["bound", "dgx-h100", "--no-switch-reduction"]).output.split())
    assert "allreduce bound │ 257.14 GB/s" in flag and "switches: passive" in flag
    data = json.loads(runner.invoke(app, ["bound", "dgx-h100", "--json"]).output)
    assert data["allreduce_bound_algbw_GBps"] == pytest.approx(400.5) and "nvs" in data["switch_capabilities"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=capable_topology_documents(max_gpus=5, max_switches=2),
       kind=st.sampled_from([Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.ALLGATHER]))
def test_in_switch_bounds_are_below_the_passive_ones_and_below_every_point_to_point_schedule(document, kind):
    topology = Topology.from_dict(document, "random")
    plain = copy.deepcopy(document)
    for node in plain["nodes"]:
        node.pop("capabilities", None)
    passive = Topology.from_dict(plain, "random")
    bound = time_bound(topology, kind)
    passive_bound = time_bound(passive, kind)
    # (b) without capabilities the bound is the passive one, term by term
    assert time_bound(topology.passive(), kind).terms == passive_bound.terms
    # in-switch operations only add ways to move data: the bound can only fall
    assert bound.seconds_per_byte <= passive_bound.seconds_per_byte
    assert bound.in_switch == (kind == Kind.ALLREDUCE and bool(topology.capabilities))
    # (a) no schedule of an existing algorithm (point to point, no in-switch ops) beats it
    for name, schedule in every_schedule(topology, kind):
        for result in evaluate_sizes(schedule, topology, [2**20, 2**26]):
            assert result.congestion_time_s >= float(bound.seconds_per_byte * result.size) * (1 - 1e-12), name
            assert result.time_s >= bound.time(result.size) * (1 - 1e-9), name
