"""Uneven shards (allgatherv, reduce-scatterv): the collective, its exact bound, forest reaching it, the
baselines, the schedule format ``synth.schedule/4``, the exports and the command line."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from synth.algorithms import synthesize
from synth.algorithms.forest import forest, forest_trees
from synth.bounds import shard_bound, time_bound
from synth.collectives import Collective, Kind, shard_weights
from synth.cuts.allgather import cut_bound
from synth.cuts.network import Network
from synth.errors import InputError, LimitError, NotApplicable, VerificationError
from synth.evaluate import congestion
from synth.library import load_topology
from synth.schedule import SHARDS_FORMAT, Schedule
from synth.trees import TreeSchedule
from synth.verify import verify
from synth.verify_trees import verify_trees
from tests.helpers import run_cli
from tests.strategies import forest_topologies
from tests.test_forest import brute_force_rate

GIGA = 10**9
OWNED = (Kind.ALLGATHER, Kind.REDUCESCATTER)


# ------------------------------------------------------------------------------------------ the collective
def test_uneven_collective_conditions():
    coll = Collective.uneven(Kind.ALLGATHER, [2, 0, 3])
    assert coll.chunks == 5 and coll.shards == (2, 0, 3)
    assert [list(coll.owned(r)) for r in range(3)] == [[0, 1], [], [2, 3, 4]]
    assert sorted(coll.initial(2)) == [(2, 4), (3, 4), (4, 4)] and not list(coll.initial(1))
    assert sorted(coll.final(1)) == [(0, 1), (1, 1), (2, 4), (3, 4), (4, 4)]
    scatter = Collective.uneven(Kind.REDUCESCATTER, [1, 2])
    assert sorted(scatter.final(1)) == [(1, 3), (2, 3)] and len(list(scatter.initial(0))) == 3
    with pytest.raises(ValueError, match="owned"):
        _ = coll.chunks_per_rank
    assert Collective.uneven(Kind.ALLGATHER, [3, 3]) == Collective(Kind.ALLGATHER, 2, 6)


@pytest.mark.parametrize(("kind", "shards", "chunks", "field"), [
    (Kind.ALLREDUCE, (1, 2), 3, "shards"),
    (Kind.ALLGATHER, (1, 2), 4, "chunks"),
    (Kind.ALLGATHER, (1, 2, 3), 6, "shards"),
    (Kind.ALLGATHER, (0, 0), 1, "shards"),
    (Kind.ALLGATHER, (1, -1), 0, "shards[1]"),
    (Kind.ALLGATHER, [1, 2], 3, "shards"),
])
def test_bad_shards_name_the_field(kind, shards, chunks, field):
    with pytest.raises(InputError) as error:
        Collective(kind, 2, chunks, shards=shards)
    assert error.value.field == field


def test_shard_weights_in_lowest_terms_and_units():
    assert shard_weights("1MiB,512KiB,0,2MiB", 4) == (2, 1, 0, 4)
    assert shard_weights([4, 4, 4], 3) is None
    with pytest.raises(InputError, match="units in all"):
        shard_weights([1_000_000, 1_000_001], 2)
    with pytest.raises(InputError) as error:
        shard_weights("1,x", 2)
    assert error.value.field == "shards[1]"


# ------------------------------------------------------------------------------------- bound and forest
@st.composite
def sharded_topologies(draw):
    topo = draw(forest_topologies(max_gpus=5, max_switches=2))
    weights = draw(st.lists(st.integers(0, 4), min_size=topo.num_ranks, max_size=topo.num_ranks).filter(any))
    return topo, weights


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sharded_topologies(), st.booleans())
def test_weighted_bound_is_the_brute_force_minimum_cut(case, reverse):
    topo, weights = case
    net = Network.from_topology(topo, reverse=reverse)
    assert cut_bound(net, weights).rate == brute_force_rate(net, weights)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sharded_topologies())
def test_forest_allgatherv_reaches_the_exact_bound_in_congestion(case):
    """On random topologies with random shards (some empty), forest's allgatherv and reduce-scatterv verify
    and their congestion time is exactly the weighted cut bound (as Fractions)."""
    topo, shards = case
    for kind in OWNED:
        try:
            schedule = forest(topo, kind, shards=shards)
        except LimitError:  # huge optimal k: refused up front by the documented transfer limit
            assume(False)
        verify(schedule, topo)
        spent = congestion(schedule, topo).seconds_per_byte
        bound = shard_bound(topo, kind, shards)
        assert spent == bound.seconds_per_byte == Fraction(schedule.params["time_per_byte"])
        weights = shard_weights(shards, topo.num_ranks)
        if weights is not None:
            assert schedule.collective.shards is not None
            per_unit = schedule.collective.chunks // sum(weights)
            assert schedule.collective.shards == tuple(w * per_unit for w in weights)
            assert time_bound(topo, kind, shards=shards).terms[0].seconds_per_byte == spent


def test_uneven_shards_change_the_bound_the_way_the_cut_says():
    switch = load_topology("switch:n=4")  # 50 GB/s per gpu each way
    even = shard_bound(switch, Kind.ALLGATHER, [1, 1, 1, 1])
    skew = shard_bound(switch, Kind.ALLGATHER, [1, 1, 1, 5])
    # even: each gpu receives 3/4 of M over 50 GB/s; skewed: gpu0 must receive 7/8 of M
    assert even.seconds_per_byte == Fraction(3, 4) / (50 * GIGA)
    assert skew.seconds_per_byte == Fraction(7, 8) / (50 * GIGA)
    assert skew.cut_weight == 7 and "gpu0" not in skew.cut_gpus


@pytest.mark.parametrize("spec", ["dgx1", "dgx-a100:boxes=2", "mi250"])
def test_forest_with_shards_on_named_systems(spec):
    topo = load_topology(spec)
    shards = [(3 * r) % 4 for r in range(topo.num_ranks)]
    for kind in OWNED:
        schedule = forest(topo, kind, shards=shards)
        verify(schedule, topo)
        assert congestion(schedule, topo).seconds_per_byte == shard_bound(topo, kind, shards).seconds_per_byte
        form = forest_trees(topo, kind, shards=shards)
        verify_trees(form, topo)
        assert form.expand().transfers == schedule.transfers


def test_forest_refuses_shards_where_they_do_not_apply():
    topo = load_topology("dgx1")
    with pytest.raises(InputError, match="uneven shards"):
        forest(topo, Kind.ALLREDUCE, shards=[1, 2] * 4)
    with pytest.raises(InputError, match="box symmetry"):
        forest(topo, Kind.ALLGATHER, shards=[1, 2] * 4, symmetric=True)
    with pytest.raises(InputError) as error:
        forest(topo, Kind.ALLGATHER, shards=[1, 2, 3])
    assert error.value.field == "shards"


# ------------------------------------------------------------------------------------------- baselines
@pytest.mark.parametrize("kind", OWNED)
def test_nccl_runs_shards_as_grouped_chains(kind):
    """PyTorch's uneven all_gather on NCCL: one broadcast (reduce) per rank in one group, each down every
    channel's ring from its root; verified, and never faster than the exact bound."""
    topo = load_topology("dgx-a100:boxes=2")
    shards = [1] * 8 + [2] * 8
    schedule = synthesize(topo, kind, "nccl", shards=shards, size="256MiB")
    verify(schedule, topo)
    assert schedule.collective.shards is not None and schedule.params["shards"] == shards
    assert congestion(schedule, topo).seconds_per_byte >= shard_bound(topo, kind, shards).seconds_per_byte
    assert "one " + ("broadcast" if kind == Kind.ALLGATHER else "reduce") in schedule.params["choice"]["reason"]


