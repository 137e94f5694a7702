"""Box symmetry: the automorphism that moves every box to the next one.

Multi-box systems are built from identical boxes: box b's gpus and its own switches (NVSwitch, NICs)
look exactly like box b+1's, and shared switches (rails, spines, an IB switch) treat every box alike.
Then the map sigma that sends box b to box b+1 (mod B) -- gpu i of a box to gpu i of the next, a box's
j-th own switch to the next box's j-th, shared switches to themselves -- is an automorphism of the
network, and the cyclic group it generates moves every gpu freely (its orbits are the gpus with the same
index in every box).

With it the forest pipeline does the work for one box and lets the group copy it: every max-flow value
is the same on a whole orbit, so one gpu per orbit (box 0's) answers a test for all; switches are split
an orbit at a time, and only box 0's roots' trees are packed, each standing for its B translates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from synth.cuts.network import Network
from synth.topology import Topology


def box_translation(net: Network, topology: Topology) -> list[int] | None:
    """The node permutation sending box b to box b+1 (mod B), or None when it is not an automorphism.

    Needs ``topology.boxes``, at least 2 boxes with the same number of gpus and own switches, and a
    network that the map preserves exactly (every arc to an arc of the same bandwidth).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> topo = load_topology("ndv2:boxes=2")
    >>> sigma = box_translation(Network.from_topology(topo), topo)
    >>> sigma[0], sigma[8]  # gpu 0 of box 0 <-> gpu 0 of box 1
    (8, 0)
    """
    if topology.boxes is None:
        return None
    boxes = topology.boxes
    labels = sorted(set(boxes))
    if len(labels) < 2:
        return None
    position = {label: p for p, label in enumerate(labels)}
    neighbours: list[set[int]] = [set() for _ in range(net.num_nodes)]
    for t, h in zip(net.tails, net.heads, strict=True):
        neighbours[t].add(h)
        neighbours[h].add(t)
    # a switch belongs to a box when the neighbours one step closer to the gpus that belong to a box all
    # belong to that one (shared neighbours do not count); otherwise it is shared
    owner: dict[int, int | None] = {r: position[boxes[r]] for r in range(net.num_compute)}
    layer = list(range(net.num_compute))
    while layer:
        claims: dict[int, set[int]] = {}
        for v in layer:
            for w in neighbours[v]:
                if w not in owner:
                    found = claims.setdefault(w, set())
                    claimant = owner[v]
                    if claimant is not None:
                        found.add(claimant)
        for w, owners in claims.items():
            owner[w] = owners.pop() if len(owners) == 1 else None
        layer = sorted(claims)
    members: list[list[int]] = [[] for _ in labels]
    for v in range(net.num_nodes):
        box = owner.get(v)
        if box is not None:
            members[box].append(v)
    gpu_counts = {sum(1 for v in group if v < net.num_compute) for group in members}
    if len({len(group) for group in members}) != 1 or len(gpu_counts) != 1:
        return None
    sigma = list(range(net.num_nodes))
    count = len(labels)
    for p, group in enumerate(members):
        nxt = members[(p + 1) % count]
        gpus = [v for v in group if v < net.num_compute]
        next_gpus = [v for v in nxt if v < net.num_compute]
        switches = [v for v in group if v >= net.num_compute]
        next_switches = [v for v in nxt if v >= net.num_compute]
        for a, b in zip(gpus + switches, next_gpus + next_switches, strict=True):
            sigma[a] = b
    arcs = {(t, h): b for t, h, b in zip(net.tails, net.heads, net.units, strict=True)}
    if any(arcs.get((sigma[t], sigma[h])) != b for (t, h), b in arcs.items()):
        return None
    return sigma


def powers(sigma: list[int]) -> list[list[int]]:
    """[identity, sigma, sigma^2, ...] up to the order of sigma."""
    result = [list(range(len(sigma)))]
    current = sigma
    while current != result[0]:
        result.append(current)
        current = [sigma[v] for v in current]
    return result


# ------------------------------------------------------------------------------- gpu orbits
def orbit_minima(group: Sequence[Sequence[int]], nodes: Sequence[int]) -> dict[int, int]:
    """Each of ``nodes``' least image under ``group`` (a whole group, not generators): its orbit's name.

    Walks each orbit once (one lookup per group element per orbit), not every node's images.

    Examples
    --------
    >>> orbit_minima([[0, 1, 2, 3], [1, 0, 3, 2]], range(4))
    {0: 0, 1: 0, 2: 2, 3: 2}
    """
    least: dict[int, int] = {}
    for v in nodes:
        if v not in least:
            orbit = [g[v] for g in group]
            name = min(orbit)
            for u in orbit:
                least[u] = name
    return {v: least[v] for v in nodes}


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


class _Extender:
    """Extends a permutation of gpus to switches and checks that the whole is an automorphism.

    The gpu map is given; every switch next to a moved node is decided breadth-first: it stays where it
    is when that keeps its arcs to the moved nodes, otherwise it goes to a switch next to one of its
    neighbours' images whose arcs to every decided neighbour match. The first switch that cannot be placed
    ends the attempt (a missed automorphism only costs time). A map that is found is checked arc by arc
    on every moved node, and must be a permutation, so whatever it returns is an automorphism.
    """

    def __init__(self, net: Network, weights: Sequence[int]) -> None:
        self.n = net.num_compute
        self.size = net.num_nodes
        self.weights = list(weights) + [0] * (net.num_nodes - len(weights))
        self.units = {t * self.size + h: u for t, h, u in zip(net.tails, net.heads, net.units, strict=True)}
        neighbours: list[set[int]] = [set() for _ in range(net.num_nodes)]
        for t, h in zip(net.tails, net.heads, strict=True):
            neighbours[t].add(h)
            neighbours[h].add(t)
        self.neighbours = [sorted(group) for group in neighbours]

    def _same(self, a: int, b: int, image_a: int, image_b: int) -> bool:
        units, size = self.units, self.size
        return units.get(a * size + b) == units.get(image_a * size + image_b) and \
            units.get(b * size + a) == units.get(image_b * size + image_a)

    def _place(self, node: int, pi: dict[int, int], decided: set[int], taken: set[int]) -> int | None:
        n = self.n
        known = [(d, pi.get(d, d)) for d in self.neighbours[node] if d < n or d in decided]
        if not known:
            return None
        anchor = min(known, key=lambda pair: len(self.neighbours[pair[1]]))[1]
        for candidate in self.neighbours[anchor]:
            if candidate < n or candidate in taken or candidate in decided and candidate not in pi:
                continue
            if all(self._same(d, node, image, candidate) for d, image in known):
                return candidate
        return None

    def extend(self, moves: dict[int, int]) -> dict[int, int] | None:
        """The automorphism extending the gpu map ``moves`` (identity elsewhere), as its moved nodes, or None."""
        pi = {v: w for v, w in moves.items() if v != w}
        if not pi or set(pi.values()) != set(pi):
            return None
        if any(self.weights[v] != self.weights[w] for v, w in pi.items()):
            return None
        n = self.n
        taken = set(pi.values())
        decided = set(pi)
        frontier = sorted(pi)
        while frontier:
            touched: dict[int, list[int]] = {}
            for m in frontier:
                for u in self.neighbours[m]:
                    if u >= n and u not in decided:
                        touched.setdefault(u, []).append(m)
            frontier = []
            for u in sorted(touched):
                if u not in taken and all(self._same(m, u, pi[m], u) for m in touched[u]):
                    decided.add(u)
                    continue
                image = self._place(u, pi, decided, taken)
                if image is None:
                    return None
                pi[u] = image
                taken.add(image)
                decided.add(u)
                frontier.append(u)
        if taken != set(pi):
            return None
        for m, image in pi.items():
            for u in self.neighbours[m]:
                if not self._same(m, u, image, pi.get(u, u)):
                    return None
        return pi


class _Orbits:
    """Union-find over gpus with a label array refreshed on demand."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self._labels: np.ndarray | None = None

    def find(self, v: int) -> int:
        parent = self.parent
        root = v
        while parent[root] != root:
            root = parent[root]
        while parent[v] != root:
            parent[v], v = root, parent[v]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)
            self._labels = None

    @property
    def labels(self) -> np.ndarray:
        if self._labels is None:
            labels = np.asarray(self.parent, dtype=np.int64)
            while True:
                following = labels[labels]
                if np.array_equal(following, labels):
                    break
                labels = following
            self._labels = labels
        return self._labels


