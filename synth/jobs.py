"""Jobs: several collectives that run at once on one fabric, the ``synth.job/1`` document and their joint bound.

A job lists collectives started together (expert alltoallv beside a data-parallel allreduce, every tp
group's allreduce at once, two tenants' jobs): each has a kind, a size, a group (its gpus, default every
gpu) and, where the kind takes them, a demand or uneven shards. The document::

    {"format": "synth.job/1", "objective": "makespan",
     "collectives": [
       {"name": "experts", "collective": "alltoallv", "size": "256MiB", "group": "tp=8:0",
        "demand": {"moe": {"experts_per_gpu": 2, "top_k": 2, "zipf": 1.0}}},
       {"name": "dp", "collective": "allreduce", "size": "1GiB", "group": "dp=2", "algorithm": ["ring", "nccl"]}]}

Fields of a collective: ``name`` (distinct; default ``c0``, ``c1``, ...), ``collective``, ``size`` (bytes or
``"64MiB"``, as nccl-tests counts it; an alltoallv with a bytes demand defaults to the demand's total),
``group`` (a ``--group`` value: gpu ids or ``tp=K[:I]`` / ``dp=K[:I]``, or a list of gpu ids; ``tp=K:*`` or
``dp=K:*`` is the same collective on every group of the layout at once, named ``NAME.0``, ``NAME.1``, ...), ``demand``
(alltoallv only: a ``synth.demand/1`` file, relative to the job file, an inline ``synth.demand/1`` object, or
``{"moe": {...}}`` with :func:`synth.demand.moe`'s parameters), ``shards`` (allgather and reduce-scatter: a
``--shards`` value or a list), ``algorithm`` (one name or a list of candidates; default every applicable
algorithm but the slow solvers) and ``weight`` (> 0, for the ``weighted`` objective, default 1). The job's
``objective`` is ``makespan`` (when the last collective finishes) or ``weighted`` (the sum of each
collective's finish time times its weight). Groups may overlap: collectives on the same gpus share
their links. At most :data:`MAX_COLLECTIVES` collectives.

The joint bound
---------------
No set of schedules finishes the job sooner than :class:`JointBound` says:

- each collective alone: its own lower bound on its group (:func:`synth.bounds.time_bound`), since sharing
  the fabric never speeds a collective up;
- shared cuts: for a split of the gpus into a side A and the rest, every collective moves a known number
  of bytes from A to the rest (what its data-flow pre- and postconditions force across: a chunk that
  ranks outside A need and none of them holds at the start crosses once; a reduced chunk that ranks
  outside A need crosses once if a rank in A contributes to it, however it is combined, in gpus or in
  switches), and all of them cross the smallest cut between A's gpus and the others' (a max-flow over
  the fabric, non-members free to be on either side), so the job takes at least the summed bytes over
  that cut's bandwidth. The splits tried: every gpu alone, every box, every collective's group, each in
  both directions.

The makespan bound is the largest of these; the weighted bound is the weighted sum of each collective's
own bound. Like :func:`synth.bounds.time_bound` it counts the links' line rates and no protocol costs.

Examples
--------
>>> from synth.library import load_topology
>>> topo = load_topology("dgx-h100:boxes=2")
>>> job = Job.from_dict({"format": "synth.job/1", "collectives": [
...     {"collective": "allreduce", "size": "1GiB", "group": "dp=2"},
...     {"collective": "allgather", "size": "1GiB", "group": "dp=2"}]}, topo)
>>> [c.name for c in job.collectives], job.collectives[0].members
(['c0', 'c1'], ('b0.gpu0', 'b1.gpu0'))
>>> bound = joint_bound(topo, job)
>>> bound.shared_s > max(bound.alone_s), bound.shared_cut  # both cross the same two NICs
(True, 'gpu b0.gpu0 -> the rest')
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from synth.collectives import Collective, Kind, parse_kind, shard_weights
from synth.errors import InputError
from synth.topology import Topology

__all__ = ["FORMAT", "MAX_COLLECTIVES", "OBJECTIVES", "Job", "JobCollective", "JointBound", "crossing_bytes",
           "crossing_bytes_closed", "joint_bound", "load_job"]

FORMAT = "synth.job/1"
#: The objectives a job may ask for.
OBJECTIVES = ("makespan", "weighted")
#: The most collectives one job may hold.
MAX_COLLECTIVES = 16
_FIELDS = ("name", "collective", "size", "group", "demand", "shards", "algorithm", "weight", "comment")


@dataclass(frozen=True)
class JobCollective:
    """One collective of a job: ``members`` the group's gpus in rank order (None: every gpu), ``demand``
    a :class:`synth.demand.Demand` (alltoallv), ``shards`` relative shard sizes (allgather, reduce-scatter),
    ``algorithms`` the candidates to choose among (None: every applicable one but the slow solvers)."""

    name: str
    kind: Kind
    size: int
    members: tuple[str, ...] | None = None
    demand: Any = None
    shards: tuple[int, ...] | None = None
    algorithms: tuple[str, ...] | None = None
    weight: float = 1.0

    def view(self, topology: Topology) -> Topology:
        """The fabric with this collective's group as its ranks (:func:`synth.groups.group_view`)."""
        from synth.groups import group_view

        return group_view(topology, self.members)

    def describe(self) -> str:
        """``allreduce of 1 GiB on 2 gpus (b0.gpu0..b1.gpu0)`` and the like."""
        from synth.units import format_size

        kind = f"{self.kind.value} (uneven shards)" if self.shards is not None else self.kind.value
        where = "every gpu" if self.members is None else (
            f"{len(self.members)} gpus ({self.members[0]}..{self.members[-1]})")
        return f"{kind} of {format_size(self.size, ' ')} on {where}"


