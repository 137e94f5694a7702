"""milp: the time-indexed synthesizer (greedy start + CP-SAT), its sketches, limits and guarantees."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import topologies

from synth import Kind, load_topology, synthesize, verify
from synth.algorithms.milp import Progress, construct, prepare
from synth.algorithms.milp_sketch import Sketch, load_sketch
from synth.choose.milp import choose
from synth.errors import InfeasibleError, InputError, LimitError
from synth.evaluate import evaluate

FAST = {"time_limit_s": 0.5, "progress": None}
NDV2_RELAY_SKETCH = {"name": "ndv2-pairs", "relays": list(range(8)), "pairing": "same-index",
                     "intra_box": "direct", "symmetry": "rotate-boxes"}


@pytest.fixture(scope="module")
def dgx1():
    return load_topology("dgx1")


@pytest.fixture(scope="module")
def ndv2():
    return load_topology("ndv2:boxes=2")


# ------------------------------------------------------------------------------------- quality
@pytest.mark.parametrize("spec", ["dgx1", "ndv2:boxes=2"])
@pytest.mark.parametrize("size", [1024, 65536])
def test_allgather_beats_ring_at_small_sizes(spec, size):
    topology = load_topology(spec)
    schedule = choose(topology, Kind.ALLGATHER, size=size, **FAST)
    verify(schedule, topology)
    ring = synthesize(topology, Kind.ALLGATHER, "ring")
    ours, theirs = evaluate(schedule, topology, size).time_s, evaluate(ring, topology, size).time_s
    print(f"{spec} allgather {size} B: milp {ours * 1e6:.2f} us, ring {theirs * 1e6:.2f} us, "
          f"{theirs / ours:.2f}x faster")
    assert ours < theirs * 0.9


@pytest.mark.parametrize("kind", [Kind.REDUCESCATTER, Kind.ALLREDUCE])
def test_reducing_collectives_beat_ring_at_1kb(dgx1, kind):
    schedule = choose(dgx1, kind, size=1024, **FAST)
    verify(schedule, dgx1)
    ring = synthesize(dgx1, kind, "ring")
    assert evaluate(schedule, dgx1, 1024).time_s < evaluate(ring, dgx1, 1024).time_s


def test_small_allgather_is_proven_optimal_in_epochs(dgx1):
    schedule = choose(dgx1, Kind.ALLGATHER, size=1024, **FAST)
    params = schedule.params
    # DGX-1's diameter is two NVLink hops: two epochs, and nothing can do better
    assert params["epochs"] == params["lower_bound_epochs"] == 2
    assert params["gap"] == 0.0
    assert "optimal" in params["status"]


# --------------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("kind", [Kind.ALLGATHER, Kind.ALLTOALL, Kind.REDUCESCATTER, Kind.ALLREDUCE])
def test_every_collective_verifies(dgx1, kind):
    schedule = synthesize(dgx1, kind, "milp", size=65536, chunks=16, **FAST)
    verify(schedule, dgx1)
    assert schedule.chunks == 16 and schedule.params["size"] == 65536
    assert 0.0 <= schedule.params["gap"] <= 1.0


def test_reduce_scatter_chains_reductions_into_one_cell(dgx1):
    schedule = choose(dgx1, Kind.REDUCESCATTER, size=1024, **FAST)
    verify(schedule, dgx1)
    writers: dict[tuple[int, int], list[int]] = {}
    for t in schedule.transfers:
        assert t.op == "reduce"
        writers.setdefault((t.dst, t.chunk), []).append(t.id)
    assert any(len(ids) > 1 for ids in writers.values())  # fan-in exists and was chained (verify passed)


@pytest.mark.parametrize(("spec", "kind"), [("ndv2:boxes=2", Kind.ALLREDUCE),   # greedy start, link deps
                                          ("dgx1", Kind.REDUCESCATTER)])     # CP-SAT, both stages
def test_same_input_and_seed_give_the_same_bytes(spec, kind):
    topology = load_topology(spec)
    first = choose(topology, kind, size=4096, seed=7, **FAST)
    second = choose(topology, kind, size=4096, seed=7, **FAST)
    assert first.to_json() == second.to_json()
    assert first.params["seed"] == 7


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(max_gpus=5, max_switches=2), st.sampled_from(list(Kind)[:4]), st.sampled_from([512, 1 << 20]))
def test_random_topologies_verify(topology, kind, size):
    schedule = choose(topology, kind, size=size, time_limit_s=0.2, progress=None)
    verify(schedule, topology)
    assert schedule.params["epochs"] >= schedule.params["lower_bound_epochs"] >= 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["dgx1", "switch:n=6", "ring:n=6", "dgx-a100:boxes=2"]), st.data())
def test_random_process_groups_verify_and_never_beat_the_group_bound(spec, data):
    """milp on a random group of a shipped fabric: its schedule verifies on the group and on the fabric,
    uses the fabric's links only where the group may, and no time beats the group's bound."""
    from hypothesis import assume

    from synth.bounds import time_bound
    from synth.errors import NotApplicable
    from synth.groups import group_view

    fabric = load_topology(spec)
    members = data.draw(st.lists(st.sampled_from(fabric.gpus), min_size=2, max_size=4, unique=True))
    kind = data.draw(st.sampled_from([Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.ALLTOALL]))
    size = data.draw(st.sampled_from([1024, 1 << 20]))
    try:
        view = group_view(fabric, members)
    except NotApplicable:
        assume(False)
        return
    schedule = choose(view, kind, size=size, time_limit_s=0.2, progress=None)
    assert tuple(schedule.ranks) == tuple(members)
    verify(schedule, view)
    verify(schedule, fabric)
    assert evaluate(schedule, view, size).time_s >= time_bound(view, kind).time(size) * (1 - 1e-9)


# --------------------------------------------------------------------------- limits and timing
def test_time_out_returns_the_best_found_with_its_gap(dgx1):
    # alltoall at 1 MB on DGX-1 is not solved by the greedy start; a tiny budget stops CP-SAT early
    schedule = choose(dgx1, Kind.ALLTOALL, size=1 << 20, time_limit_s=0.05, cpsat="always", progress=None)
    verify(schedule, dgx1)
    params = schedule.params
    assert params["epochs"] > params["lower_bound_epochs"]
    assert params["gap"] == pytest.approx((params["epochs"] - params["lower_bound_epochs"]) / params["epochs"])
    assert "optimal" not in params["status"]


def test_too_large_is_refused_up_front_with_the_estimate(dgx1, monkeypatch):
    # alltoall of 1 MiB on DGX-1: the greedy plan (4 epochs) does not meet the bound (2), so a model is needed
    monkeypatch.setenv("SYNTH_MAX_MILP_VARIABLES", "1000")
    with pytest.raises(LimitError, match=r"milp alltoall on dgx1 \(time-indexed model.* 3,452 variables, over the "
                                         r"limit of 1,000 \(SYNTH_MAX_MILP_VARIABLES\)"):
        choose(dgx1, Kind.ALLTOALL, size=1 << 20, routing="free", **FAST)
    with pytest.raises(LimitError, match=r"milp alltoall on dgx1 \(split model.* variables, over the limit of 1,000"):
        choose(dgx1, Kind.ALLTOALL, size=1 << 20, routing="greedy", **FAST)
    # the greedy alone builds no model, so nothing is refused
    assert choose(dgx1, Kind.ALLTOALL, size=1 << 20, cpsat="never", **FAST).params["result"] == "greedy"


def test_progress_reaches_a_callback(dgx1):
    events: list[Progress] = []
    choose(dgx1, Kind.REDUCESCATTER, size=1024, time_limit_s=1.0, progress=events.append)
    phases = [event.phase for event in events]
    assert phases[0] == "greedy" and phases[-1] == "done"
    assert events[-1].best_epochs is not None


# ----------------------------------------------------------------------------------- sketches
def test_sketch_with_rotational_symmetry(ndv2):
    schedule = choose(ndv2, Kind.ALLGATHER, size=65536, sketch=NDV2_RELAY_SKETCH, **FAST)
    verify(schedule, ndv2)
    assert schedule.params["sketch"] == "ndv2-pairs"
    moves = {(t.src, t.dst, t.chunk) for t in schedule.transfers}
    rotate = {r: (r + 8) % 16 for r in range(16)}
    # box 1 does exactly what box 0 does, one box on (allgather chunk c of rank r is chunk r)
    assert {(rotate[s], rotate[d], rotate[c]) for s, d, c in moves} == moves
    for t in schedule.transfers:
        if t.src // 8 != t.dst // 8:
            assert t.src % 8 == t.dst % 8  # same-index pairing across boxes
        else:
            assert len(t.path) == 2  # intra_box: direct links only


def test_sketch_file_and_fixed_chunks(ndv2, tmp_path):
    path = tmp_path / "sketch.json"
    path.write_text(json.dumps({**NDV2_RELAY_SKETCH, "chunks": 32}))
    schedule = choose(ndv2, Kind.ALLGATHER, size=1 << 20, sketch=str(path), **FAST)
    verify(schedule, ndv2)
    assert schedule.chunks == 32


def test_infeasible_sketch_is_a_clear_error(ndv2):
    with pytest.raises(InfeasibleError, match=r"unreachable from rank .* allow more relays"):
        choose(ndv2, Kind.ALLGATHER, size=1024, sketch={"relays": []}, **FAST)
    with pytest.raises(InfeasibleError, match="raise 'epochs'"):
        choose(ndv2, Kind.ALLGATHER, size=1024, sketch={"epochs": 2}, **FAST)


@pytest.mark.parametrize(("document", "field"), [
    ({"relays": [0], "pairs": "any"}, "pairs"),
    ({"pairing": "some"}, "pairing"),
    ({"relays": [0, 0]}, "relays"),
    ({"chunks": 0}, "chunks"),
    ({"format": "synth.sketch/2"}, "format"),
    ({"symmetry": True}, "symmetry"),
])
def test_malformed_sketch_names_the_field(document, field):
    with pytest.raises(InputError) as info:
        Sketch.from_dict(document, "my.json")
    assert info.value.field == field and str(info.value).startswith("my.json: ")


def test_misspelt_sketch_key_is_named_with_the_known_ones():
    with pytest.raises(InputError) as info:
        Sketch.from_dict({"chunkz": 2, "epochs": "many"}, "my.json")
    assert info.value.field == "chunkz" and "unknown field (expected format, name, chunks" in str(info.value)


def test_sketch_that_does_not_fit_the_topology(dgx1, ndv2):
    with pytest.raises(InputError, match="records no boxes"):
        choose(dgx1, Kind.ALLGATHER, sketch={"relays": [0]}, **FAST)
    with pytest.raises(InputError, match="out of range"):
        choose(ndv2, Kind.ALLGATHER, sketch={"relays": [9]}, **FAST)
    with pytest.raises(InputError, match="fixes chunks=32"):
        choose(ndv2, Kind.ALLGATHER, chunks=16, sketch={"chunks": 32}, **FAST)
    with pytest.raises(InputError, match="no such sketch file"):
        load_sketch("/nonexistent/sketch.json")


def test_bad_options(dgx1):
    with pytest.raises(InputError, match="size"):
        choose(dgx1, Kind.ALLGATHER, size="lots", **FAST)
    with pytest.raises(InputError, match="order_deps"):
        choose(dgx1, Kind.ALLGATHER, order_deps="sometimes", **FAST)
    with pytest.raises(InputError, match="time_limit_s"):
        choose(dgx1, Kind.ALLGATHER, time_limit_s=-1, progress=None)


def test_cli_generate_with_a_sketch(tmp_path, capsys, monkeypatch):
    from helpers import run_cli

    sketch = tmp_path / "sketch.yaml"
    sketch.write_text("relays: [0, 4]\npairing: same-index\nsymmetry: rotate-boxes\n")
    output = tmp_path / "ag.json"
    outcome = run_cli(["generate", "ndv2:boxes=2", "-c", "allgather", "-a", "milp", "-o", str(output),
                       "-O", f"sketch={sketch}", "-O", "size=64KiB", "-O", "time_limit_s=1"], capsys, monkeypatch)
    assert outcome.code == 0, outcome.err
    written = json.loads(output.read_text())
    assert written["algorithm"] == "milp" and written["params"]["sketch"] == "custom"
    outcome = run_cli(["generate", "ndv2:boxes=2", "-c", "allgather", "-a", "milp", "-o", str(output),
                       "-O", "sketch={}".format(tmp_path / "missing.json")], capsys, monkeypatch)
    assert outcome.code == 2 and "no such sketch file" in outcome.err


# ------------------------------------------------------------------------ what produced the result
TACCL_SKETCH = {"name": "ndv2-taccl", "relays": list(range(8)), "pairing": "same-index", "intra_box": "direct",
                "symmetry": "rotate-boxes"}


def test_ndv2_1gb_allgather_is_proven_optimal_in_the_epoch_model(ndv2):
    """2 x NDv2, 1 GB, 64 chunks, TACCL-style sketch: 32 chunks must cross each 12.5 GB/s NIC, one per
    1.25 ms epoch, so the last first crossing starts at epoch 31 and lands at 32; the copies of that last
    chunk landing by then reach at most 1 + 4 gpus within one more NVLink epoch (a DGX-1 gpu has 4 NVLink
    peers) and 1 + 1 more, 6 < 8, so 34 epochs are needed: the greedy plan's 34 is optimal."""
    schedule = choose(ndv2, Kind.ALLGATHER, size=10**9, chunks=64, sketch=TACCL_SKETCH, cpsat="never", progress=None)
    verify(schedule, ndv2)
    params = schedule.params
    assert (params["result"], params["proved_by"], params["epochs"], params["lower_bound_epochs"]) == \
        ("optimal", "bound", 34, 34)
    assert params["summary"].startswith("proven optimal by the lower bound: 34 epochs")
    assert params["greedy_epochs"] == 34 and params["model"] == "none"


