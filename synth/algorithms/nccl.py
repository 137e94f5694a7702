"""``nccl``: the schedule NCCL would run, chosen the way NCCL chooses it (the baseline of every comparison).

Two NCCL releases are followed (github.com/NVIDIA/nccl), read for their rules only; no code is copied:
``version="2.23"`` (the default) follows tag ``v2.23.4-1``, ``version="2.16"`` tag ``v2.16.5-1`` (the last
release before NVLS, and the one whose protocol latencies :mod:`synth.plan` uses). The sections below
describe 2.16.5; *NCCL 2.23.4* at the end says what that release changes and adds. The release is
recorded in the schedule's ``params`` (``nccl_version`` and ``choice["version"]``).

Channels (``src/graph/search.cc``, ``src/graph/connect.cc``)
    NCCL searches *ring graphs*: on a multi-box system every channel enters a box through a NIC and
    leaves it through a NIC, visiting the box's gpus over NVLink, one channel per NIC; on one box, rings
    over NVLink as the links' bandwidth allows. synth builds the same rings with
    :func:`synth.algorithms.ring.channel_rings` (``channels="auto"``: rail rings, or the box's cycles).
    The graph's per-channel bandwidth is emulated from those rings: the share of the busiest link each
    ring gets when all run at once, rounded down to NCCL's speed table (``speedArrayIntra`` /
    ``speedArrayInter``, the sm90 tables on Hopper); the channel count is the number of rings, or more
    (up to 16) when the links hold more channels of that speed (NVSwitch); channels are doubled at half
    the speed when the speed is at least 25 GB/s (50 on Hopper), as ``ncclTopoCompute`` does. The tree
    graph has the same channels, and on one or two boxes its intra-box speed is raised towards twice the
    inter-box speed while the box's links allow (``ncclTopoCompute``'s pass 2). ``connect.cc`` then
    doubles the channels once more: channel c + C runs the same ring as channel c, and the second tree.
Tuning model (``src/graph/tuning.cc``: ``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``)
    Per (algorithm, protocol): bus bandwidth = channels x speed, with NCCL's caps (Ampere 235 GB/s, LL
    a quarter or a third capped by ``llMaxBws``, LL128 0.92 capped at 20 GB/s per channel, tree 0.92
    capped by ``perChMaxTreeBws``, tree LL / 3.8, tree LL128 x 7/9 or 120/128), converted to algorithm
    bandwidth (ring x N / steps, tree x 1/2); latency = ``baseLat`` + per-step ``hwLat`` (NVLink inside
    a box, NET between boxes, LL x 1.8 on several boxes); time = latency (x 1.9 for the multi-box
    Simple ring allreduce plateau) + bytes / (1000 x bandwidth), the tree's bandwidth scaled by
    ``treeCorrectionFactor``. NCCL runs the fastest; so does this algorithm. LL128 is enabled on Volta,
    Ampere and Hopper. Allgather, reduce-scatter, broadcast and reduce have only the ring; allreduce
    chooses between ring and tree. Alltoall is NCCL's grouped send/receive to every peer (``direct``),
    LL up to 16 KiB per peer (``NCCL_P2P_LL_THRESHOLD``), Simple above.
Channels used at a size (``getAlgoInfo`` in ``src/enqueue.cc``)
    Fewer channels for small messages: while bytes < channels x threads x threshold, one channel less
    (thresholds LL 8 x N for the ring, LL128 8, Simple 64 bytes per thread; 512 threads, 640 for LL128).
Schedules
    Ring: every channel's ring carries 1/channels of the data, one block per rank (C = N x channels;
    the evaluator's slices stream each block as NCCL's steps do). Tree: NCCL's double binary tree
    *over the boxes* (``src/graph/trees.cc``), each box a chain (the channel's ring order inside the box
    from the gpu next to its NIC), the chain heads joined between boxes over their NICs (NCCL's TREE
    pattern); channel c runs the first tree, channel c + C the mirrored one; chunks as NCCL sizes them
    (:func:`synth.algorithms.tree.nccl_tree_chunk_bytes`). Broadcast and reduce: a chain along every
    channel's ring from the root, one 512 KiB step (Simple) per chunk.

NCCL 2.23.4 (``src/graph/tuning.cc``, ``src/enqueue.cc``, ``search.cc``, ``connect.cc``, ``transport/nvls.cc``)
    *Tables*: ``baseLat``, the NVLink and NET ``hwLat`` rows, ``llMaxBws`` (Hopper row), the per-channel
    LL128 caps of the ring and the tree, ``perChMaxTreeBws`` and the speed arrays of that release; no
    Ampere cap; ring LL at half the bus bandwidth; no LL x 1.8 on several nodes; a multi-node ring's
    per-step latency at least the network overhead (1 µs Intel, 2 µs AMD, x 3 for Simple); the
    allreduce ring's inter-node steps 2(nodes - 1); the ring plateau x 1.4 (x 1.9 before Ampere) once
    bytes / (channels x ranks) >= 64; the tree correction for allreduce only. Graphs are duplicated at
    half speed from 25 GB/s, on Hopper only with at most 4 channels below 50 GB/s.
    *New candidates*, in NCCL's order after tree and ring, Simple only, each enabled only where NCCL
    would enable it: **CollNet Direct** and **CollNet Chain** (allreduce, only with CollNet support,
    which here means a network switch with IB SHARP that reduces and multicasts for every rail of
    every box, :func:`sharp_rails`; Direct also needs an NVSwitch in the box and at most 8 gpus per node):
    bus bandwidth channels x intra speed, Direct divided by the gpus-per-NIC factor and x 0.85 on Hopper,
    x 1/2; latency 2 (min(1, ppn - 1) x 3.7 + 0.4 (ppn - 1)) + 31 µs (Direct), 2 (ppn - 1) 2.8 + 30 µs
    (Chain). **NVLS** (allreduce, and allgather / reduce-scatter on one node; on several nodes only with
    CollNet support, where NCCL runs NVLS + SHARP): Hopper or later and a switch linking every gpu of
    the box that reduces and multicasts (:func:`nvls_boxes`); bus bandwidth channels x min(intra, inter
    speed), x 5/6 for allreduce (allgather / reduce-scatter bandwidth is not converted); latency 25 µs
    (NVLink), + 18 µs on several nodes (14 at one gpu per node). **NVLS-Tree** (allreduce on several
    nodes): bandwidth channels x min(intra, inter speed, halved on more than 2 nodes) x 5/6; latency
    25 + 2 log2(nodes) x 14 µs. The NVLS graph: one channel per gpu on one node, one per NIC head on
    several (at most 16), every gpu's link carrying C + C/G channels (the head pulls twice), the inter
    speed raised towards twice the intra speed while the NIC allows (pass 2); the CollNet graph: one
    channel per NIC head at the NIC's speed. NVLS and NVLS-Tree run on ``NCCL_NVLS_NCHANNELS`` = 16
    channels. **PAT** (allgather and reduce-scatter at one gpu per node: a topology whose every gpu is its own
    box, :func:`one_gpu_per_node`; Simple only): bus bandwidth tree channels x speed x 0.85, not
    converted; latency 8 + log2i(nodes) x 14 / 3.5 + ranks x 2.8 µs; its schedule: :func:`_build_pat`.
    Such a topology counts every gpu as a node (ppn 1: network latencies on every ring step). Blackwell (``dgx-b200``, ``gb200-nvl72``,
    compute capability 10.0) reads the Hopper tables and has no LL128, as 2.23 treats it.
    *Schedules*: NVLS on one node: :func:`synth.algorithms.nvls.nvls`, one chunk per rank (the channels
    run the same pattern side by side; the evaluator streams each chunk); NVLS on several nodes (NVLS +
    SHARP): :func:`synth.algorithms.collnet.collnet` ``shape="nvls"``; NVLS-Tree:
    :func:`synth.algorithms.nvls_tree.nvls_tree`; CollNet Direct / Chain: ``collnet`` ``shape="direct"`` /
    ``"chain"``; each relabelled ``nccl`` (``params["built_by"]`` names the builder).

Options: ``size`` (bytes or ``"1MiB"``): the message size NCCL chooses for. Without it: the ring with
Simple on every channel (NCCL's usual choice for large messages); the schedule records that no size was
given. ``arch`` (``auto``, ``volta``, ``ampere``, ``hopper``): the gpu generation of NCCL's tables
(``auto``: DGX-1, NDv2 and DGX-2 Volta, DGX A100 Ampere with AMD cpus, DGX H100 / H200 and the DGX
SuperPOD Hopper, DGX B200 and GB200 NVL72 Blackwell, anything else Volta, NCCL's own fallback). ``algo``
and ``proto`` force a choice, as ``NCCL_ALGO`` and ``NCCL_PROTO`` do (``algo``: ``ring``, ``tree``, and
from 2.23 ``nvls``, ``nvlstree``, ``collnet`` (Direct or Chain, whichever the model prefers),
``collnet_direct``, ``collnet_chain``, ``pat``; a forced algorithm the release would not enable here is
:class:`NotApplicable`). ``version``: ``2.23`` (default) or ``2.16``. Without a size, a forced in-switch
algorithm is sized at 1 GiB.

The schedule's ``params`` record the choice and why: ``choice`` (algorithm, protocol, channels,
reason), ``model`` (every candidate's predicted latency, bandwidth and time), ``graph`` (the emulated
channel graphs), and ``plan`` pins the protocol for the evaluator (:func:`synth.plan.pinned`).

Examples
--------
>>> from synth.library import load_topology
>>> s = nccl(load_topology("dgx-a100:boxes=2"), Kind.ALLGATHER, size="1GiB")
>>> s.params["choice"]["algorithm"], s.params["plan"], s.params["choice"]["channels"]
('ring', {'protocol': 'Simple'}, 16)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from synth.algorithms.ring import (
    auto_channels,
    box_groups,
    channel_rings,
    paths_for,
    rail_layout,
    ring_schedule,
)
from synth.algorithms.tree import (
    STEP_BYTES,
    chunks_for_size,
    double_binary_tree,
    grouped_chains,
    tree_schedule,
)
from synth.collectives import Collective, Kind, uneven_weights
from synth.errors import InputError, NotApplicable
from synth.schedule import Schedule
from synth.topology import Topology

#: The NCCL releases these rules follow, by ``version`` option; the first is the default.
RELEASES = {"2.23": "2.23.4-1", "2.16": "2.16.5-1"}
DEFAULT_VERSION = "2.23"
#: The default release's full tag.
NCCL_VERSION = RELEASES[DEFAULT_VERSION]

RING, TREE = "ring", "tree"
COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE = "collnet_direct", "collnet_chain", "nvls", "nvlstree"
PAT = "pat"
LL, LL128, SIMPLE = "LL", "LL128", "Simple"
PROTOCOLS = (LL, LL128, SIMPLE)
ALGORITHMS = (TREE, RING)  # NCCL 2.16's order: ties go to the first
#: NCCL 2.23's order (``NCCL_ALGO_*``)
ALGORITHMS_223 = (TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT)
#: ``algo=`` values and the algorithms of the model each allows
ALGO_CHOICES = {RING: (RING,), TREE: (TREE,), NVLS: (NVLS,), NVLS_TREE: (NVLS_TREE,), "nvls_tree": (NVLS_TREE,),
                "collnet": (COLLNET_DIRECT, COLLNET_CHAIN), COLLNET_DIRECT: (COLLNET_DIRECT,),
                COLLNET_CHAIN: (COLLNET_CHAIN,), "collnetdirect": (COLLNET_DIRECT,),
                "collnetchain": (COLLNET_CHAIN,), PAT: (PAT,)}
#: tuning.cc (v2.23.4): PAT's latency, 8 + log2i(nodes) x (the network latency / 3.5) + ranks x 2.8 µs, and
#: its bus bandwidth factor
PAT_BASE_LATENCY, PAT_LOG_DIVISOR, PAT_PER_RANK_LATENCY, PAT_BUS_FACTOR = 8.0, 3.5, 2.8, 0.85

# tuning.cc (v2.16.5): latencies in µs, bandwidths in GB/s
BASE_LATENCY = {TREE: {LL: 4.4, LL128: 4.4, SIMPLE: 0.0}, RING: {LL: 3.6, LL128: 10.0, SIMPLE: 8.4}}
NVLINK_LATENCY = {TREE: {LL: 0.52, LL128: 1.25, SIMPLE: 28.0}, RING: {LL: 0.47, LL128: 1.9, SIMPLE: 3.4}}
NET_LATENCY = {TREE: {LL: 5.0, LL128: 8.5, SIMPLE: 28.0}, RING: {LL: 2.7, LL128: 4.0, SIMPLE: 9.6}}
LL128_MAX_BW_PER_CHANNEL = 20.0
#: llMaxBws[index1][index2]: index1 = gpu generation on one box, cpu vendor (Intel 0, AMD 1) on several;
#: index2 = min(boxes, 3) - 1
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))
PER_CHANNEL_MAX_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (24.0, 23.6, 17.8))
AMPERE_BUS_BW_CAP = 235.0
#: treeCorrectionFactor[protocol][log2(bytes / 64)], powers of two from 64 B to 256 MiB
TREE_CORRECTION = {
    LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
# tuning.cc (v2.23.4): latencies in µs (NVLS's base latency is replaced by its NVLink latency)
BASE_LATENCY_223 = {TREE: {LL: 6.8, LL128: 14.0, SIMPLE: 8.4}, RING: {LL: 6.6, LL128: 14.0, SIMPLE: 8.4},
                    COLLNET_DIRECT: {SIMPLE: 0.0}, COLLNET_CHAIN: {SIMPLE: 0.0}, NVLS: {SIMPLE: 0.0},
                    NVLS_TREE: {SIMPLE: 0.0}, PAT: {SIMPLE: 0.0}}
NVLINK_LATENCY_223 = {TREE: {LL: 0.6, LL128: 1.25, SIMPLE: 4.0}, RING: {LL: 0.6, LL128: 1.9, SIMPLE: 3.4},
                      COLLNET_DIRECT: {SIMPLE: 3.7}, COLLNET_CHAIN: {SIMPLE: 2.8}, NVLS: {SIMPLE: 25.0},
                      NVLS_TREE: {SIMPLE: 25.0}, PAT: {SIMPLE: 0.0}}
NET_LATENCY_223 = {TREE: {LL: 5.0, LL128: 8.5, SIMPLE: 14.0}, RING: {LL: 2.7, LL128: 4.0, SIMPLE: 14.0},
                   COLLNET_DIRECT: {SIMPLE: 31.0}, COLLNET_CHAIN: {SIMPLE: 30.0}, NVLS: {SIMPLE: 18.0},
                   NVLS_TREE: {SIMPLE: 14.0}, PAT: {SIMPLE: 0.0}}
LL_MAX_BW_223 = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0))
PER_CHANNEL_MAX_RING_LL128_BW_223 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
PER_CHANNEL_MAX_TREE_LL128_BW_223 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
PER_CHANNEL_MAX_TREE_BW_223 = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
#: getNetOverhead (µs) by cpu vendor; x3 for Simple
NET_OVERHEAD = {"intel": 1.0, "amd": 2.0}
#: NCCL_NVLS_NCHANNELS: the channels an NVLS or NVLS-Tree operation uses (``src/transport/nvls.cc``)
NVLS_CHANNELS = 16
#: NCCL_MAX_DIRECT_ARITY + 1: CollNet Direct serves at most this many gpus per node
MAX_DIRECT_LOCAL_RANKS = 8
# search.cc (v2.23.4)
SPEEDS_INTRA_223 = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER_223 = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
                    0.24, 0.12)
SM90_SPEEDS_INTRA_223 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SM90_SPEEDS_INTER_223 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                         0.24, 0.12)
# search.cc (v2.16.5): per-channel speeds the graph search tries, highest first
SPEEDS_INTRA = (44.0, 30.0, 22.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 22.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
                0.24, 0.12)
SM90_SPEEDS_INTRA = (66.0, 33.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0)
SM90_SPEEDS_INTER = (48.0, 45.0, 30.0, 24.0, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
#: MAXCHANNELS / 2: the most channels one graph search returns
MAX_GRAPH_CHANNELS = 16
MAX_CHANNELS = 32
# enqueue.cc / comm.h (v2.16.5): channel tuning
MAX_THREADS = {LL: 512, LL128: 640, SIMPLE: 512}
THREAD_THRESHOLD = {LL: 8, LL128: 8, SIMPLE: 64}
PCI_BW = 12.0
P2P_LL_THRESHOLD = 16384
#: Chunk data bytes of the broadcast/reduce chain per protocol (one step)
CHAIN_CHUNK_BYTES = {LL: STEP_BYTES[LL] // 2, LL128: STEP_BYTES[LL128] * 15 // 16, SIMPLE: STEP_BYTES[SIMPLE]}

#: gpu generation and cpu vendor of the named systems (``arch="auto"``)
SYSTEMS = {"dgx1": ("volta", "intel"), "ndv2": ("volta", "intel"), "dgx2": ("volta", "intel"),
           "dgx-a100": ("ampere", "amd"), "dgx-h100": ("hopper", "intel"), "dgx-h200": ("hopper", "intel"),
           "dgx-superpod": ("hopper", "intel"), "dgx-b200": ("blackwell", "intel"),
           "gb200-nvl72": ("blackwell", "arm")}
#: gpu generations of NCCL's tables (``blackwell``: compute capability 10.0, which both releases read
#: with the Hopper tables and for which neither enables LL128)
ARCHES = ("volta", "ampere", "hopper", "blackwell")
#: the generations NCCL enables LL128 on
LL128_ARCHES = ("volta", "ampere", "hopper")


@dataclass(frozen=True)
class Graph:
    """An emulated NCCL topology graph: channels and per-channel speed (GB/s) inside and between boxes."""

    channels: int
    bw_intra: float
    bw_inter: float
    same_channels: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {"channels": self.channels, "bw_intra": _round(self.bw_intra), "bw_inter": _round(self.bw_inter)}


@dataclass(frozen=True)
class Machine:
    """What NCCL's tuning model needs to know about a system."""

    ranks: int
    nodes: int
    arch: str
    cpu: str
    ring: Graph
    tree: Graph
    #: the release whose tuning model applies (a key of :data:`RELEASES`)
    version: str = DEFAULT_VERSION
    #: the NVLS graph (NVLS and NVLS-Tree), None where NVLS is not supported
    nvls: Graph | None = None
    #: the CollNet graph, None without CollNet support (switches with IB SHARP)
    collnet: Graph | None = None
    #: CollNet Direct's conditions besides support: an NVSwitch in the box, at most 8 gpus per node
    collnet_direct: bool = False

    @property
    def arch_index(self) -> int:
        """NCCL's compCapIndex: Volta (and anything else) 0, Ampere 1, Hopper and later 2."""
        return {"ampere": 1, "hopper": 2, "blackwell": 2}.get(self.arch, 0)


