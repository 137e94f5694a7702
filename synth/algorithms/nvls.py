"""NVLS: collectives reduced and multicast inside the switch of one NVLink domain, as NCCL runs them.

NVLink SHARP (third-generation NVSwitch and later: DGX/HGX H100, H200, B200, GB200 NVL72) reduces and
multicasts in the switch. NCCL's NVLS algorithm (NCCL 2.17 and later, ``src/device/all_reduce.h`` and
``src/device/reduce_scatter.h`` / ``all_gather.h`` of the 2.2x releases) runs, inside one NVLink domain:

- **reduce-scatter**: each rank issues ``multimem.ld_reduce`` for its share: the switch reads that share
  on every gpu of the group, reduces, and returns one sum to the rank. In the schedule: one reduce switch
  op per chunk, an input leg from every rank, one output leg to the chunk's owner;
- **allgather**: each rank stores its share with ``multimem.st``: one multicast switch op per chunk, the
  owner's input leg, an output leg to every other rank;
- **allreduce**: the two in one kernel: rank ``c mod N`` reduces chunk ``c`` in the switch and
  multicasts the sum back (its multicast input depends on its reduce output);
- **reduce** and **broadcast** (NCCL does not run these with NVLS; they are the same operations towards
  or from one root): one reduce op per chunk into the root, one multicast op per chunk from the root.

Every gpu's link then carries about one buffer each way for allreduce ((N+1)/N of it: its share goes out
twice, once to be reduced and once to be multicast), against 2(N-1)/N for a ring; the switch forms every
sum once, so its ``reduction.throughput`` is the other limit.

It applies where one switch links straight to every gpu and declares what the collective needs (a
``reduction`` for reduce-scatter, allreduce and reduce; a ``multicast`` for allgather, broadcast and
allreduce) with a ``max_group`` of at least N: NCCL builds NVLS only inside one NVLink domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from synth.algorithms.utils import make_collective
from synth.collectives import REDUCING, Kind
from synth.errors import NotApplicable
from synth.schedule import Schedule, ScheduleBuilder
from synth.topology import Topology

#: The element type the in-switch reductions name (NCCL's NVLS serves f32, f16 and bf16 sums).
DEFAULT_DTYPE = "bf16"


def domain_switch(topology: Topology, ranks: Sequence[int], kind: Kind) -> str:
    """The switch that links straight to every gpu of ``ranks`` (both ways) and serves ``kind`` in the
    switch for a group of that size; :class:`NotApplicable` saying why when there is none.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> domain_switch(load_topology("dgx-h100"), range(8), Kind.ALLREDUCE)
    'nvs'
    """
    graph = topology.graph
    gpus = [topology.gpus[r] for r in ranks]
    reduces = kind in REDUCING
    multicasts = kind in (Kind.ALLGATHER, Kind.BROADCAST, Kind.ALLREDUCE)
    reasons = []
    for switch in topology.switches:
        if not all(graph.has_edge(g, switch) and graph.has_edge(switch, g) for g in gpus):
            continue
        reduction = topology.reduction(switch)
        if reduces and reduction is None:
            reasons.append(f"switch {switch} links every gpu but does not reduce")
            continue
        if reduces and reduction is not None and (reduction.max_group is not None
                                                  and reduction.max_group < len(gpus)):
            reasons.append(f"switch {switch} reduces groups of at most {reduction.max_group}, not {len(gpus)}")
            continue
        if reduces and reduction is not None and ("sum" not in reduction.ops or DEFAULT_DTYPE not in reduction.dtypes):
            reasons.append(f"switch {switch} does not reduce {DEFAULT_DTYPE} sums")
            continue
        if multicasts and not topology.multicasts(switch):
            reasons.append(f"switch {switch} links every gpu but does not multicast")
            continue
        return switch
    why = "; ".join(reasons) if reasons else "no switch links straight to every gpu (NVLS runs inside one NVLink domain)"
    raise NotApplicable(f"nvls {kind} on {topology.name}: {why}")


def leg_path(topology: Topology, gpu: str, switch: str, *, inward: bool) -> tuple[str, ...]:
    """The fewest-hop path from ``gpu`` to ``switch`` (``inward``) or back, through switches only (a gpu
    does not forward a leg); ties go to the first neighbour in node order. :class:`NotApplicable` when
    there is none.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> leg_path(load_topology("dgx-h100"), "gpu3", "nvs", inward=False)
    ('nvs', 'gpu3')
    """
    graph = topology.graph
    start, goal = (gpu, switch) if inward else (switch, gpu)
    cache: dict[str, tuple[str, ...]] = topology.memoized(__name__, ("leg paths", start, inward), dict)
    if goal in cache:
        return cache[goal]
    step = graph.successors if inward else graph.predecessors
    origin = gpu
    parent: dict[str, str | None] = {origin: None}
    frontier = [origin]
    while frontier:
        following = []
        for node in frontier:
            for near in sorted(step(node)):
                if near in parent:
                    continue
                parent[near] = node
                if not topology.is_gpu(near):
                    following.append(near)
        frontier = following
    target = switch
    if target not in parent:
        raise NotApplicable(f"no path from {gpu} {'to' if inward else 'from'} switch {switch} through switches")
    nodes = [target]
    while parent[nodes[-1]] is not None:
        nodes.append(parent[nodes[-1]])  # type: ignore[arg-type]
    path = tuple(reversed(nodes)) if inward else tuple(nodes)
    cache[goal] = path
    return path


def switch_reduce(builder: ScheduleBuilder, topology: Topology, switch: str, chunk: int, sources: Iterable[int],
                  targets: Iterable[int], deps: Mapping[int, Sequence[int]] | None = None,
                  src_scratch: Mapping[int, int] | None = None, dtype: str = DEFAULT_DTYPE) -> dict[int, int]:
    """Add one in-switch reduce of ``chunk``: an input leg from each rank of ``sources`` (its data cell,
    or its scratch slot in ``src_scratch``, after its ``deps``), the sum copied to each rank of ``targets``
    (several: the switch multicasts it). Returns the output legs' ids by target rank."""
    gpus = topology.gpus
    op = builder.add_switch_op(switch, "reduce", chunk, "sum", dtype)
    for rank in sources:
        builder.add_to_switch(rank, op, leg_path(topology, gpus[rank], switch, inward=True),
                              (deps or {}).get(rank, ()), (src_scratch or {}).get(rank))
    return {rank: builder.add_from_switch(op, rank, leg_path(topology, gpus[rank], switch, inward=False))
            for rank in targets}


