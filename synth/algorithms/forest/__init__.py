"""``forest``: bandwidth-optimal spanning-tree schedules on any topology (ForestColl's method).

For allgather every gpu broadcasts its shard down k out-trees (each carrying 1/k of it); the trees are
packed so that no link carries more than its share, which makes the schedule's congestion time equal to
the exact cut bound (see :mod:`synth.cuts.allgather`). The pipeline:

1. :mod:`~synth.cuts.allgather`: the optimal rate x* and the bottleneck cut (parametric
   max-flow), then the fewest trees per root k that reach it;
2. :mod:`~synth.algorithms.forest.splitting`: switches are split off into logical gpu-to-gpu arcs
   that remember their physical paths;
3. :mod:`~synth.algorithms.forest.packing`: k out-trees per root are packed on the logical graph.

Reduce-scatter packs the trees on the reversed network and runs them backwards (reductions toward the
root; on a symmetric topology these are the allgather trees). Allreduce is reduce-scatter then allgather,
each chunk's broadcast starting as soon as its own reduction reaches its owner; ``pipelined=True``
reduces and broadcasts every chunk over one and the same tree (reduce-then-broadcast per tree, which
needs symmetric links). Broadcast and reduce pack trees from one root only.

The congestion time of an allreduce is at most the sum of its two phases' optima (2x the allgather
optimum on a symmetric topology) and equal to it whenever some link is saturated in both phases (all the
named systems); on a few topologies (a star, say) the two phases load opposite directions of the
bottleneck links and the congestion time comes out lower.

Options
-------
max_trees_per_root : int, optional
    Use at most this many trees per root (runtimes limit channels); the schedule's params report the
    rate reached and its gap to the optimum.
min_trees_per_root : int, optional
    Use at least this many trees per root, still at the optimum (the first count from there that
    reaches it). Each tree then carries a smaller share, so a gpu can feed more children and the trees
    come out shallower: one root's trees on a single switch are a chain of every gpu with one tree, and
    about log(n) deep with many (with ``spread``). Not with ``max_trees_per_root``.
pipelined : bool
    Allreduce only: reduce then broadcast each chunk over the same tree.
symmetric : bool, optional
    Use box symmetry (boxes that are alike, :mod:`~synth.cuts.symmetry`): work for one box
    and copy it. Default: from 64 gpus on, when the topology has it.
chunks : int, optional
    A multiple of the natural chunk count (N*k for allgather, reduce-scatter and allreduce, k for
    broadcast and reduce); each tree then carries several chunks.
depth_pass_arcs : int, optional
    The depth pass's budget in tree arcs (0: none): after packing, pairs of roots are packed again while
    that makes the deepest trees shallower (same rate and tree counts). Default: a quick pass, a share of
    the arcs the packing grew, so the pass costs a fraction of the synthesis (the size choice runs the full
    pass, :data:`~synth.algorithms.forest.packing.SHALLOW_ARC_BUDGET`, and a longer one on its choice).

Which variant runs fastest at a message size (trees per root, slices, spread, a longer depth pass) is
chosen by simulation in the selection layer, :mod:`synth.choose.forest`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Literal

from synth.algorithms.forest.packing import QUICK_SHALLOW_SHARE, SHALLOW_ARC_BUDGET
from synth.algorithms.forest.plan import ForestPlan, get_plan, is_symmetric
from synth.collectives import Collective, Kind, uneven_weights
from synth.errors import InputError, NotApplicable
from synth.schedule import REDUCE, Schedule
from synth.topology import Topology
from synth.trees import BROADCAST, Tree, TreePhase, TreeSchedule, make_tree

GIGA = 10**9

__all__ = ["forest", "forest_trees", "get_plan", "ForestPlan", "seconds_per_byte", "trees_per_root"]


class _PathTable:
    """The physical paths of a forest's tree arcs, numbered in the order first used."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, ...], int] = {}

    def number(self, path: tuple[str, ...]) -> int:
        found = self.index.get(path)
        if found is None:
            found = self.index[path] = len(self.index)
        return found

    def paths(self) -> tuple[tuple[str, ...], ...]:
        return tuple(self.index)


