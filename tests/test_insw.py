"""insw: a collective split between in-switch operations and a ring (synth.algorithms.insw), and the size
choice of the share (synth.choose.insw)."""

from __future__ import annotations

from fractions import Fraction

import pytest

import synth
from synth import Kind, load_topology, verify
from synth.algorithms import synthesize as construct
from synth.algorithms.insw import insw, parse_share, split_counts
from synth.bounds import time_bound
from synth.choose.insw import analytic_share
from synth.errors import InputError, NotApplicable
from synth.evaluate import evaluate

GIB = 2**30
SYSTEMS = ["dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72"]
MULTI_BOX = ["dgx-h100:boxes=2", "dgx-superpod:sus=1,nodes_per_su=4,sharp=true"]


@pytest.mark.parametrize("name", SYSTEMS)
@pytest.mark.parametrize("kind", [Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.ALLGATHER])
def test_every_share_verifies_in_one_nvlink_domain(name, kind):
    topo = load_topology(name)
    for share in ("0", "1/2", "3/4", "1"):
        for fused in (True, False):
            schedule = insw(topo, kind, switch_share=share, fused=fused)
            verify(schedule, topo)
            assert schedule.params["switch_share"] == share


@pytest.mark.parametrize("name", MULTI_BOX)
@pytest.mark.parametrize("kind", [Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.ALLGATHER])
def test_every_share_verifies_per_level_on_several_boxes(name, kind):
    topo = load_topology(name)
    for share in ("0", "3/4", "1"):
        for network in (True, False):
            schedule = insw(topo, kind, switch_share=share, network=network)
            verify(schedule, topo)


def test_on_the_superpod_with_sharp_the_leaf_reduces_between_boxes_and_rail_rings_do_without():
    topo = load_topology("dgx-superpod:sus=1,nodes_per_su=4,sharp=true")
    sharp = insw(topo, Kind.ALLREDUCE)
    leaves = {op.switch for op in sharp.switch_ops if "leaf" in op.switch}
    assert leaves == {f"su0.leaf{r}" for r in range(8)}
    # one in-network reduce per chunk: an input from each box's rail gpu, its sum multicast back to each
    inputs, outputs = sharp.legs()
    leaf_ops = [op.id for op in sharp.switch_ops if "leaf" in op.switch]
    assert all(len(inputs[k]) == 4 and len(outputs[k]) == 4 for k in leaf_ops)
    assert "in-network reduction" in sharp.params["levels"]
    rings = insw(topo, Kind.ALLREDUCE, network=False)
    assert not any("leaf" in op.switch for op in rings.switch_ops) and "rings" in rings.params["levels"]
    assert evaluate(sharp, topo, GIB).time_s < evaluate(rings, topo, GIB).time_s


def test_share_one_as_the_nvls_pair_is_the_nvls_schedule_and_takes_its_time():
    topo = load_topology("dgx-h100")
    ours = insw(topo, Kind.ALLREDUCE, switch_share=1, fused=False)
    nvls = construct(topo, Kind.ALLREDUCE, "nvls")
    assert ours.transfers == nvls.transfers and ours.switch_ops == nvls.switch_ops
    for size in (2**20, GIB):
        assert evaluate(ours, topo, size).time_s == evaluate(nvls, topo, size).time_s


def test_share_zero_has_no_switch_ops_and_is_the_ring():
    topo = load_topology("dgx-h100")
    schedule = insw(topo, Kind.ALLREDUCE, switch_share=0)
    ring = construct(topo, Kind.ALLREDUCE, "ring")
    assert schedule.switch_ops == () and schedule.format == "synth.schedule/2"
    assert evaluate(schedule, topo, GIB).time_s == evaluate(ring, topo, GIB).time_s


