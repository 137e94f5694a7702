"""In-switch operations in the schedule IR (``switch_ops``, input and output legs, ``synth.schedule/3``): the
file form and its refusals, the verifier's rules for them, the flow model's view of them (both engines, the
time bound, the switch's reduction throughput), and random switch schedules that must all verify."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
from helpers import assert_refused, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import Kind, Topology, load_topology, verify
from synth.bounds import time_bound
from synth.collectives import Collective
from synth.errors import InputError, VerificationError
from synth.evaluate import evaluate_sizes
from synth.flow import simulate, simulate_detailed
from synth.plan import Protocol, make_plan
from synth.schedule import Schedule, ScheduleBuilder, SwitchOp
from synth.topology import Multicast, Reduction, SwitchCapabilities

SCHEDULES = Path(__file__).resolve().parent.parent / "schedules"
SW = "nvs"


# ------------------------------------------------------------------------------ building blocks
def star(n: int, bandwidths: list[float] | None = None, throughput: float | None = None,
         max_group: int | None = None, multicast: bool = True, reduction: bool = True, name: str = "star") -> Topology:
    """``n`` gpus on one switch ``nvs`` that reduces (sum, f32/bf16) and multicasts as asked."""
    gpus = [f"gpu{i}" for i in range(n)]
    caps = SwitchCapabilities(Reduction(("sum",), ("f32", "bf16"), throughput, max_group) if reduction else None,
                              Multicast() if multicast else None)
    links = [(g, SW, bw) for g, bw in zip(gpus, bandwidths or [100.0] * n, strict=True)]
    return Topology.build(name, gpus, [SW], links, capabilities={SW: caps})


def nvls_allreduce(topo: Topology, chunks: int | None = None, dtype: str = "f32", switch: str = SW) -> Schedule:
    """Per chunk: every rank into a reduce, the sum to the chunk's owner, who multicasts it to the rest."""
    n, g = topo.num_ranks, topo.gpus
    chunks = chunks or n
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, n, chunks), topo.name, g, "manual")
    for c in range(chunks):
        owner = c % n
        k = b.add_switch_op(switch, "reduce", c, dtype=dtype)
        for r in range(n):
            b.add_to_switch(r, k, (g[r], switch))
        out = b.add_from_switch(k, owner, (switch, g[owner]))
        m = b.add_switch_op(switch, "multicast", c)
        b.add_to_switch(owner, m, (g[owner], switch), deps=[out])
        for r in range(n):
            if r != owner:
                b.add_from_switch(m, r, (switch, g[r]))
    return b.build()


def switch_reducescatter(topo: Topology, per_rank: int = 1) -> Schedule:
    """One reduce op per chunk: every rank in, one output to the chunk's owner."""
    n, g = topo.num_ranks, topo.gpus
    coll = Collective(Kind.REDUCESCATTER, n, n * per_rank)
    b = ScheduleBuilder(coll, topo.name, g, "manual")
    for c in range(coll.chunks):
        k = b.add_switch_op(SW, "reduce", c)
        for r in range(n):
            b.add_to_switch(r, k, (g[r], SW))
        b.add_from_switch(k, coll.owner(c), (SW, g[coll.owner(c)]))
    return b.build()


def switch_allgather(topo: Topology, per_rank: int = 1) -> Schedule:
    """One multicast op per chunk: its owner in, every other rank out."""
    n, g = topo.num_ranks, topo.gpus
    coll = Collective(Kind.ALLGATHER, n, n * per_rank)
    b = ScheduleBuilder(coll, topo.name, g, "manual")
    for c in range(coll.chunks):
        owner = coll.owner(c)
        m = b.add_switch_op(SW, "multicast", c)
        b.add_to_switch(owner, m, (g[owner], SW))
        for r in range(n):
            if r != owner:
                b.add_from_switch(m, r, (SW, g[r]))
    return b.build()


def refused(schedule: Schedule, topology: Topology, *words: str) -> str:
    with pytest.raises(VerificationError) as caught:
        verify(schedule, topology)
    text = str(caught.value)
    for word in words:
        assert word in text, text
    return text


def with_transfer(schedule: Schedule, tid: int, **changes) -> Schedule:
    transfers = list(schedule.transfers)
    transfers[tid] = dataclasses.replace(transfers[tid], **changes)
    return dataclasses.replace(schedule, transfers=tuple(transfers))


def one_op(topo: Topology, kind: Kind, op_kind: str, inputs: list[int], outputs: list[int], switch: str = SW,
           op: str = "sum", dtype: str = "f32", chunks: int = 1) -> Schedule:
    """A schedule of one switch op on chunk 0 (not a whole collective: the op's checks come first)."""
    g = topo.gpus
    b = ScheduleBuilder(Collective(kind, topo.num_ranks, chunks), topo.name, g, "manual")
    k = b.add_switch_op(switch, op_kind, 0, op, dtype)  # type: ignore[arg-type]
    for r in inputs:
        b.add_to_switch(r, k, (g[r], switch))
    for r in outputs:
        b.add_from_switch(k, r, (switch, g[r]))
    return b.build()


