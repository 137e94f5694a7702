"""Compact tree schedules: the ``trees`` body of a ``synth.schedule/2`` file.

A spanning-tree schedule (``forest``) sends every chunk down, or reduces it up, one tree. Written as
transfers it has one record per tree arc per chunk: 4.2 million records for an allgather on 2,048 gpus,
16.8 million on 4,096. The trees form stores the trees and the chunks each one carries; its transfers
follow from a fixed rule (below), so a reader can verify it and compute its link loads without building
them (:func:`synth.verify.verify`, :func:`synth.evaluate.congestion`), and
:meth:`TreeSchedule.expand` builds exactly those transfers when a command needs them.

The file has the header of a schedule (``format``, ``collective``, ``root``, ``topology``,
``topology_file``, ``topology_sha256``, ``ranks``, ``chunks``, ``algorithm``, ``params``) and, in
place of ``transfers``, a ``trees`` object::

    "trees": {
      "paths": [["gpu0", "nvswitch", "gpu1"], ...],
      "phases": [
        {"op": "broadcast", "trees": [
          {"root": 0, "first_chunk": 0, "chunks": 1,
           "parent": [0, 0, 1], "child": [1, 2, 3], "path": [0, 4, 9]}, ...]}]}

``paths`` are physical paths (node ids, every hop a link) in the direction data moves. A tree's arcs
are ``(parent[i], child[i])`` in growth order (a parent is the root or the child of an earlier arc);
``path[i]`` indexes ``paths``: the path from the parent's gpu to the child's in a ``broadcast`` phase,
from the child's gpu to the parent's in a ``reduce`` phase. A tree carries chunk ids
``first_chunk .. first_chunk + chunks - 1``, one after the other.

The transfers, numbered in this order: phases in order, trees in order, a tree's chunks in order, and
for one chunk its arcs in order (``broadcast``) or in reverse order (``reduce``):

- ``broadcast``: for arc (p, q) a copy of the chunk from p to q. It waits for the chunk's transfer
  into p (p not the root) or, at the root, for the chunk's last transfer in the previous phase (if
  any), and for the tree's previous chunk's transfer into q (the chunks of a tree pipeline).
- ``reduce``: for arc (p, q), q sends its partial sum to p. The first send into p (in that reverse
  order) reduces into p's data cell; each further one copies into a fresh scratch slot of p (slots are
  numbered per rank from 0 over the whole schedule) and a local reduce (src == dst, path the gpu alone)
  adds that slot into the cell, after the cell's previous write. A send waits for the last write into
  q's cell and for the tree's previous chunk's send out of q.

The collectives the form holds: allgather (``broadcast``, each tree rooted at the owner of its
chunks), reduce-scatter (``reduce``, likewise), allreduce (``reduce`` then ``broadcast``, each chunk
broadcast from the rank it was reduced into), broadcast and reduce (one phase, trees rooted at the
collective's root). Every chunk is carried by exactly one tree per phase.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

import numpy as np

from synth.collectives import Collective, Kind
from synth.documents import read_document
from synth.errors import InputError, excerpt
from synth.schedule import (
    COPY,
    FORMAT,
    REDUCE,
    SHARDS_FORMAT,
    Schedule,
    ScheduleForm,
    SwitchOp,
    Transfer,
    _is_int,
    compact_header,
    header_dict,
    read_header,
)

BROADCAST: Final = "broadcast"
#: The phase ops, in the order a schedule may hold them.
PHASE_OPS = (REDUCE, BROADCAST)
#: The phase sequences each collective takes.
PHASES_OF: Mapping[Kind, tuple[str, ...]] = {
    Kind.ALLGATHER: (BROADCAST,), Kind.BROADCAST: (BROADCAST,), Kind.REDUCESCATTER: (REDUCE,),
    Kind.REDUCE: (REDUCE,), Kind.ALLREDUCE: (REDUCE, BROADCAST)}


@dataclass(frozen=True, eq=False)
class Tree:
    """One tree: its root, the chunks it carries and its arcs (int32 arrays, growth order)."""

    root: int
    first_chunk: int
    chunks: int
    parent: np.ndarray
    child: np.ndarray
    path: np.ndarray

    @property
    def arcs(self) -> int:
        """Number of arcs."""
        return len(self.child)

    def chunk_ids(self) -> range:
        """The chunk ids it carries, in order."""
        return range(self.first_chunk, self.first_chunk + self.chunks)

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON object."""
        return {"root": self.root, "first_chunk": self.first_chunk, "chunks": self.chunks,
                "parent": self.parent.tolist(), "child": self.child.tolist(), "path": self.path.tolist()}


