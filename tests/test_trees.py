"""The trees form (synth.trees): forest builds it, its expansion is forest's schedule, its own verifier and
congestion agree with the exact ones on the expansion, its file round-trips, bad files are refused, and
the CLI writes and reads it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from synth.algorithms.forest import forest, forest_trees
from synth.collectives import Kind
from synth.errors import InfeasibleError, InputError, LimitError, NotApplicable, VerificationError
from synth.evaluate import congestion
from synth.flow import simulate
from synth.library import load_topology
from synth.schedule import Schedule
from synth.topology import Topology
from synth.trace import encode_rank, schedule_to_et, stream_rank_traces
from synth.trees import Tree, TreePhase, TreeSchedule, read_schedule
from synth.verify import verify
from synth.verify_trees import verify_trees
from tests.helpers import assert_refused, run_cli
from tests.strategies import forest_topologies

KINDS = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.BROADCAST, Kind.REDUCE)


def check_form(form: TreeSchedule, topo: Topology) -> Schedule:
    """The trees form's own judges agree with the exact ones on its expansion; returns the expansion."""
    expanded = form.expand()
    assert len(expanded.transfers) == form.num_transfers()
    assert list(form.iter_transfers()) == list(expanded.transfers)
    exact = verify(expanded, topo)
    report = verify_trees(form, topo)
    assert report.transfers == exact.transfers
    assert report.max_chunks_on_a_link == exact.max_chunks_on_a_link
    assert congestion(form, topo) == congestion(expanded, topo)
    size = 64 * form.chunks * 1024
    assert simulate(form, topo, size) == simulate(expanded, topo, size)  # the flow model streams the trees form
    check_streamed_traces(form, expanded, size)
    return expanded