@dataclass(frozen=True)
class Prediction:
    """One (algorithm, protocol) of NCCL's tuning table at one size."""

    algorithm: str
    protocol: str
    latency_us: float
    bandwidth_GBps: float
    time_us: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``time_us`` None: disabled)."""
        return {"latency_us": _round(self.latency_us), "bandwidth_GBps": _round(self.bandwidth_GBps),
                "time_us": None if self.time_us is None else _round(self.time_us)}


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def log2i(value: int) -> int:
    """NCCL's ``log2i``: floor(log2(value)), 0 for values below 2.

    Examples
    --------
    >>> log2i(1), log2i(2), log2i(1023)
    (0, 1, 9)
    """
    return max(0, int(value).bit_length() - 1)


# ------------------------------------------------------------------------------------ tuning model
def tuning_table(kind: Kind, machine: Machine) -> dict[tuple[str, str], tuple[float, float]]:
    """``ncclTopoTuneModel``: (latency µs, algorithm bandwidth GB/s) per (algorithm, protocol); bandwidth
    0 means disabled. Only the ring exists for collectives other than allreduce.

    Examples
    --------
    >>> machine = Machine(8, 1, "volta", "intel", Graph(6, 22.0, 22.0, False), Graph(6, 22.0, 22.0, False))
    >>> tuning_table(Kind.ALLGATHER, machine)[("ring", "Simple")]   # 8.4 + 7 x 3.4 µs; 6 x 22 x 8/7
    (32.2, 150.85714285714286)
    """
    if machine.version != "2.16":
        return _tuning_table_223(kind, machine)
    n, nodes = machine.ranks, machine.nodes
    ppn = n / nodes
    allreduce = kind == Kind.ALLREDUCE
    if allreduce:
        steps, inter_steps = 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    elif kind in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        steps, inter_steps = n - 1, nodes - 1
    else:
        steps, inter_steps = n, nodes
    index2 = min(nodes, 3) - 1
    index1 = machine.arch_index if nodes == 1 else (1 if machine.cpu == "amd" else 0)
    ll_max = LL_MAX_BW[index1][index2]
    tree_max = PER_CHANNEL_MAX_TREE_BW[machine.arch_index][index2]
    table: dict[tuple[str, str], tuple[float, float]] = {}
    for algorithm in ALGORITHMS:
        if algorithm == TREE and not allreduce:
            continue
        graph = machine.tree if algorithm == TREE else machine.ring
        for protocol in PROTOCOLS:
            bus = graph.channels * (graph.bw_intra if nodes <= 2 else graph.bw_inter)
            if machine.arch == "ampere":
                bus = min(bus, AMPERE_BUS_BW_CAP)
            if algorithm == RING and protocol == LL:
                bus = min(ll_max, bus * (1 / 4 if nodes > 1 or kind in (Kind.ALLREDUCE, Kind.REDUCE) else 1 / 3))
            if algorithm == RING and protocol == LL128:
                bus = min(bus * (0.7 if ppn < 2 else 0.92), LL128_MAX_BW_PER_CHANNEL * graph.channels)
            if algorithm == TREE:
                bus = min(bus * 0.92, graph.channels * tree_max)
            if algorithm == TREE and protocol == LL:
                bus = min(bus / 3.8, ll_max)
            if algorithm == TREE and protocol == LL128:
                bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), LL128_MAX_BW_PER_CHANNEL * graph.channels)
            if protocol == LL128 and machine.arch not in LL128_ARCHES:
                bus = 0.0
            ratio = 0.5 if algorithm == TREE else n / steps
            latency = BASE_LATENCY[algorithm][protocol]
            intra = NVLINK_LATENCY[algorithm][protocol] * (1.8 if nodes > 1 and protocol == LL else 1.0)
            inter = NET_LATENCY[algorithm][protocol]
            if algorithm == RING:
                if kind in (Kind.BROADCAST, Kind.REDUCE):
                    hop = (NVLINK_LATENCY if nodes == 1 else NET_LATENCY)[RING][protocol]
                    if graph.same_channels:
                        latency += hop
                    else:
                        if protocol == SIMPLE:
                            hop = (NVLINK_LATENCY if nodes == 1 else NET_LATENCY)[TREE][protocol]
                        latency += steps * hop
                else:
                    latency += (steps - inter_steps) * intra + inter_steps * inter
            else:
                latency += 2 * ((n // nodes - 1) * intra + log2i(nodes) * inter)
            table[(algorithm, protocol)] = (latency, bus * ratio)
    return table


def _tuning_table_223(kind: Kind, machine: Machine) -> dict[tuple[str, str], tuple[float, float]]:
    """``ncclTopoTuneModel`` of v2.23.4 (see the module docstring): the algorithms NCCL would enable here
    only (NVLS with an NVLS graph; NVLS on several nodes, CollNet Direct and Chain with CollNet support;
    NVLS-Tree on several nodes); NVLS, NVLS-Tree and CollNet with Simple only.

    Longer than the house limit: one loop that follows ``ncclTopoTuneModel``'s rule by rule, in its order,
    so that it reads against tuning.cc line for line."""
    n, nodes = machine.ranks, machine.nodes
    ppn = n / nodes
    allreduce = kind == Kind.ALLREDUCE
    steps = 2 * (n - 1) if allreduce else n - 1 if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER) else n
    index2 = min(nodes, 3) - 1
    cap = machine.arch_index
    index1 = cap if nodes == 1 else (1 if machine.cpu == "amd" else 0)
    ll_max = LL_MAX_BW_223[index1][index2]
    tree_max = PER_CHANNEL_MAX_TREE_BW_223[cap][index2]
    ring_ll128_max = PER_CHANNEL_MAX_RING_LL128_BW_223[cap][index2]
    tree_ll128_max = PER_CHANNEL_MAX_TREE_LL128_BW_223[cap][index2]
    graphs = {TREE: machine.tree, RING: machine.ring, NVLS: machine.nvls, NVLS_TREE: machine.nvls,
              COLLNET_DIRECT: machine.collnet, COLLNET_CHAIN: machine.collnet, PAT: machine.tree}
    table: dict[tuple[str, str], tuple[float, float]] = {}
    for algorithm in ALGORITHMS_223:
        if kind in (Kind.BROADCAST, Kind.REDUCE) and algorithm != RING:
            continue
        if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER) and algorithm not in (RING, NVLS, PAT):
            continue  # CollNet Direct's allgather / reduce-scatter need a plugin with them (not modelled)
        if algorithm == PAT and (kind not in (Kind.ALLGATHER, Kind.REDUCESCATTER) or nodes != n):
            continue  # PAT: allgather and reduce-scatter at one gpu per node only
        graph = graphs[algorithm]
        if graph is None:
            continue  # not supported: NCCL zeroes its bandwidth
        if algorithm == NVLS_TREE and nodes == 1:
            continue
        if algorithm == NVLS and nodes > 1 and (machine.collnet is None or not allreduce):
            continue  # several nodes: NVLS only with CollNet, and only for allreduce
        if algorithm == COLLNET_DIRECT and not machine.collnet_direct:
            continue
        collnet = algorithm in (COLLNET_DIRECT, COLLNET_CHAIN)
        for protocol in PROTOCOLS:
            if algorithm in (NVLS, NVLS_TREE, COLLNET_DIRECT, COLLNET_CHAIN, PAT) and protocol != SIMPLE:
                continue
            bw = graph.bw_intra if nodes <= 2 or collnet else graph.bw_inter
            if algorithm == NVLS:
                bw = min(graph.bw_intra, graph.bw_inter)
            if algorithm == NVLS_TREE:
                bw = min(graph.bw_intra, graph.bw_inter if nodes <= 2 else graph.bw_inter / 2)
            bus = graph.channels * bw
            if algorithm == RING and protocol == LL:
                bus = min(ll_max, bus * 0.5)
            if algorithm == RING and protocol == LL128:
                bus = min(bus * 0.92, graph.channels * ring_ll128_max)
            if algorithm == TREE and allreduce:
                bus = min(bus * 0.92, graph.channels * tree_max)
            if algorithm == TREE and protocol == LL:
                bus = min(bus / 3.8, ll_max)
            if algorithm == TREE and protocol == LL128:
                bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), graph.channels * tree_ll128_max)
            if algorithm == PAT:
                bus *= PAT_BUS_FACTOR
            if algorithm == COLLNET_DIRECT:
                factor = ppn / graph.channels  # gpus per NIC
                factor -= (factor - 1) / 2
                bus /= factor
                if cap >= 2:
                    bus *= 0.85
            if protocol == LL128 and machine.arch not in LL128_ARCHES:
                bus = 0.0
            if algorithm == RING:
                bus *= n / steps
            elif kind not in (Kind.ALLGATHER, Kind.REDUCESCATTER):
                bus *= 5 / 6 if algorithm in (NVLS, NVLS_TREE) else 0.5
            latency = BASE_LATENCY_223[algorithm][protocol]
            intra = NVLINK_LATENCY_223[algorithm][protocol]
            inter = NET_LATENCY_223[TREE if ppn == 1 else algorithm][protocol]
            local = n // nodes
            if algorithm == RING:
                if kind in (Kind.BROADCAST, Kind.REDUCE):
                    hop = (NVLINK_LATENCY_223 if nodes == 1 else NET_LATENCY_223)[RING][protocol]
                    if graph.same_channels:
                        latency += hop
                    else:
                        if protocol == SIMPLE:
                            hop = (NVLINK_LATENCY_223 if nodes == 1 else NET_LATENCY_223)[TREE][protocol]
                        latency += steps * hop
                else:
                    overhead = 0.0
                    if nodes > 1:
                        overhead = NET_OVERHEAD.get(machine.cpu, 1.0) * (3 if protocol == SIMPLE else 1)
                    intra = max(intra, overhead)
                    inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if allreduce else nodes - 1
                    latency += (steps - inter_steps) * intra + inter_steps * inter
            elif algorithm == TREE:
                latency += 2 * ((local - 1) * intra + log2i(nodes) * inter)
            elif algorithm == COLLNET_DIRECT:
                latency += 2 * (min(1, local - 1) * intra + (local - 1) * 0.4) + inter
            elif algorithm == COLLNET_CHAIN:
                latency += 2 * (local - 1) * intra + inter
            elif algorithm == NVLS:
                latency = intra + (inter if nodes > 1 else 0.0)
            elif algorithm == PAT:  # replaces the base latency
                latency = PAT_BASE_LATENCY + log2i(nodes) * (inter / PAT_LOG_DIVISOR) + n * PAT_PER_RANK_LATENCY
            else:  # NVLS_TREE
                latency += intra + 2 * log2i(nodes) * inter
            table[(algorithm, protocol)] = (latency, bus)
    return table


def algorithm_time(kind: Kind, machine: Machine, algorithm: str, protocol: str, size: int,
                   table: dict[tuple[str, str], tuple[float, float]]) -> float | None:
    """``ncclTopoGetAlgoTime`` for one operation: predicted µs, or None when disabled.

    Examples
    --------
    >>> machine = Machine(8, 1, "volta", "intel", Graph(6, 22.0, 22.0, False), Graph(6, 22.0, 22.0, False))
    >>> table = tuning_table(Kind.ALLGATHER, machine)
    >>> round(algorithm_time(Kind.ALLGATHER, machine, "ring", "Simple", 2**20, table), 3)
    39.151
    """
    latency, bandwidth = table[(algorithm, protocol)]
    if bandwidth == 0:
        return None
    log_size = log2i(size >> 6)
    if algorithm == TREE and log_size < 23 and (machine.version == "2.16" or kind == Kind.ALLREDUCE):
        bandwidth *= TREE_CORRECTION[protocol][log_size]
    plateau = algorithm == RING and protocol == SIMPLE and machine.nodes > 1 and kind == Kind.ALLREDUCE
    if plateau and machine.version == "2.16" and size >= machine.ranks / 16.0 * 65536:
        latency *= 1.9
    if plateau and machine.version != "2.16" and size / (all_channels(machine) * machine.ranks) >= 64:
        latency *= 1.9 if machine.arch_index == 0 else 1.4
    return latency + size / (1000 * bandwidth)


def predictions(kind: Kind, machine: Machine, size: int) -> list[Prediction]:
    """Every (algorithm, protocol) of the table at ``size``, in NCCL's order (tree first)."""
    table = tuning_table(kind, machine)
    return [Prediction(a, p, *table[(a, p)], algorithm_time(kind, machine, a, p, size, table)) for a, p in table]