@dataclass(frozen=True, eq=False)
class TreePhase:
    """A phase: every tree broadcasts (``broadcast``) or reduces toward its root (``reduce``)."""

    op: Literal["reduce", "broadcast"]
    trees: tuple[Tree, ...]


def make_tree(root: int, first_chunk: int, chunks: int, arcs: Sequence[tuple[int, int]], paths: Sequence[int]) -> Tree:
    """A :class:`Tree` from (parent, child) arcs and their path indices."""
    pairs = np.asarray(arcs, dtype=np.int32).reshape(-1, 2)
    return Tree(root, first_chunk, chunks, pairs[:, 0].copy(), pairs[:, 1].copy(), np.asarray(paths, dtype=np.int32))


@dataclass(frozen=True, eq=False)
class TreeSchedule:
    """A schedule in the trees form: the header of a :class:`~synth.schedule.Schedule`, a table of
    physical paths and the phases of trees (see the module docstring for the rule that gives the
    transfers).

    Examples
    --------
    >>> from synth.collectives import Collective, Kind
    >>> coll = Collective(Kind.BROADCAST, num_ranks=3, chunks=2, root=0)
    >>> tree = make_tree(0, 0, 2, [(0, 1), (1, 2)], [0, 1])
    >>> form = TreeSchedule(coll, "line", ("a", "b", "c"), "manual", {}, (("a", "b"), ("b", "c")),
    ...                     (TreePhase("broadcast", (tree,)),))
    >>> [(t.src, t.dst, t.chunk, t.deps) for t in form.expand().transfers]
    [(0, 1, 0, ()), (1, 2, 0, (0,)), (0, 1, 1, (0,)), (1, 2, 1, (1, 2))]
    >>> TreeSchedule.from_json(form.to_json()).to_json() == form.to_json()
    True
    """

    collective: Collective
    topology: str
    ranks: tuple[str, ...]
    algorithm: str
    params: Mapping[str, Any]
    paths: tuple[tuple[str, ...], ...]
    phases: tuple[TreePhase, ...]
    topology_file: str | None = None
    topology_sha256: str | None = None

    #: Transfers not held: made one at a time from the trees as they are read.
    held: ClassVar[bool] = False
    #: The trees form has no in-switch operations.
    switch_ops: ClassVar[tuple[SwitchOp, ...]] = ()

    @property
    def kind(self) -> Kind:
        """The collective's kind."""
        return self.collective.kind

    @property
    def chunks(self) -> int:
        """Chunks per buffer (C)."""
        return self.collective.chunks

    def require_point_to_point(self, what: str) -> None:
        """Every transfer of the trees form is between ranks: nothing to refuse."""

    def with_topology_source(self, topology_file: str | None, topology_sha256: str | None) -> TreeSchedule:
        """This schedule, recording where its topology came from (a file path, its fingerprint)."""
        return dataclasses.replace(self, topology_file=topology_file, topology_sha256=topology_sha256)

    def link_chunks(self) -> dict[tuple[str, str], int]:
        """Chunks crossing each directed link, from the trees (:func:`link_chunks`), as for the expansion."""
        return link_chunks(self)

    def check_storable(self, what: str) -> None:
        """Refuse (:class:`~synth.errors.LimitError`) trees that would be refused when read back from a file:
        over the tree-arc limit. ``what`` names the file for the message."""
        from synth import limits

        limits.check("max_tree_arcs", sum(tree.arcs for _, tree in self.trees()), f"the trees for {what}",
                     hint="they would be refused when read back")

    def trees(self) -> Iterator[tuple[TreePhase, Tree]]:
        """Every (phase, tree) in order."""
        for phase in self.phases:
            for tree in phase.trees:
                yield phase, tree

    def num_transfers(self) -> int:
        """How many transfers :meth:`expand` builds (link transfers and the reduce phases' local ops)."""
        return self._transfer_count

    @cached_property
    def _transfer_count(self) -> int:
        count = 0
        for phase, tree in self.trees():
            per_chunk = tree.arcs
            if phase.op == REDUCE and tree.arcs:
                per_chunk += tree.arcs - len(np.unique(tree.parent))  # a local reduce per further child
            count += per_chunk * tree.chunks
        return count

    # ------------------------------------------------------------------------------------- expansion
    def iter_transfers(self) -> Iterator[Transfer]:
        """The transfers, one at a time (ids 0..T-1), without holding them all."""
        return _Expansion(self).transfers()

    def expand(self) -> Schedule:
        """The schedule with every transfer (refused over the ``max_transfers`` limit)."""
        from synth import limits

        limits.check_transfers(self.num_transfers(), f"the trees form of {self.algorithm} {self.kind} on "
                               f"{len(self.ranks)} gpus", hint="verify and congestion read the trees form as it is")
        return Schedule(self.collective, self.topology, self.ranks, self.algorithm, self.params,
                        tuple(self.iter_transfers()), self.topology_file, self.topology_sha256)

    # ------------------------------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """The documented ``synth.schedule/2`` object (``/4`` with uneven shards) with a ``trees`` body."""
        return {
            **header_dict(self),
            "trees": {"paths": [list(p) for p in self.paths],
                      "phases": [{"op": phase.op, "trees": [tree.to_dict() for tree in phase.trees]}
                                 for phase in self.phases]},
        }

    def to_json(self) -> str:
        """Deterministic JSON text: the header indented, one path and one tree per line."""
        data = self.to_dict()
        body = data.pop("trees")
        head = compact_header(data)[:-2]
        compact = {"separators": (",", ":")}
        paths = ",\n   ".join(json.dumps(p, **compact) for p in body["paths"])  # type: ignore[arg-type]
        phases = []
        for phase in body["phases"]:
            trees = ",\n     ".join(json.dumps(t, **compact) for t in phase["trees"])  # type: ignore[arg-type]
            phases.append(f'{{"op": {json.dumps(phase["op"])}, "trees": [\n     {trees}\n   ]}}')
        return (head + ',\n "trees": {\n  "paths": [\n   ' + paths + '\n  ],\n  "phases": [\n   '
                + ",\n   ".join(phases) + "\n  ]\n }\n}\n")

    @classmethod
    def from_dict(cls, data: Any, source: str = "") -> TreeSchedule:
        """Validate a parsed schedule object with a ``trees`` body; raises :class:`InputError` naming the
        field. Structure (shapes, ranges) is checked here; whether the trees make a correct collective on
        a topology is :func:`synth.verify.verify_trees`'s question."""
        if not isinstance(data, dict):
            raise InputError(source, "", "expected a JSON object at the top level")
        fmt = data.get("format")
        if fmt not in (FORMAT, SHARDS_FORMAT):
            raise InputError(source, "format", f"the trees form needs format {FORMAT!r} ({SHARDS_FORMAT!r} with "
                             f"uneven shards), got {excerpt(repr(fmt))}")
        if "transfers" in data:
            raise InputError(source, "transfers", "a schedule has either 'transfers' or 'trees', not both")
        head = read_header(data, "trees", source, fmt)
        collective, ranks = head.collective, head.ranks
        from synth import limits

        # the verifier and the expansion keep state per chunk id: refused before any is made
        limits.check_transfers(collective.num_chunk_ids, f"the {collective.num_chunk_ids:,} chunk ids of "
                               f"{source or 'the input'}", hint="every chunk id moves at least once")
        body = data["trees"]
        if not isinstance(body, dict):
            raise InputError(source, "trees", "expected an object with 'paths' and 'phases'")
        paths = _paths(body.get("paths"), source)
        raw_phases = body.get("phases")
        if not isinstance(raw_phases, list) or not raw_phases:
            raise InputError(source, "trees.phases", "expected a non-empty list of phases")
        phases = tuple(_phase(item, f"trees.phases.{index}", len(ranks), collective.num_chunk_ids, len(paths), source)
                       for index, item in enumerate(raw_phases))
        form = cls(collective, head.topology, ranks, head.algorithm, head.params, paths, phases, head.topology_file,
                   head.topology_sha256)
        limits.check("max_tree_arcs", sum(tree.arcs for _, tree in form.trees()), f"the trees in {source or 'the input'}")
        return form

    @classmethod
    def from_json(cls, text: str, source: str = "") -> TreeSchedule:
        """Parse JSON text of a schedule with a ``trees`` body."""
        from synth.documents import parse_json

        return cls.from_dict(parse_json(text, source), source)