def test_direct_allgatherv_sends_each_shard_once_per_rank():
    topo = load_topology("switch:n=4")
    schedule = synthesize(topo, Kind.ALLGATHER, "direct", shards=[2, 0, 1, 1])
    verify(schedule, topo)
    assert len(schedule.transfers) == 3 * 4  # 4 chunks, each to the 3 other gpus
    with pytest.raises(NotApplicable):
        synthesize(topo, Kind.REDUCESCATTER, "direct", shards=[2, 0, 1, 1])


# ----------------------------------------------------------------------------------- format and verifier
def test_schedule_format_4_round_trips_and_is_required():
    topo = load_topology("dgx1")
    schedule = forest(topo, Kind.ALLGATHER, shards=[1, 2, 3, 0, 1, 2, 3, 4])
    text = schedule.to_json()
    data = json.loads(text)
    assert data["format"] == SHARDS_FORMAT and data["shards"] == list(schedule.collective.shards)
    assert f'"shards": {json.dumps(list(schedule.collective.shards))}' in text  # on one line
    again = Schedule.from_dict(data)
    assert again.collective == schedule.collective and again.transfers == schedule.transfers
    for older in ("synth.schedule/2", "synth.schedule/3"):
        with pytest.raises(InputError) as error:
            Schedule.from_dict({**data, "format": older})
        assert error.value.field == "shards"
    form = forest_trees(topo, Kind.REDUCESCATTER, shards=[1, 2, 3, 0, 1, 2, 3, 4])
    assert TreeSchedule.from_dict(json.loads(form.to_json())).collective == form.collective
    plain = forest(topo, Kind.ALLGATHER)
    assert plain.format == "synth.schedule/2" and "shards" not in json.loads(plain.to_json())


def test_verifier_holds_the_shards_to_their_owners():
    """The same transfers under other shards (rank 0 and 1 swapping how much they own) fail verification."""
    topo = load_topology("switch:n=3")
    schedule = synthesize(topo, Kind.ALLGATHER, "direct", shards=[1, 2, 1])
    data = json.loads(schedule.to_json())
    with pytest.raises(VerificationError):
        verify(Schedule.from_dict({**data, "shards": [2, 1, 1]}), topo)


