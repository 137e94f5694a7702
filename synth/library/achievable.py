"""Achievable bandwidth: a topology's links at the rate a runtime delivers, not their line rate.

A link's ``bandwidth`` in synth is its line rate. A runtime moving data with NCCL's kernels gets less:
NCCL's maintainers give about 370 GB/s of application bandwidth out of NVLink 4's 450 GB/s
(NVIDIA/nccl-tests#212, NVIDIA/nccl#1442), and public nccl-tests outputs show the same kind of gap on
NICs. ``SPEC@achievable`` (any library spec, shipped name or file, e.g. ``dgx-h100:boxes=2@achievable``)
is the same topology with every link's bandwidth multiplied by the achievable fraction of its link
class; the name keeps the suffix, so every output that names the topology says which rates it used.
Without the suffix links run at line rate (the ideal α-β model of the papers).

Link classes
------------
- ``scale-up``: a link inside one box: gpu to gpu, or gpu to a switch whose every neighbour is a gpu
  of that box (an NVSwitch). On a topology without boxes every gpu is in one box.
- ``scale-out``: every other link (gpu to NIC, NIC to the network, switch to switch).

The fractions (:data:`ACHIEVABLE`) are fitted to the public nccl-tests outputs in
``bench/data/nccl_tests_measured.csv`` (``python -m bench --only measured`` prints how close synth's
predictions come, row by row). Switch capabilities (NVLS, SHARP reduction throughput) are left as they
are: their figures are already derived from measured runs.

Examples
--------
>>> from synth.library import load_topology
>>> topology = load_topology("dgx-h100:boxes=2@achievable")
>>> topology.name, topology.bandwidth("b0.gpu0", "b0.nvs"), topology.bandwidth("b0.gpu0", "b0.nic0")
('dgx-h100:boxes=2@achievable', 369.0, 46.0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction

import networkx as nx

from synth.topology import Topology

#: The suffix that selects achievable link rates.
SUFFIX = "@achievable"
SCALE_UP = "scale-up"
SCALE_OUT = "scale-out"

#: Achievable fraction of line rate per link class (see the module docstring for the sources).
ACHIEVABLE: Mapping[str, Fraction] = {SCALE_UP: Fraction(82, 100), SCALE_OUT: Fraction(92, 100)}


def split_suffix(spec: str) -> tuple[str, bool]:
    """``(base spec, achievable?)``: the spec without a trailing ``@achievable``.

    Examples
    --------
    >>> split_suffix("dgx-h100@achievable"), split_suffix("ring:n=4")
    (('dgx-h100', True), ('ring:n=4', False))
    """
    text = str(spec)
    if text.endswith(SUFFIX) and len(text) > len(SUFFIX):
        return text[: -len(SUFFIX)], True
    return text, False


def link_classes(topology: Topology) -> dict[tuple[str, str], str]:
    """The class (:data:`SCALE_UP` or :data:`SCALE_OUT`) of every directed link."""
    graph = topology.graph
    box_of: dict[str, int] = {
        gpu: (topology.boxes[rank] if topology.boxes is not None else 0) for rank, gpu in enumerate(topology.gpus)
    }
    for switch in topology.switches:
        neighbours = set(graph.successors(switch)) | set(graph.predecessors(switch))
        boxes = {box_of.get(node, -1) for node in neighbours}
        if len(boxes) == 1 and -1 not in boxes and all(node in topology.rank_of for node in neighbours):
            box_of[switch] = boxes.pop()
    classes: dict[tuple[str, str], str] = {}
    for src, dst in graph.edges:
        inside = src in box_of and dst in box_of and box_of[src] == box_of[dst]
        classes[(src, dst)] = SCALE_UP if inside else SCALE_OUT
    return classes


def achievable(topology: Topology, table: Mapping[str, Fraction] | None = None) -> Topology:
    """``topology`` with each link's bandwidth times its class's achievable fraction (:data:`ACHIEVABLE`),
    named ``NAME@achievable``; a topology already so named is returned as it is."""
    if topology.name.endswith(SUFFIX):
        return topology
    fractions = dict(ACHIEVABLE if table is None else table)
    graph = nx.DiGraph(topology.graph)
    classes = link_classes(topology)
    for (src, dst), link_class in classes.items():
        data = graph.edges[src, dst]
        scaled = Fraction(str(data["bandwidth"])) * fractions[link_class]
        data["bandwidth"] = round(float(scaled), 9)
    present = set(classes.values())
    rates = ", ".join(f"{name} {float(value):.0%}" for name, value in sorted(fractions.items()) if name in present)
    metadata = {**topology.metadata, "achievable": {name: str(value) for name, value in sorted(fractions.items())}}
    return dataclasses.replace(
        topology, name=topology.name + SUFFIX, graph=nx.freeze(graph),
        description=f"{topology.description} (links at achievable rates: {rates} of line rate)".strip(),
        metadata=metadata)
