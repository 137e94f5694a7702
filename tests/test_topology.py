"""The topology file format and loader: every refusal names its field, YAML loads, parallel
links add, and to_dict/from_dict (and the shipped-file writer) round-trip random topologies exactly."""

from __future__ import annotations

import copy
import json
import math
import sys
from fractions import Fraction
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.documents import parse_json
from synth.errors import InputError
from synth.library import load_topology, topology_json
from synth.topology import Topology


def graph_layout(topology: Topology) -> tuple[list, list, list]:
    """Nodes, edges (in iteration order, with attributes) and every node's predecessor order."""
    graph = topology.graph
    return (list(graph.nodes(data=True)), list(graph.edges(data=True)),
            [list(graph.predecessors(node)) for node in graph.nodes])


def base_document() -> dict[str, Any]:
    """Two gpus on a switch, plus a direct gpu link: valid."""
    return {
        "name": "pair",
        "description": "two gpus",
        "nodes": [{"id": "gpu0", "type": "gpu"}, {"id": "gpu1", "type": "gpu"}, {"id": "sw0", "type": "switch"}],
        "links": [
            {"src": "gpu0", "dst": "sw0", "bandwidth": 25.0, "latency": 0.7, "bidirectional": True},
            {"src": "gpu1", "dst": "sw0", "bandwidth": 25.0, "latency": 0.7},
            {"src": "gpu0", "dst": "gpu1", "bandwidth": 50.0},
        ],
    }


def refused(document: Any) -> InputError:
    with pytest.raises(InputError) as caught:
        Topology.from_dict(document, source="topo.json")
    return caught.value


def test_issue_example_loads():
    topo = Topology.from_dict(base_document(), source="topo.json")
    assert topo.gpus == ("gpu0", "gpu1")
    assert topo.switches == ("sw0",)
    assert topo.num_ranks == 2
    assert topo.rank_of == {"gpu0": 0, "gpu1": 1}
    # bidirectional defaults to true, latency to 0
    assert topo.bandwidth("sw0", "gpu1") == 25.0
    assert topo.latency("gpu1", "gpu0") == 0.0
    assert topo.exact_bandwidth("gpu0", "sw0") == Fraction(25)
    assert topo.graph.number_of_edges() == 6


def test_ranks_follow_gpu_order_in_file():
    document = base_document()
    document["nodes"] = [{"id": "sw0", "type": "switch"}, {"id": "gpu1", "type": "gpu"}, {"id": "gpu0", "type": "gpu"}]
    topo = Topology.from_dict(document)
    assert topo.gpus == ("gpu1", "gpu0")


# --------------------------------------------------------------------------------- every refusal
def mutate(path: list[Any], value: Any) -> dict[str, Any]:
    document = copy.deepcopy(base_document())
    target: Any = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return document


