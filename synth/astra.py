"""The ``astra`` evaluator model: predicts the time ASTRA-sim 2.x reports for a schedule, in ns.

``evaluate(schedule, topology, size, model="astra")`` turns the schedule into the very Chakra traces
``synth export chakra`` writes (:func:`lower`: :func:`synth.trace.schedule_to_et`, then the
ordering nodes of :func:`sequence_sends`) and runs them through a re-implementation of ASTRA-sim's
custom-collective executor and analytical network (:func:`simulate`). Every rank's finish time is checked
against the real ASTRA-sim 2.x binaries by ``make astra-check`` (``bench/bench_astra.py``).

Executor (ASTRA-sim's ``CustomAlgorithm``)
    Every dependency-free node of a rank's trace is issued at once; the nodes one completion frees are
    issued together, in an order ASTRA-sim takes from a hash set (the model: file order; the exported
    traces are made not to depend on it). A send completes when its data reaches the destination; a
    recv completes when its matching message has arrived and the recv has been posted (whichever is
    later; a recv posted after the arrival completes through an event 0 ns ahead); a COMP node takes
    ``duration_micros`` x 1000 ns, and 0 µs becomes 1 ns, and the COMP nodes of a rank that end in the
    same ns run together where the first of them was scheduled (``Sys::register_event`` keeps one list
    per rank and tick). Sends and recvs match on (tag, src, dst, size), first in first out. Events of one
    ns run in the order they were created. A rank is done when all its nodes are; the result is the last
    rank's finish time (``sys[i] finished, T cycles``).

Network, one dimension (congestion-aware backend)
    Devices are the npus 0..n-1 and, for a Switch, one switch n. Each direction of a link is its own
    FIFO server. A message is stored and forwarded per link: a link that is free starts it at once,
    delivers it to the next device after ``floor(latency + size / bw)`` ns and is free again after
    ``floor(size / bw)`` ns; a busy link queues it, first come first served. Routes: Ring goes
    clockwise (+1) unless anticlockwise is strictly shorter; FullyConnected is one hop; Switch two
    hops (npu -> switch -> npu). ``bw`` is in bytes per ns from the YAML value in GB/s with
    GB = 2^30 bytes: ``bw = GBps * 2^30 / 1e9``, computed in IEEE doubles exactly as ASTRA-sim does.

Network, several dimensions (congestion-unaware backend; the congestion-aware one takes one dimension)
    No contention: a message costs ``floor(hops * latency + size / bw)`` ns in the lowest dimension
    where source and destination differ (Ring: shorter direction; FullyConnected 1; Switch 2).

Topologies ASTRA-sim cannot describe (no ``dimensions`` and not a uniform ring, fully-connected or
single-switch network) are simulated the same store-and-forward way on their physical links along each
transfer's own path (bandwidth in GB/s = 10^9 bytes/s, latency in µs): a prediction for an
ASTRA-sim-like simulator of that network, not of ASTRA-sim itself.

Rounding, worked out from ASTRA-sim's published numbers (8 NPUs, 50 GB/s, 500 ns, 1 MiB in 8 chunks):
one 128 KiB hop is 500 + 131072 / 53.6870912 = 2941.406 ns, truncated to 2941 per hop (each hop is
an integer event delay). Ring allgather: 7 hops in sequence = 20587 ns; on a Switch 14 hops = 41174;
ring allreduce: 14 hops plus 7 one-ns reductions = 41181; direct allgather on FullyConnected: 2941;
the MSCCL-converted ring allreduce with 7 µs reductions: 41174 + 49000 = 90174 ns.

Compute time: COMP durations come from the schedule's ``params["et"]`` (see :mod:`synth.trace`;
the Chakra importer stores the durations it read there), else 0 µs (1 ns) per reduction.

Examples
--------
>>> from synth.library import load_topology
>>> from synth.algorithms import synthesize
>>> topo = load_topology("ring:n=8,bandwidth=53.6870912,latency=0.5")  # 50 GB/s in ASTRA-sim's GB
>>> astra_time_ns(synthesize(topo, "allgather", "ring"), topo, 2**20)
20587
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from synth.errors import InputError, LimitError, SynthError
from synth.plan import Plan
from synth.schedule import Schedule
from synth.topology import Topology

GIB = 1 << 30
KINDS = ("Ring", "FullyConnected", "Switch")


# ------------------------------------------------------------------------------ system description
@dataclass(frozen=True)
class AstraDim:
    """One dimension as ASTRA-sim's network YAML states it: bandwidth in GB/s with GB = 2^30 bytes,
    latency in ns per hop."""

    kind: str
    npus: int
    bandwidth: float
    latency: float

    @property
    def bytes_per_ns(self) -> float:
        """Link bandwidth in bytes per ns, computed as ASTRA-sim computes it."""
        return self.bandwidth * GIB / 1_000_000_000

    def hops(self, src: int, dst: int) -> int:
        """Hops between two local ids of this dimension (shorter direction on a Ring)."""
        if self.kind == "Ring":
            clockwise = (dst - src) % self.npus
            return min(clockwise, self.npus - clockwise)
        return 1 if self.kind == "FullyConnected" else 2


@dataclass(frozen=True)
class AstraSystem:
    """An ASTRA-sim analytical network: a product of Ring/FullyConnected/Switch dimensions."""

    dims: tuple[AstraDim, ...]

    @property
    def npus(self) -> int:
        """Total npus (ranks)."""
        return math.prod(d.npus for d in self.dims)

    @property
    def congestion_aware(self) -> bool:
        """True when ASTRA-sim's congestion-aware backend can run it (one dimension)."""
        return len(self.dims) == 1

    def yaml(self) -> str:
        """The network configuration YAML ASTRA-sim reads."""
        def row(values: list[str]) -> str:
            return "[ " + ", ".join(values) + " ]"
        return (f"topology: {row([d.kind for d in self.dims])}\n"
                f"npus_count: {row([str(d.npus) for d in self.dims])}\n"
                f"bandwidth: {row([_number(d.bandwidth) for d in self.dims])}  # GB/s, GB = 2^30 bytes\n"
                f"latency: {row([_number(d.latency) for d in self.dims])}  # ns per hop\n")

    def address(self, npu: int) -> list[int]:
        """Per-dimension coordinates of an npu: rank = x0 + n0*(x1 + n1*x2 ...)."""
        coords = []
        for d in self.dims:
            coords.append(npu % d.npus)
            npu //= d.npus
        return coords