@dataclass(frozen=True)
class Job:
    """Collectives started together on one fabric, and what to minimise (see the module doc)."""

    collectives: tuple[JobCollective, ...]
    objective: str = "makespan"
    source: str = ""

    @classmethod
    def from_dict(cls, data: Any, topology: Topology, source: str = "", folder: Path | None = None) -> Job:
        """Validate a parsed ``synth.job/1`` object for ``topology``; an :class:`InputError` names the file
        and the field (``collectives[1].group``). ``folder``: where demand files are looked up."""
        if not isinstance(data, dict):
            raise InputError(source, "", "expected a JSON object with format and collectives")
        if data.get("format") != FORMAT:
            raise InputError(source, "format", f"expected {FORMAT!r}, got {data.get('format')!r}")
        unknown = sorted(set(data) - {"format", "objective", "collectives", "comment"})
        if unknown:
            raise InputError(source, unknown[0], "unknown field; expected format, objective, collectives (comment)")
        objective = data.get("objective", "makespan")
        if objective not in OBJECTIVES:
            raise InputError(source, "objective", f"expected one of {', '.join(OBJECTIVES)}, got {objective!r}")
        entries = data.get("collectives")
        if not isinstance(entries, list) or not entries:
            raise InputError(source, "collectives", "expected a non-empty list of collectives")
        if len(entries) > MAX_COLLECTIVES:
            raise InputError(source, "collectives", f"expected at most {MAX_COLLECTIVES} collectives, got {len(entries)}")
        made = [c for index, entry in enumerate(entries) for c in _collectives(entry, index, topology, source, folder)]
        if len(made) > MAX_COLLECTIVES:
            raise InputError(source, "collectives", f"expected at most {MAX_COLLECTIVES} collectives, got {len(made)} "
                             "once every group of a layout's :* is counted")
        first: dict[str, int] = {}
        for index, c in enumerate(made):
            if c.name in first:
                raise InputError(source, "collectives", f"the name {c.name!r} is used by collectives "
                                 f"{first[c.name]} and {index} (a layout's :* names its groups NAME.0, NAME.1, ...); "
                                 "expected distinct names")
            first[c.name] = index
        return cls(tuple(made), objective, source)


