"""Ring allgather, reduce-scatter and allreduce, on one ring or several (channels), rail-aware.

One ring
--------
The ring follows a Hamiltonian cycle of switch-only hops when one exists (found deterministically), else
one of hops through switches and forwarding gpus; otherwise ranks in order, each hop along a shortest
path, or through relay gpus where no path joins two neighbours without crossing a gpu that does not
forward (:func:`synth.algorithms.utils.send`). With C = m*N chunks every block of m chunks travels the
ring independently, which pipelines large messages.

Several rings (``channels=k``), as NCCL runs several channels
-----------------------------------------------------------------
The data is split into k equal parts and part i travels ring i. Which rings:

- **Multi-box systems with NICs** (a :class:`RailLayout`: equal boxes, and every box has the same NICs
  attached to the same local gpus): one ring per NIC rail, as NCCL builds its ring channels. Channel c
  enters box k at the gpu of NIC ``(c + s_k) mod m`` and leaves it from the gpu of NIC
  ``(c + s_{k+1}) mod m``, visiting every gpu of the box in between (a Hamiltonian path over NVLink
  or the box's switch); the hop between boxes goes from that gpu's own NIC to the *same-index* gpu's
  NIC on the next box, i.e. along one rail. The offsets alternate (s = 0, 1, 0, 1, ...; with an odd box
  count the last is 2), so every NIC is used by exactly one channel in each direction and the m rings
  together use every rail in both directions, as NCCL's m channels do (NCCL enters and leaves a box
  through NICs next to the ring's first and last gpu; here each gpu has its own NIC, so the first and
  last gpu of a box are the ones on the two rails the channel uses). Inside a box, a channel's path
  prefers the links the earlier channels loaded least. A box with one NIC shared by all its gpus (NDv2)
  gets one channel entering and leaving through two different gpus of that NIC.
- **Other topologies** (one box, or boxes without a common NIC structure): NCCL's intra-node search,
  simplified: Hamiltonian cycles of direct links first (each pair joined by links of bandwidth b counts
  b / (the smallest such bandwidth) times, so DGX-1's double NVLinks host two rings), else of switch-only
  hops; cycles that share no gpu pair first, then cycles on the remaining link multiplicity. Channels
  2j and 2j+1 run the j-th cycle forward and backward (a bidirectional ring uses both directions);
  the cycles repeat when more channels are asked for.

``channels="auto"`` is the number NCCL would build: the NIC count per box on a rail layout (1 for a
single shared NIC), else twice the number of cycles found (at most :data:`MAX_AUTO_CHANNELS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from synth.algorithms.utils import hamiltonian_cycle, hamiltonian_ring, make_collective, send, spanning_walk
from synth.collectives import Kind
from synth.errors import InputError
from synth.routing import chain_paths, neighbors
from synth.schedule import COPY, REDUCE, Schedule, ScheduleBuilder
from synth.topology import Topology

#: Largest accepted channel count.
MAX_CHANNELS = 64
#: Largest channel count ``channels="auto"`` picks on a single box (NCCL: MAXCHANNELS / 2 rings).
MAX_AUTO_CHANNELS = 16
#: Search budget (DFS steps) for one Hamiltonian path inside a box.
PATH_BUDGET = 20_000


def _memo(topology: Topology, key: tuple[Any, ...], compute: Any) -> Any:
    """``compute()``, once per topology and key (:meth:`synth.topology.Topology.memoized`)."""
    return topology.memoized(__name__, key, compute)


def paths_for(topology: Topology, hops: Sequence[tuple[int, int]]) -> dict[tuple[int, int], tuple[str, ...]]:
    """The links each (src, dst) rank pair's data crosses, as one node sequence per pair: its route, or
    the routes of its relay chain joined (:func:`synth.routing.chain_paths`); for counting link loads.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> paths_for(load_topology("dgx1"), [(0, 1), (0, 5)])
    {(0, 1): ('gpu0', 'gpu1'), (0, 5): ('gpu0', 'gpu1', 'gpu5')}
    """
    result = {}
    for hop in sorted(set(hops)):
        parts = chain_paths(topology, *hop)
        result[hop] = parts[0] + tuple(node for part in parts[1:] for node in part[1:])
    return result


# ------------------------------------------------------------------------------------ rail layout
@dataclass(frozen=True)
class RailLayout:
    """Boxes and NICs of a multi-box system, as NCCL sees them when it builds one ring per NIC.

    Attributes
    ----------
    boxes : tuple of tuple of int
        The ranks of every box, in local order (local index i is the i-th rank of the box).
    nics : tuple of tuple of int
        For each NIC of a box (the same in every box), the local indices of the gpus attached to it.
    slots : tuple of int
        The local gpus through which channels enter and leave a box: the first gpu of every NIC, or
        every gpu of the NIC when a box has only one.
    """

    boxes: tuple[tuple[int, ...], ...]
    nics: tuple[tuple[int, ...], ...]
    slots: tuple[int, ...]

    @property
    def box_size(self) -> int:
        """Gpus per box."""
        return len(self.boxes[0])

    def offsets(self) -> list[int] | None:
        """The slot offsets s_k of the boxes (see the module docstring), or None when the slots cannot
        give every box different entry and exit gpus."""
        b, q = len(self.boxes), len(self.slots)
        if b % 2 == 0:
            needed, offsets = 2, [k % 2 for k in range(b)]
        else:
            needed, offsets = 3, [k % 2 for k in range(b - 1)] + [2]
        return offsets if q >= needed else None


def box_groups(topology: Topology) -> list[list[int]] | None:
    """The boxes as rank lists (ordered by their first rank): the topology's boxes, else the ones
    detected from its bandwidth tiers; None unless there are at least 2 boxes of equal size >= 2.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> box_groups(load_topology("ndv2:boxes=2"))[1][:3]
    [8, 9, 10]
    >>> box_groups(load_topology("dgx1")) is None
    True
    """
    from synth.algorithms.hierarchical import detect_boxes

    index = list(topology.boxes) if topology.boxes is not None else detect_boxes(topology)
    if index is None:
        return None
    groups: dict[int, list[int]] = {}
    for rank, box in enumerate(index):
        groups.setdefault(box, []).append(rank)
    result = sorted(groups.values())
    if len(result) < 2 or len({len(g) for g in result}) != 1 or len(result[0]) < 2:
        return None
    return result


def rail_layout(topology: Topology) -> RailLayout | None:
    """The :class:`RailLayout` of a multi-box topology, or None (one box, or boxes whose NICs differ).

    A gpu's NICs are its links towards a switch from which, through switches only, a gpu of another
    box can be reached (the box's NVSwitch does not count: it reaches only its own box). A switch that
    only the box's own gpus link to is one NIC (shared by those gpus, as an NDv2 box's single NIC); a
    switch that gpus of several boxes link to directly (one IB switch for every GCD of every MI250 box)
    makes each gpu's link to it a NIC of its own.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> layout = rail_layout(load_topology("dgx-a100:boxes=2"))
    >>> len(layout.nics), layout.slots
    (8, (0, 1, 2, 3, 4, 5, 6, 7))
    >>> rail_layout(load_topology("ndv2:boxes=2")).nics
    ((0, 1, 2, 3, 4, 5, 6, 7),)
    """
    return _memo(topology, ("rail_layout",), lambda: _rail_layout(topology))


def _rail_layout(topology: Topology) -> RailLayout | None:
    groups = box_groups(topology)
    if groups is None:
        return None
    graph = topology.graph
    box_of = {rank: index for index, members in enumerate(groups) for rank in members}
    switch_graph = nx.Graph()
    switch_graph.add_nodes_from(topology.switches)
    switch_graph.add_edges_from((u, v) for u, v in graph.edges if not topology.is_gpu(u) and not topology.is_gpu(v))
    touches: dict[str, frozenset[int]] = {}
    for component in nx.connected_components(switch_graph):
        boxes = set()
        for node in component:
            for other in (*graph.predecessors(node), *graph.successors(node)):
                if other in topology.rank_of:  # members (a group view keeps other gpus)
                    boxes.add(box_of[topology.rank_of[other]])
        for node in component:
            touches[node] = frozenset(boxes)

    def own_boxes(node: str) -> set[int]:
        return {box_of[topology.rank_of[g]] for g in (*graph.predecessors(node), *graph.successors(node))
                if g in topology.rank_of}

    structure: list[tuple[tuple[int, ...], ...]] = []
    for index, members in enumerate(groups):
        nics: dict[object, list[int]] = {}
        for local, rank in enumerate(members):
            gpu = topology.gpus[rank]
            for nxt in graph.successors(gpu):
                if nxt in topology.rank_of:
                    if box_of[topology.rank_of[nxt]] != index:
                        nics.setdefault(("link", gpu, nxt), []).append(local)
                elif touches.get(nxt, frozenset()) - {index}:
                    key: object = nxt if own_boxes(nxt) == {index} else ("link", gpu, nxt)
                    nics.setdefault(key, []).append(local)
        box_nics = tuple(sorted(tuple(sorted(set(locals_))) for locals_ in nics.values()))
        if not box_nics:
            return None
        structure.append(box_nics)
    if len(set(structure)) != 1:
        return None
    rails = structure[0]
    slots = tuple(sorted(attached[0] for attached in rails)) if len(rails) > 1 else rails[0]
    return RailLayout(tuple(tuple(m) for m in groups), rails, slots)


# ----------------------------------------------------------------------------------- rail rings
class _LinkLoad:
    """How many rings cross every physical link so far; hop costs for the path search."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.count: dict[tuple[str, str], int] = {}

    def cost(self, path: Sequence[str]) -> float:
        return max((self.count.get(hop, 0) + 1) / self.topology.bandwidth(*hop) for hop in zip(path, path[1:], strict=False))

    def add(self, path: Sequence[str]) -> None:
        for hop in zip(path, path[1:], strict=False):
            self.count[hop] = self.count.get(hop, 0) + 1


