"""The ``astra`` evaluator model: ASTRA-sim's published numbers, its rounding, FIFO links, conversions."""

from pathlib import Path

import pytest

from synth.algorithms import synthesize
from synth.astra import (
    AstraDim,
    AstraSystem,
    astra_network,
    astra_system,
    astra_time_ns,
    gbps_to_astra,
    load_network_yaml,
    simulate,
    us_to_ns,
)
from synth.errors import InputError
from synth.evaluate import evaluate
from synth.export.et import EtNode, EtProgram
from synth.library import load_topology
from synth.proto.et_def import NodeType
from synth.topology import Topology

VECTORS = Path(__file__).resolve().parents[2] / "shared" / "vectors"
ASTRA_VECTORS = VECTORS / "astra-sim"
# 50 GB/s in ASTRA-sim's GB (2^30 bytes) is 53.6870912 GB/s in synth's (10^9 bytes); 500 ns = 0.5 µs
ASTRA_LINK = "bandwidth=53.6870912,latency=0.5"
MIB = 2**20


@pytest.mark.parametrize(("spec", "collective", "algorithm", "expected_ns"), [
    (f"ring:n=8,{ASTRA_LINK}", "allgather", "ring", 20587),
    (f"switch:n=8,{ASTRA_LINK}", "allgather", "ring", 41174),
    (f"ring:n=8,{ASTRA_LINK}", "allreduce", "ring", 41181),
    (f"fully-connected:n=8,{ASTRA_LINK}", "allgather", "direct", 2941),
])
def test_reproduces_astra_sim_published_numbers(spec, collective, algorithm, expected_ns):
    topology = load_topology(spec)
    schedule = synthesize(topology, collective, algorithm)
    assert schedule.chunks == 8  # 1 MiB in 128 KiB messages
    assert astra_time_ns(schedule, topology, MIB) == expected_ns
    result = evaluate(schedule, topology, MIB, model="astra")
    assert result.model == "astra"
    assert round(result.time_s * 1e9) == expected_ns


def test_one_hop_is_truncated_to_whole_ns():
    dim = AstraDim("FullyConnected", 2, 50.0, 500.0)
    # 500 + 131072 / 53.6870912 = 2941.40625 ns: ASTRA-sim charges 2941
    assert dim.bytes_per_ns == pytest.approx(53.6870912)
    assert int(dim.latency + 131072 / dim.bytes_per_ns) == 2941


def test_comp_duration_adds_to_critical_path():
    topology = load_topology(f"ring:n=8,{ASTRA_LINK}")
    schedule = synthesize(topology, "allreduce", "ring")
    # 14 hops of 2941 ns plus 7 reductions of 7 µs on the critical path
    assert astra_time_ns(schedule, topology, MIB, comp_duration_us=7) == 14 * 2941 + 7 * 7000


def _program(nodes_per_rank):
    return EtProgram(len(nodes_per_rank), nodes_per_rank)


def test_link_serves_messages_one_at_a_time_fifo():
    system = AstraSystem((AstraDim("FullyConnected", 3, 50.0, 500.0),))
    size = 131072
    send = NodeType.COMM_SEND_NODE
    recv = NodeType.COMM_RECV_NODE
    program = _program([
        [EtNode(0, "a", send, peer=1, size=size, tag=1), EtNode(1, "b", send, peer=1, size=size, tag=2)],
        [EtNode(0, "a", recv, peer=0, size=size, tag=1), EtNode(1, "b", recv, peer=0, size=size, tag=2)],
        [EtNode(0, "idle", NodeType.COMP_NODE)],
    ])
    result = simulate(program, astra_network(system))
    serialization = int(size / system.dims[0].bytes_per_ns)  # 2441: the link is busy this long per message
    assert result.finish_ns[1] == serialization + 2941  # the second message waits for the link, then 2941
    assert result.finish_ns[2] == 1  # a zero-duration COMP runs as 1 ns
    assert [m[4] for m in result.matches] == [2941, serialization + 2941]


def test_recv_posted_late_completes_when_posted_and_tags_match_fifo():
    system = AstraSystem((AstraDim("Switch", 2, 50.0, 500.0),))
    send, recv, comp = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMP_NODE
    program = _program([
        [EtNode(0, "s", send, peer=1, size=1000, tag=0)],
        [EtNode(0, "wait", comp, duration_us=10), EtNode(1, "r", recv, (0,), peer=0, size=1000, tag=0)],
    ])
    result = simulate(program, astra_network(system))
    assert result.finish_ns[1] == 10_000  # data arrived long before; the recv completes when posted
    assert result.time_ns == 10_000