def load_job(path: str | Path, topology: Topology) -> Job:
    """Read a ``synth.job/1`` file (JSON or YAML, with the size and syntax checks of
    :func:`synth.documents.read_document`) for ``topology``."""
    from synth.documents import read_document

    return Job.from_dict(read_document(path), topology, str(path), Path(path).parent)


def _collectives(entry: Any, index: int, topology: Topology, source: str, folder: Path | None) -> list[JobCollective]:
    """One validated entry of ``collectives``: one collective, or, for a group ``tp=K:*`` or ``dp=K:*``, one on
    each group of the layout, named ``NAME.0``, ``NAME.1``, ... (the same kind, size, demand and options)."""
    import dataclasses
    import re

    group = entry.get("group") if isinstance(entry, dict) else None
    every = re.fullmatch(r"\s*(\w+)\s*=\s*(\d+)\s*:\s*\*\s*", group) if isinstance(group, str) else None
    if every is None:
        return [_collective(entry, index, topology, source, folder)]
    from synth.groups import layout_groups

    layout, size = every.group(1), int(every.group(2))
    first = _collective({**entry, "group": f"{layout}={size}:0"}, index, topology, source, folder)
    return [dataclasses.replace(first, name=f"{first.name}.{i}", members=None if members == topology.gpus else members)
            for i, members in enumerate(layout_groups(topology, layout, size))]


def _collective(entry: Any, index: int, topology: Topology, source: str, folder: Path | None) -> JobCollective:
    """One validated entry of ``collectives`` with one group."""
    from synth.groups import check_group, parse_group
    from synth.units import parse_size

    where = f"collectives[{index}]"
    if not isinstance(entry, dict):
        raise InputError(source, where, "expected an object with collective and size (name, group, demand, "
                         "shards, algorithm, weight)")
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise InputError(source, f"{where}.{unknown[0]}", "unknown field; expected " + ", ".join(_FIELDS[:-1]))
    if "collective" not in entry:
        raise InputError(source, f"{where}.collective", "missing required field")
    kind = parse_kind(str(entry["collective"]), source, f"{where}.collective")
    name = entry.get("name", f"c{index}")
    if not isinstance(name, str) or not name.strip() or len(name) > 64:
        raise InputError(source, f"{where}.name", f"expected a name of 1 to 64 characters, got {name!r}")
    group = entry.get("group")
    members: tuple[str, ...] | None
    if group is None:
        members = None
    elif isinstance(group, str):
        members = parse_group(topology, group, source, f"{where}.group")
    elif isinstance(group, list) and all(isinstance(g, str) for g in group):
        members = check_group(topology, group, source, f"{where}.group")
    else:
        raise InputError(source, f"{where}.group", f"expected a --group value or a list of gpu ids, got {group!r}")
    if members is not None and members == topology.gpus:
        members = None
    ranks = topology.num_ranks if members is None else len(members)
    demand = _demand(entry.get("demand"), kind, ranks, source, f"{where}.demand", folder)
    shards = None
    if entry.get("shards") is not None:
        if kind not in (Kind.ALLGATHER, Kind.REDUCESCATTER):
            raise InputError(source, f"{where}.shards", f"uneven shards are for allgather and reducescatter, not {kind}")
        text = entry["shards"]
        shards = shard_weights(",".join(str(s) for s in text) if isinstance(text, list) else text, ranks, source,
                               f"{where}.shards")
    if "size" in entry:
        try:
            size = parse_size(entry["size"], f"{where}.size") if not isinstance(entry["size"], bool) else 0
        except InputError as error:
            raise InputError(source, error.field, error.problem) from None
        if size < 1:
            raise InputError(source, f"{where}.size", f"expected a positive size, got {entry['size']!r}")
    elif demand is not None and demand.unit == "bytes":
        size = int(round(demand.total))
    else:
        raise InputError(source, f"{where}.size", "missing required field")
    return JobCollective(name.strip(), kind, size, members, demand, shards,
                         _algorithms(entry.get("algorithm"), source, f"{where}.algorithm"),
                         _weight(entry.get("weight", 1), source, f"{where}.weight"))


