"""nccl: NCCL's rail-aware channels, its hierarchical double binary tree, and its tuning model's choice
(NCCL v2.16.5 tuning.cc), checked against hand-computed values; every schedule verified."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import topology_documents

from synth.algorithms import synthesize
from synth.algorithms.nccl import Graph, Machine, channels_at, choose, emulate_graphs, nccl
from synth.algorithms.ring import box_groups, channel_rings, rail_layout, ring_order
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.evaluate import congestion, evaluate
from synth.library import SHIPPED_FILES, load_topology
from synth.plan import Protocol, pinned
from synth.topology import Topology
from synth.verify import verify

KIB, MIB, GIB = 1024, 1 << 20, 1 << 30
SHIPPED = sorted(set(SHIPPED_FILES.values()))


# --------------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("spec", SHIPPED)
def test_every_collective_verifies_on_shipped_topologies(spec):
    topo = load_topology(spec)
    for kind in Kind:
        for size in (KIB, MIB):
            schedule = synthesize(topo, kind, "nccl", size=size)
            verify(schedule, topo)
            assert schedule.algorithm == "nccl" and schedule.params["size"] == size
            assert pinned(schedule.params)["protocol"] in (Protocol.LL, Protocol.LL128, Protocol.SIMPLE)


@pytest.mark.parametrize("spec", ["dgx1", "dgx-a100:boxes=2", "ndv2:boxes=2", "dgx-h100:boxes=2"])
def test_large_messages_and_the_default_verify(spec):
    topo = load_topology(spec)
    for kind in (Kind.ALLGATHER, Kind.ALLREDUCE, Kind.BROADCAST):
        for options in ({"size": GIB}, {}):
            verify(synthesize(topo, kind, "nccl", **options), topo)
    default = synthesize(topo, Kind.ALLREDUCE, "nccl")
    assert default.params["size"] is None and default.params["choice"]["algorithm"] == "ring"
    assert default.params["plan"] == {"protocol": "Simple"} and "no size given" in default.params["choice"]["reason"]


@st.composite
def boxed_topologies(draw) -> Topology:
    """Random multi-box systems: identical boxes (random gpu links or a box switch), NICs of a random
    kind (one per gpu, one shared per box, or every gpu linked straight to the fabric) on one or two
    fabric switches."""
    boxes = draw(st.integers(2, 3))
    size = draw(st.integers(2, 4))
    inner = draw(st.sampled_from(["switch", "links"]))
    pairs = [(a, b) for a in range(size) for b in range(a + 1, size)]
    chosen = draw(st.lists(st.sampled_from(pairs), min_size=size - 1, max_size=len(pairs), unique=True))
    nic = draw(st.sampled_from(["per-gpu", "shared", "direct"]))
    planes = draw(st.integers(1, 2))
    bandwidth = draw(st.sampled_from([12.5, 25.0, 50.0]))
    nodes, links = [], []
    fabric = [f"ib{p}" for p in range(planes)]
    for box in range(boxes):
        gpus = [f"b{box}.g{i}" for i in range(size)]
        nodes += [{"id": g, "type": "gpu", "box": box} for g in gpus]
        if inner == "switch":
            nodes.append({"id": f"b{box}.nvs", "type": "switch"})
            links += [{"src": g, "dst": f"b{box}.nvs", "bandwidth": 300.0, "latency": 0.7} for g in gpus]
        else:
            for i in range(size - 1):  # a path keeps the box connected; extra pairs make cycles
                links.append({"src": gpus[i], "dst": gpus[i + 1], "bandwidth": 50.0, "latency": 0.3})
            links += [{"src": gpus[a], "dst": gpus[b], "bandwidth": 25.0, "latency": 0.3}
                      for a, b in chosen if b != a + 1]
        for i, g in enumerate(gpus):
            if nic == "per-gpu":
                nodes.append({"id": f"b{box}.nic{i}", "type": "switch"})
                links.append({"src": g, "dst": f"b{box}.nic{i}", "bandwidth": bandwidth, "latency": 0.3})
                links.append({"src": f"b{box}.nic{i}", "dst": fabric[i % planes], "bandwidth": bandwidth,
                              "latency": 1.0})
            elif nic == "direct":
                links.append({"src": g, "dst": fabric[i % planes], "bandwidth": bandwidth, "latency": 1.3})
            else:
                links.append({"src": g, "dst": f"b{box}.nic", "bandwidth": bandwidth, "latency": 0.3})
        if nic == "shared":
            nodes.append({"id": f"b{box}.nic", "type": "switch"})
            links.append({"src": f"b{box}.nic", "dst": fabric[0], "bandwidth": bandwidth, "latency": 1.0})
    used = {link["dst"] for link in links} | {link["src"] for link in links}
    nodes += [{"id": f, "type": "switch"} for f in fabric if f in used]
    if planes == 2 and nic != "shared":  # join the planes so that every gpu reaches every other
        links.append({"src": "ib0", "dst": "ib1", "bandwidth": bandwidth, "latency": 1.0})
    return Topology.from_dict({"name": "boxed", "nodes": nodes, "links": links}, "random")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=boxed_topologies(), kind=st.sampled_from(list(Kind)), size=st.sampled_from([None, 512, MIB, GIB]))
def test_random_multi_box_systems_verify(topo, kind, size):
    schedule = synthesize(topo, kind, "nccl", **({} if size is None else {"size": size}))
    verify(schedule, topo)
    assert schedule.to_json() == synthesize(topo, kind, "nccl", **({} if size is None else {"size": size})).to_json()
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE):
        for channels in (2, "auto"):
            verify(synthesize(topo, kind, "ring", channels=channels), topo)
    if kind == Kind.ALLREDUCE:
        verify(synthesize(topo, kind, "tree", **({} if size is None else {"size": size})), topo)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=topology_documents(max_gpus=7), kind=st.sampled_from(list(Kind)),
       size=st.sampled_from([None, 100, 64 * KIB, GIB]))
def test_random_topologies_verify(document, kind, size):
    topo = Topology.from_dict(document)
    schedule = synthesize(topo, kind, "nccl", **({} if size is None else {"size": size}))
    verify(schedule, topo)


# ----------------------------------------------------------------------------------------- rails
@pytest.mark.parametrize("spec", ["dgx-a100:boxes=2", "dgx-a100:boxes=3", "dgx-h100:boxes=2", "dgx-a100:boxes=4"])
def test_rail_rings_use_every_nic_once_per_direction(spec):
    topo = load_topology(spec)
    layout = rail_layout(topo)
    assert layout is not None and len(layout.nics) == 8
    schedule = synthesize(topo, Kind.ALLGATHER, "ring", channels="auto")
    verify(schedule, topo)
    assert schedule.params["channels"] == 8 and schedule.params["rails"] is True
    per_link = congestion(schedule, topo).chunks_per_link
    nic_links = [(u, v) for u, v in topo.graph.edges if ".nic" in u or ".nic" in v]
    loads = {link: per_link.get(link, 0) for link in nic_links}
    # every NIC link, both directions, into and out of the rail switches, carries the same load:
    # exactly one channel's share
    assert min(loads.values()) > 0 and len(set(loads.values())) == 1
    for rail in {v for u, v in nic_links if v.startswith("rail")}:
        assert sum(per_link.get((u, rail), 0) for u in topo.graph.predecessors(rail)) > 0
    for ring in schedule.params["orders"]:  # every box crossing goes to the same local gpu on the next box
        for i, rank in enumerate(ring):
            following = ring[(i + 1) % len(ring)]
            if rank // 8 != following // 8:
                assert rank % 8 == following % 8


def test_rail_aware_rings_beat_rail_blind_ones_on_2_dgx_a100():
    topo = load_topology("dgx-a100:boxes=2")
    aware = synthesize(topo, Kind.ALLGATHER, "ring", channels=8)
    blind = synthesize(topo, Kind.ALLGATHER, "ring", channels=8, order=ring_order(topo))  # the cycles of old
    verify(aware, topo)
    verify(blind, topo)
    assert congestion(blind, topo).seconds_per_byte >= 4 * congestion(aware, topo).seconds_per_byte
    assert evaluate(blind, topo, 64 * MIB).time_s >= 3 * evaluate(aware, topo, 64 * MIB).time_s


def test_rail_layouts_of_the_shipped_systems():
    assert rail_layout(load_topology("ndv2:boxes=2")).nics == (tuple(range(8)),)        # one NIC per box
    assert rail_layout(load_topology("dgx2:boxes=2")).slots == tuple(range(0, 16, 2))   # a NIC per 2 gpus
    assert len(rail_layout(load_topology("mi250:boxes=2")).nics) == 16                 # a fabric link per GCD
    assert rail_layout(load_topology("dgx1")) is None and box_groups(load_topology("dgx1")) is None


def test_single_box_rings_are_nvlink_cycles():
    topo = load_topology("dgx1")
    rings = channel_rings(topo, "auto")
    assert len(rings) == 6  # 24 NVLinks: three 8-link cycles, each both ways, as NCCL finds on DGX-1
    load: dict[tuple[str, str], int] = {}
    for ring in rings:
        for i, rank in enumerate(ring):
            hop = (topo.gpus[rank], topo.gpus[ring[(i + 1) % 8]])
            assert topo.has_link(*hop)
            load[hop] = load.get(hop, 0) + 1
    assert all(count * 25.0 <= topo.bandwidth(*hop) for hop, count in load.items())  # no link oversubscribed


# ------------------------------------------------------------------------------------------- tree
def test_tree_is_a_double_binary_tree_over_boxes_with_chains_inside():
    topo = load_topology("dgx-a100:boxes=4")
    schedule = synthesize(topo, Kind.ALLREDUCE, "nccl", size=GIB, algo="tree")
    verify(schedule, topo)
    trees = schedule.params["parents"]
    assert len(trees) == schedule.params["choice"]["channels"] == 16
    for index, parents in enumerate(trees):
        heads = [next(r for r in range(8 * k, 8 * k + 8) if parents[r] is None or parents[r] // 8 != k)
                 for k in range(4)]
        assert len({h % 8 for h in heads}) == 1  # heads share a local index: one rail
        for rank, parent in enumerate(parents):
            if parent is not None and parent // 8 != rank // 8:
                assert rank in heads and parent in heads  # boxes are joined only through their heads
        node_parents = [None if parents[h] is None else parents[h] // 8 for h in heads]
        # NCCL's btree on 4 nodes: 0 root, 2 under 0, 1 and 3 under 2; the mirrored tree for the
        # second half of the channels
        assert node_parents == ([None, 2, 0, 2] if index < 8 else [1, 3, 1, None])
    first, second = trees[0], trees[8]
    assert first != second


def test_tree_chunks_follow_the_message_size():
    topo = load_topology("dgx-a100:boxes=2")
    small = synthesize(topo, Kind.ALLREDUCE, "nccl", size=KIB, algo="tree", proto="Simple")
    large = synthesize(topo, Kind.ALLREDUCE, "nccl", size=GIB, algo="tree", proto="Simple")
    assert small.params["choice"]["channels"] == 1 and small.chunks == 1  # one channel, one chunk
    assert large.params["choice"]["channels"] == 16 and large.chunks == 16 * 64  # 512 KiB chunks, capped


def test_tree_algorithm_picks_its_chunk_count_from_the_size():
    topo = load_topology("dgx1")
    small = synthesize(topo, Kind.ALLREDUCE, "tree", size="1KiB")
    default = synthesize(topo, Kind.ALLREDUCE, "tree")
    assert (small.chunks, default.chunks) == (2, 16)
    assert evaluate(small, topo, KIB).time_s < 0.9 * evaluate(default, topo, KIB).time_s  # fewer dependent steps
    large = synthesize(topo, Kind.ALLREDUCE, "tree", size="1GiB")
    assert large.chunks == 128  # 512 KiB chunks, at most 64 per tree


# ------------------------------------------------------------------------------------ tuning model
def test_graph_emulation_on_dgx1_and_2_dgx_a100():
    dgx1 = load_topology("dgx1")
    ring, tree = emulate_graphs(dgx1, channel_rings(dgx1, "auto"), None, "volta", "2.16")
    assert (ring.channels, ring.bw_intra, tree.bw_intra) == (6, 22.0, 22.0)  # 25 GB/s links -> speed 22
    a100 = load_topology("dgx-a100:boxes=2")
    ring, tree = emulate_graphs(a100, channel_rings(a100, "auto"), box_groups(a100), "ampere", "2.16")
    assert (ring.channels, ring.bw_intra, ring.bw_inter) == (8, 24.0, 24.0)  # a 25 GB/s NIC per channel
    # trees: intra-box speed raised 24 -> 28 -> 30 (300/7 GB/s per channel on NVSwitch), then doubled
    assert (tree.channels, tree.bw_intra, tree.bw_inter) == (16, 15.0, 12.0)


def test_choice_matches_hand_computed_tuning_cc_on_dgx1():
    """DGX-1 allgather of 1 MiB, 8 ranks on one node, Volta, ring graph 6 x 22 GB/s:
    Simple: 8.4 + 7 x 3.4 µs + 2^20 B / (1000 x 132 x 8/7) = 39.151 µs;
    LL: 3.6 + 7 x 0.47 + 2^20 / (1000 x min(39, 132/3) x 8/7) = 30.416 µs;
    LL128: 10 + 7 x 1.9 + 2^20 / (1000 x min(132 x 0.92, 20 x 6) x 8/7) = 30.946 µs. LL wins."""
    topo = load_topology("dgx1")
    schedule = nccl(topo, Kind.ALLGATHER, size=MIB, version="2.16")
    model = schedule.params["model"]
    assert model["ring/Simple"]["time_us"] == pytest.approx(8.4 + 7 * 3.4 + MIB / (1000 * 132 * 8 / 7), rel=1e-5)
    assert model["ring/LL"]["time_us"] == pytest.approx(3.6 + 7 * 0.47 + MIB / (1000 * 39 * 8 / 7), rel=1e-5)
    assert model["ring/LL128"]["time_us"] == pytest.approx(10 + 7 * 1.9 + MIB / (1000 * 120 * 8 / 7), rel=1e-5)
    assert "tree/Simple" not in model  # allgather has only the ring
    assert schedule.params["choice"]["protocol"] == "LL" and schedule.params["plan"] == {"protocol": "LL"}
    # 1 MiB >= 12 channels x 512 threads x 8 x 8 ranks (LL ring threshold): every channel
    assert schedule.params["choice"]["channels"] == 12


def test_choice_matches_hand_computed_tuning_cc_on_2_dgx_a100():
    """Allreduce of 1 GiB on 2 x DGX A100 (16 ranks, 2 nodes, Ampere, AMD cpus).
    Ring Simple: busBw 8 x 24 = 192, algbw x 16/30; latency (8.4 + 26 x 3.4 + 4 x 9.6) x 1.9 (plateau).
    Tree Simple: busBw min(16 x 15 = 240 -> 235 (Ampere cap)) x 0.92, under 16 x 23.6, algbw x 1/2;
    latency 2 x (7 x 28 + 1 x 28). The tree wins."""
    topo = load_topology("dgx-a100:boxes=2")
    schedule = nccl(topo, Kind.ALLREDUCE, size=GIB, version="2.16")
    model = schedule.params["model"]
    ring = (8.4 + 26 * 3.4 + 4 * 9.6) * 1.9 + GIB / (1000 * 192 * 16 / 30)
    tree = 2 * (7 * 28 + 28) + GIB / (1000 * 235 * 0.92 * 0.5)
    assert model["ring/Simple"]["time_us"] == pytest.approx(ring, rel=1e-5)
    assert model["tree/Simple"]["time_us"] == pytest.approx(tree, rel=1e-5)
    assert tree < ring and schedule.params["choice"]["algorithm"] == "tree"
    assert schedule.params["choice"]["protocol"] == "Simple"
    # at 1 KiB: tree LL, latency 4.4 + 2 x (7 x 0.52 x 1.8 + 5.0), bandwidth min(216.2 / 3.8, 22.5) / 2,
    # scaled by treeCorrectionFactor[LL][log2(1024 / 64) = 4] = 0.9
    small = nccl(topo, Kind.ALLREDUCE, size=KIB, version="2.16")
    expected = 4.4 + 2 * (7 * 0.52 * 1.8 + 5.0) + KIB / (1000 * min(235 * 0.92 / 3.8, 22.5) * 0.5 * 0.9)
    assert small.params["model"]["tree/LL"]["time_us"] == pytest.approx(expected, rel=1e-5)
    assert small.params["choice"]["algorithm"] == "tree" and small.params["choice"]["protocol"] == "LL"


def test_choice_is_the_least_predicted_time_and_protocols_follow_size():
    machine = Machine(16, 2, "ampere", "amd", Graph(8, 24.0, 24.0, False), Graph(16, 15.0, 12.0, False), "2.16")
    chosen = {}
    for size in (KIB, 64 * KIB, MIB, 16 * MIB, GIB):
        best, every = choose(Kind.ALLGATHER, machine, size)
        assert best.time_us == min(p.time_us for p in every if p.time_us is not None)
        chosen[size] = best.protocol
    assert chosen[KIB] == "LL" and chosen[GIB] == "Simple"  # low latency small, full bandwidth large
    assert channels_at(machine, "ring", "LL", KIB) == 1 and channels_at(machine, "ring", "Simple", GIB) == 16


def test_forced_choices_and_alltoall():
    topo = load_topology("dgx-a100:boxes=2")
    forced = nccl(topo, Kind.ALLREDUCE, size=MIB, algo="ring", proto="LL128")
    assert (forced.params["choice"]["algorithm"], forced.params["plan"]) == ("ring", {"protocol": "LL128"})
    assert "forced" in forced.params["choice"]["reason"]
    small = nccl(topo, Kind.ALLTOALL, size=16 * 16 * KIB)   # 16 KiB per peer: LL
    large = nccl(topo, Kind.ALLTOALL, size=16 * 16 * KIB + 16)
    assert small.params["plan"]["protocol"] == "LL" and large.params["plan"]["protocol"] == "Simple"
    verify(small, topo)


def test_volta_has_no_ampere_cap_and_unknown_systems_use_volta_tables():
    topo = load_topology("dgx-a100:boxes=2")
    ampere = nccl(topo, Kind.ALLGATHER, size=GIB)
    volta = nccl(topo, Kind.ALLGATHER, size=GIB, arch="volta")
    assert ampere.params["arch"] == "ampere" and volta.params["arch"] == "volta"
    assert nccl(load_topology("torus:dims=4x4"), Kind.ALLGATHER, size=MIB).params["arch"] == "volta"


def test_bad_options_are_clear():
    topo = load_topology("dgx1")
    with pytest.raises(InputError, match="arch"):
        synthesize(topo, Kind.ALLGATHER, "nccl", arch="pascal")
    with pytest.raises(InputError, match="proto"):
        synthesize(topo, Kind.ALLGATHER, "nccl", proto="fast")
    with pytest.raises(InputError, match="size"):
        synthesize(topo, Kind.ALLGATHER, "nccl", size="big")
    with pytest.raises(NotApplicable, match="tree does only allreduce"):
        synthesize(topo, Kind.ALLGATHER, "nccl", algo="tree")
    with pytest.raises(InputError, match="no option 'chunks'"):
        synthesize(topo, Kind.ALLGATHER, "nccl", chunks=8)


def test_nccl_is_at_least_as_fast_as_its_ring_at_1gib_on_2_dgx_a100():
    """The baseline is NCCL's real choice, not a weakened one: at 1 GiB its allgather is the rail ring."""
    topo = load_topology("dgx-a100:boxes=2")
    ours = synthesize(topo, Kind.ALLGATHER, "nccl", size=GIB)
    single = synthesize(topo, Kind.ALLGATHER, "ring")
    algbw = GIB / evaluate(ours, topo, GIB).time_s / 1e9
    assert algbw > 200 and algbw > 7 * GIB / evaluate(single, topo, GIB).time_s / 1e9


