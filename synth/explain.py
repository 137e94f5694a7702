"""A readable summary of a schedule: what moves where per step or per tree, the busiest links, and the
critical path (the longest chain of dependent transfers, with an α-β time estimate).

A *step* is a dependency-depth level: transfers with no deps are step 0, a transfer whose deepest dep is
at step s is at step s+1. A *tree* is the set of transfers that move one chunk: for allgather and
broadcast the chunk spreads out from its root; for reduce-scatter and reduce it is reduced toward its
root; for allreduce it is first reduced then spread; for alltoall it is the chunk's (possibly relayed)
path from its origin to its destination. Schedules from tree algorithms (``forest``, ``tree``) read best
per tree, the others per step.

A leg of an in-switch operation (:mod:`synth.schedule`) has the switch at one end, shown as
``nvs:reduce`` (the switch and the op's kind; with the op's id in the critical path,
``nvs:reduce#5``): ``3->nvs:reduce c0-7`` is rank 3 sending chunks 0-7 to be reduced in switch nvs,
``nvs:multicast->5 c2`` the multicast result of chunk 2 arriving at rank 5.

Examples
--------
>>> from synth.library import load_topology
>>> from synth.algorithms import synthesize
>>> topo = load_topology("ring:n=4")
>>> summary = explain(synthesize(topo, "allgather", "ring"), topo, size=4 * 2**20)
>>> len(summary.steps), summary.critical_path.length
(3, 3)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from synth.collectives import Kind
from synth.errors import VerificationError
from synth.evaluate import GIGA, MICRO, PlanOptions, congestion, evaluate_sizes
from synth.plan import Plan
from synth.schedule import REDUCE, Schedule, Transfer
from synth.topology import Topology


@dataclass(frozen=True)
class Move:
    """All transfers of one step between one (src, dst) pair with one op: which chunks, which way. For the
    legs of in-switch operations one end is None and ``switch`` / ``switch_kind`` name the switch and the
    kind of its ops (``"reduce"`` or ``"multicast"``)."""

    src: int | None
    dst: int | None
    op: str
    chunks: tuple[int, ...]
    via: tuple[str, ...] = ()
    switch: str | None = None
    switch_kind: str | None = None

    def describe(self) -> str:
        """``"0->1 c0-3"`` (``"=>"`` for reduce), with intermediate nodes when the path has any; a leg of a
        switch op shows the switch as ``nvs:reduce``."""
        arrow = "=>" if self.op == REDUCE else "->"
        via = f" via {','.join(self.via)}" if self.via else ""
        at_switch = f"{self.switch}:{self.switch_kind}"
        src = at_switch if self.src is None else self.src
        dst = at_switch if self.dst is None else self.dst
        return f"{src}{arrow}{dst} c{compress(self.chunks)}{via}"

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form (``switch`` and ``switch_kind`` only on the legs of switch ops)."""
        data: dict[str, Any] = {"src": self.src, "dst": self.dst, "op": self.op, "chunks": list(self.chunks),
                                "via": list(self.via)}
        if self.switch is not None:
            data["switch"], data["switch_kind"] = self.switch, self.switch_kind
        return data


def endpoints(schedule: Schedule, t: Transfer, with_id: bool = False) -> tuple[int | str, int | str]:
    """A transfer's two ends: ranks, or for the legs of a switch op the switch as ``"nvs:reduce"``
    (``"nvs:reduce#5"`` with ``with_id``)."""
    index = t.to_switch if t.to_switch is not None else t.from_switch
    if index is None:
        return t.src, t.dst  # type: ignore[return-value]
    op = schedule.switch_ops[index]
    label = f"{op.switch}:{op.kind}{f'#{op.id}' if with_id else ''}"
    return (t.src, label) if t.to_switch is not None else (label, t.dst)  # type: ignore[return-value]


def describe_transfer(schedule: Schedule, t: Transfer) -> str:
    """One transfer as the critical path shows it: ``"0->1(c3)"``, ``"0=>1(c3)"`` for a reduce,
    ``"0->nvs:reduce#5(c3)"`` for a leg of a switch op."""
    src, dst = endpoints(schedule, t, with_id=True)
    return f"{src}{'=>' if t.op == REDUCE else '->'}{dst}(c{t.chunk})"


