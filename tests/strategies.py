"""Hypothesis strategies shared by the verifier, fuzzing and determinism tests: random valid topologies
and random mutations of schedules."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from synth.schedule import Schedule, Transfer
from synth.topology import Topology

BANDWIDTHS = [1.0, 2.5, 10.0, 12.5, 25.0, 50.0, 100.0]
LATENCIES = [0.0, 0.5, 0.7, 2.0]


@st.composite
def topology_documents(draw: Any, min_gpus: int = 2, max_gpus: int = 6, max_switches: int = 2) -> dict:
    """A random *valid* topology document: a random spanning tree over gpus and switches (bidirectional
    links, so every gpu reaches every other), plus a few extra links, some one-way, some parallel."""
    num_gpus = draw(st.integers(min_gpus, max_gpus))
    num_switches = draw(st.integers(0, max_switches))
    gpus = [f"gpu{i}" for i in range(num_gpus)]
    switches = [f"sw{i}" for i in range(num_switches)]
    nodes = draw(st.permutations(gpus + switches))
    links = []
    for index in range(1, len(nodes)):
        other = draw(st.integers(0, index - 1))
        links.append({"src": nodes[index], "dst": nodes[other], "bandwidth": draw(st.sampled_from(BANDWIDTHS)),
                      "latency": draw(st.sampled_from(LATENCIES))})
    extra = draw(st.lists(st.tuples(st.sampled_from(nodes), st.sampled_from(nodes), st.booleans()), max_size=4))
    for src, dst, both in extra:
        if src != dst:
            links.append({"src": src, "dst": dst, "bandwidth": draw(st.sampled_from(BANDWIDTHS)),
                          "latency": draw(st.sampled_from(LATENCIES)), "bidirectional": both})
    node_list = [{"id": g, "type": "gpu"} for g in gpus] + [{"id": s, "type": "switch"} for s in switches]
    return {"name": "random", "nodes": node_list, "links": links}


#: Link bandwidths of :func:`forest_topologies`, integers and awkward fractions.
FOREST_BANDWIDTHS = st.one_of(st.integers(1, 100).map(float), st.sampled_from([0.5, 2.25, 12.5, 33.3, 0.125, 7.75]))


@st.composite
def forest_topologies(draw: Any, max_gpus: int = 6, max_switches: int = 3, max_nodes: int | None = None) -> Topology:
    """Strongly connected topologies: a random spanning tree of two-way links over gpus and switches, plus
    extra links (gpu-gpu ones may be one-way or asymmetric). Switch links are two-way with one bandwidth,
    so switches forward what they receive (they cannot multicast)."""
    num_gpus = draw(st.integers(2, max_gpus))
    num_switches = draw(st.integers(0, max_switches))
    if max_nodes is not None:
        num_switches = min(num_switches, max_nodes - num_gpus)
    gpus = [f"g{i}" for i in range(num_gpus)]
    switches = [f"s{i}" for i in range(num_switches)]
    nodes = draw(st.permutations(gpus + switches))
    links = []
    for index in range(1, len(nodes)):
        links.append({"src": nodes[index], "dst": nodes[draw(st.integers(0, index - 1))], "bandwidth": draw(FOREST_BANDWIDTHS)})
    for a, b in draw(st.lists(st.tuples(st.sampled_from(nodes), st.sampled_from(nodes)), max_size=6)):
        if a == b:
            continue
        if a in switches or b in switches:
            links.append({"src": a, "dst": b, "bandwidth": draw(FOREST_BANDWIDTHS)})
        else:
            links.append({"src": a, "dst": b, "bandwidth": draw(FOREST_BANDWIDTHS), "bidirectional": draw(st.booleans())})
    document = {"name": "random", "nodes": [{"id": g, "type": "gpu"} for g in gpus]
                + [{"id": s, "type": "switch"} for s in switches], "links": links}
    return Topology.from_dict(document, "random")


def topologies(min_gpus: int = 2, max_gpus: int = 6, max_switches: int = 2) -> st.SearchStrategy[Topology]:
    """Random valid topologies (see :func:`topology_documents`)."""
    return topology_documents(min_gpus, max_gpus, max_switches).map(lambda doc: Topology.from_dict(doc, "random"))


def replace_transfers(schedule: Schedule, transfers: list[Transfer]) -> Schedule:
    """The same schedule with a new transfer list (ids renumbered 0..T-1; deps must already be remapped)."""
    renumbered = tuple(dataclasses.replace(t, id=i) for i, t in enumerate(transfers))
    return dataclasses.replace(schedule, transfers=renumbered)


def change(schedule: Schedule, index: int, **fields: Any) -> Schedule:
    """The same schedule with one transfer's fields replaced."""
    transfers = list(schedule.transfers)
    transfers[index] = dataclasses.replace(transfers[index], **fields)
    return dataclasses.replace(schedule, transfers=tuple(transfers))