def test_cpsat_proves_and_improves_dgx1_alltoall(dgx1):
    """Alltoall of 1 MiB on DGX-1: the greedy plan takes 4 epochs; CP-SAT on the time-indexed model finds
    3 and proves that no schedule takes fewer; the result simulates faster than the greedy plan."""
    schedule = choose(dgx1, Kind.ALLTOALL, size=1 << 20, routing="free", cpsat="always", time_limit_s=0.5,
                    progress=None)
    verify(schedule, dgx1)
    params = schedule.params
    if params.get("stopped_by") == "wall-clock":
        pytest.skip("the machine is too loaded for CP-SAT to finish its budget before the wall-clock cap")
    assert (params["result"], params["proved_by"], params["epochs"], params["greedy_epochs"]) == \
        ("optimal", "cp-sat", 3, 4)
    assert params["simulated_us"] < params["greedy_us"]
    assert params["model"] == "time-indexed model" and params["variables"] > 0
    measured = evaluate(schedule, dgx1, 1 << 20).time_s * 1e6
    greedy = choose(dgx1, Kind.ALLTOALL, size=1 << 20, cpsat="never", progress=None)
    assert measured < evaluate(greedy, dgx1, 1 << 20).time_s * 1e6  # the evaluator agrees, if by less
    assert params["evaluated_us"]["result"] == pytest.approx(measured) and "synth's evaluator" in params["summary"]


