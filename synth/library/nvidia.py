"""NVIDIA systems (and Azure's NDv2 built from them): DGX-1, DGX-2, DGX A100, DGX H100, DGX H200, DGX B200,
GB200 NVL72 and a DGX H100 SuperPOD-style cluster; each builder's docstring gives its sources. The NVSwitch
systems from DGX H100 on declare NVLink SHARP (:func:`nvls_capabilities`) as sold; InfiniBand SHARP is an
option (:func:`sharp_capabilities`)."""

from __future__ import annotations

import math
from collections.abc import Callable

from synth.errors import InputError
from synth.library.building import (
    IB_HOP_US,
    NDR_GBPS,
    PCIE_HOP_US,
    SWITCH_HOP_US,
    LinkSpec,
    bandwidth_value,
    box_count,
    boxed,
    integer_at_least,
    rail_scale_out,
    require,
    within_build_limits,
)
from synth.library.registry import entry
from synth.topology import Multicast, Reduction, SwitchCapabilities, Topology

NVLINK2_GBPS = 25.0  # one NVLink2 link (V100), per direction
NVLINK_LATENCY_US = 0.3  # TACCL's profiled NVLink α on NDv2 (a direct gpu-gpu link)
NVSWITCH_HOP_US = 0.7  # assumed per gpu<->NVSwitch hop (no public per-hop figure)
NVLINK5_GBPS = 50.0  # one NVLink 5 link, per direction (100 GB/s both ways; 18 per Blackwell gpu = 1.8 TB/s)

#: NVLink SHARP (NVLS) reduction operations and element types: those of the PTX ``multimem.ld_reduce``
#: instruction that NCCL's NVLS algorithm uses (add, min, max; no product).
NVLS_OPS = ("sum", "min", "max")
NVLS_DTYPES = ("f32", "f16", "bf16", "i32", "u32", "i64", "u64")
#: Aggregate reduction throughput of a DGX H100's NVSwitch fabric, GB/s of reduced output: NCCL's NVLS
#: allreduce reaches about 275 GB/s algbw on 8 H100s (NVIDIA/nccl-tests#212, NVIDIA/nccl#1442), so the
#: switches produce 275 GB/s of sums at NCCL's protocol efficiency; the same links carry ring traffic at
#: 370 of their 450 GB/s (ibid.), and the bound model counts line rate, so the switch's rate in the
#: model is 275 * 450 / 370 = 334.46 GB/s, rounded up to 334.5 (rounding up keeps the time bound low).
#: An estimate from one measurement, not a datasheet figure.
H100_NVLS_GBPS = 334.5
#: InfiniBand SHARP (Quantum / Quantum-2 switches through NCCL's CollNet plugin): operations and types
#: of the nccl-rdma-sharp-plugins reduction support.
SHARP_OPS = ("sum", "min", "max")
SHARP_DTYPES = ("f32", "f16", "bf16", "i32", "u32", "i64", "u64")


def nvls_capabilities(throughput: float | None = None) -> SwitchCapabilities:
    """NVLink SHARP on an NVSwitch node: reduction (:data:`NVLS_OPS`, :data:`NVLS_DTYPES`) and multicast
    (``multimem.st``), with the reduction's aggregate ``throughput`` (GB/s, None: the links limit it)."""
    return SwitchCapabilities(Reduction(NVLS_OPS, NVLS_DTYPES, throughput), Multicast())


def sharp_capabilities() -> SwitchCapabilities:
    """InfiniBand SHARP on a Quantum-class switch: streaming aggregation (:data:`SHARP_OPS`,
    :data:`SHARP_DTYPES`; no public throughput figure, so the links limit it) and multicast."""
    return SwitchCapabilities(Reduction(SHARP_OPS, SHARP_DTYPES), Multicast())


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InputError("", name, f"expected true or false, got {value!r}")
    return value