def test_the_share_sets_how_many_chunks_the_switch_takes():
    topo = load_topology("dgx-h100")
    schedule = insw(topo, Kind.ALLREDUCE, switch_share="3/4")
    in_switch = {op.chunk for op in schedule.switch_ops}
    assert schedule.chunks == 32 and len(in_switch) == 24  # 3 of each rank's 4 chunks
    assert {t.chunk for t in schedule.transfers if not t.leg} == set(range(32)) - in_switch
    assert insw(topo, Kind.ALLREDUCE, switch_share=0.8, chunks=40).params["switch_share"] == "4/5"
    assert split_counts(Fraction(5, 6), 8) == (7, 1)
    assert parse_share("5/8") == Fraction(5, 8) and parse_share(0.25) == Fraction(1, 4)


def test_the_choice_at_one_gib_on_dgx_h100_beats_nvls_and_stays_above_the_bound():
    topo = load_topology("dgx-h100")
    chosen = synth.synthesize(topo, "allreduce", "insw", size="1GiB")
    verify(chosen, topo)
    nvls = synth.synthesize(topo, "allreduce", "nvls")
    ours, theirs = evaluate(chosen, topo, GIB), evaluate(nvls, topo, GIB)
    bound = time_bound(topo, Kind.ALLREDUCE)
    assert ours.time_s < theirs.time_s * 0.9  # NVLS is held to the switch's 334.5 GB/s; the split is not
    assert ours.time_s >= bound.time(GIB)
    assert 0 < Fraction(chosen.params["switch_share"]) < 1 and chosen.params["fused"] is True
    assert chosen.params["modelled_time_s"] == ours.time_s
    assert ours.algbw_GBps > 0.9 * bound.algbw_GBps(GIB)
    times = chosen.params["size_choice"]["time_s"]
    assert times["share=1, nvls pair"] == theirs.time_s  # nvls itself is a candidate


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-b200"])
@pytest.mark.parametrize("size", [2**20, 2**26, GIB])
def test_the_choice_is_never_slower_than_nvls(name, size):
    topo = load_topology(name)
    chosen = synth.synthesize(topo, "allreduce", "insw", size=size)
    nvls = synth.synthesize(topo, "allreduce", "nvls")
    assert evaluate(chosen, topo, size).time_s <= evaluate(nvls, topo, size).time_s
    assert evaluate(chosen, topo, size).time_s >= time_bound(topo, Kind.ALLREDUCE).time(size)


def test_on_several_boxes_the_choice_splits_the_box_level_and_weighs_the_network_switch_against_rail_rings():
    topo = load_topology("dgx-superpod:sus=1,nodes_per_su=4,sharp=true")
    chosen = synth.synthesize(topo, "allreduce", "insw", size="1GiB")
    verify(chosen, topo)
    times = chosen.params["size_choice"]["time_s"]
    assert "share=1" in times and any(key.endswith("rail rings") for key in times)
    ours = evaluate(chosen, topo, GIB).time_s
    assert ours <= times["share=1"] and ours >= time_bound(topo, Kind.ALLREDUCE).time(GIB)
    assert Fraction(chosen.params["switch_share"]) < 1  # the box switch's 334.5 GB/s is below the eight NICs'


def test_the_analytic_share_is_the_bounds_split():
    # 2(G-1) M / (I + (G-2) R) with G = 8, I = 8 x 450, R = 334.5: f = R T / M = 334.5 x 14 / 5607
    assert analytic_share(load_topology("dgx-h100"), Kind.ALLREDUCE) == Fraction(3345 * 14, 56070)
    assert analytic_share(load_topology("dgx-b200"), Kind.ALLREDUCE) == 1  # no switch limit: all in the switch


def test_a_fixed_share_with_a_size_is_built_as_asked():
    topo = load_topology("dgx-h100")
    schedule = synth.synthesize(topo, "allreduce", "insw", size="64MiB", switch_share="1/2")
    assert schedule.params["switch_share"] == "1/2" and schedule.params["size"] == 2**26
    assert "size_choice" not in schedule.params