def _box_hops(topology: Topology, members: Sequence[int]) -> tuple[dict[int, list[int]], dict[tuple[int, int], tuple[str, ...]]]:
    """Directed hops usable inside a box and their paths: direct gpu links when they join every gpu
    both ways into a connected graph (NVLink), else routes through the box's own switches (NVSwitch),
    else switch-only routes anywhere."""
    inside = set(members)
    graph = topology.graph
    gpus = {topology.gpus[r]: r for r in members}
    direct = {r: sorted(topology.rank_of[v] for v in graph.successors(topology.gpus[r]) if v in gpus) for r in members}
    undirected = nx.Graph()
    undirected.add_nodes_from(members)
    undirected.add_edges_from((r, v) for r, nbrs in direct.items() for v in nbrs if r in direct[v])
    if len(members) > 1 and nx.is_connected(undirected) and all(undirected.degree(r) >= 2 for r in members):
        hops = {r: sorted(undirected.neighbors(r)) for r in members}
        return hops, {(r, v): (topology.gpus[r], topology.gpus[v]) for r in members for v in hops[r]}

    def local(node: str) -> bool:  # a switch that links only to this box's gpus
        return not topology.is_gpu(node) and all(
            g in gpus for g in (*graph.predecessors(node), *graph.successors(node)) if topology.is_gpu(g))

    paths: dict[tuple[int, int], tuple[str, ...]] = {}
    for r in members:
        start = topology.gpus[r]
        best: dict[str, tuple[str, ...]] = {start: (start,)}
        frontier = [start]
        while frontier:
            following = []
            for node in frontier:
                for nxt in sorted(graph.successors(node)):
                    if nxt in best:
                        continue
                    if nxt in gpus:
                        if node != start:
                            best[nxt] = best[node] + (nxt,)
                    elif local(nxt):
                        best[nxt] = best[node] + (nxt,)
                        following.append(nxt)
            frontier = following
        for node, path in best.items():
            if node in gpus and node != start:
                paths[(r, gpus[node])] = path
    hops = {r: sorted(v for (a, v) in paths if a == r) for r in members}
    if all(len(h) == len(members) - 1 for h in hops.values()):
        return hops, paths
    hops = {r: [v for v in neighbors(topology, r, via_gpus=False) if v in inside] for r in members}
    return hops, paths_for(topology, [(r, v) for r in members for v in hops[r]])