#: DGX-1 V100 NVLink pairs joined by two links (50 GB/s) and by one link (25 GB/s).
DGX1_DOUBLE_PAIRS = ((0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7))
DGX1_SINGLE_PAIRS = ((0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7))


def _dgx1_box(boxes: int, box: int) -> tuple[list[str], list[LinkSpec]]:
    gpus = [boxed(boxes, box, f"gpu{i}") for i in range(8)]
    links: list[LinkSpec] = [(gpus[a], gpus[b], 2 * NVLINK2_GBPS, NVLINK_LATENCY_US) for a, b in DGX1_DOUBLE_PAIRS]
    links += [(gpus[a], gpus[b], NVLINK2_GBPS, NVLINK_LATENCY_US) for a, b in DGX1_SINGLE_PAIRS]
    links.sort(key=lambda link: (gpus.index(link[0]), gpus.index(link[1])))
    return gpus, links


@entry("dgx1", "NVIDIA DGX-1 (V100): 8 gpus, hybrid cube-mesh NVLink2", shipped=True)
def dgx1() -> Topology:
    """NVIDIA DGX-1 with V100: 8 gpus and their NVLink2 hybrid cube-mesh, no switches.

    Sources: 6 NVLink2 ports per gpu at 25 GB/s per direction (NVIDIA DGX-1 V100 system architecture);
    the 8 pairs joined by two links get 50 GB/s, the 8 single-link pairs 25 GB/s, the other 12 pairs
    none (PCIe is left out). Latency 0.3 µs per link: TACCL's profiled NVLink α on NDv2. Gpus do not
    forward (NVLink moves data only when a kernel copies it), so those 12 pairs communicate by relay.

    Examples
    --------
    >>> dgx1().graph.number_of_edges()  # 16 gpu pairs, both directions
    32
    """
    gpus, links = _dgx1_box(1, 0)
    return Topology.build("dgx1", gpus, [], links,
                          description="NVIDIA DGX-1 V100: 8 gpus, NVLink2 hybrid cube-mesh, 25 GB/s per link "
                                      "(50 GB/s on double links)")


@entry("ndv2", "Azure NDv2: DGX-1 boxes, one 12.5 GB/s IB NIC per box, one IB switch", shipped=True)
def ndv2(boxes: int = 2) -> Topology:
    """Azure NDv2: ``boxes`` DGX-1 V100 boxes joined by InfiniBand.

    Each box is a DGX-1 (see :func:`dgx1`) plus one 100 Gb/s IB NIC (12.5 GB/s), a switch node
    ``b{k}.nic`` that every gpu of the box reaches over PCIe (12.5 GB/s, 0.3 µs assumed); all NICs
    link to one IB switch ``ib`` at 12.5 GB/s and 1.0 µs, so gpu-to-gpu across boxes pays TACCL's
    profiled IB α of 2.6 µs. The 2-box allgather bound of this model is 25 GB/s (the box cut). With
    ``boxes=1`` it is a DGX-1 without the NIC.

    Examples
    --------
    >>> t = ndv2(boxes=2)
    >>> t.num_ranks, t.boxes[8], t.bandwidth("b0.nic", "ib")
    (16, 1, 12.5)
    """
    boxes = box_count(boxes)
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        box_gpus, box_links = _dgx1_box(boxes, box)
        gpus += box_gpus
        links += box_links
        if boxes > 1:
            nic = f"b{box}.nic"
            switches.append(nic)
            links += [(g, nic, 12.5, PCIE_HOP_US) for g in box_gpus]
            links.append((nic, "ib", 12.5, IB_HOP_US))
    if boxes > 1:
        switches.append("ib")
    return Topology.build(
        "ndv2", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"Azure NDv2, {boxes} DGX-1 V100 box(es): NVLink2 cube-mesh per box"
                    + (", one 12.5 GB/s IB NIC per box, all NICs on one IB switch" if boxes > 1 else ""))


