"""The exact data-flow verifier.

It replays a schedule symbolically. Every (rank, chunk) data cell holds a value: the set of ranks whose
contribution it holds (an int bitmask); every scratch slot of a rank holds a chunk id and such a set,
or nothing. It rejects, naming the transfer and the reason:

- a transfer whose ``path`` is not made of links, or does not start at ``src`` and end at ``dst``;
- a path that crosses a gpu which does not forward (see :mod:`synth.topology`): that takes a relay, two
  transfers (the gpu's kernel copies the data on);
- a local op (``src == dst``) whose path is not the rank's gpu alone, or that reads and writes the same
  buffer;
- a read of a scratch slot that holds nothing, or another chunk;
- a dependency cycle;
- a send of data the source does not hold yet (the transfer that produced it is not among the
  transitive deps), or of a chunk the source never holds;
- a race: two transfers that write the same cell (data or scratch), or one that writes a cell another
  reads, with no order between them (so the outcome would depend on timing);
- a reduce that would count a contribution twice, or a reduce in a collective that reduces nothing;
- a postcondition (on the data cells) not met at the end;
- ranks, chunks or deps out of range, and a rank list that is not distinct gpus of the topology (every gpu,
  or a process group's members: :mod:`synth.groups`; the conditions then hold over the members only);
- in-switch operations (``switch_ops``, see :mod:`synth.schedule`) that the fabric or the collective does
  not allow: an op on a node that is not a switch, or on a switch whose ``capabilities`` lack it (a
  reduce needs ``reduction``; a multicast, or a reduce with more than one output, needs ``multicast``);
  a reduce whose operation or data type the switch does not serve, with more inputs than its
  ``max_group``, with fewer than two inputs, or in a collective that reduces nothing; a multicast with
  other than one input; an op without outputs (a switch stores nothing); a leg of another chunk than its
  op's, or whose path does not end (an input) or start (an output) at the op's switch; an input leg whose
  ``op`` is not ``copy`` (it hands its value to the switch; the op's kind says what is done); an output
  leg that does not list every input leg of its op among its deps; inputs whose contributions overlap
  (each contribution is counted once). An op's result is the union of its inputs' sets; the outputs then write
  it like any transfer (races, double counting and the postcondition are checked as for the rest).

Order is the transitive closure of ``deps``. Transfers are replayed in a topological order; since all
accesses to a cell are checked to be ordered, every topological order gives the same values, so one
replay proves the result for every execution the deps allow.

Cost: linear in transfers plus the ancestor queries for accesses that are not direct deps; those are
answered by a tree numbering of the deps and a search that jumps along single-dependency stretches (see
:class:`_Reachability`), so a ring or tree schedule of a million transfers verifies in seconds
(``python -m bench --only core``), and schedules whose transfers have several deps each stay near-linear.
The search is bounded by the ``max_verify_steps`` limit (:mod:`synth.limits`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from synth.collectives import Collective
from synth.errors import VerificationError
from synth.graphs import smallest_first_order
from synth.schedule import COPY, REDUCE, Schedule, ScheduleForm, Transfer
from synth.topology import Topology


@dataclass(frozen=True)
class VerifyReport:
    """Facts about a schedule that passed: sizes and the longest dependency chain."""

    transfers: int
    depth: int
    max_chunks_on_a_link: int

    def to_dict(self) -> dict[str, Any]:
        """The facts as ``synth verify --json`` prints them."""
        return {"transfers": self.transfers, "depth": self.depth, "max_chunks_on_a_link": self.max_chunks_on_a_link}

    def describe(self) -> str:
        """The facts in words: ``12 transfers, dependency depth 3``."""
        return f"{self.transfers} transfers, dependency depth {self.depth}"


class Verified(Protocol):
    """What every verifier's report offers, whichever form of schedule it proved
    (:func:`synth.verify_trees.verify_any`)."""

    @property
    def transfers(self) -> int: ...
    @property
    def max_chunks_on_a_link(self) -> int: ...
    def to_dict(self) -> dict[str, Any]: ...
    def describe(self) -> str: ...


def verify(schedule: Schedule, topology: Topology) -> VerifyReport:
    """Check ``schedule`` on ``topology``; return a report or raise :class:`VerificationError`.

    Examples
    --------
    >>> from synth.collectives import Collective, Kind
    >>> from synth.schedule import Transfer
    >>> topo = Topology.build("pair", ["a", "b"], [], [("a", "b", 10.0)])
    >>> coll = Collective(Kind.BROADCAST, 2, 1, root=0)
    >>> s = Schedule(coll, "pair", ("a", "b"), "manual", {}, (Transfer(0, 0, 1, 0, "copy", ("a", "b")),))
    >>> verify(s, topo).transfers
    1
    """
    _check_ranks(schedule, topology)
    link_load = _check_paths(schedule, topology)
    if schedule.switch_ops:
        _check_switch_ops(schedule, topology)
    order, topo_index = _topological_order(schedule)
    depth = _replay(schedule, order, topo_index)
    return VerifyReport(
        transfers=len(schedule.transfers),
        depth=depth,
        max_chunks_on_a_link=max(link_load.values(), default=0),
    )


def _check_ranks(schedule: ScheduleForm, topology: Topology) -> None:
    # a process group: the ranks are members, a subset of the fabric's gpus in any order (synth.groups)
    members = set(schedule.ranks)
    if len(schedule.ranks) != topology.num_ranks and not all(
            g in topology.graph and topology.is_gpu(g) for g in members):
        raise VerificationError(
            f"the schedule has {len(schedule.ranks)} ranks but topology {topology.name!r} has "
            f"{topology.num_ranks} gpus")
    if len(schedule.ranks) != schedule.collective.num_ranks:
        raise VerificationError(f"the schedule lists {len(schedule.ranks)} ranks for a collective on "
                                f"{schedule.collective.num_ranks}")
    if len(set(schedule.ranks)) != len(schedule.ranks):
        raise VerificationError("the schedule lists a gpu twice in 'ranks'")
    for rank, gpu in enumerate(schedule.ranks):
        if gpu not in topology.graph or not topology.is_gpu(gpu):
            raise VerificationError(f"rank {rank} is {gpu!r}, which is not a gpu of topology {topology.name!r}")


def _check_paths(schedule: Schedule, topology: Topology) -> dict[tuple[str, str], int]:
    graph = topology.graph
    blocked = topology.non_forwarding_gpus
    ranks = schedule.ranks
    num_ranks = len(ranks)
    num_ids = schedule.collective.num_chunk_ids
    uses: dict[tuple[str, ...], int] = {}
    for t in schedule.transfers:
        src, dst, path = t.src, t.dst, t.path
        if t.to_switch is not None or t.from_switch is not None:
            _check_leg(t, schedule, topology)
            uses[path] = uses.get(path, 0) + 1
            continue
        if src is None or dst is None:
            end = "dst" if dst is None else "src"
            raise VerificationError(f"transfer {t.id}: {end} is null but it is no leg of a switch op", t.id)
        if not (0 <= src < num_ranks and 0 <= dst < num_ranks):
            name, rank = ("src", src) if not 0 <= src < num_ranks else ("dst", dst)
            raise VerificationError(f"transfer {t.id}: {name} rank {rank} is out of range 0..{num_ranks - 1}", t.id)
        if not 0 <= t.chunk < num_ids:
            raise VerificationError(f"transfer {t.id}: chunk {t.chunk} is out of range 0..{num_ids - 1}", t.id)
        for name, slot in (("src_scratch", t.src_scratch), ("dst_scratch", t.dst_scratch)):
            if slot is not None and (not isinstance(slot, int) or slot < 0):
                raise VerificationError(f"transfer {t.id}: {name} {slot!r} is not a scratch slot (an integer >= 0)",
                                        t.id)
        if src == dst:
            if t.src_scratch == t.dst_scratch:
                raise VerificationError(
                    f"transfer {t.id}: src and dst are both rank {src} and it reads and writes the same buffer "
                    f"({_buffer(t.src_scratch, t.chunk)}); a local op moves data between two buffers of one rank",
                    t.id)
            if path != (ranks[src],):
                raise VerificationError(
                    f"transfer {t.id}: a local op on rank {src} (src == dst) has the path [{ranks[src]}] (its gpu "
                    f"alone), got {list(path)}", t.id)
            continue
        seen = uses.get(path)
        if seen is None:
            if len(path) < 2:
                raise VerificationError(f"transfer {t.id}: path {list(path)} has fewer than 2 nodes", t.id)
            if len(set(path)) != len(path):
                raise VerificationError(f"transfer {t.id}: path {list(path)} visits a node twice", t.id)
            for u, v in zip(path, path[1:], strict=False):
                if not graph.has_edge(u, v):
                    raise VerificationError(f"transfer {t.id}: path hop {u} -> {v} is not a link", t.id)
            for node in path[1:-1]:
                if node in blocked:
                    raise VerificationError(
                        f"transfer {t.id}: path {' -> '.join(path)} crosses gpu {node}, which does not forward "
                        f"(a gpu moves data on only when a kernel copies it). Fix: emit a relay: copy to {node}, "
                        f"then a dependent copy onward, or mark the gpu as forwarding in the topology "
                        f"(\"forwards\": true on its node)", t.id)
            seen = 0
        if path[0] != ranks[src] or path[-1] != ranks[dst]:
            raise VerificationError(
                f"transfer {t.id}: path runs {path[0]} -> {path[-1]} but src/dst are ranks {src} "
                f"({ranks[src]}) and {dst} ({ranks[dst]})", t.id)
        uses[path] = seen + 1
    load: dict[tuple[str, str], int] = {}
    for path, count in uses.items():
        for hop in zip(path, path[1:], strict=False):
            load[hop] = load.get(hop, 0) + count
    return load


def _check_leg(t: Transfer, schedule: Schedule, topology: Topology) -> None:
    """A leg of a switch op: its ends, its chunk and its path (links, no non-forwarding gpu inside)."""
    ranks, num_ranks = schedule.ranks, len(schedule.ranks)
    index = t.to_switch if t.to_switch is not None else t.from_switch
    if t.to_switch is not None and t.from_switch is not None:
        raise VerificationError(f"transfer {t.id}: both an input and an output leg of a switch op", t.id)
    if index is None or not 0 <= index < len(schedule.switch_ops):
        raise VerificationError(f"transfer {t.id}: switch op {index} does not exist", t.id)
    switch_op = schedule.switch_ops[index]
    rank, end = (t.src, "src") if t.to_switch is not None else (t.dst, "dst")
    other = t.dst if t.to_switch is not None else t.src
    if other is not None:
        raise VerificationError(f"transfer {t.id}: a leg of switch op {index} has the switch at one end, so its "
                                f"{'dst' if end == 'src' else 'src'} must be null, got rank {other}", t.id)
    if rank is None or not 0 <= rank < num_ranks:
        raise VerificationError(f"transfer {t.id}: {end} rank {rank} is out of range 0..{num_ranks - 1}", t.id)
    if t.chunk != switch_op.chunk:
        raise VerificationError(f"transfer {t.id}: carries chunk {t.chunk} but switch op {index} works on chunk "
                                f"{switch_op.chunk}", t.id)
    if t.to_switch is not None and t.op != COPY:
        raise VerificationError(f"transfer {t.id}: an input leg of switch op {index} has op {t.op!r}; an input leg "
                                f"hands its value to the switch (op 'copy'), and the op's kind ({switch_op.kind}) "
                                f"says what the switch does with it", t.id)
    if (t.dst_scratch if t.to_switch is not None else t.src_scratch) is not None:
        raise VerificationError(f"transfer {t.id}: names a scratch slot at the switch's end; a switch has no "
                                f"buffers", t.id)
    path = t.path
    expected = (ranks[rank], switch_op.switch) if t.to_switch is not None else (switch_op.switch, ranks[rank])
    if len(path) < 2 or (path[0], path[-1]) != expected:
        raise VerificationError(
            f"transfer {t.id}: as {'an input' if t.to_switch is not None else 'an output'} leg of switch op {index} "
            f"its path runs {expected[0]} -> {expected[1]}, got {' -> '.join(path) or 'nothing'}", t.id)
    if len(set(path)) != len(path):
        raise VerificationError(f"transfer {t.id}: path {list(path)} visits a node twice", t.id)
    graph, blocked = topology.graph, topology.non_forwarding_gpus
    for u, v in zip(path, path[1:], strict=False):
        if not graph.has_edge(u, v):
            raise VerificationError(f"transfer {t.id}: path hop {u} -> {v} is not a link", t.id)
    for node in path[1:-1]:
        if node in blocked:
            raise VerificationError(f"transfer {t.id}: path {' -> '.join(path)} crosses gpu {node}, which does not "
                                    f"forward", t.id)


def _check_switch_ops(schedule: Schedule, topology: Topology) -> None:
    """What each switch op asks of its switch and of the collective, and the order of its legs."""
    inputs, outputs = schedule.legs()
    reducing = schedule.collective.reducing
    transfers = schedule.transfers
    for switch_op, ins, outs in zip(schedule.switch_ops, inputs, outputs, strict=True):
        name, where = switch_op.switch, f"switch op {switch_op.id}"
        if name not in topology.graph or topology.is_gpu(name):
            raise VerificationError(f"{where}: {name!r} is not a switch of topology {topology.name!r}")
        if switch_op.kind == REDUCE:
            reduction = topology.reduction(name)
            if reduction is None:
                raise VerificationError(f"{where}: switch {name} cannot reduce: it declares no reduction "
                                        f"(capabilities.reduction in the topology)")
            if not reducing:
                raise VerificationError(f"{where}: a reduce in a {schedule.collective.kind} (nothing is reduced)")
            if switch_op.op not in reduction.ops:
                raise VerificationError(f"{where}: switch {name} does not reduce with {switch_op.op!r} (it serves "
                                        f"{', '.join(reduction.ops)})")
            if switch_op.dtype not in reduction.dtypes:
                raise VerificationError(f"{where}: switch {name} does not reduce {switch_op.dtype} (it serves "
                                        f"{', '.join(reduction.dtypes)})")
            if len(ins) < 2:
                raise VerificationError(f"{where}: a reduce needs at least two inputs, it has {len(ins)}")
            if reduction.max_group is not None and len(ins) > reduction.max_group:
                raise VerificationError(f"{where}: {len(ins)} inputs, more than switch {name}'s group limit "
                                        f"(max_group {reduction.max_group})")
            if len(outs) > 1 and not topology.multicasts(name):
                raise VerificationError(f"{where}: a reduce with {len(outs)} outputs multicasts its result, and "
                                        f"switch {name} declares no multicast")
        else:
            if not topology.multicasts(name):
                raise VerificationError(f"{where}: switch {name} cannot multicast: it declares no multicast "
                                        f"(capabilities.multicast in the topology)")
            if len(ins) != 1:
                raise VerificationError(f"{where}: a multicast has exactly one input, it has {len(ins)}")
        if not outs:
            raise VerificationError(f"{where}: no output leg; a switch stores nothing, so its result would be lost")
        for tid in outs:
            listed = set(transfers[tid].deps)
            missing = [i for i in ins if i not in listed]
            if missing:
                raise VerificationError(
                    f"transfer {tid}: an output leg of {where} must list every input leg of it among its deps "
                    f"(the switch has the result only when the last input has arrived); missing {missing[:8]}", tid)


def _buffer(slot: int | None, chunk: int) -> str:
    return f"data cell of chunk {chunk}" if slot is None else f"scratch slot {slot}"


def _topological_order(schedule: Schedule) -> tuple[list[int], list[int]]:
    """A deterministic topological order (smallest ready id first) and each transfer's position in it."""
    transfers = schedule.transfers
    count = len(transfers)
    in_order = True
    for t in transfers:
        deps = t.deps
        if deps:
            lowest, highest = min(deps), max(deps)  # C-level scans: schedules may have hundreds of deps each
            if lowest < 0 or highest >= count:
                unknown = lowest if lowest < 0 else highest
                raise VerificationError(f"transfer {t.id}: depends on unknown transfer {unknown}", t.id)
            if highest >= t.id:
                in_order = False
    if in_order:
        identity = list(range(count))
        return identity, identity
    children: list[list[int]] = [[] for _ in range(count)]
    for t in transfers:
        for dep in set(t.deps):
            children[dep].append(t.id)
    order = smallest_first_order(range(count), children)
    if len(order) != count:
        stuck = min(set(range(count)).difference(order))
        raise VerificationError(f"transfer {stuck}: its deps form a cycle", stuck)
    topo_index = [0] * count
    for position, node in enumerate(order):
        topo_index[node] = position
    return order, topo_index


