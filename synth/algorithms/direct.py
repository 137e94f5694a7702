"""Direct algorithms: every rank sends its data straight to every rank that needs it.

Alltoall is the pairwise exchange; allgather sends each owned chunk to all others. Every message takes
the shortest path (through switches only when possible).
"""

from __future__ import annotations

from synth.algorithms.utils import make_collective, route
from synth.collectives import Kind
from synth.schedule import Schedule, ScheduleBuilder
from synth.topology import Topology


def direct(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None) -> Schedule:
    """Direct allgather or alltoall; all transfers start at once (no deps).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> len(direct(load_topology("switch:n=4"), Kind.ALLTOALL).transfers)  # N (N-1) pairs
    12
    """
    n = topology.num_ranks
    coll = make_collective(topology, kind, chunks, root, default_chunks=n)
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "direct", {"chunks": coll.chunks})
    per = coll.chunks_per_rank
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            path = route(topology, src, dst)
            if kind == Kind.ALLGATHER:
                for chunk in range(src * per, (src + 1) * per):
                    builder.add(src, dst, chunk, path)
            else:
                for local in range(dst * per, (dst + 1) * per):
                    builder.add(src, dst, src * coll.chunks + local, path)
    return builder.build()
