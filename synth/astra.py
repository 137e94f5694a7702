"""The ``astra`` evaluator model: predicts the time ASTRA-sim 2.x reports for a schedule, in ns.

``evaluate(schedule, topology, size, model="astra")`` turns the schedule into the very Chakra traces
``synth export chakra`` writes (:func:`synth.export.et.schedule_to_et`) and runs them through a
re-implementation of ASTRA-sim's custom-collective executor and analytical network:

Executor (ASTRA-sim's ``CustomAlgorithm``)
    Every dependency-free node of a rank's trace is issued at once. A send completes when its data
    reaches the destination; a recv completes when its matching message has arrived and the recv has
    been posted (whichever is later); a COMP node takes ``duration_micros`` x 1000 ns, and 0 µs
    becomes 1 ns. Sends and recvs match on (tag, src, dst, size), first in first out. A rank is done
    when all its nodes are; the result is the last rank's finish time (``sys[i] finished, T cycles``).

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

Compute time: COMP durations come from the schedule's ``params["et"]`` (see :mod:`synth.export.et`;
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

from synth.errors import InputError, SynthError
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
            kind = "FullyConnected" if d.kind == "Ring" and d.size == 2 else d.kind
            dims.append(AstraDim(kind, d.size, gbps_to_astra(d.bandwidth), us_to_ns(d.latency)))
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
    links: dict[tuple[int, int], _Link] = {}

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

    return Network(route=route, description=f"ASTRA-sim congestion-aware {dim.kind} of {n} npus")


def physical_network(topology: Topology, paths: dict[int, tuple[str, ...]]) -> Network:
    """Store-and-forward on the topology's own links along each transfer's path (GB/s = 10^9 B/s)."""
    links: dict[tuple[str, str], _Link] = {}
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

    return Network(route=route, description=f"store-and-forward on the links of {topology.name!r}")


def network_for(topology: Topology, paths: dict[int, tuple[str, ...]] | None = None) -> Network:
    """ASTRA-sim's network when it can describe ``topology``, else the physical store-and-forward one."""
    system, _ = astra_system(topology)
    if system is not None:
        if system.npus != topology.num_ranks:
            raise InputError("", "dimensions", f"describe {system.npus} npus but the topology has "
                             f"{topology.num_ranks} gpus")
        return astra_network(system)
    return physical_network(topology, paths or {})


# ------------------------------------------------------------------------------------ simulator
@dataclass
class SimulationResult:
    """Finish time per rank in ns (None for a rank that never finished) and the send/recv matches."""

    finish_ns: list[int | None]
    #: (src rank, send node id, dst rank, recv node id, arrival ns) per delivered message, in order
    matches: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)

    @property
    def time_ns(self) -> int:
        """The collective's time: the last rank's finish."""
        if any(t is None for t in self.finish_ns):
            raise SynthError("the traces deadlock: " + "; ".join(self.unmatched[:5]))
        return max((t for t in self.finish_ns if t is not None), default=0)