# ------------------------------------------------------------------------------ the file form
def test_a_schedule_with_switch_ops_round_trips_as_synth_schedule_3():
    topo = load_topology("dgx-h100")
    schedule = nvls_allreduce(topo, dtype="bf16")
    text = schedule.to_json()
    data = json.loads(text)
    assert data["format"] == schedule.format == "synth.schedule/3"
    assert data["switch_ops"][0] == {"id": 0, "switch": "nvs", "kind": "reduce", "chunk": 0, "op": "sum",
                                     "dtype": "bf16"}
    assert data["switch_ops"][1] == {"id": 1, "switch": "nvs", "kind": "multicast", "chunk": 0}
    first = data["transfers"][0]
    assert first["dst"] is None and first["to_switch"] == 0 and "from_switch" not in first
    again = Schedule.from_json(text, "s.json")
    assert again == schedule and again.to_json() == text
    assert again.legs() == schedule.legs()
    inputs, outputs = schedule.legs()
    assert [len(i) for i in inputs[:2]] == [8, 1] and [len(o) for o in outputs[:2]] == [1, 7]
    verify(again, topo)


def test_a_schedule_without_switch_ops_is_written_as_synth_schedule_2_as_before(tmp_path):
    topo = load_topology("switch:n=4")
    from synth import synthesize

    schedule = synthesize(topo, "allreduce", "ring")
    data = schedule.to_dict()
    assert data["format"] == schedule.format == "synth.schedule/2" and "switch_ops" not in data
    assert not any("to_switch" in t or "from_switch" in t for t in data["transfers"])
    # the /2 text as it was written before switch ops existed: header indented, one transfer per line
    transfers = data.pop("transfers")
    expected = (json.dumps(data, indent=1)[:-2] + ',\n "transfers": [\n  '
                + ",\n  ".join(json.dumps(t, separators=(",", ":")) for t in transfers) + "\n ]\n}\n")
    assert schedule.to_json() == expected


@pytest.mark.parametrize("name", ["dgx-h100.broadcast.json", "dgx-a100-boxes-2.reduce.json", "ndv2-boxes-2.reduce.json"])
def test_catalog_files_written_before_switch_ops_read_and_write_back_byte_for_byte(name):
    text = (SCHEDULES / name).read_text()
    schedule = Schedule.from_json(text, name)
    assert schedule.to_json() == text
    if not schedule.switch_ops:
        assert json.loads(text)["format"] == "synth.schedule/2"


def _document() -> dict:
    return json.loads(nvls_allreduce(star(3)).to_json())


