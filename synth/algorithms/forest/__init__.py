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
size : int or str, optional
    The message size to choose for (bytes or ``"1GiB"``). Without ``max_trees_per_root``, forest
    then tries trees per root k = 1, 2, 4, ... up to the optimal k (that one included), evaluates each
    schedule at ``size`` with the flow model (:func:`synth.evaluate.evaluate`, protocol and slices by
    the plan rule) and returns the fastest (ties to fewer trees). Fewer trees give up some of the
    bandwidth optimum but stream each tree at a larger share of its links, so fill and drain cost less.
    The two fastest k are also tried with 64 KiB slices (``FINE_SLICE_BYTES``) where their chunks are larger: finer
    slices fill a deep forest's pipeline sooner. From the fastest so far, the choice then steps to the
    next k, the next finer slice (``REFINE_SLICES``: 256, 128, 64 then 32 KiB, halving) or both while that
    is faster: more trees pay off once finer slices fill them. Where that ends beside a gap the doubling left
    (three and seven trees), the limit halfway is built and tried too, and the search goes on from it while it
    is faster (2 x MI250's reduce-scatter at 1 GiB: five trees per root). Then the chosen tree limit and slices are
    tried with ``spread`` splitting (see :func:`forest`) where it builds other trees, and kept where that is faster
    (on 2 x DGX H100 and the 32-host BiGraph it is; on 2 x MI250 it is not). For one root (broadcast, reduce)
    where the optimum's own k is the fastest, the choice also doubles the trees per root at the optimum
    (``min_trees_per_root``, spread where there is a switch) while that is faster, then steps to finer slices
    while faster, and keeps that where it beats the spread try (GB200 NVL72's broadcast at 1 GiB: one tree, a
    chain of 72 gpus, 78% of the bound; sixteen, 96.5%); ``chosen_more_trees`` records it. Last, the chosen trees are packed
    again with a depth pass eight times as long (``POLISH_ARC_BUDGET``; only where the plan's pass stopped on its
    budget) and kept where faster, named ``long depth pass`` in ``variant``. The chosen schedule pins its slice size in
    ``params["plan"]``, so every command evaluates it with the same plan (a runtime gets it from
    NCCL_BUFFSIZE = 8 slices). The schedule's ``params`` record ``variant`` (``k=3``), ``size``,
    ``size_choice`` (each variant's time, keyed ``k`` or ``k/slice_bytes``, with ``/spread`` for the spread
    variant, ``/polished`` for the longer depth pass, None where a variant was cut off as slower; the optimum's k,
    the chosen k, slice size, ``chosen_spread`` and ``chosen_polished``) and the realised ``modelled_time_s``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

from synth.algorithms.forest.packing import SHALLOW_ARC_BUDGET
from synth.algorithms.forest.plan import ForestPlan, get_plan, is_symmetric
from synth.algorithms.utils import Progress, ProgressFunction, check_progress
from synth.collectives import Collective, Kind
from synth.errors import InputError, LimitError, NotApplicable
from synth.schedule import REDUCE, Schedule
from synth.topology import Topology
from synth.trees import BROADCAST, Tree, TreePhase, TreeSchedule, make_tree

GIGA = 10**9

__all__ = ["forest", "forest_trees", "get_plan", "ForestPlan", "seconds_per_byte"]


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
           size: int | str | None = None, progress: ProgressFunction | None = None, spread: bool = False,
           min_trees_per_root: int | None = None) -> Schedule:
    """Bandwidth-optimal tree schedule for allgather, reducescatter, allreduce, broadcast or reduce.

    The schedule's congestion time (:func:`synth.evaluate.congestion`) equals the exact optimum, which is
    reported in ``params`` together with the trees used (and, with ``max_trees_per_root``, the gap).
    With ``size`` the trees per root are chosen for that message size (see the module docstring);
    ``progress`` then receives a :class:`~synth.algorithms.utils.Progress` event (phase ``"size
    choice"``) after each variant is simulated, and one (``"done"``) with the choice: on 32 gpus at 1 GiB
    the choice takes minutes (``synth generate`` shows these events on a terminal's status line).
    ``spread`` splits each switch into many light gpu pairs rather than a few heavy ones (the same optimum,
    shallower trees: on the 32-host BiGraph the reduce-scatter trees are 15 arcs deep instead of 30).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.evaluate import congestion
    >>> topo = load_topology("switch:n=4")
    >>> s = forest(topo, Kind.ALLGATHER)
    >>> s.params["optimal_algbw_GBps"], congestion(s, topo).seconds_per_byte == Fraction(3, 200 * 10**9)
    (66.666667, True)
    >>> forest(load_topology("dgx1"), Kind.ALLGATHER, size="1KiB").params["variant"]
    'k=2'
    """
    check_progress(progress)
    if size is None:
        return _forest(topology, kind, chunks, root, max_trees_per_root, pipelined, symmetric, spread,
                       min_trees=min_trees_per_root)
    from synth.units import parse_size

    nbytes = parse_size(size, "size")
    if max_trees_per_root is not None or min_trees_per_root is not None:
        schedule = _forest(topology, kind, chunks, root, max_trees_per_root, pipelined, symmetric, spread,
                           min_trees=min_trees_per_root)
        return _with_params(schedule, {"size": nbytes})
    return _best_for_size(topology, kind, nbytes, chunks, root, pipelined, symmetric, _reporter(kind, progress),
                          spread)