def all_channels(machine: Machine) -> int:
    """``comm->nChannels``: twice the graphs' channels (``connect.cc``), at most 32."""
    return min(MAX_CHANNELS, 2 * min(machine.ring.channels, machine.tree.channels))


def choose(kind: Kind, machine: Machine, size: int, algorithm: str = "auto",
           protocol: str = "auto") -> tuple[Prediction, list[Prediction]]:
    """NCCL's choice (``getAlgoInfo``): the (algorithm, protocol) of least predicted time, the first on
    ties, among those allowed (``algorithm``: ``auto`` or a key of :data:`ALGO_CHOICES`); and all
    predictions."""
    every = predictions(kind, machine, size)
    names = ALGO_CHOICES.get(algorithm, (algorithm,))
    allowed = [p for p in every if p.time_us is not None and (algorithm == "auto" or p.algorithm in names)
               and protocol in ("auto", p.protocol)]
    if not allowed:
        raise NotApplicable(f"NCCL's model enables no {algorithm}/{protocol} for {kind} on this system")
    best = allowed[0]
    for candidate in allowed[1:]:
        if candidate.time_us < best.time_us:  # type: ignore[operator]
            best = candidate
    return best, every


def channels_at(machine: Machine, algorithm: str, protocol: str, size: int) -> int:
    """Channels NCCL uses for one operation of ``size`` bytes (``getAlgoInfo``'s channel tuning): all
    of them (twice the graph's), minus one while the bytes are below channels x threads x threshold.

    Examples
    --------
    >>> machine = Machine(16, 2, "ampere", "amd", Graph(8, 24.0, 24.0, False), Graph(8, 24.0, 24.0, False))
    >>> channels_at(machine, "ring", "Simple", 2**20), channels_at(machine, "ring", "Simple", 1024)
    (16, 1)
    """
    if algorithm in (NVLS, NVLS_TREE):
        return NVLS_CHANNELS  # NVLS and NVLS-Tree always use comm->nvlsChannels
    graph = machine.tree if algorithm in (TREE, PAT) else machine.ring
    channels = all_channels(machine)
    threads = MAX_THREADS[protocol]
    if algorithm == RING and protocol == SIMPLE and graph.bw_intra * graph.channels <= PCI_BW:
        threads = 256
    threshold = THREAD_THRESHOLD[protocol] * (machine.ranks if algorithm == RING and protocol == LL else 1)
    if algorithm in (COLLNET_DIRECT, COLLNET_CHAIN):  # 2.23: 640 threads (NCCL_MAX_NTHREADS), threshold 512
        threads, threshold = 640, 512
    while size < channels * threads * threshold:
        if channels >= 2:
            channels -= 1
        elif threads % 128 == 0:
            threads //= 2
        else:
            break
    return channels