def _number(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") and "e" not in text else text


def gbps_to_astra(bandwidth_gbps: float) -> float:
    """GB/s (10^9 B/s) -> ASTRA-sim's GB/s (2^30 B/s), exactly rounded: 53.6870912 -> 50.0."""
    return float(Fraction(repr(float(bandwidth_gbps))) * 10**9 / GIB)


def us_to_ns(latency_us: float) -> float:
    """µs -> ns, exactly rounded: 0.5 -> 500.0."""
    return float(Fraction(repr(float(latency_us))) * 1000)


def astra_system(topology: Topology) -> tuple[AstraSystem | None, str]:
    """The ASTRA-sim network equivalent to ``topology``, or None and the reason it has none.

    Uses ``topology.dimensions`` when set; otherwise recognizes a uniform ring (in rank order),
    fully-connected network or single switch.
    """
    if topology.dimensions:
        dims = []
        for d in topology.dimensions:
            dim_kind = "FullyConnected" if d.kind == "Ring" and d.size == 2 else d.kind
            dims.append(AstraDim(dim_kind, d.size, gbps_to_astra(d.bandwidth), us_to_ns(d.latency)))
        return AstraSystem(tuple(dims)), ""
    shape = _recognize(topology)
    if shape is None:
        return None, (f"topology {topology.name!r} is not a product of Ring/FullyConnected/Switch dimensions "
                      "(it sets no 'dimensions' and is not a uniform ring, fully-connected network or single "
                      "switch), so ASTRA-sim's analytical network cannot describe it")
    kind, bandwidth, latency = shape
    return AstraSystem((AstraDim(kind, topology.num_ranks, gbps_to_astra(bandwidth), us_to_ns(latency)),)), ""


def _recognize(topology: Topology) -> tuple[str, float, float] | None:
    links = list(topology.links())
    if not links:
        return None
    bandwidths = {link.bandwidth for link in links}
    latencies = {link.latency for link in links}
    if len(bandwidths) != 1 or len(latencies) != 1:
        return None
    bandwidth, latency = bandwidths.pop(), latencies.pop()
    n = topology.num_ranks
    pairs = {(link.src, link.dst) for link in links}
    gpus = topology.gpus
    if len(topology.switches) == 1:
        hub = topology.switches[0]
        wanted = {(g, hub) for g in gpus} | {(hub, g) for g in gpus}
        return ("Switch", bandwidth, latency) if pairs == wanted else None
    if topology.switches:
        return None
    if pairs == {(a, b) for a in gpus for b in gpus if a != b}:
        return "FullyConnected", bandwidth, latency
    if n >= 3 and pairs == {(gpus[i], gpus[(i + s) % n]) for i in range(n) for s in (1, -1)}:
        return "Ring", bandwidth, latency
    return None


def load_network_yaml(path: str) -> tuple[Topology, str]:
    """An ASTRA-sim network YAML as a synth topology plus the library spec that rebuilds it.

    Bandwidth converts from ASTRA-sim's GB/s (2^30) to synth's (10^9), latency from ns to µs.
    """
    from synth.library import build
    from synth.topology import read_document

    data = read_document(path)
    if not isinstance(data, dict):
        raise InputError(path, "", "expected a YAML mapping with topology, npus_count, bandwidth, latency")
    rows: dict[str, list[Any]] = {}
    for key in ("topology", "npus_count", "bandwidth", "latency"):
        value = data.get(key)
        if not isinstance(value, list) or not value:
            raise InputError(path, key, "expected a non-empty list, one entry per dimension")
        rows[key] = value
    count = len(rows["topology"])
    for key, value in rows.items():
        if len(value) != count:
            raise InputError(path, key, f"expected {count} entries (one per dimension), got {len(value)}")
    kinds, sizes, bandwidths, latencies = [], [], [], []
    for index in range(count):
        kind = rows["topology"][index]
        if kind not in KINDS:
            raise InputError(path, f"topology.{index}", f"expected Ring, FullyConnected or Switch, got {kind!r}")
        npus = rows["npus_count"][index]
        if isinstance(npus, bool) or not isinstance(npus, int) or npus < 2:
            raise InputError(path, f"npus_count.{index}", f"expected an integer >= 2, got {npus!r}")
        bandwidth, latency = rows["bandwidth"][index], rows["latency"][index]
        for key, value in (("bandwidth", bandwidth), ("latency", latency)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise InputError(path, f"{key}.{index}", f"expected a number >= 0, got {value!r}")
        if bandwidth <= 0:
            raise InputError(path, f"bandwidth.{index}", "expected a positive bandwidth")
        kinds.append(kind)
        sizes.append(npus)
        bandwidths.append(float(Fraction(repr(float(bandwidth))) * GIB / 10**9))
        latencies.append(float(Fraction(repr(float(latency))) / 1000))
    if count == 1:
        name = {"Ring": "ring", "FullyConnected": "fully-connected", "Switch": "switch"}[kinds[0]]
        spec = f"{name}:n={sizes[0]},bandwidth={bandwidths[0]!r},latency={latencies[0]!r}"
    else:
        spec = (f"multidim:kinds={'/'.join(kinds)},sizes={'x'.join(map(str, sizes))},"
                f"bandwidths={'x'.join(map(repr, bandwidths))},latencies={'x'.join(map(repr, latencies))}")
    from synth.library import multidim
    from synth.topology import MAX_NODES

    if math.prod(sizes) > MAX_NODES:  # refuse before building millions of nodes
        raise InputError(path, "npus_count", f"{math.prod(sizes)} npus exceed the limit of {MAX_NODES}")
    try:
        if count == 1:
            topology = build(spec)
        else:
            topology = multidim(kinds=tuple(kinds), sizes=tuple(sizes), bandwidths=tuple(bandwidths),
                                latencies=tuple(latencies))
    except (InputError, ValueError) as error:
        raise InputError(path, "", str(error)) from None
    return topology, spec


def is_network_yaml(path: str) -> bool:
    """True when ``path`` is a YAML file whose top level is an ASTRA-sim network configuration: a mapping
    with ``topology`` and ``npus_count`` lists and no synth topology fields (``nodes``, ``links``). A synth
    topology that merely mentions ``npus_count`` (in its metadata, say) is not one."""
    import contextlib
    from pathlib import Path

    from synth.errors import SynthError
    from synth.topology import read_document

    candidate = Path(path)
    with contextlib.suppress(OSError, ValueError):
        if candidate.suffix.lower() not in (".yml", ".yaml") or not candidate.is_file():
            return False
    try:
        data = read_document(candidate)
    except (SynthError, OSError, ValueError):
        return False  # the topology loader reports what is wrong with it
    return (isinstance(data, dict) and isinstance(data.get("topology"), list) and "npus_count" in data
            and "nodes" not in data and "links" not in data)


# ------------------------------------------------------------------------------------- networks
class _Link:
    __slots__ = ("bw", "latency", "busy", "pending")

    def __init__(self, bytes_per_ns: float, latency_ns: float) -> None:
        self.bw = bytes_per_ns
        self.latency = latency_ns
        self.busy = False
        self.pending: deque[Any] = deque()


@dataclass
class Network:
    """What the simulator needs from a network: for every message, either a route of links (served
    store-and-forward, FIFO) or a fixed delay (congestion-unaware)."""

    route: Callable[[int, int, int | None], list[_Link]] | None = None
    delay: Callable[[int, int, int], int] | None = None
    description: str = ""
    links: dict[Any, _Link] = field(default_factory=dict)

    def reset(self) -> None:
        """Every link idle with an empty queue (before a simulation)."""
        for link in self.links.values():
            link.busy = False
            link.pending.clear()


def astra_network(system: AstraSystem) -> Network:
    """The network ASTRA-sim builds for ``system`` (congestion-aware for one dimension)."""
    if not system.congestion_aware:
        def delay(src: int, dst: int, size: int) -> int:
            a, b = system.address(src), system.address(dst)
            for dim, x, y in zip(system.dims, a, b, strict=True):
                if x != y:
                    return int(dim.hops(x, y) * dim.latency + size / dim.bytes_per_ns)
            raise SynthError(f"a message from npu {src} to itself")
        return Network(delay=delay, description="ASTRA-sim congestion-unaware multi-dimensional network")

    dim = system.dims[0]
    n = dim.npus
    links: dict[Any, _Link] = {}

    def link(a: int, b: int) -> _Link:
        found = links.get((a, b))
        if found is None:
            found = links[(a, b)] = _Link(dim.bytes_per_ns, dim.latency)
        return found

    def route(src: int, dst: int, _transfer: int | None) -> list[_Link]:
        if dim.kind == "FullyConnected":
            return [link(src, dst)]
        if dim.kind == "Switch":
            return [link(src, n), link(n, dst)]
        clockwise = (dst - src) % n
        step = -1 if n - clockwise < clockwise else 1
        hops, current = [], src
        while current != dst:
            nxt = (current + step) % n
            hops.append(link(current, nxt))
            current = nxt
        return hops

    return Network(route=route, description=f"ASTRA-sim congestion-aware {dim.kind} of {n} npus", links=links)


def physical_network(topology: Topology, paths: dict[int, tuple[str, ...]]) -> Network:
    """Store-and-forward on the topology's own links along each transfer's path (GB/s = 10^9 B/s)."""
    links: dict[Any, _Link] = {}
    graph = topology.graph

    def link(u: str, v: str) -> _Link:
        found = links.get((u, v))
        if found is None:
            data = graph.edges[u, v]
            found = links[(u, v)] = _Link(float(data["bandwidth"]), us_to_ns(data["latency"]))
        return found

    def route(src: int, dst: int, transfer: int | None) -> list[_Link]:
        path = paths.get(transfer) if transfer is not None else None
        if path is None:
            from synth.routing import route as shortest

            path = shortest(topology, src, dst)
            if path is None:
                raise SynthError(f"a message from rank {src} to rank {dst} names no path, and no path through "
                                 f"switches and forwarding gpus joins them on {topology.name!r}")
        return [link(u, v) for u, v in zip(path, path[1:], strict=False)]

    return Network(route=route, description=f"store-and-forward on the links of {topology.name!r}", links=links)


def network_for(topology: Topology, paths: dict[int, tuple[str, ...]] | None = None) -> Network:
    """ASTRA-sim's network when it can describe ``topology``, else the physical store-and-forward one."""
    system, _ = astra_system(topology)
    if system is not None:
        if system.npus != topology.num_ranks:
            raise InputError("", "dimensions", f"describe {system.npus} npus but the topology has "
                             f"{topology.num_ranks} gpus")
        return astra_network(system)
    return physical_network(topology, paths or {})


def smallest_message(system: AstraSystem) -> int:
    """The fewest bytes a message may have for ASTRA-sim to run it: every event it causes must lie at least
    1 ns ahead.

    A message that starts at time 0 and takes under 1 ns on its link (congestion-aware: ``size / bw < 1``;
    congestion-unaware: ``hops * latency + size / bw < 1``) schedules an event at time 0, which ASTRA-sim's
    event queue rejects (``Assertion `current_event_list.get_event_time() > current_time' failed``, exit
    134, no rank finishes). Later tiny messages run, but synth's exports keep every message at or above
    this size so that two sends of a rank never reach a link in the same ns (see :func:`sequence_sends`).

    Examples
    --------
    >>> smallest_message(AstraSystem((AstraDim("Ring", 8, 50.0, 500.0),)))  # 50 GB/s = 53.687 bytes/ns
    54
    """
    smallest = 1
    for dim in system.dims:
        bw = dim.bytes_per_ns
        if system.congestion_aware:
            def runs(size: int, bw: float = bw, latency: float = dim.latency) -> bool:
                return int(size / bw) >= 1 and int(latency + size / bw) >= 1
        else:
            hops = 2 if dim.kind == "Switch" else 1

            def runs(size: int, bw: float = bw, latency: float = hops * dim.latency) -> bool:
                return int(latency + size / bw) >= 1
        size = max(1, math.ceil(bw) - 1)
        while not runs(size):
            size += 1
        while size > 1 and runs(size - 1):
            size -= 1
        smallest = max(smallest, size)
    return smallest


# ------------------------------------------------------------------------------------ simulator
@dataclass
class SimulationResult:
    """Finish time per rank in ns (None for a rank that never finished) and the send/recv matches."""

    finish_ns: list[int | None]
    #: (src rank, send node id, dst rank, recv node id, arrival ns) per delivered message, in order
    matches: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    #: nodes whose order ASTRA-sim would leave to chance, each group in the order this run issued them
    #: (``(rank, node index)``, one rank per group): two sends of a rank that reach a link in the same
    #: ns, or two nodes one completion freed together whose messages reach a link in the same ns
    ties: list[list[tuple[int, int]]] = field(default_factory=list)
    #: sends ``(rank, node index)`` that reach a link in the same ns as a message passing through it
    delays: list[tuple[int, int]] = field(default_factory=list)
    #: per link that carried anything, the messages it started, in order: (start ns, src rank, tag)
    link_log: dict[Any, list[tuple[int, int, int]]] = field(default_factory=dict)

    @property
    def time_ns(self) -> int:
        """The collective's time: the last rank's finish."""
        if any(t is None for t in self.finish_ns):
            raise SynthError("the traces deadlock: " + "; ".join(self.unmatched[:5]))
        return max((t for t in self.finish_ns if t is not None), default=0)


_Context = tuple[int, int, Any]  # (step id, call id or -1, (rank, node index) or None)


def simulate(program: Any, network: Network, order: str | int | None = None) -> SimulationResult:
    """Run an :class:`~synth.trace.EtProgram` as ASTRA-sim's custom-collective executor does.

    Besides the finish times, it reports every place where two messages reach one link in the same ns
    in an order ASTRA-sim could take differently (:attr:`SimulationResult.ties` and ``delays``, see
    :func:`sequence_sends`). For two messages passing through a link, every event remembers where it was
    created (the event being processed, and the node whose issue created it when that happened while
    issuing the nodes one completion freed); events of one ns run in creation order, so the order of two
    of them is fixed unless their creation histories part at one such batch of nodes, which ASTRA-sim
    issues in hash-set order.

    Parameters
    ----------
    program : EtProgram
    network : Network
        Reset before the run.
    order : None, "reverse" or int
        The order in which nodes that become ready together (freed by one completion, or the roots of a
        rank) are issued: None is file order; "reverse" and a random seed stand in for ASTRA-sim's hash
        set order, to check that a program's outcome does not depend on it.

    Notes
    -----
    Longer than the house limit on purpose: it mirrors ASTRA-sim's executor event by event, as one event
    loop whose handlers (``issue``, ``enqueue``, ``transmit``, ``deliver``, ``done``, the tie detection in
    ``parting``) are nested functions sharing the run's state, each under 45 lines; read together they are
    the replay's definition, and the tie bookkeeping needs every handler's view of the current step.
    """
    import random

    from synth.proto.et_def import NodeType

    network.reset()
    shuffle = random.Random(order).shuffle if isinstance(order, int) and not isinstance(order, bool) else None
    if order is not None and shuffle is None and order != "reverse":
        raise ValueError(f"order must be None, 'reverse' or an integer seed, got {order!r}")
    send_type, recv_type, comp_type = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMP_NODE
    n = program.num_ranks
    children: list[list[list[int]]] = []
    waiting: list[list[int]] = []
    for rank in range(n):
        nodes = program.nodes[rank]
        position = {node.id: i for i, node in enumerate(nodes)}
        kids: list[list[int]] = [[] for _ in nodes]
        counts = [0] * len(nodes)
        for i, node in enumerate(nodes):
            for dep in set(node.deps):
                kids[position[dep]].append(i)
                counts[i] += 1
        for kid_list in kids:
            kid_list.sort()
        children.append(kids)
        waiting.append(counts)
    remaining = [len(program.nodes[r]) for r in range(n)]
    finish: list[int | None] = [None if remaining[r] else 0 for r in range(n)]
    heap: list[tuple[int, int, int, Any]] = []
    now = 0
    sent: dict[tuple[int, int, int, int], int] = {}
    posted: dict[tuple[int, int, int, int], int] = {}
    arrived: dict[tuple[tuple[int, int, int, int], int], int] = {}  # message -> arrival time
    recv_waiting: dict[tuple[tuple[int, int, int, int], int], tuple[int, int]] = {}
    send_of: dict[tuple[tuple[int, int, int, int], int], tuple[int, int]] = {}
    batches: dict[tuple[int, int], tuple[int, list[tuple[int, int]]]] = {}  # (rank, ns) -> (event, entries)
    matches: list[tuple[int, int, int, int, int]] = []
    action_done, action_arrive, action_free, action_batch = 0, 1, 2, 3
    # provenance: every event and every COMP completion in a batch is a *step*
    step_time: list[int] = []
    step_origin: list[_Context] = []
    step_batch: list[int] = []  # the batch event of a COMP completion, else -1
    context: _Context = (-1, -1, None)
    calls = 0
    last_enqueue: dict[int, tuple[int, _Context, tuple[int, int] | None]] = {}  # id(link) -> last enqueue
    parted: dict[tuple[int, int], tuple[int, int, int, int] | None] = {}  # memo of parting(), by step pair
    ties: dict[tuple[Any, ...], list[tuple[int, int]]] = {}  # group -> nodes (rank, index) to order, in issue order
    delays: dict[tuple[int, int], None] = {}  # sends to start 1 ns later
    issued: dict[tuple[int, int], int] = {}  # (rank, node index) -> issue sequence number
    link_log: dict[Any, list[tuple[int, int, int]]] = {}

    def new_step(time: int, batch: int = -1) -> int:
        step_time.append(time)
        step_origin.append(context)
        step_batch.append(batch)
        return len(step_time) - 1

    def at(time: int, action: int, payload: Any) -> int:
        step = new_step(time)
        heapq.heappush(heap, (time, step, action, payload))
        return step

    def created(origin: _Context) -> int:
        return step_time[origin[0]] if origin[0] >= 0 else 0

    def parting(first: _Context, second: _Context) -> tuple[int, int, int, int] | None:
        """Where the histories of two actions of one ns part at a batch of nodes issued in hash order:
        (rank, batch, node issued first, node issued second); None when their order is fixed."""
        walked: list[tuple[int, int]] = []
        found: tuple[int, int, int, int] | None = None
        while True:
            a, b = first[0], second[0]
            if a == b:  # one step: its code runs in a fixed order, except the nodes of one batch
                if first[1] == second[1] != -1 and first[2] != second[2]:
                    found = (first[2][0], first[1], first[2][1], second[2][1])
                break
            if a < 0 or b < 0:
                break  # a rank's roots are issued before any event, ranks in rank order
            if (a, b) in parted:
                found = parted[(a, b)]
                break
            walked.append((a, b))
            batch_a, batch_b = step_batch[a], step_batch[b]
            if batch_a == -1 or batch_a != batch_b:  # events run in creation order (a COMP in its batch's place)
                a, b = (batch_a if batch_a != -1 else a), (batch_b if batch_b != -1 else b)
                if a == b:
                    break
            first, second = step_origin[a], step_origin[b]  # two COMPs of one batch: in registration order
            if created(first) != created(second):
                break
        for pair in walked:
            parted[pair] = found
        return found

    def enqueue(link: _Link, message: list[Any], sender: tuple[int, int] | None = None) -> None:
        """A message joins a link's queue: sent by ``sender`` (rank, node index), else passing through."""
        key = id(link)
        last = last_enqueue.get(key)
        if last is not None and last[0] == now:  # a tie: two messages reach the link in the same ns
            earlier = last[2]
            if sender is not None and earlier is not None:  # two sends of one rank: order them
                ties.setdefault(("link", key, now, sender[0]), []).extend((earlier, sender))
            elif sender is not None or earlier is not None:  # a send and a message passing: the send waits
                delays[sender or earlier] = None  # type: ignore[index]
            else:  # two messages passing: is their order fixed?
                found = parting(last[1], context)
                if found is not None:
                    rank, batch, first, second = found
                    ties.setdefault(("batch", batch, rank), []).extend(((rank, first), (rank, second)))
        last_enqueue[key] = (now, context, sender)
        if link.busy:
            link.pending.append(message)
        else:
            transmit(link, message)

    def transmit(link: _Link, message: list[Any]) -> None:
        link.busy = True
        size = message[2]
        link_log.setdefault(link, []).append((now, message[0][1], message[0][0]))
        at(now + int(link.latency + size / link.bw), action_arrive, message)
        at(now + int(size / link.bw), action_free, link)

    def deliver(message: list[Any]) -> None:
        key, number = message[0], message[1]
        src_rank, send_index = send_of[(key, number)]
        arrived[(key, number)] = now
        done(src_rank, send_index)
        receiver = recv_waiting.pop((key, number), None)
        if receiver is not None:
            matches.append((src_rank, program.nodes[src_rank][send_index].id, receiver[0],
                            program.nodes[receiver[0]][receiver[1]].id, now))
            done(*receiver)

    def issue(rank: int, i: int) -> None:
        node = program.nodes[rank][i]
        kind = node.type
        if kind == send_type:
            if not 0 <= node.peer < n or node.peer == rank:
                raise InputError("", f"rank {rank} node {node.id}", f"sends to invalid rank {node.peer}")
            key = (node.tag, rank, node.peer, node.size)
            number = sent.get(key, 0)
            sent[key] = number + 1
            send_of[(key, number)] = (rank, i)
            message = [key, number, node.size, 0, None]
            if network.delay is not None:
                at(now + network.delay(rank, node.peer, node.size), action_arrive, message)
            else:
                route = message[4] = network.route(rank, node.peer, node.transfer)  # type: ignore[misc]
                enqueue(route[0], message, (rank, i))
        elif kind == recv_type:
            if not 0 <= node.peer < n or node.peer == rank:
                raise InputError("", f"rank {rank} node {node.id}", f"receives from invalid rank {node.peer}")
            key = (node.tag, node.peer, rank, node.size)
            number = posted.get(key, 0)
            posted[key] = number + 1
            if (key, number) in arrived:
                src_rank, send_index = send_of[(key, number)]
                matches.append((src_rank, program.nodes[src_rank][send_index].id, rank, node.id, now))
                at(now, action_done, (rank, i))  # ASTRA-sim: the recv callback, scheduled 0 ns ahead
            else:
                recv_waiting[(key, number)] = (rank, i)
        elif kind == comp_type:
            # ASTRA-sim's Sys::register_event: one list per (rank, tick), run when the tick's first event fires
            when = now + (node.duration_us * 1000 if node.duration_us else 1)
            batch = batches.get((rank, when))
            if batch is None:
                batch = batches[(rank, when)] = (at(when, action_batch, (rank, when)), [])
            batch[1].append((new_step(when, batch[0]), i))
        else:
            at(now, action_done, (rank, i))

    def issue_all(rank: int, ready: list[int]) -> None:
        nonlocal context, calls
        if not ready:
            return
        if len(ready) > 1 and order is not None:
            if shuffle is None:
                ready.reverse()
            else:
                shuffle(ready)
        step, call = context[0], calls
        calls += 1
        for i in ready:
            context = (step, call, (rank, i))
            issued[(rank, i)] = len(issued)
            issue(rank, i)
        context = (step, -1, None)

    def done(rank: int, i: int) -> None:
        remaining[rank] -= 1
        if remaining[rank] == 0:
            finish[rank] = now
        ready = []
        for child in children[rank][i]:
            waiting[rank][child] -= 1
            if waiting[rank][child] == 0:
                ready.append(child)
        issue_all(rank, ready)

    for rank in range(n):
        context = (-1 - rank, -1, None)
        issue_all(rank, [i for i in range(len(program.nodes[rank])) if waiting[rank][i] == 0])
    while heap:
        now, step, action, payload = heapq.heappop(heap)
        context = (step, -1, None)
        if action == action_done:
            done(*payload)
        elif action == action_arrive:
            route = payload[4]
            if route is None:
                deliver(payload)
            else:
                payload[3] += 1
                if payload[3] < len(route):
                    enqueue(route[payload[3]], payload)
                else:
                    deliver(payload)
        elif action == action_batch:
            rank = payload[0]
            for entry, i in batches.pop(payload)[1]:
                context = (entry, -1, None)
                done(rank, i)
        else:
            payload.busy = False
            if payload.pending:
                transmit(payload, payload.pending.popleft())
    unmatched = []
    for (key, _), (rank, i) in sorted(recv_waiting.items()):
        unmatched.append(f"rank {rank} node {program.nodes[rank][i].id} waits for a message from rank {key[1]} "
                         f"with tag {key[0]} and size {key[3]} that is never sent")
    for key, count in sorted(sent.items()):
        extra = count - posted.get(key, 0)
        if extra > 0:
            unmatched.append(f"{extra} message(s) from rank {key[1]} to rank {key[2]} with tag {key[0]} and size "
                             f"{key[3]} are never received")
    for rank in range(n):
        if finish[rank] is None and not any(f"rank {rank} " in u for u in unmatched):
            unmatched.append(f"rank {rank} never finishes (a dependency is never satisfied)")
    groups = []
    for members in ties.values():
        ordered = sorted(set(members), key=issued.__getitem__)
        groups.append(ordered)
    return SimulationResult(finish, matches, unmatched, groups, list(delays), link_log)


# ------------------------------------------------------------------------------------------ order
#: Name prefix and extra attribute of the ordering COMP nodes :func:`sequence_sends` adds.
ORDER_PREFIX = "order_after_"
DELAY_PREFIX = "delay_"
ORDER_ATTR = "order_after"
MAX_ORDER_ROUNDS = 200
MAX_DELAYS = 16


def sequence_sends(program: Any, network: Network) -> SimulationResult:
    """Make the traces' outcome independent of the order in which ASTRA-sim issues simultaneously ready
    nodes; returns the final run.

    ASTRA-sim issues the nodes that one completion frees in the order of a hash set (the Chakra feeder's
    ``std::unordered_set``) and runs the events of one ns in the order they were created, so where two
    messages reach one link in the same ns, which goes first may depend on that hash order, which no trace
    states. :func:`simulate` reports every such tie, and this adds nodes until none is left:

    - two sends of a rank reach their link in the same ns: the second (in the order the model issued
      them, file order for nodes freed together) waits for an *ordering node* of the first, a COMP node of
      0 µs (1 ns in ASTRA-sim) with the first send's dependencies, so it starts exactly 1 ns later, while
      the first still occupies the link (every message takes at least 1 ns there,
      :func:`smallest_message`): the link serves them in the same order at the same times;
    - a send reaches its link in the same ns as a message passing through (a Ring's npu forwarding):
      the send waits for a *delay node* (the same kind of COMP node, with the send's own dependencies)
      and starts 1 ns later, behind the passing message (at most :data:`MAX_DELAYS` times per send);
    - two messages pass through a link in the same ns (at a Switch): their order is their creation
      order, fixed unless their histories part at nodes one completion freed together; those nodes are
      then ordered 1 ns apart as above.

    Ordering nodes are named ``order_after_<node>``, delay nodes ``delay_<send>``; both carry the extra
    attribute ``order_after`` (the node's id) and are appended to each rank's node list. Networks without
    links (congestion-unaware) need none. Tests check the result by issuing simultaneously ready nodes in
    reversed and random orders (:func:`simulate`'s ``order``).
    """
    from synth.proto.et_def import NodeType
    from synth.trace import EtNode

    result = simulate(program, network)
    base_length = [len(nodes) for nodes in program.nodes]
    after_of: dict[tuple[int, int], int] = {}  # (rank, node index) -> index of its ordering node
    next_id = [max((node.id for node in nodes), default=-1) + 1 for nodes in program.nodes]

    def add_dep(rank: int, index: int, dep_id: int) -> None:
        node = program.nodes[rank][index]
        if dep_id in node.deps:
            return
        node.deps = tuple(sorted({*node.deps, dep_id}))
        if (rank, index) in after_of:  # an ordering node keeps its node's dependencies
            add_dep(rank, after_of[(rank, index)], dep_id)

    def ordering_node(rank: int, index: int) -> int:
        found = after_of.get((rank, index))
        if found is None:
            nodes = program.nodes[rank]
            found = after_of[(rank, index)] = len(nodes)
            nodes.append(EtNode(next_id[rank], ORDER_PREFIX + nodes[index].name, NodeType.COMP_NODE,
                                nodes[index].deps, extras={ORDER_ATTR: nodes[index].id}))
            next_id[rank] += 1
        return found

    delayed: dict[tuple[int, int], int] = {}
    for _ in range(MAX_ORDER_ROUNDS):
        # a send that keeps meeting messages passing through (a link busy every ns) stays after MAX_DELAYS
        delays = [send for send in result.delays if delayed.get(send, 0) < MAX_DELAYS]
        if not result.ties and not delays:
            program.order_nodes = sum(len(nodes) - length for nodes, length in zip(program.nodes, base_length,
                                                                                  strict=True))
            return result
        for group in result.ties:  # 1 ns apart, in the order this run issued them
            for (rank, earlier), (_, later) in zip(group, group[1:], strict=False):
                add_dep(rank, later, program.nodes[rank][ordering_node(rank, earlier)].id)
        for rank, index in delays:  # 1 ns later than its dependencies allow
            delayed[(rank, index)] = delayed.get((rank, index), 0) + 1
            nodes = program.nodes[rank]
            delay = EtNode(next_id[rank], DELAY_PREFIX + nodes[index].name, NodeType.COMP_NODE, nodes[index].deps,
                           extras={ORDER_ATTR: nodes[index].id})
            next_id[rank] += 1
            nodes.append(delay)
            add_dep(rank, index, delay.id)
        result = simulate(program, network)
    raise SynthError(f"could not make the traces independent of ASTRA-sim's issue order in {MAX_ORDER_ROUNDS} rounds")


# ---------------------------------------------------------------------------------------- model
@dataclass
class Lowered:
    """A schedule lowered for ASTRA-sim at one size: the traces (ordered), their run, the network."""

    program: Any
    result: SimulationResult
    network: Network
    system: AstraSystem | None


def lower(schedule: Schedule, topology: Topology, size: int, comp_duration_us: int | None = None,
          tag_base: int = 0, extras: bool = True, slices: int = 1, window: int | None = None) -> Lowered:
    """The traces ``synth export chakra`` writes for ``schedule`` at ``size`` bytes, and their simulation.

    :func:`synth.trace.schedule_to_et` builds the nodes (``slices`` messages per transfer, ``window``
    in flight), :func:`sequence_sends` fixes the order of sends that share a link. Refuses (LimitError)
    messages ASTRA-sim cannot run (:func:`smallest_message`) on a network it describes.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("switch:n=4,bandwidth=53.6870912,latency=0.5")
    >>> lowered = lower(synthesize(topo, "allgather", "direct"), topo, 2**20)
    >>> lowered.result.finish_ns, lowered.program.order_nodes  # ASTRA-sim 2.x reports the same finish times
    ([20528, 25410, 30292, 30292], 8)
    """
    from synth.trace import chunk_bytes, schedule_to_et, slice_sizes

    if len(schedule.ranks) != topology.num_ranks:
        raise InputError("", "topology", f"the schedule has {len(schedule.ranks)} ranks, the topology "
                         f"{topology.num_ranks} gpus")
    program = schedule_to_et(schedule, size, comp_duration_us, tag_base, extras, slices, window)
    system, _ = astra_system(topology)
    if system is not None and system.npus == topology.num_ranks:
        smallest = smallest_message(system)
        message = min(slice_sizes(chunk_bytes(schedule, size), slices))
        if message < smallest:
            chunks = schedule.collective.chunks
            fits = chunks * (slices * smallest - 1) + 1
            speed = min(d.bytes_per_ns for d in system.dims)
            raise LimitError(f"messages of {message} bytes ({size} bytes in {chunks} chunks"
                             + (f" of {slices} slices" if slices > 1 else "")
                             + f") take under 1 ns on this network's links ({speed:.4g} bytes per ns): ASTRA-sim "
                             "aborts on them (an assertion in its event queue, exit 134). The smallest message it "
                             f"runs here is {smallest} bytes: use a size of at least {fits} bytes"
                             + (" or fewer slices" if slices > 1 else "") + ".")
    network = network_for(topology, program.paths)
    result = sequence_sends(program, network)
    return Lowered(program, result, network, system)


def astra_finish_ns(schedule: Schedule, topology: Topology, size: int, comp_duration_us: int | None = None,
                    slices: int = 1, window: int | None = None) -> list[int]:
    """Predicted ``sys[i] finished, T cycles`` of every rank (ns), as ASTRA-sim prints them.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=4,bandwidth=53.6870912,latency=0.5")
    >>> astra_finish_ns(synthesize(topo, "allgather", "ring"), topo, 2**20)  # 3 hops of 500 + 262144/53.687 ns
    [16146, 16146, 16146, 16146]
    """
    result = lower(schedule, topology, size, comp_duration_us, extras=False, slices=slices, window=window).result
    if any(t is None for t in result.finish_ns):
        raise SynthError("the traces deadlock: " + "; ".join(result.unmatched[:5]))
    return [int(t) for t in result.finish_ns if t is not None]


def astra_time_ns(schedule: Schedule, topology: Topology, size: int, comp_duration_us: int | None = None,
                  slices: int = 1, window: int | None = None) -> int:
    """Predicted ASTRA-sim time in ns of ``schedule`` at ``size`` bytes on ``topology``: the last rank's
    finish (see :func:`astra_finish_ns`).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("fully-connected:n=8,bandwidth=53.6870912,latency=0.5")
    >>> astra_time_ns(synthesize(topo, "allgather", "direct"), topo, 2**20)
    2941
    """
    return max(astra_finish_ns(schedule, topology, size, comp_duration_us, slices, window))


def simulate_astra(schedule: Schedule, topology: Topology, size: int, plan: Plan) -> float:
    """The ``astra`` model for :func:`synth.evaluate.evaluate`: seconds (an integer number of ns).

    ASTRA-sim has no protocols. The plan's slices and window are lowered as ``export chakra --slices
    --window`` lowers them (a window as wide as the slices is none). The model is registered with
    ``slicing=False`` while ``export chakra`` writes one slice per chunk by default, so every plan it gets
    has one slice and the prediction is the default export's.
    """
    window = plan.window if plan.window < plan.slices else None
    return astra_time_ns(schedule, topology, size, slices=plan.slices, window=window) / 1e9


def schedule_fingerprint(schedule: Schedule) -> str:
    """First 16 hex digits of the SHA-256 of the schedule's JSON, less a pinned plan: which schedule an
    ASTRA-sim measurement (``make astra-check --record``) is of.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> len(schedule_fingerprint(synthesize(load_topology("switch:n=4"), "allgather", "ring")))
    16
    """
    import dataclasses
    import hashlib

    if "plan" in schedule.params:  # ASTRA-sim models no protocol or slicing: a pinned plan is not what it ran
        schedule = dataclasses.replace(schedule, params={k: v for k, v in schedule.params.items() if k != "plan"})
    return hashlib.sha256(schedule.to_json().encode()).hexdigest()[:16]


def _register() -> None:
    from synth.evaluate import register_model

    register_model("astra", simulate_astra, protocols=False, slicing=False)


_register()