def _paths(raw: Any, source: str) -> tuple[tuple[str, ...], ...]:
    if not isinstance(raw, list):
        raise InputError(source, "trees.paths", "expected a list of paths (lists of node ids)")
    paths = []
    for index, path in enumerate(raw):
        if not isinstance(path, list) or len(path) < 1 or not all(isinstance(node, str) for node in path):
            raise InputError(source, f"trees.paths.{index}", "expected a list of node ids (strings)")
        paths.append(tuple(path))
    return tuple(paths)


def _int_array(raw: Any, where: str, upper: int, source: str) -> np.ndarray:
    if not isinstance(raw, list) or not all(_is_int(v) for v in raw):
        raise InputError(source, where, "expected a list of integers")
    bad = next((v for v in raw if not 0 <= v < upper), None)  # checked before numpy: 10**29 is no C long
    if bad is not None:
        raise InputError(source, where, f"expected integers in 0..{upper - 1}, got {excerpt(bad)}")
    return np.asarray(raw, dtype=np.int64).astype(np.int32)


def _phase(raw: Any, where: str, num_ranks: int, num_chunks: int, num_paths: int, source: str) -> TreePhase:
    if not isinstance(raw, dict):
        raise InputError(source, where, "expected an object with 'op' and 'trees'")
    op = raw.get("op")
    if op not in PHASE_OPS:
        raise InputError(source, f"{where}.op", f"expected 'broadcast' or 'reduce', got {op!r}")
    items = raw.get("trees")
    if not isinstance(items, list):
        raise InputError(source, f"{where}.trees", "expected a list of trees")
    trees = []
    for index, item in enumerate(items):
        at = f"{where}.trees.{index}"
        if not isinstance(item, dict):
            raise InputError(source, at, "expected an object")
        for name in ("root", "first_chunk", "chunks", "parent", "child", "path"):
            if name not in item:
                raise InputError(source, f"{at}.{name}", "missing required field")
        root, first, count = item["root"], item["first_chunk"], item["chunks"]
        if not _is_int(root) or not 0 <= root < num_ranks:
            raise InputError(source, f"{at}.root", f"expected a rank in 0..{num_ranks - 1}, got {root!r}")
        if not _is_int(first) or not 0 <= first < num_chunks:
            raise InputError(source, f"{at}.first_chunk", f"expected a chunk id in 0..{num_chunks - 1}, got {first!r}")
        if not _is_int(count) or not 1 <= count <= num_chunks - first:
            raise InputError(source, f"{at}.chunks", f"expected 1..{num_chunks - first} (chunk ids end at "
                             f"{num_chunks - 1}), got {count!r}")
        parent = _int_array(item["parent"], f"{at}.parent", num_ranks, source)
        child = _int_array(item["child"], f"{at}.child", num_ranks, source)
        path = _int_array(item["path"], f"{at}.path", max(num_paths, 1), source)
        if not len(parent) == len(child) == len(path):
            raise InputError(source, at, f"'parent', 'child' and 'path' differ in length ({len(parent)}, {len(child)}, "
                             f"{len(path)})")
        if len(path) and not num_paths:
            raise InputError(source, f"{at}.path", "the trees have arcs but 'trees.paths' is empty")
        trees.append(Tree(root, first, count, parent, child, path))
    return TreePhase(op, tuple(trees))