class _Reachability:
    """Answers 'is a an ancestor of b' (a path of deps from b back to a), near-linear in practice.

    Every transfer with deps gets one *tree parent*: the dep placed last in the topological order; its other
    deps are *side deps*. The parents form a forest numbered by a depth-first walk, so "a is a tree ancestor
    of b" is two comparisons (pre/post numbers). Any other path from b back to a leaves the tree path at a
    side dep of some tree ancestor of b, so a search walks up b's tree path from one transfer that has side
    deps to the next (``up``), skipping every single-dep stretch (a ring's chunk chain is one step), and
    tries each side dep the same way. Searches are pruned by topological position (nothing placed before
    ``a`` can have ``a`` as an ancestor) and never visit a transfer twice. A schedule whose transfers each
    depend on the previous two, or that chains every transfer after its data and its link predecessor,
    answers every query in a few steps.

    The verifier only ever needs positive answers but one (a negative answer ends verification), so the
    cost is the work of the positive searches; it is bounded by the ``max_verify_steps`` limit, past which
    verification stops with a :class:`~synth.errors.LimitError` rather than running for hours.
    """

    def __init__(self, schedule: Schedule, order: list[int], topo_index: list[int]) -> None:
        from synth import limits

        transfers = schedule.transfers
        count = len(transfers)
        self.topo_index = topo_index
        parent = [-1] * count
        side: list[tuple[int, ...]] = [()] * count
        up = [-1] * count
        for tid in order:
            tdeps = transfers[tid].deps
            if not tdeps:
                continue
            if len(tdeps) == 1:
                first = tdeps[0]
                parent[tid] = first
                up[tid] = up[first]
                continue
            best = max(tdeps, key=topo_index.__getitem__)
            parent[tid] = best
            others = tuple(sorted({d for d in tdeps if d != best}))
            if others:
                side[tid] = others
                up[tid] = tid
            else:
                up[tid] = up[best]
        # preorder numbering of the forest: a is a tree ancestor of b iff pre[a] <= pre[b] < end[a]. A parent
        # precedes its children in the topological order, so subtree sizes come from one backward pass and
        # each subtree gets a contiguous block of numbers in one forward pass.
        size = [1] * count
        for tid in reversed(order):
            above = parent[tid]
            if above >= 0:
                size[above] += size[tid]
        pre = [0] * count
        slot = [0] * count
        clock = 0
        for tid in order:
            above = parent[tid]
            if above < 0:
                start = clock
                clock += size[tid]
            else:
                start = slot[above]
                slot[above] = start + size[tid]
            pre[tid] = start
            slot[tid] = start + 1
        end = [p + n for p, n in zip(pre, size, strict=True)]
        self.parent = parent
        self.side = side
        self.up = up
        self.pre = pre
        self.end = end
        self.mark = [0] * count
        self.query = 0
        self.steps = 0
        self.budget = limits.limit_value("max_verify_steps")
        self.count = count

    def before(self, a: int, b: int) -> bool:
        """True when transfer ``a`` must finish before ``b`` starts (``a`` is a transitive dep of ``b``)."""
        pre, end = self.pre, self.end
        if pre[a] <= pre[b] < end[a]:
            return a != b
        topo = self.topo_index
        limit = topo[a]
        if limit >= topo[b]:
            return False
        self.query += 1
        query = self.query
        mark, up, side, parent = self.mark, self.up, self.side, self.parent
        pre_a, end_a = pre[a], end[a]
        steps = 0
        stack = [b]
        found = False
        while stack and not found:
            walk = up[stack.pop()]
            while walk >= 0 and topo[walk] > limit and mark[walk] != query:
                mark[walk] = query
                steps += 1
                for dep in side[walk]:
                    if pre_a <= pre[dep] < end_a:  # a is dep or a tree ancestor of it
                        found = True
                        break
                    if topo[dep] > limit:
                        stack.append(dep)
                if found:
                    break
                above = parent[walk]
                walk = up[above] if above >= 0 else -1
        self.steps += steps
        if self.steps > self.budget:
            from synth import limits

            limits.check("max_verify_steps", self.steps, f"proving the order of the {self.count:,} transfers' "
                         "accesses", hint="the dependency graph is unusually tangled; give the transfers fewer, "
                         "more direct deps")
        return found