REFUSALS = [
    # (name, document, field named in the message, words in the problem)
    ("unknown node id", mutate(["links", 0, "dst"], "sw9"), "links.0.dst", "unknown node id 'sw9'"),
    ("unknown src id", mutate(["links", 2, "src"], "gpu7"), "links.2.src", "unknown node id 'gpu7'"),
    ("duplicate id", mutate(["nodes", 1, "id"], "gpu0"), "nodes.1.id", "duplicate node id 'gpu0'"),
    ("unknown type", mutate(["nodes", 2, "type"], "router"), "nodes.2.type", "gpu"),
    ("zero bandwidth", mutate(["links", 0, "bandwidth"], 0), "links.0.bandwidth", "> 0"),
    ("negative bandwidth", mutate(["links", 1, "bandwidth"], -5.0), "links.1.bandwidth", "> 0"),
    ("string bandwidth", mutate(["links", 0, "bandwidth"], "fast"), "links.0.bandwidth", "expected a number"),
    ("numeric-string bandwidth", mutate(["links", 0, "bandwidth"], "25"), "links.0.bandwidth", "expected a number"),
    ("bool bandwidth", mutate(["links", 0, "bandwidth"], True), "links.0.bandwidth", "expected a number"),
    ("null bandwidth", mutate(["links", 0, "bandwidth"], None), "links.0.bandwidth", "expected a number"),
    ("nan bandwidth", mutate(["links", 0, "bandwidth"], math.nan), "links.0.bandwidth", "finite"),
    ("inf bandwidth", mutate(["links", 0, "bandwidth"], math.inf), "links.0.bandwidth", "finite"),
    ("huge bandwidth", mutate(["links", 0, "bandwidth"], 1e300), "links.0.bandwidth", "at most"),
    ("negative latency", mutate(["links", 0, "latency"], -0.1), "links.0.latency", ">= 0"),
    ("string latency", mutate(["links", 0, "latency"], "0.7"), "links.0.latency", "expected a number"),
    ("nan latency", mutate(["links", 0, "latency"], math.nan), "links.0.latency", "finite"),
    ("self-loop", mutate(["links", 2, "dst"], "gpu0"), "links.2", "self-loop on 'gpu0'"),
    ("missing bandwidth", {**base_document(), "links": [{"src": "gpu0", "dst": "gpu1"}]}, "links.0.bandwidth",
     "missing"),
    ("string bidirectional", mutate(["links", 0, "bidirectional"], "yes"), "links.0.bidirectional", ""),
    ("non-string id", mutate(["nodes", 0, "id"], 3), "nodes.0.id", ""),
    ("empty id", mutate(["nodes", 0, "id"], " "), "nodes.0.id", "non-empty"),
    ("unknown top-level field", {**base_document(), "colour": "red"}, "colour", "unknown field"),
    ("unknown node field", mutate(["nodes", 0, "speed"], 3), "nodes.0.speed", "unknown field"),
    ("unknown link field", mutate(["links", 1, "capacity"], 3), "links.1.capacity", "unknown field"),
    ("missing nodes", {"name": "x", "links": []}, "nodes", "missing"),
    # a misspelt key is named before the required one it leaves missing
    ("misspelt links", {**{k: v for k, v in base_document().items() if k != "links"},
                        "lnks": base_document()["links"]}, "lnks", "unknown field"),
    ("missing name", {k: v for k, v in base_document().items() if k != "name"}, "name", "missing"),
    ("one gpu", mutate(["nodes", 1, "type"], "switch"), "nodes", "at least 2 gpus, found 1"),
    ("no gpus", {"name": "x", "nodes": [{"id": "s", "type": "switch"}], "links": []}, "nodes", "at least 2 gpus"),
    ("isolated gpu", {**base_document(), "nodes": base_document()["nodes"] + [{"id": "gpu2", "type": "gpu"}]},
     "links", "gpu 'gpu2' cannot be reached"),
    ("one-way only", {"name": "x", "nodes": [{"id": "a", "type": "gpu"}, {"id": "b", "type": "gpu"}],
                      "links": [{"src": "a", "dst": "b", "bandwidth": 1, "bidirectional": False}]},
     "links", "gpu 'b' cannot reach gpu 'a'"),
    ("box on some gpus only", mutate(["nodes", 0, "box"], 0), "nodes", "every gpu has a 'box' or none"),
    ("dimensions mismatch", {**base_document(), "dimensions": [{"kind": "Ring", "size": 4, "bandwidth": 1}]},
     "dimensions", "product of sizes"),
    ("bad dimension kind", {**base_document(), "dimensions": [{"kind": "Torus", "size": 2, "bandwidth": 1}]},
     "dimensions.0.kind", ""),
    ("top level not an object", [1, 2], "", "expected a JSON/YAML object"),
]


