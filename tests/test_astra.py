"""The ``astra`` evaluator model: ASTRA-sim's published numbers, its rounding, FIFO links, conversions."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from synth.choose import synthesize  # as every command synthesizes (milp: its epochs chosen by simulation)
from synth.collectives import Kind
from synth.errors import InfeasibleError, LimitError, NotApplicable, SynthError
from synth.evaluate import evaluate
from synth.library import load_topology
from synth.proto.et_def import NodeType
from synth.topology import Topology
from synth.trace import EtNode, EtProgram
from tests.strategies import topologies

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


def test_model_lowers_a_plans_slices_and_window_as_export_does():
    from synth.astra import simulate_astra
    from synth.plan import make_plan

    topology = load_topology(f"switch:n=4,{ASTRA_LINK}")
    schedule = synthesize(topology, "allgather", "ring")
    sliced = astra_time_ns(schedule, topology, MIB, slices=4, window=2)
    assert sliced != astra_time_ns(schedule, topology, MIB)
    plan = make_plan(schedule.chunks, MIB, "ideal", slices=4, window=2)
    assert round(simulate_astra(schedule, topology, MIB, plan) * 1e9) == sliced
    wide = make_plan(schedule.chunks, MIB, "ideal", slices=4)  # window 8 >= 4 slices: no window
    assert round(simulate_astra(schedule, topology, MIB, wide) * 1e9) == astra_time_ns(schedule, topology, MIB,
                                                                                        slices=4)
    # the evaluator gives the astra model one slice per chunk: the default export's prediction
    assert round(evaluate(schedule, topology, MIB, model="astra").time_s * 1e9) == \
        astra_time_ns(schedule, topology, MIB)


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


# ------------------------------------------------------------------------------ measured on ASTRA-sim
MEASURED = Path(__file__).resolve().parent / "data" / "astra_measured.json"


def _measured_cases():
    import json

    return json.loads(MEASURED.read_text())["cases"]


def _npus(spec):
    import math
    import re

    found = re.search(r"(?:^|[:,])n=(\d+)", spec)
    return int(found.group(1)) if found else math.prod(int(x) for x in re.search(r"sizes=([\dx]+)", spec)
                                                       .group(1).split("x"))


def _selected(case):
    """The measured cases the test suite replays (all of them: ``make astra-check``): every algorithm on
    every network of up to 16 npus at one size (the four sizes taken in turn; two on 4 npus), every other
    one on 32 npus, every sliced case; milp only where its synthesis takes seconds, not minutes."""
    if case["algorithm"] == "milp" and not case["topology"].startswith("switch:n=8,"):
        return False
    if case["slices"] > 1:
        return True
    sizes = [2**16, 2**20, 2**24, 2**26]
    turn = sum(map(ord, case["collective"] + case["algorithm"]))
    if _npus(case["topology"]) > 16 and turn % 2:
        return False  # every other algorithm on 32 npus
    return case["size"] == sizes[turn % len(sizes)] or (_npus(case["topology"]) <= 4 and case["size"] in (2**16, 2**26))


def _groups():
    groups = {}
    for case in _measured_cases():
        if _selected(case):
            label = "msccl programs" if case["algorithm"].startswith("msccl:") else case["topology"].split(",bandwidth")[0]
            groups.setdefault(label + (" sliced" if case["slices"] > 1 else ""), []).append(case)
    return groups


_MEASURED_SCHEDULES: dict = {}


@pytest.mark.parametrize("group", sorted(_groups()))
@pytest.mark.slow
def test_model_equals_astra_sim_rank_by_rank(group):
    """Cases ``make astra-check`` ran on the real ASTRA-sim 2.x binaries (ASTRA-sim's numbers are the
    expectations): the model predicts every rank's finish to the ns. A case whose algorithm now builds
    another schedule than the one measured (its fingerprint differs) is left out; most must still match,
    else the numbers need measuring again (``make astra-check ASTRA_CHECK_FLAGS="--record FILE"``)."""
    import warnings

    from synth.astra import astra_finish_ns, schedule_fingerprint
    from synth.export.msccl import import_msccl

    schedules = _MEASURED_SCHEDULES  # a group and its sliced twin share schedules (milp's take seconds each)
    current = stale = 0
    for case in _groups()[group]:
        topology = load_topology(case["topology"])
        key = (case["topology"], case["collective"], case["algorithm"], json.dumps(case["options"], sort_keys=True))
        if key not in schedules:
            try:
                if case["algorithm"].startswith("msccl:"):  # a program of tests/data, imported
                    schedules[key] = import_msccl(Path(__file__).parent / "data" / case["algorithm"][6:], topology,
                                                  topology_name=case["topology"])
                else:
                    schedules[key] = synthesize(topology, case["collective"], case["algorithm"], **case["options"])
            except SynthError:
                schedules[key] = None
        schedule = schedules[key]
        if schedule is None or schedule_fingerprint(schedule) != case["schedule_sha256"]:
            stale += 1
            continue
        current += 1
        predicted = astra_finish_ns(schedule, topology, case["size"], slices=case["slices"], window=case["window"])
        assert predicted == case["astra_sim_finish_ns"], case
    if stale:
        warnings.warn(f"{group}: {stale} measured cases are of schedules the algorithms no longer build", stacklevel=1)
    assert current >= stale, f"{group}: {stale} of {stale + current} measured schedules changed: measure again"


# ---------------------------------------------------------------------- issue order (ASTRA-sim's hash set)
def _runs_alike(program, network):
    """The program's finish times and every link's service order under file order, reversed order and
    three random orders of simultaneously ready nodes (ASTRA-sim takes them from a hash set)."""
    from synth.astra import simulate

    first = simulate(program, network)
    outcomes = [(first.finish_ns, first.link_log)]
    for order in ("reverse", 1, 2, 3):
        other = simulate(program, network, order)
        outcomes.append((other.finish_ns, other.link_log))
    return all(outcome == outcomes[0] for outcome in outcomes)


def test_unordered_traces_depend_on_issue_order_and_ordered_ones_do_not():
    """D1: every rank's sends to all others are ready at time 0 and share the rank's uplink to the switch;
    without ordering nodes their order is ASTRA-sim's hash order."""
    from synth.astra import lower, network_for
    from synth.trace import schedule_to_et

    topology = load_topology(f"switch:n=12,{ASTRA_LINK}")
    schedule = synthesize(topology, "allgather", "direct")
    natural = schedule_to_et(schedule, MIB, extras=False)
    assert not _runs_alike(natural, network_for(topology, natural.paths))
    lowered = lower(schedule, topology, MIB, extras=False)
    assert _runs_alike(lowered.program, lowered.network)
    assert lowered.program.order_nodes == 12 * 10  # each rank: 11 sends into one link, 10 ordered after another
    assert lowered.result.time_ns == 36794  # what ASTRA-sim 2.x reported for these traces (make astra-check)


