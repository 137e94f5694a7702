"""Chakra ET export and import: bytes decoded by plain protobuf, ASTRA-sim files, vectors, round trips."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import synthesized
from hypothesis import HealthCheck, given, settings

from synth.algorithms import available, synthesize
from synth.astra import astra_time_ns, lower
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.evaluate import evaluate
from synth.export.chakra import export_chakra, import_chakra
from synth.library import load_topology
from synth.proto import et_def
from synth.trace import MAX_TAG, decode_et_bytes, encode_rank, schedule_to_et
from synth.verify import verify
from tests.strategies import topologies

VECTORS = Path(__file__).resolve().parents[2] / "shared" / "vectors" / "astra-sim"
VECTOR_PREFIX = VECTORS / "custom_ring_allreduce_8npus_1MB" / "custom_allreduce"
PROTO = Path(__file__).resolve().parents[1] / "synth" / "proto" / "et_def.proto"
MIB = 2**20


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """Message classes compiled from the .proto by protoc (grpcio-tools): independent of synth's code."""
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools (a dev dependency: pip install -e '.[dev]') is not installed")
    out = tmp_path_factory.mktemp("protoc")
    # protoc runs in its own process: its compiled extension must not share this one with ortools
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}", f"--python_out={out}",
                    str(PROTO)], check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("et_def_pb2", out / "et_def_pb2.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["et_def_pb2"] = module
    spec.loader.exec_module(module)
    return module


def _varint_records(data: bytes) -> list[bytes]:
    """Split length-delimited records with a varint decoder written here, not synth's."""
    records, position = [], 0
    while position < len(data):
        length, shift = 0, 0
        while True:
            byte = data[position]
            position += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        records.append(data[position:position + length])
        position += length
    return records


def _attrs(node):
    return {a.name: (a.WhichOneof("value"), getattr(a, a.WhichOneof("value"))) for a in node.attr}


def test_proto_matches_what_protoc_compiles(pb):
    from google.protobuf import descriptor_pb2

    compiled = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(compiled)
    assert compiled == et_def.FILE_DESCRIPTOR


def test_ring_allreduce_on_8npu_switch_decodes_node_by_node(pb, tmp_path):
    topology = load_topology("switch:n=8")
    schedule = synthesize(topology, "allreduce", "ring")
    report = export_chakra(schedule, topology, [MIB], tmp_path)
    message = MIB // schedule.chunks
    sends, recvs = {}, {}
    for rank in range(8):
        records = _varint_records((tmp_path / f"{report.name}.{rank}.et").read_bytes())
        metadata = pb.GlobalMetadata.FromString(records[0])
        assert metadata.version  # never empty: an empty record would end decoding
        nodes = [pb.Node.FromString(r) for r in records[1:]]
        assert all(record for record in records)
        ids = {node.id for node in nodes}
        assert len(ids) == len(nodes)
        by_id = {node.id: node for node in nodes}
        for node in nodes:
            attrs = _attrs(node)
            assert node.name
            assert attrs["is_cpu_op"] == ("bool_val", False)
            assert set(node.data_deps) <= ids
            if node.type == pb.COMM_SEND_NODE:
                assert attrs["comm_src"] == ("int32_val", rank)
                assert attrs["comm_dst"][0] == "int32_val" and attrs["comm_dst"][1] != rank
                assert attrs["comm_size"] == ("int64_val", message)
                assert attrs["comm_tag"][0] == "int32_val" and 0 <= attrs["comm_tag"][1] < MAX_TAG
                key = (attrs["comm_tag"][1], rank, attrs["comm_dst"][1], message)
                assert key not in sends
                sends[key] = (rank, node)
            elif node.type == pb.COMM_RECV_NODE:
                assert attrs["comm_src"][0] == "int32_val"
                assert attrs["comm_size"] == ("int64_val", message)
                assert attrs["comm_tag"][0] == "int32_val"
                key = (attrs["comm_tag"][1], attrs["comm_src"][1], rank, message)
                assert key not in recvs
                recvs[key] = (rank, node)
            elif node.name.startswith("order_after_"):  # an ordering node: the deps of the node it follows
                assert node.type == pb.COMP_NODE and node.duration_micros == 0
                assert list(node.data_deps) == list(by_id[_attrs(node)["order_after"][1]].data_deps)
            elif node.name.startswith("delay_"):  # a delay node: the send waits for it
                assert node.type == pb.COMP_NODE and node.duration_micros == 0
                assert node.id in by_id[_attrs(node)["order_after"][1]].data_deps
            else:
                assert node.type == pb.COMP_NODE
                assert node.duration_micros == 0
                (parent,) = node.data_deps  # a reduction follows exactly its recv
                assert by_id[parent].type == pb.COMM_RECV_NODE
        # a rank forwards a chunk only after it has it: every send of a chunk this rank received
        # depends on the COMP (reduce) or recv (copy) node of that chunk; one chain starts per rank
        received = {}
        for node in nodes:
            if node.type == pb.COMM_RECV_NODE:
                chunk = _attrs(node)["chunk"][1]
                done = next((n for n in nodes if n.type == pb.COMP_NODE and node.id in n.data_deps
                             and not n.name.startswith(("order_after_", "delay_"))), node)
                received.setdefault(chunk, set()).add(done.id)
        starts = 0
        for node in nodes:
            if node.type == pb.COMM_SEND_NODE:
                chunk = _attrs(node)["chunk"][1]
                if not set(node.data_deps) & received.get(chunk, set()):
                    starts += 1
        assert starts == 1
    assert sends.keys() == recvs.keys()  # every send matches exactly one recv on (tag, src, dst, size)
    assert len({key[0] for key in sends}) == len(sends) == len(schedule.transfers)  # distinct tags

    # the workload: one COMM_COLL_NODE per rank, ALL_REDUCE of the whole size
    for rank in range(8):
        records = _varint_records((tmp_path / f"workload.{rank}.et").read_bytes())
        (coll,) = [pb.Node.FromString(r) for r in records[1:]]
        assert coll.type == pb.COMM_COLL_NODE
        attrs = _attrs(coll)
        assert attrs["comm_type"] == ("int64_val", pb.ALL_REDUCE)
        assert attrs["comm_size"] == ("int64_val", MIB)
    system = json.loads((tmp_path / "system.json").read_text())
    assert system["all-reduce-implementation-custom"] == [report.name]
    assert system["preferred-dataset-splits"] == 1
    assert json.loads((tmp_path / "remote_memory.json").read_text()) == {"memory-type": "NO_MEMORY_EXPANSION"}
    network = (tmp_path / "network.yml").read_text()
    assert "topology: [ Switch ]" in network and "npus_count: [ 8 ]" in network
    assert "bandwidth: [ 46.566128730773926 ]" in network  # 50 GB/s (10^9) in ASTRA-sim's GB (2^30)
    assert "latency: [ 500 ]" in network
    script = (tmp_path / "run_astrasim.sh").read_text()
    assert report.command == ("AstraSim_Analytical_Congestion_Aware --workload-configuration=workload "
                              "--system-configuration=system.json --network-configuration=network.yml "
                              "--remote-memory-configuration=remote_memory.json")
    predicted = " ".join(str(t) for t in report.sets[0].predicted_finish_ns)
    assert f'run . 1MiB "{predicted}" ""' in script  # compares every rank with the prediction


def test_idle_rank_gets_a_zero_duration_comp_node():
    topology = load_topology("switch:n=4")
    schedule = synthesize(topology, "broadcast", "binomial", root=0, chunks=1)
    program = schedule_to_et(schedule, MIB)
    for rank in range(4):
        assert program.nodes[rank]
    idle = [nodes for nodes in program.nodes if len(nodes) == 1 and nodes[0].type == et_def.NodeType.COMP_NODE]
    assert all(nodes[0].duration_us == 0 for nodes in idle)
    # a rank with no transfer at all
    from synth.schedule import Schedule

    empty = Schedule(schedule.collective, schedule.topology, schedule.ranks, "x", {}, schedule.transfers[:1])
    program = schedule_to_et(empty, MIB)
    assert [n.name for n in program.nodes[3]] == ["idle"]


def test_several_sizes_write_subfolders_and_same_input_same_bytes(tmp_path):
    topology = load_topology("ring:n=4")
    schedule = synthesize(topology, "allgather", "ring")
    export_chakra(schedule, topology, [MIB, 2**30], tmp_path / "a")
    export_chakra(schedule, topology, [MIB, 2**30], tmp_path / "b")
    for sub in ("1MiB", "1GiB"):
        assert (tmp_path / "a" / sub / "ring_allgather.3.et").is_file()
        assert (tmp_path / "a" / sub / "system.json").is_file()
    for path in sorted((tmp_path / "a").rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes()
    top = (tmp_path / "a" / "run_astrasim.sh").read_text()
    assert 'run 1MiB 1MiB "' in top and 'run 1GiB 1GiB "' in top and top.count('"../"') == 2
    for sub in ("1MiB", "1GiB"):  # each size also runs on its own: bash DIR/1MiB/run_astrasim.sh
        own = (tmp_path / "a" / sub / "run_astrasim.sh").read_text()
        assert 'run . ' + sub + ' "' in own and own.endswith('"../"\nexit $status\n')


def test_topology_astra_sim_cannot_describe_gets_a_note_and_traces(tmp_path):
    topology = load_topology("leaf-spine:leaves=2,gpus_per_leaf=2,spines=2")
    schedule = synthesize(topology, "allreduce", "ring")
    report = export_chakra(schedule, topology, [MIB], tmp_path)
    assert report.network is None
    assert any("cannot describe" in w for w in report.warnings)
    assert not (tmp_path / "network.yml").exists()
    assert "cannot describe" in (tmp_path / "NOTE.txt").read_text()
    assert (tmp_path / f"{report.name}.0.et").is_file()


def test_broadcast_runs_through_the_all_reduce_slot(tmp_path):
    topology = load_topology("switch:n=4")
    schedule = synthesize(topology, "broadcast", "binomial", root=1)
    report = export_chakra(schedule, topology, [MIB], tmp_path)
    assert json.loads((tmp_path / "system.json").read_text())["all-reduce-implementation-custom"] == [report.name]
    assert any("no custom-implementation slot" in w for w in report.warnings)


def test_comp_duration_option_and_round_trip_keeps_it(tmp_path):
    topology = load_topology("ring:n=8,bandwidth=53.6870912,latency=0.5")
    schedule = synthesize(topology, "allreduce", "ring")
    report = export_chakra(schedule, topology, [MIB], tmp_path, comp_duration_us=7)
    assert report.sets[0].predicted_ns == 90174
    back = import_chakra(tmp_path / report.name, topology)
    assert back.params["et"]["comp_us"] == 7
    assert astra_time_ns(back, topology, MIB) == 90174


def test_vector_imports_and_verifies_on_ring_and_switch():
    if not VECTOR_PREFIX.parent.exists():
        pytest.skip(f"shared vectors not found at {VECTORS}")
    for spec in ("ring:n=8,bandwidth=53.6870912,latency=0.5", "switch:n=8"):
        topology = load_topology(spec)
        schedule = import_chakra(VECTOR_PREFIX, topology)
        report = verify(schedule, topology)
        assert schedule.kind == Kind.ALLREDUCE and schedule.chunks == 8
        assert report.transfers == 112 and report.depth == 14
        assert sum(t.op == "reduce" for t in schedule.transfers) == 56
        assert schedule.params["et"]["comp_us"] == 7


def test_vector_with_the_wrong_rank_count_is_refused():
    if not VECTOR_PREFIX.parent.exists():
        pytest.skip(f"shared vectors not found at {VECTORS}")
    with pytest.raises(InputError, match="8 trace files"):
        import_chakra(VECTOR_PREFIX, load_topology("switch:n=4"))


def test_bad_files_give_clear_errors(tmp_path):
    with pytest.raises(InputError, match="no trace files"):
        import_chakra(tmp_path / "nothing", load_topology("switch:n=2"))
    (tmp_path / "x.0.et").write_bytes(b"\x05ab")
    with pytest.raises(InputError, match="truncated"):
        decode_et_bytes((tmp_path / "x.0.et").read_bytes(), "x.0.et")
    with pytest.raises(InputError, match="empty file"):
        decode_et_bytes(b"", "empty.et")


def _round_trip_cases():
    cases = []
    for spec in ("switch:n=8", "ring:n=8"):
        for kind in Kind:
            if kind == Kind.ALLTOALLV:  # the ET import does not carry the demand yet
                continue
            for algorithm in available(kind):
                cases.append((spec, kind, algorithm.name))
    return cases


@pytest.mark.parametrize(("spec", "kind", "algorithm"), _round_trip_cases())
@pytest.mark.slow
def test_round_trip_every_algorithm(spec, kind, algorithm, tmp_path):
    topology = load_topology(spec)
    try:
        schedule = synthesized(spec, kind.value, algorithm)
    except NotApplicable as reason:
        pytest.skip(str(reason))
    verify(schedule, topology)
    report = export_chakra(schedule, topology, [MIB], tmp_path)
    back = import_chakra(tmp_path / report.name, topology)
    verify(back, topology)
    assert back.transfers == schedule.transfers
    assert evaluate(back, topology, MIB).time_s == evaluate(schedule, topology, MIB).time_s
    assert astra_time_ns(back, topology, MIB) == astra_time_ns(schedule, topology, MIB) == report.sets[0].predicted_ns
    if algorithm in ("ring", "direct", "binomial"):
        # without synth's extra attributes the chunks are inferred from data flow alone
        inferred = import_chakra(tmp_path / report.name, topology, use_extras=False)
        verify(inferred, topology)
        assert astra_time_ns(inferred, topology, MIB) == astra_time_ns(schedule, topology, MIB)
        assert sorted((t.src, t.dst, t.op) for t in inferred.transfers) == \
            sorted((t.src, t.dst, t.op) for t in schedule.transfers)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topology=topologies(min_gpus=2, max_gpus=5))
def test_round_trip_on_random_topologies(topology, tmp_path_factory):
    folder = tmp_path_factory.mktemp("et")
    schedule = synthesize(topology, "allreduce", "ring")
    report = export_chakra(schedule, topology, [MIB], folder)
    # the traces are the schedule's nodes plus the ordering nodes the replay adds where sends share a link
    # (a ring through one switch can need them): the files are exactly that program, and without ordering
    # nodes exactly the plain translation
    program = lower(schedule, topology, MIB).program
    assert report.sets[0].order_nodes == program.order_nodes
    plain = schedule_to_et(schedule, MIB)
    for rank in range(topology.num_ranks):
        written = (folder / f"{report.name}.{rank}.et").read_bytes()
        assert written == encode_rank(program, rank)
        if not program.order_nodes:
            assert written == encode_rank(plain, rank)
    back = import_chakra(folder / report.name, topology)
    verify(back, topology)
    assert back.transfers == schedule.transfers
    assert astra_time_ns(back, topology, MIB) == astra_time_ns(schedule, topology, MIB)


# ------------------------------------------------------------------------------------------------ slices
def test_slices_split_every_transfer_with_remainders_spread_and_per_slice_deps():
    from synth.trace import slice_sizes

    assert slice_sizes(10, 4) == [3, 3, 2, 2] and sum(slice_sizes(131075, 8)) == 131075
    topology = load_topology("ring:n=4")
    schedule = synthesize(topology, "allreduce", "ring")
    size = 4 * 1003  # 1003-byte chunks in 4 slices: 251, 251, 251, 250
    plain = schedule_to_et(schedule, size)
    program = schedule_to_et(schedule, size, slices=4, window=2)
    assert {k: 4 * v for k, v in plain.counts().items()} == program.counts()
    tags, by_key = set(), {}
    for rank, nodes in enumerate(program.nodes):
        for node in nodes:
            if node.type == et_def.NodeType.COMM_SEND_NODE:
                assert node.size == [251, 251, 251, 250][node.slice]
                assert node.tag == node.transfer * 4 + node.slice and node.tag not in tags
                tags.add(node.tag)
            by_key[(rank, node.type, node.transfer, node.slice)] = node
    for t in schedule.transfers:
        for j in range(4):
            send = by_key[(t.src, et_def.NodeType.COMM_SEND_NODE, t.id, j)]
            expected = set()
            for dep in t.deps:  # ring: every dep's data arrived at t.src (its reduction or recv)
                d = schedule.transfers[dep]
                kind = et_def.NodeType.COMP_NODE if d.op == "reduce" else et_def.NodeType.COMM_RECV_NODE
                expected.add(by_key[(t.src, kind, dep, j)].id)
            if j >= 2:  # the window: slice j also waits for the delivery of slice j - 2
                expected.add(by_key[(t.src, et_def.NodeType.COMM_SEND_NODE, t.id, j - 2)].id)
            assert set(send.deps) == expected
    assert schedule_to_et(schedule, size, slices=1).counts() == plain.counts()
    with pytest.raises(InputError, match="slices"):
        schedule_to_et(schedule, 8, slices=4)  # 2-byte chunks cannot be cut in 4


def test_sliced_export_round_trips_and_predicts_what_the_model_says(tmp_path):
    topology = load_topology("switch:n=4,bandwidth=53.6870912,latency=0.5")
    schedule = synthesize(topology, "allreduce", "ring")
    report = export_chakra(schedule, topology, [MIB], tmp_path, slices=4, window=2)
    assert report.sets[0].predicted_ns == astra_time_ns(schedule, topology, MIB, slices=4, window=2)
    assert report.sets[0].predicted_ns < astra_time_ns(schedule, topology, MIB)  # pipelining pays
    assert "4 messages (slices), at most 2 in flight" in (tmp_path / "NOTE.txt").read_text()
    back = import_chakra(tmp_path / report.name, topology)
    assert back.transfers == schedule.transfers
    # a window as wide as the slices is no window
    wide = export_chakra(schedule, topology, [MIB], tmp_path / "wide", slices=4, window=4)
    assert wide.window is None and wide.sets[0].predicted_ns == astra_time_ns(schedule, topology, MIB, slices=4)


def test_cli_export_chakra_slices_and_tiny_sizes(tmp_path, capsys, monkeypatch):
    from helpers import assert_refused, run_cli

    topology = "switch:n=4,bandwidth=53.6870912,latency=0.5"
    monkeypatch.chdir(tmp_path)
    assert run_cli(["generate", topology, "-c", "allgather", "-a", "direct", "-o", "s.json"], capsys,
                   monkeypatch).code == 0
    done = run_cli(["export", "chakra", "s.json", "-s", "1MiB", "-s", "64KiB", "--slices", "2", "-o", "et", "--json"],
                   capsys, monkeypatch)
    assert done.code == 0, done.err
    data = json.loads(done.out)
    assert data["slices"] == 2 and [s["folder"] for s in data["sets"]] == ["1MiB", "64KiB"]
    assert all(s["order_nodes"] > 0 and len(s["predicted_finish_ns"]) == 4 for s in data["sets"])
    assert (tmp_path / "et" / "1MiB" / "run_astrasim.sh").is_file()  # the README's recipe
    refused = run_cli(["export", "chakra", "s.json", "-s", "200B", "-o", "tiny"], capsys, monkeypatch)
    assert_refused(refused, "messages of 50 bytes", "use a size of at least 213 bytes", None)
    assert not (tmp_path / "tiny").exists()


def test_local_ops_sliced_round_trip_and_astra_sim_numbers(tmp_path):
    """A local copy has no node, a local reduction is one COMP node per slice; both come back on import.
    ASTRA-sim 2.x reported these finish times for the two exports (checked by hand with run_astrasim.sh)."""
    from synth.collectives import Collective
    from synth.schedule import Schedule, Transfer

    topology = load_topology("switch:n=2,bandwidth=53.6870912,latency=0.5")
    a, b = topology.gpus
    transfers = (Transfer(0, 0, 1, 0, "copy", (a, "sw0", b), (), None, 0),
                 Transfer(1, 1, 1, 0, "copy", (b,), (0,), 0, 1),
                 Transfer(2, 1, 1, 0, "reduce", (b,), (1,), 1, None),
                 Transfer(3, 1, 0, 0, "copy", (b, "sw0", a), (2,), None, None))
    schedule = Schedule(Collective(Kind.ALLREDUCE, 2, 1, None), topology.name, (a, b), "manual", {}, transfers)
    verify(schedule, topology)
    plain = export_chakra(schedule, topology, [MIB], tmp_path / "plain", comp_duration_us=3)
    sliced = export_chakra(schedule, topology, [MIB], tmp_path / "sliced", slices=4, window=2)
    assert plain.sets[0].predicted_finish_ns == [83124, 83124]
    assert sliced.sets[0].predicted_finish_ns == [37175, 37175]
    assert sliced.sets[0].counts["COMP_NODE"] == 4 + sliced.sets[0].order_nodes  # the reduction, per slice
    for report in (plain, sliced):
        back = import_chakra(Path(report.folder) / report.name, topology)
        assert back.transfers == schedule.transfers
