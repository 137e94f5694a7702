"""Ring allgather, reduce-scatter and allreduce, on one ring or several (channels).

The ring follows a Hamiltonian cycle of switch-only hops when one exists (found deterministically), else
one of hops through switches and forwarding gpus; otherwise ranks in order, each hop along a shortest
path, or through relay gpus where no path joins two neighbours without crossing a gpu that does not
forward (:func:`synth.algorithms.utils.send`). With C = m*N chunks every block of m chunks travels the
ring independently, which pipelines large messages.

With ``channels=k`` (as NCCL runs several rings), the data is split into k equal parts and part i
travels its own ring: even channels run a ring forward, odd channels the same ring backwards (so a
bidirectional ring uses both directions), and channels 2j, 2j+1 use the j-th of a list of rings that
share no link with each other when the topology has such rings (else the rings repeat).
"""

from __future__ import annotations

from synth.algorithms.utils import hamiltonian_cycle, hamiltonian_ring, make_collective, send
from synth.collectives import Kind
from synth.errors import InputError
from synth.routing import neighbors
from synth.schedule import COPY, REDUCE, Schedule, ScheduleBuilder
from synth.topology import Topology

#: Largest accepted channel count.
MAX_CHANNELS = 64


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


def channel_rings(topology: Topology, channels: int, order: list[int] | None = None) -> list[list[int]]:
    """The rank order of each channel's ring (see the module docstring).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> channel_rings(load_topology("ring:n=4"), 2)
    [[0, 1, 2, 3], [3, 2, 1, 0]]
    """
    base = ring_order(topology, order)
    n = topology.num_ranks
    cycles = [base]
    wanted = (channels + 1) // 2
    if wanted > 1 and n > 3:
        near = {r: set(neighbors(topology, r, via_gpus=False)) for r in range(n)}
        adjacency = {r: {v for v in near[r] if r in near[v]} for r in range(n)}
        used: set[frozenset[int]] = set()
        while len(cycles) < wanted:
            for i, rank in enumerate(cycles[-1]):
                used.add(frozenset((rank, cycles[-1][(i + 1) % n])))
            free = {r: {v for v in adjacency[r] if frozenset((r, v)) not in used} for r in range(n)}
            cycle = hamiltonian_cycle(free)
            if cycle is None:
                break
            cycles.append(cycle)
    rings = []
    for channel in range(channels):
        cycle = cycles[(channel // 2) % len(cycles)]
        rings.append(cycle[::-1] if channel % 2 else list(cycle))
    return rings


def ring(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
         order: list[int] | None = None, reverse: bool = False, channels: int = 1) -> Schedule:
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
    channels : int
        Number of rings; each carries 1/channels of the data (default 1, one ring).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = ring(load_topology("ring:n=4"), Kind.ALLREDUCE)
    >>> len(s.transfers)  # 2 (N-1) steps of N transfers
    24
    >>> ring(load_topology("ring:n=4"), Kind.ALLGATHER, channels=2).params["orders"]
    [[0, 1, 2, 3], [3, 2, 1, 0]]
    """
    n = topology.num_ranks
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= MAX_CHANNELS:
        raise InputError("", "channels", f"expected an integer in 1..{MAX_CHANNELS}, got {channels!r}")
    coll = make_collective(topology, kind, chunks, root, default_chunks=n * channels)
    if coll.chunks % (n * channels):
        raise InputError("", "chunks", f"ring with {channels} channel(s) needs chunks to be a multiple of "
                         f"{n * channels} (ranks x channels), got {coll.chunks}")
    rings = channel_rings(topology, channels, order)
    if reverse:
        rings = [r[::-1] for r in rings]
    per = coll.chunks // n
    params: dict[str, object] = {"order": rings[0], "chunks": coll.chunks}
    if channels > 1:
        params.update(channels=channels, orders=rings)
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "ring", params)
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