def _switch_box_system(
    boxes: int, gpus_per_box: int, gpu_bandwidth: float, nic_bandwidth: float, rail_of: Callable[[int], str],
) -> tuple[list[str], list[str], list[LinkSpec]]:
    """Boxes of gpus on one NVSwitch node each; with several boxes, gpu i has its own NIC ``b{k}.nic{i}``
    (``nic_bandwidth`` both ways) linked to the IB switch ``rail_of(i)``."""
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        nvs = boxed(boxes, box, "nvs")
        box_gpus = [boxed(boxes, box, f"gpu{i}") for i in range(gpus_per_box)]
        gpus += box_gpus
        switches.append(nvs)
        links += [(g, nvs, gpu_bandwidth, NVSWITCH_HOP_US) for g in box_gpus]
        if boxes > 1:
            for i, g in enumerate(box_gpus):
                nic = f"b{box}.nic{i}"
                switches.append(nic)
                links.append((g, nic, nic_bandwidth, PCIE_HOP_US))
                links.append((nic, rail_of(i), nic_bandwidth, IB_HOP_US))
    if boxes > 1:
        switches += sorted({rail_of(i) for i in range(gpus_per_box)}, key=lambda s: (len(s), s))
    return gpus, switches, links


@entry("dgx2", "NVIDIA DGX-2: 16 V100 on an NVSwitch fabric (150 GB/s per gpu); boxes share one IB switch",
       shipped=True)
