"""Process groups (synth.groups): a collective on some of the gpus, on the whole fabric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import assert_refused, run_cli
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from synth.algorithms import synthesize
from synth.bounds import optimal_bound, time_bound
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable, VerificationError
from synth.evaluate import evaluate
from synth.groups import group_view, layout_groups, parse_group
from synth.library import load_topology
from synth.schedule import Schedule
from synth.verify import verify

TOPOLOGIES = ["ring:n=6", "switch:n=6", "dgx1", "dgx-a100:boxes=2", "dgx-h100:boxes=2", "torus:dims=3x2",
              "fully-connected:n=5"]
ALGORITHMS = {"ring": (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE),
              "nccl": (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE),
              "forest": (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE),
              "direct": (Kind.ALLGATHER, Kind.ALLTOALL)}
SIZE = 1 << 26
H100X4 = "dgx-h100:boxes=4"


@st.composite
def groups(draw: st.DrawFn) -> tuple[str, tuple[str, ...]]:
    spec = draw(st.sampled_from(TOPOLOGIES))
    gpus = load_topology(spec).gpus
    members = draw(st.lists(st.sampled_from(gpus), min_size=2, max_size=min(len(gpus), 6), unique=True))
    return spec, tuple(members)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups(), st.sampled_from(sorted(ALGORITHMS)), st.data())
def test_every_group_schedule_verifies_and_none_beats_the_group_bound(case: tuple[str, tuple[str, ...]],
                                                                      algorithm: str, data: st.DataObject) -> None:
    spec, members = case
    kind = data.draw(st.sampled_from(ALGORITHMS[algorithm]))
    fabric = load_topology(spec)
    try:
        view = group_view(fabric, members)
    except NotApplicable:
        assume(False)  # the members reach each other only through a non-member's kernel copy
        return
    try:
        schedule = synthesize(view, kind, algorithm)
    except NotApplicable:
        assume(False)
        return
    assert tuple(schedule.ranks) == members
    verify(schedule, fabric)  # on the fabric as it is: the ranks are some of its gpus
    verify(schedule, view)
    assert evaluate(schedule, view, SIZE).time_s >= time_bound(view, kind).time(SIZE) * (1 - 1e-9)


def test_layouts_split_the_way_frameworks_do() -> None:
    topo = load_topology(H100X4)
    assert parse_group(topo, "tp=8:2") == tuple(f"b2.gpu{i}" for i in range(8))
    assert parse_group(topo, "dp=4:3") == tuple(f"b{b}.gpu3" for b in range(4))
    tp, dp = layout_groups(topo, "tp", 8), layout_groups(topo, "dp", 4)
    assert sorted(g for group in tp for g in group) == sorted(topo.gpus) == sorted(g for group in dp for g in group)
    assert all(len(set(a) & set(b)) == 1 for a in tp for b in dp)  # every tp group meets every dp group once


@pytest.mark.parametrize(("text", "problem"), [
    ("b0.gpu0,b9.gpu0", "unknown gpu 'b9.gpu0'"), ("b0.gpu0,b0.gpu0", "named twice"),
    ("tp=5", "does not divide the 32 gpus"), ("b0.gpu1", "at least 2 gpus"), ("tp=8:4", "index 4"),
    ("pp=4", "unknown layout"), ("tp=x", "whole numbers"), ("dp=1", "at least 2 gpus")])
def test_bad_groups_are_refused_naming_the_field(text: str, problem: str) -> None:
    with pytest.raises(InputError, match="--group") as error:
        parse_group(load_topology(H100X4), text)
    assert problem in str(error.value)


def test_a_group_its_members_cannot_join_without_a_non_member_is_refused() -> None:
    topo = load_topology(H100X4)  # rail 3 and rail 1 meet only through a gpu of the box
    with pytest.raises(NotApplicable, match="outside the group"):
        group_view(topo, ("b0.gpu3", "b1.gpu1"))


def test_the_verifier_refuses_a_path_through_a_non_member_that_does_not_forward() -> None:
    topo = load_topology("dgx1")
    view = group_view(topo, ("gpu0", "gpu1", "gpu5"))
    schedule = synthesize(view, Kind.ALLGATHER, "ring")
    relayed = [t for t in schedule.transfers if len(t.path) > 2]
    assert not relayed  # routing sends gpu to gpu on NVLink; a relay would be a member (its own transfer)
    data = schedule.to_dict()
    first = data["transfers"][0]
    src, dst = first["path"][0], first["path"][-1]
    first["path"] = [src, "gpu2", dst]  # gpu2 is no member and no forwarding gpu
    with pytest.raises(VerificationError):
        verify(Schedule.from_dict(data), topo)


def test_a_group_bound_is_the_members_cut_on_the_fabric() -> None:
    topo = load_topology(H100X4)
    tp = optimal_bound(group_view(topo, parse_group(topo, "tp=8")))
    dp = optimal_bound(group_view(topo, parse_group(topo, "dp=4")))
    assert tp.num_ranks == 8 and float(tp.rate_GBps) == pytest.approx(450 / 7)  # one gpu's 450 GB/s NVLink
    assert dp.num_ranks == 4 and float(dp.rate_GBps) == pytest.approx(50 / 3)  # one 400 Gb/s NIC per box


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):  # noqa: ANN001, ANN201 (pytest fixtures)
    """``cli(*args)`` runs synth in this process from an empty working folder."""
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_cli(list(args), capsys, monkeypatch)


@pytest.mark.parametrize("group", ["tp=8", "dp=4"])
def test_done_when_tp_and_dp_allreduce_on_four_h100_boxes(cli, tmp_path: Path, group: str) -> None:  # noqa: ANN001
    made = cli("generate", H100X4, "-c", "allreduce", "-a", "ring", "--group", group, "-o", "s.json")
    assert made.code == 0 and "verified" in made.out, made.err
    assert cli("verify", "s.json").code == 0
    bound = cli("bound", H100X4, "--group", group, "--json")
    assert bound.code == 0, bound.err
    report = json.loads(bound.out)
    assert report["gpus"] == len(report["group"]) == (8 if group == "tp=8" else 4)
    assert report["allreduce_algbw_GBps"] == pytest.approx(8 * 450 / 7 / 2 if group == "tp=8" else 4 * 50 / 3 / 2)
    chakra = cli("export", "chakra", "s.json", "-o", "ch", "-s", "1MiB")
    assert chakra.code == 0, chakra.err
    members = json.loads((tmp_path / "ch" / "comm_group.json").read_text())["1"]
    assert members == (list(range(8)) if group == "tp=8" else [0, 8, 16, 24])
    assert len(list((tmp_path / "ch").glob("workload.*.et"))) == len(members)
    msccl = cli("export", "msccl", "s.json", "-o", "s.xml")
    assert msccl.code == 0, msccl.err
    assert f'ngpus="{len(members)}"' in (tmp_path / "s.xml").read_text()


@pytest.mark.parametrize("command", ["generate", "bound", "compare"])
def test_the_cli_refuses_a_bad_group_in_one_line(cli, command: str) -> None:  # noqa: ANN001
    args = [command, H100X4, "-c", "allreduce", "--group", "b0.gpu0,b0.gpu0"]
    assert_refused(cli(*args), "--group", "named twice")


@pytest.mark.parametrize(("layout", "lp_algbw"), [("dp=2", 50.0), ("tp=8", None)])
def test_mcf_on_a_group_relays_only_through_members(layout, lp_algbw) -> None:
    """The alltoall LP on a group lets flow cross only members and forwarding nodes: dp=2 on 2 x DGX A100
    (gpu 0 of each box) is held to the two members' own 25 GB/s NICs (algbw 2 x 25), where relaying
    through the other gpus' NICs would give far more; mcf's schedule verifies and reaches the LP."""
    from synth.bounds import alltoall_bound
    from synth.evaluate import congestion

    topo = load_topology("dgx-a100:boxes=2")
    view = group_view(topo, parse_group(topo, layout))
    lp = alltoall_bound(view).lp_algbw_GBps
    if lp_algbw is not None:
        assert lp == pytest.approx(lp_algbw, rel=1e-9)
    schedule = synthesize(view, Kind.ALLTOALL, "mcf")
    verify(schedule, view)
    members = set(view.gpus)
    assert all(node in members or not view.is_gpu(node) for t in schedule.transfers for node in t.path)
    achieved = 1 / (float(congestion(schedule, view).seconds_per_byte) * 1e9)
    assert achieved == pytest.approx(lp, rel=0.02)


def test_a_group_exports_for_astra_sim_on_its_whole_fabric(tmp_path: Path) -> None:
    """dp=4 of switch:n=8: traces ASTRA-sim runs on the whole fabric (astra-sim 518bd51, every member at
    synth's prediction, the non-members idle): a workload per fabric rank, the non-members' one idle node,
    the communicator (id 1: ASTRA-sim reserves 0) in comm_group.json, passed by run_astrasim.sh, which
    checks the members only."""
    from synth.export.chakra import export_chakra
    from synth.proto import et_def

    fabric = load_topology("switch:n=8")
    view = group_view(fabric, parse_group(fabric, "dp=4"))
    report = export_chakra(synthesize(view, Kind.ALLREDUCE, "ring"), view, [1 << 20], tmp_path / "et")
    folder = tmp_path / "et"
    assert json.loads((folder / "comm_group.json").read_text()) == {"1": [0, 2, 4, 6]}
    assert sorted(p.name for p in folder.glob("workload.*.et")) == [f"workload.{r}.et" for r in range(8)]
    assert sorted(p.name for p in folder.glob("ring_allreduce.*.et")) == [f"ring_allreduce.{r}.et" for r in range(4)]
    for rank in range(8):
        nodes = et_def.decode_records((folder / f"workload.{rank}.et").read_bytes())[1:]
        node = et_def.Node()
        node.ParseFromString(nodes[0])
        assert (node.name == "idle") == (rank % 2 == 1)
    assert "Switch" in (folder / "network.yml").read_text() and "[ 8 ]" in (folder / "network.yml").read_text()
    script = (folder / "run_astrasim.sh").read_text()
    assert '--comm-group-configuration="$4comm_group.json"' in script
    assert report.sets[0].predicted_finish_ns is not None
    predicted = report.sets[0].predicted_finish_ns
    assert predicted[1::2] == [None] * 4 and len(set(predicted[0::2])) == 1
    assert "runs on the whole fabric" in (folder / "NOTE.txt").read_text()
    # members out of ascending fabric order: ASTRA-sim would pick their traces in sorted order, so the export
    # stays on a network of the members alone
    shuffled = group_view(fabric, ("gpu5", "gpu1", "gpu2"))
    export_chakra(synthesize(shuffled, Kind.ALLGATHER, "direct"), shuffled, [1 << 20], tmp_path / "mixed")
    assert len(list((tmp_path / "mixed").glob("workload.*.et"))) == 3
    assert "not in ascending fabric rank order" in (tmp_path / "mixed" / "NOTE.txt").read_text()


@pytest.mark.parametrize("shift", [0, 1])
def test_run_astrasim_checks_the_members_and_not_the_idle_ranks(tmp_path: Path, shift: int) -> None:
    """run_astrasim.sh with a stand-in binary that prints ASTRA-sim's finish lines: the members' times must
    equal the prediction (one ns off fails, exit 1), the idle ranks' any time passes."""
    import os
    import subprocess

    from synth.export.chakra import export_chakra

    fabric = load_topology("switch:n=8")
    view = group_view(fabric, parse_group(fabric, "dp=4"))
    report = export_chakra(synthesize(view, Kind.ALLREDUCE, "ring"), view, [1 << 20], tmp_path / "et")
    predicted = report.sets[0].predicted_finish_ns
    assert predicted is not None
    lines = [f"echo 'sys[{rank}] finished, {1 if t is None else t + shift} cycles'" for rank, t in enumerate(predicted)]
    fake = tmp_path / "astra"
    fake.write_text("#!/usr/bin/env bash\n" + "\n".join(lines) + "\n")
    fake.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "et" / "run_astrasim.sh")], capture_output=True, text=True,
                          env={**os.environ, "ASTRA_SIM": str(fake)}, timeout=60)
    assert done.returncode == shift, done.stdout + done.stderr
    assert ("every rank finished when synth predicted" in done.stdout) == (shift == 0)