@pytest.mark.parametrize("document, field, words", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_loader_refuses_with_field_named(document, field, words):
    error = refused(document)
    assert error.source == "topo.json"
    assert error.field == field
    message = str(error)
    assert message.startswith("topo.json: ")
    if field:
        assert f"{field}: " in message
    assert words in message
    assert "\n" not in message


def test_json_nan_and_infinity_literals_are_refused(tmp_path):
    for literal in ("NaN", "Infinity", "-Infinity"):
        text = json.dumps(base_document()).replace('"bandwidth": 50.0', f'"bandwidth": {literal}')
        path = tmp_path / "bad.json"
        path.write_text(text)
        with pytest.raises(InputError, match=f"{literal} is not allowed") as caught:
            Topology.from_file(path)
        assert str(path) in str(caught.value)


def test_yaml_nan_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    document = base_document()
    path.write_text(yaml.safe_dump(document).replace("bandwidth: 50.0", "bandwidth: .nan"))
    with pytest.raises(InputError, match=r"links\.2\.bandwidth: expected a finite number"):
        Topology.from_file(path)


@pytest.mark.parametrize("text, words", [
    ("{", "invalid JSON at line 1"),
    ("", "invalid JSON"),
    ("[]", "expected a JSON/YAML object"),
    ('{"name": "x"', "invalid JSON"),
])
def test_malformed_json_files(tmp_path, text, words):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(InputError, match=words) as caught:
        load_topology(path)
    assert str(caught.value).startswith(str(path))


def test_missing_file_and_bad_encoding(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_topology(tmp_path / "absent.json")
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"name": "\xe9"}')
    with pytest.raises(InputError, match="not valid UTF-8"):
        load_topology(path)


def test_deeply_nested_json_is_refused_cleanly():
    with pytest.raises(InputError, match="nesting"):
        parse_json("[" * (sys.getrecursionlimit() + 10), "deep.json")


def test_cli_reports_a_bad_file_in_one_line(tmp_path, monkeypatch, capsys):
    from synth.cli import main

    path = tmp_path / "bad.json"
    path.write_text(json.dumps(mutate(["links", 0, "latency"], -1)))
    monkeypatch.setattr(sys, "argv", ["synth", "show", str(path)])
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {path}: links.0.latency: expected a number >= 0 (microseconds), got -1"


# ----------------------------------------------------------------------------- YAML, parallel links
def test_yaml_loads_the_same_topology(tmp_path):
    json_path = tmp_path / "t.json"
    yaml_path = tmp_path / "t.yaml"
    yml_path = tmp_path / "t.yml"
    json_path.write_text(json.dumps(base_document()))
    yaml_path.write_text(yaml.safe_dump(base_document()))
    yml_path.write_text(yaml.safe_dump(base_document()))
    expected = load_topology(json_path).to_dict()
    assert load_topology(yaml_path).to_dict() == expected
    assert load_topology(yml_path).to_dict() == expected


def test_yaml_python_tags_are_refused(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("name: !!python/object/apply:os.system ['true']\nnodes: []\nlinks: []\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_topology(path)


def test_parallel_links_add_bandwidth():
    document = base_document()
    document["links"] += [
        {"src": "gpu0", "dst": "gpu1", "bandwidth": 25.0, "latency": 0.3},
        {"src": "gpu1", "dst": "gpu0", "bandwidth": 12.5, "bidirectional": False},
    ]
    topo = Topology.from_dict(document)
    assert topo.bandwidth("gpu0", "gpu1") == 75.0
    assert topo.bandwidth("gpu1", "gpu0") == 87.5
    assert topo.exact_bandwidth("gpu1", "gpu0") == Fraction(175, 2)
    assert topo.latency("gpu0", "gpu1") == 0.3  # the slowest of the parallel links
    assert topo.egress_bandwidth("gpu0") == 100.0


def test_one_way_links():
    document = {"name": "cycle", "nodes": [{"id": f"g{i}", "type": "gpu"} for i in range(3)],
                "links": [{"src": f"g{i}", "dst": f"g{(i + 1) % 3}", "bandwidth": 10, "bidirectional": False}
                          for i in range(3)]}
    topo = Topology.from_dict(document)
    assert topo.has_link("g0", "g1") and not topo.has_link("g1", "g0")
    assert topo.graph.number_of_edges() == 3
    text = topology_json(topo)
    assert text.count('"bidirectional": false') == 3
    assert Topology.from_dict(json.loads(text)).to_dict() == topo.to_dict()


def test_writer_keeps_neighbour_order_when_merging_directions_cannot():
    # g0->g1 and g1->g0 are equal but were added far apart: writing them as one bidirectional link
    # would reorder neighbours, so the writer falls back to one line per direction
    links = [{"src": "g0", "dst": "g1", "bandwidth": 5, "bidirectional": False},
             {"src": "g1", "dst": "g2", "bandwidth": 5}, {"src": "g2", "dst": "g0", "bandwidth": 5},
             {"src": "g0", "dst": "g2", "bandwidth": 7, "bidirectional": False},
             {"src": "g1", "dst": "g0", "bandwidth": 5, "bidirectional": False}]
    document = {"name": "x", "nodes": [{"id": f"g{i}", "type": "gpu"} for i in range(3)], "links": links}
    topo = Topology.from_dict(document)
    text = topology_json(topo)
    again = Topology.from_dict(json.loads(text))
    assert graph_layout(again) == graph_layout(topo)
    assert topology_json(again) == text


def test_topology_is_frozen():
    topo = Topology.from_dict(base_document())
    with pytest.raises(Exception):  # noqa: B017 - networkx raises NetworkXError on a frozen graph
        topo.graph.add_edge("gpu0", "sw0")
    with pytest.raises(AttributeError):
        topo.name = "other"  # type: ignore[misc]


# ----------------------------------------------------------------------------------- round trips
finite_bandwidths = st.one_of(
    st.sampled_from([1.0, 12.5, 25.0, 50.0, 300.0]),
    st.floats(min_value=1e-3, max_value=1e5, allow_nan=False, allow_infinity=False),
)
finite_latencies = st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1e3, allow_nan=False))


@st.composite
def random_documents(draw: Any) -> dict[str, Any]:
    """A random valid document: gpus and switches, a bidirectional spanning tree, extra links (some
    one-way, some parallel), optional boxes."""
    num_gpus = draw(st.integers(2, 7))
    num_switches = draw(st.integers(0, 3))
    gpus = [f"g{i}" for i in range(num_gpus)]
    switches = [f"s{i}" for i in range(num_switches)]
    order = draw(st.permutations(gpus + switches))
    links = []
    for index in range(1, len(order)):
        links.append({"src": order[index], "dst": order[draw(st.integers(0, index - 1))],
                      "bandwidth": draw(finite_bandwidths), "latency": draw(finite_latencies)})
    for src, dst, both in draw(st.lists(st.tuples(st.sampled_from(order), st.sampled_from(order), st.booleans()),
                                        max_size=5)):
        if src != dst:
            links.append({"src": src, "dst": dst, "bandwidth": draw(finite_bandwidths),
                          "latency": draw(finite_latencies), "bidirectional": both})
    with_boxes = draw(st.booleans())
    nodes = [{"id": g, "type": "gpu", **({"box": i % 2} if with_boxes else {})} for i, g in enumerate(gpus)]
    nodes += [{"id": s, "type": "switch"} for s in switches]
    document: dict[str, Any] = {"name": draw(st.text(min_size=1, max_size=8)),
                                "description": draw(st.text(max_size=12)), "nodes": nodes, "links": links}
    return document  # declared dimensions must match the links exactly: see test_dimensions_round_trip


@settings(max_examples=60, deadline=None)
@given(random_documents())
def test_round_trip_to_dict_from_dict(document):
    topo = Topology.from_dict(document, "random")
    data = topo.to_dict()
    again = Topology.from_dict(data, "again")
    assert again.to_dict() == data
    assert again.gpus == topo.gpus and again.switches == topo.switches
    assert again.boxes == topo.boxes and again.dimensions == topo.dimensions
    for u, v, attributes in topo.graph.edges(data=True):
        assert again.graph.edges[u, v] == attributes
    assert again.graph.number_of_edges() == topo.graph.number_of_edges()
    # through JSON text (float repr) and through the compact writer of the shipped files
    assert Topology.from_dict(parse_json(json.dumps(data), "text"), "text").to_dict() == data
    compact = Topology.from_dict(parse_json(topology_json(topo), "compact"), "compact")
    assert graph_layout(compact) == graph_layout(topo)  # the same graph, neighbour order included
    assert compact.to_dict() == data
    assert topology_json(compact) == topology_json(topo)  # the writer is idempotent


@pytest.mark.parametrize("spec", ["torus:dims=4x2x3", "multidim:kinds=Ring/Switch,sizes=4x2,bandwidths=50x25",
                                  "hypercube:d=3", "ring:n=2", "switch:n=5"])
def test_dimensions_round_trip(spec):
    from synth.library import load_topology

    topo = load_topology(spec)
    again = Topology.from_dict(topo.to_dict(), "again")
    assert again.dimensions == topo.dimensions and again.to_dict() == topo.to_dict()
