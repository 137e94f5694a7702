"""Binomial trees for broadcast and reduce.

Ranks are renumbered relative to the root; in round k every rank with relative index i < 2^k that
holds the data sends it to i + 2^k. Reduce runs the same tree backwards, each rank reducing its
children's partial sums in order before passing its own on. Every chunk follows the same tree, so
several chunks pipeline down it. A tree edge between gpus that no path through switches and forwarding
gpus joins goes through relay gpus' scratch (:func:`synth.algorithms.utils.send`).
"""

from __future__ import annotations

from synth.algorithms.utils import make_collective, send
from synth.collectives import Kind
from synth.schedule import COPY, REDUCE, Schedule, ScheduleBuilder
from synth.topology import Topology


def binomial_edges(n: int, root: int) -> list[tuple[int, int, int]]:
    """(round, parent, child) edges of the binomial tree on n ranks rooted at ``root``."""
    edges = []
    span = 1
    rnd = 0
    while span < n:
        for rel in range(span):
            child = rel + span
            if child < n:
                edges.append((rnd, (rel + root) % n, (child + root) % n))
        span *= 2
        rnd += 1
    return edges


def binomial(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None) -> Schedule:
    """Binomial-tree broadcast or reduce.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> len(binomial(load_topology("switch:n=8"), Kind.BROADCAST, root=3).transfers)
    7
    """
    n = topology.num_ranks
    coll = make_collective(topology, kind, chunks, root)
    assert coll.root is not None
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "binomial", {"chunks": coll.chunks, "root": coll.root})
    edges = binomial_edges(n, coll.root)
    for chunk in range(coll.chunks):
        if kind == Kind.BROADCAST:
            arrived: dict[int, int] = {}
            for _, parent, child in edges:
                deps = [arrived[parent]] if parent in arrived else []
                arrived[child] = send(builder, topology, parent, child, chunk, COPY, deps)
        else:
            last_into: dict[int, int] = {}
            for _, parent, child in reversed(edges):
                deps = [last_into[child]] if child in last_into else []
                if parent in last_into:
                    deps.append(last_into[parent])
                last_into[parent] = send(builder, topology, child, parent, chunk, REDUCE, deps)
    return builder.build()
