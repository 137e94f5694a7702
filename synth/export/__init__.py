"""Exports that real tools run, and imports of what other tools wrote.

- :mod:`synth.export.chakra`: Chakra execution traces plus everything ASTRA-sim needs to run them
  (``synth export chakra``), and traces back into schedules (``synth import chakra``).
- :mod:`synth.export.msccl`: MSCCL XML for the MSCCL executor (``synth export msccl``) and MSCCL XML
  from MSCCLang, TACCL, ForestColl or synth back into schedules (``synth import msccl``).
  The in-memory trace form the Chakra files share with the ``astra`` model lives in :mod:`synth.trace`.

Both importers route messages with :class:`RouteBalancer`: a file names only the two ends of a
message, so each one takes a shortest path through switches and forwarding gpus only (never through a
gpu that does not forward: see :mod:`synth.routing`), choosing among equal paths the one whose busiest
link is least loaded so far, then the lightest, then the first in node order, which is deterministic.
"""

from __future__ import annotations

import functools
import gc
from collections import deque
from collections.abc import Callable
from typing import Any, ParamSpec, TypeGuard, TypeVar

from synth.errors import InputError
from synth.topology import Topology

#: At most this many equal shortest paths are compared for one message.
MAX_EQUAL_PATHS = 64

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


def without_cycle_collection(function: Callable[_Params, _Result]) -> Callable[_Params, _Result]:
    """``function`` with Python's cyclic garbage collector paused while it runs.

    Lowering or reading a program of millions of steps creates millions of small objects that hold no
    reference cycles; the collector would traverse all of them again and again as they accumulate (a
    third of the MSCCL lowering's and import's time at 512 gpus). Cycles made meanwhile are collected
    once it is back on.
    """
    @functools.wraps(function)
    def paused(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return paused


class RouteBalancer:
    """Shortest paths between ranks through switches and forwarding gpus, balancing load among equal
    ones deterministically.

    Parameters
    ----------
    topology : Topology
    source : str
        File name used in error messages.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> balancer = RouteBalancer(load_topology("switch:n=4"))
    >>> balancer.route(0, 3)
    ('gpu0', 'sw0', 'gpu3')
    """

    def __init__(self, topology: Topology, source: str = "") -> None:
        self.topology = topology
        self.source = source
        self.load: dict[tuple[str, str], int] = {}
        self._order = {node: i for i, node in enumerate(topology.graph.nodes)}
        self._candidates: dict[tuple[int, int], list[tuple[str, ...]]] = {}

    def _shortest(self, src: str, dst: str) -> list[tuple[str, ...]]:
        graph = self.topology.graph
        distance = {src: 0}
        parents: dict[str, list[str]] = {src: []}
        queue = deque([src])
        while queue:
            node = queue.popleft()
            if node != src and (node == dst or not self.topology.forwards(node)):
                continue
            if dst in distance and distance[node] >= distance[dst]:
                continue
            for nxt in sorted(graph.successors(node), key=self._order.__getitem__):
                if nxt not in distance:
                    distance[nxt] = distance[node] + 1
                    parents[nxt] = [node]
                    queue.append(nxt)
                elif distance[nxt] == distance[node] + 1:
                    parents[nxt].append(node)
        if dst not in distance:
            return []
        paths: list[tuple[str, ...]] = []

        def walk(node: str, suffix: tuple[str, ...]) -> None:
            if len(paths) >= MAX_EQUAL_PATHS:
                return
            if node == src:
                paths.append((src, *suffix))
                return
            for parent in sorted(parents[node], key=self._order.__getitem__):
                walk(parent, (node, *suffix))

        walk(dst, ())
        return sorted(paths, key=lambda p: [self._order[x] for x in p])

    def route(self, src: int, dst: int) -> tuple[str, ...]:
        """A path from rank ``src`` to rank ``dst``; the chosen path's links count one more message."""
        key = (src, dst)
        candidates = self._candidates.get(key)
        topology = self.topology
        if candidates is None:
            candidates = self._shortest(topology.gpus[src], topology.gpus[dst])
            if not candidates:
                raise InputError(self.source, "", f"no path from rank {src} ({topology.gpus[src]}) to rank {dst} "
                                 f"({topology.gpus[dst]}) on topology {topology.name!r} through switches and "
                                 "forwarding gpus only: the file names only the two ends of each message, so every "
                                 "pair that communicates needs a direct link or such a path (a gpu that routes "
                                 "traffic, such as a torus chip, can be marked \"forwards\": true in the topology)")
            self._candidates[key] = candidates
        if len(candidates) == 1:
            best = candidates[0]
        else:
            def cost(path: tuple[str, ...]) -> tuple[float, float]:
                loads = [(self.load.get(hop, 0) + 1) / topology.bandwidth(*hop) for hop in zip(path, path[1:], strict=False)]
                return max(loads), sum(loads)
            best = min(candidates, key=cost)
        for hop in zip(best, best[1:], strict=False):
            self.load[hop] = self.load.get(hop, 0) + 1
        return best


def valid_path(topology: Topology, path: Any, src: int, dst: int) -> TypeGuard[list[str] | tuple[str, ...]]:
    """True when ``path`` runs over links of ``topology`` from rank ``src``'s gpu to rank ``dst``'s."""
    if not path or len(path) < 2 or not all(isinstance(node, str) for node in path):
        return False
    if path[0] != topology.gpus[src] or path[-1] != topology.gpus[dst] or len(set(path)) != len(path):
        return False
    return all(topology.graph.has_edge(u, v) for u, v in zip(path, path[1:], strict=False))