def test_refusals_name_the_reason():
    with pytest.raises(NotApplicable, match="insw allreduce on dgx-a100: .*does not reduce.*ring or forest"):
        insw(load_topology("dgx-a100"), Kind.ALLREDUCE)
    with pytest.raises(NotApplicable, match="inside box .*does not reduce"):
        insw(load_topology("dgx-a100:boxes=2"), Kind.ALLREDUCE)
    with pytest.raises(NotApplicable, match="insw does not do"):
        insw(load_topology("dgx-h100"), Kind.ALLTOALL)
    with pytest.raises(NotApplicable):
        synth.synthesize(load_topology("dgx-a100"), "allreduce", "insw", size="1GiB")
    with pytest.raises(InputError, match="switch_share"):
        insw(load_topology("dgx-h100"), Kind.ALLREDUCE, switch_share="5/4")
    with pytest.raises(InputError, match="switch_share"):
        insw(load_topology("dgx-h100"), Kind.ALLREDUCE, switch_share="most")
    with pytest.raises(InputError, match="chunks"):
        insw(load_topology("dgx-h100"), Kind.ALLREDUCE, chunks=12)


def test_compare_runs_the_choice_per_size_and_reports_its_modelled_time():
    from synth.compare import run_all

    topo = load_topology("dgx-h100")
    sizes = [2**20, GIB]
    rows, _, schedules = run_all(topo, [Kind.ALLREDUCE], sizes, algorithms=["insw", "nvls"])
    ours = {r.size: r for r in rows if r.algorithm == "insw"}
    theirs = {r.size: r for r in rows if r.algorithm == "nvls"}
    for size in sizes:
        schedule = schedules[("insw", Kind.ALLREDUCE, size)]
        assert schedule.params["size"] == size  # made for that size
        assert ours[size].time_s == schedule.params["modelled_time_s"] <= theirs[size].time_s
    assert schedules[("insw", Kind.ALLREDUCE, 2**20)].params["switch_share"] == "1"
    assert schedules[("insw", Kind.ALLREDUCE, GIB)].params["switch_share"] == "5/6"


@pytest.mark.parametrize("chunks", [8, 16, 24])
@pytest.mark.parametrize("share", ["1", "1/2", "0"])
def test_an_allreduce_on_several_boxes_takes_chunks_by_rail_and_verifies(chunks, share):
    topo = load_topology("dgx-superpod:sus=1,nodes_per_su=4,sharp=true")
    schedule = insw(topo, Kind.ALLREDUCE, chunks=chunks, switch_share=share)
    verify(schedule, topo)
    per_rail = chunks // 8
    built = Fraction(schedule.params["switch_share"])
    assert schedule.chunks == chunks and built * per_rail == len({op.chunk for op in schedule.switch_ops
                                                                  if "leaf" not in op.switch}) / 8
    # every chunk stays on one rail: its in-network reduce (if any) is the leaf of rail chunk mod 8
    for op in schedule.switch_ops:
        if "leaf" in op.switch:
            assert op.switch == f"su0.leaf{op.chunk % 8}"
    with pytest.raises(InputError, match="multiple of 8 .*one rail"):
        insw(topo, Kind.ALLREDUCE, chunks=12)
    with pytest.raises(InputError, match="multiple of 32"):
        insw(topo, Kind.REDUCESCATTER, chunks=8)


def test_at_one_mib_on_the_superpod_the_choice_cuts_by_rail_and_beats_collnet():
    topo = load_topology("dgx-superpod:sus=1,nodes_per_su=4,sharp=true")
    chosen = synth.synthesize(topo, "allreduce", "insw", size="1MiB")
    verify(chosen, topo)
    collnet = construct(topo, Kind.ALLREDUCE, "collnet")
    assert chosen.chunks == 8 and chosen.params["variant"] == "share=1, 8 chunks by rail"
    assert evaluate(chosen, topo, 2**20).time_s < evaluate(collnet, topo, 2**20).time_s
    assert "share=1, 16 chunks by rail" in chosen.params["size_choice"]["time_s"]