class _PathCursor:
    """Hands out the physical paths (indices into a :class:`_PathTable`) of each logical arc, one tree
    copy at a time: each logical arc's bundles in order, each bundle for as many copies as it carries."""

    def __init__(self, plan: ForestPlan, backwards: bool, table: _PathTable) -> None:
        self.names = plan.net.names
        self.paths = plan.logical.paths
        self.backwards = backwards
        self.table = table
        self.position: dict[tuple[int, int], list[int]] = {}
        self.numbered: dict[tuple[int, int], list[int]] = {}
        self.single: dict[tuple[int, int], int] = {}  # arcs routed over one path: their path, whichever copy

    def take_all(self, arcs: list[tuple[int, int]]) -> list[int]:
        """``[take(arc) for arc in arcs]``, at C speed when every arc has a single path (the common case
        on large fabrics, where millions of tree arcs are numbered)."""
        try:
            return list(map(self.single.__getitem__, arcs))
        except KeyError:
            return [self.take(arc) for arc in arcs]

    def take(self, arc: tuple[int, int]) -> int:
        state = self.position.get(arc)
        if state is None:
            state = self.position[arc] = [0, 0]
            names = self.names
            step = -1 if self.backwards else 1
            self.numbered[arc] = [self.table.number(tuple(names[v] for v in path[::step]))
                                  for path, _ in self.paths[arc]]
            if len(self.numbered[arc]) == 1:
                self.single[arc] = self.numbered[arc][0]
        index = state[0]
        state[1] += 1
        if state[1] == self.paths[arc][index][1]:
            state[0] += 1
            state[1] = 0
        return self.numbered[arc][index]


def seconds_per_byte(plan: ForestPlan) -> Fraction:
    """Exact time per byte of the plan's collective at the rate its trees reach.

    Allgather and reduce-scatter count the whole output (N shards): 1 / (N x); broadcast and reduce the
    whole buffer: 1 / x.
    """
    return Fraction(1, sum(plan.weights)) / (plan.rate * GIGA)


def _optimal_seconds_per_byte(plan: ForestPlan) -> Fraction:
    return Fraction(1, sum(plan.weights)) / (plan.optimum.rate * GIGA)


def _tree_copies(plan: ForestPlan, chunks_of: Callable[[int, int], range], table: _PathTable,
           backwards: bool) -> tuple[Tree, ...]:
    """Every tree copy of the plan with the chunks it carries and its arcs' physical paths (in the
    direction data moves: down the tree, or up it when ``backwards``)."""
    cursor = _PathCursor(plan, backwards, table)
    copy_index = [0] * plan.net.num_compute
    trees = []
    for tree in plan.classes:
        root = tree.root
        for _ in range(tree.copies):
            chunk_ids = chunks_of(root, copy_index[root])
            trees.append(make_tree(root, chunk_ids.start, len(chunk_ids), tree.arcs,
                                   cursor.take_all(tree.arcs)))
            copy_index[root] += 1
    return tuple(trees)


def _block_chunks(block: int, per_copy: int) -> Callable[[int, int], range]:
    """Root r owns chunks r*block .. r*block+block-1; copy j of its trees carries ``per_copy`` of them."""
    def chunks_of(root: int, copy: int) -> range:
        start = root * block + copy * per_copy
        return range(start, start + per_copy)
    return chunks_of


def _shard_chunks(collective: Collective, per_copy: int) -> Callable[[int, int], range]:
    """Root r owns its shard's chunks (:meth:`~synth.collectives.Collective.owned`); copy j of its trees
    carries ``per_copy`` of them."""
    def chunks_of(root: int, copy: int) -> range:
        start = collective.owned(root).start + copy * per_copy
        return range(start, start + per_copy)
    return chunks_of


def _check_chunks(chunks: int | None, natural: int, what: str) -> int:
    if chunks is None:
        return 1
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1 or chunks % natural:
        raise InputError("", "chunks", f"forest needs chunks to be a multiple of {natural} ({what}), got {chunks!r}")
    return chunks // natural