def _reporter(kind: Kind, progress: ProgressFunction | None) -> Callable[[str, str], None]:
    """A function of (phase, message) that sends ``progress`` an event with the time since now."""
    import time

    started = time.monotonic()

    def report(phase: str, message: str) -> None:
        if progress is not None:
            progress(Progress(phase, kind.value, elapsed_s=time.monotonic() - started, message=message))

    return report


def _variant_label(k: int, slice_bytes: int | None, spread: bool) -> str:
    """``k=3, 32KiB slices`` (``k=3, spread, the plan rule's slices``)."""
    from synth.units import format_size

    slices = "the plan rule's slices" if slice_bytes is None else f"{format_size(slice_bytes)} slices"
    return f"k={k}{', spread' if spread else ''}, {slices}"


def _variant_text(k: int, slice_bytes: int | None, seconds: float | None, spread: bool = False) -> str:
    """``k=3, 32KiB slices: 3,244.09 us`` (``slower, cut off`` for a variant whose simulation stopped)."""
    return (_variant_label(k, slice_bytes, spread) + ": "
            + ("slower, cut off" if seconds is None else f"{seconds * 1e6:,.2f} us"))


def _skipped_text(k: int, slice_bytes: int | None, spread: bool = False) -> str:
    """A variant the size choice did not simulate (over the evaluator's slice limit or
    :data:`SIZE_CHOICE_WORK_LIMIT`): ``k=16, spread, 32KiB slices: not simulated (over a simulation limit)``."""
    return _variant_label(k, slice_bytes, spread) + ": not simulated (over a simulation limit)"


def _try_spread(best: tuple[float, int, int | None, Schedule], limit: int | None, times: dict[str, float | None],
                report: Callable[[str, str], None], build: Callable[[int | None], Schedule],
                simulate: Callable[[Schedule, int | None, float], float]
                ) -> tuple[tuple[float, int, int | None, Schedule], bool]:
    """The best variant, or the same tree limit and slices with ``spread`` splitting where that is faster
    (simulated once, cut off at the best time; recorded under ``k/slice/spread``, or ``k/spread`` with the
    rule's slices). Skipped where spread splits the switches the same way (no switch, or one pair each)."""
    _, k, slice_bytes, schedule = best
    try:
        variant = build(limit)
    except LimitError:
        return best, False
    if variant.transfers == schedule.transfers and variant.chunks == schedule.chunks:
        return best, False  # the same trees: nothing to simulate
    spread_k = _trees(variant)
    key = _key(spread_k, slice_bytes, True)
    try:
        seconds = simulate(variant, slice_bytes, best[0])
    except LimitError:
        report("size choice", _skipped_text(spread_k, slice_bytes, True))
        return best, False
    times[key] = seconds if math.isfinite(seconds) else None
    report("size choice", _variant_text(spread_k, slice_bytes, times[key], True))
    if seconds < best[0]:
        return (seconds, spread_k, slice_bytes, variant), True
    return best, False


