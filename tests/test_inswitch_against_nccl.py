"""In-switch algorithms against what NCCL runs, the checks that take seconds: synth's best against the nccl row and NCCL's
in-switch algorithms (the full sweep over systems and sizes is in bench/bench_inswitch.py)."""

from __future__ import annotations

import pytest

from synth.collectives import Kind
from synth.compare import run_all
from synth.library import load_topology
from synth.verify import verify

SUPERPOD = "dgx-superpod:sus=1,nodes_per_su=4,sharp=true"


def _algbw(rows, name):
    return next(r.algbw_GBps for r in rows if r.algorithm == name)


def test_dgx_h100_allreduce_1gib_nccl_row_is_nvls_and_synth_is_not_slower():
    topo = load_topology("dgx-h100")
    rows, _, schedules = run_all(topo, [Kind.ALLREDUCE], [2**30], algorithms=["nccl", "nvls", "insw", "ring"])
    assert schedules[("nccl", "allreduce", 2**30)].params["choice"]["algorithm"] == "nvls"
    best = max(r.algbw_GBps for r in rows if r.algorithm != "nccl")
    assert best >= _algbw(rows, "nccl") > _algbw(rows, "ring")
    assert all(r.percent_of_bound is not None and r.percent_of_bound <= 100.0 for r in rows)


@pytest.mark.parametrize("size", [2**12, 2**16])
def test_superpod_with_sharp_insw_matches_collnet_and_nvls_tree_at_small_sizes(size):
    rows, _, _ = run_all(load_topology(SUPERPOD), [Kind.ALLREDUCE], [size],
                         algorithms=["collnet", "nvls_tree", "insw"])
    assert _algbw(rows, "insw") >= max(_algbw(rows, "collnet"), _algbw(rows, "nvls_tree")) * (1 - 1e-9)


SIZES = [2**12, 2**16, 2**20, 2**24, 2**28, 2**32]  # 4 KiB to 4 GiB in powers of 16


@pytest.mark.parametrize("spec", [SUPERPOD, "dgx-superpod:sus=1,nodes_per_su=2,sharp=true"])
@pytest.mark.slow
def test_superpod_with_sharp_insw_matches_or_beats_every_nccl_shape_from_4kib_to_4gib(spec):
    topo = load_topology(spec)
    rows, _, schedules = run_all(topo, [Kind.ALLREDUCE], SIZES, algorithms=["collnet", "nvls_tree", "nccl", "insw"])
    for size in SIZES:
        at = [r for r in rows if r.size == size]
        theirs = max(_algbw(at, name) for name in ("collnet", "nvls_tree", "nccl"))
        assert _algbw(at, "insw") >= theirs * (1 - 1e-9), (spec, size)
        for name in ("collnet", "nvls_tree", "insw"):
            verify(schedules[(name, Kind.ALLREDUCE, size)], topo)
    # at 1 MiB the win is the rail chunking (8 chunks, not a multiple of the 32 ranks); at 4 GiB a split share
    variants = {size: schedules[("insw", Kind.ALLREDUCE, size)].params["variant"] for size in SIZES}
    if topo.num_ranks == 32:
        assert variants[2**20].endswith("8 chunks by rail") and variants[2**32] == "share=7/8"


def _insw_beats_nvls_tree_and_nccl(spec, sizes):
    topo = load_topology(spec)
    rows, _, schedules = run_all(topo, [Kind.ALLREDUCE], sizes, algorithms=["nvls_tree", "nccl", "insw"])
    for size in sizes:
        at = [r for r in rows if r.size == size]
        assert _algbw(at, "insw") >= max(_algbw(at, "nvls_tree"), _algbw(at, "nccl")) * (1 - 1e-9), size
        verify(schedules[("insw", Kind.ALLREDUCE, size)], topo)


@pytest.mark.slow
def test_two_dgx_h100_boxes_insw_matches_or_beats_nvls_tree_and_nccl_from_4kib_to_4gib():
    # dgx-h100 has no IB SHARP option (no collnet); its boxes still reduce in NVLS, and nvls_tree runs
    _insw_beats_nvls_tree_and_nccl("dgx-h100:boxes=2", SIZES)


@pytest.mark.slow
def test_four_dgx_h100_boxes_insw_beats_nvls_tree_and_nccl_from_16mib_to_4gib():
    _insw_beats_nvls_tree_and_nccl("dgx-h100:boxes=4", SIZES[3:])


def test_four_dgx_h100_boxes_insw_matches_nvls_tree_below_16mib():
    # without SHARP the boxes meet point to point: on 4 boxes double binary trees of the rail gpus (2 log2 B
    # steps) beat the rail rings (2 (B - 1)) at small sizes, and insw tries them
    _insw_beats_nvls_tree_and_nccl("dgx-h100:boxes=4", SIZES[:3])


def test_insw_between_boxes_on_trees_is_nvls_trees_shape():
    """All in the switches, 2B chunks by rail, trees between boxes: NVLS-Tree's schedule, the same time."""
    from synth.algorithms.insw import insw
    from synth.algorithms.nvls_tree import nvls_tree
    from synth.evaluate import evaluate

    topo = load_topology("dgx-h100:boxes=4")
    ours = insw(topo, Kind.ALLREDUCE, chunks=16, between="tree")
    verify(ours, topo)
    assert "double binary trees" in ours.params["levels"]
    theirs = nvls_tree(topo, Kind.ALLREDUCE)
    for size in (2**12, 2**20):
        assert evaluate(ours, topo, size).time_s == evaluate(theirs, topo, size).time_s


def test_insw_trees_between_boxes_are_for_allreduce_only():
    from synth.algorithms.insw import insw
    from synth.errors import InputError

    topo = load_topology("dgx-h100:boxes=2")
    with pytest.raises(InputError, match="between"):
        insw(topo, Kind.REDUCESCATTER, between="tree")
    with pytest.raises(InputError, match="ring or tree"):
        insw(topo, Kind.ALLREDUCE, between="star")
