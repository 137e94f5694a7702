"""Achievable bandwidth: a topology's links at the rate a runtime delivers, not their line rate.

A link's ``bandwidth`` in synth is its line rate. A runtime moving data with NCCL's kernels gets less:
NCCL's maintainers give about 370 GB/s of application bandwidth out of NVLink 4's 450 GB/s
(NVIDIA/nccl-tests#212, NVIDIA/nccl#1442), and public nccl-tests outputs show the same kind of gap on
NICs. ``SPEC@achievable`` (any library spec, shipped name or file, e.g. ``dgx-h100:boxes=2@achievable``)
is the same topology with every link's bandwidth multiplied by the achievable fraction of its link
class, and its latencies at what NCCL's kernels take; the name keeps the suffix, so every output that
names the topology says which rates it used. Without the suffix links run at line rate with the library's
assumed latencies (the ideal α-β model of the papers).

Latency
-------
- ``scale-up``: a step from gpu to gpu takes :data:`SCALE_UP_STEP_US` (0.6 µs), NCCL 2.23.4's own per-step
  NVLink latency for LL (``hwLat`` in ``src/graph/tuning.cc``); through a switch, each of the step's two
  links takes half. On one H20 box it predicts 12.0 µs for a 4-byte allreduce (ring, LL) against 12.5
  measured (deepseek-ai/DeepEP#303), where the library's assumed 0.7 µs per NVSwitch hop gives 23.2.
- ``scale-out``: the library's latencies (InfiniBand: gpu, NIC, switch, NIC, gpu sum to 2.6 µs, NCCL's
  network LL step is 2.7). Another network stack named after the suffix, ``SPEC@achievable:efa`` (AWS EFA
  through aws-ofi-nccl) or ``SPEC@achievable:tcpxo`` (GCP GPUDirect-TCPXO), adds its fixed cost per
  collective that spans boxes (:data:`NETWORK_OVERHEAD_US`, recorded as ``metadata["network_overhead_us"]``
  and charged once by the flow model, :func:`synth.flow.fixed_latency_s`): a software overhead, not a
  longer wire, so it does not stall a pipeline's window at large sizes. The figures are fitted to the data
  file's small-size rows (the median predicted time equal to the measured one, for the rows of that
  network), so they describe the runs published, not a specification: EFA from 8 rows of three sources
  (p4de, p5 and p6 instances, whose EFA generations differ widely), TCPXO from 4 rows of one source.

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
from typing import Any

import networkx as nx

from synth.topology import Topology, fingerprint

#: The metadata key holding the line-rate topology's fingerprint: a schedule made for it runs on this one too
#: (the same gpus, links and paths; only the rates differ).
LINE_RATE_KEY = "line_rate_sha256"
#: The metadata key the flow model reads (:data:`synth.flow.NETWORK_OVERHEAD_KEY`).
NETWORK_OVERHEAD_KEY = "network_overhead_us"

#: The suffix that selects achievable link rates.
SUFFIX = "@achievable"
SCALE_UP = "scale-up"
SCALE_OUT = "scale-out"

#: Achievable fraction of line rate per link class (see the module docstring for the sources).
ACHIEVABLE: Mapping[str, Fraction] = {SCALE_UP: Fraction(82, 100), SCALE_OUT: Fraction(92, 100)}
#: A scale-up step's latency (µs): NCCL 2.23.4's ``hwLat[NVLINK][RING][LL]``.
SCALE_UP_STEP_US = 0.6
#: The network stacks the suffix names (``@achievable:NAME``) and their fixed cost (µs) per collective that
#: spans boxes, over InfiniBand's (see the module docstring).
NETWORK_OVERHEAD_US: Mapping[str, float] = {"ib": 0.0, "efa": 80.0, "tcpxo": 116.0}
#: The network the plain suffix means.
DEFAULT_NETWORK = "ib"


def split_suffix(spec: str) -> tuple[str, str | None]:
    """``(base spec, network)``: the spec without a trailing ``@achievable`` or ``@achievable:NETWORK``
    and the network it names (:data:`DEFAULT_NETWORK` for the plain suffix), or None without a suffix.

    Examples
    --------
    >>> split_suffix("dgx-h100@achievable"), split_suffix("dgx-h100:boxes=2@achievable:efa")
    (('dgx-h100', 'ib'), ('dgx-h100:boxes=2', 'efa'))
    >>> split_suffix("ring:n=4")
    ('ring:n=4', None)
    """
    text = str(spec)
    base, mark, network = text.rpartition(SUFFIX)
    if not mark or not base or (network and not network.startswith(":")):
        return text, None
    name = network[1:] if network else DEFAULT_NETWORK
    if name not in NETWORK_OVERHEAD_US:
        from synth.errors import InputError

        raise InputError(text, "topology", f"unknown network {name!r} after {SUFFIX}:; expected one of "
                         + ", ".join(sorted(NETWORK_OVERHEAD_US)))
    return base, name


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


def achievable(topology: Topology, table: Mapping[str, Fraction] | None = None,
               network: str = DEFAULT_NETWORK) -> Topology:
    """``topology`` with each link's bandwidth times its class's achievable fraction (:data:`ACHIEVABLE`)
    and the latencies of the module docstring for ``network``, named ``NAME@achievable`` (plus
    ``:NETWORK`` for another network than InfiniBand); a topology already so named is returned as it is."""
    if SUFFIX in topology.name:
        return topology
    fractions = dict(ACHIEVABLE if table is None else table)
    overhead = NETWORK_OVERHEAD_US[network]
    graph = nx.DiGraph(topology.graph)
    classes = link_classes(topology)
    gpus = set(topology.gpus)
    for (src, dst), link_class in classes.items():
        data = graph.edges[src, dst]
        scaled = Fraction(str(data["bandwidth"])) * fractions[link_class]
        data["bandwidth"] = round(float(scaled), 9)
        if link_class == SCALE_UP:
            data["latency"] = SCALE_UP_STEP_US if src in gpus and dst in gpus else SCALE_UP_STEP_US / 2
    present = set(classes.values())
    rates = ", ".join(f"{name} {float(value):.0%}" for name, value in sorted(fractions.items()) if name in present)
    latency = f"; {SCALE_UP_STEP_US:g} us per scale-up step" if SCALE_UP in present else ""
    metadata: dict[str, Any] = {
        **topology.metadata, "achievable": {**{name: str(value) for name, value in sorted(fractions.items())},
                                            "network": network},
        LINE_RATE_KEY: fingerprint(topology)}
    if overhead and SCALE_OUT in present:
        latency += f"; {network}: {overhead:g} us per collective across boxes"
        metadata[NETWORK_OVERHEAD_KEY] = overhead
    suffix = SUFFIX if network == DEFAULT_NETWORK else f"{SUFFIX}:{network}"
    return dataclasses.replace(
        topology, name=topology.name + suffix, graph=nx.freeze(graph),
        description=f"{topology.description} (links at achievable rates: {rates} of line rate{latency})".strip(),
        metadata=metadata)


def link_rates_note(topology: Topology) -> str:
    """The assumption a time on ``topology`` rests on about its links, in one line for a command's notes.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> link_rates_note(load_topology("dgx-h100:boxes=2@achievable"))
    'links: at achievable rates (scale-out 92%, scale-up 82% of line rate; network ib), fitted to public nccl-tests runs (docs/calibration.md)'
    >>> link_rates_note(load_topology("ring:n=4")).startswith("links: at their line rates")
    True
    """
    recorded = topology.metadata.get("achievable")
    if isinstance(recorded, Mapping):
        rates = ", ".join(f"{name} {float(Fraction(str(value))):.0%}" for name, value in sorted(recorded.items())
                          if name != "network")
        return (f"links: at achievable rates ({rates} of line rate; network {recorded.get('network', DEFAULT_NETWORK)}), "
                "fitted to public nccl-tests runs (docs/calibration.md)")
    return ("links: at their line rates (the ideal α-β model); runtimes reach less (NVLink about 80%): append "
            "@achievable to the topology for the rates public nccl-tests runs measure (docs/calibration.md)")


def line_rate(topology: Topology) -> Topology:
    """The same fabric at its links' line rates: ``topology`` itself, or, for one at achievable rates
    (``SPEC@achievable``, a process group of one included), every link's bandwidth divided back by its
    class's fraction. The bounds synth rates schedules against use it (:func:`synth.compare.lower_bound`,
    ``synth bound``), so that a bound is one the hardware cannot beat: achievable rates model what a
    runtime reaches, not what the links allow. Where the division is not exact in 9 decimals, the
    bandwidth is rounded up (a bound from a larger bandwidth is lower, so it stays a bound). The
    latencies stay the achievable topology's (NCCL's per-step figures).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> line, real = load_topology("dgx-h100:boxes=2"), load_topology("dgx-h100:boxes=2@achievable")
    >>> line_rate(real).bandwidth("b0.gpu0", "b0.nvs") == line.bandwidth("b0.gpu0", "b0.nvs") == 450.0
    True
    >>> line_rate(line) is line
    True
    """
    recorded = topology.metadata.get("achievable")
    if not isinstance(recorded, Mapping):
        return topology
    return topology.memoized(__name__, "line rate", lambda: _undone(topology, recorded))


def _undone(topology: Topology, recorded: Mapping[str, Any]) -> Topology:
    """``topology`` with its achievable fractions divided back out of every link (see :func:`line_rate`)."""
    import math

    fractions = {name: Fraction(str(value)) for name, value in recorded.items() if name != "network"}
    graph = nx.DiGraph(topology.graph)
    for (src, dst), link_class in link_classes(topology).items():
        data = graph.edges[src, dst]
        derated = Fraction(repr(float(data["bandwidth"])))
        exact = derated / fractions[link_class]
        if (exact * 10**9).denominator == 1:
            data["bandwidth"] = float(exact)
        else:  # the line rate had more than 9 decimals: round up, so a bound from it stays a bound
            upper = (derated + Fraction(1, 2 * 10**9)) / fractions[link_class]
            data["bandwidth"] = math.nextafter(float(upper), math.inf)
    metadata = {key: value for key, value in topology.metadata.items()
                if key not in ("achievable", LINE_RATE_KEY, NETWORK_OVERHEAD_KEY)}
    base, _ = split_suffix(topology.name)
    return dataclasses.replace(topology, name=base, graph=nx.freeze(graph), metadata=metadata)