def is_tree_document(data: Any) -> bool:
    """True for a parsed schedule object with a ``trees`` body (and no ``transfers``)."""
    return isinstance(data, dict) and "trees" in data and "transfers" not in data


def read_schedule(path: str | Path) -> ScheduleForm:
    """A schedule file as it is stored: a :class:`~synth.schedule.Schedule`, or a :class:`TreeSchedule`
    when it has a ``trees`` body."""
    from synth import limits

    data = read_document(path, max_bytes=int(limits.limit_value("max_schedule_bytes")))
    if is_tree_document(data):
        return TreeSchedule.from_dict(data, str(path))
    return Schedule.from_dict(data, str(path))


class _Expansion:
    """Builds the transfers of a :class:`TreeSchedule` by the documented rule."""

    def __init__(self, form: TreeSchedule) -> None:
        self.form = form
        self.scratch_used = [0] * len(form.ranks)
        self.finished: dict[int, int] = {}  # chunk -> its last transfer in the previous phases
        self.next_id = 0

    def transfers(self) -> Iterator[Transfer]:
        paths = self.form.paths
        last = len(self.form.phases) - 1
        for number, phase in enumerate(self.form.phases):
            finished: dict[int, int] = {}
            for tree in phase.trees:
                if phase.op == BROADCAST:
                    yield from self._down(tree, paths, finished if number < last else None)
                else:
                    yield from self._up(tree, paths, finished)
            self.finished = finished

    def _down(self, tree: Tree, paths: tuple[tuple[str, ...], ...],
              finished: dict[int, int] | None) -> Iterator[Transfer]:
        """A broadcast tree's transfers; records each chunk's last one in ``finished`` when a phase follows."""
        arcs = list(zip(tree.parent.tolist(), tree.child.tolist(), [paths[i] for i in tree.path.tolist()],
                        strict=True))
        previous: dict[int, int] = {}
        for chunk in tree.chunk_ids():
            before = self.finished.get(chunk)
            start = (before,) if before is not None else ()
            at: dict[int, int] = {}
            for x, y, path in arcs:
                deps = (at[x],) if x in at else start
                if y in previous:
                    deps = tuple(sorted((*deps, previous[y])))
                tid = self.next_id
                self.next_id += 1
                yield Transfer(tid, x, y, chunk, COPY, path, deps)
                at[y] = tid
            if finished is not None and at:
                finished[chunk] = max(at.values())
            previous = at

    def _up(self, tree: Tree, paths: tuple[tuple[str, ...], ...], finished: dict[int, int]) -> Iterator[Transfer]:
        arcs = list(zip(tree.parent.tolist(), tree.child.tolist(), [paths[i] for i in tree.path.tolist()],
                        strict=True))
        arcs.reverse()
        scratch_used = self.scratch_used
        root = tree.root
        previous: dict[int, int] = {}
        for chunk in tree.chunk_ids():
            last_into: dict[int, int] = {}
            sent: dict[int, int] = {}
            for x, y, path in arcs:
                deps = [last_into[y]] if y in last_into else []
                if y in previous:
                    deps.append(previous[y])
                tid = self.next_id
                if x not in last_into:
                    self.next_id += 1
                    yield Transfer(tid, y, x, chunk, REDUCE, path, tuple(sorted(deps)))
                    last_into[x] = sent[y] = tid
                    continue
                slot = scratch_used[x]
                scratch_used[x] += 1
                self.next_id += 2
                yield Transfer(tid, y, x, chunk, COPY, path, tuple(sorted(deps)), dst_scratch=slot)
                yield Transfer(tid + 1, x, x, chunk, REDUCE, (path[-1],), (last_into[x], tid), src_scratch=slot)
                sent[y] = tid
                last_into[x] = tid + 1
            if root in last_into:
                finished[chunk] = last_into[root]
            previous = sent


def link_chunks(form: TreeSchedule) -> dict[tuple[str, str], int]:
    """Chunks each link carries over the whole schedule (what :func:`synth.evaluate.congestion` counts on
    the expanded transfers), from the trees: each arc's path carries each of its tree's chunks once."""
    uses = np.zeros(len(form.paths), dtype=np.int64)
    for _, tree in form.trees():
        if tree.arcs:
            uses += np.bincount(tree.path, minlength=len(form.paths)) * tree.chunks
    load: dict[tuple[str, str], int] = {}
    for path, count in zip(form.paths, uses.tolist(), strict=True):
        if count:
            for hop in zip(path, path[1:], strict=False):
                load[hop] = load.get(hop, 0) + count
    return load

