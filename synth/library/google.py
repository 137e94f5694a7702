"""Google TPU slices: v4 and v5p 3-D tori; each builder's docstring gives its sources."""

from __future__ import annotations

from synth.library.building import (
    bandwidth_value,
    dimension_product,
    dimension_sizes,
    latency_value,
)
from synth.library.registry import entry
from synth.topology import Topology

TPU_V5P_ICI_GBPS = 100.0  # one TPU v5p ICI link, per direction (1,200 GB/s both ways over 6 links per chip)


@entry("tpu-v4", "Google TPU v4 slice: 3D torus of chips, ~45 GB/s per ICI link", shipped=True)
def tpu_v4(dims: tuple[int, ...] = (4, 4, 4), bandwidth: float = 45.0, latency: float = 1.0) -> Topology:
    """A Google TPU v4 slice: chips ``tpu{rank}`` on a 3D torus with wrap-around (rank = x + X*(y + Y*z)).

    Sources: 4x4x4 cubes joined by optical circuit switches into AxBxC tori (Google's TPU v4 paper);
    roughly 45-50 GB/s per ICI link per direction, derived from published pod figures (not a
    datasheet), so 45 GB/s here; 1.0 µs per hop is an assumption. Chips forward: each TPU v4 chip
    routes ICI traffic between its links.

    Examples
    --------
    >>> t = tpu_v4()
    >>> t.num_ranks, t.graph.out_degree("tpu0")
    (64, 6)
    """
    return _slice("tpu-v4", "v4", dims, bandwidth, latency)


@entry("tpu-v5p", "Google TPU v5p slice: 3D torus of chips, 100 GB/s per ICI link and direction")
def tpu_v5p(dims: tuple[int, ...] = (4, 4, 4), bandwidth: float = TPU_V5P_ICI_GBPS, latency: float = 1.0) -> Topology:
    """A Google TPU v5p slice: chips ``tpu{rank}`` on a 3D torus with wrap-around (rank = x + X*(y + Y*z)).

    Sources: Google Cloud TPU v5p documentation: 8,960 chips per pod, slices up to 16x16x24 (6,144
    chips), 3D torus interconnect, 1,200 GB/s bidirectional ICI bandwidth per chip, that is 100 GB/s per
    direction on each of its 6 links. Full cubes (every size a multiple of 4) are tori; smaller shapes
    have no wrap-around links in the product, but are modelled with them here (an assumption, as is
    1.0 µs per hop). Chips forward (``forwards``): ICI routes through the chips between the ends. The allgather optimum of a slice of N chips is set by the cut around all chips but
    one: N * 600 / (N - 1) GB/s (609.52 for 4x4x4).

    Examples
    --------
    >>> t = tpu_v5p(dims=(4, 4, 8))
    >>> t.num_ranks, t.graph.out_degree("tpu0"), t.bandwidth("tpu0", "tpu1")
    (128, 6, 100.0)
    """
    return _slice("tpu-v5p", "v5p", dims, bandwidth, latency)


def _slice(name: str, generation: str, dims: tuple[int, ...], bandwidth: float, latency: float) -> Topology:
    """A TPU slice: chips on a 3D torus with wrap-around, forwarding (the parameters checked by name)."""
    sizes = dimension_sizes(dims, "dims", lengths=(3,))
    bandwidth, latency = bandwidth_value(bandwidth, "bandwidth"), latency_value(latency, "latency")
    gpus, switches, links, dimensions = dimension_product(["Ring"] * 3, sizes, [bandwidth] * 3, [latency] * 3, "tpu")
    shape = "x".join(map(str, sizes))
    return Topology.build(name, gpus, switches, links, dimensions=dimensions, forwards=True,
                          description=f"Google TPU {generation} {shape} slice: 3D torus, {bandwidth} GB/s per ICI link")
