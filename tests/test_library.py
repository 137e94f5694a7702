"""The topology library: every builder and shipped file loads, the named systems match the published
facts (link pairs, multiplicities, bandwidths, the known optimal allgather figures), names round-trip
as specs, the shipped files are exactly what ``write_shipped`` writes, and the baselines verify on
every shipped topology."""

from __future__ import annotations

import itertools
import json
import math
import sys
from fractions import Fraction
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import synthesize, verify
from synth.algorithms import REGISTRY
from synth.bounds import time_bound
from synth.errors import InputError
from synth.evaluate import evaluate
from synth.library import (
    DGX1_DOUBLE_PAIRS,
    DGX1_SINGLE_PAIRS,
    LIBRARY,
    MI250_XGMI_LINKS,
    SHIPPED_FILES,
    TOPOLOGY_DIR,
    build,
    load_topology,
    parse_spec,
    shipped,
    shipped_files,
    topology_json,
    write_shipped,
)
from synth.topology import Dimension, Topology

BASELINES = ("ring", "direct", "binomial")


def layout(topology: Topology) -> tuple[list, list, list]:
    """Nodes, edges in iteration order with attributes, and every node's predecessor order."""
    graph = topology.graph
    return (list(graph.nodes(data=True)), list(graph.edges(data=True)),
            [list(graph.predecessors(node)) for node in graph.nodes])


def gbps(topology: Topology, a: str, b: str) -> float:
    return topology.bandwidth(a, b) if topology.has_link(a, b) else 0.0


# ------------------------------------------------------------------------------ every entry
@pytest.mark.parametrize("name", list(LIBRARY))
def test_every_builder_loads_with_defaults_and_its_name_is_its_spec(name):
    topo = load_topology(name)
    assert topo.name == name  # defaults: the bare entry name
    assert topo.num_ranks >= 2
    assert all(topo.graph.nodes[g]["type"] == "gpu" for g in topo.gpus)
    again = load_topology(topo.name)
    assert layout(again) == layout(topo)
    assert topology_json(again) == topology_json(topo)  # deterministic
    # the file form loads back to the same graph
    assert layout(Topology.from_dict(json.loads(topology_json(topo)))) == layout(topo)


SPECS = [
    "ring:n=2", "ring:n=5,bandwidth=12.5,latency=0", "fully-connected:n=3", "switch:n=16,bandwidth=100",
    "torus:dims=4x4x4", "torus:dims=2x3", "torus:dims=3x3,bandwidth=25.0", "hypercube:d=1", "hypercube:d=4",
    "leaf-spine:leaves=3,gpus_per_leaf=2,spines=4", "leaf-spine:uplink_bandwidth=10",
    "multidim:kinds=Ring/FullyConnected/Switch,sizes=3x2x2,bandwidths=50x100x25,latencies=0.5x0.5x1",
    "multidim:kinds=Switch,sizes=8,bandwidths=400,latencies=0.93625",
    "ndv2:boxes=1", "ndv2:boxes=3", "dgx2:boxes=2", "dgx-a100:boxes=2", "dgx-a100:boxes=3", "dgx-h100:boxes=4",
    "mi250:boxes=3", "tpu-v4:dims=4x4x8,bandwidth=50", "bigraph:upper=2,lower=3,hosts_per_switch=2",
]


@pytest.mark.parametrize("spec", SPECS)
def test_spec_names_round_trip(spec):
    topo = build(spec)
    name, params = parse_spec(spec)
    assert topo.name.split(":")[0] == name
    again = load_topology(topo.name)
    assert again.name == topo.name
    assert layout(again) == layout(topo)
    assert again.boxes == topo.boxes and again.dimensions == topo.dimensions


def test_spec_names_drop_defaults_and_direct_calls_are_named_too():
    assert build("dgx-a100:boxes=1").name == "dgx-a100"
    assert build("ring:n=8,bandwidth=50").name == "ring"
    assert build("ndv2:boxes=2").name == "ndv2"
    assert LIBRARY["torus"].builder(dims=[4, 4, 4]).name == "torus:dims=4x4x4"
    assert LIBRARY["ring"].builder(4, bandwidth=12.5).name == "ring:n=4,bandwidth=12.5"
    assert build("multidim:kinds=Ring/Switch,sizes=4x2,latencies=0").name == (
        "multidim:kinds=Ring/Switch,sizes=4x2,latencies=0")