# ----------------------------------------------------------------------------------- graph emulation
def _quantize(speed: float, table: Sequence[float]) -> float:
    for candidate in table:
        if candidate <= speed * (1 + 1e-9):
            return candidate
    return speed


def _sm90(arch: str) -> bool:
    return arch in ("hopper", "blackwell")


def _dup(channels: int, bw_intra: float, bw_inter: float, arch: str,
         version: str = "2.16") -> tuple[int, float, float]:
    """search.cc: fast graphs are duplicated at half the speed each (2.23: on Hopper also those of 25
    GB/s and more with at most 4 channels)."""
    if version == "2.16":
        fast = (not _sm90(arch) and bw_intra >= 25.0) or (_sm90(arch) and bw_intra >= 50.0)
    else:
        fast = bw_intra >= 25.0 and not (_sm90(arch) and bw_intra < 50.0 and channels > 4)
    if fast:
        doubled = min(2 * channels, MAX_GRAPH_CHANNELS)
        factor = -(-doubled // channels)
        return doubled, bw_intra / factor, bw_inter / factor
    return channels, bw_intra, bw_inter


def speed_table(nodes: int, arch: str, version: str) -> tuple[float, ...]:
    """The speeds NCCL's graph search tries: inter-node ones with a network, the sm90 tables from Hopper on."""
    if version == "2.16":
        return (SM90_SPEEDS_INTER if _sm90(arch) else SPEEDS_INTER) if nodes > 1 else \
            (SM90_SPEEDS_INTRA if _sm90(arch) else SPEEDS_INTRA)
    return (SM90_SPEEDS_INTER_223 if _sm90(arch) else SPEEDS_INTER_223) if nodes > 1 else \
        (SM90_SPEEDS_INTRA_223 if _sm90(arch) else SPEEDS_INTRA_223)


def emulate_graphs(topology: Topology, rings: list[list[int]], boxes: list[list[int]] | None,
                   arch: str, version: str = DEFAULT_VERSION) -> tuple[Graph, Graph]:
    """The ring and tree graphs NCCL's search would return, from the rings synth built (see the
    module docstring)."""
    box_of = {r: k for k, members in enumerate(boxes or [list(range(topology.num_ranks))]) for r in members}
    load: dict[tuple[str, str], int] = {}
    intra_links: set[tuple[str, str]] = set()
    n = topology.num_ranks
    paths = paths_for(topology, [(ring[i], ring[(i + 1) % n]) for ring in rings for i in range(n)])
    for ring in rings:
        for i, rank in enumerate(ring):
            following = ring[(i + 1) % n]
            path = paths[(rank, following)]
            for hop in zip(path, path[1:], strict=False):
                load[hop] = load.get(hop, 0) + 1
                if box_of[rank] == box_of[following]:
                    intra_links.add(hop)
    share = min(topology.bandwidth(*hop) / count for hop, count in load.items())
    intra_share = min((topology.bandwidth(*hop) / load[hop] for hop in intra_links), default=share)
    nodes = len(boxes) if boxes else 1
    table = speed_table(nodes, arch, version)
    speed = _quantize(share, table)
    count = min(MAX_GRAPH_CHANNELS, max(len(rings), int(len(rings) * share / speed + 1e-9)))
    same = all(r == rings[0] for r in rings)
    ring_graph = Graph(*_dup(count, speed, speed, arch, version), same_channels=same)
    tree_intra = speed
    for candidate in sorted(t for t in table if t > speed):  # pass 2: raise the trees' intra-box speed
        if tree_intra >= 2 * speed or candidate > intra_share * (1 + 1e-9):
            break
        tree_intra = candidate
    tree_graph = Graph(*_dup(count, tree_intra, speed, arch, version), same_channels=same)
    return ring_graph, tree_graph


def nvls_boxes(topology: Topology, boxes: list[list[int]] | None, kind: Kind, arch: str) -> list[str] | None:
    """The NVLink switch of every box (the whole system without boxes) when NCCL would support NVLS
    there: Hopper or later, and a switch linking every gpu of the box that reduces (when ``kind``
    reduces) and multicasts (:func:`synth.algorithms.nvls.domain_switch`); None otherwise."""
    from synth.algorithms.nvls import domain_switch

    if not _sm90(arch) or kind == Kind.ALLTOALL:
        return None
    wanted = Kind.ALLREDUCE if kind in (Kind.ALLREDUCE, Kind.REDUCE) else kind
    try:
        return [domain_switch(topology, members, wanted)
                for members in (boxes or [list(range(topology.num_ranks))])]
    except NotApplicable:
        return None


def sharp_rails(topology: Topology) -> dict[int, str] | None:
    """Per NIC head (local index), the network switch with IB SHARP that reduces and multicasts for that
    rail of every box (:func:`synth.algorithms.collnet.network_switch`): NCCL's CollNet support; None
    where some rail has none or the system has no boxes with NICs."""
    from synth.algorithms.collnet import network_switch

    layout = rail_layout(topology)
    if layout is None or len(layout.boxes) < 2:
        return None
    local = {s for s in topology.switches
             if any(topology.graph.has_edge(s, topology.gpus[r]) for r in layout.boxes[0])
             and all(topology.graph.has_edge(s, topology.gpus[r]) for r in layout.boxes[0])}
    rails = {}
    for nic in layout.nics:
        switch = network_switch(topology, [box[nic[0]] for box in layout.boxes], local)
        if switch is None:
            return None
        rails[nic[0]] = switch
    return rails


def emulate_nvls_graph(topology: Topology, boxes: list[list[int]] | None, switches: list[str], arch: str,
                       version: str) -> Graph:
    """The NVLS graph of ``ncclTopoSearchTryNvls``: one channel per gpu on one node (forced), one per NIC
    head on several (at most 16); every channel pulls from every gpu of the box through the switch and the
    head twice, so a gpu's link carries C + C/G channels (G gpus per box) at the channel speed; on several
    nodes the head's NIC carries one channel too, and pass 2 raises the inter speed while it stays below
    twice the intra speed and the NIC allows it."""
    members = (boxes or [list(range(topology.num_ranks))])[0]
    gpus = topology.gpus
    link = min(min(topology.bandwidth(gpus[r], switches[0]), topology.bandwidth(switches[0], gpus[r]))
               for r in members)
    nodes = len(boxes) if boxes else 1
    table = speed_table(nodes, arch, version)
    if nodes == 1:
        channels = min(MAX_GRAPH_CHANNELS, len(members))
        speed = _quantize(link / (channels + channels / len(members)), table)
        return Graph(channels, speed, speed, same_channels=False)
    layout = rail_layout(topology)
    heads = [nic[0] for nic in layout.nics] if layout is not None else [0]
    channels = min(MAX_GRAPH_CHANNELS, len(heads))
    assert boxes is not None
    paths = paths_for(topology, [(boxes[0][h], boxes[1][h]) for h in heads])
    nic = min(min(topology.bandwidth(*hop) for hop in zip(path, path[1:], strict=False)) for path in paths.values())
    intra = _quantize(min(link / (channels + channels / len(members)), nic), table)
    inter = intra
    for candidate in sorted(t for t in table if t > intra):
        if inter >= 2 * intra or candidate > nic * (1 + 1e-9):
            break
        inter = candidate
    return Graph(channels, intra, inter, same_channels=False)


def detect_arch(topology: Topology, arch: str) -> tuple[str, str]:
    """(gpu generation, cpu vendor) for NCCL's tables (see the module docstring).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> detect_arch(load_topology("dgx-a100:boxes=2"), "auto"), detect_arch(load_topology("torus"), "auto")
    (('ampere', 'amd'), ('volta', 'intel'))
    """
    system = SYSTEMS.get(topology.name.split(":")[0], ("volta", "intel"))
    if arch == "auto":
        return system
    if arch not in ARCHES:
        raise InputError("", "arch", f"expected auto or one of {', '.join(ARCHES)}, got {arch!r}")
    return arch, system[1]


# ----------------------------------------------------------------------------------------- schedules
def _tree_parents(rings: list[list[int]], channel: int, second: bool, boxes: list[list[int]],
                  topology: Topology) -> list[int | None]:
    """Rank parents of graph channel ``channel``'s tree (the first or the mirrored one, over the boxes),
    each box a chain in the channel's ring order from the gpu next to its NIC."""
    ring = rings[channel % len(rings)]
    layout = rail_layout(topology)
    if layout is not None:  # every box uses box 0's local chain, so the heads share a rail
        local = {rank: i for i, rank in enumerate(layout.boxes[0])}
        order = [local[r] for r in ring if r in local]
        chains = [[members[i] for i in order] for members in layout.boxes]
    else:
        chains = [[r for r in ring if r in set(members)] for members in boxes]
    node_parents = double_binary_tree(len(chains))[1 if second else 0] if len(chains) > 1 else [None]
    parents: list[int | None] = [None] * topology.num_ranks
    for k, chain in enumerate(chains):
        for previous, rank in zip(chain, chain[1:], strict=False):
            parents[rank] = previous
        up = node_parents[k]
        parents[chain[0]] = None if up is None else chains[up][0]
    return parents


def _chain(ring: list[int], root: int) -> list[int | None]:
    start = ring.index(root)
    order = ring[start:] + ring[:start]
    parents: list[int | None] = [None] * len(ring)
    for previous, rank in zip(order, order[1:], strict=False):
        parents[rank] = previous
    return parents


def parse_version(version: str | float) -> str:
    """The key of :data:`RELEASES` that ``version`` names (``"2.16"``, ``"2.16.5"``, ``"v2.23.4-1"``, ...).

    Examples
    --------
    >>> parse_version("2.16.5-1"), parse_version("v2.23")
    ('2.16', '2.23')
    """
    text = str(version).strip().lstrip("v")
    for key in RELEASES:
        if text == key or text.startswith(key + "."):
            return key
    raise InputError("", "version", f"expected an NCCL release of {' or '.join(RELEASES)} "
                     f"(e.g. {RELEASES[DEFAULT_VERSION]}), got {version!r}")


def nccl(topology: Topology, kind: Kind, *, root: int | None = None, size: int | str | None = None,
         arch: str = "auto", algo: str = "auto", proto: str = "auto", version: str = DEFAULT_VERSION,
         demand: Any = None, shards: Any = None) -> Schedule:
    """The schedule NCCL would run for ``kind`` at ``size`` bytes (see the module docstring).

    Parameters
    ----------
    topology : Topology
    kind : Kind
        Any of the six collectives.
    root : int, optional
        Root of broadcast and reduce (default 0).
    size : int or str, optional
        Message size (nccl-tests n) NCCL chooses for; default: the ring with Simple on every channel.
    arch : str
        ``auto``, ``volta``, ``ampere``, ``hopper`` or ``blackwell``: the tables of NCCL's tuning model.
    algo, proto : str
        ``auto`` (NCCL's choice) or a forced algorithm (``ring``, ``tree``; from 2.23 also ``nvls``,
        ``nvlstree``, ``collnet``, ``collnet_direct``, ``collnet_chain``) and ``LL``/``LL128``/``Simple``,
        as ``NCCL_ALGO`` and ``NCCL_PROTO`` force them.
    version : str
        The NCCL release whose rules apply: ``2.23`` (default, v2.23.4-1) or ``2.16`` (v2.16.5-1).
    demand : optional
        alltoallv: the demand (NCCL's grouped send/receive).
    shards : optional
        allgather and reducescatter: uneven shards, one size per rank (allgatherv, reduce-scatterv). NCCL
        has no such call; PyTorch's ``all_gather`` of unequal sizes runs one ``ncclBroadcast`` per rank in
        one group (ProcessGroupNCCL's ``_broadcast_oop``, coalesced), and so this schedule does: each rank's
        shard down a chain along every channel's ring from it (reduce-scatterv: one ``ncclReduce`` into
        each rank), the ranks' operations one after another on each channel; the protocol and channels are
        NCCL's choice for the broadcast (reduce) of the largest shard.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = nccl(load_topology("dgx1"), Kind.ALLREDUCE, size=1024)
    >>> s.params["choice"]["algorithm"], s.params["plan"]["protocol"], s.params["choice"]["channels"]
    ('ring', 'LL', 1)
    >>> s = nccl(load_topology("dgx-h100"), Kind.ALLREDUCE, size="1GiB")
    >>> s.params["choice"]["algorithm"], s.params["choice"]["version"], len(s.switch_ops) > 0
    ('nvls', '2.23.4-1', True)
    """
    from synth.units import parse_size

    key = parse_version(version)
    release = RELEASES[key]
    size_bytes = parse_size(size, "size") if size is not None else None
    algorithm, protocol = algo, proto
    names = (RING, TREE) if key == "2.16" else tuple(ALGO_CHOICES)
    if algorithm not in ("auto", *names):
        raise InputError("", "algo", f"expected auto or one of {', '.join(names)} (NCCL {release}), got {algorithm!r}")
    if protocol not in ("auto", *PROTOCOLS):
        raise InputError("", "proto", f"expected auto, LL, LL128 or Simple, got {protocol!r}")
    if algorithm == TREE and kind != Kind.ALLREDUCE:
        raise NotApplicable(f"NCCL's tree does only allreduce, not {kind}")
    gpu, cpu = detect_arch(topology, arch)
    params: dict[str, Any] = {"nccl_version": release, "size": size_bytes, "arch": gpu}
    if kind in (Kind.ALLTOALL, Kind.ALLTOALLV):  # alltoallv (demand=...): the same grouped send/receive
        if root is not None:
            raise InputError("", "root", f"{kind} takes no root")
        if algorithm not in ("auto", RING):
            raise NotApplicable(f"NCCL runs {kind} as send/receive, not {algorithm}")
        return _alltoall(topology, size_bytes, protocol, params, kind, demand)
    if demand is not None:
        raise NotApplicable(f"a demand is for alltoallv, not {kind}")
    weights = uneven_weights(kind, shards, topology.num_ranks)
    if weights is not None:
        if root is not None:
            raise InputError("", "root", f"{kind} takes no root")
        return _grouped(topology, kind, weights, size_bytes, algorithm, protocol, gpu, cpu, key, params)

    machine, rings, boxes, nvls_switches = _machine(topology, kind, gpu, cpu, key)
    graph_params: dict[str, Any] = {"rings": len(rings), "ring": machine.ring.to_dict(), "tree": machine.tree.to_dict()}
    if machine.nvls is not None:
        graph_params["nvls"] = machine.nvls.to_dict()
    if machine.collnet is not None:
        graph_params["collnet"] = machine.collnet.to_dict()
    params.update(nodes=machine.nodes, graph=graph_params)
    if size_bytes is None and algorithm in ("auto", RING, TREE):
        chosen_algorithm = RING if algorithm == "auto" else algorithm
        chosen_protocol = SIMPLE if protocol == "auto" else protocol
        channels = all_channels(machine)
        reason = (f"no size given: the {chosen_algorithm} with {chosen_protocol} on all {channels} channels "
                  "(NCCL's usual choice for large messages)")
    else:
        at = size_bytes if size_bytes is not None else 1 << 30
        try:
            best, every = choose(kind, machine, at, algorithm, protocol)
        except NotApplicable as error:
            why = _why_disabled(topology, kind, machine, algorithm)
            raise NotApplicable(f"{error}{': ' + why if why else ''}") from None
        chosen_algorithm, chosen_protocol = best.algorithm, best.protocol
        channels = channels_at(machine, chosen_algorithm, chosen_protocol, at)
        runner_up = sorted((p for p in every if p.time_us is not None and p is not best),
                           key=lambda p: p.time_us)  # type: ignore[arg-type, return-value]
        forced = "" if (algorithm, protocol) == ("auto", "auto") else f" (forced {algorithm}/{protocol})"
        unsized = "" if size_bytes is not None else " (no size given: chosen at 1 GiB)"
        reason = (f"NCCL {release}'s tuning model predicts {best.algorithm}/{best.protocol} fastest"
                  f"{forced}{unsized}: {best.time_us:.2f} us" +
                  (f" (next {runner_up[0].algorithm}/{runner_up[0].protocol} {runner_up[0].time_us:.2f} us)"
                   if runner_up else ""))
        params["model"] = {f"{p.algorithm}/{p.protocol}": p.to_dict() for p in every}
    params["choice"] = {"algorithm": chosen_algorithm, "protocol": chosen_protocol, "channels": channels,
                        "version": release, "reason": reason}
    params["plan"] = {"protocol": chosen_protocol}
    if chosen_algorithm in (NVLS, NVLS_TREE, COLLNET_DIRECT, COLLNET_CHAIN):
        return _build_in_switch(topology, kind, root, chosen_algorithm, nvls_switches, params)
    if chosen_algorithm == PAT:
        return _build_pat(topology, kind, params)
    schedule = _build(topology, kind, root, size_bytes, chosen_algorithm, chosen_protocol, channels, rings,
                      boxes, machine, params)
    return schedule


#: Most chunks per chain a rank's shard is cut into by default (as for NCCL's own broadcast chains).
GROUPED_CHAIN_CHUNKS = 64


def _grouped(topology: Topology, kind: Kind, weights: tuple[int, ...], size: int | None, algorithm: str,
             protocol: str, gpu: str, cpu: str, key: str, params: dict[str, Any]) -> Schedule:
    """Allgatherv / reduce-scatterv as PyTorch runs it on NCCL: a group of broadcasts (reduces), one per rank
    (see :func:`nccl`'s ``shards``)."""
    single = Kind.BROADCAST if kind == Kind.ALLGATHER else Kind.REDUCE
    if algorithm not in ("auto", RING):
        raise NotApplicable(f"NCCL runs {single} with its ring only, not {algorithm}")
    machine, rings, _, _ = _machine(topology, single, gpu, cpu, key)
    total = sum(weights)
    whole = size if size is not None else 1 << 30
    largest = max(1, whole * max(weights) // total)
    best, _ = choose(single, machine, largest, algorithm, protocol)
    channels = channels_at(machine, best.algorithm, best.protocol, largest)
    unit_per_channel = whole / total / channels
    per_unit = max(1, min(max(1, GROUPED_CHAIN_CHUNKS // max(weights)),
                          math.ceil(unit_per_channel / CHAIN_CHUNK_BYTES[best.protocol])))
    collective = Collective.uneven(kind, [w * per_unit * channels for w in weights])
    chains = [[_chain(rings[j % len(rings)], rank) for j in range(channels)] for rank in range(topology.num_ranks)]
    params.update(nodes=machine.nodes, chunks=collective.chunks, shards=list(weights),
                  graph={"rings": len(rings), "ring": machine.ring.to_dict()},
                  choice={"algorithm": RING, "protocol": best.protocol, "channels": channels,
                          "version": params["nccl_version"],
                          "reason": f"PyTorch's {kind} of unequal shards: one {single} per rank in one group; "
                                    f"NCCL's choice for the largest shard's {single} ({largest:,} bytes): "
                                    f"ring/{best.protocol} on {channels} channels"},
                  plan={"protocol": best.protocol})
    return grouped_chains(topology, collective, chains, "nccl", params)


def one_gpu_per_node(topology: Topology) -> bool:
    """True when the topology declares every gpu its own box (a cluster of single-gpu servers): NCCL's
    ``nNodes == nRanks``, where it runs PAT for allgather and reduce-scatter.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> one_gpu_per_node(load_topology("leaf-spine:servers=true")), one_gpu_per_node(load_topology("leaf-spine"))
    (True, False)
    """
    boxes = topology.boxes
    return boxes is not None and topology.num_ranks >= 2 and len(set(boxes)) == topology.num_ranks


def _machine(topology: Topology, kind: Kind, gpu: str, cpu: str,
             key: str) -> tuple[Machine, list[list[int]], list[list[int]] | None, list[str] | None]:
    """The machine NCCL's model sees (its emulated graphs; from 2.23 the NVLS and CollNet graphs where
    supported), the channel rings, the boxes, and the boxes' NVLS switches (None: no NVLS)."""
    n = topology.num_ranks
    rings = channel_rings(topology, auto_channels(topology))
    boxes = box_groups(topology)
    ring_graph, tree_graph = emulate_graphs(topology, rings, boxes, gpu, key)
    nodes = n if one_gpu_per_node(topology) else len(boxes) if boxes else 1
    nvls_graph = collnet_graph = None
    nvls_switches = rails = None
    collnet_direct = False
    if key != "2.16":
        nvls_switches = nvls_boxes(topology, boxes, kind, gpu)
        if nvls_switches is not None:
            nvls_graph = emulate_nvls_graph(topology, boxes, nvls_switches, gpu, key)
        rails = sharp_rails(topology) if kind == Kind.ALLREDUCE else None
        if rails is not None:
            assert boxes is not None
            heads = sorted(rails)
            pairs = paths_for(topology, [(boxes[0][h], boxes[1][h]) for h in heads])
            nic = min(min(topology.bandwidth(*hop) for hop in zip(path, path[1:], strict=False))
                      for path in pairs.values())
            speed = _quantize(nic, speed_table(nodes, gpu, key))
            collnet_graph = Graph(min(MAX_GRAPH_CHANNELS, len(heads)), speed, speed, same_channels=False)
            collnet_direct = n // nodes <= MAX_DIRECT_LOCAL_RANKS and any(
                all(topology.graph.has_edge(switch, topology.gpus[r]) for r in boxes[0])
                for switch in topology.switches)
    machine = Machine(n, nodes, gpu, cpu, ring_graph, tree_graph, key, nvls_graph, collnet_graph, collnet_direct)
    return machine, rings, boxes, nvls_switches


def _why_disabled(topology: Topology, kind: Kind, machine: Machine, algorithm: str) -> str:
    """Why NCCL would not enable the forced ``algorithm`` here ('' when the model says nothing more)."""
    names = ALGO_CHOICES.get(algorithm, ())
    reasons = []
    if any(a in (NVLS, NVLS_TREE) for a in names):
        if machine.nvls is None:
            reasons.append(f"NVLS needs a Hopper or later gpu and an NVLink switch linking every gpu of the box that "
                           f"{'reduces and multicasts' if kind == Kind.ALLREDUCE else 'serves ' + str(kind)} "
                           f"({topology.name}: {machine.arch}, none)")
        elif NVLS_TREE in names and machine.nodes == 1:
            reasons.append("NVLS-Tree runs across nodes only (NCCL disables it on one node)")
        elif NVLS in names and machine.nodes > 1:
            reasons.append("NVLS on several nodes only with CollNet support (switches with IB SHARP), allreduce only")
        if kind not in (Kind.ALLREDUCE, Kind.ALLGATHER, Kind.REDUCESCATTER) or (NVLS_TREE in names and kind != Kind.ALLREDUCE):
            reasons.append(f"NCCL runs no {algorithm} {kind}")
    if any(a in (COLLNET_DIRECT, COLLNET_CHAIN) for a in names):
        if machine.collnet is None:
            reasons.append("CollNet needs several boxes with NICs whose network switches reduce and multicast "
                           "(IB SHARP) for every rail, and allreduce")
        elif COLLNET_DIRECT in names and not machine.collnet_direct:
            reasons.append("CollNet Direct needs an NVSwitch in the box and at most 8 gpus per node")
    if PAT in names:
        reasons.append("PAT runs allgather and reduce-scatter only, at one gpu per node (every gpu its own box)")
    return "; ".join(reasons)


def _build_in_switch(topology: Topology, kind: Kind, root: int | None, algorithm: str,
                     switches: list[str] | None, params: dict[str, Any]) -> Schedule:
    """The NVLS, NVLS-Tree and CollNet schedules (:mod:`synth.algorithms.nvls`, :mod:`.nvls_tree`,
    :mod:`.collnet`), relabelled ``nccl`` with the choice in their params."""
    n = topology.num_ranks
    if root is not None:
        raise InputError("", "root", f"{kind} takes no root")
    if algorithm == NVLS and params["nodes"] == 1:
        from synth.algorithms.nvls import nvls

        # NCCL's NVLS channels run the same pattern side by side over the same links: one chunk per rank,
        # which the evaluator streams in slices as the channels' steps do
        schedule = nvls(topology, kind, chunks=n)
    elif algorithm == NVLS_TREE:
        from synth.algorithms.nvls_tree import nvls_tree

        schedule = nvls_tree(topology, kind)
    else:
        from synth.algorithms.collnet import collnet

        shape = {NVLS: "nvls", COLLNET_DIRECT: "direct", COLLNET_CHAIN: "chain"}[algorithm]
        schedule = collnet(topology, kind, shape=shape)
    merged = {**schedule.params, **params, "built_by": schedule.algorithm}
    return dataclasses.replace(schedule, algorithm="nccl", params=merged)


def _build_pat(topology: Topology, kind: Kind, params: dict[str, Any]) -> Schedule:
    """PAT's data movement in ceil(log2 N) lock-step rounds for any N: Bruck's allgather (round k sends the
    2^k blocks a gpu holds to the gpu 2^k away) or its time reversal for reduce-scatter
    (:func:`synth.algorithms.bruck.bruck`), one chunk per rank, relabelled ``nccl``. NCCL's PAT runs the
    same binomial trees shifted per rank with their sends aggregated, the farthest first; through the
    switches of a one-gpu-per-node fabric the distance order does not change a round's bytes or its
    latency."""
    from synth.algorithms.bruck import bruck

    schedule = bruck(topology, kind, chunks=topology.num_ranks)
    merged = {**schedule.params, **params, "built_by": schedule.algorithm, "chunks": topology.num_ranks}
    return dataclasses.replace(schedule, algorithm="nccl", params=merged)


def _build(topology: Topology, kind: Kind, root: int | None, size: int | None, algorithm: str, protocol: str,
           channels: int, rings: list[list[int]], boxes: list[list[int]] | None, machine: Machine,
           params: dict[str, Any]) -> Schedule:
    n = topology.num_ranks
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER) or (kind == Kind.ALLREDUCE and algorithm == RING):
        used = [rings[j % len(rings)] for j in range(channels)]
        params.update(chunks=n * channels, orders=used)
        return ring_schedule(topology, kind, used, n * channels, "nccl", params, root)
    bytes_per_channel = (size if size is not None else 1 << 30) / channels
    if kind == Kind.ALLREDUCE:
        graph_channels = len(rings)
        trees = [_tree_parents(rings, j % graph_channels, j >= graph_channels, boxes or [list(range(n))], topology)
                 for j in range(channels)]
        depth = n // machine.nodes - 1 + log2i(machine.nodes)
        per_tree = chunks_for_size(int(size or 1 << 30), bytes_per_channel, depth, protocol, n / machine.nodes,
                                   machine.nodes)
        params.update(chunks=per_tree * channels, parents=trees)
        return tree_schedule(topology, kind, trees, per_tree, "nccl", params)
    # broadcast, reduce: a chain along each channel's ring from the root
    start = 0 if root is None else root
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start < n:
        raise InputError("", "root", f"expected a rank in 0..{n - 1}, got {root!r}")
    chains = [_chain(rings[j % len(rings)], start) for j in range(channels)]
    per_chain = max(1, min(64, math.ceil(bytes_per_channel / CHAIN_CHUNK_BYTES[protocol])))
    params.update(chunks=per_chain * channels, parents=chains)
    return tree_schedule(topology, kind, chains, per_chain, "nccl", params, root=start)


def _alltoall(topology: Topology, size: int | None, protocol: str, params: dict[str, Any],
              kind: Kind = Kind.ALLTOALL, demand: Any = None) -> Schedule:
    from synth.algorithms.direct import direct

    n = topology.num_ranks
    schedule = direct(topology, kind, demand=demand) if kind == Kind.ALLTOALLV else direct(topology, Kind.ALLTOALL)
    # alltoallv: size is the whole demand, so a peer gets size / (pairs that send) on average
    peers = n if kind == Kind.ALLTOALL else sum(1 for row in schedule.collective.demand or () for c in row if c)
    if protocol == "auto":
        per_peer = None if size is None else size / peers
        chosen = SIMPLE if per_peer is None or per_peer > P2P_LL_THRESHOLD else LL
        reason = ("no size given: Simple" if per_peer is None else
                  f"NCCL sends each peer {per_peer:g} bytes: {'LL' if chosen == LL else 'Simple'} "
                  f"({'at most' if chosen == LL else 'over'} NCCL_P2P_LL_THRESHOLD = {P2P_LL_THRESHOLD})")
    elif protocol == LL128:
        raise InputError("", "proto", "NCCL's send/receive uses LL or Simple, not LL128")
    else:
        chosen, reason = protocol, f"forced {protocol}"
    params.update(chunks=schedule.chunks, choice={"algorithm": "send/receive", "protocol": chosen,
                                                  "channels": None, "reason": reason},
                  plan={"protocol": chosen})
    return dataclasses.replace(schedule, algorithm="nccl", params=params)


__all__ = ["Graph", "Machine", "Prediction", "algorithm_time", "channels_at", "choose", "emulate_graphs", "nccl",
           "predictions", "tuning_table"]