def drop(schedule: Schedule, index: int) -> Schedule:
    """Remove one transfer; later ids shift down and deps on the removed one are dropped."""
    kept = []
    for t in schedule.transfers:
        if t.id == index:
            continue
        deps = tuple(d - (d > index) for d in t.deps if d != index)
        kept.append(dataclasses.replace(t, deps=deps))
    return replace_transfers(schedule, kept)


@st.composite
def mutations(draw: Any, schedule: Schedule, topology: Topology) -> Schedule:
    """One to three random edits of a schedule: any field of a transfer, dropped or duplicated transfers,
    added deps (possibly cycles). The result may or may not still be correct."""
    nodes = list(topology.graph.nodes)
    result = schedule
    for _ in range(draw(st.integers(1, 3))):
        count = len(result.transfers)
        if count == 0:
            break
        n = result.collective.num_ranks
        index = draw(st.integers(0, count - 1))
        t = result.transfers[index]
        what = draw(st.sampled_from(["src", "dst", "chunk", "op", "path", "walk", "deps", "add_dep", "drop",
                                     "duplicate"]))
        if what == "src":
            result = change(result, index, src=draw(st.integers(0, n - 1)))
        elif what == "dst":
            result = change(result, index, dst=draw(st.integers(0, n - 1)))
        elif what == "chunk":
            result = change(result, index, chunk=draw(st.integers(0, result.collective.num_chunk_ids)))
        elif what == "op":
            result = change(result, index, op="reduce" if t.op == "copy" else "copy")
        elif what == "path":
            path = draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=4))
            result = change(result, index, path=tuple(path))
        elif what == "walk":
            walk = [result.ranks[t.src]]
            for _ in range(draw(st.integers(1, 3))):
                successors = sorted(topology.graph.successors(walk[-1]))
                if not successors:
                    break
                walk.append(draw(st.sampled_from(successors)))
            result = change(result, index, path=tuple(walk))
        elif what == "deps":
            result = change(result, index, deps=tuple(sorted(set(draw(
                st.lists(st.integers(0, count - 1), max_size=3))))))
        elif what == "add_dep":
            result = change(result, index, deps=tuple(sorted(set(t.deps) | {draw(st.integers(0, count - 1))})))
        elif what == "drop":
            result = drop(result, index)
        else:
            result = replace_transfers(result, list(result.transfers) + [t])
    return result


@st.composite
def switch_capabilities(draw: Any) -> dict:
    """A random valid ``capabilities`` node attribute: a reduction, a multicast or both, each with or
    without a throughput (GB/s)."""
    kinds = draw(st.sampled_from(["reduction", "multicast", "both"]))
    caps: dict[str, Any] = {"version": 1}
    if kinds in ("reduction", "both"):
        reduction: dict[str, Any] = {
            "ops": draw(st.lists(st.sampled_from(["sum", "prod", "min", "max"]), min_size=1, max_size=4, unique=True)),
            "dtypes": draw(st.lists(st.sampled_from(["f32", "f16", "bf16", "i32"]), min_size=1, max_size=4,
                                    unique=True))}
        throughput = draw(st.one_of(st.none(), st.sampled_from([0.5, 1.0, 12.5, 25.0, 100.0, 1000.0])))
        if throughput is not None:
            reduction["throughput"] = throughput
        if draw(st.booleans()):
            reduction["max_group"] = draw(st.integers(2, 8))
        caps["reduction"] = reduction
    if kinds in ("multicast", "both"):
        caps["multicast"] = draw(st.one_of(st.just({}), st.sampled_from([{"throughput": 10.0}, {"throughput": 50.0}])))
    return caps


@st.composite
def capable_topology_documents(draw: Any, max_gpus: int = 5, max_switches: int = 2) -> dict:
    """A random valid topology document (:func:`topology_documents`) whose switches each may have random
    capabilities (:func:`switch_capabilities`)."""
    document = draw(topology_documents(2, max_gpus, max_switches))
    for node in document["nodes"]:
        if node["type"] == "switch" and draw(st.booleans()):
            node["capabilities"] = draw(switch_capabilities())
    return document
