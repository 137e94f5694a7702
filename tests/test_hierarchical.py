"""Hierarchical (Blue-Connect) collectives: box structure (given, from the topology, detected), verified
schedules, and clear reasons when there is no box structure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.algorithms import synthesize
from synth.algorithms.hierarchical import box_structure, detect_boxes
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.evaluate import evaluate
from synth.library import SHIPPED_FILES, load_topology
from synth.topology import Topology
from synth.verify import verify

#: The plain chunk-level α-β model of the closed forms: no protocol costs, every chunk one message.
IDEAL = {"protocol": "ideal", "slices": 1}

KINDS = [Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE]
GIGA = 1e9


@pytest.mark.parametrize("spec", sorted(set(SHIPPED_FILES.values())))
def test_shipped_topologies_verify_or_say_why(spec):
    topo = load_topology(spec)
    try:
        groups = box_structure(topo)
    except NotApplicable as reason:
        assert "box structure" in str(reason)
        with pytest.raises(NotApplicable, match="box structure"):
            synthesize(topo, Kind.ALLREDUCE, "hierarchical")
        return
    if topo.boxes is not None:
        assert [topo.boxes[r] for r in range(topo.num_ranks)] == [i for i, g in enumerate(groups) for _ in g]
    for kind in KINDS:
        verify(synthesize(topo, kind, "hierarchical"), topo)


def test_multi_box_systems_apply_and_single_boxes_do_not():
    for spec in ("dgx-a100:boxes=2", "ndv2:boxes=2", "dgx-h100:boxes=2", "mi250:boxes=2"):
        assert len(box_structure(load_topology(spec))) == 2
    for spec in ("dgx1", "dgx-a100", "switch:n=8", "torus:dims=4x4", "bigraph"):
        with pytest.raises(NotApplicable, match="no box structure"):
            synthesize(load_topology(spec), Kind.ALLREDUCE, "hierarchical")


def test_detected_boxes_match_the_declared_ones():
    """A multi-box file without 'box' fields: the bandwidth tiers give the same boxes."""
    for spec in ("dgx-a100:boxes=2", "ndv2:boxes=2", "mi250:boxes=2", "dgx2:boxes=2"):
        topo = load_topology(spec)
        data = topo.to_dict()
        for node in data["nodes"]:
            node.pop("box", None)
        stripped = Topology.from_dict(data)
        assert stripped.boxes is None
        assert detect_boxes(stripped) == list(topo.boxes)
        a = synthesize(topo, Kind.ALLREDUCE, "hierarchical")
        b = synthesize(stripped, Kind.ALLREDUCE, "hierarchical")
        verify(b, stripped)
        assert [t.path for t in a.transfers] == [t.path for t in b.transfers]


def test_box_rings_follow_nvlink_on_dgx1_boxes():
    topo = load_topology("ndv2:boxes=2")
    schedule = synthesize(topo, Kind.ALLREDUCE, "hierarchical")
    for members, ring in zip(schedule.params["box_members"], schedule.params["box_rings"], strict=True):
        gpus = [topo.gpus[members[i]] for i in ring]
        assert all(topo.has_link(gpus[i], gpus[(i + 1) % 8]) for i in range(8))


def test_boxes_option():
    topo = load_topology("switch:n=8")
    assert box_structure(topo, boxes=2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert box_structure(topo, boxes=[1, 0, 1, 0, 1, 0, 1, 0]) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    for kind in KINDS:
        verify(synthesize(topo, kind, "hierarchical", boxes=4), topo)
        verify(synthesize(topo, kind, "hierarchical", boxes=[0, 1, 2, 3, 0, 1, 2, 3]), topo)
    with pytest.raises(NotApplicable, match="equal size"):
        synthesize(topo, Kind.ALLREDUCE, "hierarchical", boxes=[0, 0, 0, 1, 1, 1, 1, 1])
    with pytest.raises(NotApplicable, match="at least 2 boxes"):
        synthesize(topo, Kind.ALLREDUCE, "hierarchical", boxes=1)
    with pytest.raises(NotApplicable, match="at least 2 gpus per box"):
        synthesize(topo, Kind.ALLREDUCE, "hierarchical", boxes=8)
    with pytest.raises(InputError, match="divides"):
        synthesize(topo, Kind.ALLREDUCE, "hierarchical", boxes=3)
    with pytest.raises(InputError, match="box index for each"):
        synthesize(topo, Kind.ALLREDUCE, "hierarchical", boxes=[0, 1])


def test_matches_the_two_level_formula():
    """Boxes of 4 on a 50 GB/s switch, 2 boxes over a 400 GB/s switch (a 2-dimensional system):
    reduce-scatter costs ((g-1)/g)·n/B_box + ((b-1)/b)·(n/g)/B_across, exactly."""
    topo = load_topology("multidim:sizes=4x2,bandwidths=50x400,latencies=0")
    schedule = synthesize(topo, Kind.REDUCESCATTER, "hierarchical", boxes=2)
    verify(schedule, topo)
    size = 2**30
    expected = 3 / 4 * size / (50 * GIGA) + 1 / 2 * (size / 4) / (400 * GIGA)
    assert abs(evaluate(schedule, topo, size, **IDEAL).time_s - expected) / expected < 1e-9


def test_beats_a_flat_ring_across_boxes():
    """On 2 DGX A100 the flat ring pushes all data through the 25 GB/s NICs twice over; the hierarchical
    schedule sends only 1/8 of it across boxes per gpu."""
    topo = load_topology("dgx-a100:boxes=2")
    size = 2**30
    ring = evaluate(synthesize(topo, Kind.ALLREDUCE, "ring"), topo, size, **IDEAL).time_s
    hierarchical = evaluate(synthesize(topo, Kind.ALLREDUCE, "hierarchical"), topo, size, **IDEAL).time_s
    assert hierarchical < ring / 2


@settings(max_examples=10, deadline=None)
@given(boxes=st.integers(2, 3), per_box=st.integers(2, 4), chunks_factor=st.integers(1, 2))
def test_random_box_shapes_verify(boxes, per_box, chunks_factor):
    topo = load_topology(f"leaf-spine:leaves={boxes},gpus_per_leaf={per_box},spines=2,uplink_bandwidth=10")
    assert len(box_structure(topo)) == boxes  # detected: the uplinks are the slow tier
    for kind in KINDS:
        verify(synthesize(topo, kind, "hierarchical", chunks=chunks_factor * topo.num_ranks), topo)