def test_greedy_results_say_why(dgx1):
    never = choose(dgx1, Kind.ALLTOALL, size=1 << 20, cpsat="never", progress=None).params
    assert never["result"] == "greedy" and "cpsat=never" in never["why"]
    assert never["summary"].startswith("greedy plan: 4 epochs")
    tiny = choose(dgx1, Kind.ALLTOALL, size=1 << 20, time_limit_s=0.1, progress=None).params
    assert tiny["result"] == "greedy" and "3,452-variable time-indexed model is too large for CP-SAT in 0.1 s" in tiny["why"]
    assert "3,452 variables" in tiny["summary"]


def test_split_model_keeps_the_greedy_routes(dgx1):
    schedule = choose(dgx1, Kind.ALLTOALL, size=1 << 20, routing="greedy", cpsat="always", time_limit_s=1.0,
                    progress=None)
    verify(schedule, dgx1)
    params = schedule.params
    assert params["model"].startswith("split model") and params["result"] in ("greedy", "improved", "optimal")
    full = choose(dgx1, Kind.ALLTOALL, size=1 << 20, cpsat="never", routing="free", progress=None).params
    assert params["variables"] < full["variables"]  # the split model is smaller than the time-indexed one


def test_a_bigger_budget_never_returns_a_slower_schedule(dgx1):
    times = []
    for budget in (0.05, 0.3):
        params = choose(dgx1, Kind.ALLTOALL, size=1 << 20, routing="free", cpsat="always", time_limit_s=budget,
                      progress=None).params
        if params.get("stopped_by"):
            pytest.skip("the machine is too loaded for CP-SAT to finish its budget before the wall-clock cap")
        times.append(params["simulated_us"])
    assert times[1] <= times[0]


