"""NVLS, NVLS-Tree and CollNet (in-switch reductions as NCCL 2.23 runs them), and ``nccl`` choosing them
where NCCL 2.23.4's tuning model would; every schedule verified."""

from __future__ import annotations

import pytest

from synth.algorithms import synthesize
from synth.algorithms.nccl import nccl
from synth.collectives import Kind
from synth.compare import baseline_description
from synth.errors import InputError, NotApplicable
from synth.evaluate import evaluate
from synth.library import load_topology
from synth.verify import verify

KIB, MIB, GIB = 1024, 1 << 20, 1 << 30
SUPERPOD = "dgx-superpod:sus=1,nodes_per_su=4,sharp=true"


# ---------------------------------------------------------------------------------- the algorithms
@pytest.mark.parametrize("spec", ["dgx-h100", "dgx-b200", "gb200-nvl72"])
def test_nvls_verifies_in_one_nvlink_domain(spec):
    topo = load_topology(spec)
    for kind in (Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.ALLGATHER):
        schedule = synthesize(topo, kind, "nvls")
        assert verify(schedule, topo).transfers == len(schedule.transfers) and schedule.switch_ops


def test_nvls_refuses_a_fabric_whose_switch_does_not_reduce():
    with pytest.raises(NotApplicable, match="does not reduce|no switch links"):
        synthesize(load_topology("dgx-a100"), Kind.ALLREDUCE, "nvls")


@pytest.mark.parametrize("spec", ["dgx-h100:boxes=2", SUPERPOD])
def test_nvls_tree_verifies_across_boxes(spec):
    topo = load_topology(spec)
    schedule = synthesize(topo, Kind.ALLREDUCE, "nvls_tree")
    assert verify(schedule, topo).transfers == len(schedule.transfers)
    boxes = topo.num_ranks // 8
    assert schedule.chunks == 16 and len(schedule.switch_ops) == 16 * boxes * 2  # a reduce and a multicast per box
    kinds = {op.switch.split(".")[1] for op in schedule.switch_ops}
    assert kinds == {"nvs"}  # in the boxes only; between them the tree runs over the NICs
    crossing = [t for t in schedule.transfers if not t.leg and not t.local]
    assert crossing and all(any(".nic" in node for node in t.path) for t in crossing)


def test_nvls_tree_refuses_one_box_and_boxes_without_nvls():
    with pytest.raises(NotApplicable, match="several equal boxes"):
        synthesize(load_topology("dgx-h100"), Kind.ALLREDUCE, "nvls_tree")
    with pytest.raises(NotApplicable, match="does not reduce|does not multicast|no switch"):
        synthesize(load_topology("dgx-a100:boxes=2"), Kind.ALLREDUCE, "nvls_tree")


@pytest.mark.parametrize("shape", ["auto", "nvls", "direct", "chain"])
def test_collnet_verifies_through_the_sharp_leaves(shape):
    topo = load_topology(SUPERPOD)
    schedule = synthesize(topo, Kind.ALLREDUCE, "collnet", shape=shape)
    assert verify(schedule, topo).transfers == len(schedule.transfers)
    assert schedule.params["shape"] == ("nvls" if shape == "auto" else shape)
    leaves = [op for op in schedule.switch_ops if "leaf" in op.switch]
    assert len(leaves) == schedule.chunks and all(op.kind == "reduce" for op in leaves)
    # each leaf reduces one rail: chunk c's rail is c mod 8, and every box's head of that rail feeds it
    assert {op.switch for op in leaves} == {f"su0.leaf{r}" for r in range(8)}


def test_collnet_uses_direct_in_boxes_without_nvls():
    topo = load_topology(SUPERPOD + ",nvls=false")
    schedule = synthesize(topo, Kind.ALLREDUCE, "collnet")
    assert schedule.params["shape"] == "direct" and verify(schedule, topo)
    with pytest.raises(NotApplicable, match="no NVLS switch"):
        synthesize(topo, Kind.ALLREDUCE, "collnet", shape="nvls")


def test_collnet_refuses_networks_without_sharp():
    with pytest.raises(NotApplicable, match="IB SHARP"):
        synthesize(load_topology("dgx-h100:boxes=2"), Kind.ALLREDUCE, "collnet")
    with pytest.raises(NotApplicable, match="several equal boxes"):
        synthesize(load_topology("dgx-h100"), Kind.ALLREDUCE, "collnet")
    with pytest.raises(InputError, match="shape"):
        synthesize(load_topology(SUPERPOD), Kind.ALLREDUCE, "collnet", shape="ring")


# ------------------------------------------------------------------------------------------- nccl
def test_nccl_chooses_nvls_on_dgx_h100_at_1gib_and_2_16_the_ring():
    topo = load_topology("dgx-h100")
    new = nccl(topo, Kind.ALLREDUCE, size=GIB)
    old = nccl(topo, Kind.ALLREDUCE, size=GIB, version="2.16")
    assert (new.params["choice"]["algorithm"], new.params["choice"]["version"]) == ("nvls", "2.23.4-1")
    assert (old.params["choice"]["algorithm"], old.params["choice"]["version"]) == ("ring", "2.16.5-1")
    assert new.params["nccl_version"] == "2.23.4-1" and new.params["built_by"] == "nvls"
    assert new.algorithm == "nccl" and new.switch_ops and verify(new, topo)
    # tuning.cc 2.23.4: NVLS graph 8 channels x 50 GB/s (450 GB/s links / 9), bus bw x 5/6; 25 us NVLink latency
    model = new.params["model"]["nvls/Simple"]
    assert model["time_us"] == pytest.approx(25 + GIB / (1000 * 8 * 50 * 5 / 6), rel=1e-5)
    assert new.params["graph"]["nvls"] == {"channels": 8, "bw_intra": 50.0, "bw_inter": 50.0}
    assert new.params["choice"]["channels"] == 16  # NCCL_NVLS_NCHANNELS


