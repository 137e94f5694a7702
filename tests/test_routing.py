"""Routing as a property of the topology: paths cross only switches and forwarding gpus, and pairs that no
such path joins get the shortest relay chain."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import topology_documents

from synth.library import load_topology
from synth.routing import chain_paths, crossed_gpu, neighbors, relay_chain, route
from synth.topology import Topology


def _logical_graph(topology: Topology) -> nx.DiGraph:
    """Rank a -> rank b when a forwarding path joins them (an independent search with networkx)."""
    graph = topology.graph
    passable = [node for node in graph.nodes if topology.forwards(node)]
    logical = nx.DiGraph()
    logical.add_nodes_from(topology.ranks)
    for a, gpu_a in enumerate(topology.gpus):
        for b, gpu_b in enumerate(topology.gpus):
            if a != b and nx.has_path(graph.subgraph({gpu_a, gpu_b, *passable}), gpu_a, gpu_b):
                logical.add_edge(a, b)
    return logical


def test_dgx1_pairs_without_a_link_relay_through_one_gpu():
    dgx1 = load_topology("dgx1")
    assert dgx1.non_forwarding_gpus == frozenset(dgx1.gpus)
    for a in dgx1.ranks:
        assert neighbors(dgx1, a) == sorted(dgx1.rank_of[g] for g in dgx1.graph.successors(dgx1.gpus[a]))
        for b in dgx1.ranks:
            if a == b:
                continue
            chain = relay_chain(dgx1, a, b)
            linked = dgx1.has_link(dgx1.gpus[a], dgx1.gpus[b])
            assert len(chain) == (2 if linked else 3)
            assert (route(dgx1, a, b) is not None) == linked
            for hop in chain_paths(dgx1, a, b):
                assert len(hop) == 2 and dgx1.has_link(*hop)
    # widest relay first: 0 -> 7 through 4 (double links 0-4, 4-7) rather than 3 (single link 3-7)
    assert relay_chain(dgx1, 0, 7) == (0, 4, 7)


def test_rail_systems_relay_across_rails_and_forwarding_tori_do_not():
    a100 = load_topology("dgx-a100:boxes=2")
    assert route(a100, 0, 8) == ("b0.gpu0", "b0.nic0", "rail0", "b1.nic0", "b1.gpu0")
    assert route(a100, 0, 9) is None and relay_chain(a100, 0, 9) == (0, 1, 9)  # gpu1 is on rail 1
    torus = load_topology("torus:dims=4x4")
    assert torus.non_forwarding_gpus == frozenset()
    assert relay_chain(torus, 0, 10) == (0, 10) and len(route(torus, 0, 10)) == 5
    assert neighbors(torus, 0, via_gpus=False) == [1, 3, 4, 12]
    assert crossed_gpu(torus, route(torus, 0, 10)) is None
    assert crossed_gpu(load_topology("dgx1"), ("gpu0", "gpu4", "gpu7")) == "gpu4"


@st.composite
def forwarding_topologies(draw) -> Topology:
    document = draw(topology_documents(max_gpus=7, max_switches=2))
    for node in document["nodes"]:
        if node["type"] == "gpu" and draw(st.booleans()):
            node["forwards"] = True
    return Topology.from_dict(document, "random")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=forwarding_topologies())
def test_relay_chains_on_random_topologies_are_valid_shortest_and_prefix_closed(topology):
    logical = _logical_graph(topology)
    for a in topology.ranks:
        assert neighbors(topology, a) == sorted(logical.successors(a))
        for b in topology.ranks:
            if a == b:
                continue
            chain = relay_chain(topology, a, b)
            assert chain[0] == a and chain[-1] == b and len(set(chain)) == len(chain)
            assert len(chain) - 1 == nx.shortest_path_length(logical, a, b), "fewest relays"
            assert chain[:-1] == relay_chain(topology, a, chain[-2]), "a chain ends the chain to its last relay"
            paths = chain_paths(topology, a, b)
            assert len(paths) == len(chain) - 1
            for (x, y), path in zip(zip(chain, chain[1:], strict=False), paths, strict=True):
                assert path[0] == topology.gpus[x] and path[-1] == topology.gpus[y]
                assert all(topology.has_link(u, v) for u, v in zip(path, path[1:], strict=False))
                assert crossed_gpu(topology, path) is None
                assert len(path) - 1 == nx.shortest_path_length(
                    topology.graph.subgraph({path[0], path[-1], *(n for n in topology.graph if topology.forwards(n))}),
                    path[0], path[-1]), "fewest hops"
            switch_only = route(topology, a, b, via_gpus=False)
            if switch_only is not None:
                assert not any(topology.is_gpu(node) for node in switch_only[1:-1])


def test_forwarding_is_part_of_the_file_format():
    document = {"name": "f", "nodes": [{"id": "a", "type": "gpu"}, {"id": "b", "type": "gpu", "forwards": True},
                                       {"id": "c", "type": "gpu"}],
                "links": [{"src": "a", "dst": "b", "bandwidth": 1}, {"src": "b", "dst": "c", "bandwidth": 1}]}
    topology = Topology.from_dict(document)
    assert topology.forwards("b") and not topology.forwards("a")
    assert route(topology, 0, 2) == ("a", "b", "c")
    data = topology.to_dict()
    assert [node.get("forwards") for node in data["nodes"]] == [None, True, None]
    assert Topology.from_dict(data).non_forwarding_gpus == frozenset({"a", "c"})


@pytest.mark.parametrize(("spec", "forwarding"), [
    ("ring:n=4", True), ("fully-connected:n=4", True), ("torus:dims=3x3", True), ("hypercube:d=2", True),
    ("multidim:kinds=Ring/Switch,sizes=4x2", True), ("tpu-v4:dims=2x2x2", True), ("switch:n=4", False),
    ("dgx1", False), ("ndv2:boxes=2", False), ("dgx2", False), ("dgx-a100:boxes=2", False), ("dgx-h100:boxes=2", False),
    ("mi250", False), ("leaf-spine", False), ("bigraph", False)])
def test_library_marks_router_chips_as_forwarding(spec, forwarding):
    topology = load_topology(spec)
    assert topology.non_forwarding_gpus == (frozenset() if forwarding else frozenset(topology.gpus))
