"""The selection layer (synth.choose): one search that times, skips and records candidates, and the entry
that routes a size choice to its chooser, through the public API."""

from __future__ import annotations

import math

import pytest

from synth.algorithms import synthesize as construct
from synth.choose import Search, chooser_options, synthesize
from synth.choose.forest import ForestChoice, ForestVariant, Measured, tree_counts
from synth.collectives import Kind
from synth.errors import InputError
from synth.evaluate import evaluate
from synth.library import load_topology
from synth.verify import verify


def test_search_records_times_cut_offs_and_reports_each_candidate():
    topology = load_topology("switch:n=4")
    events = []
    search = Search(topology, Kind.ALLGATHER, 2**24, progress=events.append)
    ring = construct(topology, Kind.ALLGATHER, "ring")
    seconds = search.measure(ring, "ring", "ring")
    assert seconds == evaluate(ring, topology, 2**24).time_s == search.times["ring"]
    assert search.measure(ring, "ring/fast", "ring again", cutoff=seconds / 2) == math.inf
    assert search.times["ring/fast"] is None  # cut off: recorded as slower
    assert [event.message for event in events] == [f"ring: {seconds * 1e6:,.2f} us", "ring again: slower, cut off"]
    assert all(event.phase == "size choice" and event.collective == "allgather" for event in events)


def test_search_skips_a_candidate_over_its_work_limit_and_says_so_unless_required():
    from synth.errors import LimitError

    topology = load_topology("switch:n=8")
    events = []
    search = Search(topology, Kind.ALLGATHER, 2**26, progress=events.append, work_limit=1)
    direct = construct(topology, Kind.ALLGATHER, "direct")  # each gpu's uplink is shared: link sharing to do
    assert search.measure(direct, "direct", "direct") is None and "direct" not in search.times
    assert events[-1].message == "direct: not simulated (over a simulation limit)"
    with pytest.raises(LimitError):
        search.measure(direct, "direct", "direct", required=True)
    assert search.measure(direct, "direct", "direct", limited=False) == evaluate(direct, topology, 2**26).time_s


def test_synthesize_constructs_without_a_size_and_chooses_with_one():
    topology = load_topology("dgx1")
    plain = synthesize(topology, Kind.ALLGATHER, "forest")
    assert plain.transfers == construct(topology, Kind.ALLGATHER, "forest").transfers
    assert "size_choice" not in plain.params
    chosen = synthesize(topology, Kind.ALLGATHER, "forest", size="64MiB")
    verify(chosen, topology)
    choice = chosen.params["size_choice"]
    simulated = [t for t in choice["time_s"].values() if t is not None]
    assert chosen.params["modelled_time_s"] == min(simulated) == evaluate(chosen, topology, 2**26).time_s
    fixed = synthesize(topology, Kind.ALLGATHER, "forest", size=2**26, max_trees_per_root=2)
    assert fixed.params["size"] == 2**26 and "size_choice" not in fixed.params  # the trees are fixed: no choice
    # algorithms without a chooser take size as their own rule, or refuse it
    assert synthesize(topology, Kind.ALLREDUCE, "nccl", size=2**20).params == construct(
        topology, Kind.ALLREDUCE, "nccl", size=2**20).params


def test_synthesize_refuses_choice_options_without_a_size_and_the_constructor_points_to_the_choice():
    topology = load_topology("dgx1")
    with pytest.raises(InputError, match="work_limit"):
        synthesize(topology, Kind.ALLGATHER, "forest", work_limit=10)
    with pytest.raises(InputError, match="work_limit"):
        synthesize(topology, Kind.ALLGATHER, "forest", size=1024, work_limit=-1)
    with pytest.raises(InputError, match="progress"):
        synthesize(topology, Kind.ALLGATHER, "forest", size=1024, progress="yes")
    with pytest.raises(InputError, match="synth.synthesize"):
        construct(topology, Kind.ALLGATHER, "forest", size=1024)
    with pytest.raises(InputError, match="no option 'bogus'; it takes .*max_trees_per_root"):
        synthesize(topology, Kind.ALLGATHER, "forest", size=1024, bogus=1)
    assert set(chooser_options("forest")) == {"size", "progress", "work_limit"} and not chooser_options("ring")