@dataclass(frozen=True)
class Step:
    """One dependency-depth level."""

    level: int
    transfers: int
    copies: int
    reduces: int
    moves: tuple[Move, ...]


@dataclass(frozen=True)
class Tree:
    """The transfers that move one chunk (or several chunks that take exactly the same route)."""

    root: int
    chunks: tuple[int, ...]
    #: (src, dst, op) in dependency order; a switch end of a leg is ``"nvs:reduce"`` (:func:`endpoints`).
    edges: tuple[tuple[int | str, int | str, str], ...]
    depth: int

    def describe(self, limit: int = 12) -> str:
        """Compact edge list in dependency order, e.g. ``"0->1 0->2 2->3"``."""
        parts = [f"{s}{'=>' if op == REDUCE else '->'}{d}" for s, d, op in self.edges[:limit]]
        more = len(self.edges) - limit
        return " ".join(parts) + (f" ... +{more}" if more > 0 else "")


@dataclass(frozen=True)
class LinkLoad:
    """Load on one directed link: chunks crossing it, its bandwidth, and its time relative to the
    busiest link (100 = the busiest)."""

    src: str
    dst: str
    chunks: int
    bandwidth_GBps: float
    seconds: float
    percent_of_busiest: float


@dataclass(frozen=True)
class CriticalPath:
    """The chain of dependent transfers with the largest α-β time (no contention), at one size."""

    transfers: tuple[int, ...]
    time_s: float
    latency_s: float
    bandwidth_s: float
    size: int

    @property
    def length(self) -> int:
        """Number of transfers on the chain."""
        return len(self.transfers)


