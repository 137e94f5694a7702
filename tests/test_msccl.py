"""MSCCL XML export and import: vectors from msccl-tools and ASTRA-sim, runtime limits, round trips."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import synthesized
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.algorithms import available, synthesize
from synth.collectives import Kind
from synth.errors import InfeasibleError, InputError, LimitError, NotApplicable
from synth.evaluate import congestion, evaluate
from synth.export.msccl import MscclLimits, export_msccl, import_msccl, iter_steps, lower_msccl, parse_xml
from synth.library import load_topology
from synth.topology import Topology
from synth.verify import verify
from tests.strategies import topologies

VECTORS = Path(__file__).resolve().parents[2] / "shared" / "vectors"
MSCCL_TOOLS = VECTORS / "msccl-tools"
ASTRA_XML = VECTORS / "astra-sim" / "custom_ring_allreduce_8npus_1MB" / "custom_allreduce.xml"
MIB = 2**20


def _vector(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared vectors not found at {VECTORS}")
    return path


def two_boxes_behind_nics() -> Topology:
    """Two boxes of 4 gpus: each box's gpus share an NVSwitch; every gpu has its own NIC on one IB switch."""
    gpus = [f"b{b}.gpu{i}" for b in range(2) for i in range(4)]
    switches = ["b0.nvswitch", "b1.nvswitch", "ib"] + [f"b{b}.nic{i}" for b in range(2) for i in range(4)]
    links = []
    for b in range(2):
        for i in range(4):
            links.append((f"b{b}.gpu{i}", f"b{b}.nvswitch", 300.0, 0.7))
            links.append((f"b{b}.gpu{i}", f"b{b}.nic{i}", 25.0, 1.0))
            links.append((f"b{b}.nic{i}", "ib", 25.0, 1.0))
    return Topology.build("two-boxes", gpus, switches, links, boxes=[0] * 4 + [1] * 4)


VECTOR_FILES = ["allgather_ring_8r_1ch_1i.xml", "allreduce_a100_ring_8r_1ch_1i.xml", "alltoall_allpairs_8r_1i.xml",
                "hierarchical_allreduce_4g2n_1i.xml", "reducescatter_ring_8r_1ch_1i_inplace.xml"]


@pytest.mark.parametrize("name", VECTOR_FILES)
def test_msccl_tools_vectors_import_and_verify_on_a_switch(name):
    topology = load_topology("switch:n=8")
    schedule = import_msccl(_vector(MSCCL_TOOLS / name), topology)
    report = verify(schedule, topology)
    expected = {"allgather": Kind.ALLGATHER, "allreduce": Kind.ALLREDUCE, "alltoall": Kind.ALLTOALL,
                "hierarchical": Kind.ALLREDUCE, "reducescatter": Kind.REDUCESCATTER}[name.split("_")[0]]
    assert schedule.kind == expected and schedule.chunks == 8
    assert report.transfers == {Kind.ALLREDUCE: 112, Kind.ALLGATHER: 56, Kind.REDUCESCATTER: 56,
                                Kind.ALLTOALL: 56}[expected]
    assert all(len(t.path) == 3 and t.path[1] == "sw0" for t in schedule.transfers)


