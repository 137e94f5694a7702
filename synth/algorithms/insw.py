"""insw: a collective split between in-switch operations and a point-to-point schedule, per level of the fabric.

A switch that reduces in place (NVLink SHARP) forms every sum once, but only at its ``reduction.throughput``
R; on DGX H100 R (334.5 GB/s) is below what the gpus' links carry, so NVLS alone leaves link capacity
unused, and a ring alone leaves the switch unused. The in-switch allreduce bound
(:func:`synth.bounds.time_bound`) is reached by splitting the data: a fraction f combined in the switch,
the rest moved point to point on the links' remaining capacity. This algorithm builds that split on
explicit options; which ``switch_share`` is fastest at a message size is chosen in :mod:`synth.choose.insw`.

- **one NVLink domain** (a switch links straight to every gpu and reduces and multicasts): of each rank's
  block of chunks, ``s`` go through the switch and ``p`` through a ring (:func:`synth.algorithms.ring.ring`
  built on ``p`` chunks per rank and merged into the same schedule by renumbering its ids, chunks and
  scratch slots). A switch chunk of an allreduce is one reduce op whose output is multicast by the switch
  to every rank (``fused``, the default: each gpu's link carries the chunk once each way), or, with
  ``fused=False``, NCCL's NVLS pair (a reduce to the chunk's rank, then its ``multimem.st`` multicast: the
  rank's share crosses its link twice); reduce-scatter uses reduce ops into the owner, allgather multicasts
  from it. ``switch_share`` 1 with ``fused=False`` and N chunks is the ``nvls`` schedule; 0 is the ring.
- **several boxes** (each box one NVLink domain, no switch spanning them): a switch chunk is reduced in each
  box's switch into the gpu on the chunk's rail (the gpu at its owner's position in the box), then across
  boxes among the rail's gpus, by one in-network reduction where a switch every rail gpu reaches through
  switches reduces (a SHARP leaf: inputs from every box, the sum multicast back to each), else by a ring
  of the rail gpus over their NICs; then multicast inside each box (allreduce). Reduce-scatter ends at the
  owner; allgather multicasts across boxes (in the network switch or along the rail ring), then in each
  box. The share is the box level's: the other chunks go the same way between boxes but point to point
  inside each box (partial sums along a chain of its gpus into the rail gpu, the result copied back along
  it), so a box switch whose reduction throughput is below the NICs' (DGX H100: 334.5 GB/s against eight
  50 GB/s NICs) leaves the rest to its NVLinks. ``network=False`` uses the rail rings even where a
  network switch reduces. ``between="tree"`` replaces an allreduce's rail ring by NCCL's double binary tree
  of the rail gpus (:func:`synth.algorithms.nvls_tree.tree_allreduce`: partial sums up into the root, the
  total back down; successive rounds of a rail's chunks alternate the two trees): 2 log2(B) steps between B
  boxes instead of the ring's 2(B - 1), which wins at small sizes, where each step's latency is the cost.

The fewest chunks that give the asked share are used (``s`` and ``p`` per rank with ``s / (s + p)`` nearest
to it; ``chunks`` fixes the total, then ``s`` is rounded); ``params["switch_share"]`` is the share built.
An allreduce on several boxes needs no multiple of N chunks: a chunk lives on one rail, not at one rank, so
``chunks`` may be any multiple of the box size (B or 2B chunks, as CollNet and NVLS-Tree cut the buffer,
pay the per-chunk latency fewer times at small sizes).
A topology where no switch reduces (or multicasts, for an allgather) is refused: without in-switch
operations use ring or forest.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from synth.algorithms.nvls import domain_switch, leg_path, switch_multicast, switch_reduce
from synth.algorithms.utils import make_collective, send
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.schedule import COPY, REDUCE, Schedule, ScheduleBuilder
from synth.topology import Topology

__all__ = ["DEFAULT_MAX_DENOMINATOR", "fusable", "insw", "merge", "parse_share", "split_counts"]

#: The finest share the default chunk count resolves (s + p per rank at most this).
DEFAULT_MAX_DENOMINATOR = 16
_KINDS = (Kind.ALLREDUCE, Kind.REDUCESCATTER, Kind.ALLGATHER)


def parse_share(value: Any) -> Fraction:
    """``switch_share`` as an exact fraction in [0, 1]: a Fraction, an int, a float or a string such as
    ``"3/4"`` or ``"0.75"``; :class:`InputError` otherwise.

    Examples
    --------
    >>> parse_share("5/8"), parse_share(0.75), parse_share(1)
    (Fraction(5, 8), Fraction(3, 4), Fraction(1, 1))
    """
    try:
        if isinstance(value, bool):
            raise TypeError
        share = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    except (TypeError, ValueError, ZeroDivisionError):
        raise InputError("", "switch_share", f"expected a fraction in [0, 1] such as 3/4 or 0.75, got {value!r}") from None
    if not 0 <= share <= 1:
        raise InputError("", "switch_share", f"expected a fraction in [0, 1] (1: all in the switch, 0: none), got {value!r}")
    return share


def split_counts(share: Fraction, per_rank: int | None, p_step: int = 1,
                 max_denominator: int = DEFAULT_MAX_DENOMINATOR) -> tuple[int, int]:
    """Chunks per rank through the switch and point to point, ``(s, p)``: with ``per_rank`` given, s =
    the share of it rounded (p a multiple of ``p_step``); otherwise the fewest with s / (s + p) nearest to
    ``share`` and s + p at most ``max_denominator``.

    Examples
    --------
    >>> split_counts(Fraction(3, 4), None), split_counts(Fraction(1), None), split_counts(Fraction(0), None)
    ((3, 1), (1, 0), (0, 1))
    >>> split_counts(Fraction(5, 6), 8)
    (7, 1)
    """
    if per_rank is not None:
        s = int(round(share * per_rank))
        if share > 0 and s == 0:
            s = 1
        if share < 1 and s == per_rank:
            s = per_rank - 1
        if (per_rank - s) % p_step:
            raise InputError("", "chunks", f"insw needs the point-to-point chunks per rank ({per_rank - s}) to be a "
                             f"multiple of {p_step}")
        return s, per_rank - s
    if share == 1:
        return 1, 0
    if share == 0:
        return 0, p_step
    best: tuple[Fraction, int, int] | None = None
    for total in range(1, max_denominator + 1):
        for s in range(1, total):
            p = total - s
            if p % p_step:
                continue
            error = abs(Fraction(s, total) - share)
            if best is None or error < best[0]:
                best = (error, s, p)
    if best is None:
        raise InputError("", "switch_share", f"no split within {max_denominator} chunks per rank")
    return best[1], best[2]


def merge(builder: ScheduleBuilder, part: Schedule, chunk_of: Callable[[int], int]) -> None:
    """Append every transfer and switch op of ``part`` to ``builder``: ids and deps shifted past what the
    builder holds, chunks renamed by ``chunk_of``, scratch slots shifted past the ones each rank uses."""
    offset = len(builder.transfers)
    base = list(builder.scratch_used)
    op_base = len(builder.switch_ops)
    for op in part.switch_ops:
        builder.add_switch_op(op.switch, op.kind, chunk_of(op.chunk), op.op, op.dtype)

    def slot(rank: int | None, value: int | None) -> int | None:
        return None if value is None or rank is None else base[rank] + value

    for t in part.transfers:
        deps = [offset + d for d in t.deps]
        src_slot, dst_slot = slot(t.src, t.src_scratch), slot(t.dst, t.dst_scratch)
        if t.to_switch is not None:
            assert t.src is not None
            tid = builder.add_to_switch(t.src, op_base + t.to_switch, t.path, deps, src_slot)
        elif t.from_switch is not None:
            assert t.dst is not None
            tid = builder.add_from_switch(op_base + t.from_switch, t.dst, t.path, t.op, deps, dst_slot)
        else:
            assert t.src is not None and t.dst is not None
            tid = builder.add(t.src, t.dst, chunk_of(t.chunk), t.path, t.op, deps, src_slot, dst_slot)
        assert tid == offset + t.id
    for rank, used in enumerate(part.scratch_slots()):
        builder.scratch_used[rank] = max(builder.scratch_used[rank], base[rank] + used)


def insw(topology: Topology, kind: Kind, *, chunks: int | None = None, switch_share: Any = 1,
         fused: bool = True, network: bool = True, between: str = "ring") -> Schedule:
    """The collective with ``switch_share`` of its chunks through in-switch operations and the rest on a
    ring (see the module doc).

    ``chunks``: the total C (a multiple of N; by default the fewest that give the share). An allreduce on
    several boxes also takes a multiple of the box size B: each chunk then runs on one rail, and the share
    is taken of each rail's chunks (CollNet's chunking: fewer, larger chunks than N per rank).
    ``fused``: an allreduce's switch chunk is one reduce op multicast by the switch (True), or NCCL's NVLS
    pair, a reduce into one rank and its multicast (False).
    ``network``: on several boxes, reduce (or multicast) between boxes in a network switch where one serves
    the rail (True), or always point to point among the rail gpus (False).
    ``between``: how an allreduce goes point to point between boxes: ``"ring"`` (a ring of the rail gpus)
    or ``"tree"`` (double binary trees of them); reduce-scatter and allgather take ``"ring"`` only.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.verify import verify
    >>> topo = load_topology("dgx-h100")
    >>> s = insw(topo, Kind.ALLREDUCE, switch_share="3/4")
    >>> s.chunks, s.params["switch_share"], len(s.switch_ops), verify(s, topo).transfers
    (32, '3/4', 24, 496)
    """
    if kind not in _KINDS:
        raise NotApplicable(f"insw does not do {kind}; it does allreduce, reducescatter and allgather")
    for name, value in (("fused", fused), ("network", network)):
        if not isinstance(value, bool):
            raise InputError("", name, f"expected true or false, got {value!r}")
    if between not in ("ring", "tree"):
        raise InputError("", "between", f"expected ring or tree, got {between!r}")
    if between == "tree" and kind != Kind.ALLREDUCE:
        raise InputError("", "between", f"insw {kind} goes between boxes on rings only (a tree is for allreduce)")
    share = parse_share(switch_share)
    n = topology.num_ranks
    levels = _levels(topology, kind, network, between)
    rails = len(levels.boxes[0]) if levels.switch is None and kind == Kind.ALLREDUCE else n
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < rails
                               or chunks % rails):
        what = f"{n} (the ranks)" if rails == n else f"{rails} (the gpus of a box: an allreduce's chunk runs on one rail)"
        raise InputError("", "chunks", f"insw needs chunks to be a positive multiple of {what}, got {chunks!r}")
    if chunks is not None and chunks % n:
        return _by_rail(topology, levels, chunks, share)
    s, p = split_counts(share, None if chunks is None else chunks // n)
    q = s + p
    coll = make_collective(topology, kind, n * q, None)
    built = Fraction(s, q)
    params: dict[str, Any] = {"chunks": coll.chunks, "switch_share": str(built), "levels": levels.describe()}
    if kind == Kind.ALLREDUCE and levels.switch is not None and s:
        params["fused"] = fused  # the only case where the two forms differ
    if built != share:
        params["asked_share"] = str(share)
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "insw", params)
    for owner in range(n):
        for j in range(s if levels.switch is not None else q):
            levels.add_chunk(builder, owner * q + j, owner, fused, in_switch=j < s)
    if p and levels.switch is not None:
        from synth.algorithms.ring import ring

        part = ring(topology, kind, chunks=n * p)
        merge(builder, part, lambda c: (c // p) * q + s + c % p)
    return builder.build()


def _by_rail(topology: Topology, levels: _Levels, chunks: int, share: Fraction) -> Schedule:
    """An allreduce on several boxes in ``chunks`` chunks, a multiple of the box size B but not of the ranks:
    chunk c runs on rail c mod B (ending, for a rail ring, in box (c div B) mod the boxes); of each rail's
    chunks the first ``share`` (rounded as :func:`split_counts` does) go through the box switches."""
    width, count = len(levels.boxes[0]), len(levels.boxes)
    per_rail = chunks // width
    s, p = split_counts(share, per_rail)
    coll = make_collective(topology, Kind.ALLREDUCE, chunks, None)
    built = Fraction(s, per_rail)
    params: dict[str, Any] = {"chunks": chunks, "switch_share": str(built), "levels": levels.describe()}
    if built != share:
        params["asked_share"] = str(share)
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "insw", params)
    for chunk in range(chunks):
        rail, j = chunk % width, chunk // width
        levels.add_chunk(builder, chunk, levels.boxes[j % count][rail], True, in_switch=j < s)
    return builder.build()


class _Levels:
    """Where a switch chunk goes: the domain switch (one box), or per box then between boxes."""

    def __init__(self, topology: Topology, kind: Kind, switch: str | None, boxes: list[list[int]] | None = None,
                 box_switches: list[str] | None = None, network: bool = True, between: str = "ring") -> None:
        self.topology = topology
        self.kind = kind
        self.switch = switch
        self.boxes = boxes or []
        self.box_switches = box_switches or []
        self.position = {rank: (b, i) for b, box in enumerate(self.boxes) for i, rank in enumerate(box)}
        self._network: dict[int, str | None] = {}
        self.network = network
        self.between = between
        self._trees: dict[int, tuple[list[int | None], list[int | None]]] = {}
        self._paths: dict[tuple[int, int], tuple[str, ...]] = {}

    def describe(self) -> str:
        if self.switch is not None:
            return f"one NVLink domain (switch {self.switch})"
        rails = [self.network_switch(r) if self.network else None for r in range(len(self.boxes[0]))]
        point = "double binary trees" if self.between == "tree" else "rings"
        between = "in-network reduction (" + ", ".join(sorted({x for x in rails if x})) + ")" if all(rails) else \
            f"{point} of the rail gpus" if not any(rails) else \
            f"in-network reduction where a switch serves the rail, else {point}"
        return f"{len(self.boxes)} boxes: in-switch inside each box, {between} between them"

    def network_switch(self, rail: int) -> str | None:
        """The switch that every gpu of rail ``rail`` reaches through switches, both ways, and that does the
        between-box step in the switch (fewest hops in all; ties by name), or None."""
        if rail in self._network:
            return self._network[rail]
        topology, kind = self.topology, self.kind
        members = [box[rail] for box in self.boxes]
        best: tuple[int, str] | None = None
        for switch in sorted(topology.capabilities):
            if switch in self.box_switches:
                continue
            reduction = topology.reduction(switch)
            if kind in (Kind.ALLREDUCE, Kind.REDUCESCATTER):
                if reduction is None or "sum" not in reduction.ops or "bf16" not in reduction.dtypes or (
                        reduction.max_group is not None and reduction.max_group < len(members)):
                    continue
            if kind in (Kind.ALLREDUCE, Kind.ALLGATHER) and not topology.multicasts(switch):
                continue
            try:
                hops = sum(len(leg_path(topology, topology.gpus[r], switch, inward=True))
                           + len(leg_path(topology, topology.gpus[r], switch, inward=False)) for r in members)
            except NotApplicable:
                continue
            if best is None or (hops, switch) < best:
                best = (hops, switch)
        self._network[rail] = None if best is None else best[1]
        return self._network[rail]

    def add_chunk(self, builder: ScheduleBuilder, chunk: int, owner: int, fused: bool, in_switch: bool = True) -> None:
        if self.switch is not None:
            self._one_domain(builder, chunk, owner, fused)
        else:
            self._boxes(builder, chunk, owner, in_switch)

    def _one_domain(self, builder: ScheduleBuilder, chunk: int, owner: int, fused: bool) -> None:
        topology, switch, kind = self.topology, self.switch, self.kind
        assert switch is not None
        everyone = range(topology.num_ranks)
        others = [r for r in everyone if r != owner]
        if kind == Kind.ALLREDUCE and fused:
            switch_reduce(builder, topology, switch, chunk, everyone, everyone)
        elif kind == Kind.ALLREDUCE:
            reduced = switch_reduce(builder, topology, switch, chunk, everyone, [owner])
            switch_multicast(builder, topology, switch, chunk, owner, others, [reduced[owner]])
        elif kind == Kind.REDUCESCATTER:
            switch_reduce(builder, topology, switch, chunk, everyone, [owner])
        else:
            switch_multicast(builder, topology, switch, chunk, owner, others)

    def _boxes(self, builder: ScheduleBuilder, chunk: int, owner: int, in_switch: bool) -> None:
        """One chunk over the levels: in each box (by the box's switch when ``in_switch``, else along a chain
        of its gpus), between the boxes on the owner's rail, then in each box again (allreduce, allgather)."""
        topology, kind = self.topology, self.kind
        home, rail = self.position[owner]
        members = [box[rail] for box in self.boxes]
        ready: dict[int, list[int]] = {r: [] for r in members}  # the transfer that wrote each rail gpu's value
        if kind in (Kind.ALLREDUCE, Kind.REDUCESCATTER):
            for b, box in enumerate(self.boxes):
                if in_switch:
                    out = switch_reduce(builder, topology, self.box_switches[b], chunk, box, [members[b]])
                    ready[members[b]] = [out[members[b]]]
                else:
                    ready[members[b]] = self._box_chain(builder, chunk, box, rail, reduce=True, deps=[])
        network = self.network_switch(rail) if self.network else None
        if kind == Kind.ALLGATHER:
            if network is not None:
                outs = switch_multicast(builder, topology, network, chunk, owner, [r for r in members if r != owner])
                ready.update({r: [t] for r, t in outs.items()})
            else:
                ready.update(self._rail_ring(builder, chunk, members, home, reduce=False, ready=ready))
        elif network is not None:
            targets = members if kind == Kind.ALLREDUCE else [owner]
            outs = switch_reduce(builder, topology, network, chunk, members, targets, deps=ready)
            ready.update({r: [t] for r, t in outs.items()})
        elif self.between == "tree":
            ready.update(self._rail_tree(builder, chunk, members, len(self.boxes[0]), ready))
        else:
            ready.update(self._rail_ring(builder, chunk, members, home, reduce=True, ready=ready))
        if kind == Kind.REDUCESCATTER:
            return
        for b, box in enumerate(self.boxes):
            source = members[b]
            if in_switch:
                switch_multicast(builder, topology, self.box_switches[b], chunk, source,
                                 [r for r in box if r != source], ready[source])
            else:
                self._box_chain(builder, chunk, box, rail, reduce=False, deps=ready[source])

    def _box_chain(self, builder: ScheduleBuilder, chunk: int, box: list[int], rail: int, *, reduce: bool,
                   deps: list[int]) -> list[int]:
        """A chunk point to point inside one box: partial sums along a chain of its gpus into ``box[rail]``
        (``reduce``), or ``box[rail]``'s value copied along the chain to every other gpu. The last transfer."""
        count = len(box)
        previous = list(deps)
        for step in range(count - 1):
            if reduce:
                a, b = box[(rail + 1 + step) % count], box[(rail + 2 + step) % count]
            else:
                a, b = box[(rail + step) % count], box[(rail + step + 1) % count]
            previous = [send(builder, self.topology, a, b, chunk, REDUCE if reduce else COPY, previous)]
        return previous

    def _rail_tree(self, builder: ScheduleBuilder, chunk: int, members: list[int], width: int,
                   ready: dict[int, list[int]]) -> dict[int, list[int]]:
        """An allreduce's between-box step on a double binary tree of the rail's gpus (the first tree for
        even rounds ``chunk // width`` of the chunks, the second for odd): the transfers after which each
        gpu holds the total."""
        from synth.algorithms.nvls_tree import tree_allreduce
        from synth.algorithms.ring import paths_for
        from synth.algorithms.tree import double_binary_tree

        count = len(members)
        if count not in self._trees:
            self._trees[count] = double_binary_tree(count)
        pairs = [(a, b) for a in members for b in members if a != b and (a, b) not in self._paths]
        if pairs:
            self._paths.update(paths_for(self.topology, pairs))
        parents = self._trees[count][(chunk // width) % 2]
        done = tree_allreduce(builder, self.topology, chunk, members, parents,
                              {k: ready[r] for k, r in enumerate(members)}, self._paths)
        return {members[k]: deps for k, deps in done.items()}

    def _rail_ring(self, builder: ScheduleBuilder, chunk: int, members: list[int], home: int, *, reduce: bool,
                   ready: dict[int, list[int]]) -> dict[int, list[int]]:
        """The between-box step on a ring of the rail's gpus (``members[home]`` the owner's): partial sums
        around it into the owner (``reduce``; an allreduce then copies the sum on around), or the owner's
        value copied around (an allgather). The transfers that wrote each gpu's final value."""
        topology, count = self.topology, len(members)
        written: dict[int, list[int]] = {}
        if reduce:
            previous: list[int] = []
            for step in range(count - 1):
                a, b = members[(home + 1 + step) % count], members[(home + 2 + step) % count]
                previous = [send(builder, topology, a, b, chunk, REDUCE, [*previous, *ready[a], *ready[b]])]
            written[members[home]] = previous
            if self.kind == Kind.REDUCESCATTER:
                return written
        previous = written.get(members[home], ready[members[home]])
        for step in range(count - 1):
            a, b = members[(home + step) % count], members[(home + step + 1) % count]
            previous = [send(builder, topology, a, b, chunk, COPY, [*previous, *ready[b]])]
            written[b] = previous
        return written


def fusable(topology: Topology, kind: Kind) -> bool:
    """True when ``fused`` makes a difference: an allreduce in one NVLink domain (elsewhere a network
    switch's reduction always multicasts its result, and the box switches only reduce or only multicast).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> fusable(load_topology("dgx-h100"), Kind.ALLREDUCE), fusable(load_topology("dgx-h100:boxes=2"), Kind.ALLREDUCE)
    (True, False)
    """
    return kind == Kind.ALLREDUCE and _levels(topology, kind).switch is not None


def _levels(topology: Topology, kind: Kind, network: bool = True, between: str = "ring") -> _Levels:
    """The fabric's levels for ``kind``'s in-switch chunks; :class:`NotApplicable` saying why there are none."""
    try:
        return _Levels(topology, kind, domain_switch(topology, range(topology.num_ranks), kind))
    except NotApplicable as error:
        whole = str(error).split(": ", 1)[-1]
    from synth.algorithms.ring import box_groups

    boxes = box_groups(topology)
    if boxes is None:
        raise NotApplicable(f"insw {kind} on {topology.name}: no in-switch operations to split with ({whole}); "
                            "without them use ring or forest")
    switches = []
    for box in boxes:
        try:
            switches.append(domain_switch(topology, box, kind))
        except NotApplicable as error:
            raise NotApplicable(f"insw {kind} on {topology.name}: no in-switch operations inside box "
                                f"{topology.gpus[box[0]]}.. ({str(error).split(': ', 1)[-1]}); without them use ring "
                                "or forest") from None
    return _Levels(topology, kind, None, boxes, switches, network, between)