def test_allreduce_combines_its_phases(dgx1):
    params = choose(dgx1, Kind.ALLREDUCE, size=1024, progress=None, time_limit_s=0.5).params
    phases = params["phases"]
    assert set(phases) == {"reducescatter", "allgather"}
    results = {phase["result"] for phase in phases.values()}
    expected = "optimal" if results == {"optimal"} else "improved" if "improved" in results else "greedy"
    assert params["result"] == expected
    assert params["summary"].startswith(f"{expected}: reducescatter ")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(min_gpus=4, max_gpus=4, max_switches=1), st.sampled_from([512, 1 << 16, 1 << 22]))
@pytest.mark.slow
def test_lower_bound_never_exceeds_a_schedule(topology, size):
    """The combinatorial bound (with the spread of the last item across a box cut) is a true lower bound:
    on small random systems split into boxes it is never above the greedy plan, nor above an optimum
    CP-SAT proves on the time-indexed model."""
    params = choose(topology, Kind.ALLGATHER, size=size, sketch={"box_size": 2}, routing="free", cpsat="always",
                  time_limit_s=0.5, progress=None).params
    assert params["combinatorial_bound_epochs"] <= params["greedy_epochs"]
    assert params["combinatorial_bound_epochs"] <= params["epochs"]
    if params["result"] == "optimal" and params["proved_by"] == "cp-sat":
        assert params["combinatorial_bound_epochs"] <= params["lower_bound_epochs"] == params["epochs"]


