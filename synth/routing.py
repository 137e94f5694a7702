"""Routing between gpus, as a property of the topology: paths through forwarding nodes, and relay chains.

Bytes may pass through a node within one transfer only where that node forwards: every switch, and the
gpus marked ``forwards`` (see :mod:`synth.topology`). So:

- :func:`route` is a deterministic shortest path from one rank to another whose interior nodes all
  forward (fewest hops, then the widest bottleneck, then the first in node order), or None when there
  is none. ``via_gpus=False`` also keeps forwarding gpus out of the interior (switches only).
- :func:`neighbors` are the ranks that a rank reaches that way, without a relay.
- :func:`relay_chain` is, for a pair with no such path, the ranks to hop through: a transfer to the first
  relay, a dependent one onwards, and so on (a gpu that does not forward moves data only when a kernel
  copies it). It has the fewest relays, then the widest bottleneck, then the fewest links, then the
  smallest ranks, and chains from one source are prefix-closed (a shortest-path tree), so the chain to
  a gpu behind a relay passes through the relay's own chain. :func:`chain_paths` gives the paths of the
  chain's hops.

Route tables are cached per (topology, source) in the topology's ``memo``: topologies are immutable.

Examples
--------
>>> from synth.library import load_topology
>>> dgx1 = load_topology("dgx1")
>>> route(dgx1, 0, 1), route(dgx1, 0, 5)
(('gpu0', 'gpu1'), None)
>>> relay_chain(dgx1, 0, 5)
(0, 1, 5)
>>> chain_paths(load_topology("ring:n=4"), 0, 2)  # ring gpus forward: one path, no relay
(('gpu0', 'gpu1', 'gpu2'),)
"""

from __future__ import annotations

from collections import deque

from synth.errors import NotApplicable
from synth.topology import Topology


class _Cache:
    """Everything routing keeps about one topology (in ``topology.memo``: freed with the topology)."""

    def __init__(self, topology: Topology) -> None:
        self.order = {node: i for i, node in enumerate(topology.graph.nodes)}
        self.tables: dict[tuple[str, bool], dict[str, tuple[str, ...]]] = {}
        self.chain_trees: dict[int, tuple[int | None, ...]] = {}
        self.chain_paths: dict[tuple[int, int], tuple[tuple[str, ...], ...]] = {}


def _cache(topology: Topology) -> _Cache:
    return topology.memoized(__name__, "", lambda: _Cache(topology))


def _routes(topology: Topology, source: str, via_gpus: bool) -> dict[str, tuple[str, ...]]:
    """Shortest forwarding paths (fewest hops, then widest bottleneck, then node order) from ``source``
    to every gpu it reaches; interior nodes forward (switches only unless ``via_gpus``)."""
    cache = _cache(topology)
    key = (source, via_gpus)
    table = cache.tables.get(key)
    if table is not None:
        return table
    graph = topology.graph
    nodes = graph.nodes
    order = cache.order
    best: dict[str, tuple[int, float, tuple[str, ...]]] = {source: (0, float("inf"), (source,))}
    queue = deque([source])
    while queue:
        node = queue.popleft()
        hops, width, path = best[node]
        if node != source:
            data = nodes[node]
            if data["type"] == "gpu" and not (via_gpus and data["forwards"]):
                continue  # a path may end here but not pass through
        for nxt in sorted(graph.successors(node), key=order.__getitem__):
            candidate = (hops + 1, min(width, float(graph.edges[node, nxt]["bandwidth"])), path + (nxt,))
            known = best.get(nxt)
            if known is None:
                best[nxt] = candidate
                queue.append(nxt)
            elif known[0] == candidate[0] and candidate[1] > known[1]:
                best[nxt] = candidate
    ranks = topology.rank_of  # a process group's view: only members are ends (synth.groups)
    table = cache.tables[key] = {node: entry[2] for node, entry in best.items()
                                 if node != source and node in ranks}
    return table


def route(topology: Topology, src: int, dst: int, via_gpus: bool = True) -> tuple[str, ...] | None:
    """A deterministic shortest path from rank ``src`` to rank ``dst`` through forwarding nodes only
    (switches only when ``via_gpus`` is False), or None when the pair needs a relay.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> route(load_topology("switch:n=4"), 0, 3)
    ('gpu0', 'sw0', 'gpu3')
    """
    return _routes(topology, topology.gpus[src], via_gpus).get(topology.gpus[dst])