def simulate(program: Any, network: Network) -> SimulationResult:
    """Run an :class:`~synth.export.et.EtProgram` as ASTRA-sim's custom-collective executor does."""
    from synth.proto.et_def import NodeType

    n = program.num_ranks
    index: list[dict[int, int]] = []
    children: list[list[list[int]]] = []
    waiting: list[list[int]] = []
    for rank in range(n):
        nodes = program.nodes[rank]
        position = {node.id: i for i, node in enumerate(nodes)}
        index.append(position)
        kids: list[list[int]] = [[] for _ in nodes]
        counts = [0] * len(nodes)
        for i, node in enumerate(nodes):
            for dep in set(node.deps):
                kids[position[dep]].append(i)
                counts[i] += 1
        children.append(kids)
        waiting.append(counts)
    remaining = [len(program.nodes[r]) for r in range(n)]
    finish: list[int | None] = [None if remaining[r] else 0 for r in range(n)]
    heap: list[tuple[int, int, int, tuple[Any, ...]]] = []
    sequence = 0
    now = 0
    sent: dict[tuple[int, int, int, int], int] = {}
    posted: dict[tuple[int, int, int, int], int] = {}
    arrived: dict[tuple[tuple[int, int, int, int], int], int] = {}  # message -> arrival time
    recv_waiting: dict[tuple[tuple[int, int, int, int], int], tuple[int, int]] = {}
    send_of: dict[tuple[tuple[int, int, int, int], int], tuple[int, int]] = {}
    matches: list[tuple[int, int, int, int, int]] = []
    action_done, action_arrive, action_free = 0, 1, 2

    def at(time: int, action: int, payload: tuple[Any, ...]) -> None:
        nonlocal sequence
        heapq.heappush(heap, (time, sequence, action, payload))
        sequence += 1

    def transmit(link: _Link, message: list[Any]) -> None:
        link.busy = True
        size = message[2]
        at(now + int(link.latency + size / link.bw), action_arrive, (message,))
        at(now + int(size / link.bw), action_free, (link,))

    def push(link: _Link, message: list[Any]) -> None:
        if link.busy:
            link.pending.append(message)
        else:
            transmit(link, message)

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
        if kind == NodeType.COMM_SEND_NODE:
            if not 0 <= node.peer < n or node.peer == rank:
                raise InputError("", f"rank {rank} node {node.id}", f"sends to invalid rank {node.peer}")
            key = (node.tag, rank, node.peer, node.size)
            number = sent.get(key, 0)
            sent[key] = number + 1
            send_of[(key, number)] = (rank, i)
            message = [key, number, node.size, 0, None]
            if network.delay is not None:
                at(now + network.delay(rank, node.peer, node.size), action_arrive, (message,))
            else:
                message[4] = network.route(rank, node.peer, node.transfer)  # type: ignore[misc]
                push(message[4][0], message)
        elif kind == NodeType.COMM_RECV_NODE:
            if not 0 <= node.peer < n or node.peer == rank:
                raise InputError("", f"rank {rank} node {node.id}", f"receives from invalid rank {node.peer}")
            key = (node.tag, node.peer, rank, node.size)
            number = posted.get(key, 0)
            posted[key] = number + 1
            if (key, number) in arrived:
                src_rank, send_index = send_of[(key, number)]
                matches.append((src_rank, program.nodes[src_rank][send_index].id, rank, node.id, now))
                at(now, action_done, (rank, i))
            else:
                recv_waiting[(key, number)] = (rank, i)
        elif kind == NodeType.COMP_NODE:
            at(now + (node.duration_us * 1000 if node.duration_us else 1), action_done, (rank, i))
        else:
            at(now, action_done, (rank, i))

    def done(rank: int, i: int) -> None:
        remaining[rank] -= 1
        if remaining[rank] == 0:
            finish[rank] = now
        for child in children[rank][i]:
            waiting[rank][child] -= 1
            if waiting[rank][child] == 0:
                issue(rank, child)

    for rank in range(n):
        for i in range(len(program.nodes[rank])):
            if waiting[rank][i] == 0:
                issue(rank, i)
    while heap:
        now, _, action, payload = heapq.heappop(heap)
        if action == action_done:
            done(*payload)
        elif action == action_arrive:
            message = payload[0]
            route = message[4]
            if route is None:
                deliver(message)
            else:
                message[3] += 1
                if message[3] < len(route):
                    push(route[message[3]], message)
                else:
                    deliver(message)
        else:
            link = payload[0]
            link.busy = False
            if link.pending:
                transmit(link, link.pending.popleft())
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
    return SimulationResult(finish, matches, unmatched)


# ---------------------------------------------------------------------------------------- model
def astra_time_ns(schedule: Schedule, topology: Topology, size: int, comp_duration_us: int | None = None) -> int:
    """Predicted ASTRA-sim time in ns of ``schedule`` at ``size`` bytes on ``topology``.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("fully-connected:n=8,bandwidth=53.6870912,latency=0.5")
    >>> astra_time_ns(synthesize(topo, "allgather", "direct"), topo, 2**20)
    2941
    """
    from synth.export.et import schedule_to_et

    if len(schedule.ranks) != topology.num_ranks:
        raise InputError("", "topology", f"the schedule has {len(schedule.ranks)} ranks, the topology "
                         f"{topology.num_ranks} gpus")
    program = schedule_to_et(schedule, size, comp_duration_us, extras=False)
    result = simulate(program, network_for(topology, program.paths))
    return result.time_ns


def simulate_astra(schedule: Schedule, topology: Topology, size: int, plan: Plan) -> float:
    """The ``astra`` model for :func:`synth.evaluate.evaluate`: seconds (an integer number of ns).

    ASTRA-sim has no protocols and runs a custom collective's chunks as they are: the plan is always the
    ``ideal`` protocol with one slice per chunk (checked by the evaluator)."""
    return astra_time_ns(schedule, topology, size) / 1e9


def _register() -> None:
    from synth.evaluate import register_model

    register_model("astra", simulate_astra, protocols=False, slicing=False)


_register()