def test_nccl_on_dgx_a100_makes_the_choices_it_made_before():
    """Same algorithm everywhere, and the same allreduce protocol; 2.23's tables move a few protocol
    boundaries of the other collectives (e.g. broadcast at 64 MiB on one DGX A100: LL128 in 2.16, Simple)."""
    for spec in ("dgx-a100", "dgx-a100:boxes=2"):
        topo = load_topology(spec)
        for kind in (Kind.ALLREDUCE, Kind.ALLGATHER, Kind.BROADCAST):
            for size in (KIB, MIB, 64 * MIB, GIB):
                new, old = (nccl(topo, kind, size=size, version=v).params["choice"] for v in ("2.23", "2.16"))
                assert new["algorithm"] == old["algorithm"], (spec, kind, size)
                assert new["algorithm"] in ("ring", "tree")  # no NVLS on Ampere, no SHARP
                if kind == Kind.ALLREDUCE:
                    assert new["protocol"] == old["protocol"], (spec, size)
    assert nccl(load_topology("dgx-a100"), Kind.ALLREDUCE, size=GIB).params["choice"]["algorithm"] == "ring"


@pytest.mark.parametrize("spec, algorithm, built_by", [
    ("gb200-nvl72", "nvls", "nvls"),
    ("dgx-h100:boxes=2", "nvlstree", "nvls_tree"),
    (SUPERPOD, "nvls", "collnet"),  # NVLS on several nodes is NVLS + SHARP (CollNet)
])
def test_nccl_picks_the_in_switch_algorithms_at_1gib_and_they_beat_2_16(spec, algorithm, built_by):
    topo = load_topology(spec)
    new = nccl(topo, Kind.ALLREDUCE, size=GIB)
    assert (new.params["choice"]["algorithm"], new.params["built_by"]) == (algorithm, built_by)
    verify(new, topo)
    old = nccl(topo, Kind.ALLREDUCE, size=GIB, version="2.16")
    assert evaluate(new, topo, GIB).algbw_GBps > evaluate(old, topo, GIB).algbw_GBps


def test_nccl_forced_in_switch_algorithms_and_their_refusals():
    pod = load_topology(SUPERPOD)
    for algo, built in (("nvlstree", "nvls_tree"), ("collnet", "collnet"), ("collnet_direct", "collnet")):
        schedule = nccl(pod, Kind.ALLREDUCE, size=64 * MIB, algo=algo)
        assert schedule.params["built_by"] == built and "forced" in schedule.params["choice"]["reason"]
        verify(schedule, pod)
    chain = nccl(pod, Kind.ALLREDUCE, size=GIB, algo="collnet_chain")
    assert chain.params["shape"] == "chain" and verify(chain, pod)
    with pytest.raises(NotApplicable, match="NVLS needs a Hopper"):
        nccl(load_topology("dgx-a100"), Kind.ALLREDUCE, size=GIB, algo="nvls")
    with pytest.raises(NotApplicable, match="IB SHARP"):
        nccl(load_topology("dgx-h100:boxes=2"), Kind.ALLREDUCE, size=GIB, algo="collnet")
    with pytest.raises(NotApplicable, match="across nodes only"):
        nccl(load_topology("dgx-h100"), Kind.ALLREDUCE, size=GIB, algo="nvlstree")
    with pytest.raises(NotApplicable, match="CollNet support"):
        nccl(load_topology("dgx-h100:boxes=2"), Kind.ALLREDUCE, size=GIB, algo="nvls")
    with pytest.raises(InputError, match="algo"):
        nccl(load_topology("dgx-h100"), Kind.ALLREDUCE, size=GIB, algo="nvls", version="2.16")
    with pytest.raises(InputError, match="version"):
        nccl(load_topology("dgx-h100"), Kind.ALLREDUCE, size=GIB, version="2.99")


def test_nccl_nvls_allgather_on_one_node_and_no_nvls_without_capabilities():
    nvl72 = load_topology("gb200-nvl72")
    gather = nccl(nvl72, Kind.ALLGATHER, size=GIB)
    assert gather.params["choice"]["algorithm"] == "nvls" and verify(gather, nvl72)
    plain = load_topology("dgx-h100:nvls=false")  # Hopper, but the switch neither reduces nor multicasts
    assert "graph" in (s := nccl(plain, Kind.ALLREDUCE, size=GIB)).params and "nvls" not in s.params["graph"]
    assert s.params["choice"]["algorithm"] == "ring"
    # broadcast and reduce have only the ring in either release
    assert nccl(load_topology("dgx-h100"), Kind.BROADCAST, size=GIB).params["choice"]["algorithm"] == "ring"


def test_cli_style_version_option_and_baseline_description():
    topo = load_topology("dgx-h100")
    assert synthesize(topo, Kind.ALLREDUCE, "nccl", size="1GiB", version=2.16).params["choice"]["algorithm"] == "ring"
    assert "NCCL 2.23 would run" in baseline_description(topo) and "NVLS" in baseline_description(topo)
    assert "NCCL 2.16 would run" in baseline_description(topo, version="2.16")
    assert "CollNet" in baseline_description(load_topology(SUPERPOD))
