"""Ring allgather, reduce-scatter and allreduce.

The ring follows a Hamiltonian cycle of switch-only hops when one exists (found deterministically);
otherwise ranks in order, each hop along a shortest path. With C = m*N chunks every block of m chunks
travels the ring independently, which pipelines large messages.
"""

from __future__ import annotations

from synth.algorithms.utils import hamiltonian_ring, make_collective, route
from synth.collectives import Kind
from synth.errors import InputError
from synth.schedule import COPY, REDUCE, Schedule, ScheduleBuilder
from synth.topology import Topology


def ring_order(topology: Topology, order: list[int] | None = None) -> list[int]:
    """The rank order of the ring: ``order`` if given (validated), else a Hamiltonian cycle or 0..N-1."""
    n = topology.num_ranks
    if order is not None:
        if sorted(order) != list(range(n)):
            raise InputError("", "order", f"expected a permutation of 0..{n - 1}")
        return list(order)
    return hamiltonian_ring(topology) or list(range(n))


def ring(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
         order: list[int] | None = None, reverse: bool = False) -> Schedule:
    """Ring schedule for allgather, reducescatter or allreduce.

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``allgather``, ``reducescatter`` or ``allreduce``.
    chunks : int, optional
        Total chunks C (a multiple of N; default N).
    order : list of int, optional
        The rank order around the ring.
    reverse : bool
        Run the ring in the opposite direction.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = ring(load_topology("ring:n=4"), Kind.ALLREDUCE)
    >>> len(s.transfers)  # 2 (N-1) steps of N transfers
    24
    """
    n = topology.num_ranks
    coll = make_collective(topology, kind, chunks, root, default_chunks=n)
    if coll.chunks % n:
        raise InputError("", "chunks", f"ring needs chunks to be a multiple of {n}, got {coll.chunks}")
    positions = ring_order(topology, order)
    if reverse:
        positions = positions[::-1]
    per = coll.chunks // n
    params = {"order": positions, "chunks": coll.chunks}
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "ring", params)
    paths = {(positions[i], positions[(i + 1) % n]): route(topology, positions[i], positions[(i + 1) % n])
             for i in range(n)}
    where = {rank: i for i, rank in enumerate(positions)}

    for owner in range(n):
        start = where[owner]
        for chunk in range(owner * per, (owner + 1) * per):
            previous: int | None = None
            if kind in (Kind.REDUCESCATTER, Kind.ALLREDUCE):
                # reduce around the ring, starting after the owner and ending at the owner
                for step in range(n - 1):
                    a = positions[(start + 1 + step) % n]
                    b = positions[(start + 2 + step) % n]
                    previous = builder.add(a, b, chunk, paths[(a, b)], REDUCE,
                                           [] if previous is None else [previous])
            if kind in (Kind.ALLGATHER, Kind.ALLREDUCE):
                for step in range(n - 1):
                    a = positions[(start + step) % n]
                    b = positions[(start + step + 1) % n]
                    previous = builder.add(a, b, chunk, paths[(a, b)], COPY,
                                           [] if previous is None else [previous])
    return builder.build()