def _replay(schedule: Schedule, order: list[int], topo_index: list[int]) -> int:
    """Replay the transfers in ``order`` on the ranks' cells, checking each, then the postcondition;
    returns the longest chain of dependent transfers.

    Longer than the house limit on purpose: this is the verifier's hot loop, run once per transfer on
    schedules of millions of transfers, so its checks stay inline (state in local variables, no call per
    check); each check is one ``if`` with its own message.
    """
    collective = schedule.collective
    transfers = schedule.transfers
    reducing = collective.reducing
    num_ranks = collective.num_ranks
    # a data cell (rank, chunk) is keyed rank * num_ids + chunk; scratch slot k of a rank is keyed
    # scratch_base + k * num_ranks + rank and also records the chunk it holds
    num_ids = collective.num_chunk_ids
    scratch_base = num_ranks * num_ids
    value: dict[int, int] = {}
    for rank in range(num_ranks):
        for chunk, mask in collective.initial(rank):
            value[rank * num_ids + chunk] = mask
    holds: dict[int, int] = {}  # scratch key -> chunk id
    last_writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    before = _Reachability(schedule, order, topo_index).before
    depth = [0] * len(transfers)
    deepest = 0

    with_legs = bool(schedule.switch_ops)
    for tid in order:
        t = transfers[tid]
        deps = t.deps
        listed = deps.__contains__ if len(deps) < 16 else frozenset(deps).__contains__  # many deps: a set
        level = max(map(depth.__getitem__, deps)) + 1 if deps else 1
        depth[tid] = level
        if level > deepest:
            deepest = level
        chunk = t.chunk
        src_slot, dst_slot = t.src_scratch, t.dst_scratch
        if with_legs and t.from_switch is not None:
            # an output leg: its source is the op's result, complete once every input (all among its deps) is in
            held = value.get(-1 - t.from_switch, 0)
            source = None
        elif src_slot is None:  # src and dst are ranks here (legs are handled apart, _check_paths proved it)
            source = t.src * num_ids + chunk  # type: ignore[operator]
        else:
            source = scratch_base + src_slot * num_ranks + t.src  # type: ignore[operator]
        if source is None:
            pass
        elif with_legs and t.to_switch is not None:
            _read_check(t, source, src_slot, value, holds, last_writer, listed, before)
            _add_reader(readers, source, tid)
            # an input leg: the switch combines what its inputs bring, in any order
            into = -1 - t.to_switch
            current = value.get(into, 0)
            twice = current & value[source]
            if twice:
                counted = [r for r in range(num_ranks) if twice >> r & 1]
                raise VerificationError(
                    f"transfer {tid}: switch op {t.to_switch} would count the contribution of rank(s) {counted[:8]} "
                    f"twice (its inputs overlap)", tid)
            value[into] = current | value[source]
            continue
        if dst_slot is None:
            target = t.dst * num_ids + chunk  # type: ignore[operator]
        else:
            target = scratch_base + dst_slot * num_ranks + t.dst  # type: ignore[operator]
        if source is not None:
            held = value.get(source, 0)
            writer = last_writer.get(source)
            if writer is not None and not listed(writer) and not before(writer, tid):
                raise VerificationError(
                    f"transfer {tid}: rank {t.src} sends {_cell(src_slot, chunk)} that transfer {writer} writes, but "
                    f"{writer} is not among its transitive deps (it may not have arrived yet)", tid)
            if held == 0:
                raise VerificationError(
                    f"transfer {tid}: rank {t.src} sends {_cell(src_slot, chunk)}, which it does not hold at that "
                    f"point", tid)
            if src_slot is not None and holds[source] != chunk:
                raise VerificationError(
                    f"transfer {tid}: rank {t.src} sends chunk {chunk} from scratch slot {src_slot}, which holds chunk "
                    f"{holds[source]}", tid)
            source_readers = readers.get(source)
            if source_readers is None:
                readers[source] = [tid]
            else:
                source_readers.append(tid)

        previous = last_writer.get(target)
        if previous is not None and not listed(previous) and not before(previous, tid):
            raise VerificationError(
                f"transfer {tid}: race on rank {t.dst} {_cell(dst_slot, chunk)}: transfers {previous} and {tid} both "
                f"write it with no order between them", tid)
        target_readers = readers.get(target)
        if target_readers:
            for reader in target_readers:
                if not listed(reader) and not before(reader, tid):
                    raise VerificationError(
                        f"transfer {tid}: race on rank {t.dst} {_cell(dst_slot, chunk)}: it overwrites the value that "
                        f"transfer {reader} reads, with no order between them", tid)
        current = value.get(target, 0)
        if t.op == REDUCE:
            if not reducing:
                raise VerificationError(f"transfer {tid}: op 'reduce' in a {collective.kind} (nothing is reduced)", tid)
            if current == 0:
                raise VerificationError(
                    f"transfer {tid}: reduce into rank {t.dst} {_cell(dst_slot, chunk)}, which holds no partial value "
                    f"(use 'copy')", tid)
            if dst_slot is not None and holds[target] != chunk:
                raise VerificationError(
                    f"transfer {tid}: reduces chunk {chunk} into scratch slot {dst_slot} of rank {t.dst}, which holds "
                    f"chunk {holds[target]}", tid)
            twice = current & held
            if twice:
                counted = [r for r in range(num_ranks) if twice >> r & 1]
                raise VerificationError(
                    f"transfer {tid}: reduce into rank {t.dst} {_cell(dst_slot, chunk)} would count the contribution of "
                    f"rank(s) {counted[:8]} twice", tid)
            value[target] = current | held
        else:
            value[target] = held
            if dst_slot is not None:
                holds[target] = chunk
        last_writer[target] = tid
        if target_readers:
            readers[target] = []

    _check_final(collective, value)
    return deepest