def check_streamed_traces(form: TreeSchedule, expanded: Schedule, size: int, slices: int = 1,
                          window: int | None = None) -> None:
    """The Chakra traces streamed from the trees, a few ranks per pass, are the expansion's node for node."""
    program = schedule_to_et(expanded, size, comp_duration_us=3, slices=slices, window=window)
    metadata, ranks = stream_rank_traces(form, size, comp_duration_us=3, slices=slices, window=window,
                                         per_pass=max(1, form.num_transfers() // 3))
    assert metadata == program.metadata
    streamed = list(ranks)
    assert [rank for rank, _ in streamed] == list(range(len(form.ranks)))
    for rank, nodes in streamed:
        assert nodes == program.nodes[rank]


@pytest.mark.parametrize("spec", ["switch:n=4", "dgx1", "dgx-a100:boxes=2", "ndv2:boxes=2", "torus:dims=3x3"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_expansion_is_forest_and_the_judges_agree(spec, kind):
    topo = load_topology(spec)
    form = forest_trees(topo, kind)
    expanded = check_form(form, topo)
    assert expanded.transfers == forest(topo, kind).transfers
    assert expanded.params == forest(topo, kind).params
    if kind != Kind.ALLREDUCE:  # one phase: the congestion time is the plan's exact time per byte
        assert str(congestion(form, topo).seconds_per_byte) == form.params["time_per_byte"]


def test_options_reach_the_trees_form():
    topo = load_topology("dgx1")
    for options in ({"pipelined": True}, {"max_trees_per_root": 2, "chunks": 32}, {"root": 3, "chunks": 12}):
        kind = Kind.ALLREDUCE if "root" not in options else Kind.BROADCAST
        form = forest_trees(topo, kind, **options)
        assert check_form(form, topo).transfers == forest(topo, kind, **options).transfers
    pipelined = forest_trees(topo, Kind.ALLREDUCE, pipelined=True)
    reduce_phase, broadcast_phase = pipelined.phases
    assert [t.root for t in reduce_phase.trees] == [t.root for t in broadcast_phase.trees]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forest_topologies(max_gpus=6, max_switches=3), st.sampled_from(KINDS))
@pytest.mark.slow
def test_random_topologies(topo, kind):
    try:
        form = forest_trees(topo, kind)
    except (LimitError, InfeasibleError, NotApplicable):
        assume(False)
    check_form(form, topo)
    again = TreeSchedule.from_json(form.to_json())
    assert again.to_json() == form.to_json()
    assert again.expand().transfers == form.expand().transfers


# ------------------------------------------------------------------------------------ corruptions
def _replace_tree(form: TreeSchedule, phase: int, index: int, tree: Tree | None) -> TreeSchedule:
    phases = list(form.phases)
    trees = list(phases[phase].trees)
    if tree is None:
        del trees[index]
    else:
        trees[index] = tree
    phases[phase] = TreePhase(phases[phase].op, tuple(trees))
    return dataclasses.replace(form, phases=tuple(phases))


def _corruptions(form: TreeSchedule) -> dict[str, TreeSchedule]:
    """Wrong variants of a correct form, one per rule the verifier enforces."""
    last = len(form.phases) - 1
    tree = form.phases[last].trees[0]
    n = len(form.ranks)
    arcs = tree.arcs
    result: dict[str, TreeSchedule] = {}
    child = tree.child.copy()
    child[-1] = child[0]  # one rank reached twice, one never
    result["a rank twice"] = _replace_tree(form, last, 0, dataclasses.replace(tree, child=child))
    if arcs > 1:
        order = np.arange(arcs)[::-1]  # leaves first: parents send before they hold the chunk
        reordered = dataclasses.replace(tree, parent=tree.parent[order], child=tree.child[order], path=tree.path[order])
        if (reordered.parent != tree.root).any():
            result["growth order"] = _replace_tree(form, last, 0, reordered)
    result["no tree"] = _replace_tree(form, last, 0, None)
    result["root is a child"] = _replace_tree(form, last, 0, dataclasses.replace(tree, root=int(tree.child[0])))
    other = next((j for j, t in enumerate(form.phases[last].trees) if t.root != tree.root), None)
    if other is not None:  # two trees of different roots trade their chunks
        swapped = form.phases[last].trees[other]
        wrong = _replace_tree(form, last, 0, dataclasses.replace(tree, first_chunk=swapped.first_chunk,
                                                                  chunks=swapped.chunks))
        result["wrong root"] = _replace_tree(wrong, last, other, dataclasses.replace(
            swapped, first_chunk=tree.first_chunk, chunks=tree.chunks))
    wrong_path = tree.path.copy()
    others = [p for p in range(len(form.paths)) if p != int(wrong_path[0])]
    wrong_path[0] = others[0]
    result["wrong path"] = _replace_tree(form, last, 0, dataclasses.replace(tree, path=wrong_path))
    if len(form.phases[last].trees) > 1:
        shifted = dataclasses.replace(tree, first_chunk=form.phases[last].trees[1].first_chunk)
        result["chunk twice"] = _replace_tree(form, last, 0, shifted)
    result["phases"] = dataclasses.replace(form, phases=form.phases[::-1] if len(form.phases) > 1 else
                                           (TreePhase("reduce" if form.phases[0].op == "broadcast" else "broadcast",
                                                      form.phases[0].trees),))
    assert n > 2
    return result


@pytest.mark.parametrize("spec,kind", [("dgx1", Kind.ALLGATHER), ("dgx1", Kind.ALLREDUCE), ("switch:n=4", Kind.REDUCE),
                                       ("torus:dims=3x3", Kind.REDUCESCATTER), ("ndv2:boxes=2", Kind.BROADCAST)])
def test_corrupted_trees_are_refused_by_both_verifiers(spec, kind):
    topo = load_topology(spec)
    form = forest_trees(topo, kind)
    for name, wrong in _corruptions(form).items():
        with pytest.raises(VerificationError):
            verify_trees(wrong, topo)
        if name == "root is a child":
            continue  # the broadcast rule never reads the root field: only the trees verifier sees this one
        with pytest.raises(VerificationError):
            verify(wrong.expand(), topo)


def test_a_different_topology_is_refused():
    form = forest_trees(load_topology("switch:n=4"), Kind.ALLGATHER)
    with pytest.raises(VerificationError, match="hop"):
        verify_trees(form, load_topology("ring:n=4"))


# ------------------------------------------------------------------------------------------ files
def _document() -> dict:
    topo = load_topology("switch:n=4")
    return json.loads(forest_trees(topo, Kind.ALLREDUCE).to_json())


@pytest.mark.parametrize("edit,field,expect", [
    (lambda d: d["trees"].pop("phases"), "trees.phases", "non-empty list"),
    (lambda d: d["trees"]["phases"][0].update(op="gather"), "trees.phases.0.op", "'broadcast' or 'reduce'"),
    (lambda d: d["trees"]["phases"][1]["trees"][0].update(root=9), "trees.phases.1.trees.0.root", "0..3"),
    (lambda d: d["trees"]["phases"][0]["trees"][0]["child"].append(1), "trees.phases.0.trees.0", "differ in length"),
    (lambda d: d["trees"]["phases"][0]["trees"][0]["path"].__setitem__(0, 999), "trees.phases.0.trees.0.path", "0.."),
    (lambda d: d["trees"]["phases"][0]["trees"][0].update(chunks=0), "trees.phases.0.trees.0.chunks", "expected 1.."),
    (lambda d: d["trees"]["phases"][0]["trees"][0].pop("parent"), "trees.phases.0.trees.0.parent", "missing"),
    (lambda d: d["trees"]["paths"].__setitem__(0, "gpu0"), "trees.paths.0", "list of node ids"),
    (lambda d: d.update(transfers=[]), "transfers", "not both"),
])
def test_bad_trees_files_name_the_field(edit, field, expect):
    document = _document()
    edit(document)
    with pytest.raises(InputError) as caught:
        TreeSchedule.from_dict(document, "s.json")
    assert caught.value.field == field and expect in caught.value.problem, caught.value


def test_the_file_is_smaller_and_reads_back(tmp_path):
    topo = load_topology("dgx-a100:boxes=2")
    form = forest_trees(topo, Kind.ALLGATHER)
    path = tmp_path / "trees.json"
    path.write_text(form.to_json())
    stored = read_schedule(path)
    assert isinstance(stored, TreeSchedule) and stored.to_json() == form.to_json()
    assert len(form.to_json()) * 5 < len(form.expand().to_json())


# -------------------------------------------------------------------------------------------- CLI
def test_cli_writes_verifies_and_evaluates_the_trees_form(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = run_cli(["generate", "dgx1", "-c", "allreduce", "-a", "forest", "--compact", "-o", "t.json"], capsys, monkeypatch)
    assert made.code == 0 and "trees form" in made.out and "826 transfers when expanded" in made.out, made
    assert "trees" in json.loads(Path("t.json").read_text())
    run_cli(["generate", "dgx1", "-c", "allreduce", "-a", "forest", "-o", "s.json"], capsys, monkeypatch)
    checked = run_cli(["verify", "t.json", "--json"], capsys, monkeypatch)
    assert checked.code == 0 and json.loads(checked.out)["transfers"] == 826
    trees = run_cli(["evaluate", "t.json", "-s", "1MiB", "-s", "1GiB", "--json"], capsys, monkeypatch)
    transfers = run_cli(["evaluate", "s.json", "-s", "1MiB", "-s", "1GiB", "--json"], capsys, monkeypatch)
    assert trees.code == 0 and json.loads(trees.out) == json.loads(transfers.out)


def test_cli_refuses_compact_for_other_algorithms(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome = run_cli(["generate", "dgx1", "-c", "allgather", "-a", "ring", "--compact", "-o", "t.json"], capsys,
                      monkeypatch)
    assert_refused(outcome, "--compact", "only forest", tmp_path)
    outcome = run_cli(["generate", "dgx1", "-c", "allgather", "-a", "forest", "--compact", "-O", "size=1GiB", "-o",
                       "t.json"], capsys, monkeypatch)
    assert_refused(outcome, "--option", "size is not an option of the trees form", tmp_path)


def test_cli_reads_trees_past_the_transfer_limit_where_it_can(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli(["generate", "dgx1", "-c", "allgather", "-a", "forest", "--compact", "-o", "t.json"], capsys,
                   monkeypatch).code == 0
    assert run_cli(["generate", "dgx1", "-c", "allgather", "-a", "forest", "-o", "s.json"], capsys,
                   monkeypatch).code == 0
    expected = json.loads(run_cli(["evaluate", "s.json", "-s", "1MiB", "--json"], capsys, monkeypatch).out)
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", "100")  # its expansion has 336 transfers
    assert run_cli(["verify", "t.json"], capsys, monkeypatch).code == 0
    streamed = run_cli(["evaluate", "t.json", "-s", "1MiB", "--json"], capsys, monkeypatch)
    assert streamed.code == 0 and json.loads(streamed.out) == expected  # the flow model streams the transfers
    outcome = run_cli(["explain", "t.json"], capsys, monkeypatch)
    assert_refused(outcome, "t.json", "expands to 336 transfers, over the limit of 100")
    assert "synth verify" in outcome.err


@pytest.mark.parametrize(("kind", "slices", "window"), [(Kind.ALLREDUCE, 3, 1), (Kind.REDUCESCATTER, 2, None),
                                                      (Kind.BROADCAST, 4, 2)])
def test_streamed_traces_keep_slices_and_windows(kind, slices, window):
    topo = load_topology("dgx-a100:boxes=2")
    form = forest_trees(topo, kind)
    check_streamed_traces(form, form.expand(), 2**24, slices, window)


def test_streaming_refuses_what_it_cannot_write_rank_by_rank():
    form = forest_trees(load_topology("switch:n=4"), Kind.ALLGATHER)
    metadata, ranks = stream_rank_traces(form, 2**20, per_pass=1)
    assert len(list(ranks)) == 4  # one rank per pass
    with pytest.raises(InputError, match="per_pass"):
        stream_rank_traces(form, 2**20, per_pass=0)
    with pytest.raises(LimitError, match="tag limit"):
        stream_rank_traces(form, 2**20, tag_base=499_999_999)


def test_cli_streams_chakra_traces_past_the_transfer_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli(["generate", "switch:n=8", "-c", "allreduce", "-a", "forest", "--compact", "-o", "t.json"], capsys,
                   monkeypatch).code == 0
    form = read_schedule("t.json")
    assert isinstance(form, TreeSchedule)
    within = json.loads(run_cli(["export", "chakra", "t.json", "-o", "whole", "-s", "1MiB", "--json"], capsys,
                                monkeypatch).out)
    assert within["sets"][0]["predicted_ns"] is not None  # within the limit: expanded, with the astra model
    expanded = form.expand()
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", str(form.num_transfers() - 1))
    outcome = run_cli(["export", "chakra", "t.json", "-o", "streamed", "-s", "1MiB", "-s", "4MiB"], capsys, monkeypatch)
    assert outcome.code == 0, outcome.err
    assert "no prediction to check it against" in outcome.out
    note = (tmp_path / "streamed" / "NOTE.txt").read_text()
    assert f"trees form ({form.num_transfers():,} transfers)" in note and "without the astra model's prediction" in note
    for size, folder in ((2**20, "1MiB"), (2**22, "4MiB")):
        program = schedule_to_et(expanded, size)
        for rank in range(len(form.ranks)):
            written = (tmp_path / "streamed" / folder / f"forest_allreduce.{rank}.et").read_bytes()
            assert written == encode_rank(program, rank)
        assert f'run . {folder} "" ' in (tmp_path / "streamed" / folder / "run_astrasim.sh").read_text()  # no times
    refused = run_cli(["export", "msccl", "t.json", "-o", "t.xml"], capsys, monkeypatch)
    assert_refused(refused, "t.json", f"expands to {form.num_transfers():,} transfers, over the limit")
    assert not (tmp_path / "t.xml").exists()
    monkeypatch.delenv("SYNTH_MAX_TRANSFERS")
    back = run_cli(["import", "chakra", "streamed/1MiB/forest_allreduce", "-t", "switch:n=8", "-o", "back.json"],
                   capsys, monkeypatch)
    assert back.code == 0, back.err
    assert read_schedule("back.json").transfers == expanded.transfers  # type: ignore[union-attr]


def test_limits_apply_to_what_is_built(monkeypatch):
    topo = load_topology("dgx1")
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", "50")
    with pytest.raises(LimitError, match="forest_trees"):  # refused before the plan is built
        forest(topo, Kind.ALLGATHER)
    text = forest_trees(topo, Kind.ALLGATHER).to_json()  # the trees form has no transfers to limit
    monkeypatch.setenv("SYNTH_MAX_TREE_ARCS", "100")
    with pytest.raises(LimitError, match="SYNTH_MAX_TREE_ARCS"):
        TreeSchedule.from_json(text, "t.json")