def test_ordering_nodes_start_the_later_node_1_ns_after_the_earlier():
    """Two sends of a rank into one link are ordered; a send that meets a passing message waits 1 ns."""
    from synth.astra import ORDER_ATTR, lower
    from synth.proto.et_def import NodeType

    topology = load_topology(f"switch:n=4,{ASTRA_LINK}")
    lowered = lower(synthesize(topology, "alltoall", "direct"), topology, MIB)
    for nodes in lowered.program.nodes:
        by_id = {node.id: node for node in nodes}
        ordering = [node for node in nodes if ORDER_ATTR in node.extras and node.name.startswith("order_after_")]
        assert ordering and all(node.type == NodeType.COMP_NODE and node.duration_us == 0 for node in ordering)
        for node in ordering:
            earlier = by_id[node.extras[ORDER_ATTR]]
            assert node.name == "order_after_" + earlier.name
            assert node.deps == earlier.deps  # finishes exactly 1 ns after the earlier node starts
            assert any(node.id in other.deps for other in nodes)


@settings(max_examples=25, deadline=None)
@given(topology=topologies(min_gpus=2, max_gpus=6), kind=st.sampled_from(list(Kind)), data=st.data())
def test_exported_traces_do_not_depend_on_issue_order(topology, kind, data):
    from synth.algorithms import available
    from synth.astra import lower

    names = [a.name for a in available(kind) if a.name != "milp"]
    name = data.draw(st.sampled_from(names))
    slices, window = data.draw(st.sampled_from([(1, None), (3, None), (4, 2)]))
    try:
        schedule = synthesize(topology, kind, name)
    except (NotApplicable, InfeasibleError):  # documented refusals (forest: a switch that sends more than it receives)
        return
    lowered = lower(schedule, topology, MIB, extras=False, slices=slices, window=window)
    assert _runs_alike(lowered.program, lowered.network)