# ----------------------------------------------------------------------------------- exports and the CLI
def test_exports_carry_or_refuse_shards(tmp_path, capsys, monkeypatch):
    from synth.export.chakra.read import import_chakra

    topo = load_topology("dgx1")
    path = tmp_path / "agv.json"
    path.write_text(forest(topo, Kind.ALLGATHER, shards=[1, 2, 3, 0, 1, 2, 3, 4]).to_json())
    out = run_cli(["export", "msccl", str(path), "-t", "dgx1", "-o", str(tmp_path / "x.xml")], capsys, monkeypatch)
    assert out.code == 2 and "uneven shards" in out.err and not (tmp_path / "x.xml").exists()
    out = run_cli(["export", "mscclpp", str(path), "-t", "dgx1", "-o", str(tmp_path / "p.json")], capsys, monkeypatch)
    assert out.code == 2 and "uneven shards" in out.err
    out = run_cli(["export", "chakra", str(path), "-t", "dgx1", "-o", str(tmp_path / "et"), "-s", "1MiB"],
                  capsys, monkeypatch)
    assert out.code == 0, out.err
    back = import_chakra(tmp_path / "et" / "forest_allgather", topo)
    assert back.collective.shards == (3, 6, 9, 0, 3, 6, 9, 12)
    verify(back, topo)


def test_cli_generate_bound_and_compare_with_shards(tmp_path, capsys, monkeypatch):
    out_file = tmp_path / "s.json"
    shards = "1,2,3,0,1,2,3,4"
    out = run_cli(["generate", "dgx1", "-c", "allgather", "-a", "forest", "--shards", shards, "-o", str(out_file)],
                  capsys, monkeypatch)
    assert out.code == 0, out.err
    assert json.loads(out_file.read_text())["format"] == SHARDS_FORMAT
    out = run_cli(["bound", "dgx1", "--shards", shards, "--json"], capsys, monkeypatch)
    bound = json.loads(out.out)
    assert Fraction(bound["seconds_per_byte"]) == shard_bound(load_topology("dgx1"), Kind.ALLGATHER,
                                                              [1, 2, 3, 0, 1, 2, 3, 4]).seconds_per_byte
    out = run_cli(["compare", "dgx1", "--shards", shards, "-s", "64MiB", "--json"], capsys, monkeypatch)
    assert out.code == 0, out.err
    result = json.loads(out.out)
    forest_row = next(r for r in result["rows"] if r["algorithm"] == "forest" and r["collective"] == "allgather")
    assert forest_row["percent_of_bound"] > 90
    assert any(s["algorithm"] == "ring" and "uneven shards" in s["reason"] for s in result["skipped"])


@pytest.mark.parametrize(("args", "field"), [
    (["generate", "dgx1", "-c", "allgather", "-a", "ring", "--shards", "1,2,3,0,1,2,3,4"], "--shards"),
    (["generate", "dgx1", "-c", "allreduce", "-a", "forest", "--shards", "1,2,3,0,1,2,3,4"], "--shards"),
    (["generate", "dgx1", "-c", "allgather", "-a", "forest", "--shards", "1,2"], "--shards"),
    (["generate", "dgx1", "-c", "allgather", "-a", "forest", "--shards", "1,2,3,0,1,2,3,x"], "--shards[7]"),
    (["bound", "dgx1", "--shards", "0,0,0,0,0,0,0,0"], "--shards"),
])
def test_cli_refuses_bad_shards_in_one_line(args, field, tmp_path, capsys, monkeypatch):
    out = run_cli([*args, "-o", str(tmp_path / "x.json")] if args[0] == "generate" else args, capsys, monkeypatch)
    assert out.code == 2 and field in out.err and len(out.err.strip().splitlines()) == 1, out.err
    assert not (tmp_path / "x.json").exists()


def test_compare_baseline_is_the_faster_nccl_way():
    """docs/uneven-shards.md's table: forest against PyTorch's grouped broadcasts and the padded allgather on
    2 x DGX A100 with a 1:2 skew; the padded allgather is the faster NCCL way there, and the baseline."""
    from synth.compare import baselines, run_all, speedup

    topo = load_topology("dgx-a100:boxes=2")
    shards = [1] * 8 + [2] * 8
    rows, skipped, _ = run_all(topo, [Kind.ALLGATHER], [2**20, 2**28], ["forest", "nccl"], shards=shards)
    by = {(r.label, r.size): r for r in rows}
    base = baselines(rows)
    for size, gain in ((2**20, 3.16), (2**28, 1.89)):
        assert base[("allgather", size)].variant == "padded"
        assert by[("nccl(padded)", size)].time_s < by[("nccl", size)].time_s
        best = min((r for r in rows if r.algorithm == "forest" and r.size == size), key=lambda r: r.time_s)
        assert speedup(best, base[("allgather", size)]) == pytest.approx(gain, abs=0.01)
    assert by[("forest(k=1, spread)", 2**28)].percent_of_bound == pytest.approx(97.0, abs=0.1)