def tree_counts(optimal: int) -> list[int]:
    """The trees per root :func:`forest` tries for a size: 1, 2, 4, ... below ``optimal``, then ``optimal``.

    Examples
    --------
    >>> tree_counts(13), tree_counts(1), tree_counts(4)
    ([1, 2, 4, 8, 13], [1], [1, 2, 4])
    """
    counts = []
    k = 1
    while k < optimal:
        counts.append(k)
        k *= 2
    return [*counts, optimal]


def _trees(schedule: Schedule) -> int:
    """The most trees per root of any phase of a forest schedule."""
    return max(int(value) for key, value in schedule.params.items() if key.endswith("trees_per_root"))


def _with_params(schedule: Schedule, extra: dict[str, Any]) -> Schedule:
    import dataclasses

    return dataclasses.replace(schedule, params={**schedule.params, **extra})


#: The finer slice forest's size choice also tries (bytes): small enough that a deep forest's pipeline fills
#: fast, and NCCL-sized (8 such steps are a 512 KiB NCCL_BUFFSIZE).
FINE_SLICE_BYTES = 64 * 1024
#: The slices forest's size choice steps through from its best variant, coarse to fine (bytes), halving from
#: half the Simple step: a variant whose 64 KiB slices lose to the rule's 512 KiB can still gain from 256 KiB
#: (2 x DGX H100's broadcast: with Simple's per-step latency, 8 slices of 64 KiB in flight no longer cover a
#: hop's delay). 32 KiB is LL's step, 8 in flight a 256 KiB NCCL_BUFFSIZE.
REFINE_SLICES: tuple[int, ...] = (256 * 1024, 128 * 1024, FINE_SLICE_BYTES, 32 * 1024)
#: How many tree counts (the fastest with the rule's slices) forest's size choice also tries with
#: :data:`FINE_SLICE_BYTES` slices: each such simulation costs about ``slice ratio`` times the rule's.
FINE_SLICE_CANDIDATES = 2
#: The most link-sharing work (:attr:`synth.flow.FlowResult.sharing_work`) one of the size choice's
#: refinement simulations may do, about a minute on one core: past it the candidate is skipped (reported as
#: not simulated), as one over the evaluator's slice limit is. Where the sets of active flows rarely repeat,
#: nearly every event needs new max-min rates: GB200 NVL72's reduce with sixteen trees per root does 5.6
#: million units of this work with 64 KiB slices (70 s) and ran 15 minutes unfinished with 32 KiB (about
#: 9,000 units per event, 16 million a second).
SIZE_CHOICE_WORK_LIMIT = 1_000_000_000


def _refine(best: tuple[float, int, int | None, Schedule], variants: list[tuple[int, Schedule]],
            times: dict[str, float | None], size: int, report: Callable[[str, str], None],
            simulate: Callable[[Schedule, int | None, float], float]) -> tuple[float, int, int | None, Schedule]:
    """From the best (tree count, slice), step to the next tree count and the next finer slice of
    :data:`REFINE_SLICES` while one of those three neighbours is faster (each simulated once, cut off at
    the best time so far): more trees pack closer to the optimum, and finer slices fill their deeper
    pipelines sooner, so the two pay off together where neither does alone."""
    counts = sorted(k for k, _ in variants)
    by_count = dict(variants)
    slices: list[int | None] = [None, *REFINE_SLICES]
    while True:
        _, k, slice_bytes, _ = best
        i, j = counts.index(k), slices.index(slice_bytes)
        moved = False
        for di, dj in ((1, 0), (0, 1), (1, 1)):
            if i + di >= len(counts) or j + dj >= len(slices):
                continue
            k2, slice2 = counts[i + di], slices[j + dj]
            key = _key(k2, slice2, False)
            schedule = by_count[k2]
            if key in times or (slice2 is not None and size / schedule.chunks <= slice2):
                continue  # measured already, or its chunks are no larger than the slice
            try:
                found = simulate(schedule, slice2, best[0])
            except LimitError:
                report("size choice", _skipped_text(k2, slice2))
                continue  # too many slices to simulate
            times[key] = found if math.isfinite(found) else None
            if found < best[0]:
                best, moved = (found, k2, slice2, schedule), True
            report("size choice", _variant_text(k2, slice2, times[key]))
        if not moved:
            return best