def test_hierarchical_allreduce_on_two_boxes_behind_nics():
    topology = two_boxes_behind_nics()
    schedule = import_msccl(_vector(MSCCL_TOOLS / "hierarchical_allreduce_4g2n_1i.xml"), topology)
    verify(schedule, topology)
    inter = [t for t in schedule.transfers if t.src // 4 != t.dst // 4]
    intra = [t for t in schedule.transfers if t.src // 4 == t.dst // 4]
    assert inter and intra
    assert all("ib" in t.path and len(t.path) == 5 for t in inter)  # gpu -> nic -> ib -> nic -> gpu
    assert all("nvswitch" in t.path[1] for t in intra)  # never through another gpu


def test_astra_sim_xml_imports():
    topology = load_topology("switch:n=8")
    schedule = import_msccl(_vector(ASTRA_XML), topology)
    assert verify(schedule, topology).depth == 14
    assert schedule.kind == Kind.ALLREDUCE


def test_equal_paths_are_balanced():
    # two parallel switches between a pair of boxes: messages alternate between them
    gpus = ["a0", "a1", "b0", "b1"]
    links = [("a0", "s1", 10.0), ("a1", "s1", 10.0), ("a0", "s2", 10.0), ("a1", "s2", 10.0),
             ("s1", "t", 10.0), ("s2", "t", 10.0), ("t", "b0", 10.0), ("t", "b1", 10.0)]
    topology = Topology.build("two-paths", gpus, ["s1", "s2", "t"], links)
    schedule = synthesize(topology, "alltoall", "direct")
    program = lower_msccl(schedule)
    back = import_msccl("x.xml", topology, text=program.xml())
    via = [t.path[1] for t in back.transfers if t.src == 0 and t.dst >= 2]
    assert sorted(via) == ["s1", "s2"]


def test_import_refuses_pairs_without_a_switch_only_path():
    # DGX-1 gpus 0 and 5 share no NVLink and NVLink gpus do not forward: the XML cannot say how to relay
    with pytest.raises(InputError, match="through switches and forwarding gpus only"):
        import_msccl(_vector(MSCCL_TOOLS / "alltoall_allpairs_8r_1i.xml"), load_topology("dgx1"))
    # on a ring of chips that route traffic (ASTRA-sim's Ring) the same file imports
    import_msccl(_vector(MSCCL_TOOLS / "alltoall_allpairs_8r_1i.xml"), load_topology("ring:n=8"))


def test_xml_entities_and_dtds_are_refused():
    bomb = ('<?xml version="1.0"?><!DOCTYPE algo [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
            '<algo name="&b;" ngpus="2" coll="allgather"/>')
    with pytest.raises(InputError, match="refused"):
        import_msccl("bomb.xml", load_topology("switch:n=2"), text=bomb)
    external = '<?xml version="1.0"?><!DOCTYPE algo SYSTEM "http://example.invalid/x.dtd"><algo ngpus="2"/>'
    with pytest.raises(InputError, match="refused"):
        import_msccl("ext.xml", load_topology("switch:n=2"), text=external)


def test_malformed_xml_names_the_element():
    topology = load_topology("switch:n=2")
    with pytest.raises(InputError, match="invalid XML"):
        import_msccl("bad.xml", topology, text="<algo")
    text = ('<algo ngpus="2" coll="allgather" nchunksperloop="2"><gpu id="0" i_chunks="1" o_chunks="2">'
            '<tb id="0" send="1" recv="-1" chan="0"><step s="0" type="s" srcbuf="i" srcoff="5" dstbuf="o" dstoff="1" '
            'cnt="1" depid="-1" deps="-1" hasdep="0"/></tb></gpu><gpu id="1" i_chunks="1" o_chunks="2"/></algo>')
    with pytest.raises(InputError, match="gpu 0 tb 0 step 0.srcoff"):
        import_msccl("bad.xml", topology, text=text)
    deadlock = text.replace('srcoff="5"', 'srcoff="0"')
    with pytest.raises(InputError, match="never received|deadlock"):
        import_msccl("dead.xml", topology, text=deadlock)


def test_export_writes_what_the_runtime_requires(tmp_path):
    topology = load_topology("switch:n=8")
    schedule = synthesize(topology, "reducescatter", "ring")
    path = tmp_path / "rs.xml"
    program = export_msccl(schedule, path)
    algo, buffers, tbs = parse_xml(path.read_text())
    assert algo["coll"] == "reducescatter"
    assert algo["outofplace"] == "1" and algo["inplace"] == "0"
    assert algo["minBytes"] == "0" and int(algo["maxBytes"]) > 2**30
    assert algo["proto"] == "Simple" and int(algo["ngpus"]) == 8
    assert int(algo["nchannels"]) <= 32
    for gpu, gpu_tbs in enumerate(tbs):
        assert [tb.id for tb in gpu_tbs] == list(range(len(gpu_tbs)))  # contiguous from 0
        for tb in gpu_tbs:
            assert tb.send != gpu and tb.recv != gpu
            assert len(tb.steps) < 256
            for step in tb.steps:
                assert step.cnt < 72
                if step.depid != -1:
                    assert step.depid != tb.id
                    assert gpu_tbs[step.depid].steps[step.deps]  # the awaited step exists
    # each (gpu, channel) owns one threadblock per send peer and per recv peer
    for gpu_tbs in tbs:
        sends = [(tb.chan, tb.send) for tb in gpu_tbs if tb.send >= 0]
        recvs = [(tb.chan, tb.recv) for tb in gpu_tbs if tb.recv >= 0]
        assert len(sends) == len(set(sends)) and len(recvs) == len(set(recvs))
    assert {s.type for _, _, s in iter_steps(program)} >= {"s", "rrs"}
    assert program.xml() == path.read_text()
    assert lower_msccl(schedule).xml() == program.xml()  # same schedule, same bytes


def test_fused_steps_for_ring_allreduce_match_msccl_tools_shape():
    schedule = synthesize(load_topology("ring:n=8"), "allreduce", "ring")
    types = {s.type for _, _, s in iter_steps(lower_msccl(schedule))}
    assert {"s", "rrs", "rrcs", "rcs", "r"} <= types


def test_hasdep_marks_every_awaited_step():
    program = lower_msccl(synthesize(load_topology("switch:n=8"), "allreduce", "rhd"))
    awaited = {(g, s.depid, s.deps) for g, _, s in iter_steps(program) if s.depid != -1}
    assert awaited
    for g, b, k in awaited:
        assert program.tbs[g][b].steps[k].hasdep == 1
    assert any(s.type == "nop" and s.cnt == 0 for _, _, s in iter_steps(program))


def test_limits_give_the_limit_the_excess_and_the_fix():
    schedule = synthesize(load_topology("switch:n=8"), "allgather", "ring", chunks=64)
    with pytest.raises(LimitError, match=r"steps per threadblock .* over the limit of 3.*Fix: use fewer chunks"):
        lower_msccl(schedule, limits=MscclLimits(max_channels=1, max_steps=4))
    with pytest.raises(LimitError, match="threadblocks per gpu"):
        lower_msccl(synthesize(load_topology("switch:n=8"), "alltoall", "direct"), limits=MscclLimits(sms=4))
    with pytest.raises(InputError, match="^proto: expected one of"):  # the Python parameter, not a CLI flag
        lower_msccl(schedule, proto="LL256")


def test_the_runtime_parsers_tables_are_limits_too(tmp_path, capsys, monkeypatch):
    """msccl_parser.h keeps <algo>, every <gpu> and the rank's own <tb>s and <step>s in MAX_NODES nodes, the
    <gpu>s under <algo> in MAX_SUBS unchecked, an attribute value in MAX_STR_LEN + 1 bytes."""
    from helpers import assert_refused, run_cli

    from synth.export.msccl.program import parser_nodes

    schedule = synthesize(load_topology("switch:n=8"), "allreduce", "ring")
    program = lower_msccl(schedule)
    _, _, tbs = parse_xml(program.xml())
    counted = max(1 + 8 + len(gpu_tbs) + sum(len(tb.steps) for tb in gpu_tbs) for gpu_tbs in tbs)
    assert program.stats()["max_parser_nodes"] == counted == max(parser_nodes(8, gpu) for gpu in program.tbs)
    with pytest.raises(LimitError, match=r"it has 8 gpus, 1 over the limit of 7 .*MAX_SUBS"):
        lower_msccl(schedule, limits=MscclLimits(max_gpus=7))
    # the search finds a layout with fewer threadblocks when the node table is tight, else refuses
    tight = lower_msccl(schedule, limits=MscclLimits(parser_nodes=counted))
    assert tight.stats()["max_parser_nodes"] < counted
    fewest = min(lower_msccl(schedule, max_channels=1).stats()["max_parser_nodes"], tight.stats()["max_parser_nodes"])
    with pytest.raises(LimitError, match=r"XML nodes the runtime's parser keeps for one rank is \d+ on gpu \d+.*"
                                         r"Fix: use fewer chunks.*raise `parser_nodes`"):
        lower_msccl(schedule, limits=MscclLimits(parser_nodes=fewest))  # past the floor checked up front
    with pytest.raises(InputError, match="^name: expected at most 255 characters"):
        lower_msccl(schedule, name="&" * 60)  # 300 once escaped
    with pytest.raises(InputError, match="^parser_nodes: expected 4"):
        lower_msccl(schedule, limits=MscclLimits(parser_nodes=3))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text(schedule.to_json())
    done = run_cli(["export", "msccl", "s.json", "-t", "switch:n=8", "-o", "x.xml", "--max-gpus", "4"],
                   capsys, monkeypatch)
    assert_refused(done, "it has 8 gpus, 4 over the limit of 4", "raise `--max-gpus`")
    assert not (tmp_path / "x.xml").exists()
    done = run_cli(["export", "msccl", "s.json", "-t", "switch:n=8", "-o", "x.xml", "--json"], capsys, monkeypatch)
    assert json.loads(done.out)["max_parser_nodes"] == program.stats()["max_parser_nodes"]


def test_a_gpu_with_more_transfers_than_its_parser_can_hold_is_refused_before_lowering(monkeypatch):
    import synth.export.msccl.lower as lower

    schedule = synthesize(load_topology("switch:n=8"), "allgather", "ring", chunks=64)
    sends = Counter(t.src for t in schedule.transfers if t.src != t.dst)
    assert max(sends.values()) == 7 * 8  # 64 chunks: 8 per rank, each sent on by 7 gpus
    assert lower_msccl(schedule).stats()["max_parser_nodes"] >= 1 + 8 + 1 + 56
    monkeypatch.setattr(lower, "lower_locations", lambda *_: pytest.fail("lowered a schedule that cannot fit"))
    with pytest.raises(LimitError, match=r"is at least 66 on gpu 0, 7 or more over the limit of 59"):
        lower_msccl(schedule, limits=MscclLimits(parser_nodes=60))  # <algo>, 8 <gpu>s, a <tb>, 56 sends


def test_every_program_a_stock_executor_loads_is_within_the_default_transfer_limit():
    """Why the MSCCL export needs no streaming form: with at most max_gpus gpus and fewer than parser_nodes
    nodes per rank, and one send per step, a loadable program has fewer transfers than SYNTH_MAX_TRANSFERS."""
    from synth.limits import LIMITS

    limits = MscclLimits()
    most = max(gpus * (limits.parser_nodes - 1 - (2 + gpus)) for gpus in range(1, limits.max_gpus + 1))
    assert most == 1024 * 3069 < LIMITS["max_transfers"].default


def test_channels_below_the_floor_cannot_fit_and_a_refusal_gives_the_exact_step_count():
    import re

    from synth.export.msccl.locations import lower_locations
    from synth.export.msccl.lower import _channels, _split_ok, channel_floor
    from synth.export.msccl.threadblocks import LimitViolation, build

    schedule = synthesize(load_topology("switch:n=8"), "allgather", "ring", chunks=64)
    limits = MscclLimits(max_steps=40)
    floor = channel_floor(schedule, limits)
    busiest = max(sum(1 for t in schedule.transfers if (t.src, t.dst) == pair)
                  for pair in {(t.src, t.dst) for t in schedule.transfers})
    assert floor == -(-busiest // 39) > 1
    program = lower_msccl(schedule, limits=limits)
    assert floor <= program.nchannels and program.stats()["max_steps_per_tb"] < 40
    lowering = lower_locations(schedule)
    below = MscclLimits(max_channels=floor - 1, max_steps=40)
    for channels in range(1, floor):
        for policy in ("chunk", "pair", "block"):  # every layout with fewer channels fails, fully built too
            chan = _channels(schedule, channels, policy)
            with pytest.raises(LimitViolation, match="steps per threadblock"):
                build(schedule, lowering, chan, _split_ok(schedule, lowering, chan), below, exact=True)
            with pytest.raises(LimitViolation, match="steps per threadblock is at least") as early:
                build(schedule, lowering, chan, _split_ok(schedule, lowering, chan), below)  # before its steps
            assert early.value.at_least
    with pytest.raises(LimitError) as refused:
        lower_msccl(schedule, limits=below)
    message = str(refused.value)
    assert "at least" not in message
    reported = re.search(r"steps per threadblock is (\d+) on (gpu \d+ threadblock \d+),", message)
    assert reported is not None
    finished = set()  # the counts that the finished layouts of the attempts have
    for policy, pair_rest in (("chunk", False), ("pair", False), ("block", False), ("chunk", True), ("pair", True)):
        chan = _channels(schedule, floor - 1, policy)
        with pytest.raises(LimitViolation) as exact:
            build(schedule, lowering, chan, _split_ok(schedule, lowering, chan), below, pair_rest, exact=True)
        assert not exact.value.at_least
        finished.add((exact.value.value, exact.value.where))
    assert (int(reported.group(1)), reported.group(2)) in finished


def test_a_large_schedule_takes_at_least_eight_channels_and_is_not_slower_for_it():
    """Above SEARCH_TRANSFERS the first fitting layout from LARGE_CHANNELS up wins: on a 64-gpu torus
    allgather (16,128 transfers) that fits in one channel, the read-back program is no slower than the
    one-channel layout's (13.4 against 7.2 ms at 1 GiB when this was written), and fewer channels are
    still taken when the limits allow no more."""
    from synth.export.msccl.lower import LARGE_CHANNELS, SEARCH_TRANSFERS

    topology = load_topology("torus:dims=8x8")
    schedule = synthesize(topology, "allgather", "forest")
    assert len(schedule.transfers) > SEARCH_TRANSFERS
    chosen = lower_msccl(schedule)
    fewest = lower_msccl(schedule, max_channels=1)
    assert chosen.nchannels >= LARGE_CHANNELS > fewest.nchannels == 1
    times = [evaluate(import_msccl("p.xml", topology, text=program.xml()), topology, 2**30).time_s
             for program in (chosen, fewest)]
    assert times[0] <= times[1]
    assert times[0] > evaluate(schedule, topology, 2**30).time_s  # still a cost, which `export msccl` states


@pytest.mark.slow
def test_cli_states_what_the_programs_step_order_costs_beside_the_schedule(tmp_path, capsys, monkeypatch):
    from helpers import run_cli

    monkeypatch.chdir(tmp_path)
    topology = load_topology("torus:dims=8x8")
    (tmp_path / "s.json").write_text(synthesize(topology, "allgather", "forest").to_json())
    done = run_cli(["export", "msccl", "s.json", "-o", "x.xml", "--json"], capsys, monkeypatch)
    report = json.loads(done.out)
    program, own = report["predicted"]["time_s"], report["schedule_predicted_time_s"]
    assert program > own  # threadblocks run their steps in order: waits the schedule does not have
    done = run_cli(["export", "msccl", "s.json", "-o", "y.xml"], capsys, monkeypatch)
    assert f"its steps' order in threadblocks costs +{program / own - 1:.1%}" in " ".join(done.out.split())


def test_cli_names_the_flags_where_the_library_names_parameters(tmp_path, capsys, monkeypatch):
    from helpers import assert_refused, run_cli

    schedule = synthesize(load_topology("switch:n=8"), "allgather", "ring", chunks=64)
    with pytest.raises(LimitError) as caught:
        lower_msccl(schedule, limits=MscclLimits(max_channels=1, max_steps=4))
    assert "raise `max_steps`" in str(caught.value) and "--" not in str(caught.value)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text(schedule.to_json())
    done = run_cli(["export", "msccl", "s.json", "-t", "switch:n=8", "-o", "x.xml", "--proto", "LL256"],
                   capsys, monkeypatch)
    assert_refused(done, "error: --proto: ", "expected one of Simple, LL, LL128")
    done = run_cli(["export", "msccl", "s.json", "-t", "switch:n=8", "-o", "x.xml", "--max-channels", "1",
                    "--max-steps", "4"], capsys, monkeypatch)
    assert_refused(done, "raise `--max-steps`", "allow more channels (`--max-channels`, up to 32)")
    assert not (tmp_path / "x.xml").exists()


def _cases():
    return [(spec, kind, algorithm.name) for spec in ("switch:n=8", "ring:n=8") for kind in Kind
            for algorithm in available(kind) if kind != Kind.ALLTOALLV]  # alltoallv: no MSCCL buffer layout yet



@pytest.mark.parametrize(("spec", "kind", "algorithm"), _cases())
@pytest.mark.slow
def test_round_trip_every_algorithm(spec, kind, algorithm):
    topology = load_topology(spec)
    try:
        schedule = synthesized(spec, kind.value, algorithm)
    except NotApplicable as reason:
        pytest.skip(str(reason))
    verify(schedule, topology)
    try:
        program = lower_msccl(schedule)
    except LimitError as error:
        assert "Fix:" in str(error)
        return
    back = import_msccl("rt.xml", topology, text=program.xml())
    verify(back, topology)
    key = sorted((t.src, t.dst, t.chunk, t.op) for t in schedule.transfers)
    assert sorted((t.src, t.dst, t.chunk, t.op) for t in back.transfers) == key
    if spec.startswith("ring"):  # XML has no routes: the import picks among the ring's equal paths itself
        return
    assert congestion(back, topology).seconds_per_byte == congestion(schedule, topology).seconds_per_byte
    # the XML names the protocol the runtime runs: the import pins it
    assert back.params["plan"] == {"protocol": program.proto}
    assert evaluate(back, topology, MIB).time_s == pytest.approx(
        evaluate(schedule, topology, MIB, protocol=program.proto).time_s, rel=1e-9)


@settings(max_examples=10, deadline=None)
@given(topology=topologies(min_gpus=2, max_gpus=5))
def test_export_import_on_random_topologies(topology):
    schedule = synthesize(topology, "allgather", "ring")
    program = lower_msccl(schedule)
    try:
        back = import_msccl("random.xml", topology, text=program.xml())
    except InputError as error:
        assert "crosses switches only" in str(error)
        return
    verify(back, topology)
    assert len(back.transfers) == len(schedule.transfers)


# ---------------------------------------------------------------------------------------- buffers, local steps
DATA = Path(__file__).resolve().parent / "data"


def line_of_three() -> Topology:
    """Three gpus on a line; gpu g1 does not forward, so g0 and g2 reach each other only through a relay."""
    return Topology.build("line", ["g0", "g1", "g2"], [], [("g0", "g1", 10.0), ("g1", "g2", 10.0)])


HAND_WRITTEN = {  # file -> (topology, kind, network transfers, local copies, local reductions)
    "allpairs_allreduce_4r.xml": ("switch:n=4", Kind.ALLREDUCE, 24, 0, 12),
    "ring_allreduce_3r_outofplace.xml": ("switch:n=3", Kind.ALLREDUCE, 12, 0, 0),
    "chain_allreduce_4r_rrcs.xml": ("switch:n=4", Kind.ALLREDUCE, 6, 0, 0),
    "alltoall_relay_3r_line.xml": ("line", Kind.ALLTOALL, 8, 0, 0),
}


def _topology(spec: str) -> Topology:
    return line_of_three() if spec == "line" else load_topology(spec)


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_hand_written_programs_import_and_verify(name):
    spec, kind, network, copies, reductions = HAND_WRITTEN[name]
    topology = _topology(spec)
    schedule = import_msccl(DATA / name, topology)
    verify(schedule, topology)
    assert schedule.kind == kind
    local = [t for t in schedule.transfers if t.src == t.dst]
    assert len(schedule.transfers) - len(local) == network
    assert sum(t.op == "copy" for t in local) == copies and sum(t.op == "reduce" for t in local) == reductions
    assert all(t.path == (topology.gpus[t.src],) for t in local)


def test_allpairs_reduces_scratch_into_the_data_cell():
    topology = load_topology("switch:n=4")
    schedule = import_msccl(DATA / "allpairs_allreduce_4r.xml", topology)
    # every peer's contribution lands in a scratch slot (0..2) and is reduced into the owner's data cell
    into_scratch = [t for t in schedule.transfers if t.src != t.dst and t.dst_scratch is not None]
    assert len(into_scratch) == 12 and {t.dst_scratch for t in into_scratch} == {0, 1, 2}
    for t in schedule.transfers:
        if t.src == t.dst:
            assert (t.op, t.src_scratch, t.dst_scratch, t.chunk) == ("reduce", t.src_scratch, None, t.src)
    assert schedule.scratch_slots() == [3, 3, 3, 3]


def test_relay_through_scratch_on_a_line():
    topology = line_of_three()
    schedule = import_msccl(DATA / "alltoall_relay_3r_line.xml", topology)
    # chunks between g0 and g2 go into a scratch slot of g1 and on from there; no path crosses g1
    relayed = [t for t in schedule.transfers if t.dst_scratch is not None or t.src_scratch is not None]
    assert len(relayed) == 4 and all(t.src == 1 or t.dst == 1 for t in relayed)
    assert all(len(t.path) == 2 for t in schedule.transfers)
    with pytest.raises(InputError, match="must end holding chunk 0"):  # without gpu 0's own copy into its output
        import_msccl("x.xml", topology, text=(DATA / "alltoall_relay_3r_line.xml").read_text().replace(
            'type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"', 'type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1"'))


def test_out_of_place_output_must_be_written():
    # a two-gpu allgather that never copies its own chunk into its output buffer: the data cell holds the
    # right value, but the runtime's output buffer would not
    tb = ('<tb id="0" send="{p}" recv="{p}" chan="0"><step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" '
          'dstoff="{g}" cnt="1"/><step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{p}" cnt="1"/></tb>')
    gpus = "".join(f'<gpu id="{g}" i_chunks="1" o_chunks="2" s_chunks="0">{tb.format(g=g, p=1 - g)}</gpu>' for g in (0, 1))
    text = f'<algo name="ag" ngpus="2" coll="allgather" nchunksperloop="2" inplace="0">{gpus}</algo>'
    with pytest.raises(InputError, match=r"buffer o\[0\] must end holding chunk 0 .* never written"):
        import_msccl("ag.xml", load_topology("switch:n=2"), text=text)
    fixed = text.replace('<step s="0" type="s"', '<step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{g}" '
                         'cnt="1"/><step s="1" type="s"').replace('<step s="1" type="r"', '<step s="2" type="r"')
    fixed = fixed.replace('dstoff="{g}"', 'dstoff="0"', 1).replace('dstoff="{g}"', 'dstoff="1"', 1)
    schedule = import_msccl("ag.xml", load_topology("switch:n=2"), text=fixed)
    assert len(schedule.transfers) == 2  # the copies into the output share the data cell: no op


def test_local_reduction_of_a_value_with_itself_is_refused():
    # gpu 0 reduces its scratch copy of gpu 1's data into its input twice: gpu 1's contribution counts twice
    text = (DATA / "allpairs_allreduce_4r.xml").read_text()
    doubled = text.replace('<step s="2" type="re" srcbuf="s" srcoff="1" dstbuf="i" dstoff="0"',
                           '<step s="2" type="re" srcbuf="s" srcoff="0" dstbuf="i" dstoff="0"', 1)
    assert doubled != text
    with pytest.raises(InputError, match="twice"):
        import_msccl("x.xml", load_topology("switch:n=4"), text=doubled)


def test_custom_collectives_are_refused_clearly():
    text = (DATA / "chain_allreduce_4r_rrcs.xml").read_text().replace('coll="allreduce"', 'coll="custom"')
    with pytest.raises(InputError, match="custom collective"):
        import_msccl("x.xml", load_topology("switch:n=4"), text=text)


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_hand_written_programs_round_trip(name):
    spec = HAND_WRITTEN[name][0]
    topology = _topology(spec)
    schedule = import_msccl(DATA / name, topology)
    program = lower_msccl(schedule)
    types = {s.type for _, _, s in iter_steps(program)}
    if any(t.src == t.dst and t.op == "reduce" for t in schedule.transfers):
        assert "re" in types
    if any(slots for slots in schedule.scratch_slots()):
        assert any(s_chunks for _, _, s_chunks in program.buffers)
    back = import_msccl("rt.xml", topology, text=program.xml())
    verify(back, topology)

    def network(s):
        return sorted((t.src, t.dst, t.chunk, t.op) for t in s.transfers if t.src != t.dst)
    assert network(back) == network(schedule)
    assert congestion(back, topology).seconds_per_byte == congestion(schedule, topology).seconds_per_byte


def test_relayed_schedule_exports_scratch_and_round_trips():
    topology = load_topology("dgx1")
    schedule = synthesize(topology, "alltoall", "direct")
    assert max(schedule.scratch_slots()) > 0  # pairs without an NVLink relay through a scratch slot
    program = lower_msccl(schedule)
    assert any(s_chunks for _, _, s_chunks in program.buffers)
    assert any("s" in (s.srcbuf, s.dstbuf) for _, _, s in iter_steps(program) if s.type != "nop")
    back = import_msccl("rt.xml", topology, text=program.xml())
    verify(back, topology)
    assert sorted((t.src, t.dst, t.chunk) for t in back.transfers) == \
        sorted((t.src, t.dst, t.chunk) for t in schedule.transfers)
    assert congestion(back, topology).seconds_per_byte == congestion(schedule, topology).seconds_per_byte
    assert max(back.scratch_slots()) > 0


def test_local_ops_export_as_cpy_and_re():
    # a hand-built schedule: rank 1 keeps rank 0's data in scratch, copies its own input aside and
    # reduces locally; then sends the sum back
    from synth.collectives import Collective
    from synth.schedule import Schedule, Transfer

    topology = load_topology("switch:n=2")
    path, back_path = ("gpu0", "sw0", "gpu1"), ("gpu1", "sw0", "gpu0")
    transfers = (Transfer(0, 0, 1, 0, "copy", path, (), None, 0),
                 Transfer(1, 1, 1, 0, "copy", ("gpu1",), (), None, 1),
                 Transfer(2, 1, 1, 0, "reduce", ("gpu1",), (0, 1), 0, 1),
                 Transfer(3, 1, 1, 0, "copy", ("gpu1",), (2,), 1, None),
                 Transfer(4, 1, 0, 0, "copy", back_path, (3,)))
    schedule = Schedule(Collective(Kind.ALLREDUCE, 2, 1), "switch:n=2", topology.gpus, "manual", {}, transfers)
    verify(schedule, topology)
    program = lower_msccl(schedule)
    steps = [s.type for _, _, s in iter_steps(program)]
    assert steps.count("cpy") >= 2 and steps.count("re") == 1
    assert program.buffers[1][2] == 2  # two scratch chunks on gpu 1
    back = import_msccl("rt.xml", topology, text=program.xml())
    verify(back, topology)
    assert sorted((t.src, t.dst, t.op) for t in back.transfers if t.src != t.dst) == [(0, 1, "copy"), (1, 0, "copy")]


def test_local_ops_lower_to_chakra_and_come_back(tmp_path):
    # a local reduction is one COMP node on its rank; a local copy has no node (what waits for it waits
    # for what it waits for) and comes back from the metadata
    from synth.collectives import Collective
    from synth.export.chakra import export_chakra, import_chakra
    from synth.schedule import Schedule, Transfer
    from synth.trace import schedule_to_et

    topology = load_topology("switch:n=2")
    transfers = (Transfer(0, 0, 1, 0, "copy", ("gpu0", "sw0", "gpu1"), (), None, 0),
                 Transfer(1, 1, 1, 0, "copy", ("gpu1",), (), None, 1),
                 Transfer(2, 1, 1, 0, "reduce", ("gpu1",), (0, 1), 0, 1),
                 Transfer(3, 1, 1, 0, "copy", ("gpu1",), (2,), 1, None),
                 Transfer(4, 1, 0, 0, "copy", ("gpu1", "sw0", "gpu0"), (3,)))
    schedule = Schedule(Collective(Kind.ALLREDUCE, 2, 1), "switch:n=2", topology.gpus, "manual", {}, transfers)
    program = schedule_to_et(schedule, MIB, comp_duration_us=3)
    assert program.counts() == {"COMM_RECV_NODE": 2, "COMM_SEND_NODE": 2, "COMP_NODE": 1}
    by_name = {node.name: node for node in program.nodes[1]}
    comp, send = by_name["local_reduce_t2_c0"], by_name["send_t4_c0_to0"]
    assert comp.duration_us == 3 and comp.deps == (by_name["recv_t0_c0_from0"].id,)
    assert send.deps == (comp.id,)  # through the copy 3, which has no node
    # the astra model runs the same traces: the local reduction is on the critical path (0 µs runs as 1 ns)
    slow = Schedule(schedule.collective, schedule.topology, schedule.ranks, "manual", {"et": {"comp_us": 3}}, transfers)
    extra = evaluate(slow, topology, MIB, model="astra").time_s - evaluate(schedule, topology, MIB, model="astra").time_s
    assert extra == pytest.approx(2999e-9, abs=1e-12)
    export_chakra(schedule, topology, [MIB], tmp_path / "out")
    back = import_chakra(tmp_path / "out", topology)
    assert back.transfers == schedule.transfers
    imported = import_msccl(DATA / "allpairs_allreduce_4r.xml", load_topology("switch:n=4"))
    assert schedule_to_et(imported, MIB).counts()["COMP_NODE"] == 12


def test_unordered_accesses_to_one_buffer_position_are_a_race():
    # gpu 0's second reduction into i[0] no longer waits for the first (another threadblock): a race
    text = (DATA / "allpairs_allreduce_4r.xml").read_text()
    step = 'type="re" srcbuf="s" srcoff="1" dstbuf="i" dstoff="0" cnt="1" depid="0" deps="2"'
    assert text.count(step) == 1
    with pytest.raises(InputError, match=r"gpu 0 tb 1 step 2: reads buffer i\[0\] and gpu 0 tb 0 step 2 also touches it.* race"):
        import_msccl("x.xml", load_topology("switch:n=4"), text=text.replace(step, step.replace(
            'depid="0" deps="2"', 'depid="-1" deps="-1"')))


# ------------------------------------------------------------------------------ the runtime's own routes
def test_export_states_the_routing_loss_of_a_forest_on_two_dgx_a100(tmp_path):
    """XML names only the ends of a message: a forest allgather on 2 x DGX A100 that spreads its trees over
    the NICs comes back through shortest paths through switches, and its congestion time grows 3.097 -> 3.355 ms
    at 1 GiB."""
    from synth.export.msccl import runtime_routing

    topology = load_topology("dgx-a100:boxes=2")
    schedule = synthesize(topology, "allgather", "forest")
    program = export_msccl(schedule, tmp_path / "f.xml", topology)
    routing = program.routing
    assert routing is not None and routing.schedule is not None
    assert round(float(routing.planned * 2**30) * 1e6) == 3097  # µs
    assert round(float(routing.runtime * 2**30) * 1e6) == 3355
    assert routing.loss == routing.runtime / routing.planned - 1 > 0
    assert 0 < routing.rerouted < routing.transfers == len(schedule.transfers)
    # what the runtime runs is exactly the XML read back
    back = import_msccl(tmp_path / "f.xml", topology)
    assert congestion(back, topology).seconds_per_byte == routing.runtime
    assert runtime_routing(schedule, topology, program).runtime == routing.runtime  # deterministic


def test_export_on_a_switch_loses_nothing_and_cli_says_so(tmp_path, capsys, monkeypatch):
    from helpers import run_cli

    topology = load_topology("switch:n=8")
    schedule = synthesize(topology, "allreduce", "ring")
    program = export_msccl(schedule, tmp_path / "r.xml", topology)
    assert program.routing.rerouted == 0 and program.routing.loss == 0
    assert export_msccl(schedule, tmp_path / "plain.xml").routing is None  # no topology, no check
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text(schedule.to_json())
    done = run_cli(["export", "msccl", "s.json", "-o", "x.xml", "--size", "1GiB"], capsys, monkeypatch)
    assert done.code == 0 and "the runtime takes the schedule's own paths" in done.out
    assert "predicted time" in done.out and "routing loss" not in done.err


def test_cli_prints_the_routing_loss_and_json_carries_it(tmp_path, capsys, monkeypatch):
    from helpers import run_cli

    monkeypatch.chdir(tmp_path)
    assert run_cli(["generate", "dgx-a100:boxes=2", "-c", "allgather", "-a", "forest", "-o", "f.json"], capsys,
                   monkeypatch).code == 0
    done = run_cli(["export", "msccl", "f.json", "-o", "f.xml", "-s", "64MiB"], capsys, monkeypatch)
    assert done.code == 0, done.err
    # congestion times are linear in the size: 3.355 ms and 3.097 ms at 1 GiB
    assert "routing loss" in done.err and "at 64MiB the congestion time is 209.72 us instead of the schedule's " \
        "193.58 us (+8.3%)" in " ".join(done.err.split())
    done = run_cli(["export", "msccl", "f.json", "-o", "g.xml", "-s", "64MiB", "--json"], capsys, monkeypatch)
    routing = json.loads(done.out)["routing"]
    assert routing["loss"] == pytest.approx(1 / 12) and routing["rerouted_transfers"] > 0


def test_export_of_a_schedule_pinning_its_slices_names_the_buffer_and_predicts_with_them(tmp_path, capsys,
                                                                                        monkeypatch):
    """XML has no slice size: the CLI says which NCCL_BUFFSIZE streams the pinned slices, and its predicted
    time is the one every other command gives the schedule."""
    import dataclasses

    from helpers import run_cli

    from synth.evaluate import evaluate

    topology = load_topology("switch:n=8")
    schedule = synthesize(topology, "allgather", "ring")
    pinned = dataclasses.replace(schedule, params={**schedule.params, "plan": {"slice_bytes": 65536}})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text(pinned.to_json())
    done = run_cli(["export", "msccl", "s.json", "-o", "x.xml", "--size", "64MiB", "--json"], capsys, monkeypatch)
    assert done.code == 0, done.err
    report = json.loads(done.out)
    assert report["nccl_buffsize"] == 8 * 65536
    assert report["predicted"]["time_s"] == evaluate(pinned, topology, 2**26).time_s \
        != evaluate(schedule, topology, 2**26).time_s  # the pinned slices, not the rule's
    # the schedule itself under the program's plan: a ring's program waits for nothing more than it does
    assert report["schedule_predicted_time_s"] == report["predicted"]["time_s"]
    done = run_cli(["export", "msccl", "s.json", "-o", "y.xml", "--size", "64MiB"], capsys, monkeypatch)
    assert "NCCL_BUFFSIZE=524288" in done.out
    plain = tmp_path / "plain.json"
    plain.write_text(schedule.to_json())
    assert "NCCL_BUFFSIZE" not in run_cli(["export", "msccl", "plain.json", "-o", "z.xml", "-s", "1MiB"], capsys, monkeypatch).out


@settings(max_examples=20, deadline=None)
@given(topology=topologies(min_gpus=2, max_gpus=6),
       case=st.sampled_from([("allgather", "forest"), ("allreduce", "forest"), ("reduce_scatter", "ring"),
                             ("alltoall", "direct"), ("allreduce", "tree")]),
       channels=st.integers(1, 5), policy=st.sampled_from(["chunk", "pair", "block"]))
def test_the_array_counts_of_a_layout_match_a_count_transfer_by_transfer(topology, case, channels, policy):
    """What the layout search counts with numpy (messages, forwarding weights, the split check) equals the
    plain count over the transfers."""
    from synth.export.msccl.locations import lower_locations
    from synth.export.msccl.lower import _channels, _split_ok
    from synth.export.msccl.threadblocks import Columns, _peers

    try:
        schedule = synthesize(topology, *case)
    except (NotApplicable, InfeasibleError):
        return
    transfers = schedule.transfers
    chan = _channels(schedule, channels, policy).tolist()
    expected_chan = [(t.chunk * channels // schedule.collective.num_chunk_ids if policy == "block"
                      else (t.chunk if policy == "chunk" else t.src + t.dst) % channels) for t in transfers]
    assert chan == expected_chan
    messages: Counter = Counter()
    weight: Counter = Counter()
    keys = set()
    split_ok = True
    lowering = lower_locations(schedule)
    for t in transfers:
        if t.src == t.dst:
            continue
        messages[(t.src, chan[t.id], "send", t.dst)] += 1
        messages[(t.dst, chan[t.id], "recv", t.src)] += 1
        for dep in t.deps:
            d = transfers[dep]
            if d.dst == t.src and d.src != d.dst and d.chunk == t.chunk and chan[dep] == chan[t.id]:
                weight[(t.src, chan[t.id], t.dst, d.src)] += 1
        key = (t.src, t.dst, chan[t.id], lowering.level[t.id])
        split_ok = split_ok and key not in keys
        keys.add(key)
    peers = _peers(schedule, Columns.of(schedule), np.asarray(chan))
    assert peers.messages == dict(messages)
    assert peers.weight == dict(weight)
    assert peers.has_local == [any(t.src == t.dst == g for t in transfers) for g in range(schedule.collective.num_ranks)]
    assert _split_ok(schedule, lowering, chan) == split_ok