def _set(path: str, value):
    def change(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return change


_DELETE = object()


def _two(doc: dict) -> None:
    doc["format"] = "synth.schedule/2"


def _two_without_ops(doc: dict) -> None:
    doc["format"] = "synth.schedule/2"
    del doc["switch_ops"]


def _both_legs(doc: dict) -> None:
    doc["transfers"][0]["from_switch"] = 0


@pytest.mark.parametrize(("change", "field", "words"), [
    (_two, "switch_ops", "synth.schedule/3"),
    (_two_without_ops, "transfers.0.to_switch", "synth.schedule/3"),
    (_both_legs, "transfers.0.from_switch", "not both"),
    (_set("transfers.0.dst", 1), "transfers.0.dst", "expected null"),
    (_set("transfers.3.src", 0), "transfers.3.src", "expected null"),
    (_set("transfers.1.src", None), "transfers.1.src", "null only on an output leg"),
    (_set("transfers.1.to_switch", _DELETE), "transfers.1.dst", "null only on an input leg"),
    (_set("transfers.0.dst_scratch", 0), "transfers.0.dst_scratch", "expected null"),
    (_set("switch_ops.0.op", "avg"), "switch_ops.0.op", "expected one of sum"),
    (_set("switch_ops.0.dtype", "f128"), "switch_ops.0.dtype", "expected one of f64"),
    (_set("switch_ops.0.kind", "broadcast"), "switch_ops.0.kind", "'reduce' or 'multicast'"),
    (_set("switch_ops.0.fanout", 2), "switch_ops.0.fanout", "unknown field"),
    (_set("switch_ops.1.op", "sum"), "switch_ops.1.op", "a multicast combines nothing"),
    (_set("switch_ops.0.id", 5), "switch_ops.0.id", "expected 0"),
    (_set("switch_ops.0.chunk", 3), "switch_ops.0.chunk", "0..2"),
    (_set("switch_ops.0.switch", ""), "switch_ops.0.switch", "switch node id"),
    (_set("switch_ops.0.switch", _DELETE), "switch_ops.0.switch", "missing required field"),
    (_set("switch_ops", {}), "switch_ops", "expected a list"),
    (_set("transfers.0.to_switch", 99), "transfers.0.to_switch", "0..5"),
    (_set("transfers.4.from_switch", -1), "transfers.4.from_switch", "0..5"),
    (_set("transfers.0.to_switch", True), "transfers.0.to_switch", "switch op id"),
])
def test_bad_synth_schedule_3_files_are_refused_naming_the_field(change, field, words):
    document = _document()
    change(document)
    with pytest.raises(InputError) as caught:
        Schedule.from_dict(copy.deepcopy(document), "s.json")
    text = str(caught.value)
    assert text.startswith(f"s.json: {field}: ") and words in text, text


def test_an_op_id_out_of_range_with_no_switch_ops_says_there_are_none():
    document = _document()
    document["switch_ops"] = []
    with pytest.raises(InputError, match=r"transfers.0.to_switch: .*switch_ops is empty"):
        Schedule.from_dict(document, "s.json")


def test_switch_op_ids_are_checked_on_construction():
    with pytest.raises(InputError, match="switch_ops.0.id"):
        Schedule(Collective(Kind.ALLREDUCE, 2, 1), "t", ("a", "b"), "manual", {}, (), switch_ops=(
            SwitchOp(1, SW, "reduce", 0),))


# ------------------------------------------------------------------------------ the verifier: valid
@pytest.mark.parametrize("spec", ["dgx-h100", "gb200-nvl72"])
def test_in_switch_allreduce_reducescatter_and_allgather_verify_on_nvls_systems(spec):
    topo = load_topology(spec)
    n = topo.num_ranks
    for schedule in (nvls_allreduce(topo, chunks=min(n, 8)), switch_reducescatter(topo), switch_allgather(topo)):
        report = verify(schedule, topo)
        assert report.transfers == len(schedule.transfers)
    assert all(op.kind == "reduce" for op in switch_reducescatter(topo).switch_ops)
    assert all(op.kind == "multicast" for op in switch_allgather(topo).switch_ops)
    assert verify(nvls_allreduce(topo, chunks=min(n, 8)), topo).depth == 4


def test_two_box_systems_reduce_in_each_box_switch():
    """dgx-h100:boxes=2: a reduce inside box 0's switch, legs from its gpus only, is accepted as far as the
    switch ops go (the collective over 16 ranks is then incomplete: the postcondition says so)."""
    topo = load_topology("dgx-h100:boxes=2")
    g = topo.gpus
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 16, 1), topo.name, g, "manual")
    k = b.add_switch_op("b0.nvs", "reduce", 0)
    for r in range(8):
        b.add_to_switch(r, k, (g[r], "b0.nvs"))
    b.add_from_switch(k, 0, ("b0.nvs", g[0]))
    refused(b.build(), topo, "postcondition")
    # box 1's gpus cannot reach box 0's switch in one hop
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 16, 1), topo.name, g, "manual")
    k = b.add_switch_op("b0.nvs", "reduce", 0)
    b.add_to_switch(8, k, (g[8], "b0.nvs"))
    refused(b.build(), topo, "transfer 0", "b1.gpu0 -> b0.nvs is not a link")


# ------------------------------------------------------------------------------ the verifier: refusals
def test_a_passive_switch_cannot_reduce():
    topo = load_topology("dgx-h100")
    refused(nvls_allreduce(topo), topo.passive(), "switch op 0", "switch nvs cannot reduce", "capabilities.reduction")
    refused(switch_allgather(topo), topo.passive(), "switch nvs cannot multicast")


def test_an_op_on_a_gpu_is_refused():
    topo = star(4)
    g = topo.gpus
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, 4, 1), topo.name, g, "manual")
    k = b.add_switch_op("gpu0", "reduce", 0)
    b.add_to_switch(1, k, (g[1], SW, g[0]))
    b.add_to_switch(2, k, (g[2], SW, g[0]))
    b.add_from_switch(k, 3, (g[0], SW, g[3]))
    refused(b.build(), topo, "switch op 0", "'gpu0' is not a switch")


def test_unknown_node_for_an_op_is_refused():
    topo = star(3)
    schedule = nvls_allreduce(topo)
    ops = list(schedule.switch_ops)
    ops[0] = dataclasses.replace(ops[0], switch="nowhere")
    # its legs' paths end at nvs, not at the op's switch: the leg is named first
    refused(dataclasses.replace(schedule, switch_ops=tuple(ops)), topo, "transfer 0", "nowhere")


def test_an_operation_or_data_type_the_switch_does_not_serve_is_refused():
    topo = load_topology("dgx-h100")
    refused(one_op(topo, Kind.ALLREDUCE, "reduce", [0, 1], [0], op="prod"), topo, "does not reduce with 'prod'",
            "sum, min, max")
    refused(one_op(topo, Kind.ALLREDUCE, "reduce", [0, 1], [0], dtype="f64"), topo, "does not reduce f64", "bf16")