def _hamiltonian_path(hops: dict[int, list[int]], start: int, end: int, cost: dict[tuple[int, int], float],
                      budget: int = PATH_BUDGET) -> list[int] | None:
    """A path from ``start`` to ``end`` through every key of ``hops``, by depth-first search trying the
    cheapest hop first (then the fewest onward choices, then the rank); None within ``budget`` steps."""
    nodes = set(hops)
    if start == end:
        return [start] if nodes == {start} else None

    def candidates(node: int, on_path: set[int]) -> list[int]:
        free = [v for v in hops[node] if v not in on_path and (v != end or len(on_path) == len(nodes) - 1)]
        return sorted(free, key=lambda v: (cost[(node, v)], sum(1 for w in hops[v] if w not in on_path), v))

    return spanning_walk(start, len(nodes), candidates, lambda path: path[-1] == end, budget)


def rail_rings(topology: Topology, channels: int) -> list[list[int]] | None:
    """One ring per NIC rail (see the module docstring), ``channels`` of them (channel c uses the
    rails of slot c mod the slot count); None when the topology has no rail layout or a box has no
    Hamiltonian path between a channel's entry and exit gpus.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> rings = rail_rings(load_topology("dgx-a100:boxes=2"), 8)
    >>> rings[0][0], rings[0][7], rings[0][8], rings[0][15]   # box 0: 0 ... 1, box 1: 9 ... 8
    (0, 1, 9, 8)
    """
    found = _memo(topology, ("rail_rings",), lambda: _rail_rings(topology))
    return None if found is None else [list(found[c % len(found)]) for c in range(channels)]