def _read_check(t: Transfer, source: int, src_slot: int | None, value: dict[int, int], holds: dict[int, int],
                last_writer: dict[int, int], listed: Callable[[int], bool], before: Callable[[int, int], bool]) -> None:
    """The checks on what an input leg reads (the rules of any transfer's source)."""
    chunk = t.chunk
    writer = last_writer.get(source)
    if writer is not None and not listed(writer) and not before(writer, t.id):
        raise VerificationError(
            f"transfer {t.id}: rank {t.src} sends {_cell(src_slot, chunk)} that transfer {writer} writes, but "
            f"{writer} is not among its transitive deps (it may not have arrived yet)", t.id)
    if value.get(source, 0) == 0:
        raise VerificationError(
            f"transfer {t.id}: rank {t.src} sends {_cell(src_slot, chunk)}, which it does not hold at that point", t.id)
    if src_slot is not None and holds[source] != chunk:
        raise VerificationError(
            f"transfer {t.id}: rank {t.src} sends chunk {chunk} from scratch slot {src_slot}, which holds chunk "
            f"{holds[source]}", t.id)


def _add_reader(readers: dict[int, list[int]], cell: int, tid: int) -> None:
    listed = readers.get(cell)
    if listed is None:
        readers[cell] = [tid]
    else:
        listed.append(tid)


def _check_final(collective: Collective, value: dict[int, int]) -> None:
    """The postcondition: every rank's cells hold what the collective promises."""
    num_ranks, num_ids = collective.num_ranks, collective.num_chunk_ids
    for rank in range(num_ranks):
        for chunk, mask in collective.final(rank):
            got = value.get(rank * num_ids + chunk, 0)
            if got != mask:
                raise VerificationError(
                    f"postcondition: rank {rank} ends with chunk {chunk} holding {_describe(got, num_ranks)}"
                    f", expected {_describe(mask, num_ranks)}")


def _cell(slot: int | None, chunk: int) -> str:
    return f"chunk {chunk}" if slot is None else f"scratch slot {slot} (chunk {chunk})"


def _describe(mask: int, num_ranks: int) -> str:
    if mask == 0:
        return "nothing"
    members = [r for r in range(num_ranks) if mask >> r & 1]
    if len(members) == num_ranks:
        return "every rank's contribution"
    shown = ", ".join(map(str, members[:8])) + (", ..." if len(members) > 8 else "")
    return f"the contribution(s) of rank(s) {shown}"
