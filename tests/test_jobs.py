"""Jobs (synth.jobs, synth.choose.job): collectives that run at once on one fabric, their joint time in the
flow model, the joint bound no schedule set beats, and the schedule set chosen."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from helpers import run_cli
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import topologies

from synth.bounds import time_bound
from synth.choose.job import choose_job
from synth.collectives import Collective, Kind
from synth.errors import InputError, NotApplicable
from synth.flow import simulate_together
from synth.groups import group_view
from synth.jobs import Job, crossing_bytes, joint_bound, load_job
from synth.library import load_topology
from synth.verify import verify

H100X4 = "dgx-h100:boxes=4"


def job(*collectives: dict, objective: str = "makespan", topology: str = H100X4) -> Job:
    return Job.from_dict({"format": "synth.job/1", "objective": objective, "collectives": list(collectives)},
                         load_topology(topology))


# ------------------------------------------------------------------------------------- crossing bytes
@pytest.mark.parametrize("kind,inside,expected", [
    (Kind.ALLGATHER, [1, 1, 0, 0], 500),       # two owners' shards leave
    (Kind.REDUCESCATTER, [1, 0, 0, 0], 750),   # three shards reduced outside need the inside's input
    (Kind.ALLREDUCE, [1, 0, 0, 0], 1000),      # the whole sum depends on the inside
    (Kind.BROADCAST, [1, 0, 0, 0], 1000),      # the root's message leaves once
    (Kind.BROADCAST, [0, 1, 1, 1], 0),         # nothing the root needs comes from elsewhere
    (Kind.REDUCE, [0, 1, 1, 1], 1000),         # the root needs the outside's inputs combined
    (Kind.ALLTOALL, [1, 1, 0, 0], 1000),       # 4 pairs of 250 bytes cross
])
def test_crossing_bytes_count_what_the_data_flow_forces(kind, inside, expected):
    collective = Collective(kind, 4, 4, root=0 if kind in (Kind.BROADCAST, Kind.REDUCE) else None)
    assert crossing_bytes(collective, 1000, [bool(x) for x in inside]) == expected


def test_crossing_bytes_of_demands_and_uneven_shards():
    demand = Collective.alltoallv(((0, 3, 1), (0, 0, 0), (2, 2, 0)))  # 8 chunks of 1000 / 8 bytes
    assert crossing_bytes(demand, 1000, [True, False, False]) == Fraction(4 * 1000, 8)
    assert crossing_bytes(demand, 1000, [False, True, False]) == 0
    uneven = Collective.uneven(Kind.ALLGATHER, (1, 3))
    assert crossing_bytes(uneven, 1000, [False, True]) == 750


# ----------------------------------------------------------------------------------------- the bound
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric=st.one_of(st.sampled_from(["dgx-h100:boxes=2", "dgx-a100:boxes=2", "switch:n=6", "ring:n=6",
                                         "dgx1"]).map(load_topology), topologies(max_gpus=6, max_switches=2)),
       data=st.data())
def test_no_schedule_set_beats_the_joint_bound(fabric, data):
    """Two collectives on random groups of random and shipped fabrics, every candidate set simulated
    together: none ends sooner than the joint bound, none of its collectives sooner than its own bound,
    and every schedule verifies."""
    entries = []
    for index in range(2):
        kind = data.draw(st.sampled_from(["allgather", "reducescatter", "allreduce", "alltoall", "broadcast"]))
        members = data.draw(st.lists(st.sampled_from(fabric.gpus), min_size=2, max_size=min(6, fabric.num_ranks),
                                     unique=True))
        size = data.draw(st.sampled_from([2**16, 2**24]))
        entries.append({"name": f"c{index}", "collective": kind, "size": size, "group": members,
                        "algorithm": ["ring", "direct", "binomial", "nccl"]})
    try:
        the_job = Job.from_dict({"format": "synth.job/1", "collectives": entries}, fabric)
        result = choose_job(fabric, the_job)
    except NotApplicable:  # members that reach each other only through a non-member
        assume(False)
        return
    bound = result.bound
    assert bound.makespan_s >= max(bound.alone_s)
    for member in result.members:
        verify(member.chosen.schedule, member.chosen.view)
    for _, makespan, _ in result.tried:
        assert makespan >= bound.makespan_s * (1 - 1e-9)
    for index, member in enumerate(result.members):
        assert member.finish_s >= bound.alone_s[index] * (1 - 1e-9)


def test_the_shared_cut_binds_where_two_collectives_cross_one_nic():
    fabric = load_topology("dgx-h100:boxes=2")
    both = job({"collective": "allreduce", "size": "1GiB", "group": "dp=2"},
               {"collective": "allgather", "size": "1GiB", "group": "dp=2"}, topology="dgx-h100:boxes=2")
    bound = joint_bound(fabric, both)
    # 1 GiB of allreduce and half a GiB of allgather leave b0.gpu0 through its one 50 GB/s NIC
    assert bound.shared_bytes == Fraction(3 * 2**29) and bound.shared_GBps == 50
    assert bound.makespan_s == pytest.approx(3 * 2**29 / 50e9)
    apart = job({"collective": "allreduce", "size": "1GiB", "group": "dp=2"},
                {"collective": "allgather", "size": "1GiB", "group": "dp=2:1"}, topology="dgx-h100:boxes=2")
    assert joint_bound(fabric, apart).makespan_s == max(joint_bound(fabric, apart).alone_s)  # two NICs


def test_each_collective_alone_is_its_own_bound():
    fabric = load_topology(H100X4)
    one = job({"collective": "allgather", "size": "256MiB", "group": "tp=8:1"})
    bound = joint_bound(fabric, one)
    view = group_view(fabric, one.collectives[0].members)
    assert bound.alone_s == (time_bound(view, Kind.ALLGATHER).time(2**28),)
    assert bound.makespan_s == bound.alone_s[0]  # no other collective shares a cut with it


# ----------------------------------------------------------------------------------------- the choice
def test_done_when_expert_alltoallv_beside_dp_allreduce():
    """Expert alltoallv (top-2 of 2 experts per gpu, Zipf 1) and the dp allreduce on the same four gpus of 4 x
    DGX H100: the joint time, each collective's slowdown, a bound no set beats, never worse than NCCL's set."""
    fabric = load_topology(H100X4)
    the_job = job({"name": "experts", "collective": "alltoallv", "size": "256MiB", "group": "dp=4",
                   "demand": {"moe": {"experts_per_gpu": 2, "top_k": 2, "zipf": 1.0}}},
                  {"name": "dp", "collective": "allreduce", "size": "256MiB", "group": "dp=4"})
    result = choose_job(fabric, the_job)
    assert [m.collective.name for m in result.members] == ["experts", "dp"]
    assert all(m.slowdown >= 0.98 for m in result.members)
    assert any(m.slowdown > 1.05 for m in result.members)  # they share the four NICs
    assert result.makespan_s >= result.bound.makespan_s
    assert result.bound.makespan_s > max(result.bound.alone_s)  # the shared NICs bind
    assert result.nccl_finish_s is not None and result.makespan_s <= max(result.nccl_finish_s)
    # the chosen set's times are what a joint simulation of it gives
    parts = [(m.chosen.schedule, m.chosen.view, m.collective.size, m.chosen.plan) for m in result.members]
    assert simulate_together(parts).finish_s == tuple(m.finish_s for m in result.members)


def test_disjoint_collectives_run_as_fast_as_alone():
    fabric = load_topology(H100X4)
    result = choose_job(fabric, job({"collective": "allreduce", "size": "64MiB", "group": "tp=8:0", "algorithm": "ring"},
                                    {"collective": "allreduce", "size": "64MiB", "group": "tp=8:1", "algorithm": "ring"}))
    assert [m.slowdown for m in result.members] == [1.0, 1.0]


def test_the_weighted_objective_favours_the_heavy_collective():
    fabric = load_topology("dgx-h100:boxes=2")
    entries = [{"name": "light", "collective": "allgather", "size": "256MiB", "group": "dp=2",
                "algorithm": ["ring", "nccl", "direct"]},
               {"name": "heavy", "collective": "allgather", "size": "256MiB", "group": "dp=2", "weight": 10,
                "algorithm": ["ring", "nccl", "direct"]}]
    result = choose_job(fabric, job(*entries, objective="weighted", topology="dgx-h100:boxes=2"))
    light, heavy = result.members
    assert result.objective_s() == pytest.approx(light.finish_s + 10 * heavy.finish_s)
    assert result.objective_s() <= min(w for _, _, w in result.tried) * (1 + 1e-9)
    assert result.bound_s() == pytest.approx(sum(w * t for w, t in zip((1, 10), result.bound.alone_s, strict=True)))


def test_a_demand_file_is_read_beside_the_job(tmp_path: Path):
    from synth.demand import moe

    moe(4, seed=3).write(tmp_path / "experts.json")
    (tmp_path / "job.json").write_text(json.dumps({"format": "synth.job/1", "collectives": [
        {"collective": "alltoallv", "size": "16MiB", "group": "dp=4", "demand": "experts.json"}]}))
    loaded = load_job(tmp_path / "job.json", load_topology(H100X4))
    assert loaded.collectives[0].demand == moe(4, seed=3)
    (tmp_path / "small.json").write_text(json.dumps({"format": "synth.job/1", "collectives": [
        {"collective": "alltoallv", "size": "16MiB", "group": "dp=2", "demand": "experts.json"}]}))
    with pytest.raises(InputError, match=r"collectives\[0\]\.demand: the demand is for 4 ranks, the group has 2"):
        load_job(tmp_path / "small.json", load_topology(H100X4))


def test_compare_job_prints_the_table_and_json(capsys, monkeypatch, tmp_path: Path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"format": "synth.job/1", "collectives": [
        {"name": "dp", "collective": "allreduce", "size": "64MiB", "group": "dp=2", "algorithm": ["ring", "nccl"]},
        {"name": "ag", "collective": "allgather", "size": "64MiB", "group": "dp=2", "algorithm": ["ring", "nccl"]}]}))
    outcome = run_cli(["compare", "dgx-h100:boxes=2", "--job", str(path)], capsys, monkeypatch)
    assert outcome.code == 0, outcome.err
    assert "started together" in outcome.out and "slowdown" in outcome.out
    assert "joint bound" in outcome.out and "nccl for every collective, together" in outcome.out  # results
    assert "slowdown: the collective's finish" in outcome.err  # the explanations are notes
    outcome = run_cli(["compare", "dgx-h100:boxes=2", "--job", str(path), "--json"], capsys, monkeypatch)
    data = json.loads(outcome.out)
    assert [c["name"] for c in data["collectives"]] == ["dp", "ag"]
    assert data["makespan_s"] >= data["bound"]["makespan_s"]
    refused = run_cli(["compare", "dgx-h100:boxes=2", "--job", str(path), "-c", "allreduce"], capsys, monkeypatch)
    assert refused.code == 2 and "--collective" in refused.err


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_closed_form_crossing_equals_the_data_flow_definition(data):
    from synth.jobs import crossing_bytes_closed

    n = data.draw(st.integers(2, 6))
    kind = data.draw(st.sampled_from(list(Kind)))
    if kind == Kind.ALLTOALLV:
        matrix = [[0 if s == d else data.draw(st.integers(0, 3)) for d in range(n)] for s in range(n)]
        if not any(map(any, matrix)):
            matrix[0][1] = 1
        collective = Collective.alltoallv(matrix)
    elif kind in (Kind.ALLGATHER, Kind.REDUCESCATTER) and data.draw(st.booleans()):
        shards = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n).filter(any))
        collective = Collective.uneven(kind, tuple(shards))
    else:
        rooted = kind in (Kind.BROADCAST, Kind.REDUCE)
        per = data.draw(st.integers(1, 3))
        collective = Collective(kind, n, n * per, root=data.draw(st.integers(0, n - 1)) if rooted else None)
    inside = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    size = data.draw(st.integers(1, 10**9))
    assert crossing_bytes_closed(collective, size, inside) == crossing_bytes(collective, size, inside)


def test_a_joint_simulation_over_the_slice_limit_is_refused_before_it_runs(monkeypatch):
    import importlib

    from synth.errors import LimitError

    evaluation = importlib.import_module("synth.evaluate")  # the module (synth.evaluate is also a function)

    fabric = load_topology("dgx-h100:boxes=2")
    the_job = job({"collective": "allreduce", "size": "64MiB", "group": "dp=2", "algorithm": "ring"},
                  {"collective": "allgather", "size": "64MiB", "group": "dp=2", "algorithm": "ring"},
                  topology="dgx-h100:boxes=2")
    alone = choose_job(fabric, the_job)
    work = sum(len(m.chosen.schedule.transfers) * m.chosen.plan.slices for m in alone.members)
    from synth.choose.job import _check_joint_work

    parts = [(m.chosen.schedule, m.chosen.view, m.collective.size, m.chosen.plan) for m in alone.members]
    _check_joint_work(parts)
    monkeypatch.setattr(evaluation, "MAX_SLICE_TRANSFERS", work - 1)  # the two together are one over it
    with pytest.raises(LimitError, match=f"{work:,} slice transfers, over the limit of {work - 1:,}"):
        _check_joint_work(parts)


def test_a_layout_with_star_runs_on_every_group_at_once():
    """Every tp group's allreduce together (tp=8:* on 4 x DGX H100): four collectives, one per box, named
    tp.0..tp.3, none slowing another (each box's NVLink is its own)."""
    fabric = load_topology(H100X4)
    the_job = job({"name": "tp", "collective": "allreduce", "size": "64MiB", "group": "tp=8:*", "algorithm": "ring"},
                  {"name": "dp", "collective": "allreduce", "size": "64MiB", "group": "dp=4:*", "algorithm": "ring"})
    assert [c.name for c in the_job.collectives] == [*(f"tp.{i}" for i in range(4)), *(f"dp.{i}" for i in range(8))]
    assert the_job.collectives[1].members == tuple(f"b1.gpu{i}" for i in range(8))
    assert the_job.collectives[5].members == ("b0.gpu1", "b1.gpu1", "b2.gpu1", "b3.gpu1")
    tp_only = job({"name": "tp", "collective": "allreduce", "size": "64MiB", "group": "tp=8:*", "algorithm": "ring"})
    result = choose_job(fabric, tp_only)
    assert [m.slowdown for m in result.members] == [1.0] * 4
    with pytest.raises(InputError, match=r"expected at most 16 collectives, got 32"):
        job({"collective": "allreduce", "size": "1MiB", "group": "dp=2:*"},
            {"collective": "allreduce", "size": "1MiB", "group": "tp=2:*"})
    with pytest.raises(InputError, match=r"collectives\[0\]\.group: tp=3 does not divide"):
        job({"collective": "allreduce", "size": "1MiB", "group": "tp=3:*"})