def gpu_orbits(net: Network, weights: Sequence[int]) -> list[int]:
    """For every gpu, the smallest gpu of its orbit under automorphisms found and verified here.

    Orbits are what the cut test may skip: an automorphism that keeps every root weight gives a gpu and
    its image the same max-flow value. Candidates are rank permutations that fabrics built box by box,
    pod by pod or axis by axis tend to have: for every block size g dividing the gpu count, swapping two
    neighbouring blocks (tried on every pair once the first pair works) and rotating every block by a
    divisor of g (a torus axis, the next box, the next group of a dragonfly). Each candidate is extended
    to the switches and checked exactly (:class:`_Extender`); candidates that would merge nothing are
    skipped, and a block size whose first candidate pair is no automorphism is not swept. Finding fewer automorphisms than exist only leaves more orbits, never a wrong one.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> net = Network.from_topology(load_topology("dgx-a100:boxes=4"))
    >>> sorted(set(gpu_orbits(net, [1] * 32)))  # every gpu alike (rails swap with the gpus)
    [0]
    >>> net = Network.from_topology(load_topology("ndv2:boxes=2"))
    >>> gpu_orbits(net, [1] * 16)[:8]  # the DGX-1 cube-mesh has two kinds of gpu
    [0, 0, 2, 2, 0, 0, 2, 2]
    """
    n = net.num_compute
    key = ("orbits", tuple(weights))
    if key in net.shared:
        return net.shared[key]
    extender = _Extender(net, weights)
    orbits = _Orbits(n)
    ranks = np.arange(n)
    weights = list(weights)
    weight_array = np.asarray(weights)
    find = orbits.find

    def swap(k: int, g: int) -> bool | None:
        """Try swapping blocks k and k+1 of size g: True (merged), False (no automorphism), None (skipped:
        nothing to merge, or their roots differ)."""
        a, b = k * g, (k + 1) * g
        if weights[a:b] != weights[b:b + g] or all(find(a + i) == find(b + i) for i in range(g)):
            return None
        moves = {a + i: b + i for i in range(g)}
        moves.update({b + i: a + i for i in range(g)})
        if extender.extend(moves) is None:
            return False
        for i in range(g):
            orbits.union(a + i, b + i)
        return True

    # probe each block size on its first pair that could merge anything (all probes together move about
    # 2n gpus), then sweep the sizes that swap, largest first: after a size is swept, most pairs of the
    # smaller sizes are already merged and cost one look-up each
    sweeps = []
    for g in _divisors(n)[:-1]:
        for k in range(n // g - 1):
            outcome = swap(k, g)
            if outcome is not None:
                if outcome:
                    sweeps.append(g)
                break
    for g in sorted(sweeps, reverse=True):
        for k in range(n // g - 1):
            swap(k, g)
    for g in _divisors(n):
        for h in _divisors(g)[:-1]:
            image = ranks - ranks % g + (ranks % g + h) % g
            labels = orbits.labels
            if np.array_equal(labels[image], labels) or not np.array_equal(weight_array[image], weight_array):
                continue
            if extender.extend(dict(zip(range(n), image.tolist(), strict=True))) is not None:
                for v, w in zip(range(n), image.tolist(), strict=True):
                    orbits.union(v, w)
    result = orbits.labels.tolist()
    net.shared[key] = result
    return result


def _extender(net: Network, weights: Sequence[int]) -> _Extender:
    key = ("extender", tuple(weights))
    if key not in net.cache:
        net.cache[key] = _Extender(net, weights)
    return net.cache[key]


def _generated(generators: list[np.ndarray], n: int, limit: int) -> list[np.ndarray] | None:
    """The group the gpu parts (first n entries) of ``generators`` generate, breadth first from the
    identity, or None when it has more than ``limit`` elements or an element other than the identity
    fixes a gpu.

    In a free group an element is known by where it sends gpu 0 (two that agree there differ by an
    element fixing gpu 0), so elements are keyed by that one entry; two different elements with the same
    key prove the group is not free."""
    identity = np.arange(n)
    parts = [g[:n] for g in generators]
    seen = {0: identity}
    order = [identity]
    index = 0
    while index < len(order):
        element = order[index]
        index += 1
        for part in parts:
            image = part[element]
            key = int(image[0])
            known = seen.get(key)
            if known is not None:
                if np.array_equal(known, image):
                    continue
                return None
            if np.any(image == identity) or len(seen) >= limit:
                return None
            seen[key] = image
            order.append(image)
    return order


def free_group(net: Network, weights: Sequence[int], limit: int | None = None) -> list[list[int]] | None:
    """A group of automorphisms that moves gpus freely (no element but the identity fixes a gpu), as the
    list of its node permutations (identity first), or None when none was found.

    Built from verified rank rotations (every block of g consecutive ranks turned by h, for h dividing g
    dividing the gpu count: a torus axis, the next box, a switch's ports), largest order first; a
    rotation joins when the group it generates with the others is still free and has at most ``limit``
    elements (default: the gpu count, which a free group cannot exceed). The forest pipeline packs one
    root per orbit and lets the group copy its trees, so the larger the group the less work.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> net = Network.from_topology(load_topology("switch:n=6"))
    >>> len(free_group(net, [1] * 6))  # turning the 6 gpus around the switch, one orbit
    6
    """
    n = net.num_compute
    limit = n if limit is None else min(limit, n)
    if n < 2 or limit < 2:
        return None
    extender = _extender(net, weights)
    ranks = np.arange(n)
    candidates = sorted(((g // h, g, h) for g in _divisors(n) for h in _divisors(g)[:-1]), key=lambda c: (-c[0], -c[1]))
    generators: list[np.ndarray] = []
    group: list[np.ndarray] = [ranks]
    members = {0: ranks}  # the group's elements by their image of gpu 0 (see _generated)
    for order, g, h in candidates:
        if len(group) * 2 > limit:
            break
        gpu_image = ranks - ranks % g + (ranks % g + h) % g
        member = members.get(int(gpu_image[0]))
        if order > limit or (member is not None and np.array_equal(member, gpu_image)):
            continue
        pi = extender.extend(dict(enumerate(gpu_image.tolist())))
        if pi is None:
            continue
        candidate = np.arange(net.num_nodes)
        moved = np.fromiter(pi, dtype=np.int64, count=len(pi))
        candidate[moved] = np.fromiter(pi.values(), dtype=np.int64, count=len(pi))
        grown = _generated(generators + [candidate], n, limit)
        if grown is not None:
            generators.append(candidate)
            group, members = grown, {int(element[0]): element for element in grown}
    if not generators:
        return None
    # the whole permutations: each element found from an earlier one and a generator (breadth first)
    full = {0: np.arange(net.num_nodes)}  # keyed by the image of gpu 0, as the group is free
    for element in group:
        for generator in generators:
            key = int(generator[element[0]])
            if key not in full:
                full[key] = generator[full[int(element[0])]]
    shared = list(range(net.num_nodes))  # one int object per node, shared by every permutation's list
    return [list(map(shared.__getitem__, full[int(element[0])].tolist())) for element in group]