def _between(best: tuple[float, int, int | None, Schedule], variants: list[tuple[int, Schedule]],
             limit_of: dict[int, int | None], tried: set[int], times: dict[str, float | None],
             build: Callable[[int], Schedule],
             simulate: Callable[[Schedule, int | None, float], float], report: Callable[[str, str], None]
             ) -> tuple[float, int, int | None, Schedule] | None:
    """The tree limits halfway between the best tree count and its neighbours among ``variants``,
    built and simulated with the best's slices (cut off at the best time); the faster variant, or None.

    :func:`tree_counts` doubles, so the counts it reaches leave gaps (2 x MI250: 3 then 7 trees per root);
    where the best lies beside a gap, the count in the middle can beat both (its reduce-scatter at 1 GiB:
    five trees per root beat three and seven). Each new variant joins ``variants`` (and ``limit_of``), so
    :func:`_refine` and the next call step from it; a limit whose trees repeat a known count is skipped,
    and no limit is built twice (``tried``).
    """
    seconds, k, slice_bytes, _ = best
    counts = sorted(count for count, _ in variants)
    i = counts.index(k)
    middles = [(k + counts[i + 1]) // 2] if i + 1 < len(counts) else []
    if i > 0:
        middles.append((counts[i - 1] + k) // 2)
    found = None
    for limit in middles:
        if limit in counts or limit in tried or limit in limit_of.values():
            continue
        tried.add(limit)
        try:
            variant = build(limit)
        except LimitError:
            continue
        new_k = _trees(variant)
        limit_of.setdefault(new_k, limit)
        if new_k in counts:
            continue  # the limit reaches its best rate with a known count: the same trees
        variants.append((new_k, variant))
        counts = sorted(count for count, _ in variants)
        key = _key(new_k, slice_bytes, False)
        try:
            time_s = simulate(variant, slice_bytes, seconds if found is None else found[0])
        except LimitError:
            report("size choice", _skipped_text(new_k, slice_bytes))
            continue
        times[key] = time_s if math.isfinite(time_s) else None
        report("size choice", _variant_text(new_k, slice_bytes, times[key]))
        if time_s < (seconds if found is None else found[0]):
            found = (time_s, new_k, slice_bytes, variant)
    return found


def _key(k: int, slice_bytes: int | None, spread: bool) -> str:
    """A variant's key in ``size_choice``: ``k``, ``k/slice_bytes``, and ``/spread`` where spread built it."""
    return (str(k) if slice_bytes is None else f"{k}/{slice_bytes}") + ("/spread" if spread else "")


def _more_trees(best: tuple[float, int, int | None, Schedule], size: int, times: dict[str, float | None],
                report: Callable[[str, str], None], build: Callable[[int], Schedule],
                simulate: Callable[[Schedule, int | None, float], float], spread: bool
                ) -> tuple[float, int, int | None, Schedule] | None:
    """One root's trees (broadcast, reduce) where the optimum's own count is the fastest so far: the optimum
    with twice, four times, ... as many trees per root (``min_trees_per_root``), while that is faster (each
    at the best's slices, cut off at the best time), then the next finer slices of :data:`REFINE_SLICES`
    while faster. Returns the fastest found, or None.

    With one tree per root the optimum from one root is often a chain through every gpu (every gpu's
    egress carries the whole stream to one child): on GB200 NVL72 a chain of 72, whose fill costs 71
    hops' latency. With k trees each carries 1/k, so a gpu can feed k children and the trees come out
    about log_k(n) deep (``spread`` gives a switch's gpus the many partners that takes).
    """
    current = best
    found = None
    count = 2 * best[1]
    while True:
        try:
            variant = build(count)
        except LimitError:
            break
        k, slice_bytes = _trees(variant), current[2]
        key = _key(k, slice_bytes, spread)
        if key in times:
            break
        try:
            time_s = simulate(variant, slice_bytes, current[0])
        except LimitError:
            report("size choice", _skipped_text(k, slice_bytes, spread))
            break
        times[key] = time_s if math.isfinite(time_s) else None
        report("size choice", _variant_text(k, slice_bytes, times[key], spread))
        if time_s >= current[0]:
            break
        current = found = (time_s, k, slice_bytes, variant)
        count = 2 * k
    if found is None:
        return None
    slices: list[int | None] = [None, *REFINE_SLICES]
    for finer in slices[slices.index(found[2]) + 1:]:
        time_s, k, _, variant = found
        if finer is not None and size / variant.chunks <= finer:
            break
        key = _key(k, finer, spread)
        try:
            seconds = simulate(variant, finer, time_s)
        except LimitError:
            report("size choice", _skipped_text(k, finer, spread))
            break
        times[key] = seconds if math.isfinite(seconds) else None
        report("size choice", _variant_text(k, finer, times[key], spread))
        if seconds >= time_s:
            break
        found = (seconds, k, finer, variant)
    return found


def _refine_with_halfway(best: tuple[float, int, int | None, Schedule], variants: list[tuple[int, Schedule]],
                         limit_of: dict[int, int | None], times: dict[str, float | None],
                         size: int, report: Callable[[str, str], None],
                         simulate: Callable[[Schedule, int | None, float], float],
                         build: Callable[[int], Schedule]) -> tuple[float, int, int | None, Schedule]:
    """:func:`_refine`, then :func:`_between` from where it stops, and again while that finds a faster count."""
    tried: set[int] = set()
    while True:
        best = _refine(best, variants, times, size, report, simulate)
        between = _between(best, variants, limit_of, tried, times, build, simulate, report)
        if between is None:
            return best
        best = between


#: The depth pass's budget (tree arcs) for the size choice's last step, which packs the chosen variant's trees
#: again with it (:func:`_polish`): eight times the plan's (:data:`~synth.algorithms.forest.packing.SHALLOW_ARC_BUDGET`),
#: spent once per size choice rather than on every plan (2 x MI250, five trees per root: 5 s -> 32 s).
POLISH_ARC_BUDGET = 8 * SHALLOW_ARC_BUDGET


def _polish(best: tuple[float, int, int | None, Schedule], times: dict[str, float | None],
            report: Callable[[str, str], None], build: Callable[[], Schedule],
            simulate: Callable[[Schedule, int | None, float], float]) -> tuple[float, int, int | None, Schedule]:
    """The best variant, or its trees made shallower by a longer depth pass (:data:`POLISH_ARC_BUDGET`)
    where that is faster (simulated once at the best's slices, cut off at the best time; recorded under
    ``k/slice/polished``). Skipped where the pass has nothing to add: plans packed with box symmetry (no
    pass), and passes that stopped before the plan's budget (the same trees come back)."""
    seconds, k, slice_bytes, schedule = best
    if any(value is True for key, value in schedule.params.items() if key.endswith("box_symmetry")):
        return best
    try:
        variant = build()
    except LimitError:
        return best
    if variant.transfers == schedule.transfers:
        return best  # the plan's pass had converged: the same trees
    key = f"{k}/polished" if slice_bytes is None else f"{k}/{slice_bytes}/polished"
    try:
        found = simulate(variant, slice_bytes, seconds)
    except LimitError:
        report("size choice", _skipped_text(k, slice_bytes) + " (longer depth pass)")
        return best
    times[key] = found if math.isfinite(found) else None
    report("size choice", _variant_text(k, slice_bytes, times[key]) + " (longer depth pass)")
    return (found, k, slice_bytes, variant) if found < seconds else best


def _best_for_size(topology: Topology, kind: Kind, size: int, chunks: int | None, root: int | None,
                   pipelined: bool, symmetric: bool | None, report: Callable[[str, str], None],
                   spread: bool = False) -> Schedule:
    """The fastest of forest's tree counts and slice sizes at ``size`` under the flow model.

    Every tree count is evaluated with the plan rule's slices; the :data:`FINE_SLICE_CANDIDATES` fastest
    are evaluated again with :data:`FINE_SLICE_BYTES` slices when their chunks are larger (and the
    simulation is within the evaluator's limit), which the chosen schedule then pins in
    ``params["plan"]``. Ties go to fewer trees, then to the rule's slices. Only those fastest need exact
    times, so a variant's simulation stops (recorded as None) once it is slower than the
    :data:`FINE_SLICE_CANDIDATES` fastest so far: that choice is the one every variant run in full would give.
    :func:`_refine` then searches from it toward more trees and finer slices, a local search: not every
    pair of tree count and slice is simulated, and each one that is appears in ``size_choice``.
    """
    from synth.evaluate import evaluate

    optimal = _forest(topology, kind, chunks, root, None, pipelined, symmetric, spread)
    trees = _trees(optimal)
    times: dict[str, float | None] = {}
    variants: list[tuple[int, Schedule]] = []
    limit_of: dict[int, int | None] = {}  # the tree limit that built each variant (None: the optimum)
    best: tuple[float, int, int | None, Schedule] | None = None
    for limit in tree_counts(trees):
        schedule = optimal if limit == trees else _forest(topology, kind, None, root, limit, pipelined, symmetric,
                                                          spread)
        k = _trees(schedule)  # a limit can reach its best rate with fewer trees: the same schedule again
        if str(k) in times:
            continue
        limit_of[k] = None if limit == trees else limit
        # only the FINE_SLICE_CANDIDATES fastest need exact times: a variant slower than all of them is cut off
        known = sorted(seconds for seconds in times.values() if seconds is not None)
        cutoff = known[FINE_SLICE_CANDIDATES - 1] if len(known) >= FINE_SLICE_CANDIDATES else None
        seconds = evaluate(schedule, topology, size, cutoff=cutoff).time_s
        times[str(k)] = seconds if math.isfinite(seconds) else None
        variants.append((k, schedule))
        report("size choice", _variant_text(k, None, times[str(k)]))
        if best is None or seconds < best[0]:
            best = (seconds, k, None, schedule)
    assert best is not None
    ranked = sorted(variants, key=lambda variant: times[str(variant[0])] or math.inf)
    for k, schedule in ranked[:FINE_SLICE_CANDIDATES]:
        if size / schedule.chunks <= FINE_SLICE_BYTES:
            continue  # the rule's slices are no larger already
        try:
            seconds = evaluate(schedule, topology, size, slice_bytes=FINE_SLICE_BYTES, cutoff=best[0]).time_s
        except LimitError:
            continue  # too many slices to simulate: the rule's slices stand
        # a cut-off simulation only shows that this variant loses: recorded as None
        times[f"{k}/{FINE_SLICE_BYTES}"] = seconds if math.isfinite(seconds) else None
        if seconds < best[0]:
            best = (seconds, k, FINE_SLICE_BYTES, schedule)
        report("size choice", _variant_text(k, FINE_SLICE_BYTES, times[f"{k}/{FINE_SLICE_BYTES}"]))
    simulate = lambda schedule, slice_bytes, cutoff: evaluate(  # noqa: E731
        schedule, topology, size, slice_bytes=slice_bytes, cutoff=cutoff, work_limit=SIZE_CHOICE_WORK_LIMIT).time_s
    best = _refine_with_halfway(best, variants, limit_of, times, size, report, simulate,
                                lambda limit: _forest(topology, kind, None, root, limit, pipelined, symmetric, spread))
    chosen_spread = spread
    chosen_limit = limit_of[best[1]]
    more = None
    if kind in (Kind.BROADCAST, Kind.REDUCE) and best[1] == trees:
        more_spread = spread or bool(topology.switches)
        more = _more_trees(best, size, times, report,
                           lambda count: _forest(topology, kind, chunks, root, None, pipelined, symmetric, more_spread,
                                                 min_trees=count),
                           simulate, more_spread)
    if not spread:
        best, chosen_spread = _try_spread(best, chosen_limit, times, report,
                                          lambda limit: _forest(topology, kind, None if limit else chunks, root, limit,
                                                                pipelined, symmetric, True),
                                          simulate)
    if more is not None and more[0] < best[0]:  # the spread optimum can beat more trees (4 x DGX A100)
        best, chosen_spread = more, more_spread
    else:
        more = None
    unpolished = best
    if kind not in (Kind.BROADCAST, Kind.REDUCE):  # one root's trees have no pair of roots to pack again
        best = _polish(best, times, report,
                       lambda: _forest(topology, kind, None if chosen_limit else chunks, root, chosen_limit, pipelined,
                                       symmetric, chosen_spread, POLISH_ARC_BUDGET),
                       simulate)
    seconds, k, slice_bytes, schedule = best
    report("done", "chose " + _variant_text(k, slice_bytes, seconds, chosen_spread and not spread))
    extra: dict[str, Any] = {
        "size": size, "variant": f"k={k}" + (", spread" if chosen_spread else "")
        + (", long depth pass" if best is not unpolished else ""), "modelled_time_s": seconds,
        "size_choice": {"model": "flow", "optimal_trees_per_root": trees, "chosen_trees_per_root": k,
                        "chosen_slice_bytes": slice_bytes, "chosen_spread": chosen_spread,
                        "chosen_polished": best is not unpolished, "chosen_more_trees": more is not None,
                        "time_s": times}}
    if slice_bytes is not None:
        extra["plan"] = {**schedule.params.get("plan", {}), "slice_bytes": slice_bytes}
    return _with_params(schedule, extra)


def forest_trees(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
                 max_trees_per_root: int | None = None, pipelined: bool = False,
                 symmetric: bool | None = None, spread: bool = False,
                 min_trees_per_root: int | None = None) -> TreeSchedule:
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
    return _forest_trees(topology, kind, chunks, root, max_trees_per_root, pipelined, symmetric, None, spread,
                         min_trees=min_trees_per_root)


def _forest_trees(topology: Topology, kind: Kind, chunks: int | None, root: int | None, max_trees_per_root: int | None,
                  pipelined: bool, symmetric: bool | None, max_arcs: int | None, spread: bool = False,
                  shallow_budget: int = SHALLOW_ARC_BUDGET, min_trees: int | None = None) -> TreeSchedule:
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
    n = topology.num_ranks
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
                        spread=spread, shallow_budget=shallow_budget, min_trees=min_trees)
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
        plan = get_plan(topology, reverse=kind == Kind.REDUCESCATTER, max_trees=limit, symmetric=symmetric,
                        max_arcs=max_arcs, spread=spread, shallow_budget=shallow_budget, min_trees=min_trees)
        per_copy = _check_chunks(chunks, n * plan.trees, "gpus x trees per root")
        collective = Collective(kind, n, n * plan.trees * per_copy, None)
        params = _params({"tree": plan}, seconds_per_byte(plan), _optimal_seconds_per_byte(plan),
                         collective.chunks, extra)
        all_op: Literal["reduce", "broadcast"] = BROADCAST if kind == Kind.ALLGATHER else REDUCE
        trees = _tree_copies(plan, _block_chunks(plan.trees * per_copy, per_copy), table, all_op == REDUCE)
        return form(collective, params, [TreePhase(all_op, trees)])

    if kind != Kind.ALLREDUCE:
        raise NotApplicable(f"forest does not do {kind}")
    gather = get_plan(topology, reverse=False, max_trees=limit, symmetric=symmetric, max_arcs=max_arcs, spread=spread,
                      shallow_budget=shallow_budget, min_trees=min_trees)
    if pipelined:
        if not is_symmetric(topology):
            raise NotApplicable("pipelined allreduce reduces and broadcasts over the same trees, which needs every "
                                "link to have a reverse link of the same bandwidth; use pipelined=false")
        scatter = gather
    else:
        scatter = get_plan(topology, reverse=True, max_trees=limit, symmetric=symmetric, max_arcs=max_arcs,
                           spread=spread, shallow_budget=shallow_budget, min_trees=min_trees)
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
            shallow_budget: int = SHALLOW_ARC_BUDGET, min_trees: int | None = None) -> Schedule:
    from synth import limits

    n = topology.num_ranks
    least = (n - 1) * (1 if kind in (Kind.BROADCAST, Kind.REDUCE) else n) * (2 if kind == Kind.ALLREDUCE else 1)
    limits.check_transfers(least, f"forest {kind} on {n} gpus",
                           hint="forest_trees builds its trees form, which has no transfers")  # before the plan
    max_arcs = int(limits.limit_value("max_transfers"))  # each tree arc is at least one transfer
    return _forest_trees(topology, kind, chunks, root, max_trees_per_root, pipelined, symmetric, max_arcs,
                         spread, shallow_budget, min_trees).expand()