def test_a_group_over_max_group_is_refused():
    topo = star(8, max_group=4)
    refused(nvls_allreduce(topo), topo, "switch op 0", "8 inputs", "max_group 4")
    # four inputs fit
    ok = one_op(topo, Kind.ALLREDUCE, "reduce", [0, 1, 2, 3], [0])
    refused(ok, topo, "postcondition")


def test_a_reduce_needs_two_inputs_and_a_multicast_exactly_one():
    topo = star(3)
    refused(one_op(topo, Kind.ALLREDUCE, "reduce", [0], [1]), topo, "a reduce needs at least two inputs, it has 1")
    refused(one_op(topo, Kind.ALLREDUCE, "multicast", [0, 1], [2]), topo, "a multicast has exactly one input, it has 2")
    refused(one_op(topo, Kind.ALLREDUCE, "multicast", [], [2]), topo, "exactly one input, it has 0")


def test_an_op_without_outputs_is_refused():
    topo = star(3)
    refused(one_op(topo, Kind.ALLREDUCE, "reduce", [0, 1, 2], []), topo, "switch op 0", "no output leg")
    refused(one_op(topo, Kind.ALLGATHER, "multicast", [0], [], chunks=3), topo, "no output leg")


def test_a_reduce_in_a_collective_that_reduces_nothing_is_refused():
    topo = star(3)
    refused(one_op(topo, Kind.ALLGATHER, "reduce", [0, 1], [2], chunks=3), topo, "a reduce in a allgather")


def test_a_reduce_with_several_outputs_needs_multicast():
    topo = star(3, multicast=False)
    refused(one_op(topo, Kind.ALLREDUCE, "reduce", [0, 1, 2], [0, 1]), topo, "2 outputs", "declares no multicast")
    # one output is fine there (then the postcondition fails: ranks 1 and 2 lack the sum)
    refused(one_op(topo, Kind.ALLREDUCE, "reduce", [0, 1, 2], [0]), topo, "postcondition: rank 1")


def test_an_output_leg_must_list_every_input_among_its_deps():
    topo = star(3)
    schedule = nvls_allreduce(topo)
    out = schedule.legs()[1][0][0]
    assert schedule.transfers[out].deps == (0, 1, 2)
    refused(with_transfer(schedule, out, deps=(0, 2)), topo, f"transfer {out}", "every input leg", "missing [1]")


def test_overlapping_inputs_are_refused():
    topo = star(3)
    refused(one_op(topo, Kind.ALLREDUCE, "reduce", [0, 0, 1], [2]), topo, "switch op 0",
            "count the contribution of rank(s) [0] twice", "inputs overlap")


def test_a_reduce_output_into_a_cell_that_already_holds_the_contribution_is_refused():
    topo = star(3)
    schedule = one_op(topo, Kind.ALLREDUCE, "reduce", [0, 1], [])
    b = ScheduleBuilder(schedule.collective, topo.name, topo.gpus, "manual")
    k = b.add_switch_op(SW, "reduce", 0)
    b.add_to_switch(0, k, (topo.gpus[0], SW))
    b.add_to_switch(1, k, (topo.gpus[1], SW))
    b.add_from_switch(k, 1, (SW, topo.gpus[1]), op="reduce")  # rank 1 adds its own contribution again
    refused(b.build(), topo, "count the contribution of rank(s) [1] twice")


def test_a_leg_whose_path_does_not_end_at_the_switch_is_refused():
    topo = star(3)
    schedule = nvls_allreduce(topo)
    refused(with_transfer(schedule, 0, path=("gpu0", SW, "gpu1")), topo, "transfer 0", "input leg of switch op 0",
            "gpu0 -> nvs, got gpu0 -> nvs -> gpu1")
    out = schedule.legs()[1][0][0]
    refused(with_transfer(schedule, out, path=("gpu1", SW, "gpu0")), topo, f"transfer {out}", "output leg",
            "nvs -> gpu0")
    refused(with_transfer(schedule, 0, path=("gpu0",)), topo, "transfer 0", "got gpu0")


def test_a_leg_of_another_chunk_is_refused():
    topo = star(3)
    schedule = nvls_allreduce(topo)
    refused(with_transfer(schedule, 1, chunk=2), topo, "transfer 1", "carries chunk 2 but switch op 0 works on chunk 0")


def test_an_input_leg_that_reduces_is_refused():
    """An input leg's op has no meaning (the switch op's kind says what is done); "reduce" there was accepted,
    even in an allgather, which reduces nothing."""
    topo = star(3)
    refused(with_transfer(switch_allgather(topo), 0, op="reduce"), topo, "transfer 0", "input leg of switch op 0",
            "has op 'reduce'")
    refused(with_transfer(nvls_allreduce(topo), 1, op="reduce"), topo, "transfer 1", "op 'copy'")