def test_parse_spec_values():
    assert parse_spec("torus:dims=4x4x4") == ("torus", {"dims": (4, 4, 4)})
    assert parse_spec("x:a=true,b=False,c=1.5,d=7,e=word,f=Ring/Switch,g=12.5x50,uplink-bandwidth=3") == (
        "x", {"a": True, "b": False, "c": 1.5, "d": 7, "e": "word", "f": ("Ring", "Switch"), "g": (12.5, 50),
              "uplink_bandwidth": 3})
    with pytest.raises(InputError, match="expected name:key=value"):
        parse_spec("ring:n")


@pytest.mark.parametrize("spec, words", [
    ("nosuch", "neither a file nor a library name"),
    ("ring:m=4", "ring has no parameter 'm'; it takes n, bandwidth, latency"),
    ("ring:n=1", "n must be at least 2, got 1"),
    ("ring:n=2.5", "n must be an integer, got 2.5"),
    ("ring:n=abc", "n must be an integer, got 'abc'"),
    ("ring:n=99999999", "n must be at most"),
    ("ring:bandwidth=0", "bandwidth must be a positive number of GB/s, got 0"),
    ("ring:bandwidth=inf", "bandwidth must be a positive number of GB/s, got inf"),
    ("ring:bandwidth=nan", "bandwidth must be a positive number"),
    ("switch:latency=-1", "latency must be a number of microseconds >= 0, got -1"),
    ("fully-connected:n=5000", "more than the limit"),
    ("torus:dims=4", "dims must have at least 2 sizes (use ring for one), got 4"),
    ("torus:dims=4x1", "each size in dims must be at least 2, got 1"),
    ("torus:dims=four", "dims must be sizes like 4x4 or 4x4x4"),
    ("hypercube:d=0", "d must be at least 1, got 0"),
    ("hypercube:d=40", "d must be at most"),
    ("leaf-spine:leaves=1,gpus_per_leaf=1", "leaves * gpus_per_leaf must be at least 2"),
    ("leaf-spine:uplink_bandwidth=-2", "uplink_bandwidth must be a positive number"),
    ("multidim:kinds=Ring/Bus", "each kind must be Ring, FullyConnected or Switch, got 'Bus'"),
    ("multidim:kinds=Ring,sizes=4x4,bandwidths=1x2x3", "bandwidths must give one value per dimension (2), got 1x2x3"),
    ("multidim:sizes=4x4,kinds=Ring/Ring/Ring", "kinds must give one kind per dimension (2)"),
    ("dgx-a100:boxes=0", "boxes must be at least 1, got 0"),
    ("dgx-a100:boxes=true", "boxes must be an integer, got True"),
    ("mi250:boxes=-3", "boxes must be at least 1"),
    ("tpu-v4:dims=4x4", "dims must have 3 sizes, got 4x4"),
    ("bigraph:upper=0", "upper must be at least 1, got 0"),
    ("dgx1:boxes=2", "dgx1 has no parameter 'boxes'; it takes none"),
])
def test_bad_parameters_give_one_line_input_errors(spec, words):
    with pytest.raises(InputError) as caught:
        load_topology(spec)
    assert words in str(caught.value)
    assert caught.value.field == "topology"
    assert "\n" not in str(caught.value)


def test_cli_bad_parameter_is_one_line_exit_2(monkeypatch, capsys):
    from synth.cli import main

    monkeypatch.setattr(sys, "argv", ["synth", "show", "dgx-a100:boxes=0"])
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 2
    assert capsys.readouterr().err.strip() == "error: topology: dgx-a100:boxes=0: boxes must be at least 1, got 0"


