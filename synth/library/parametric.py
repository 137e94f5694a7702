"""Parametric builders: ASTRA-sim's single-dimension systems, tori, hypercubes, fat-trees and products."""

from __future__ import annotations

import math

from synth.errors import InputError
from synth.library.building import (
    LinkSpec,
    bandwidth_value,
    dimension_product,
    dimension_sizes,
    integer_at_least,
    latency_value,
    per_dimension,
    require,
    within_build_limits,
)
from synth.library.registry import entry
from synth.library.spec import format_value
from synth.topology import MAX_NODES, Dimension, Topology

_KIND_ALIASES = {"ring": "Ring", "fullyconnected": "FullyConnected", "fc": "FullyConnected", "switch": "Switch"}


@entry("ring", "n gpus on a bidirectional ring (ASTRA-sim Ring)")
def ring(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """``n`` gpus on a bidirectional ring: gpu i linked to gpu i+1 mod n.

    Gpus forward (``forwards``): ASTRA-sim's Ring routes a message through the npus between its ends.

    Examples
    --------
    >>> ring(n=4).graph.number_of_edges()  # 4 links, both directions
    8
    """
    return _one_dimension("ring", "Ring", "on a bidirectional ring", n, bandwidth, latency)


@entry("fully-connected", "n gpus, a direct link between every pair (ASTRA-sim FullyConnected)")
def fully_connected(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """``n`` gpus with a direct link between every pair.

    Gpus forward, as npus do in ASTRA-sim's network backend (every pair has its own link, so only
    multi-hop flows such as ``mcf``'s use it).

    Examples
    --------
    >>> fully_connected(n=4).graph.number_of_edges()  # 6 pairs, both directions
    12
    """
    return _one_dimension("fully-connected", "FullyConnected", "fully connected", n, bandwidth, latency)


def _one_dimension(name: str, kind: str, shape: str, n: int, bandwidth: float, latency: float) -> Topology:
    """``n`` forwarding gpus in one ASTRA-sim dimension of ``kind`` (the parameters checked by name)."""
    n = integer_at_least(n, "n", 2)
    bandwidth, latency = bandwidth_value(bandwidth, "bandwidth"), latency_value(latency, "latency")
    gpus, switches, links, dims = dimension_product([kind], [n], [bandwidth], [latency], "gpu")
    return Topology.build(name, gpus, switches, links, dimensions=dims, forwards=True,
                          description=f"{n} gpus {shape}, {bandwidth} GB/s and {latency} us per link")


@entry("switch", "n gpus on one switch (ASTRA-sim Switch)")
def switch(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """``n`` gpus each linked to one switch node ``sw0`` (``bandwidth`` per gpu link).

    Gpus do not forward: every pair meets at the switch, so no path ever needs to cross a gpu.

    Examples
    --------
    >>> switch(n=4).switches
    ('sw0',)
    """
    n = integer_at_least(n, "n", 2)
    bandwidth, latency = bandwidth_value(bandwidth, "bandwidth"), latency_value(latency, "latency")
    gpus = [f"gpu{i}" for i in range(n)]
    links = [(g, "sw0", bandwidth, latency) for g in gpus]
    return Topology.build("switch", gpus, ["sw0"], links, dimensions=[Dimension("Switch", n, bandwidth, latency)],
                          description=f"{n} gpus on one switch, {bandwidth} GB/s and {latency} us per gpu link")


@entry("torus", "2D/3D torus with wrap-around links (a product of Ring dimensions)")
def torus(dims: tuple[int, ...] = (4, 4), bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """A torus of ``dims`` (e.g. ``4x4`` or ``4x4x4``), wrap-around in every dimension.

    Rank = x + nx*(y + ny*z); gpu ``gpu{rank}`` links to its ±1 neighbours in every dimension (a
    dimension of size 2 has a single link). ``dimensions`` records one Ring per axis. Gpus forward:
    torus chips carry their own routers (as TPU ICI and ASTRA-sim's Ring dimensions do).

    Examples
    --------
    >>> t = torus(dims=(4, 4))
    >>> t.num_ranks, t.graph.out_degree("gpu0")
    (16, 4)
    """
    sizes = dimension_sizes(dims, "dims")
    require(len(sizes) >= 2, f"dims must have at least 2 sizes (use ring for one), got {format_value(sizes)}")
    bandwidth, latency = bandwidth_value(bandwidth, "bandwidth"), latency_value(latency, "latency")
    k = len(sizes)
    gpus, switches, links, dimensions = dimension_product(["Ring"] * k, sizes, [bandwidth] * k, [latency] * k, "gpu")
    shape = "x".join(map(str, sizes))
    return Topology.build("torus", gpus, switches, links, dimensions=dimensions, forwards=True,
                          description=f"{shape} torus with wrap-around, {bandwidth} GB/s and {latency} us per link")


@entry("hypercube", "2^d gpus, gpu i linked to every i XOR 2^k")
def hypercube(d: int = 3, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """A ``d``-dimensional hypercube: 2^d gpus, gpu i linked to gpu i XOR 2^k for each k < d.

    Gpus forward: a hypercube is a direct network of router chips (ASTRA-sim models it as d dimensions
    of 2 npus, routed through the npus).

    Examples
    --------
    >>> h = hypercube(d=3)
    >>> h.num_ranks, h.graph.out_degree("gpu0")
    (8, 3)
    """
    d = integer_at_least(d, "d", 1)
    require(2**d <= MAX_NODES, f"d must be at most {int(math.log2(MAX_NODES))}, got {d}")
    bandwidth, latency = bandwidth_value(bandwidth, "bandwidth"), latency_value(latency, "latency")
    gpus, switches, links, dims = dimension_product(["FullyConnected"] * d, [2] * d, [bandwidth] * d, [latency] * d, "gpu")
    return Topology.build("hypercube", gpus, switches, links, dimensions=dims, forwards=True,
                          description=f"{d}-dimensional hypercube of {2**d} gpus, {bandwidth} GB/s per link")


@entry("leaf-spine", "2-tier fat-tree: gpus on leaf switches, every leaf linked to every spine")
def leaf_spine(
    leaves: int = 4,
    gpus_per_leaf: int = 4,
    spines: int = 2,
    bandwidth: float = 25.0,
    uplink_bandwidth: float | None = None,
    latency: float = 0.5,
    sharp: bool = False,
    servers: bool = False,
) -> Topology:
    """A 2-tier leaf-spine (folded Clos, fat-tree) network.

    Gpu ``gpu{r}`` (r = leaf*gpus_per_leaf + i) links to ``leaf{leaf}`` at ``bandwidth``; every leaf
    links to every ``spine{s}`` at ``uplink_bandwidth``, which defaults to non-blocking
    (gpus_per_leaf * bandwidth / spines); a smaller value oversubscribes the uplinks. ``sharp`` gives
    every leaf and spine InfiniBand SHARP (reduction and multicast,
    :func:`synth.library.nvidia.sharp_capabilities`). ``servers`` makes every gpu its own server (a box of
    one gpu: a cluster of single-gpu nodes on the fabric): every step between gpus is a network step, and
    NCCL runs as it does at one gpu per node (its PAT for allgather and reduce-scatter).

    Examples
    --------
    >>> t = leaf_spine(leaves=2, gpus_per_leaf=2, spines=2)
    >>> t.num_ranks, t.bandwidth("leaf0", "spine1")
    (4, 25.0)
    """
    leaves = integer_at_least(leaves, "leaves", 1)
    gpus_per_leaf = integer_at_least(gpus_per_leaf, "gpus_per_leaf", 1)
    spines = integer_at_least(spines, "spines", 1)
    require(leaves * gpus_per_leaf >= 2, "leaves * gpus_per_leaf must be at least 2")
    bandwidth, latency = bandwidth_value(bandwidth, "bandwidth"), latency_value(latency, "latency")
    uplink = gpus_per_leaf * bandwidth / spines if uplink_bandwidth is None else bandwidth_value(uplink_bandwidth,
                                                                                           "uplink_bandwidth")
    within_build_limits(leaves * gpus_per_leaf + leaves + spines, leaves * gpus_per_leaf + leaves * spines)
    gpus = [f"gpu{r}" for r in range(leaves * gpus_per_leaf)]
    leaf_ids = [f"leaf{i}" for i in range(leaves)]
    spine_ids = [f"spine{s}" for s in range(spines)]
    links: list[LinkSpec] = [(gpus[r], leaf_ids[r // gpus_per_leaf], bandwidth, latency) for r in range(len(gpus))]
    links += [(leaf, spine, uplink, latency) for leaf in leaf_ids for spine in spine_ids]
    if not isinstance(sharp, bool):
        raise InputError("", "sharp", f"expected true or false, got {sharp!r}")
    if not isinstance(servers, bool):
        raise InputError("", "servers", f"expected true or false, got {servers!r}")
    from synth.library.nvidia import sharp_capabilities

    return Topology.build(
        "leaf-spine", gpus, leaf_ids + spine_ids, links, boxes=list(range(len(gpus))) if servers else None,
        description=f"leaf-spine: {leaves} leaves x {gpus_per_leaf} gpus ({bandwidth} GB/s each), "
                    f"{spines} spines, {uplink:g} GB/s per leaf-spine link"
                    + (", every gpu its own server" if servers else ""),
        capabilities=dict.fromkeys(leaf_ids + spine_ids, sharp_capabilities()) if sharp else None)


@entry("multidim", "ASTRA-sim style product of Ring/FullyConnected/Switch dimensions")
def multidim(
    kinds: tuple[str, ...] = ("Switch", "Switch"),
    sizes: tuple[int, ...] = (8, 2),
    bandwidths: tuple[float, ...] = (400.0, 50.0),
    latencies: tuple[float, ...] = (0.93625, 2.6),
) -> Topology:
    """A multi-dimensional system as ASTRA-sim describes it: dimension d is a Ring, FullyConnected or
    Switch of ``sizes[d]`` npus with its own per-link bandwidth (GB/s) and latency (µs per hop).

    Rank = x0 + n0*(x1 + n1*x2 ...). Each Switch dimension gets one switch node per group
    (``dim{d}.sw{g}``). The default is the ASTRA-sim HGX-H100 example (Switch of 8 at 400 GB/s and
    936.25 ns) with a scale-out Switch over 2 boxes. Spec form:
    ``multidim:kinds=Switch/Ring,sizes=8x4,bandwidths=400x25,latencies=0.9x1.3``; a single bandwidth
    or latency applies to every dimension. Gpus forward: this builder models ASTRA-sim's network, whose
    npus pass messages on (its Ring dimension routes through the npus between the ends).

    Examples
    --------
    >>> t = multidim(kinds=("Ring", "Switch"), sizes=(4, 2), bandwidths=(50, 25), latencies=0.5)
    >>> t.num_ranks, t.switches, [d.kind for d in t.dimensions]
    (8, ('dim1.sw0', 'dim1.sw1', 'dim1.sw2', 'dim1.sw3'), ['Ring', 'Switch'])
    """
    size_tuple = dimension_sizes(sizes, "sizes")
    count = len(size_tuple)
    kind_items = kinds if isinstance(kinds, list | tuple) else (kinds,) * count
    if len(kind_items) != count:
        raise InputError("", "", f"kinds must give one kind per dimension ({count}), got {format_value(kind_items)}")
    kind_tuple = []
    for kind in kind_items:
        canonical = _KIND_ALIASES.get(str(kind).lower().replace("-", "").replace("_", ""))
        if canonical is None:
            raise InputError("", "", f"each kind must be Ring, FullyConnected or Switch, got {kind!r}")
        kind_tuple.append(canonical)
    bandwidth_tuple = per_dimension(bandwidths, count, "bandwidths", bandwidth_value)
    latency_tuple = per_dimension(latencies, count, "latencies", latency_value)
    gpus, switches, links, dims = dimension_product(kind_tuple, size_tuple, bandwidth_tuple, latency_tuple, "gpu")
    shape = " x ".join(f"{k}({p}, {b:g} GB/s)" for k, p, b in zip(kind_tuple, size_tuple, bandwidth_tuple, strict=True))
    return Topology.build("multidim", gpus, switches, links, dimensions=dims, forwards=True,
                          description=f"multi-dimensional system: {shape}")