def test_a_leg_with_a_rank_at_the_switch_end_or_a_null_rank_end_is_refused():
    topo = star(3)
    schedule = nvls_allreduce(topo)
    refused(with_transfer(schedule, 0, dst=1), topo, "transfer 0", "must be null")
    refused(with_transfer(schedule, 0, src=None), topo, "transfer 0", "src rank None")
    refused(with_transfer(schedule, 0, to_switch=None), topo, "transfer 0", "dst is null but it is no leg")
    refused(with_transfer(schedule, 0, to_switch=7), topo, "transfer 0", "switch op 7 does not exist")


def test_a_multicast_input_read_before_the_sum_arrived_is_refused():
    topo = star(3)
    schedule = nvls_allreduce(topo)
    inputs = schedule.legs()[0]
    mcast_in = inputs[1][0]
    refused(with_transfer(schedule, mcast_in, deps=()), topo, f"transfer {mcast_in}", "not among its transitive deps")


# ------------------------------------------------------------------------------ the flow model
def _plans(schedule: Schedule, size: int):
    return [make_plan(schedule.chunks, size, Protocol.IDEAL, slices=1),
            make_plan(schedule.chunks, size, Protocol.SIMPLE, slices=4, window=2),
            make_plan(schedule.chunks, size, Protocol.LL)]


@pytest.mark.parametrize("spec", ["dgx-h100", "gb200-nvl72"])
def test_both_flow_engines_agree_on_switch_schedules(spec):
    topo = load_topology(spec)
    for schedule in (nvls_allreduce(topo, chunks=8), switch_reducescatter(topo), switch_allgather(topo)):
        for size in (2**20, 2**28):
            for plan in _plans(schedule, size):
                compiled = simulate_detailed(schedule, topo, size, plan, engine="compiled")
                reference = simulate_detailed(schedule, topo, size, plan, engine="reference")
                assert compiled == reference, (schedule.kind, size, plan.describe())
                assert compiled.time_s > 0


@pytest.mark.parametrize("spec", ["dgx-h100", "gb200-nvl72"])
def test_in_switch_allreduce_never_beats_the_time_bound(spec):
    topo = load_topology(spec)
    bound = time_bound(topo, Kind.ALLREDUCE)
    assert bound.in_switch
    schedule = nvls_allreduce(topo, chunks=8)
    for result in evaluate_sizes(schedule, topo, [1024, 2**20, 2**26, 2**30]):
        assert result.time_s >= bound.time(result.size) * (1 - 1e-9), result
        assert result.congestion_time_s >= float(bound.seconds_per_byte * result.size) * (1 - 1e-12)


def test_lower_reduction_throughput_makes_the_allreduce_slower():
    size = 2**28
    times = []
    for throughput in (None, 400.0, 100.0, 25.0):
        topo = star(8, [450.0] * 8, throughput=throughput)
        times.append(simulate(nvls_allreduce(topo), topo, size))
    assert times[0] <= times[1] < times[2] < times[3], times
    # at 25 GB/s of sums the switch is the bottleneck: the whole buffer's sums take size / 25 GB/s
    assert times[3] >= size / 25e9


def test_lower_link_bandwidth_makes_the_allgather_slower_and_a_multicast_throughput_counts():
    size = 2**26
    fast = star(4, [100.0] * 4)
    slow = star(4, [100.0, 100.0, 10.0, 100.0])
    assert simulate(switch_allgather(slow), slow, size) > simulate(switch_allgather(fast), fast, size)
    limited = Topology.build("star", fast.gpus, [SW], [(g, SW, 100.0) for g in fast.gpus], capabilities={
        SW: SwitchCapabilities(None, Multicast(throughput=5.0))})
    assert simulate(switch_allgather(limited), limited, size) > simulate(switch_allgather(fast), fast, size)


@pytest.mark.parametrize("name", ["reduction", "multicast"])
def test_a_node_named_like_a_switch_resource_shares_no_capacity_with_it(name):
    """The switch's throughput is a resource beside the links; it was keyed like a link, (switch, "reduction"),
    so a link from the switch to a node named "reduction" took the throughput's capacity (and the sums the
    link's): the allreduce below ran twice as long for the gpu's name alone."""
    def topology(last: str) -> Topology:
        gpus = ["g0", "g1", last]
        caps = SwitchCapabilities(Reduction(("sum",), ("f32",), throughput=1.0), Multicast(throughput=1.0))
        return Topology.build("star", gpus, [SW], [(g, SW, 100.0) for g in gpus], capabilities={SW: caps})

    size = 2**26
    plain, named = topology("g2"), topology(name)
    times = []
    for topo in (plain, named):
        schedule = nvls_allreduce(topo)
        verify(schedule, topo)
        plan = make_plan(schedule.chunks, size, Protocol.IDEAL, slices=1)
        compiled = simulate_detailed(schedule, topo, size, plan)
        assert compiled == simulate_detailed(schedule, topo, size, plan, engine="reference")
        times.append(compiled.time_s)
    assert times[1] == times[0]


