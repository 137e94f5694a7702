"""Direct algorithms: every rank sends its data straight to every rank that needs it.

Alltoall is the pairwise exchange; allgather sends each owned chunk to all others. Every message takes
the shortest path through switches and forwarding gpus (:func:`synth.routing.route`). A pair with no
such path (two gpus without a link on an NVLink mesh, say) goes through relay gpus
(:func:`synth.routing.relay_chain`): for allgather the relay is a rank that receives the chunk anyway,
so it forwards what it received (each rank still receives each chunk once: per owner the transfers form
a shortest-path tree); for alltoall the chunk passes through a scratch slot of each relay.

Alltoallv (``demand=``, see :mod:`synth.demand`) is NCCL's grouped send/receive: every pair's chunks go
straight along its route, all at once, exactly as for alltoall. Allgatherv (``shards=``, uneven shards):
each rank's shard goes straight to every other rank, as for allgather.
"""

from __future__ import annotations

from typing import Any

from synth.algorithms.utils import alltoallv_collective, make_collective, send, sharded_collective
from synth.collectives import Kind
from synth.errors import NotApplicable
from synth.routing import relay_chain, route
from synth.schedule import Schedule, ScheduleBuilder
from synth.topology import Topology


def direct(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
           demand: Any = None, shards: Any = None) -> Schedule:
    """Direct allgather, alltoall or alltoallv; transfers start at once (no deps) except relays' onward
    copies. ``demand`` (alltoallv only): a Demand, its chunks or a chunk-count matrix; default 1 per pair.
    ``shards`` (allgather only): each rank's shard size (uneven shards, allgatherv); ``chunks`` then counts
    every chunk, a multiple of the shards' weights (default one chunk per unit of weight).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> len(direct(load_topology("switch:n=4"), Kind.ALLTOALL).transfers)  # N (N-1) pairs
    12
    >>> s = direct(load_topology("dgx1"), Kind.ALLGATHER)
    >>> len(s.transfers), sum(1 for t in s.transfers if t.deps)  # 8 x 7 receptions, 8 x 3 of them relayed
    (56, 24)
    >>> len(direct(load_topology("switch:n=3"), Kind.ALLTOALLV, demand=[[0, 2, 0], [1, 0, 0], [0, 0, 0]]).transfers)
    3
    >>> direct(load_topology("switch:n=3"), Kind.ALLGATHER, shards=[2, 0, 4]).collective.shards  # over their gcd
    (1, 0, 2)
    """
    n = topology.num_ranks
    if kind == Kind.ALLTOALLV:
        coll = alltoallv_collective(topology, demand, chunks, root)
        builder = ScheduleBuilder(coll, topology.name, topology.gpus, "direct", {"chunks": coll.chunks})
        for src in range(n):
            for dst in range(n):
                for chunk in coll.pair_chunks(src, dst):
                    send(builder, topology, src, dst, chunk)
        return builder.build()
    if demand is not None:
        raise NotApplicable(f"a demand is for alltoallv, not {kind}")
    if shards is not None and kind != Kind.ALLGATHER:
        raise NotApplicable(f"direct takes uneven shards for allgather only, not {kind}")
    coll = sharded_collective(topology, kind, shards, chunks, root) or make_collective(topology, kind, chunks, root,
                                                                                       default_chunks=n)
    params: dict[str, Any] = {"chunks": coll.chunks}
    if coll.shards is not None:
        params["shards"] = list(coll.shards)
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "direct", params)
    for src in range(n):
        if kind == Kind.ALLGATHER:
            # relay chains from one source are prefix-closed: receive from the last relay, which got it first
            chains = sorted((relay_chain(topology, src, dst) for dst in range(n) if dst != src), key=lambda c: (len(c), c))
            arrival: dict[tuple[int, int], int] = {}
            for chain in chains:
                sender, dst = chain[-2], chain[-1]
                path = route(topology, sender, dst)
                for local in coll.owned(src):
                    deps = [arrival[(sender, local)]] if sender != src else []
                    arrival[(dst, local)] = builder.add(sender, dst, local, path, "copy", deps)  # type: ignore[arg-type]
        else:
            per = coll.chunks_per_rank
            for dst in range(n):
                if dst != src:
                    for local in range(dst * per, (dst + 1) * per):
                        send(builder, topology, src, dst, src * coll.chunks + local)
    return builder.build()