# ------------------------------------------------------------------------------ shipped files
def test_shipped_files_are_exactly_what_write_shipped_writes(tmp_path):
    written = write_shipped(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{stem}.json" for stem in SHIPPED_FILES)
    for path in written:
        on_disk = TOPOLOGY_DIR / path.name
        assert on_disk.exists(), f"{on_disk} is missing: run write_shipped(TOPOLOGY_DIR)"
        assert on_disk.read_bytes() == path.read_bytes(), (
            f"{on_disk} is stale: regenerate with "
            "python -c 'from synth.library import *; write_shipped(TOPOLOGY_DIR)'")


def test_every_named_system_has_a_shipped_file():
    specs = {load_topology(spec).name.split(":")[0] for spec in SHIPPED_FILES.values()}
    assert set(shipped()) <= specs
    assert {"dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "mi250", "tpu-v4", "bigraph"} <= set(shipped())
    listed = dict(shipped_files())
    for stem, spec in SHIPPED_FILES.items():
        assert listed[f"{stem}.json"] == spec


@pytest.mark.parametrize("stem", list(SHIPPED_FILES))
def test_shipped_file_loads_by_file_name_and_stem_and_equals_its_builder(stem):
    spec = SHIPPED_FILES[stem]
    from_file = load_topology(f"{stem}.json")
    assert load_topology(stem).name == from_file.name
    built = build(spec)
    assert from_file.name == built.name
    assert layout(from_file) == layout(built)  # same graph, edge order included
    assert from_file.boxes == built.boxes and from_file.dimensions == built.dimensions
    assert from_file.description == built.description
    # the file names a loadable spec, so a schedule made on it can be checked by name
    assert layout(load_topology(from_file.name)) == layout(built)


@pytest.mark.parametrize("stem", list(SHIPPED_FILES))
def test_baselines_verify_on_every_shipped_topology(stem):
    topo = load_topology(f"{stem}.json")
    checked = 0
    for name in BASELINES:
        for kind in sorted(REGISTRY[name].collectives, key=lambda k: k.value):
            options: dict[str, Any] = {"root": topo.num_ranks - 1} if kind.value in ("broadcast", "reduce") else {}
            schedule = synthesize(topo, kind, name, **options)
            report = verify(schedule, topo)
            assert report.transfers == len(schedule.transfers) > 0
            checked += 1
    assert checked >= 6


def test_demo_default_topology_exists():
    from synth.cli.demo import DEFAULT_TOPOLOGY

    topo = load_topology(DEFAULT_TOPOLOGY)
    assert topo.name == "dgx-a100:boxes=2" and topo.num_ranks == 16


def test_cli_topologies_lists_builders_and_files(monkeypatch, capsys):
    from synth.cli import main

    monkeypatch.setattr(sys, "argv", ["synth", "topologies", "--json"])
    try:
        main()
    except SystemExit as done:  # success may return or exit 0
        assert done.code in (0, None)
    rows = json.loads(capsys.readouterr().out)
    names = {row["name"]: row for row in rows}
    assert set(LIBRARY) <= set(names)
    assert {f"{stem}.json" for stem in SHIPPED_FILES} <= set(names)
    assert names["dgx-a100"]["kind"] == "builder" and names["dgx-a100-2box.json"]["kind"] == "file"
    assert "fully_connected" not in names and "fully-connected" in names


# ------------------------------------------------------------------------------ the named systems
def test_dgx1_nvlink_pairs_and_multiplicities():
    topo = load_topology("dgx1")
    assert topo.num_ranks == 8 and topo.switches == ()
    pairs = {frozenset((topo.rank_of[u], topo.rank_of[v])): topo.bandwidth(u, v) for u, v in topo.graph.edges}
    assert len(pairs) == 16
    assert {frozenset(p) for p in DGX1_DOUBLE_PAIRS} == {p for p, bw in pairs.items() if bw == 50.0}
    assert {frozenset(p) for p in DGX1_SINGLE_PAIRS} == {p for p, bw in pairs.items() if bw == 25.0}
    assert frozenset((0, 3)) in pairs and frozenset((0, 5)) not in pairs and frozenset((3, 4)) not in pairs
    for gpu in topo.gpus:  # 6 NVLink2 ports of 25 GB/s
        assert topo.egress_bandwidth(gpu) == topo.ingress_bandwidth(gpu) == 150.0
    assert all(topo.latency(u, v) == 0.3 for u, v in topo.graph.edges)


def test_ndv2_boxes_behind_one_nic_each():
    topo = load_topology("ndv2-2box")
    assert topo.num_ranks == 16 and topo.boxes == (0,) * 8 + (1,) * 8
    assert set(topo.switches) == {"b0.nic", "b1.nic", "ib"}
    for box in (0, 1):
        nic = f"b{box}.nic"
        assert topo.bandwidth(nic, "ib") == topo.bandwidth("ib", nic) == 12.5
        assert sorted(topo.graph.predecessors(nic)) == sorted([f"b{box}.gpu{i}" for i in range(8)] + ["ib"])
        # each box is a DGX-1
        for a, b in DGX1_DOUBLE_PAIRS:
            assert topo.bandwidth(f"b{box}.gpu{a}", f"b{box}.gpu{b}") == 50.0
    # cross-box gpu to gpu pays TACCL's IB α of 2.6 µs
    path = nx.shortest_path(topo.graph, "b0.gpu0", "b1.gpu0")
    assert path == ["b0.gpu0", "b0.nic", "ib", "b1.nic", "b1.gpu0"]
    assert math.isclose(topo.path_latency(path), 2.6)
    assert load_topology("ndv2:boxes=1").switches == ()


def test_dgx2_single_nvswitch_and_nics():
    topo = load_topology("dgx2")
    assert topo.num_ranks == 16 and topo.switches == ("nvs",)
    assert all(topo.bandwidth(g, "nvs") == topo.bandwidth("nvs", g) == 150.0 for g in topo.gpus)
    two = load_topology("dgx2:boxes=2")
    assert two.num_ranks == 32 and two.boxes == (0,) * 16 + (1,) * 16
    nics = [s for s in two.switches if ".nic" in s]
    assert len(nics) == 16  # 8 per box
    assert sum(two.bandwidth(n, "ib") for n in nics if n.startswith("b0.")) == 100.0  # 8 x 12.5 GB/s


def test_dgx_a100_structure():
    one = load_topology("dgx-a100")
    assert one.num_ranks == 8 and one.switches == ("nvs",) and one.boxes is None
    assert all(one.bandwidth(g, "nvs") == 300.0 for g in one.gpus)
    for boxes in (2, 4):
        topo = load_topology(f"dgx-a100:boxes={boxes}")
        assert topo.num_ranks == 8 * boxes
        assert topo.boxes == tuple(r // 8 for r in range(8 * boxes))
        assert len(topo.switches) == boxes * 9 + 2
        for box, i in itertools.product(range(boxes), range(8)):
            gpu, nic = f"b{box}.gpu{i}", f"b{box}.nic{i}"
            assert topo.bandwidth(gpu, f"b{box}.nvs") == 300.0
            assert topo.bandwidth(gpu, nic) == topo.bandwidth(nic, gpu) == 25.0
            assert sorted(topo.graph.successors(nic)) == sorted([gpu, f"rail{i % 2}"])  # even/odd planes
            assert topo.bandwidth(nic, f"rail{i % 2}") == 25.0
            assert topo.egress_bandwidth(gpu) == 325.0
        assert topo.graph.in_degree("rail0") == topo.graph.in_degree("rail1") == 4 * boxes


def test_dgx_h100_rail_optimized():
    one = load_topology("dgx-h100")
    assert all(one.bandwidth(g, "nvs") == 450.0 for g in one.gpus)
    topo = load_topology("dgx-h100-2box")
    rails = [s for s in topo.switches if s.startswith("rail")]
    assert rails == [f"rail{i}" for i in range(8)]
    for i in range(8):
        assert sorted(topo.graph.predecessors(f"rail{i}")) == [f"b0.nic{i}", f"b1.nic{i}"]
        assert topo.bandwidth(f"b1.gpu{i}", f"b1.nic{i}") == topo.bandwidth(f"b1.nic{i}", f"rail{i}") == 50.0


def test_mi250_xgmi_matrix():
    matrix = MI250_XGMI_LINKS
    assert all(matrix[i][j] == matrix[j][i] for i in range(16) for j in range(16))
    assert all(sum(row) == 7 for row in matrix)  # 7 link units per GCD
    assert {v for row in matrix for v in row} == {0, 1, 2, 4}
    topo = load_topology("mi250")
    assert topo.num_ranks == 16 and topo.switches == ()
    for i, j in itertools.product(range(16), repeat=2):
        assert gbps(topo, f"gcd{i}", f"gcd{j}") == 50.0 * matrix[i][j]
    assert all(topo.egress_bandwidth(g) == 350.0 for g in topo.gpus)
    assert topo.graph.number_of_edges() == 2 * 28
    two = load_topology("mi250-2box")
    assert two.switches == ("ib",) and two.boxes == (0,) * 16 + (1,) * 16
    assert all(two.bandwidth(g, "ib") == two.bandwidth("ib", g) == 16.0 for g in two.gpus)
    assert two.bandwidth("b1.gcd2", "b1.gcd3") == 200.0 and not two.has_link("b0.gcd0", "b1.gcd1")


def test_tpu_v4_torus():
    topo = load_topology("tpu-v4-4x4x4.json")
    assert topo.num_ranks == 64 and topo.switches == ()
    assert topo.dimensions == tuple(Dimension("Ring", 4, 45.0, 1.0) for _ in range(3))
    assert all(topo.graph.out_degree(g) == 6 for g in topo.gpus)
    assert topo.graph.number_of_edges() == 64 * 6
    # rank = x + 4*(y + 4*z): wrap-around neighbours of (0, 0, 0)
    neighbours = {topo.rank_of[v] for v in topo.graph.successors("tpu0")}
    assert neighbours == {1, 3, 4, 12, 16, 48}
    assert all(topo.bandwidth(u, v) == 45.0 for u, v in topo.graph.edges)


def test_bigraph_switch_hops():
    topo = load_topology("bigraph-32")
    assert topo.num_ranks == 32 and len(topo.switches) == 8
    ups = [s for s in topo.switches if s.startswith("up")]
    lows = [s for s in topo.switches if s.startswith("low")]
    assert all(topo.has_link(u, w) for u in ups for w in lows)
    assert not any(topo.has_link(a, b) for a, b in itertools.permutations(ups, 2))
    assert not any(topo.has_link(a, b) for a, b in itertools.permutations(lows, 2))
    assert all(topo.graph.in_degree(s) == 4 + 4 for s in topo.switches)  # 4 hosts + 4 opposite switches
    hops = dict(nx.all_pairs_shortest_path_length(topo.graph))
    # switch hops = links - 1: same switch 1, opposite layer 2, same layer 3
    assert hops["gpu0"]["gpu3"] - 1 == 1
    assert hops["gpu0"]["gpu16"] - 1 == 2
    assert hops["gpu0"]["gpu4"] - 1 == 3
    assert hops["gpu16"]["gpu31"] - 1 == 3


def test_generic_builders_structure():
    assert load_topology("ring:n=2").graph.number_of_edges() == 2
    assert load_topology("ring:n=5").graph.number_of_edges() == 10
    assert load_topology("fully-connected:n=5").graph.number_of_edges() == 20
    torus = load_topology("torus:dims=3x4")
    assert torus.dimensions == (Dimension("Ring", 3, 50.0, 0.5), Dimension("Ring", 4, 50.0, 0.5))
    assert {torus.rank_of[v] for v in torus.graph.successors("gpu0")} == {1, 2, 3, 9}
    cube = load_topology("hypercube:d=4")
    assert cube.num_ranks == 16
    for r in range(16):
        assert {cube.rank_of[v] for v in cube.graph.successors(f"gpu{r}")} == {r ^ (1 << k) for k in range(4)}
    fat = load_topology("leaf-spine:leaves=4,gpus_per_leaf=8,spines=2,bandwidth=25")
    assert fat.num_ranks == 32 and len(fat.switches) == 6
    assert fat.bandwidth("leaf3", "spine1") == 100.0  # non-blocking: 8 * 25 / 2
    assert fat.bandwidth("gpu31", "leaf3") == 25.0
    thin = load_topology("leaf-spine:uplink_bandwidth=10")
    assert thin.bandwidth("leaf0", "spine0") == 10.0


def test_single_dimension_systems_record_their_astra_dimension():
    assert load_topology("ring:n=6").dimensions == (Dimension("Ring", 6, 50.0, 0.5),)
    assert load_topology("fully-connected:n=4").dimensions == (Dimension("FullyConnected", 4, 50.0, 0.5),)
    assert load_topology("switch:n=8,bandwidth=400").dimensions == (Dimension("Switch", 8, 400.0, 0.5),)


def test_multi_box_systems_set_boxes():
    for spec in ("ndv2:boxes=2", "dgx2:boxes=2", "dgx-a100:boxes=2", "dgx-a100:boxes=4", "dgx-h100:boxes=3",
                 "mi250:boxes=2"):
        topo = load_topology(spec)
        per_box = topo.num_ranks // (max(topo.boxes) + 1)
        assert topo.boxes == tuple(r // per_box for r in range(topo.num_ranks)), spec
        assert all(g.startswith(f"b{topo.boxes[r]}.") for r, g in enumerate(topo.gpus)), spec


# --------------------------------------------------------------------- multidim rank formula
KIND_NAMES = ["Ring", "FullyConnected", "Switch"]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KIND_NAMES), st.integers(2, 4)), min_size=1, max_size=3))
def test_multidim_follows_the_astra_rank_formula(dims):
    kinds = "/".join(k for k, _ in dims)
    sizes = "x".join(str(p) for _, p in dims) if len(dims) > 1 else str(dims[0][1])
    bandwidths = "x".join(str(10 * (d + 1)) for d in range(len(dims))) if len(dims) > 1 else "10"
    topo = load_topology(f"multidim:kinds={kinds},sizes={sizes},bandwidths={bandwidths},latencies=0.5")
    shape = [p for _, p in dims]
    total = math.prod(shape)
    assert topo.num_ranks == total
    assert topo.dimensions == tuple(Dimension(k, p, 10.0 * (d + 1), 0.5) for d, (k, p) in enumerate(dims))

    def coords(rank: int) -> list[int]:
        out = []
        for p in shape:
            out.append(rank % p)
            rank //= p
        return out

    for a, b in itertools.permutations(range(total), 2):
        ca, cb = coords(a), coords(b)
        differing = [d for d in range(len(shape)) if ca[d] != cb[d]]
        direct = topo.has_link(topo.gpus[a], topo.gpus[b])
        if len(differing) != 1:
            assert not direct
            continue
        d = differing[0]
        kind, p = dims[d]
        if kind == "FullyConnected":
            assert direct and topo.bandwidth(topo.gpus[a], topo.gpus[b]) == 10.0 * (d + 1)
        elif kind == "Ring":
            assert direct == ((ca[d] - cb[d]) % p in (1, p - 1))
        else:
            assert not direct
            hubs = set(topo.graph.successors(topo.gpus[a])) & set(topo.graph.successors(topo.gpus[b]))
            assert len(hubs) == 1 and next(iter(hubs)).startswith(f"dim{d}.sw")
    switch_count = sum(total // p for k, p in dims if k == "Switch")
    assert len(topo.switches) == switch_count


# --------------------------------------------------------- the published optimal allgather figures
def allgather_bound_holds(topology: Topology, algbw: Fraction) -> bool:
    """True when no cut limits allgather below ``algbw`` GB/s (ForestColl's bound, exactly).

    With rho = N/algbw: for every cut S, |S ∩ gpus| <= rho * B+(S), iff a super source with an arc of
    capacity 1 to every gpu and link capacities rho*b(e) has max-flow >= N to every gpu. Capacities are
    scaled to integers so the max-flow is exact.
    """
    n = topology.num_ranks
    rho = Fraction(n) / algbw
    bandwidths = {(u, v): topology.exact_bandwidth(u, v) for u, v in topology.graph.edges}
    scale = math.lcm(rho.denominator, *(b.denominator for b in bandwidths.values()))
    scale = math.lcm(scale, *((rho * b).denominator for b in bandwidths.values()))
    graph = nx.DiGraph()
    for (u, v), b in bandwidths.items():
        graph.add_edge(u, v, capacity=int(rho * b * scale))
    for gpu in topology.gpus:
        graph.add_edge("__source", gpu, capacity=scale)
    return all(nx.maximum_flow_value(graph, "__source", gpu) >= n * scale for gpu in topology.gpus)


@pytest.mark.parametrize("spec, optimum, published", [
    ("dgx-a100", Fraction(300 * 8, 7), 342.86),
    ("dgx-a100:boxes=2", Fraction(16 * 325, 15), 346.67),
    ("dgx-a100:boxes=4", Fraction(32 * 200, 24), 266.67),
    ("mi250", Fraction(16 * 300, 14), 342.86),
    ("mi250:boxes=2", Fraction(32 * 332, 30), 354.13),
    ("ndv2:boxes=2", Fraction(25), 25.0),
])
def test_models_reproduce_the_published_allgather_optimum(spec, optimum, published):
    topo = load_topology(spec)
    assert round(float(optimum), 2) == published
    assert allgather_bound_holds(topo, optimum)  # no cut is tighter than the published optimum
    assert not allgather_bound_holds(topo, optimum * Fraction(1001, 1000))  # and one cut is that tight


# ------------------------------------------------------------------------------ today's large systems
def test_gb200_nvl72_one_nvlink_switch_node_per_rack():
    """The 18 switch chips are one node, as NCCL models an NVSwitch fabric: a single-path schedule gets a
    gpu's 900 GB/s, not one chip's 50 (where ring and nccl read 5.6% of the bound at 1 GiB)."""
    topo = load_topology("gb200-nvl72")
    assert topo.num_ranks == 72 and topo.switches == ("nvs",) and topo.boxes is None
    for gpu in topo.gpus:
        assert list(topo.graph.successors(gpu)) == ["nvs"]
        assert topo.bandwidth(gpu, "nvs") == topo.bandwidth("nvs", gpu) == 18 * 50.0
    ring = synthesize(topo, "allgather", "ring")
    assert evaluate(ring, topo, 2**30).time_s < 1.05 * time_bound(topo, "allgather").time(2**30)
    racks = load_topology("gb200-nvl72:racks=3,rails=4")
    assert racks.num_ranks == 216 and racks.boxes[72] == 1
    assert racks.has_link("b2.gpu5", "b2.nic5") and racks.has_link("b2.nic5", "rail1")
    assert racks.has_link("b1.gpu0", "b1.nvs") and not racks.has_link("b0.gpu0", "b1.nvs")


def test_mi300x_fully_connected_and_rails():
    topo = load_topology("mi300x")
    assert topo.num_ranks == 8 and not topo.switches
    for a, b in itertools.permutations(topo.gpus, 2):
        assert topo.bandwidth(a, b) == 64.0
    assert topo.egress_bandwidth("gpu0") == 7 * 64.0
    boxes = load_topology("mi300x:boxes=3")
    assert boxes.has_link("b1.nic6", "rail6") and boxes.bandwidth("b1.gpu6", "b1.nic6") == 50.0
    assert not boxes.has_link("b0.gpu0", "b1.gpu0")


def test_dgx_superpod_tiers_and_oversubscription():
    topo = load_topology("dgx-superpod:sus=4,nodes_per_su=2,sus_per_pod=2,spines=2,cores=2,oversubscription=2")
    leaves = [s for s in topo.switches if ".leaf" in s]
    spines = [s for s in topo.switches if ".spine" in s]
    cores = [s for s in topo.switches if s.startswith("core")]
    assert topo.num_ranks == 64 and (len(leaves), len(spines), len(cores)) == (32, 32, 16)
    assert topo.has_link("b3.nic2", "su1.leaf2") and not topo.has_link("b3.nic2", "su1.leaf3")
    assert topo.bandwidth("su1.leaf2", "pod0.spine2.1") == 2 * 50 / 2 / 2  # 2 boxes' NICs, 2:1, over 2 spines
    assert not topo.has_link("su2.leaf2", "pod0.spine2.0") and topo.has_link("su2.leaf2", "pod1.spine2.0")
    assert topo.bandwidth("pod1.spine2.0", "core2.1") == 2 * 25 / 2  # what it receives from its 2 leaves, over 2 cores
    assert not topo.has_link("pod1.spine2.0", "core3.0")
    two_tier = load_topology("dgx-superpod:sus=2,nodes_per_su=2")
    assert not [s for s in two_tier.switches if s.startswith("core")]
    for bad in ["dgx-superpod:oversubscription=0.5", "dgx-superpod:sus=6,sus_per_pod=4"]:
        with pytest.raises(InputError):
            load_topology(bad)


def test_tpu_v5p_torus():
    topo = load_topology("tpu-v5p:dims=4x4x8")
    assert topo.num_ranks == 128 and [d.size for d in topo.dimensions] == [4, 4, 8]
    assert all(topo.graph.out_degree(g) == 6 for g in topo.gpus)
    assert topo.egress_bandwidth("tpu0") == 600.0  # 1,200 GB/s both ways per chip
    assert topo.has_link("tpu0", "tpu3") and topo.has_link("tpu0", "tpu112")  # wrap-around in x and z


def test_dragonfly_groups_routers_and_global_links():
    topo = load_topology("dragonfly:p=2,a=4,h=2")
    routers = topo.switches
    assert len(routers) == 36 and topo.num_ranks == 72
    group_pairs: dict[tuple[str, str], int] = {}
    for router in routers:
        group = router.split(".")[0]
        neighbours = list(topo.graph.successors(router))
        terminals = [v for v in neighbours if v.startswith("gpu")]
        local = [v for v in neighbours if v.startswith(group + ".")]
        remote = [v for v in neighbours if not v.startswith("gpu") and not v.startswith(group + ".")]
        assert (len(terminals), len(local), len(remote)) == (2, 3, 2)
        for other in remote:
            key = (group, other.split(".")[0])
            group_pairs[key] = group_pairs.get(key, 0) + 1
    assert len(group_pairs) == 9 * 8 and set(group_pairs.values()) == {1}  # one global link per pair of groups
    parallel = load_topology("dragonfly:a=4,h=2,groups=5")
    assert parallel.num_ranks == 40 and parallel.boxes[39] == 4
    with pytest.raises(InputError):
        load_topology("dragonfly:a=4,h=2,groups=4")  # 3 does not divide 8


@pytest.mark.parametrize("spec, optimum", [
    ("gb200-nvl72", Fraction(72 * 900, 71)),  # all but one gpu: its 18 links
    ("mi300x", Fraction(8 * 448, 7)),  # all but one gpu: its 7 xGMI links
    ("mi300x:boxes=2", Fraction(16 * (448 + 50), 15)),  # all but one gpu: 7 xGMI links and its NIC
    # 3 tiers, 48 gpus: all but one box (its 8 NICs, 400 / 40) beats all but one gpu (500 / 47)
    ("dgx-superpod:sus=2,nodes_per_su=3,sus_per_pod=1", Fraction(48 * 400, 40)),
    # 8:1 at the leaves: an SU's 8 leaves send 4 * 50 / 8 GB/s up each, 200 GB/s for its 32 gpus
    ("dgx-superpod:sus=2,nodes_per_su=4,oversubscription=8", Fraction(64 * 200, 32)),
    ("tpu-v5p:dims=4x4x2", Fraction(32 * 500, 31)),  # all but one chip: 5 links (the 2-ring has one)
    ("dragonfly", Fraction(72 * 25, 71)),  # all but one terminal: its router link
])
def test_new_systems_reach_their_hand_counted_optimum(spec, optimum):
    topo = load_topology(spec)
    assert allgather_bound_holds(topo, optimum)  # independent networkx check: no tighter cut
    assert not allgather_bound_holds(topo, optimum * Fraction(1001, 1000))
    from synth.bounds import optimal_bound

    assert topo.num_ranks * optimal_bound(topo).rate_GBps == optimum