def neighbors(topology: Topology, rank: int, via_gpus: bool = True) -> list[int]:
    """Ranks that ``rank`` reaches without a relay (see :func:`route`), in rank order.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> neighbors(load_topology("dgx1"), 0)
    [1, 2, 3, 4]
    """
    rank_of = topology.rank_of
    return sorted(rank_of[g] for g in _routes(topology, topology.gpus[rank], via_gpus))


def _chain_tree(topology: Topology, src: int) -> tuple[int | None, ...]:
    """Parent of every rank in the relay-chain tree rooted at ``src``: layer by layer (fewest relays),
    each rank takes the parent whose chain has the widest bottleneck, then the fewest links, then the
    smallest rank."""
    cache = _cache(topology)
    tree = cache.chain_trees.get(src)
    if tree is not None:
        return tree
    gpus, rank_of = topology.gpus, topology.rank_of
    parent: list[int | None] = [None] * len(gpus)
    label: dict[int, tuple[float, int]] = {src: (-float("inf"), 0)}  # (-bottleneck, links) of the chain
    unreached = set(gpus) - {gpus[src]}
    layer = [src]
    while layer and unreached:
        found: dict[int, tuple[tuple[float, int], int]] = {}
        for u in layer:  # in rank order, so ties keep the smallest parent
            width_u, links_u = label[u]
            table = _routes(topology, gpus[u], True)
            for gpu in table.keys() & unreached:
                path = table[gpu]
                width = min(-width_u, min(topology.bandwidth(a, b) for a, b in zip(path, path[1:], strict=False)))
                candidate = (-width, links_u + len(path) - 1)
                v = rank_of[gpu]
                known = found.get(v)
                if known is None or candidate < known[0] or (candidate == known[0] and u < known[1]):
                    found[v] = (candidate, u)
        for v, (candidate, u) in found.items():
            parent[v], label[v] = u, candidate
            unreached.discard(gpus[v])
        layer = sorted(found)
    tree = cache.chain_trees[src] = tuple(parent)
    return tree


def relay_chain(topology: Topology, src: int, dst: int) -> tuple[int, ...]:
    """The ranks a chunk visits from ``src`` to ``dst``, ends included: ``(src, dst)`` when a forwarding
    path joins them, else with the relay gpus in between (see the module docstring).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> relay_chain(load_topology("dgx-a100:boxes=2"), 0, 9)  # gpu0 to box 1 gpu1: rail 1 is gpu1's NIC
    (0, 1, 9)
    """
    if src == dst:
        return (src,)
    if route(topology, src, dst) is not None:
        return (src, dst)
    parent = _chain_tree(topology, src)
    chain = [dst]
    while chain[-1] != src:
        step = parent[chain[-1]]
        if step is None:  # gpus reach each other (checked on load), so this is a bug
            raise NotApplicable(f"no chain of forwarding paths from rank {src} to rank {dst} on {topology.name}")
        chain.append(step)
    return tuple(reversed(chain))


def chain_paths(topology: Topology, src: int, dst: int) -> tuple[tuple[str, ...], ...]:
    """The path of each hop of :func:`relay_chain` (one path when no relay is needed).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> chain_paths(load_topology("dgx1"), 0, 5)
    (('gpu0', 'gpu1'), ('gpu1', 'gpu5'))
    """
    known = _cache(topology).chain_paths
    paths = known.get((src, dst))
    if paths is None:
        chain = relay_chain(topology, src, dst)
        paths = known[(src, dst)] = tuple(route(topology, a, b)  # type: ignore[misc]
                                          for a, b in zip(chain, chain[1:], strict=False))
    return paths


def crossed_gpu(topology: Topology, path: tuple[str, ...] | list[str]) -> str | None:
    """The first interior node of ``path`` that is a gpu which does not forward, or None.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> crossed_gpu(load_topology("dgx1"), ("gpu0", "gpu1", "gpu5"))
    'gpu1'
    """
    blocked = topology.non_forwarding_gpus
    for node in path[1:-1]:
        if node in blocked:
            return node
    return None