def test_default_time_limit_follows_synth_solver_seconds(monkeypatch):
    from synth.algorithms.milp import DEFAULT_TIME_LIMIT_S, default_time_limit

    assert default_time_limit() == DEFAULT_TIME_LIMIT_S == 10.0
    monkeypatch.setenv("SYNTH_SOLVER_SECONDS", "3")
    assert default_time_limit() == 3.0
    schedule = choose(load_topology("ring:n=4"), Kind.ALLGATHER, size=4096, progress=None)
    assert schedule.params["time_limit_s"] == 3.0
    monkeypatch.setenv("SYNTH_SOLVER_SECONDS", "soon")
    with pytest.raises(InputError, match="SYNTH_SOLVER_SECONDS"):
        choose(load_topology("ring:n=4"), Kind.ALLGATHER, size=4096, progress=None)


def test_cli_generate_says_how_the_schedule_was_found(tmp_path, capsys, monkeypatch):
    from helpers import run_cli

    output = tmp_path / "a2a.json"
    outcome = run_cli(["generate", "dgx1", "-c", "alltoall", "-a", "milp", "-o", str(output), "-O", "size=1MiB",
                       "-O", "cpsat=never"], capsys, monkeypatch)
    assert outcome.code == 0, outcome.err
    assert "milp: greedy plan: 4 epochs" in outcome.out and "cpsat=never" in outcome.out
    outcome = run_cli(["generate", "dgx1", "-c", "allgather", "-a", "milp", "-o", str(output), "-O", "size=1KiB"],
                      capsys, monkeypatch)
    assert outcome.code == 0 and "milp: proven optimal by the lower bound: 2 epochs" in outcome.out