@dataclass(frozen=True)
class Explanation:
    """Everything ``synth explain`` prints."""

    algorithm: str
    collective: str
    topology: str
    ranks: int
    chunks: int
    transfers: int
    size: int
    depth: int
    steps: tuple[Step, ...]
    trees: tuple[Tree, ...]
    busiest_links: tuple[LinkLoad, ...]
    critical_path: CriticalPath
    congestion_time_s: float
    params: dict[str, Any] = field(default_factory=dict)
    time_s: float | None = None
    plan: Plan | None = None

    @property
    def lower_bound_s(self) -> float:
        """max(congestion bound, critical path): no execution of this schedule with the plan's slices is
        faster."""
        return max(self.congestion_time_s, self.critical_path.time_s)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (the ``--json`` output)."""
        return {
            "algorithm": self.algorithm, "collective": self.collective, "topology": self.topology,
            "ranks": self.ranks, "chunks": self.chunks, "transfers": self.transfers, "size": self.size,
            "depth": self.depth, "congestion_time_s": self.congestion_time_s,
            "lower_bound_s": self.lower_bound_s, "time_s": self.time_s,
            "plan": self.plan.to_dict() if self.plan else None,
            "critical_path": {"transfers": list(self.critical_path.transfers),
                              "time_s": self.critical_path.time_s,
                              "latency_s": self.critical_path.latency_s,
                              "bandwidth_s": self.critical_path.bandwidth_s},
            "busiest_links": [{"src": link.src, "dst": link.dst, "chunks": link.chunks,
                               "bandwidth_GBps": link.bandwidth_GBps, "seconds": link.seconds,
                               "percent_of_busiest": link.percent_of_busiest} for link in self.busiest_links],
            "steps": [{"level": s.level, "transfers": s.transfers, "copies": s.copies, "reduces": s.reduces,
                       "moves": [m.to_dict() for m in s.moves]} for s in self.steps],
            "trees": [{"root": t.root, "chunks": list(t.chunks), "depth": t.depth,
                       "edges": [list(e) for e in t.edges]} for t in self.trees],
        }


def compress(values: tuple[int, ...] | list[int]) -> str:
    """Sorted integers as compact ranges.

    Examples
    --------
    >>> compress([0, 1, 2, 3, 7, 9, 10])
    '0-3,7,9-10'
    """
    ordered = sorted(set(values))
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        start_value, end_value = ordered[index], ordered[end]
        parts.append(str(start_value) if start_value == end_value else f"{start_value}-{end_value}")
        index = end + 1
    return ",".join(parts)


def levels(schedule: Schedule) -> list[int]:
    """Dependency depth of each transfer (0 for no deps); raises :class:`VerificationError` on a cycle."""
    transfers = schedule.transfers
    children: list[list[int]] = [[] for _ in transfers]
    waiting = [len(set(t.deps)) for t in transfers]
    for t in transfers:
        for dep in set(t.deps):
            children[dep].append(t.id)
    level = [0] * len(transfers)
    ready = [t.id for t in transfers if not waiting[t.id]]
    seen = 0
    while ready:
        current = ready.pop()
        seen += 1
        for child in children[current]:
            level[child] = max(level[child], level[current] + 1)
            waiting[child] -= 1
            if not waiting[child]:
                ready.append(child)
    if seen != len(transfers):
        raise VerificationError("the schedule's dependencies contain a cycle")
    return level


def transfer_seconds(transfer: Transfer, topology: Topology, chunk_bytes: float) -> tuple[float, float]:
    """(α, β-part) seconds of one transfer alone: path latency, and bytes over the narrowest hop (a
    local op, whose path has one node, costs nothing)."""
    path = transfer.path
    if len(path) < 2:
        return 0.0, 0.0
    narrowest = min(topology.bandwidth(u, v) for u, v in zip(path, path[1:], strict=False))
    return topology.path_latency(path) * MICRO, chunk_bytes / (narrowest * GIGA)


def critical_path(schedule: Schedule, topology: Topology, size: int, level: list[int] | None = None,
                  slices: int = 1) -> CriticalPath:
    """The longest chain of dependent transfers by α-β time at ``size`` bytes (contention ignored), with
    each chunk streamed in ``slices`` slices.

    A slice can move on only once it has arrived, so the first slice of a transfer arrives no sooner
    than the first slices of its deps plus the transfer's latency and one slice over its narrowest hop;
    its last slice arrives ``slices - 1`` slice times later still. The chain ending at the largest such
    time is the critical path; with one slice it is the classic α-β chain.
    """
    transfers = schedule.transfers
    if not transfers:
        return CriticalPath((), 0.0, 0.0, 0.0, size)
    level = level if level is not None else levels(schedule)
    slice_bytes = schedule.collective.chunk_bytes(size) / slices
    cost = [transfer_seconds(t, topology, slice_bytes) for t in transfers]
    first = [0.0] * len(transfers)
    parent: list[int | None] = [None] * len(transfers)
    for tid in sorted(range(len(transfers)), key=lambda i: (level[i], i)):
        start = 0.0
        for dep in sorted(transfers[tid].deps):
            if parent[tid] is None or first[dep] > start:
                start, parent[tid] = first[dep], dep
        first[tid] = start + cost[tid][0] + cost[tid][1]
    finish = [first[i] + (slices - 1) * cost[i][1] for i in range(len(transfers))]
    last = max(range(len(transfers)), key=lambda i: (finish[i], -i))
    chain: list[int] = []
    node: int | None = last
    while node is not None:
        chain.append(node)
        node = parent[node]
    chain.reverse()
    latency = sum(cost[i][0] for i in chain)
    return CriticalPath(tuple(chain), finish[last], latency, finish[last] - latency, size)


def steps(schedule: Schedule, level: list[int] | None = None) -> tuple[Step, ...]:
    """Transfers grouped by dependency level, then by (src, dst, op, intermediate nodes)."""
    level = level if level is not None else levels(schedule)
    grouped: dict[int, dict[tuple[Any, ...], list[int]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    ops = schedule.switch_ops
    for t in schedule.transfers:
        index = t.to_switch if t.to_switch is not None else t.from_switch
        switch = ("", "") if index is None else (ops[index].switch, ops[index].kind)
        grouped[level[t.id]][(t.src, t.dst, t.op, t.path[1:-1], *switch)].append(t.chunk)
        counts[level[t.id]][1 if t.op == REDUCE else 0] += 1

    def order(key: tuple[Any, ...]) -> tuple[Any, ...]:  # a leg's switch end (None) sorts before every rank
        return (-1 if key[0] is None else key[0], -1 if key[1] is None else key[1], *key[2:])

    result = []
    for lvl in sorted(grouped):
        moves = tuple(Move(src, dst, op, tuple(sorted(chunks)), via, switch or None, kind or None)
                      for (src, dst, op, via, switch, kind), chunks in sorted(grouped[lvl].items(),
                                                                              key=lambda item: order(item[0])))
        copies, reduces = counts[lvl]
        result.append(Step(lvl, copies + reduces, copies, reduces, moves))
    return tuple(result)


def chunk_root(schedule: Schedule, chunk: int, moves: list[Transfer]) -> int:
    """The rank a chunk's tree hangs from: the root for rooted collectives, the origin for alltoall,
    the chunk's owner for allgather and reduce-scatter. Allreduce chunks have no owner: their tree hangs
    from the rank where the reduction completes (the destination of the chunk's last reduce, or of an
    output of an in-switch reduce, in dependency order ``moves``)."""
    collective = schedule.collective
    if collective.root is not None:
        return collective.root
    if collective.kind in (Kind.ALLTOALL, Kind.ALLTOALLV):
        return collective.origin(chunk)
    if collective.kind == Kind.ALLREDUCE:
        ops = schedule.switch_ops
        reduces = [t for t in moves if t.op == REDUCE or t.from_switch is not None and ops[t.from_switch].kind == REDUCE]
        if reduces and reduces[-1].dst is not None:
            return reduces[-1].dst
        first = next((t.src for t in moves if t.src is not None), None)
        return 0 if first is None else first
    return collective.owner(chunk)


def trees(schedule: Schedule, level: list[int] | None = None) -> tuple[Tree, ...]:
    """One :class:`Tree` per distinct route: chunks whose transfers form the same edge list are merged."""
    level = level if level is not None else levels(schedule)
    by_chunk: dict[int, list[Transfer]] = defaultdict(list)
    for t in schedule.transfers:
        by_chunk[t.chunk].append(t)
    merged: dict[tuple[int, tuple[tuple[int | str, int | str, str], ...]], list[int]] = {}
    depth_of: dict[tuple[int, tuple[tuple[int | str, int | str, str], ...]], int] = {}
    for chunk in sorted(by_chunk):
        moves = sorted(by_chunk[chunk], key=lambda t: (level[t.id], t.id))
        edges = tuple((*endpoints(schedule, t), t.op) for t in moves)
        key = (chunk_root(schedule, chunk, moves), edges)
        merged.setdefault(key, []).append(chunk)
        depth_of[key] = len({level[t.id] for t in moves})
    return tuple(Tree(root, tuple(chunks), edges, depth_of[(root, edges)])
                 for (root, edges), chunks in sorted(merged.items(), key=lambda item: (item[0][0], item[1][0])))


def busiest_links(schedule: Schedule, topology: Topology, size: int, top: int = 5) -> tuple[LinkLoad, ...]:
    """The ``top`` links with the most bytes per bandwidth, with their share of the busiest one."""
    report = congestion(schedule, topology, top=top)
    if not report.busiest_links:
        return ()
    worst = report.busiest_links[0][2]
    return tuple(
        LinkLoad(u, v, report.chunks_per_link[(u, v)], topology.bandwidth(u, v), float(spb * size),
                 float(Fraction(100) * spb / worst) if worst else 0.0)
        for u, v, spb in report.busiest_links
    )


def explain(schedule: Schedule, topology: Topology, size: int = 2**30, top: int = 5,
            options: PlanOptions | None = None) -> Explanation:
    """Summarize ``schedule`` on ``topology`` at ``size`` bytes (see the module docstring), with the flow
    model's time under the plan every command uses (``options`` overrides it as in ``synth evaluate``);
    the critical path streams chunks in that plan's slices."""
    level = levels(schedule)
    result = evaluate_sizes(schedule, topology, [size], options=options)[0]
    return Explanation(
        algorithm=schedule.algorithm,
        collective=schedule.kind.value,
        topology=schedule.topology,
        ranks=schedule.collective.num_ranks,
        chunks=schedule.chunks,
        transfers=len(schedule.transfers),
        size=size,
        depth=(max(level) + 1) if level else 0,
        steps=steps(schedule, level),
        trees=trees(schedule, level),
        busiest_links=busiest_links(schedule, topology, size, top),
        critical_path=critical_path(schedule, topology, size, level, result.plan.slices),
        congestion_time_s=congestion(schedule, topology).time(size),
        params=dict(schedule.params),
        time_s=result.time_s,
        plan=result.plan,
    )