def test_forest_choice_steps_are_each_never_slower_than_their_input():
    """Every step of the size choice returns its input or a faster candidate it simulated and recorded."""
    topology, kind, size = load_topology("switch:n=8"), Kind.ALLGATHER, 2**26
    choice = ForestChoice(topology, kind, size, Search(topology, kind, size))
    best = choice.first_pass()
    assert choice.counts() == sorted({int(k.split("/")[0]) for k in choice.search.times})
    assert choice.optimal_trees == max(tree_counts(choice.optimal_trees))
    for step in (choice.refine_with_halfway, choice.spread_variant):
        after = step(best)
        assert after.seconds <= best.seconds
        assert after is best or choice.search.times[after.variant.key] == after.seconds
        best = after
    verify(best.schedule, topology)
    assert evaluate(best.schedule, topology, size, slice_bytes=best.variant.slice_bytes).time_s == best.seconds


def test_forest_variant_keys_and_labels():
    assert ForestVariant(2).key == "2" and ForestVariant(2).label == "k=2, the plan rule's slices"
    assert ForestVariant(4, 65536, spread=True).key == "4/65536/spread"
    polished = ForestVariant(4, 65536, spread=True, polished=True)
    assert polished.key == "4/65536/spread/polished" and polished.label == "k=4, 64KiB slices"
    assert ForestVariant(3).at(32768) == ForestVariant(3, 32768)
    assert Measured(1.0, ForestVariant(1), construct(load_topology("ring:n=2"), "allgather", "ring")).seconds == 1.0


@pytest.mark.parametrize("count", ["1", "2"])
def test_measure_many_gives_each_candidate_the_time_measure_gives(count, monkeypatch):
    """Simulated at once or one after another: the same times in the order given, recorded under their
    keys (None where cut off), a candidate over the work limit skipped."""
    from synth.choose import Candidate

    monkeypatch.setenv("SYNTH_THREADS", count)
    topo = load_topology("dgx-a100:boxes=2")
    ring, tree = construct(topo, "allreduce", "ring"), construct(topo, "allreduce", "tree")
    alone = Search(topo, Kind.ALLREDUCE, 2**26)
    expected = [alone.measure(ring, "r", "r"), alone.measure(tree, "t", "t", slice_bytes=65536)]
    search = Search(topo, Kind.ALLREDUCE, 2**26, work_limit=10**12)
    cut = min(expected) / 2
    got = search.measure_many([Candidate(ring, "r", "r"), Candidate(tree, "t", "t", 65536),
                               Candidate(ring, "r/cut", "r cut", cutoff=cut)])
    assert got == [*expected, math.inf]
    assert list(search.times) == ["r", "t", "r/cut"] and search.times["r/cut"] is None
    one_by_one = Search(topo, Kind.ALLREDUCE, 2**26, work_limit=0)
    sequential = [one_by_one.measure(ring, "r", "r"), one_by_one.measure(tree, "t", "t")]
    limited = Search(topo, Kind.ALLREDUCE, 2**26, work_limit=0)
    assert limited.measure_many([Candidate(ring, "r", "r"), Candidate(tree, "t", "t")]) == sequential
    assert None in sequential and limited.times == one_by_one.times  # the tree's sharing is past the limit


def test_synth_threads_must_be_a_number(monkeypatch):
    from synth.choose import threads

    monkeypatch.setenv("SYNTH_THREADS", "many")
    with pytest.raises(InputError, match="SYNTH_THREADS"):
        threads()
    monkeypatch.setenv("SYNTH_THREADS", "0")
    assert threads() == 1