def test_unmatched_message_is_reported_as_deadlock():
    system = AstraSystem((AstraDim("Switch", 2, 50.0, 500.0),))
    program = _program([
        [EtNode(0, "s", NodeType.COMM_SEND_NODE, peer=1, size=1000, tag=5)],
        [EtNode(0, "r", NodeType.COMM_RECV_NODE, peer=0, size=1000, tag=6)],
    ])
    result = simulate(program, astra_network(system))
    assert result.finish_ns[1] is None
    assert any("tag 6" in line for line in result.unmatched)
    with pytest.raises(Exception, match="deadlock"):
        _ = result.time_ns


def test_multi_dimensional_system_is_congestion_unaware():
    topology = load_topology("multidim:kinds=Ring/Switch,sizes=4x2,bandwidths=53.6870912x53.6870912,"
                             "latencies=0.5x1.0")
    system, _ = astra_system(topology)
    assert system is not None and not system.congestion_aware
    network = astra_network(system)
    # 0 -> 2 differ in dimension 0 (a Ring of 4): 2 hops of 500 ns + 131072 / 53.687 ns
    assert network.delay(0, 2, 131072) == int(2 * 500 + 131072 / system.dims[0].bytes_per_ns)
    # 0 -> 4 differ only in dimension 1 (a Switch): 2 hops of 1000 ns
    assert network.delay(0, 4, 131072) == int(2 * 1000 + 131072 / system.dims[1].bytes_per_ns)


def test_unit_conversions_are_exact():
    assert gbps_to_astra(53.6870912) == 50.0
    assert gbps_to_astra(429.4967296) == 400.0
    assert us_to_ns(0.5) == 500.0
    assert us_to_ns(0.93625) == 936.25


def test_recognizes_plain_topologies_and_refuses_others():
    assert astra_system(load_topology("switch:n=4"))[0].dims[0].kind == "Switch"
    gpus = ["a", "b", "c", "d"]
    ring = Topology.build("r", gpus, [], [(gpus[i], gpus[(i + 1) % 4], 10.0) for i in range(4)])
    assert astra_system(ring)[0].dims[0].kind == "Ring"
    assert astra_system(ring)[0].dims[0].npus == 4
    system, reason = astra_system(load_topology("leaf-spine"))
    assert system is None and "cannot describe" in reason


def test_model_runs_on_topologies_astra_sim_cannot_describe():
    topology = load_topology("leaf-spine:leaves=2,gpus_per_leaf=2,spines=2")
    schedule = synthesize(topology, "allgather", "ring")
    first = evaluate(schedule, topology, MIB, model="astra")
    assert first.time_s > 0
    assert evaluate(schedule, topology, MIB, model="astra").time_s == first.time_s  # deterministic


def test_pipeline_is_refused():
    topology = load_topology("switch:n=4")
    with pytest.raises(InputError, match="pipeline"):
        evaluate(synthesize(topology, "allgather", "ring"), topology, MIB, model="astra", pipeline=2)


def test_network_yaml_round_trip():
    path = ASTRA_VECTORS / "network" / "Ring_8npus.yml"
    if not path.exists():
        pytest.skip(f"shared vectors not found at {ASTRA_VECTORS}")
    topology, spec = load_network_yaml(str(path))
    assert topology.num_ranks == 8
    assert topology.dimensions[0].kind == "Ring" and topology.dimensions[0].bandwidth == 53.6870912
    assert load_topology(spec).num_ranks == 8
    system, _ = astra_system(topology)
    assert system.yaml().startswith("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]")


def test_imported_vector_takes_90174_ns():
    prefix = ASTRA_VECTORS / "custom_ring_allreduce_8npus_1MB" / "custom_allreduce"
    if not prefix.parent.exists():
        pytest.skip(f"shared vectors not found at {ASTRA_VECTORS}")
    from synth.export.chakra import import_chakra, simulate_et_set

    topology = load_topology(f"ring:n=8,{ASTRA_LINK}")
    assert simulate_et_set(prefix, topology) == 90174  # the traces as written
    schedule = import_chakra(prefix, topology)
    assert astra_time_ns(schedule, topology, MIB) == 90174  # the imported schedule
    assert round(evaluate(schedule, topology, MIB, model="astra").time_s * 1e9) == 90174