# ------------------------------------------------------------------------------ random switch schedules
@st.composite
def switch_schedules(draw) -> tuple[Topology, Schedule]:
    """A random one-switch topology (2..8 gpus, random link bandwidths, a random reduction throughput or
    none, multicast on) and an allreduce whose chunks are each done in the switch (reduce to a random
    owner, then a multicast back; or one reduce whose outputs go to every rank) or point to point through it
    (a reduce chain in a random rank order, then copies from its end), the transfers of different chunks
    interleaved at random, and each op's legs in a random order."""
    n = draw(st.integers(2, 8))
    bandwidths = draw(st.lists(st.sampled_from([5.0, 12.5, 25.0, 100.0, 450.0]), min_size=n, max_size=n))
    throughput = draw(st.one_of(st.none(), st.sampled_from([10.0, 50.0, 334.5, 2000.0])))
    topo = star(n, bandwidths, throughput=throughput, name="random-star")
    chunks = draw(st.integers(1, 6))
    g = topo.gpus
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, n, chunks), topo.name, g, "manual")
    plans = []
    for c in range(chunks):
        mode = draw(st.sampled_from(["two ops", "one op", "point to point"]))
        order = draw(st.permutations(range(n)))
        plans.append((c, mode, order, draw(st.integers(0, n - 1))))
    # each chunk is a list of steps run in order; steps of different chunks interleave in a random order
    state: dict[int, dict] = {c: {} for c in range(chunks)}

    def steps(c: int, mode: str, order: list[int], owner: int):
        s = state[c]
        if mode == "one op":
            def reduce_all_in():
                s["k"] = b.add_switch_op(SW, "reduce", c)
                for r in order:
                    b.add_to_switch(r, s["k"], (g[r], SW))

            def reduce_all_out():
                for r in reversed(order):
                    b.add_from_switch(s["k"], r, (SW, g[r]))
            return [reduce_all_in, reduce_all_out]
        if mode == "two ops":
            def reduce_in():
                s["k"] = b.add_switch_op(SW, "reduce", c)
                for r in order:
                    b.add_to_switch(r, s["k"], (g[r], SW))

            def reduce_out():
                s["out"] = b.add_from_switch(s["k"], owner, (SW, g[owner]))

            def multicast():
                m = b.add_switch_op(SW, "multicast", c)
                b.add_to_switch(owner, m, (g[owner], SW), deps=[s["out"]])
                for r in order:
                    if r != owner:
                        b.add_from_switch(m, r, (SW, g[r]))
            return [reduce_in, reduce_out, multicast]

        def chain(i: int):
            def step():
                s["last"] = b.add(order[i - 1], order[i], c, (g[order[i - 1]], SW, g[order[i]]), "reduce",
                                  [s["last"]] if "last" in s else [])
            return step

        def spread():
            end = order[-1]
            for r in order[:-1]:
                b.add(end, r, c, (g[end], SW, g[r]), "copy", [s["last"]])
        return [chain(i) for i in range(1, n)] + [spread]

    queues = [steps(*plan) for plan in plans]
    while any(queues):
        live = [i for i, q in enumerate(queues) if q]
        queues[draw(st.sampled_from(live))].pop(0)()
    return topo, b.build()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=switch_schedules(), size=st.sampled_from([1024, 2**16, 2**20, 2**24, 2**28]))
def test_random_switch_schedules_verify_and_never_beat_the_time_bound(case, size):
    topo, schedule = case
    verify(schedule, topo)
    again = Schedule.from_json(schedule.to_json())
    assert again == schedule
    bound = time_bound(topo, Kind.ALLREDUCE)
    for result in evaluate_sizes(schedule, topo, [size]):
        assert result.time_s >= bound.time(size) * (1 - 1e-9), (result, bound)
    plan = make_plan(schedule.chunks, size, Protocol.SIMPLE, slices=2)
    assert simulate_detailed(schedule, topo, size, plan) == simulate_detailed(schedule, topo, size, plan,
                                                                              engine="reference")


