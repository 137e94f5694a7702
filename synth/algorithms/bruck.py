"""Bruck's algorithms for allgather, reduce-scatter and alltoall: ceil(log2 N) rounds at distances 1, 2, 4, ...

- Allgather: in round k rank r sends every block it holds (those of ranks r, r+1, ..., r+2^k-1, mod N)
  to rank r - 2^k and receives the next 2^k from rank r + 2^k; the last round sends only the
  N - 2^k blocks still missing. Time on a uniform network: ceil(log2 N)·α + ((N-1)/N)·n·β.
- Reduce-scatter: the allgather reversed in time, its copies turned into reductions: the rounds run from
  the largest distance down, and in the round of distance d rank q reduces its partial sums of the blocks
  of ranks q+d, ..., q+d+s-1 into rank q + d (s the blocks that allgather round sent). Every block's
  contributions meet at its owner along the allgather's tree for it reversed, in ceil(log2 N) rounds for
  any N.
- Alltoall: the block from rank o to rank d has to travel (d - o) mod N ranks forward; in round k
  every rank forwards to r + 2^k every block it holds whose remaining distance has bit k set. Time:
  ceil(log2 N)·α + (about n/2 per round)·β, i.e. (n/2)·log2(N)·β for N a power of two.

Rounds are lock-step (a transfer depends on the previous round of both its endpoints), as in MPI
implementations; the final local rotation of the classic formulation is free here because chunk ids
are global. A message between gpus that no path through switches and forwarding gpus joins goes through
relay gpus' scratch (see :class:`synth.algorithms.rhd.LockstepRounds`).
"""

from __future__ import annotations

from synth.algorithms.rhd import LockstepRounds
from synth.algorithms.utils import OrderedBuilder, make_collective
from synth.collectives import Kind
from synth.schedule import COPY, REDUCE, Schedule
from synth.topology import Topology


def bruck(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None) -> Schedule:
    """Bruck allgather, reduce-scatter or alltoall.

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``allgather``, ``reducescatter`` or ``alltoall``.
    chunks : int, optional
        Chunks C (per rank's buffer for alltoall), a multiple of N; default N.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = bruck(load_topology("switch:n=5"), Kind.ALLGATHER)
    >>> s.params["rounds"], len(s.transfers)  # rounds send 1, 2, then the 1 missing block per rank
    (3, 20)
    """
    n = topology.num_ranks
    coll = make_collective(topology, kind, chunks, root, default_chunks=n)
    per = coll.chunks_per_rank
    builder = OrderedBuilder(coll, topology.name, topology.gpus, "bruck", {"chunks": coll.chunks})
    rounds = LockstepRounds(builder, topology)
    count = 0
    distance = 1
    if kind == Kind.REDUCESCATTER:
        steps = []
        while distance < n:
            steps.append((distance, min(distance, n - distance)))
            distance *= 2
        for distance, sent in reversed(steps):
            for q in range(n):
                owners = [(q + distance + j) % n for j in range(sent)]
                rounds.send(q, (q + distance) % n, [c for o in owners for c in range(o * per, (o + 1) * per)], REDUCE)
            rounds.end_round()
            count += 1
    elif kind == Kind.ALLGATHER:
        while distance < n:
            sent = min(distance, n - distance)
            for r in range(n):
                owners = [(r + j) % n for j in range(sent)]
                rounds.send(r, (r - distance) % n, [c for o in owners for c in range(o * per, (o + 1) * per)], COPY)
            rounds.end_round()
            count += 1
            distance *= 2
    else:
        k = 0
        while distance < n:
            for r in range(n):
                moving = []
                for offset in range(n):  # blocks at r that came `offset` ranks so far
                    origin = (r - offset) % n
                    if offset >= distance:  # only bits below k have been travelled so far
                        continue
                    for dest in range(n):
                        remaining = (dest - origin) % n
                        if remaining & (distance - 1) == offset and remaining >> k & 1:
                            moving += [origin * coll.chunks + local for local in range(dest * per, (dest + 1) * per)]
                if moving:
                    rounds.send(r, (r + distance) % n, moving, COPY)
            rounds.end_round()
            count += 1
            distance *= 2
            k += 1
    builder.params["rounds"] = count
    return builder.build()