def _rail_rings(topology: Topology) -> tuple[tuple[int, ...], ...] | None:
    """The distinct rail rings, one per slot, searched in slot order (each avoiding the links the
    earlier ones loaded)."""
    layout = rail_layout(topology)
    if layout is None:
        return None
    offsets = layout.offsets()
    if offsets is None:
        return None
    b, q = len(layout.boxes), len(layout.slots)
    load = _LinkLoad(topology)
    hops = []
    paths: dict[tuple[int, int], tuple[str, ...]] = {}
    for members in layout.boxes:
        box_hops, box_paths = _box_hops(topology, members)
        hops.append(box_hops)
        paths.update(box_paths)
    box_of = {rank: k for k, members in enumerate(layout.boxes) for rank in members}

    def path_of(a: int, c: int) -> tuple[str, ...]:
        if (a, c) not in paths:
            paths[(a, c)] = paths_for(topology, [(a, c)])[(a, c)]
        return paths[(a, c)]

    rings: list[list[int]] = []
    for slot in range(q):
        ring: list[int] = []
        for k, members in enumerate(layout.boxes):
            start = members[layout.slots[(slot + offsets[k]) % q]]
            end = members[layout.slots[(slot + offsets[(k + 1) % b]) % q]]
            cost = {(u, v): load.cost(path_of(u, v)) for u in members for v in hops[k][u]}
            segment = _hamiltonian_path(hops[k], start, end, cost)
            if segment is None:
                return None
            for u, v in zip(segment, segment[1:], strict=False):
                load.add(path_of(u, v))
            ring += segment
        for i, rank in enumerate(ring):
            following = ring[(i + 1) % len(ring)]
            if box_of[rank] != box_of[following]:
                load.add(path_of(rank, following))
        rings.append(ring)
    return tuple(tuple(r) for r in rings)


# ------------------------------------------------------------------------------- single-box rings
def ring_order(topology: Topology, order: list[int] | None = None) -> list[int]:
    """The rank order of the ring: ``order`` if given (validated), else a Hamiltonian cycle (switch-only
    hops, else hops through forwarding gpus too) or 0..N-1."""
    n = topology.num_ranks
    if order is not None:
        if (not isinstance(order, list | tuple) or not all(isinstance(r, int) and not isinstance(r, bool) for r in order)
                or sorted(order) != list(range(n))):
            raise InputError("", "order", f"expected a permutation of 0..{n - 1}")
        return list(order)
    found = hamiltonian_ring(topology)
    if found is None and topology.non_forwarding_gpus != frozenset(topology.gpus):
        adjacency = {r: set(neighbors(topology, r)) for r in range(n)}
        adjacency = {a: {b for b in near if a in adjacency[b]} for a, near in adjacency.items()}
        found = hamiltonian_cycle(adjacency, 100_000)
    return found or list(range(n))


def _multiplicity(topology: Topology) -> dict[frozenset[int], int]:
    """Gpu pairs joined by direct links both ways, with how many rings they can carry: the pair's
    bandwidth over the smallest such bandwidth (DGX-1: double NVLinks 2, single 1)."""
    graph = topology.graph
    width: dict[frozenset[int], float] = {}
    for u, v, bandwidth in graph.edges(data="bandwidth"):
        if u in topology.rank_of and v in topology.rank_of and graph.has_edge(v, u):  # members only
            pair = frozenset((topology.rank_of[u], topology.rank_of[v]))
            width[pair] = min(float(bandwidth), float(graph[v][u]["bandwidth"]))
    if not width:
        return {}
    unit = min(width.values())
    return {pair: max(1, int(w / unit + 1e-9)) for pair, w in width.items()}