# ------------------------------------------------------------------------------ consumers
@pytest.fixture
def nvls_file(tmp_path, monkeypatch):
    """An NVLS-style allreduce on dgx-h100 written as a synth.schedule/3 file, in an empty working folder."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "nvls.json"
    path.write_text(nvls_allreduce(load_topology("dgx-h100")).to_json())
    return path


@pytest.fixture
def cli(capsys, monkeypatch):
    def run(*args: str):
        return run_cli(list(args), capsys, monkeypatch)
    return run


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(("args", "who"), [
    (["export", "msccl", "nvls.json", "-o", "out.xml"], "MSCCL XML export"),
    (["export", "chakra", "nvls.json", "-o", "traces"], "Chakra export"),
    (["evaluate", "nvls.json", "-m", "astra"], "the astra model"),
])
def test_consumers_without_switch_ops_refuse_a_synth_schedule_3_file_cleanly(cli, nvls_file, args, who):
    before = _listing(nvls_file.parent)
    line = assert_refused(cli(*args), who, "cannot express in-switch operations")
    assert "schedule 'manual' has 16" in line and "switch op 0, a reduce of chunk 0 on switch nvs" in line
    assert _listing(nvls_file.parent) == before  # no partial output


def test_verify_evaluate_explain_and_draw_take_a_synth_schedule_3_file(cli, nvls_file):
    verified = cli("verify", "nvls.json")
    assert verified.code == 0 and "OK" in verified.out, verified.err
    evaluated = cli("evaluate", "nvls.json", "--json")
    assert evaluated.code == 0, evaluated.err
    assert "Traceback" not in evaluated.out + evaluated.err
    explained = cli("explain", "nvls.json")
    assert explained.code == 0, explained.err
    text = " ".join(explained.out.split())
    assert "0->nvs:reduce c0-7" in text and "nvs:multicast->0 c1-7" in text, text
    assert "0->nvs:reduce#0(c0) nvs:reduce#0->0(c0) 0->nvs:multicast#1(c0)" in text, text
    assert "None" not in text
    drawn = cli("draw", "dgx-h100", "--schedule", "nvls.json", "--tree", "3", "-o", "trees.png")
    assert drawn.code == 0 and Path("trees.png").stat().st_size > 0, drawn.err


def test_explain_shows_legs_and_roots_each_allreduce_chunk_at_its_reduce_output():
    from synth.explain import explain

    topo = star(4)
    schedule = nvls_allreduce(topo)
    summary = explain(schedule, topo, size=2**20)
    assert [m.describe() for m in summary.steps[1].moves] == [f"nvs:reduce->{r} c{r}" for r in range(4)]
    assert summary.steps[0].moves[0].to_dict() == {"src": 0, "dst": None, "op": "copy", "chunks": [0, 1, 2, 3],
                                                   "via": [], "switch": "nvs", "switch_kind": "reduce"}
    assert [tree.root for tree in summary.trees] == [0, 1, 2, 3]
    assert summary.trees[1].edges[4] == ("nvs:reduce", 1, "copy")
    json.dumps(summary.to_dict())
    # a step mixing legs and point-to-point transfers from one rank (their ends None and int) sorts
    mixed = ScheduleBuilder(Collective(Kind.ALLREDUCE, 2, 2), "t", topo.gpus[:2], "manual")
    two = star(2)
    k = mixed.add_switch_op(SW, "reduce", 0)
    mixed.add_to_switch(0, k, ("gpu0", SW))
    mixed.add_to_switch(1, k, ("gpu1", SW))
    mixed.add(0, 1, 1, ("gpu0", SW, "gpu1"), "reduce")
    mixed.add_from_switch(k, 0, (SW, "gpu0"), op="copy")
    mixed.add_from_switch(k, 1, (SW, "gpu1"), op="copy")
    built = mixed.build()
    with pytest.raises(VerificationError):  # chunk 1 never reaches rank 0: it is the shape that matters here
        verify(built, two)
    moves = [m.describe() for m in explain(built, two, size=2**20).steps[0].moves]
    assert moves == ["0->nvs:reduce c0", "0=>1 c1 via nvs", "1->nvs:reduce c0"]


def test_library_exporters_refuse_switch_ops_before_writing_anything(tmp_path):
    from synth.catalog import _msccl_xml
    from synth.errors import NotApplicable
    from synth.export.chakra import export_chakra
    from synth.export.msccl import export_msccl, lower_msccl
    from synth.trace import schedule_to_et

    topo = load_topology("dgx-h100")
    schedule = nvls_allreduce(topo)
    for call in (lambda: lower_msccl(schedule), lambda: export_msccl(schedule, tmp_path / "x.xml", topo),
                 lambda: schedule_to_et(schedule, 2**20),
                 lambda: export_chakra(schedule, topo, [2**20], tmp_path / "traces"),
                 lambda: evaluate_sizes(schedule, topo, [2**20], model="astra")):
        with pytest.raises(NotApplicable, match="cannot express in-switch operations"):
            call()
    assert _listing(tmp_path) == []
    text, why = _msccl_xml(schedule, topo)
    assert text is None and why.startswith("no MSCCL XML: MSCCL XML export cannot express")


def test_compare_under_the_astra_model_skips_a_schedule_with_switch_ops():
    from synth.compare import run_all

    topo = load_topology("dgx-h100")
    rows, skipped, _ = run_all(topo, [Kind.ALLREDUCE], [2**20], ["nvls", "ring"], model="astra")
    assert {row.algorithm for row in rows} >= {"ring"} and "nvls" not in {row.algorithm for row in rows}
    assert any(s.algorithm == "nvls" and "the astra model" in s.reason for s in skipped), skipped
    flow_rows, _, _ = run_all(topo, [Kind.ALLREDUCE], [2**20], ["nvls"])
    assert "nvls" in {row.algorithm for row in flow_rows}


def sharp_allreduce(topo: Topology, boxes: int) -> Schedule:
    """A hierarchical allreduce on a SHARP superpod: chunk c is reduced in each box's NVSwitch into the box's
    gpu on rail c, reduced across the boxes in rail c's leaf switch (legs gpu -> nic -> leaf) and multicast
    back to those gpus by the same op, then multicast in each box."""
    g = topo.gpus
    per_box = topo.num_ranks // boxes
    b = ScheduleBuilder(Collective(Kind.ALLREDUCE, topo.num_ranks, per_box), topo.name, g, "manual")
    for c in range(per_box):
        rail = [box * per_box + c for box in range(boxes)]
        gathered = []
        for box in range(boxes):
            nvs = f"b{box}.nvs"
            k = b.add_switch_op(nvs, "reduce", c)
            for r in range(box * per_box, (box + 1) * per_box):
                b.add_to_switch(r, k, (g[r], nvs))
            gathered.append(b.add_from_switch(k, rail[box], (nvs, g[rail[box]])))
        leaf = f"su0.leaf{c}"
        k = b.add_switch_op(leaf, "reduce", c)
        for box, r in enumerate(rail):
            b.add_to_switch(r, k, (g[r], f"b{box}.nic{c}", leaf), deps=[gathered[box]])
        back = [b.add_from_switch(k, r, (leaf, f"b{box}.nic{c}", g[r])) for box, r in enumerate(rail)]
        for box, r in enumerate(rail):
            nvs = f"b{box}.nvs"
            m = b.add_switch_op(nvs, "multicast", c)
            b.add_to_switch(r, m, (g[r], nvs), deps=[back[box]])
            for other in range(box * per_box, (box + 1) * per_box):
                if other != r:
                    b.add_from_switch(m, other, (nvs, g[other]))
    return b.build()


def test_a_sharp_superpod_allreduce_in_box_and_leaf_switches_verifies_and_respects_the_bound():
    topo = load_topology("dgx-superpod:sus=1,nodes_per_su=4,sharp=true")
    schedule = sharp_allreduce(topo, boxes=4)
    assert {op.switch for op in schedule.switch_ops} >= {"b0.nvs", "su0.leaf3"}
    verify(schedule, topo)
    bound = time_bound(topo, Kind.ALLREDUCE)
    for size in (2**20, 2**28):
        for plan in _plans(schedule, size)[:2]:
            compiled = simulate_detailed(schedule, topo, size, plan)
            assert compiled == simulate_detailed(schedule, topo, size, plan, engine="reference")
            assert compiled.time_s >= bound.time(size) * (1 - 1e-9)
    # the leg's path crosses the nic (a switch): a leg that skips it is no link
    leg = next(t.id for t in schedule.transfers if t.to_switch is not None and len(t.path) == 3)
    refused(with_transfer(schedule, leg, path=(schedule.transfers[leg].path[0], schedule.transfers[leg].path[2])),
            topo, f"transfer {leg}", "is not a link")
    # without SHARP the leaf cannot reduce
    plain = load_topology("dgx-superpod:sus=1,nodes_per_su=4")
    refused(dataclasses.replace(schedule, topology=plain.name), plain, "switch su0.leaf0 cannot reduce")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=switch_schedules(), data=st.data())
def test_random_switch_schedules_broken_are_refused(case, data):
    topo, schedule = case
    if not schedule.switch_ops:
        return
    with pytest.raises(VerificationError, match="cannot reduce|cannot multicast"):
        verify(schedule, topo.passive())
    inputs, outputs = schedule.legs()
    k = data.draw(st.sampled_from(range(len(schedule.switch_ops))))
    out = data.draw(st.sampled_from(outputs[k]))
    dropped = data.draw(st.sampled_from(inputs[k]))
    deps = tuple(d for d in schedule.transfers[out].deps if d != dropped)
    refused(with_transfer(schedule, out, deps=deps), topo, f"transfer {out}", "every input leg", f"missing [{dropped}]")
    leg = data.draw(st.sampled_from(inputs[k] + outputs[k]))
    other = (schedule.switch_ops[k].chunk + 1) % (schedule.chunks + 1)
    if other < schedule.chunks:
        refused(with_transfer(schedule, leg, chunk=other), topo, f"transfer {leg}", f"carries chunk {other}")
