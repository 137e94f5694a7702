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

from synth.algorithms.forest.network import Network
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
                    if owner[v] is not None:
                        found.add(owner[v])
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