def ring_cycles(topology: Topology, wanted: int, first: list[int] | None = None) -> list[list[int]]:
    """Up to ``wanted`` Hamiltonian cycles for the channels of a single box (see the module docstring).

    Two deterministic searches, and the one that finds more cycles wins (ties: the first): ``first``
    (or the default ring), then cycles sharing no gpu pair with the earlier ones, then cycles on the
    remaining multiplicity of direct links; or cycles on the multiplicity alone, pairs with the most
    spare links first (MI250's 4-link pairs).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> len(ring_cycles(load_topology("dgx1"), 8))   # 24 NVLinks: three 8-link cycles
    3
    """
    if first is None:
        found = _memo(topology, ("cycles", wanted), lambda: tuple(tuple(c) for c in _ring_cycles(topology, wanted, None)))
        return [list(c) for c in found]
    return _ring_cycles(topology, wanted, first)


def _ring_cycles(topology: Topology, wanted: int, first: list[int] | None) -> list[list[int]]:
    n = topology.num_ranks
    base = first if first is not None else ring_order(topology)
    if wanted <= 1 or n <= 3:
        return [base]
    near = {r: set(neighbors(topology, r, via_gpus=False)) for r in range(n)}
    adjacency = {r: {v for v in near[r] if r in near[v]} for r in range(n)}
    units = _multiplicity(topology)

    def search(start_with_base: bool) -> list[list[int]]:
        cycles: list[list[int]] = []
        used: dict[frozenset[int], int] = {}

        def take(cycle: list[int]) -> None:
            cycles.append(cycle)
            for i, rank in enumerate(cycle):
                pair = frozenset((rank, cycle[(i + 1) % n]))
                used[pair] = used.get(pair, 0) + 1

        if start_with_base:
            take(base)
            while len(cycles) < wanted:  # pair-disjoint cycles
                free = {r: {v for v in adjacency[r] if frozenset((r, v)) not in used} for r in range(n)}
                cycle = hamiltonian_cycle(free)
                if cycle is None:
                    break
                take(cycle)
        while units and len(cycles) < wanted:  # the spare multiplicity of direct links, most spare first
            spare = {pair: count - used.get(pair, 0) for pair, count in units.items() if count > used.get(pair, 0)}
            hops = {r: sorted(v for v in range(n) if frozenset((r, v)) in spare) for r in range(n)}
            cost: dict[tuple[int, int], float] = {(r, v): -spare[frozenset((r, v))] for r in range(n)
                                                  for v in hops[r]}
            cycle = None
            for end in sorted(hops[0], key=lambda v: (cost[(0, v)], v)):
                cycle = _hamiltonian_path(hops, 0, end, cost)
                if cycle is not None:
                    break
            if cycle is None:
                break
            take(cycle)
        return cycles

    found = search(True)
    if units and len(found) < wanted and first is None:
        other = search(False)
        if len(other) > len(found):
            found = other
    return found


def auto_channels(topology: Topology) -> int:
    """The channel count NCCL would build (see the module docstring).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> auto_channels(load_topology("dgx-a100:boxes=2")), auto_channels(load_topology("dgx1"))
    (8, 6)
    >>> auto_channels(load_topology("ndv2:boxes=2")), auto_channels(load_topology("ring:n=2"))
    (1, 1)
    """
    return _memo(topology, ("auto_channels",), lambda: _auto_channels(topology))


