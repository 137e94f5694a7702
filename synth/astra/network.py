"""ASTRA-sim's analytical networks as FIFO link servers: Ring, FullyConnected, Switch, several dimensions, and
the physical links of a topology ASTRA-sim cannot describe."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from synth.astra.system import AstraSystem, astra_system, us_to_ns
from synth.errors import InputError, SynthError
from synth.topology import Topology


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
    >>> from synth.astra.system import AstraDim
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