def _params(plans: dict[str, ForestPlan], time_per_byte: Fraction, optimal: Fraction, chunks: int,
            extra: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {"chunks": chunks}
    for phase, plan in plans.items():
        params[f"{phase}_trees_per_root"] = plan.trees
        params[f"{phase}_tree_classes"] = len(plan.classes)
        params[f"{phase}_box_symmetry"] = plan.symmetric
    params.update(extra)
    params["time_per_byte"] = str(time_per_byte)
    params["optimal_time_per_byte"] = str(optimal)
    params["algbw_GBps"] = round(float(1 / (time_per_byte * GIGA)), 6)
    params["optimal_algbw_GBps"] = round(float(1 / (optimal * GIGA)), 6)
    params["gap_percent"] = round(float((1 - optimal / time_per_byte) * 100), 6)  # algbw lost
    return params


def forest(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
           max_trees_per_root: int | None = None, pipelined: bool = False, symmetric: bool | None = None,
           spread: bool = False, min_trees_per_root: int | None = None,
           depth_pass_arcs: int | None = None, shards: Sequence[int] | str | None = None) -> Schedule:
    """Bandwidth-optimal tree schedule for allgather, reducescatter, allreduce, broadcast or reduce.

    The schedule's congestion time (:func:`synth.evaluate.congestion`) equals the exact optimum, which is
    reported in ``params`` together with the trees used (and, with ``max_trees_per_root``, the gap).
    ``spread`` splits each switch into many light gpu pairs rather than a few heavy ones (the same optimum,
    shallower trees: on the 32-host BiGraph the reduce-scatter trees are 15 arcs deep instead of 30).
    ``depth_pass_arcs`` is the depth pass's budget in tree arcs (0: no pass); by default the pass is quick,
    a share of the arcs the packing grew (:data:`~synth.algorithms.forest.packing.QUICK_SHALLOW_SHARE`), so it
    costs a fraction of the rest of the synthesis. Which of these variants runs
    fastest at a message size is chosen in :mod:`synth.choose.forest` (``synth generate -O size=...``).
    ``shards`` (allgather and reducescatter): each rank's shard size, in any unit (``[1, 3, 2, 0]`` or
    ``"1,3,2,0"``), for allgatherv and reduce-scatterv: root r packs k x w_r trees (w: the shards over their
    gcd), which reaches the exact bound for those weights (:func:`synth.bounds.shard_bound`).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.evaluate import congestion
    >>> topo = load_topology("switch:n=4")
    >>> s = forest(topo, Kind.ALLGATHER)
    >>> s.params["optimal_algbw_GBps"], congestion(s, topo).seconds_per_byte == Fraction(3, 200 * 10**9)
    (66.666667, True)
    """
    budget, share = _depth_pass(depth_pass_arcs)
    return _forest(topology, kind, chunks, root, max_trees_per_root, pipelined, symmetric, spread,
                   budget, min_trees=min_trees_per_root, shallow_share=share, shards=shards)


def _depth_pass(depth_pass_arcs: int | None) -> tuple[int, float | None]:
    """The depth pass's arc budget and share of the packing's arcs for a ``depth_pass_arcs`` option."""
    if depth_pass_arcs is None:
        return SHALLOW_ARC_BUDGET, QUICK_SHALLOW_SHARE
    if isinstance(depth_pass_arcs, bool) or not isinstance(depth_pass_arcs, int) or depth_pass_arcs < 0:
        raise InputError("", "depth_pass_arcs", f"expected a whole number of tree arcs, got {depth_pass_arcs!r}")
    return depth_pass_arcs, None


def trees_per_root(schedule: Schedule) -> int:
    """The most trees per root of any phase of a forest schedule.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> trees_per_root(forest(load_topology("dgx1"), Kind.ALLGATHER))
    6
    """
    return max(int(value) for key, value in schedule.params.items() if key.endswith("trees_per_root"))


def forest_trees(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
                 max_trees_per_root: int | None = None, pipelined: bool = False,
                 symmetric: bool | None = None, spread: bool = False,
                 min_trees_per_root: int | None = None, depth_pass_arcs: int | None = None,
                 shards: Sequence[int] | str | None = None) -> TreeSchedule:
    """The forest schedule in the compact trees form (:mod:`synth.trees`), without building its transfers.

    Takes :func:`forest`'s options except ``size`` (choosing for a size runs the flow model on the
    transfers). ``forest_trees(...).expand()`` is ``forest(...)``, transfer for transfer; the trees form
    reaches the sizes where the transfers would not fit (16.8 million for an allgather on 4,096 gpus).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> topo = load_topology("dgx1")
    >>> form = forest_trees(topo, Kind.ALLGATHER)
    >>> form.num_transfers(), form.expand().transfers == forest(topo, Kind.ALLGATHER).transfers
    (336, True)
    """
    budget, share = _depth_pass(depth_pass_arcs)
    return _forest_trees(topology, kind, chunks, root, max_trees_per_root, pipelined, symmetric, None, spread,
                         budget, min_trees=min_trees_per_root, shallow_share=share, shards=shards)


def _check_options(kind: Kind, max_trees_per_root: Any, pipelined: Any, symmetric: Any, spread: Any) -> None:
    """Refuse option values of the wrong type, naming the option."""
    if max_trees_per_root is not None and (isinstance(max_trees_per_root, bool) or not isinstance(max_trees_per_root, int)):
        raise InputError("", "max_trees_per_root", f"expected a positive integer, got {max_trees_per_root!r}")
    if not isinstance(pipelined, bool):
        raise InputError("", "pipelined", f"expected true or false, got {pipelined!r}")
    if pipelined and kind != Kind.ALLREDUCE:
        raise InputError("", "pipelined", "only allreduce has a pipelined variant")
    if symmetric is not None and not isinstance(symmetric, bool):
        raise InputError("", "symmetric", f"expected true or false, got {symmetric!r}")
    if not isinstance(spread, bool):
        raise InputError("", "spread", f"expected true or false, got {spread!r}")


def _forest_trees(topology: Topology, kind: Kind, chunks: int | None, root: int | None, max_trees_per_root: int | None,
                  pipelined: bool, symmetric: bool | None, max_arcs: int | None, spread: bool = False,
                  shallow_budget: int = SHALLOW_ARC_BUDGET, min_trees: int | None = None,
                  shallow_share: float | None = None, shards: Any = None) -> TreeSchedule:
    _check_options(kind, max_trees_per_root, pipelined, symmetric, spread)
    n = topology.num_ranks
    weights = uneven_weights(kind, shards, n)
    extra: dict[str, Any] = {"spread": True} if spread else {}
    limit = max_trees_per_root
    table = _PathTable()

    def form(collective: Collective, params: dict[str, Any], phases: list[TreePhase]) -> TreeSchedule:
        return TreeSchedule(collective, topology.name, topology.gpus, "forest", params, table.paths(), tuple(phases))

    if kind in (Kind.BROADCAST, Kind.REDUCE):
        root = 0 if root is None else root
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < n:
            raise InputError("", "root", f"{kind} needs a root rank in 0..{n - 1}, got {root!r}")
        plan = get_plan(topology, reverse=kind == Kind.REDUCE, root=root, max_trees=limit, max_arcs=max_arcs,
                        spread=spread, shallow_budget=shallow_budget, min_trees=min_trees, shallow_share=shallow_share)
        per_copy = _check_chunks(chunks, plan.trees, "trees from the root")
        collective = Collective(kind, n, plan.trees * per_copy, root)
        params = _params({"tree": plan}, seconds_per_byte(plan), _optimal_seconds_per_byte(plan),
                         collective.chunks, extra)
        every_copy = _block_chunks(0, per_copy)
        chunks_of = lambda _root, copy: every_copy(0, copy)  # noqa: E731  (every tree has the one root)
        op: Literal["reduce", "broadcast"] = BROADCAST if kind == Kind.BROADCAST else REDUCE
        return form(collective, params, [TreePhase(op, _tree_copies(plan, chunks_of, table, op == REDUCE))])

    if root is not None:
        raise InputError("", "root", f"{kind} takes no root")
    if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        if weights is not None and symmetric:
            raise InputError("", "symmetric", "box symmetry needs even shards (every gpu a root of equal weight)")
        plan = get_plan(topology, reverse=kind == Kind.REDUCESCATTER, max_trees=limit, symmetric=symmetric,
                        max_arcs=max_arcs, spread=spread, shallow_budget=shallow_budget, min_trees=min_trees,
                        shallow_share=shallow_share, weights=weights)
        total = sum(plan.weights)
        per_copy = _check_chunks(chunks, total * plan.trees, "shard weights x trees per unit" if weights else
                                 "gpus x trees per root")
        if weights is None:
            collective = Collective(kind, n, n * plan.trees * per_copy, None)
            chunks_of = _block_chunks(plan.trees * per_copy, per_copy)
        else:
            collective = Collective.uneven(kind, [w * plan.trees * per_copy for w in weights])
            chunks_of = _shard_chunks(collective, per_copy)
            extra = {**extra, "shards": list(weights)}
        params = _params({"tree": plan}, seconds_per_byte(plan), _optimal_seconds_per_byte(plan),
                         collective.chunks, extra)
        all_op: Literal["reduce", "broadcast"] = BROADCAST if kind == Kind.ALLGATHER else REDUCE
        trees = _tree_copies(plan, chunks_of, table, all_op == REDUCE)
        return form(collective, params, [TreePhase(all_op, trees)])

    if kind != Kind.ALLREDUCE:
        raise NotApplicable(f"forest does not do {kind}")
    gather = get_plan(topology, reverse=False, max_trees=limit, symmetric=symmetric, max_arcs=max_arcs, spread=spread,
                      shallow_budget=shallow_budget, min_trees=min_trees, shallow_share=shallow_share)
    if pipelined:
        if not is_symmetric(topology):
            raise NotApplicable("pipelined allreduce reduces and broadcasts over the same trees, which needs every "
                                "link to have a reverse link of the same bandwidth; use pipelined=false")
        scatter = gather
    else:
        scatter = get_plan(topology, reverse=True, max_trees=limit, symmetric=symmetric, max_arcs=max_arcs,
                           spread=spread, shallow_budget=shallow_budget, min_trees=min_trees, shallow_share=shallow_share)
    block = math.lcm(gather.trees, scatter.trees)
    block *= _check_chunks(chunks, n * block, "gpus x trees per root")
    collective = Collective(kind, n, n * block, None)
    time_per_byte = seconds_per_byte(gather) + seconds_per_byte(scatter)
    optimal = _optimal_seconds_per_byte(gather) + _optimal_seconds_per_byte(scatter)
    params = _params({"reducescatter": scatter, "allgather": gather}, time_per_byte, optimal, collective.chunks,
                     {"pipelined": pipelined, **extra})
    reduced = _tree_copies(scatter, _block_chunks(block, block // scatter.trees), table, True)
    broadcast = _tree_copies(gather, _block_chunks(block, block // gather.trees), table, False)
    return form(collective, params, [TreePhase(REDUCE, reduced), TreePhase(BROADCAST, broadcast)])


def _forest(topology: Topology, kind: Kind, chunks: int | None, root: int | None, max_trees_per_root: int | None,
            pipelined: bool, symmetric: bool | None, spread: bool = False,
            shallow_budget: int = SHALLOW_ARC_BUDGET, min_trees: int | None = None,
            shallow_share: float | None = None, shards: Any = None) -> Schedule:
    from synth import limits

    n = topology.num_ranks
    least = (n - 1) * (1 if kind in (Kind.BROADCAST, Kind.REDUCE) else n) * (2 if kind == Kind.ALLREDUCE else 1)
    limits.check_transfers(least, f"forest {kind} on {n} gpus",
                           hint="forest_trees builds its trees form, which has no transfers")  # before the plan
    max_arcs = int(limits.limit_value("max_transfers"))  # each tree arc is at least one transfer
    return _forest_trees(topology, kind, chunks, root, max_trees_per_root, pipelined, symmetric, max_arcs,
                         spread, shallow_budget, min_trees, shallow_share, shards).expand()