# ------------------------------------------------------------------------ PAT at one gpu per node
@pytest.mark.parametrize("leaves, per_leaf", [(4, 4), (3, 4), (4, 8)])
@pytest.mark.parametrize("kind", [Kind.ALLGATHER, Kind.REDUCESCATTER])
def test_pat_at_one_gpu_per_node_is_chosen_small_and_verified(leaves, per_leaf, kind):
    topo = load_topology(f"leaf-spine:leaves={leaves},gpus_per_leaf={per_leaf},servers=true")
    n = topo.num_ranks
    small = nccl(topo, kind, size=4 * KIB)
    verify(small, topo)
    assert small.params["nodes"] == n
    assert small.params["choice"]["algorithm"] == "pat" and small.params["plan"] == {"protocol": "Simple"}
    assert small.params["built_by"] == "bruck"
    # tuning.cc v2.23.4: 8 + log2i(nodes) x 14 / 3.5 + 2.8 x ranks µs, Simple only, busBw x 0.85
    pat = small.params["model"]["pat/Simple"]
    assert pat["latency_us"] == pytest.approx(8 + (n.bit_length() - 1) * 4 + 2.8 * n, rel=1e-5)
    assert [key for key in small.params["model"] if key.startswith("pat/")] == ["pat/Simple"]
    assert nccl(topo, kind, size=256 * MIB).params["choice"]["algorithm"] == "ring"
    # ceil(log2 N) lock-step rounds for any N
    assert small.params["rounds"] == (n - 1).bit_length() < n - 1


