"""The time-indexed model behind ``milp``: logical links, epochs, capacities, and a greedy solution.

An :class:`Instance` is everything the CP-SAT model and the greedy need, independent of the solver:

- *Items*: what must move. For a multicast (allgather) item every gpu but its source must receive it;
  for a unicast (alltoall) item only its destination; other gpus may hold a copy as relays.
- *Logical links*: one per ordered gpu pair joined by a direct link or by a route through switches
  only (switches store nothing, so a switch route is crossed within one transfer). A sketch may drop
  some (inter-box links of non-relay gpus, switch routes inside a box).
- *Epochs* of ``epoch_us`` microseconds. A chunk sent on logical link l in epoch k can be forwarded from
  its destination from epoch ``k + delay[l]``, where ``delay[l]`` is the link's α plus the chunk's
  transmission time at the route's narrowest bandwidth, in epochs (rounded up, 10% tolerance).
- *Capacities*: physical link e starts at most ``cap[e]`` chunks in any ``window[e]`` consecutive epochs
  (bandwidth x epoch / chunk bytes; one chunk per several epochs on slow links). Every logical link
  using e shares it.

:func:`greedy` builds a feasible solution by earliest-arrival routing with capacity reservation; the
CP-SAT model starts from it, and it is the fallback when the solver finds nothing better in time.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field

import networkx as nx

from synth.algorithms.milp_sketch import Sketch
from synth.errors import InfeasibleError, InputError
from synth.routing import route
from synth.topology import Topology

#: Epochs a unicast relay must save before the greedy prefers it over a direct route.
RELAY_PENALTY = 2
#: Relative slack when turning times into whole epochs (a transfer 1.09 epochs long counts as 1).
EPOCH_TOLERANCE = 0.1


@dataclass(frozen=True)
class LogicalLink:
    """A gpu-to-gpu route crossed within one transfer: a direct link or a path through switches only."""

    index: int
    src: int
    dst: int
    path: tuple[str, ...]
    hops: tuple[int, ...]
    latency_us: float
    bandwidth: float
    inter_box: bool


@dataclass(frozen=True)
class Item:
    """Something to deliver: a chunk id, where it starts, and the ranks that must end up with it."""

    chunk: int
    source: int
    targets: tuple[int, ...]


@dataclass(frozen=True)
class Send:
    """One planned transfer: ``item`` (index) over logical link ``link`` starting in epoch ``epoch``."""

    item: int
    link: int
    epoch: int


@dataclass
class Plan:
    """A solution of an instance: sends and the makespan in epochs (when the last item arrives)."""

    sends: list[Send]
    makespan: int
    arrival_sum: int = 0
    origin: str = "greedy"
    cost: float = 0.0


@dataclass
class Instance:
    """One time-indexed synthesis problem (see the module docstring)."""

    topology: Topology
    multicast: bool
    items: list[Item]
    links: list[LogicalLink]
    edges: list[tuple[str, str]]
    chunk_bytes: float
    epoch_us: float
    delay: list[int]
    cap: list[int]
    window: list[int]
    serial_fanout: bool = False
    rotation: list[int] | None = None
    out_links: list[list[int]] = field(default_factory=list)
    in_links: list[list[int]] = field(default_factory=list)
    dist: list[list[int]] = field(default_factory=list)
    #: rank_image[j][r]: rank r rotated j boxes on (only j = 0 without symmetry)
    rank_image: list[list[int]] = field(default_factory=list)
    #: link_image[j][l], item_image[j][i]: the same for logical links and items
    link_image: list[list[int]] = field(default_factory=list)
    item_image: list[list[int]] = field(default_factory=list)
    #: representative[i] = (canonical item, j) with item_image[j][i] == canonical item
    representative: list[tuple[int, int]] = field(default_factory=list)
    #: position of each rank inside its box (rank order without boxes): spreads equally good targets
    spread: list[int] = field(default_factory=list)
    _link_cost: list[float] = field(default_factory=list, repr=False)

    def plan_is_symmetric(self, plan: Plan) -> bool:
        """True when the plan's sends are closed under the rotation (or there is no rotation)."""
        sends = {(s.item, s.link, s.epoch) for s in plan.sends}
        return all((self.item_image[j][item], self.link_image[j][link], epoch) in sends
                   for item, link, epoch in sends for j in range(len(self.rank_image)))

    @property
    def num_ranks(self) -> int:
        """Number of gpus."""
        return self.topology.num_ranks

    def lower_bound(self, groups: list[list[int]] | None = None) -> int:
        """Epochs no schedule can beat in this model.

        The larger of: the farthest target by delay alone; and, for every gpu set S in ``groups`` (boxes)
        and every single gpu, the time to push the items that must leave S through the links leaving S
        (or, for one gpu, to pull in what it needs), plus the fastest crossing, plus, for multicast, the
        spread from where the last item lands to every target outside S.
        """
        best = max((self.dist[item.source][t] for item in self.items for t in item.targets), default=0)
        n = self.num_ranks
        sets = [sorted(g) for g in (groups or []) if 0 < len(g) < n]
        for members in sets:
            best = max(best, self._cut_bound(set(members)))
        for rank in range(n):
            best = max(best, self._ingress_bound(rank))
        return best

    def _crossing_rate_sets(self, crossing: list[int]) -> list[list[int]]:
        """Sets of physical edges that every link in ``crossing`` uses at least one of."""
        hops = [set(self.links[index].hops) for index in crossing]
        common = set.intersection(*hops) if hops else set()
        candidates = [[edge] for edge in sorted(common)]
        candidates.append(sorted({self.links[index].hops[0] for index in crossing}))
        candidates.append(sorted({self.links[index].hops[-1] for index in crossing}))
        return candidates

    def _first_epoch_for(self, needed: int, edges: list[int]) -> int:
        """Smallest T such that the edges can start ``needed`` sends in epochs [0, T), minus one: the
        epoch the last of them starts at the earliest."""
        if needed <= 0:
            return -1
        low, high = 1, 1

        def room(epochs: int) -> int:
            return sum(self.cap[e] * -(-epochs // self.window[e]) for e in edges)

        while room(high) < needed:
            high *= 2
        while low < high:
            middle = (low + high) // 2
            if room(middle) >= needed:
                high = middle
            else:
                low = middle + 1
        return low - 1

    def _cut_bound(self, inside: set[int]) -> int:
        crossing = [link.index for link in self.links if link.src in inside and link.dst not in inside]
        if not crossing:
            return 0
        needed = sum(1 for item in self.items if item.source in inside
                     and any(t not in inside for t in item.targets))
        if not needed:
            return 0
        rate_sets = self._crossing_rate_sets(crossing)
        last_start = max(self._first_epoch_for(needed, edges) for edges in rate_sets)
        delay = min(self.delay[index] for index in crossing)
        spread = 0
        if self.multicast:
            outside = [v for v in range(self.num_ranks) if v not in inside]
            landing = sorted({self.links[index].dst for index in crossing})
            # the last item to cross may cross several times, so only the distance from the nearest
            # landing point counts, for the farthest target outside
            spread = max(min(self.dist[v][t] for v in landing) for t in outside)
            spread = max(spread, self._spread_bound(outside, landing, rate_sets))
        return last_start + delay + spread

    def _spread_bound(self, outside: list[int], landing: list[int], rate_sets: list[list[int]]) -> int:
        """Epochs the last item to cross needs, after its first copy lands, to reach every gpu outside.

        Copies of it can land at most ``1 + R(x)`` times by x epochs after the first (R: the sends the
        crossing links can start in x epochs), and a copy that has had r epochs reaches at most
        ``ball(r)`` gpus (the most gpus within r epochs of one landing point). The bound is the first r
        at which the copies, landing as early as they can, could cover every gpu outside.
        """
        count = len(outside)
        reach = [[self.dist[v][t] for t in outside] for v in landing]
        horizon = max((d for row in reach for d in row if d < 10**9), default=0)

        def ball(radius: int) -> int:
            return max(sum(1 for d in row if d <= radius) for row in reach)

        def copies(epochs: int) -> int:  # copies landed within ``epochs`` epochs after the first one
            room = min(sum(self.cap[e] * -(-(epochs + 1) // self.window[e]) for e in edges) for edges in rate_sets)
            return min(count, max(1, room))

        balls = [ball(r) for r in range(horizon + 1)]
        for radius in range(horizon + 1):
            covered = 0
            previous = 0
            for x in range(radius + 1):
                landed = copies(x)
                covered += (landed - previous) * balls[radius - x]
                previous = landed
            if covered >= count:
                return radius
        return horizon

    def _ingress_bound(self, rank: int) -> int:
        incoming = self.in_links[rank]
        needed = sum(1 for item in self.items if rank in item.targets)
        if not incoming or not needed:
            return 0
        last_start = max(self._first_epoch_for(needed, edges) for edges in self._crossing_rate_sets(incoming))
        return last_start + min(self.delay[index] for index in incoming)

    @property
    def link_cost(self) -> list[float]:
        """Microseconds of link occupancy one chunk causes on each logical link (summed over its hops)."""
        if not self._link_cost:
            bandwidth = [self.topology.bandwidth(u, v) for u, v in self.edges]
            self._link_cost = [sum(self.chunk_bytes / (bandwidth[e] * 1e3) for e in link.hops) for link in self.links]
        return self._link_cost


# ----------------------------------------------------------------------------------------- links
def send_window(instance: Instance, index: int, link_index: int, horizon: int,
                allowed: list[set[int]] | None = None) -> range:
    """The epochs in which item ``index`` may start a send on logical link ``link_index`` (empty when none):
    not before the item can reach the link's source and, unicast, early enough to still reach its target
    within ``horizon``. The model builder and the up-front size estimate both use it, so they agree.
    (``allowed``: the links each item may use, None for all.)"""
    item, link = instance.items[index], instance.links[link_index]
    if link.dst == item.source or (allowed is not None and link_index not in allowed[index]):
        return range(0)
    if not instance.multicast and link.src in item.targets:
        return range(0)
    last = horizon - instance.delay[link_index]
    if not instance.multicast:
        last -= instance.dist[link.dst][item.targets[0]]
    return range(instance.dist[item.source][link.src], last + 1)


def logical_links(topology: Topology, sketch: Sketch) -> list[LogicalLink]:
    """The logical links the sketch allows, in (src, dst) rank order.

    Raises
    ------
    InputError
        When the sketch names relays the topology's boxes do not have.
    InfeasibleError
        When the allowed links leave some gpu unable to reach another.
    """
    n = topology.num_ranks
    boxes = sketch.boxes(topology)
    local = sketch.local_index(topology)
    if sketch.relays is not None:
        if boxes is None:
            raise InputError(sketch.source, "relays", f"{topology.name} records no boxes; add box_size to the sketch")
        largest = max(local) if local else 0
        bad = [i for i in sketch.relays if i > largest]
        if bad:
            raise InputError(sketch.source, "relays", f"local index {bad[0]} is out of range: boxes of "
                             f"{topology.name} hold at most {largest + 1} gpus (indices 0..{largest})")
    relays = set(sketch.relays) if sketch.relays is not None else None
    edge_index = {edge: i for i, edge in enumerate(topology.graph.edges)}
    links: list[LogicalLink] = []
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            path = _link_path(topology, a, b)
            if path is None:
                continue  # reaches b only through another rank: that is a relay, not a link
            inter = boxes is not None and boxes[a] != boxes[b]
            if inter and relays is not None:
                assert local is not None
                if local[a] not in relays or local[b] not in relays:
                    continue
                if sketch.pairing == "same-index" and local[a] != local[b]:
                    continue
            if not inter and sketch.intra_box == "direct" and len(path) > 2:
                continue
            hops = tuple(edge_index[(u, v)] for u, v in zip(path, path[1:], strict=False))
            bandwidth = min(topology.bandwidth(u, v) for u, v in zip(path, path[1:], strict=False))
            links.append(LogicalLink(len(links), a, b, path, hops, topology.path_latency(path), bandwidth, inter))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from((link.src, link.dst) for link in links)
    if not nx.is_strongly_connected(graph):
        reach = nx.descendants(graph, 0) | {0}
        if len(reach) < n:
            missing = min(set(range(n)) - reach)
            src, dst = 0, missing
        else:
            back = nx.ancestors(graph, 0) | {0}
            src, dst = min(set(range(n)) - back), 0
        raise InfeasibleError(
            f"the sketch leaves rank {dst} ({topology.gpus[dst]}) unreachable from rank {src} "
            f"({topology.gpus[src]}) on {topology.name}: allow more relays or pairings")
    return links


def _link_path(topology: Topology, a: int, b: int) -> tuple[str, ...] | None:
    """The path of the logical link a -> b: through switches only, or, in a process group's view, also
    through forwarding gpus outside the group (never through a member: a member in between is a relay,
    which the model makes explicit); None when there is no such path."""
    path = route(topology, a, b, via_gpus=False)
    if path is not None or "group_of" not in topology.metadata:
        return path
    path = route(topology, a, b, via_gpus=True)
    if path is None:
        return None
    members = set(topology.gpus)
    return None if any(node in members for node in path[1:-1]) else path


def rotation_of(topology: Topology, sketch: Sketch, links: list[LogicalLink]) -> list[int]:
    """The rank permutation 'one box on' for ``symmetry: rotate-boxes``, checked against the links."""
    boxes = sketch.boxes(topology)
    if boxes is None:
        raise InputError(sketch.source, "symmetry", f"rotate-boxes needs boxes; {topology.name} records none "
                         "(add box_size to the sketch)")
    order: dict[int, list[int]] = {}
    for rank, box in enumerate(boxes):
        order.setdefault(box, []).append(rank)
    labels = sorted(order)
    sizes = {len(members) for members in order.values()}
    if len(labels) < 2 or len(sizes) != 1:
        raise InputError(sketch.source, "symmetry", "rotate-boxes needs at least 2 boxes of equal size")
    rotation = [0] * topology.num_ranks
    for position, label in enumerate(labels):
        following = order[labels[(position + 1) % len(labels)]]
        for index, rank in enumerate(order[label]):
            rotation[rank] = following[index]
    pairs = {(link.src, link.dst): link for link in links}
    for link in links:
        image = pairs.get((rotation[link.src], rotation[link.dst]))
        if image is None or abs(image.latency_us - link.latency_us) > 1e-9 or image.bandwidth != link.bandwidth:
            raise InputError(sketch.source, "symmetry", f"{topology.name} is not symmetric under box rotation: "
                             f"link {link.src}->{link.dst} has no equal image")
    return rotation


# ----------------------------------------------------------------------------------------- epochs
def build_instance(topology: Topology, links: list[LogicalLink], items: list[Item], multicast: bool,
                   chunk_bytes: float, epoch_us: float, serial_fanout: bool = False,
                   rotation: list[int] | None = None, chunk_rotation: dict[int, int] | None = None,
                   spread: list[int] | None = None) -> Instance:
    """Discretize delays and capacities for one epoch length.

    ``rotation`` (a rank permutation) and ``chunk_rotation`` (where it sends each chunk id) impose the
    sketch's rotational symmetry; both or neither.
    """
    edges = list(topology.graph.edges)
    delay = []
    for link in links:
        ratio = (link.latency_us + chunk_bytes / (link.bandwidth * 1e3)) / epoch_us
        delay.append(max(1, math.ceil(ratio - EPOCH_TOLERANCE)))
    cap: list[int] = []
    window: list[int] = []
    for u, v in edges:
        rate = topology.bandwidth(u, v) * 1e3 * epoch_us / max(chunk_bytes, 1e-9)
        if rate + EPOCH_TOLERANCE >= 1:
            window.append(1)
            cap.append(min(max(1, math.floor(rate + EPOCH_TOLERANCE)), 1_000_000))
        else:
            window.append(max(1, math.ceil(1 / rate - EPOCH_TOLERANCE)))
            cap.append(1)
    n = topology.num_ranks
    out_links: list[list[int]] = [[] for _ in range(n)]
    in_links: list[list[int]] = [[] for _ in range(n)]
    for link in links:
        out_links[link.src].append(link.index)
        in_links[link.dst].append(link.index)
    instance = Instance(topology, multicast, items, links, edges, chunk_bytes, epoch_us, delay, cap, window,
                        serial_fanout, rotation, out_links, in_links)
    instance.dist = _all_pairs_delay(instance)
    instance.spread = list(spread) if spread is not None else list(range(n))
    _add_images(instance, rotation, chunk_rotation)
    return instance


def _add_images(instance: Instance, rotation: list[int] | None, chunk_rotation: dict[int, int] | None) -> None:
    n = instance.num_ranks
    identity_ranks = list(range(n))
    rank_image = [identity_ranks]
    link_image = [list(range(len(instance.links)))]
    item_image = [list(range(len(instance.items)))]
    if rotation is not None and chunk_rotation is not None:
        by_pair = {(link.src, link.dst): link.index for link in instance.links}
        by_chunk = {item.chunk: i for i, item in enumerate(instance.items)}
        one_link = [by_pair[(rotation[link.src], rotation[link.dst])] for link in instance.links]
        one_item = [by_chunk[chunk_rotation[item.chunk]] for item in instance.items]
        while True:
            ranks = [rotation[r] for r in rank_image[-1]]
            if ranks == identity_ranks:
                break
            rank_image.append(ranks)
            link_image.append([one_link[index] for index in link_image[-1]])
            item_image.append([one_item[i] for i in item_image[-1]])
    instance.rank_image = rank_image
    instance.link_image = link_image
    instance.item_image = item_image
    representative = []
    for i in range(len(instance.items)):
        j = min(range(len(item_image)), key=lambda power: (item_image[power][i], power))
        representative.append((item_image[j][i], j))
    instance.representative = representative


def _all_pairs_delay(instance: Instance) -> list[list[int]]:
    n = instance.num_ranks
    result = []
    for source in range(n):
        best = [math.inf] * n
        best[source] = 0
        heap = [(0, source)]
        while heap:
            time, node = heapq.heappop(heap)
            if time > best[node]:
                continue
            for index in instance.out_links[node]:
                arrival = time + instance.delay[index]
                target = instance.links[index].dst
                if arrival < best[target]:
                    best[target] = arrival
                    heapq.heappush(heap, (arrival, target))
        result.append([int(t) if t != math.inf else 10**9 for t in best])
    return result


# ----------------------------------------------------------------------------------------- greedy
class _Capacity:
    """Reservations per physical link: ``load[e][j]`` counts the sends started in the window of
    ``window[e]`` epochs beginning at j, so a test looks at ``window[e]`` numbers."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.load: list[dict[int, int]] = [{} for _ in instance.edges]
        self.fan: dict[tuple[int, int], set[int]] = defaultdict(set)
        self.symmetric = len(instance.link_image) > 1
        self._images: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._extra: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def images(self, link: int, item: int) -> list[tuple[int, int]]:
        """The (link, item) pairs a send stands for: itself, and its rotations under symmetry."""
        key = (link, item)
        found = self._images.get(key)
        if found is None:
            instance = self.instance
            found = [(instance.link_image[j][link], instance.item_image[j][item])
                     for j in range(len(instance.link_image))]
            self._images[key] = found
        return found

    def _edge_counts(self, link: int, item: int) -> list[tuple[int, int]]:
        key = (link, item) if self.symmetric else (link, -1)
        found = self._extra.get(key)
        if found is None:
            counts: dict[int, int] = defaultdict(int)
            pairs = self.images(link, item) if self.symmetric else [(link, item)]
            for image_link, _ in pairs:
                for edge in self.instance.links[image_link].hops:
                    counts[edge] += 1
            found = sorted(counts.items())
            self._extra[key] = found
        return found

    def fits(self, link: int, epoch: int, item: int) -> bool:
        instance = self.instance
        window, cap, load = instance.window, instance.cap, self.load
        for edge, count in self._edge_counts(link, item):
            limit = cap[edge] - count
            per = load[edge]
            width = window[edge]
            if width == 1:
                if per.get(epoch, 0) > limit:
                    return False
                continue
            for start in range(epoch - width + 1, epoch + 1):
                if per.get(start, 0) > limit:
                    return False
        if instance.serial_fanout:
            pairs = self.images(link, item) if self.symmetric else [(link, item)]
            for image_link, image_item in pairs:
                busy = self.fan.get((image_item, instance.links[image_link].src))
                if busy and any(e in busy for e in range(epoch, epoch + instance.delay[image_link])):
                    return False
        return True

    def earliest(self, link: int, ready: int, item: int, horizon: int) -> int | None:
        epoch = ready
        while epoch <= horizon:
            if self.fits(link, epoch, item):
                return epoch
            epoch += 1
        return None

    def take(self, link: int, epoch: int, item: int) -> list[tuple[int, int]]:
        """Reserve the send and its images; return the (link, item) pairs reserved."""
        instance = self.instance
        pairs = self.images(link, item) if self.symmetric else [(link, item)]
        for edge, count in self._edge_counts(link, item):
            per = self.load[edge]
            for start in range(epoch - instance.window[edge] + 1, epoch + 1):
                per[start] = per.get(start, 0) + count
        if instance.serial_fanout:
            for image_link, image_item in pairs:
                self.fan[(image_item, instance.links[image_link].src)].update(
                    range(epoch, epoch + instance.delay[image_link]))
        return pairs


def greedy(instance: Instance, order: str = "interleave", horizon: int = 100_000) -> Plan | None:
    """Earliest-arrival routing with capacity reservation; None if it overruns ``horizon`` epochs.

    ``order`` picks the request order: ``"interleave"`` (each item's farthest target first, items in
    turn), ``"near"`` (nearest targets first) or ``"item"`` (one item at a time, farthest first).
    """
    capacity = _Capacity(instance)
    holders: list[dict[int, int]] = [{item.source: 0} for item in instance.items]
    sends: list[Send] = []
    for index, target in _requests(instance, order):
        if instance.representative[index][0] != index or target in holders[index]:
            continue  # under symmetry only canonical items are routed; their images follow
        path = _route_request(instance, capacity, holders[index], index, target, horizon)
        if path is None:
            return None
        # reserve hop by hop (a later hop may compete with an earlier one for the same physical link)
        ready = holders[index][instance.links[path[0]].src]
        for link in path:
            epoch = capacity.earliest(link, ready, index, horizon)
            if epoch is None:
                return None
            ready = epoch + instance.delay[link]
            for image_link, image_item in capacity.take(link, epoch, index):
                sends.append(Send(image_item, image_link, epoch))
                holders[image_item][instance.links[image_link].dst] = ready
    makespan = max((holders[i][t] for i, item in enumerate(instance.items) for t in item.targets), default=0)
    arrivals = sum(holders[i][t] for i, item in enumerate(instance.items) for t in item.targets)
    plan = Plan(sorted(sends, key=lambda s: (s.epoch, s.link, s.item)), makespan, arrivals)
    plan.cost = sum(instance.link_cost[s.link] for s in sends)
    return plan


def best_greedy(instance: Instance, horizon: int = 100_000,
                orders: tuple[str, ...] = ("interleave", "near", "item")) -> Plan | None:
    """The best of the greedy orders (fewest epochs, then least link occupancy, then earliest arrivals)."""
    best: Plan | None = None
    for order in orders:
        plan = greedy(instance, order, horizon)
        if plan is not None and (best is None or greedy_rank(plan) < greedy_rank(best)):
            best = plan
    return best


def greedy_rank(plan: Plan) -> tuple[int, float, int]:
    """How greedy plans are ordered: fewest epochs, then least link occupancy, then earliest arrivals."""
    return (plan.makespan, round(plan.cost, 9), plan.arrival_sum)


def _requests(instance: Instance, order: str) -> list[tuple[int, int]]:
    dist = instance.dist
    spread = instance.spread or list(range(instance.num_ranks))
    width = max(spread) + 1
    per_item = []
    for index, item in enumerate(instance.items):
        # equally far targets in rotated order (by position in the box), so that different items land on
        # different gpus
        source = item.source
        targets = sorted(item.targets, key=lambda t: (-dist[source][t], (spread[t] - spread[source]) % width, t))
        if order == "near":
            targets.reverse()
        per_item.append([(index, t) for t in targets])
    if order == "item":
        return [request for requests in per_item for request in requests]
    result: list[tuple[int, int]] = []
    for position in range(max((len(r) for r in per_item), default=0)):
        result.extend(requests[position] for requests in per_item if position < len(requests))
    return result


def _route_request(instance: Instance, capacity: _Capacity, holders: dict[int, int], item: int, target: int,
                   horizon: int) -> list[int] | None:
    """Earliest-arrival path (logical link indices) from any holder to ``target``, waiting allowed; among
    equally early paths the one that occupies links for the least time (``link_cost``). For unicast
    items every relay counts as ``RELAY_PENALTY`` epochs late: a relayed copy costs a second transfer's
    bandwidth, which the epoch model does not see as a delay."""
    penalty = 0 if instance.multicast else RELAY_PENALTY
    # label: (key, link cost, real arrival epoch)
    label: dict[int, tuple[int, float, int]] = {node: (time, 0.0, time) for node, time in holders.items()}
    previous: dict[int, int] = {}
    heap = [(time, 0.0, time, node) for node, time in holders.items()]
    heapq.heapify(heap)
    source = instance.items[item].source
    done: set[int] = set()
    cost = instance.link_cost
    while heap:
        key, spent, time, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        if node == target:
            break
        extra = 0 if node in holders else penalty
        for link in instance.out_links[node]:
            nxt = instance.links[link].dst
            if nxt in holders or nxt == source or nxt in done:
                continue
            epoch = capacity.earliest(link, time, item, horizon)
            if epoch is None:
                continue
            arrival = epoch + instance.delay[link]
            candidate = (key - time + arrival + extra, spent + cost[link], arrival)
            if candidate < label.get(nxt, (math.inf, math.inf, math.inf)):
                label[nxt] = candidate
                previous[nxt] = link
                heapq.heappush(heap, (candidate[0], candidate[1], candidate[2], nxt))
    if target not in previous:
        return None
    path = []
    node = target
    while node not in holders:
        link = previous[node]
        path.append(link)
        node = instance.links[link].src
    return path[::-1]