def _demand(value: Any, kind: Kind, ranks: int, source: str, field: str, folder: Path | None) -> Any:
    """The entry's demand (a :class:`synth.demand.Demand`), None without one."""
    from synth.demand import Demand, moe

    if value is None:
        if kind == Kind.ALLTOALLV:
            raise InputError(source, field, "an alltoallv needs a demand (a synth.demand/1 file or object, or "
                             "{\"moe\": {...}})")
        return None
    if kind != Kind.ALLTOALLV:
        raise InputError(source, field, f"a demand is for alltoallv, not {kind}")
    if isinstance(value, str):
        path = Path(value) if folder is None or Path(value).is_absolute() else folder / value
        demand = Demand.from_file(path)
    elif isinstance(value, dict) and set(value) == {"moe"}:
        options = value["moe"]
        allowed = {"experts_per_gpu", "top_k", "zipf", "tokens", "seed"}
        if not isinstance(options, dict) or set(options) - allowed:
            raise InputError(source, f"{field}.moe", "expected an object of " + ", ".join(sorted(allowed)))
        try:
            demand = moe(ranks, **options)
        except InputError as error:
            raise InputError(source, f"{field}.moe.{error.field}", error.problem) from None
    else:
        try:
            demand = Demand.from_dict(value)
        except InputError as error:
            raise InputError(source, f"{field}.{error.field}" if error.field else field, error.problem) from None
    if demand.ranks != ranks:
        raise InputError(source, field, f"the demand is for {demand.ranks} ranks, the group has {ranks}")
    return demand


def _algorithms(value: Any, source: str, field: str) -> tuple[str, ...] | None:
    """The candidate algorithm names (whether each is registered is checked where they run,
    :func:`synth.choose.job.candidates`); None for the default."""
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise InputError(source, field, f"expected an algorithm name or a non-empty list of them, got {value!r}")
    return tuple(dict.fromkeys(names))