def test_pat_is_only_for_one_gpu_per_node_and_its_collectives():
    servers = load_topology("leaf-spine:leaves=2,gpus_per_leaf=4,servers=true")
    shared = load_topology("leaf-spine:leaves=2,gpus_per_leaf=4")
    assert "pat/Simple" not in nccl(shared, Kind.ALLGATHER, size=4 * KIB).params["model"]
    with pytest.raises(NotApplicable, match="one gpu per node"):
        nccl(shared, Kind.ALLGATHER, size=4 * KIB, algo="pat")
    with pytest.raises(NotApplicable, match="allgather and reduce-scatter only"):
        nccl(servers, Kind.ALLREDUCE, size=4 * KIB, algo="pat")
    with pytest.raises(InputError, match="algo"):
        nccl(servers, Kind.ALLGATHER, size=4 * KIB, algo="pat", version="2.16")
    # on 6 gpus the ring's 5 LL steps (6.6 + 5 x 5 µs) beat PAT's 8 + 2 x 4 + 6 x 2.8 µs: NCCL runs the ring
    few = nccl(load_topology("leaf-spine:leaves=2,gpus_per_leaf=3,servers=true"), Kind.ALLGATHER, size=64)
    model = few.params["model"]
    assert few.params["choice"]["algorithm"] == "ring" and model["ring/LL"]["time_us"] < model["pat/Simple"]["time_us"]
    # every step of NCCL's ring is a network step at one gpu per node: the 2.16 model sees N nodes too
    assert nccl(servers, Kind.ALLGATHER, size=4 * KIB, version="2.16").params["nodes"] == 8