@pytest.mark.parametrize("spec", [f"ring:n=6,{ASTRA_LINK}", f"switch:n=5,{ASTRA_LINK}",
                                  f"fully-connected:n=5,{ASTRA_LINK}", "switch:n=4,bandwidth=900,latency=0"])
@pytest.mark.slow
def test_every_algorithm_on_astra_networks_is_order_independent(spec):
    from synth.algorithms import available
    from synth.astra import lower

    topology = load_topology(spec)
    for kind in Kind:
        for algorithm in available(kind):
            if algorithm.name == "milp":
                continue
            try:
                schedule = synthesize(topology, kind, algorithm.name,
                                      **({"root": 1} if kind in (Kind.BROADCAST, Kind.REDUCE) else {}))
            except NotApplicable:
                continue
            for slices, window in ((1, None), (4, 2)):
                try:
                    lowered = lower(schedule, topology, 65536, extras=False, slices=slices, window=window)
                except LimitError as error:  # schedules that cut 64 KiB into many chunks: messages under a ns
                    assert "ASTRA-sim aborts" in str(error)
                    continue
                assert _runs_alike(lowered.program, lowered.network), (kind, algorithm.name, slices)


# ---------------------------------------------------------------------------------- tiny messages (D2)
def test_smallest_message_is_the_first_that_takes_a_whole_ns():
    from synth.astra import smallest_message

    assert smallest_message(AstraSystem((AstraDim("Ring", 8, 50.0, 500.0),))) == 54  # 53.687 B/ns
    fast = astra_system(load_topology("switch:n=8,bandwidth=200,latency=0.25"))[0]
    assert smallest_message(fast) == 200  # 200 GB/s (10^9 bytes) is 200 bytes per ns
    two_d = astra_system(load_topology("multidim:kinds=Ring/Switch,sizes=4x2,bandwidths=53.6870912,"
                                       "latencies=0.5"))[0]
    assert smallest_message(two_d) == 1  # congestion-unaware: the 500 ns latency alone takes a ns
    zero = astra_system(load_topology("multidim:kinds=Ring/Switch,sizes=4x2,bandwidths=53.6870912,latencies=0"))[0]
    assert smallest_message(zero) == 54


def test_messages_under_a_ns_are_refused_with_the_smallest_size_that_runs(tmp_path):
    from synth.astra import lower
    from synth.errors import LimitError
    from synth.export.chakra import export_chakra

    topology = load_topology(f"ring:n=4,{ASTRA_LINK}")
    schedule = synthesize(topology, "allgather", "ring")  # 4 chunks
    assert lower(schedule, topology, 4 * 54).result.time_ns > 0  # 54-byte messages run (checked on ASTRA-sim)
    with pytest.raises(LimitError, match=r"messages of 53 bytes .* smallest message it runs here is 54 bytes: "
                                         r"use a size of at least 213 bytes"):
        lower(schedule, topology, 212)
    with pytest.raises(LimitError, match="at least 861 bytes or fewer slices"):
        lower(schedule, topology, 4 * 54 * 2, slices=4)
    with pytest.raises(LimitError):
        export_chakra(schedule, topology, [MIB, 212], tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written, not even the 1 MiB set
    with pytest.raises(LimitError):
        evaluate(schedule, topology, 212, model="astra")
    # a topology ASTRA-sim cannot describe has no such limit (no ASTRA-sim run to protect)
    leaf = load_topology("leaf-spine:leaves=2,gpus_per_leaf=2,spines=2")
    assert astra_time_ns(synthesize(leaf, "allgather", "ring"), leaf, 8) > 0


def test_a_send_meeting_a_passing_message_waits_a_ns():
    from synth.astra import lower, simulate
    from synth.trace import schedule_to_et

    topology = load_topology(f"ring:n=8,{ASTRA_LINK}")
    schedule = synthesize(topology, "allreduce", "tree")
    natural = schedule_to_et(schedule, 65536, extras=False)
    lowered = lower(schedule, topology, 65536, extras=False)
    delays = [node for nodes in lowered.program.nodes for node in nodes if node.name.startswith("delay_")]
    assert delays and simulate(natural, lowered.network).delays  # without them, sends meet passing messages
    for nodes in lowered.program.nodes:
        by_id = {node.id: node for node in nodes}
        for delay in (node for node in nodes if node.name.startswith("delay_")):
            assert delay.id in by_id[delay.extras["order_after"]].deps
    assert lowered.result.ties == [] and lowered.result.delays == []
    assert _runs_alike(lowered.program, lowered.network)