def _auto_channels(topology: Topology) -> int:
    layout = rail_layout(topology)
    if layout is not None and rail_rings(topology, 1) is not None:
        return len(layout.nics)
    if topology.num_ranks <= 2:
        return 1
    if not _multiplicity(topology):  # switch hops only: one cycle, both directions, carries it all
        return 2
    return min(MAX_AUTO_CHANNELS, 2 * len(ring_cycles(topology, MAX_AUTO_CHANNELS // 2)))


def _channel_count(topology: Topology, channels: int | str) -> int:
    if channels == "auto":
        return auto_channels(topology)
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= MAX_CHANNELS:
        raise InputError("", "channels", f"expected 'auto' or an integer in 1..{MAX_CHANNELS}, got {channels!r}")
    return channels


def channel_rings(topology: Topology, channels: int | str, order: list[int] | None = None) -> list[list[int]]:
    """The rank order of each channel's ring (see the module docstring): rail rings on a multi-box
    system with NICs (unless ``order`` fixes the first ring), else cycles of the box.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> channel_rings(load_topology("ring:n=4"), 2)
    [[0, 1, 2, 3], [3, 2, 1, 0]]
    """
    count = _channel_count(topology, channels)
    if order is None and count > 1:
        rails = rail_rings(topology, count)
        if rails is not None:
            return rails
    cycles = ring_cycles(topology, (count + 1) // 2, None if order is None else ring_order(topology, order))
    rings = []
    for channel in range(count):
        cycle = cycles[(channel // 2) % len(cycles)]
        rings.append(cycle[::-1] if channel % 2 else list(cycle))
    return rings


# ----------------------------------------------------------------------------------- schedules
def ring_schedule(topology: Topology, kind: Kind, rings: list[list[int]], chunks: int | None, algorithm: str,
                  params: dict[str, object], root: int | None = None) -> Schedule:
    """The ring schedule over the given channel rings: chunk ``owner * (C/N) + j`` travels ring
    ``j mod len(rings)`` (C a multiple of N x channels; default N x channels).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = ring_schedule(load_topology("ring:n=3"), Kind.ALLGATHER, [[0, 1, 2]], None, "demo", {})
    >>> len(s.transfers)
    6
    """
    n = topology.num_ranks
    channels = len(rings)
    coll = make_collective(topology, kind, chunks, root, default_chunks=n * channels)
    if coll.chunks % (n * channels):
        raise InputError("", "chunks", f"ring with {channels} channel(s) needs chunks to be a multiple of "
                         f"{n * channels} (ranks x channels), got {coll.chunks}")
    per = coll.chunks // n
    if "chunks" not in params:
        params = {**params, "chunks": coll.chunks}
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, algorithm, params)
    where = [{rank: i for i, rank in enumerate(positions)} for positions in rings]

    for owner in range(n):
        for local in range(per):
            chunk = owner * per + local
            channel = local % channels
            positions = rings[channel]
            start = where[channel][owner]
            previous: int | None = None
            if kind in (Kind.REDUCESCATTER, Kind.ALLREDUCE):
                # reduce around the ring, starting after the owner and ending at the owner
                for step in range(n - 1):
                    a = positions[(start + 1 + step) % n]
                    b = positions[(start + 2 + step) % n]
                    previous = send(builder, topology, a, b, chunk, REDUCE, [] if previous is None else [previous])
            if kind in (Kind.ALLGATHER, Kind.ALLREDUCE):
                for step in range(n - 1):
                    a = positions[(start + step) % n]
                    b = positions[(start + step + 1) % n]
                    previous = send(builder, topology, a, b, chunk, COPY, [] if previous is None else [previous])
    return builder.build()


def ring(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
         order: list[int] | None = None, reverse: bool = False, channels: int | str = 1) -> Schedule:
    """Ring schedule for allgather, reducescatter or allreduce, on ``channels`` rings.

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``allgather``, ``reducescatter`` or ``allreduce``.
    chunks : int, optional
        Total chunks C (a multiple of N * channels; default N * channels).
    order : list of int, optional
        The rank order around the (first) ring.
    reverse : bool
        Run every ring in the opposite direction.
    channels : int or "auto"
        Number of rings; each carries 1/channels of the data (default 1, one ring). On multi-box
        systems with NICs the rings follow the NIC rails; ``"auto"``: as many as NCCL would build.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = ring(load_topology("ring:n=4"), Kind.ALLREDUCE)
    >>> len(s.transfers)  # 2 (N-1) steps of N transfers
    24
    >>> ring(load_topology("ring:n=4"), Kind.ALLGATHER, channels=2).params["orders"]
    [[0, 1, 2, 3], [3, 2, 1, 0]]
    """
    count = _channel_count(topology, channels)
    rings = channel_rings(topology, count, order)
    if reverse:
        rings = [r[::-1] for r in rings]
    params: dict[str, object] = {"order": rings[0],
                                 "chunks": chunks if chunks is not None else topology.num_ranks * count}
    if count > 1:
        params.update(channels=count, orders=rings)
        if order is None and rail_layout(topology) is not None and rail_rings(topology, 1) is not None:
            params["rails"] = True
    return ring_schedule(topology, kind, rings, chunks, "ring", params, root)