def dgx2(boxes: int = 1) -> Topology:
    """NVIDIA DGX-2: 16 V100 gpus per box on 12 NVSwitches, modelled as one switch node ``nvs``.

    Sources: 6 NVLink2 per gpu into the switch fabric = 150 GB/s per gpu (NVIDIA DGX-2 documentation);
    0.7 µs per gpu-NVSwitch hop (assumed). With several boxes: 8 x 100 Gb/s IB NICs per box
    (12.5 GB/s each), NIC j shared by gpus 2j and 2j+1 over PCIe (12.5 GB/s per gpu, 0.3 µs assumed),
    every NIC on one IB switch ``ib`` (12.5 GB/s, 1.0 µs; 2.6 µs gpu to gpu as in TACCL's IB profile).

    Examples
    --------
    >>> dgx2().egress_bandwidth("gpu0")
    150.0
    """
    boxes = box_count(boxes)
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        nvs = boxed(boxes, box, "nvs")
        box_gpus = [boxed(boxes, box, f"gpu{i}") for i in range(16)]
        gpus += box_gpus
        switches.append(nvs)
        links += [(g, nvs, 6 * NVLINK2_GBPS, NVSWITCH_HOP_US) for g in box_gpus]
        if boxes > 1:
            for j in range(8):
                nic = f"b{box}.nic{j}"
                switches.append(nic)
                links += [(box_gpus[2 * j + s], nic, 12.5, PCIE_HOP_US) for s in (0, 1)]
                links.append((nic, "ib", 12.5, IB_HOP_US))
    if boxes > 1:
        switches.append("ib")
    return Topology.build(
        "dgx2", gpus, switches, links, boxes=[r // 16 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"NVIDIA DGX-2, {boxes} box(es): 16 V100 per box on one NVSwitch node, 150 GB/s per gpu"
                    + ("; 8 x 12.5 GB/s IB NICs per box on one IB switch" if boxes > 1 else ""))


@entry("dgx-a100", "NVIDIA DGX A100: 8 A100 on NVSwitch (300 GB/s); per-gpu 25 GB/s NICs on 2 rail planes",
       shipped=True)
def dgx_a100(boxes: int = 1, nic_bandwidth: float = 25.0) -> Topology:
    """NVIDIA DGX A100 (Azure NDv4 alike): 8 A100 per box on an NVSwitch fabric (one node ``nvs``).

    Sources: 12 NVLink3 per gpu = 300 GB/s per gpu to the switch (NVIDIA DGX A100 documentation),
    0.7 µs per gpu-NVSwitch hop (assumed). With several boxes: one 200 Gb/s HDR NIC per gpu (25 GB/s),
    gpu i to its own NIC switch node ``b{k}.nic{i}`` (25 GB/s, 0.3 µs assumed); even-numbered NICs on
    IB switch plane ``rail0``, odd-numbered on ``rail1`` (25 GB/s, 1.0 µs; 2.6 µs gpu to gpu, TACCL's
    IB α). The optimal allgather algbw of this model is 342.86 GB/s on 1 box (300*8/7), 346.67 on 2
    boxes (a gpu cut: 16*325/15) and 266.67 on 4 (a box cut: 32*200/24). ``nic_bandwidth`` (GB/s) sets
    the gpu-NIC and NIC-rail links, for what-if sweeps over NIC generations. Gpus do not forward: a
    message to another box on the other rail plane relays through a gpu (as NCCL's PXN does).

    Examples
    --------
    >>> t = dgx_a100(boxes=2)
    >>> t.num_ranks, len(t.switches), t.bandwidth("b1.gpu3", "b1.nic3"), t.has_link("b1.nic3", "rail1")
    (16, 20, 25.0, True)
    """
    boxes = box_count(boxes)
    nic_bandwidth = bandwidth_value(nic_bandwidth, "nic_bandwidth")
    gpus, switches, links = _switch_box_system(boxes, 8, 300.0, nic_bandwidth, lambda i: f"rail{i % 2}")
    return Topology.build(
        "dgx-a100", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"NVIDIA DGX A100, {boxes} box(es): 8 A100 per box on one NVSwitch node, 300 GB/s per gpu"
                    + (f"; one {nic_bandwidth:g} GB/s HDR NIC per gpu, even NICs on IB plane rail0, odd on rail1"
                       if boxes > 1 else ""))


@entry("dgx-h100", "NVIDIA DGX H100: 8 H100 on NVSwitch (450 GB/s, NVLS); 50 GB/s NIC per gpu, rail-optimized",
       shipped=True)
def dgx_h100(boxes: int = 1, nvls: bool = True, nic_bandwidth: float = NDR_GBPS) -> Topology:
    """NVIDIA DGX H100: 8 H100 per box on NVSwitch gen3 (one node ``nvs``), rail-optimized scale-out.

    Sources: 18 NVLink4 per gpu = 450 GB/s per gpu (NVIDIA DGX H100 documentation), 0.7 µs per
    gpu-NVSwitch hop (assumed). With several boxes: one 400 Gb/s NIC per gpu (50 GB/s), gpu i to its
    own NIC ``b{k}.nic{i}`` (50 GB/s, 0.3 µs assumed), NIC i of every box on rail switch ``rail{i}``
    (50 GB/s, 1.0 µs; 2.6 µs gpu to gpu, TACCL's IB α). Gpus do not forward: a message to gpu j of
    another box from gpu i != j relays through a gpu (as NCCL's PXN does).

    ``nvls`` (on, as the hardware is sold): each box's NVSwitch node reduces and multicasts (NVLink
    SHARP: NVIDIA's third-generation NVSwitch technical blog; PTX ISA ``multimem`` instructions), with
    the aggregate reduction throughput :data:`H100_NVLS_GBPS` derived there from NCCL's measured NVLS
    allreduce. ``nvls=false`` gives the passive fabric. ``nic_bandwidth`` (GB/s, default 50) sets each
    NIC's rate, e.g. 25 for the 200 Gb/s NICs of some clouds.

    Examples
    --------
    >>> t = dgx_h100(boxes=2)
    >>> t.num_ranks, t.has_link("b0.nic5", "rail5"), t.bandwidth("b0.gpu0", "b0.nvs")
    (16, True, 450.0)
    >>> t.reduction("b0.nvs").throughput, dgx_h100(nvls=False).capabilities
    (334.5, {})
    """
    return _hopper_system("dgx-h100", "H100", boxes, nvls, nic_bandwidth)


@entry("dgx-h200", "NVIDIA DGX H200: 8 H200 on NVSwitch gen3 (450 GB/s, NVLS); 50 GB/s NIC per gpu, rail-optimized")
def dgx_h200(boxes: int = 1, nvls: bool = True) -> Topology:
    """NVIDIA DGX H200: the DGX H100 fabric (:func:`dgx_h100`) with H200 gpus.

    Sources: NVIDIA DGX H200 documentation: 8 H200 on four third-generation NVSwitch chips, 18 NVLink4 per
    gpu (900 GB/s both directions, 450 GB/s per direction), 8 x 400 Gb/s ConnectX-7 NICs (50 GB/s); the
    same NVSwitch chip as DGX H100, so NVLS (``nvls``, on) gets the same reduction throughput
    :data:`H100_NVLS_GBPS` (no separate H200 measurement). Hops and rails as in :func:`dgx_h100`.

    Examples
    --------
    >>> dgx_h200().egress_bandwidth("gpu0"), dgx_h200().reduction("nvs").throughput
    (450.0, 334.5)
    """
    return _hopper_system("dgx-h200", "H200", boxes, nvls)


def _hopper_system(name: str, gpu: str, boxes: int, nvls: bool, nic_bandwidth: float = NDR_GBPS) -> Topology:
    """The DGX H100/H200 fabric: 8 gpus per box on one NVSwitch node (450 GB/s per gpu, NVLS when ``nvls``),
    one NIC per gpu (``nic_bandwidth``), NIC i of every box on rail switch i."""
    boxes = box_count(boxes)
    nic_bandwidth = bandwidth_value(nic_bandwidth, "nic_bandwidth")
    gpus, switches, links = _switch_box_system(boxes, 8, 450.0, nic_bandwidth, lambda i: f"rail{i}")
    nvswitches = [boxed(boxes, box, "nvs") for box in range(boxes)]
    return Topology.build(
        name, gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"NVIDIA DGX {gpu}, {boxes} box(es): 8 {gpu} per box on one NVSwitch node, 450 GB/s per gpu"
                    + (f"; one {nic_bandwidth:g} GB/s NIC per gpu, NIC i of every box on rail switch i"
                       if boxes > 1 else ""),
        capabilities=dict.fromkeys(nvswitches, nvls_capabilities(H100_NVLS_GBPS)) if _flag(nvls, "nvls") else None)


@entry("dgx-b200", "NVIDIA DGX B200: 8 B200 on NVLink 5 NVSwitch (900 GB/s, NVLS); 50 GB/s NIC per gpu, "
       "rail-optimized")
def dgx_b200(boxes: int = 1, nvls: bool = True) -> Topology:
    """NVIDIA DGX B200: 8 B200 per box on fifth-generation NVLink through two NVLink 5 switch chips (one
    node ``nvs``), rail-optimized scale-out.

    Sources: NVIDIA DGX B200 documentation and the DGX SuperPOD B200 reference architecture: 18 NVLink 5
    links per gpu, 1.8 TB/s both directions (900 GB/s per direction), 14.4 TB/s in all; 8 x 400 Gb/s
    ConnectX-7 NICs (50 GB/s), one per gpu, NIC i on rail i. ``nvls`` (on, as sold): the NVLink 5 switch
    reduces and multicasts (NVLink SHARP); no public figure limits its reduction rate, so only the links
    do. Hops as in :func:`dgx_h100` (assumed).

    Examples
    --------
    >>> t = dgx_b200(boxes=2)
    >>> t.bandwidth("b1.gpu3", "b1.nvs"), t.has_link("b1.nic3", "rail3"), t.reduction("b1.nvs").throughput
    (900.0, True, None)
    """
    boxes = box_count(boxes)
    gpus, switches, links = _switch_box_system(boxes, 8, 18 * NVLINK5_GBPS, NDR_GBPS, lambda i: f"rail{i}")
    nvswitches = [boxed(boxes, box, "nvs") for box in range(boxes)]
    return Topology.build(
        "dgx-b200", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"NVIDIA DGX B200, {boxes} box(es): 8 B200 per box on one NVLink 5 switch node, 900 GB/s per gpu"
                    + ("; one 50 GB/s NIC per gpu, NIC i of every box on rail switch i" if boxes > 1 else ""),
        capabilities=dict.fromkeys(nvswitches, nvls_capabilities()) if _flag(nvls, "nvls") else None)


@entry("gb200-nvl72", "NVIDIA GB200 NVL72: 72 Blackwell gpus on one NVLink switch fabric (18 NVLink 5 links, "
       "900 GB/s per gpu, NVLS); racks on 400 Gb/s rails")
def gb200_nvl72(racks: int = 1, rails: int = 4, nic_bandwidth: float = NDR_GBPS, nvls: bool = True) -> Topology:
    """NVIDIA GB200 NVL72 racks: 72 Blackwell gpus on one NVLink switch node per rack (``nvs``), 900 GB/s
    per gpu and direction (18 NVLink 5 links of 50 GB/s).

    Sources: NVIDIA DGX SuperPOD GB200 reference architecture, "Network fabrics": 18 compute trays and
    9 NVLink switch trays of 2 switch chips per rack; each B200 has 18 NVLink 5 links, one to each of
    the 18 chips, 1.8 TB/s per gpu (both directions). The 18 chips are one node here, as the other NVSwitch
    systems' chips are (:func:`dgx_a100`, :func:`dgx2`) and as NCCL's topology model has them (one NVS node,
    each gpu linked to it with the bandwidth of all its NVLinks): a gpu's traffic to a peer is spread over
    all its links, which a model with a node per chip would only reach by splitting every message 18 ways
    (single-path schedules there get one link, 50 GB/s). With several racks (``b{k}.`` prefixes, racks are
    the boxes) each gpu has a 400 Gb/s ConnectX-7 NIC (50 GB/s; four per 4-gpu compute tray, MLCommons
    GB200-NVL72 system descriptions) on a rail-optimized compute fabric. Assumptions (parameters): gpu
    i's NIC ``b{k}.nic{i}`` sits on rail switch ``rail{i % rails}`` (``rails=4``: one rail per gpu position
    in a compute tray), a rail switch stands for its whole non-blocking fat-tree, 0.7 µs per NVLink switch
    hop and the NIC hops of :func:`dgx_a100`. The allgather optimum of one rack is 72 * 900 / 71 = 912.68
    GB/s (the cut around 71 gpus: one gpu's links). Gpus do not forward (the NVLink and scale-out switches
    route). ``nvls`` (on, as sold): each rack's NVLink switch node reduces and multicasts across the rack
    (NVLink SHARP of the fifth-generation NVLink switch, NVIDIA GB200 NVL72 product pages); no public
    figure limits its reduction rate, so only the links do. ``nvls=false`` gives the passive fabric.

    Examples
    --------
    >>> t = gb200_nvl72()
    >>> t.num_ranks, t.switches, t.egress_bandwidth("gpu0")
    (72, ('nvs',), 900.0)
    """
    racks = integer_at_least(racks, "racks", 1)
    rails = integer_at_least(rails, "rails", 1)
    nic_bandwidth = bandwidth_value(nic_bandwidth, "nic_bandwidth")
    within_build_limits(racks * (72 * 2 + 1) + rails, racks * 72 * 3)
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    per_rack: list[list[str]] = []
    for rack in range(racks):
        rack_gpus = [boxed(racks, rack, f"gpu{i}") for i in range(72)]
        nvs = boxed(racks, rack, "nvs")
        gpus += rack_gpus
        switches.append(nvs)
        links += [(g, nvs, 18 * NVLINK5_GBPS, NVSWITCH_HOP_US) for g in rack_gpus]
        per_rack.append(rack_gpus)
    nvswitches = list(switches)
    if racks > 1:
        extra, scale_out = rail_scale_out(per_rack, lambda rack, i: f"b{rack}.nic{i}", lambda i: f"rail{i % rails}",
                                           nic_bandwidth)
        switches += extra
        links += scale_out
    return Topology.build(
        "gb200-nvl72", gpus, switches, links, boxes=[r // 72 for r in range(len(gpus))] if racks > 1 else None,
        description=f"NVIDIA GB200 NVL72, {racks} rack(s): 72 gpus per rack on one NVLink switch node, 900 GB/s "
                    "per gpu (18 NVLink 5 links)"
                    + (f"; one {nic_bandwidth:g} GB/s NIC per gpu on {rails} rails" if racks > 1 else ""),
        capabilities=dict.fromkeys(nvswitches, nvls_capabilities()) if _flag(nvls, "nvls") else None)


@entry("dgx-superpod", "DGX H100 SuperPOD-style rail-optimized fat-tree: scalable units of 32 boxes, leaf per "
       "rail, spines per pod, cores; oversubscription parameter")
def dgx_superpod(sus: int = 4, nodes_per_su: int = 32, sus_per_pod: int = 4, spines: int = 2, cores: int = 2,
                 oversubscription: float = 1.0, nic_bandwidth: float = NDR_GBPS, nvls: bool = True,
                 sharp: bool = False) -> Topology:
    """A DGX H100 SuperPOD-style cluster: DGX H100 boxes on a rail-optimized, multi-tier fat-tree.

    Boxes are :func:`dgx_h100` boxes (8 gpus at 450 GB/s on one NVSwitch node, one NIC per gpu at
    ``nic_bandwidth``). A scalable unit (SU) holds ``nodes_per_su`` boxes and one leaf switch per rail
    (``su{s}.leaf{r}``): NIC r of every box of the SU links to it. SUs are grouped ``sus_per_pod`` to a
    pod; every rail-r leaf of a pod links to each of the pod's ``spines`` rail-r spine switches
    (``pod{p}.spine{r}.{j}``) with its uplink bandwidth, ``nodes_per_su * nic_bandwidth /
    oversubscription`` split evenly. With more than one pod, every rail-r spine links to each of
    ``cores`` rail-r core switches (``core{r}.{j}``) with as much bandwidth as it receives from its
    leaves, split evenly (a non-blocking top tier). Switch nodes stand for parallel cables (bandwidths
    add up).

    Sources: NVIDIA DGX SuperPOD reference architecture with DGX H100 (RA-11333-001): SUs of 32 DGX
    H100, a rail-optimized NDR 400 Gb/s compute fabric (8 leaf switches per SU, one per rail), 4 SUs
    (1,024 gpus) in the reference design with 16 spines, and larger SuperPODs adding a core tier
    (the DGX SuperPOD B200 RA tabulates leaf/spine/core counts up to 64 SUs). Assumptions (parameters):
    2 spines per rail and pod, 2 cores per rail, pods of 4 SUs, the oversubscription at the leaf
    uplinks, and 0.5 µs per switch tier. Box cuts decide the allgather optimum at any
    oversubscription below ``nodes_per_su`` (an SU still receives more per gpu than a box):
    ``N * 400 / (N - 8)`` GB/s, 403.15 for the default 1,024 gpus; at 40:1 on 8 SUs an SU's 320 GB/s
    of uplinks decide it: 2048 * 320 / 1792 = 365.71 GB/s. Gpus do not forward. ``nvls`` (on) gives each
    box's NVSwitch node NVLink SHARP as in :func:`dgx_h100`; ``sharp`` (off by default: it needs the SHARP
    plugin and a subnet manager that enables it) gives every leaf, spine and core switch InfiniBand
    SHARP (:func:`sharp_capabilities`; NVIDIA SHARP documentation, the NDR Quantum-2 switches of the
    reference architecture).

    Examples
    --------
    >>> t = dgx_superpod(sus=2, nodes_per_su=2, sus_per_pod=1)
    >>> t.num_ranks, t.has_link("b3.nic5", "su1.leaf5"), t.bandwidth("su0.leaf5", "pod0.spine5.1")
    (32, True, 50.0)
    """
    sus = integer_at_least(sus, "sus", 1)
    nodes_per_su = integer_at_least(nodes_per_su, "nodes_per_su", 1)
    sus_per_pod = integer_at_least(sus_per_pod, "sus_per_pod", 1)
    spines = integer_at_least(spines, "spines", 1)
    cores = integer_at_least(cores, "cores", 1)
    nic_bandwidth = bandwidth_value(nic_bandwidth, "nic_bandwidth")
    if isinstance(oversubscription, bool) or not isinstance(oversubscription, int | float) or \
            not math.isfinite(oversubscription) or oversubscription < 1:
        raise InputError("", "", f"oversubscription must be a number >= 1 (1 is non-blocking), got {oversubscription!r}")
    pods = -(-sus // sus_per_pod)
    require(sus <= sus_per_pod or sus % sus_per_pod == 0,
           f"sus ({sus}) must be at most sus_per_pod ({sus_per_pod}) or a multiple of it")
    boxes = sus * nodes_per_su
    require(boxes * 8 >= 2, "the cluster needs at least 2 gpus")
    within_build_limits(boxes * 17 + sus * 8 + pods * 8 * spines + 8 * cores,
           boxes * 24 + sus * 8 * spines + (pods * 8 * spines * cores if pods > 1 else 0))
    uplink = round(nodes_per_su * nic_bandwidth / oversubscription / spines, 6)
    core_link = round(uplink * min(sus, sus_per_pod) / cores, 6)
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        nvs = f"b{box}.nvs"
        switches.append(nvs)
        box_gpus = [f"b{box}.gpu{i}" for i in range(8)]
        gpus += box_gpus
        links += [(g, nvs, 450.0, NVSWITCH_HOP_US) for g in box_gpus]
        su = box // nodes_per_su
        for i, g in enumerate(box_gpus):
            nic = f"b{box}.nic{i}"
            switches.append(nic)
            links += [(g, nic, nic_bandwidth, PCIE_HOP_US), (nic, f"su{su}.leaf{i}", nic_bandwidth, SWITCH_HOP_US)]
    for su in range(sus):
        switches += [f"su{su}.leaf{r}" for r in range(8)]
        pod = su // sus_per_pod
        links += [(f"su{su}.leaf{r}", f"pod{pod}.spine{r}.{j}", uplink, SWITCH_HOP_US)
                  for r in range(8) for j in range(spines)]
    for pod in range(pods):
        switches += [f"pod{pod}.spine{r}.{j}" for r in range(8) for j in range(spines)]
    if pods > 1:
        switches += [f"core{r}.{j}" for r in range(8) for j in range(cores)]
        links += [(f"pod{pod}.spine{r}.{j}", f"core{r}.{c}", core_link, SWITCH_HOP_US)
                  for pod in range(pods) for r in range(8) for j in range(spines) for c in range(cores)]
    tiers = "leaf/spine/core" if pods > 1 else "leaf/spine"
    capabilities = dict.fromkeys((s for s in switches if s.endswith(".nvs")), nvls_capabilities(H100_NVLS_GBPS)) \
        if _flag(nvls, "nvls") else {}
    if _flag(sharp, "sharp"):
        capabilities.update(dict.fromkeys((s for s in switches if not s.startswith("b")), sharp_capabilities()))
    return Topology.build(
        "dgx-superpod", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))],
        description=f"DGX H100 SuperPOD-style cluster: {sus} SU(s) x {nodes_per_su} DGX H100, rail-optimized "
                    f"{tiers} fat-tree, {nic_bandwidth:g} GB/s per NIC, {oversubscription:g}:1 at the leaves",
        capabilities=capabilities)