# -------------------------------------------------------------------- construction and choice
@pytest.mark.parametrize("kind", [Kind.ALLGATHER, Kind.ALLTOALL, Kind.REDUCESCATTER, Kind.ALLREDUCE])
def test_rule_construction_simulates_nothing_and_is_verified(dgx1, kind, monkeypatch):
    import synth.flow

    def refuse(*args, **kwargs):
        raise AssertionError("the algorithm module simulated")

    monkeypatch.setattr(synth.flow, "simulate", refuse)
    monkeypatch.setattr(synth.flow, "simulate_detailed", refuse)
    schedule = construct(prepare(dgx1, kind, size=1 << 20, **FAST))
    monkeypatch.undo()
    verify(schedule, dgx1)
    params = schedule.params
    assert "epoch_choice" not in params and "simulated_us" not in params
    assert params["order_deps"] == "link"
    # the rule's epoch is the finest candidate whose greedy plan fits max_epochs: the finest of all here
    setup = next(prepare(dgx1, kind, size=1 << 20, **FAST).setups())
    assert params["epoch_us"] == setup.epoch_lengths()[0]
    assert construct(prepare(dgx1, kind, size=1 << 20, **FAST)).transfers == schedule.transfers


@pytest.mark.parametrize("spec, kind, size", [("ndv2:boxes=2", Kind.ALLGATHER, 1024), ("dgx1", Kind.ALLTOALL, 1 << 20),
                                              ("dgx1", Kind.ALLREDUCE, 1 << 20)])
def test_choice_takes_the_fastest_epoch_it_simulated(spec, kind, size):
    topology = load_topology(spec)
    params = choose(topology, kind, size=size, cpsat="never", progress=None).params
    phases = params.get("phases", {next(iter(params["epoch_choice"])): params})
    for name, tried in params["epoch_choice"].items():
        setup_epochs = {f"{epoch:.6g}" for epoch in next(
            s for s in prepare(topology, kind, size=size).setups() if s.name == name).epoch_lengths()}
        assert set(tried) <= setup_epochs and len(tried) >= 2
        chosen = f"{phases[name]['epoch_us']:.6g}"
        assert tried[chosen] == min(t for t in tried.values() if t is not None)


def test_milp_through_the_selection_layer_is_the_choice(dgx1):
    via_layer = synthesize(dgx1, Kind.ALLTOALL, "milp", size=1 << 20, cpsat="never", progress=None)
    direct = choose(dgx1, Kind.ALLTOALL, size=1 << 20, cpsat="never", progress=None)
    assert via_layer.transfers == direct.transfers and via_layer.params == direct.params
    by_default = synthesize(dgx1, Kind.ALLTOALL, "milp", cpsat="never", progress=None)  # 1 MiB, milp's default
    assert by_default.transfers == direct.transfers