def _weight(value: Any, source: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(source, field, f"expected a positive number, got {value!r}")
    return float(value)


# ------------------------------------------------------------------------------------------- bound
def canonical_collective(job_collective: JobCollective, num_ranks: int) -> Collective:
    """The collective a job entry asks for on its ``num_ranks`` ranks, one chunk per rank (the demand's
    chunk counts for alltoallv, the shards' for uneven shards): what the joint bound counts bytes of."""
    from synth.demand import as_chunk_matrix

    kind = job_collective.kind
    if kind == Kind.ALLTOALLV:
        return Collective.alltoallv(as_chunk_matrix(job_collective.demand, num_ranks))
    if job_collective.shards is not None:
        return Collective.uneven(kind, job_collective.shards)
    return Collective(kind, num_ranks, num_ranks, root=0 if kind in (Kind.BROADCAST, Kind.REDUCE) else None)


def crossing_bytes(collective: Collective, size: int, inside: Sequence[bool]) -> Fraction:
    """Bytes that must cross from the ranks marked ``inside`` to the others in any schedule of
    ``collective`` at ``size`` (see the module doc), exact.

    Examples
    --------
    >>> ag = Collective(Kind.ALLGATHER, 4, 4)
    >>> crossing_bytes(ag, 1000, [True, False, False, False]), crossing_bytes(ag, 1000, [False, True, True, True])
    (Fraction(250, 1), Fraction(750, 1))
    >>> crossing_bytes(Collective(Kind.ALLREDUCE, 4, 4), 1000, [True, True, False, False])
    Fraction(1000, 1)
    """
    n = collective.num_ranks
    inside_mask = sum(1 << r for r in range(n) if inside[r])
    outside_mask = ((1 << n) - 1) & ~inside_mask
    if not inside_mask or not outside_mask:
        return Fraction(0)
    chunks = 0
    for holders, needers, count in _chunk_classes(collective):
        if not needers & outside_mask:
            continue
        if collective.reducing or holders & outside_mask == 0 and holders & inside_mask:
            chunks += count
    return Fraction(size, collective.chunks) * chunks


def crossing_bytes_closed(collective: Collective, size: int, inside: Sequence[bool]) -> Fraction:
    """:func:`crossing_bytes` in closed form per kind, without visiting the chunks (what the joint bound
    uses: a cut costs O(N), an alltoallv's O(N^2) in numpy), equal to it on every collective (a property
    test holds the two together). With w the shards' weights (1 each when even) and W their sum:
    allgather ``size w(A) / W``; reduce-scatter ``size w(B) / W``; allreduce ``size``; broadcast ``size``
    when the root is in A; reduce ``size`` when the root is in B; alltoall ``|A| |B| size / N``; alltoallv
    ``size D(A -> B) / D`` for the demand's chunk counts D; all 0 when A or B holds no rank.

    Examples
    --------
    >>> crossing_bytes_closed(Collective.uneven(Kind.REDUCESCATTER, (1, 3)), 1000, [True, False])
    Fraction(750, 1)
    """
    import numpy as np

    n = collective.num_ranks
    a = [bool(inside[r]) for r in range(n)]
    count_a = sum(a)
    if count_a in (0, n):
        return Fraction(0)
    kind = collective.kind
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        weights = collective.shards if collective.shards is not None else (1,) * n
        side = [w for w, x in zip(weights, a, strict=True) if x == (kind == Kind.ALLGATHER)]
        return Fraction(size * sum(side), sum(weights))
    if kind == Kind.ALLREDUCE:
        return Fraction(size)
    if kind == Kind.BROADCAST:
        return Fraction(size) if a[collective.root or 0] else Fraction(0)
    if kind == Kind.REDUCE:
        return Fraction(0) if a[collective.root or 0] else Fraction(size)
    if kind == Kind.ALLTOALL:
        return Fraction(count_a * (n - count_a) * size, n)
    assert collective.demand is not None
    matrix = np.array(collective.demand, dtype=np.int64)
    mask = np.array(a)
    return Fraction(size * int(matrix[mask][:, ~mask].sum()), int(matrix.sum()))


def _chunk_classes(collective: Collective) -> list[tuple[int, int, int]]:
    """(ranks holding the chunk at the start, ranks needing it at the end, how many chunks) over the chunk
    ids, as rank bitmasks; for a reducing collective the holders are every contributor."""
    holders: dict[int, int] = {}
    needers: dict[int, int] = {}
    for rank in range(collective.num_ranks):
        bit = 1 << rank
        for chunk, _ in collective.initial(rank):
            holders[chunk] = holders.get(chunk, 0) | bit
        for chunk, _ in collective.final(rank):
            needers[chunk] = needers.get(chunk, 0) | bit
    counts = Counter((holders.get(c, 0), needers[c]) for c in needers)
    return [(h, d, k) for (h, d), k in sorted(counts.items())]


@dataclass(frozen=True)
class JointBound:
    """A lower bound on a job's time that no set of schedules beats (see the module doc): each collective's
    own bound (s, in job order), the best shared cut's bound, the cut it is and the bytes crossing it."""

    alone_s: tuple[float, ...]
    alone_labels: tuple[str, ...]
    shared_s: float
    shared_cut: str
    shared_bytes: Fraction = Fraction(0)
    shared_GBps: Fraction = Fraction(0)  # noqa: N815 (GB/s, as the other bounds spell it)
    weights: tuple[float, ...] = field(default=())

    @property
    def makespan_s(self) -> float:
        """No schedule set ends the job sooner."""
        return max(max(self.alone_s, default=0.0), self.shared_s)

    @property
    def weighted_s(self) -> float:
        """No schedule set has a smaller weighted sum of finish times."""
        return sum(w * t for w, t in zip(self.weights, self.alone_s, strict=True))

    @property
    def binding(self) -> str:
        """Which argument gives the makespan bound: ``shared cut ...`` or the collective's own bound."""
        if self.shared_s >= max(self.alone_s, default=0.0):
            return f"shared cut {self.shared_cut}"
        return "its own bound"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (exact bytes and GB/s as strings)."""
        return {"makespan_s": self.makespan_s, "weighted_s": self.weighted_s, "alone_s": list(self.alone_s),
                "alone_labels": list(self.alone_labels), "shared_s": self.shared_s, "shared_cut": self.shared_cut,
                "shared_bytes": str(self.shared_bytes), "shared_GBps": str(self.shared_GBps)}


def joint_bound(topology: Topology, job: Job) -> JointBound:
    """The job's joint lower bound on ``topology`` (see the module doc and :class:`JointBound`), on its
    links' line rates where it is at achievable rates (:func:`synth.library.achievable.line_rate`)."""
    from synth.bounds import time_bound
    from synth.cuts.network import INFINITY, FlowSolver, Network
    from synth.library.achievable import line_rate

    topology = line_rate(topology)

    alone: list[float] = []
    labels: list[str] = []
    for c in job.collectives:
        view = c.view(topology)
        bound = time_bound(view, c.kind, demand=c.demand, shards=c.shards)
        alone.append(bound.time(c.size))
        labels.append(bound.label)
    from synth.groups import group_view

    in_job = {g for c in job.collectives for g in (c.members or topology.gpus)}
    # the gpus of some collective, in fabric order: the others relay only where they forward
    fabric = group_view(topology, [g for g in topology.gpus if g in in_job])
    index_of = {g: i for i, g in enumerate(fabric.gpus)}
    parts = []
    for c in job.collectives:
        ranks = [index_of[g] for g in (c.members or topology.gpus)]
        parts.append((canonical_collective(c, len(ranks)), ranks, c.size))
    used = list(range(fabric.num_ranks))
    net = Network.from_topology(fabric)
    solver = FlowSolver(net.num_nodes + 2)
    source, sink = net.num_nodes, net.num_nodes + 1
    for tail, head, units in zip(net.tails, net.heads, net.units, strict=True):
        solver.add_arc(tail, head, units)
    into = {i: solver.add_arc(source, i, 0) for i in used}
    out_of = {i: solver.add_arc(i, sink, 0) for i in used}
    best = (Fraction(0), "", Fraction(0), Fraction(0))
    for label, side in _splits(fabric, job, used):
        for direction, inner in (("->", side), ("<-", frozenset(used) - side)):
            moved = sum((crossing_bytes_closed(coll, size, [r in inner for r in ranks])
                         for coll, ranks, size in parts), Fraction(0))
            if not moved:
                continue
            for i in used:
                solver.set_capacity(into[i], INFINITY if i in inner else 0)
                solver.set_capacity(out_of[i], 0 if i in inner else INFINITY)
            units = solver.max_flow(source, sink)
            if units <= 0:
                continue
            rate = Fraction(units, net.scale)  # GB/s
            seconds = moved / (rate * 10**9)
            if seconds > best[0]:
                best = (seconds, f"{label} {direction} the rest", moved, rate)
    return JointBound(tuple(alone), tuple(labels), float(best[0]), best[1], best[2], best[3],
                      tuple(c.weight for c in job.collectives))


def _splits(topology: Topology, job: Job, used: list[int]) -> list[tuple[str, frozenset[int]]]:
    """The gpu sets A the joint bound tries (as fabric gpu indices among ``used``): every used gpu alone,
    every box, every collective's group; each once. ``topology``: the view whose ranks are the job's gpus."""
    gpus = topology.gpus
    used_set = frozenset(used)
    found: dict[frozenset[int], str] = {}
    for i in used:
        found.setdefault(frozenset({i}), f"gpu {gpus[i]}")
    if topology.boxes is not None:
        boxes: dict[Any, set[int]] = {}
        for i in used:
            boxes.setdefault(topology.boxes[i], set()).add(i)
        for box, in_box in boxes.items():
            found.setdefault(frozenset(in_box), f"box b{box}")
    index_of = {g: i for i, g in enumerate(gpus)}
    for c in job.collectives:
        group = frozenset(index_of[g] for g in (c.members or gpus))  # gpus: every gpu of the job
        found.setdefault(group, f"the gpus of {c.name}")
    return [(label, side) for side, label in found.items() if side and side != used_set]
