"""AMD systems: MI250 (16 GCDs on xGMI) and MI300X boxes; each builder's docstring gives its sources."""

from __future__ import annotations

from synth.library.building import (
    NDR_GBPS,
    LinkSpec,
    bandwidth_value,
    box_count,
    boxed,
    rail_scale_out,
    within_build_limits,
)
from synth.library.registry import entry
from synth.topology import Topology

XGMI_GBPS = 50.0  # one xGMI (Infinity Fabric) link of an MI250 GCD, per direction
XGMI_LATENCY_US = 0.5  # assumed xGMI hop
MI300X_XGMI_GBPS = 64.0  # one MI300X Infinity Fabric link, per direction (128 GB/s both ways)

#: MI250 (16 GCDs) xGMI link multiplicity: row i, column j = links between GCD i and GCD j.
MI250_XGMI_LINKS = (
    (0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0),
    (4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    (0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    (0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0),
    (2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0),
    (0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0),
    (0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0),
    (0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2),
    (0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0),
)


@entry("mi250", "AMD MI250 box: 16 GCDs on xGMI (50 GB/s links, 4/2/1 per pair); boxes on one IB switch",
       shipped=True)
def mi250(boxes: int = 1) -> Topology:
    """AMD MI250 boxes: 16 GCDs each, joined by xGMI (Infinity Fabric) links of 50 GB/s.

    Sources: the per-pair link multiplicity :data:`MI250_XGMI_LINKS` (4, 2 or 1 links; 7 link units
    per GCD) as used in multi-box MI250 studies; 0.5 µs per xGMI link (assumed). With several boxes
    every GCD links at 16 GB/s to one shared IB switch ``ib`` (1.3 µs per hop, so 2.6 µs GCD to GCD as
    TACCL's IB α). The optimal allgather algbw of this model is 342.86 GB/s on 1 box and 354.13 on
    2 boxes (the bottleneck is a pair of GCDs joined by 4 links: 32*332/30). GCDs do not forward
    (xGMI moves data only when a kernel copies it): pairs without a link communicate by relay.

    Examples
    --------
    >>> t = mi250()
    >>> t.bandwidth("gcd0", "gcd1"), t.egress_bandwidth("gcd0")
    (200.0, 350.0)
    """
    boxes = box_count(boxes)
    gcds: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        ids = [boxed(boxes, box, f"gcd{i}") for i in range(16)]
        gcds += ids
        for i in range(16):
            for j in range(i + 1, 16):
                if MI250_XGMI_LINKS[i][j]:
                    links.append((ids[i], ids[j], MI250_XGMI_LINKS[i][j] * XGMI_GBPS, XGMI_LATENCY_US))
        if boxes > 1:
            links += [(g, "ib", 16.0, 1.3) for g in ids]
    return Topology.build(
        "mi250", gcds, ["ib"] if boxes > 1 else [], links,
        boxes=[r // 16 for r in range(len(gcds))] if boxes > 1 else None,
        description=f"AMD MI250, {boxes} box(es) of 16 GCDs on xGMI (50 GB/s per link, 4/2/1 links per pair)"
                    + ("; every GCD 16 GB/s to one IB switch" if boxes > 1 else ""))


@entry("mi300x", "AMD MI300X boxes: 8 gpus fully connected by xGMI (64 GB/s links); 400 Gb/s NIC per gpu, "
       "rail-optimized", shipped=True)
def mi300x(boxes: int = 1, nic_bandwidth: float = NDR_GBPS) -> Topology:
    """AMD Instinct MI300X platforms: 8 gpus per box, every pair joined by one Infinity Fabric (xGMI) link.

    Sources: AMD ROCm documentation, "MI300 series microarchitecture", node-level architecture: each
    MI300X uses seven Infinity Fabric links to form a fully connected 8-gpu system; AMD's MI300X data
    sheet gives 128 GB/s peak bidirectional bandwidth per link, so 64 GB/s per direction here (448 GB/s
    out of each gpu). Scale-out as on Azure's ND MI300X v5 (8 x 400 Gb/s NDR InfiniBand per VM): one
    50 GB/s NIC per gpu, gpu i's NIC ``b{k}.nic{i}`` on rail switch ``rail{i}`` (a rail switch stands for
    its non-blocking fabric; an assumption, as are 0.5 µs per xGMI hop and the NIC hops of
    :func:`dgx_a100`). The allgather optimum of one box is 8 * 448 / 7 = 512 GB/s. Gpus do not forward
    (an xGMI link carries data only when a kernel copies it).

    Examples
    --------
    >>> t = mi300x(boxes=2)
    >>> t.num_ranks, t.bandwidth("b0.gpu0", "b0.gpu7"), t.has_link("b1.nic3", "rail3")
    (16, 64.0, True)
    """
    boxes = box_count(boxes)
    nic_bandwidth = bandwidth_value(nic_bandwidth, "nic_bandwidth")
    within_build_limits(boxes * 17 + 8, boxes * 44)
    gpus: list[str] = []
    links: list[LinkSpec] = []
    per_box: list[list[str]] = []
    for box in range(boxes):
        ids = [boxed(boxes, box, f"gpu{i}") for i in range(8)]
        gpus += ids
        per_box.append(ids)
        links += [(ids[i], ids[j], MI300X_XGMI_GBPS, XGMI_LATENCY_US) for i in range(8) for j in range(i + 1, 8)]
    switches: list[str] = []
    if boxes > 1:
        switches, scale_out = rail_scale_out(per_box, lambda box, i: f"b{box}.nic{i}", lambda i: f"rail{i}",
                                              nic_bandwidth)
        links += scale_out
    return Topology.build(
        "mi300x", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"AMD MI300X, {boxes} box(es) of 8 gpus fully connected by 64 GB/s xGMI links"
                    + (f"; one {nic_bandwidth:g} GB/s NIC per gpu, NIC i of every box on rail i" if boxes > 1 else ""))