def switch_multicast(builder: ScheduleBuilder, topology: Topology, switch: str, chunk: int, source: int,
                     targets: Iterable[int], deps: Sequence[int] = ()) -> dict[int, int]:
    """Add one in-switch multicast of ``chunk`` from rank ``source`` (after ``deps``) to each rank of
    ``targets``; returns the output legs' ids by target rank."""
    gpus = topology.gpus
    op = builder.add_switch_op(switch, "multicast", chunk)
    builder.add_to_switch(source, op, leg_path(topology, gpus[source], switch, inward=True), deps)
    return {rank: builder.add_from_switch(op, rank, leg_path(topology, gpus[rank], switch, inward=False))
            for rank in targets}


def nvls(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None) -> Schedule:
    """NCCL's NVLS in one NVLink domain (see the module doc): one in-switch op per chunk and phase.

    ``chunks``: chunks per buffer (default N; allreduce and reduce-scatter spread them over the ranks,
    rank ``c mod N`` taking chunk ``c`` for allreduce).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.verify import verify
    >>> topo = load_topology("dgx-h100")
    >>> s = nvls(topo, Kind.ALLREDUCE)
    >>> len(s.switch_ops), len(s.transfers), verify(s, topo).transfers  # 8 reduces + 8 multicasts
    (16, 136, 136)
    """
    n = topology.num_ranks
    coll = make_collective(topology, kind, chunks, root, default_chunks=n)
    switch = domain_switch(topology, range(n), kind)
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "nvls", {"chunks": coll.chunks})
    everyone = range(n)
    for chunk in range(coll.chunks):
        if kind == Kind.ALLREDUCE:
            owner = chunk % n
            reduced = switch_reduce(builder, topology, switch, chunk, everyone, [owner])
            switch_multicast(builder, topology, switch, chunk, owner, [r for r in everyone if r != owner],
                             [reduced[owner]])
        elif kind == Kind.REDUCESCATTER:
            switch_reduce(builder, topology, switch, chunk, everyone, [coll.owner(chunk)])
        elif kind == Kind.REDUCE:
            switch_reduce(builder, topology, switch, chunk, everyone, [coll.root])  # type: ignore[list-item]
        elif kind == Kind.ALLGATHER:
            owner = coll.owner(chunk)
            switch_multicast(builder, topology, switch, chunk, owner, [r for r in everyone if r != owner])
        elif kind == Kind.BROADCAST:
            assert coll.root is not None
            switch_multicast(builder, topology, switch, chunk, coll.root, [r for r in everyone if r != coll.root])
        else:
            raise NotApplicable(f"nvls does not do {kind} (the switch reduces and multicasts; alltoall does neither)")
    return builder.build()
