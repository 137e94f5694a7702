"""The verifier for the trees form (:mod:`synth.trees`), without expanding it into transfers.

The trees form fixes how transfers follow from trees, so a schedule in that form is correct exactly when
its trees are. :func:`verify_trees` checks, naming the phase and tree:

- the ranks are the topology's gpus, each once;
- every path in the table is made of links, visits no node twice and crosses no gpu that does not
  forward, and every arc's path starts at the sending rank's gpu and ends at the receiving rank's;
- the phases are the collective's (allgather and broadcast: ``broadcast``; reduce-scatter and reduce:
  ``reduce``; allreduce: ``reduce`` then ``broadcast``);
- every tree is a spanning arborescence of the ranks in growth order: each rank but the root is the
  child of exactly one arc, the root of none, and each arc's parent is the root or an earlier arc's
  child;
- each phase carries every chunk id exactly once, on a tree rooted where the collective needs it (the
  chunk's owner for allgather and reduce-scatter, the collective's root for broadcast and reduce, and
  for allreduce the rank the chunk was reduced into).

Why that suffices, by the expansion rule: in a ``broadcast`` phase every rank receives each chunk once,
from a parent that already holds it (the send waits for the transfer into the parent), all writes to a
cell are ordered, and nothing else writes it. In a ``reduce`` phase each rank sends once per chunk after
every write into its cell, each partial sum enters one fresh scratch slot or the parent's cell, and since
the tree spans the ranks the root's last write depends on every rank's contribution, counted once. In an
allreduce the broadcast of a chunk waits for that write, so every earlier read of the chunk's cells is
ordered before the broadcast's writes. The tests hold this to the exact verifier
(:func:`synth.verify.verify`) on the expanded transfers, on random topologies and on corrupted trees.

Cost: linear in the arcs, in numpy (about a second per million arcs).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from synth.collectives import Kind
from synth.errors import VerificationError
from synth.schedule import Schedule, ScheduleForm
from synth.topology import Topology
from synth.trees import BROADCAST, PHASES_OF, Tree, TreeSchedule, link_chunks
from synth.verify import Verified, _check_ranks, verify


@dataclass(frozen=True)
class TreeVerifyReport:
    """Facts about a trees-form schedule that passed."""

    transfers: int
    trees: int
    max_tree_depth: int
    max_chunks_on_a_link: int

    def to_dict(self) -> dict[str, Any]:
        """The facts as ``synth verify --json`` prints them (``form``: ``trees``)."""
        return {"form": "trees", "transfers": self.transfers, "trees": self.trees,
                "max_tree_depth": self.max_tree_depth, "max_chunks_on_a_link": self.max_chunks_on_a_link}

    def describe(self) -> str:
        """The facts in words."""
        return (f"trees form: {self.trees} trees, {self.transfers} transfers when expanded, deepest tree "
                f"{self.max_tree_depth} arcs")


@functools.singledispatch
def verify_any(schedule: ScheduleForm, topology: Topology) -> Verified:
    """Check a schedule in either form on ``topology``: the transfers form with the exact verifier
    (:func:`synth.verify.verify`), the trees form on its trees (:func:`verify_trees`); return the report or
    raise :class:`VerificationError`.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms.forest import forest_trees
    >>> topo = load_topology("dgx1")
    >>> form = forest_trees(topo, Kind.ALLGATHER)
    >>> verify_any(form, topo).describe(), verify_any(form.expand(), topo).describe()
    ('trees form: 48 trees, 336 transfers when expanded, deepest tree 5 arcs', '336 transfers, dependency depth 6')
    """
    raise TypeError(f"not a schedule: {type(schedule).__name__}")


def verify_trees(form: TreeSchedule, topology: Topology) -> TreeVerifyReport:
    """Check a trees-form schedule on ``topology``; return a report or raise :class:`VerificationError`.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms.forest import forest_trees
    >>> topo = load_topology("dgx1")
    >>> report = verify_trees(forest_trees(topo, Kind.ALLREDUCE), topo)
    >>> report.transfers, report.trees
    (826, 96)
    """
    _check_ranks(form, topology)
    _check_path_table(form, topology)
    kind = form.kind
    expected = PHASES_OF.get(kind)
    found = tuple(phase.op for phase in form.phases)
    if expected is None:
        raise VerificationError(f"a {kind} has no trees form (it is not a broadcast or reduction over trees)")
    if found != expected:
        raise VerificationError(f"a {kind} in the trees form has the phases {list(expected)}, got {list(found)}")
    gpu_index = {gpu: rank for rank, gpu in enumerate(form.ranks)}
    starts = np.asarray([gpu_index.get(path[0], -1) for path in form.paths], dtype=np.int64)
    ends = np.asarray([gpu_index.get(path[-1], -1) for path in form.paths], dtype=np.int64)
    n = len(form.ranks)
    depth = 0
    reduced_at: np.ndarray | None = None
    for number, phase in enumerate(form.phases):
        owner = np.full(form.collective.num_chunk_ids, -1, dtype=np.int64)
        for index, tree in enumerate(phase.trees):
            where = f"phase {number} ({phase.op}), tree {index} (root {tree.root})"
            depth = max(depth, _check_tree(tree, n, where))
            sender, receiver = (tree.parent, tree.child) if phase.op == BROADCAST else (tree.child, tree.parent)
            wrong = np.flatnonzero((starts[tree.path] != sender) | (ends[tree.path] != receiver))
            if wrong.size:
                arc = int(wrong[0])
                path = form.paths[int(tree.path[arc])]
                raise VerificationError(
                    f"{where}: arc {arc} sends rank {int(sender[arc])} -> {int(receiver[arc])} "
                    f"({form.ranks[int(sender[arc])]} -> {form.ranks[int(receiver[arc])]}) along a path that runs "
                    f"{path[0]} -> {path[-1]}")
            span = owner[tree.first_chunk:tree.first_chunk + tree.chunks]
            if (span >= 0).any():
                chunk = tree.first_chunk + int(np.flatnonzero(span >= 0)[0])
                raise VerificationError(f"{where}: chunk {chunk} is carried by two trees of the phase")
            span[:] = tree.root
        missing = np.flatnonzero(owner < 0)
        if missing.size:
            raise VerificationError(f"phase {number} ({phase.op}): chunk {int(missing[0])} is carried by no tree "
                                    f"({missing.size} chunks are missing)")
        _check_roots(form, number, owner, reduced_at)
        reduced_at = owner
    load = link_chunks(form)
    return TreeVerifyReport(transfers=form.num_transfers(), trees=sum(len(p.trees) for p in form.phases),
                            max_tree_depth=depth, max_chunks_on_a_link=max(load.values(), default=0))



verify_any.register(Schedule, verify)
verify_any.register(TreeSchedule, verify_trees)

def _check_path_table(form: TreeSchedule, topology: Topology) -> None:
    graph = topology.graph
    blocked = topology.non_forwarding_gpus
    for index, path in enumerate(form.paths):
        where = f"path {index} ({' -> '.join(path)})"
        if len(path) < 2:
            raise VerificationError(f"{where}: a path has at least 2 nodes")
        if len(set(path)) != len(path):
            raise VerificationError(f"{where}: visits a node twice")
        for u, v in zip(path, path[1:], strict=False):
            if not graph.has_edge(u, v):
                raise VerificationError(f"{where}: hop {u} -> {v} is not a link")
        for node in path[1:-1]:
            if node in blocked:
                raise VerificationError(f"{where}: crosses gpu {node}, which does not forward (a gpu moves data on "
                                        "only when a kernel copies it)")


def _check_tree(tree: Tree, n: int, where: str) -> int:
    """Check that the tree spans the ranks in growth order; return its depth (arcs on the longest path)."""
    root, parent, child = tree.root, tree.parent, tree.child
    if tree.arcs != n - 1:
        raise VerificationError(f"{where}: a tree spanning {n} ranks has {n - 1} arcs, got {tree.arcs}")
    seen = np.bincount(child, minlength=n)
    if seen[root]:
        raise VerificationError(f"{where}: the root is the child of an arc")
    twice = np.flatnonzero(seen > 1)
    if twice.size:
        raise VerificationError(f"{where}: rank {int(twice[0])} is the child of {int(seen[twice[0]])} arcs")
    position = np.full(n, -1, dtype=np.int64)
    position[child] = np.arange(tree.arcs)
    arrived = position[parent]
    early = np.flatnonzero((parent != root) & ((arrived < 0) | (arrived >= np.arange(tree.arcs))))
    if early.size:
        arc = int(early[0])
        raise VerificationError(f"{where}: arc {arc} ({int(parent[arc])} -> {int(child[arc])}) sends from a rank "
                                "that has not received yet (a parent is the root or an earlier arc's child)")
    up = np.arange(n)
    up[child] = parent
    distance = (up != root).astype(np.int64)
    distance[root] = 0
    while (up != root).any():  # pointer jumping: the distance to each rank's current ancestor
        distance = distance + distance[up]
        up = up[up]
    return int(distance.max(initial=0)) if n > 1 else 0


def _check_roots(form: TreeSchedule, number: int, root_of: np.ndarray, reduced_at: np.ndarray | None) -> None:
    """Each chunk's tree is rooted where the collective needs it."""
    collective = form.collective
    kind = collective.kind
    phase = form.phases[number]
    if kind in (Kind.BROADCAST, Kind.REDUCE):
        wanted = np.full_like(root_of, collective.root)
        need = f"the collective's root {collective.root}"
    elif kind == Kind.ALLREDUCE and phase.op == BROADCAST:
        assert reduced_at is not None
        wanted = reduced_at
        need = "the rank it was reduced into"
    elif kind == Kind.ALLREDUCE:
        return
    else:
        wanted = np.repeat(np.arange(collective.num_ranks), [len(collective.owned(r)) for r in range(collective.num_ranks)])
        need = "its owner"
    wrong = np.flatnonzero(root_of != wanted)
    if wrong.size:
        chunk = int(wrong[0])
        verb = "broadcast from" if phase.op == BROADCAST else "reduced into"
        raise VerificationError(f"phase {number} ({phase.op}): chunk {chunk} is {verb} rank {int(root_of[chunk])}, "
                                f"but it must be {verb} {need} (rank {int(wanted[chunk])})")
