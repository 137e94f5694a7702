"""Forest's size choice: the trees per root, slice size, splitting and depth pass fastest at one size.

:func:`synth.algorithms.forest.forest` builds the bandwidth optimum or, with ``max_trees_per_root``, the best
forest with fewer trees. Fewer trees give up some of the optimum but stream each tree at a larger share of
its links, so fill and drain cost less; which wins depends on the size. :func:`choose` simulates the
candidates at the size with the flow model (:class:`~synth.choose.Search`) and keeps the fastest:

1. trees per root k = 1, 2, 4, ... up to the optimal k (that one included), with the plan rule's slices
   (:func:`tree_counts`); a candidate slower than the :data:`FINE_SLICE_CANDIDATES` fastest so far is cut off;
2. those fastest, again with :data:`FINE_SLICE_BYTES` slices where their chunks are larger (finer slices fill
   a deep forest's pipeline sooner);
3. from the fastest so far, a local search that steps to the next k, the next finer slice
   (:data:`REFINE_SLICES`) or both while that is faster: more trees pay off once finer slices fill them;
   where it ends beside a gap the doubling left (three and seven trees), the limit halfway is built and
   tried, and the search goes on from it while faster;
4. for one root (broadcast, reduce) where the optimum's own k is the fastest: the optimum with twice, four
   times, ... as many trees per root (``min_trees_per_root``, spread where there is a switch) while faster,
   then finer slices while faster (a single optimal tree from one root is often a chain through every gpu);
5. the chosen tree limit and slices with ``spread`` splitting, where that builds other trees; the faster of
   that and step 4 is kept;
6. the chosen trees packed again with a depth pass eight times as long (:data:`POLISH_ARC_BUDGET`; only where
   the plan's pass stopped on its budget), kept where faster.

Refinements (steps 3-6) are simulated under :data:`SIZE_CHOICE_WORK_LIMIT`; a candidate past it, or past the
evaluator's slice limit, is skipped and reported as not simulated. Every simulated candidate's time is kept
in ``params["size_choice"]["time_s"]`` under its key (:attr:`ForestVariant.key`), None where it was cut off as
slower. The chosen schedule pins its slice size in ``params["plan"]``, so every command evaluates it with the
same plan (a runtime gets it from NCCL_BUFFSIZE = 8 slices); ``variant`` names it (``k=3``, ``k=16, spread``,
``k=5, long depth pass``) and ``modelled_time_s`` is its time.

Examples
--------
>>> from synth.library import load_topology
>>> schedule = choose(load_topology("dgx1"), Kind.ALLGATHER, 1024)
>>> schedule.params["variant"], schedule.params["size_choice"]["optimal_trees_per_root"]
('k=2', 6)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from synth.algorithms.forest import forest, trees_per_root
from synth.algorithms.forest.packing import SHALLOW_ARC_BUDGET
from synth.algorithms.utils import ProgressFunction
from synth.choose import Candidate, Search, seconds_text
from synth.collectives import Kind
from synth.errors import LimitError
from synth.schedule import Schedule
from synth.topology import Topology

__all__ = ["FINE_SLICE_BYTES", "FINE_SLICE_CANDIDATES", "POLISH_ARC_BUDGET", "REFINE_SLICES",
           "SIZE_CHOICE_WORK_LIMIT", "ForestChoice", "ForestVariant", "Measured", "choose", "tree_counts"]

#: The finer slice forest's size choice also tries (bytes): small enough that a deep forest's pipeline fills
#: fast, and NCCL-sized (8 such steps are a 512 KiB NCCL_BUFFSIZE).
FINE_SLICE_BYTES = 64 * 1024
#: The slices the size choice steps through from its best variant, coarse to fine (bytes), halving from
#: half the Simple step: a variant whose 64 KiB slices lose to the rule's 512 KiB can still gain from 256 KiB
#: (with Simple's per-step latency, 8 slices of 64 KiB in flight may no longer cover a hop's delay). 32 KiB
#: is LL's step, 8 in flight a 256 KiB NCCL_BUFFSIZE.
REFINE_SLICES: tuple[int, ...] = (256 * 1024, 128 * 1024, FINE_SLICE_BYTES, 32 * 1024)
#: How many tree counts (the fastest with the rule's slices) are also tried with :data:`FINE_SLICE_BYTES`
#: slices: each such simulation costs about ``slice ratio`` times the rule's.
FINE_SLICE_CANDIDATES = 2
#: The most link-sharing work (:attr:`synth.flow.FlowResult.sharing_work`) one refinement's simulation may
#: do: past it the candidate is skipped (reported as not simulated), as one over the evaluator's slice limit
#: is. Where the sets of active flows rarely repeat, nearly every event needs new max-min rates (GB200
#: NVL72's reduce with sixteen trees per root and 32 KiB slices: about 9,000 units per event).
SIZE_CHOICE_WORK_LIMIT = 1_000_000_000
#: The depth pass's budget (tree arcs) for the last step, which packs the chosen variant's trees again with
#: it: eight times the plan's (:data:`~synth.algorithms.forest.packing.SHALLOW_ARC_BUDGET`), spent once per
#: size choice rather than on every plan.
POLISH_ARC_BUDGET = 8 * SHALLOW_ARC_BUDGET

#: The slices a variant can run with: the plan rule's (None), then :data:`REFINE_SLICES`.
_SLICES: tuple[int | None, ...] = (None, *REFINE_SLICES)


def tree_counts(optimal: int) -> list[int]:
    """The trees per root the size choice tries first: 1, 2, 4, ... below ``optimal``, then ``optimal``.

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


@dataclass(frozen=True)
class ForestVariant:
    """What a candidate of the size choice runs: its trees per root, slices, splitting and depth pass.

    Examples
    --------
    >>> ForestVariant(3, 32768).key, ForestVariant(3, 32768, spread=True).label
    ('3/32768', 'k=3, spread, 32KiB slices')
    >>> ForestVariant(5, None, polished=True).key
    '5/polished'
    """

    trees: int
    slice_bytes: int | None = None
    spread: bool = False
    polished: bool = False

    @property
    def key(self) -> str:
        """The key of its time in ``size_choice``: ``k``, ``k/slice_bytes``, then ``/spread`` and ``/polished``."""
        base = str(self.trees) if self.slice_bytes is None else f"{self.trees}/{self.slice_bytes}"
        return base + ("/spread" if self.spread else "") + ("/polished" if self.polished else "")

    @property
    def label(self) -> str:
        """How progress names it: ``k=3, 32KiB slices`` (``k=3, spread, the plan rule's slices``)."""
        from synth.units import format_size

        slices = "the plan rule's slices" if self.slice_bytes is None else f"{format_size(self.slice_bytes)} slices"
        return f"k={self.trees}{', spread' if self.spread and not self.polished else ''}, {slices}"

    def at(self, slice_bytes: int | None) -> ForestVariant:
        """The same trees with other slices."""
        return dataclasses.replace(self, slice_bytes=slice_bytes)


@dataclass(frozen=True)
class Measured:
    """A simulated candidate: its time at the size, what it runs, and its schedule."""

    seconds: float
    variant: ForestVariant
    schedule: Schedule


class ForestChoice:
    """The state of one size choice: the forests built so far and the search that times them.

    Each step is a public method taking the best candidate so far and returning the best after it, so the
    steps can be run (and tested) on their own; :meth:`run` runs them in order.

    Parameters
    ----------
    topology, kind, size :
        The choice's topology, collective and message size (bytes).
    search : Search
        Times, records and reports the candidates.
    chunks, root, pipelined, symmetric, spread, shards :
        Forest's options (:func:`synth.algorithms.forest.forest`), the same for every candidate; ``spread``
        True makes every candidate spread (step 5 is then skipped).
    """

    def __init__(self, topology: Topology, kind: Kind, size: int, search: Search, *, chunks: int | None = None,
                 root: int | None = None, pipelined: bool = False, symmetric: bool | None = None,
                 spread: bool = False, shards: Any = None) -> None:
        self.topology, self.kind, self.size, self.search = topology, kind, size, search
        self.chunks, self.root, self.pipelined, self.symmetric, self.spread = chunks, root, pipelined, symmetric, spread
        self.shards = shards
        #: the schedule of each tree count built with the caller's splitting
        self.by_count: dict[int, Schedule] = {}
        #: the tree limit that built each count (None: the optimum)
        self.limit_of: dict[int, int | None] = {}
        self._halfway_tried: set[int] = set()
        self.optimal_trees = 0

    def build(self, limit: int | None, *, spread: bool | None = None, min_trees: int | None = None,
              depth_pass_arcs: int = SHALLOW_ARC_BUDGET) -> Schedule:
        """Forest with at most ``limit`` trees per root (None: the optimum, with the caller's chunks), with the
        full depth pass (plain forest's default pass is a quick one: depth matters to the time at a size)."""
        return forest(self.topology, self.kind, chunks=self.chunks if limit is None else None, root=self.root,
                      max_trees_per_root=limit, pipelined=self.pipelined, symmetric=self.symmetric,
                      spread=self.spread if spread is None else spread, min_trees_per_root=min_trees,
                      depth_pass_arcs=depth_pass_arcs, shards=self.shards)

    def measure(self, schedule: Schedule, variant: ForestVariant, cutoff: float | None, *,
                limited: bool = True, required: bool = False) -> float | None:
        """:meth:`Search.measure` of one candidate (None: skipped over a limit)."""
        return self.search.measure(schedule, variant.key, variant.label, slice_bytes=variant.slice_bytes,
                                   cutoff=cutoff, limited=limited, required=required,
                                   note=" (longer depth pass)" if variant.polished else "")

    def measure_many(self, measured: list[tuple[Schedule, ForestVariant]], cutoff: float | None, *,
                     limited: bool = True) -> list[float | None]:
        """:meth:`Search.measure_many` of several candidates, each cut off at ``cutoff``."""
        return self.search.measure_many([
            Candidate(schedule, variant.key, variant.label, variant.slice_bytes, cutoff,
                      " (longer depth pass)" if variant.polished else "", limited) for schedule, variant in measured])

    @staticmethod
    def fastest(best: Measured, measured: list[tuple[Schedule, ForestVariant]],
                seconds: list[float | None]) -> Measured:
        """The best, or the first of the fastest candidates where one is faster."""
        for (schedule, variant), time_s in zip(measured, seconds, strict=True):
            if time_s is not None and time_s < best.seconds:
                best = Measured(time_s, variant, schedule)
        return best

    def counts(self) -> list[int]:
        """The tree counts built so far, in increasing order."""
        return sorted(self.by_count)

    def first_pass(self) -> Measured:
        """Steps 1 and 2: every tree count of :func:`tree_counts` with the rule's slices (those slower than
        the :data:`FINE_SLICE_CANDIDATES` fastest cut off), then the fastest with :data:`FINE_SLICE_BYTES`."""
        optimal = self.build(None)
        self.optimal_trees = trees_per_root(optimal)
        best: Measured | None = None
        for limit in tree_counts(self.optimal_trees):
            schedule = optimal if limit == self.optimal_trees else self.build(limit)
            k = trees_per_root(schedule)  # a limit can reach its best rate with fewer trees: the same schedule
            if k in self.by_count:
                continue
            self.limit_of[k] = None if limit == self.optimal_trees else limit
            known = sorted(seconds for seconds in self.search.times.values() if seconds is not None)
            cutoff = known[FINE_SLICE_CANDIDATES - 1] if len(known) >= FINE_SLICE_CANDIDATES else None
            seconds = self.measure(schedule, ForestVariant(k), cutoff, limited=False, required=True)
            assert seconds is not None  # required: a limit raises
            self.by_count[k] = schedule
            if best is None or seconds < best.seconds:
                best = Measured(seconds, ForestVariant(k), schedule)
        assert best is not None
        times = self.search.times
        ranked = sorted(self.by_count, key=lambda count: times[str(count)] or math.inf)
        finer = [(self.by_count[k], ForestVariant(k, FINE_SLICE_BYTES)) for k in ranked[:FINE_SLICE_CANDIDATES]
                 if self.size / self.by_count[k].chunks > FINE_SLICE_BYTES]  # else the rule's are no larger
        return self.fastest(best, finer, self.measure_many(finer, best.seconds, limited=False))

    def refine(self, best: Measured) -> Measured:
        """Step 3's local search: from the best (tree count, slice), the next tree count, the next finer slice
        or both while one of those neighbours is faster (each simulated once, cut off at the best time)."""
        while True:
            counts = self.counts()
            i, j = counts.index(best.variant.trees), _SLICES.index(best.variant.slice_bytes)
            neighbours = []
            for di, dj in ((1, 0), (0, 1), (1, 1)):
                if i + di >= len(counts) or j + dj >= len(_SLICES):
                    continue
                variant = ForestVariant(counts[i + di], _SLICES[j + dj])
                schedule = self.by_count[variant.trees]
                if variant.key in self.search.times or (variant.slice_bytes is not None
                                                        and self.size / schedule.chunks <= variant.slice_bytes):
                    continue  # measured already, or its chunks are no larger than the slice
                neighbours.append((schedule, variant))
            moved = self.fastest(best, neighbours, self.measure_many(neighbours, best.seconds))
            if moved is best:
                return best
            best = moved

    def halfway(self, best: Measured) -> Measured | None:
        """The tree limits halfway between the best's tree count and its neighbours, built and simulated
        with the best's slices (cut off at the best time): the faster candidate, or None.

        :func:`tree_counts` doubles, so the counts it reaches leave gaps (2 x MI250: 3 then 7 trees per
        root); beside a gap, the count in the middle can beat both. Each new count joins the built ones, so
        :meth:`refine` and the next call step from it; a limit whose trees repeat a known count is skipped,
        and no limit is built twice.
        """
        k, slice_bytes = best.variant.trees, best.variant.slice_bytes
        counts = self.counts()
        i = counts.index(k)
        middles = [(k + counts[i + 1]) // 2] if i + 1 < len(counts) else []
        if i > 0:
            middles.append((counts[i - 1] + k) // 2)
        built = []
        for limit in middles:
            if limit in self.by_count or limit in self._halfway_tried or limit in self.limit_of.values():
                continue
            self._halfway_tried.add(limit)
            try:
                schedule = self.build(limit)
            except LimitError:
                continue
            new_k = trees_per_root(schedule)
            self.limit_of.setdefault(new_k, limit)
            if new_k in self.by_count:
                continue  # the limit reaches its best rate with a known count: the same trees
            self.by_count[new_k] = schedule
            built.append((schedule, ForestVariant(new_k, slice_bytes)))
        found = self.fastest(best, built, self.measure_many(built, best.seconds))
        return None if found is best else found

    def refine_with_halfway(self, best: Measured) -> Measured:
        """:meth:`refine`, then :meth:`halfway` from where it stops, and again while that finds a faster count."""
        while True:
            best = self.refine(best)
            between = self.halfway(best)
            if between is None:
                return best
            best = between

    def more_trees(self, best: Measured, spread: bool) -> Measured | None:
        """Step 4 (one root's trees, where the optimum's own count is the fastest so far): the optimum with
        twice, four times, ... as many trees per root while faster (each at the best's slices, cut off at
        the best time), then the next finer slices while faster. The fastest found, or None.

        With one tree per root the optimum from one root is often a chain through every gpu (every gpu's
        egress carries the whole stream to one child): on GB200 NVL72 a chain of 72, whose fill costs 71
        hops' latency. With k trees each carries 1/k, so a gpu can feed k children and the trees come out
        about log_k(n) deep (``spread`` gives a switch's gpus the many partners that takes).
        """
        current, found = best, None
        count = 2 * best.variant.trees
        while True:
            try:
                schedule = self.build(None, spread=spread, min_trees=count)
            except LimitError:
                break
            variant = ForestVariant(trees_per_root(schedule), current.variant.slice_bytes, spread)
            if variant.key in self.search.times:
                break
            seconds = self.measure(schedule, variant, current.seconds)
            if seconds is None or seconds >= current.seconds:
                break
            current = found = Measured(seconds, variant, schedule)
            count = 2 * variant.trees
        if found is None:
            return None
        for finer in _SLICES[_SLICES.index(found.variant.slice_bytes) + 1:]:
            if finer is not None and self.size / found.schedule.chunks <= finer:
                break
            variant = found.variant.at(finer)
            seconds = self.measure(found.schedule, variant, found.seconds)
            if seconds is None or seconds >= found.seconds:
                break
            found = Measured(seconds, variant, found.schedule)
        return found

    def _spread_candidate(self, best: Measured) -> tuple[Schedule, ForestVariant] | None:
        """Step 5's candidate: the best's tree limit and slices with ``spread`` splitting; None where spread
        splits the switches the same way (no switch, or one pair each: the same trees come back)."""
        try:
            schedule = self.build(self.limit_of[best.variant.trees], spread=True)
        except LimitError:
            return None
        if schedule.transfers == best.schedule.transfers and schedule.chunks == best.schedule.chunks:
            return None  # the same trees: nothing to simulate
        return schedule, ForestVariant(trees_per_root(schedule), best.variant.slice_bytes, True)

    def _polish_candidate(self, best: Measured, limit: int | None) -> tuple[Schedule, ForestVariant] | None:
        """Step 6's candidate: the best's trees (tree limit ``limit``) packed with :data:`POLISH_ARC_BUDGET`;
        None where the pass has nothing to add (plans packed with box symmetry have no pass; a pass that
        stopped before the plan's budget gives the same trees back)."""
        if any(value is True for key, value in best.schedule.params.items() if key.endswith("box_symmetry")):
            return None
        try:
            schedule = self.build(limit, spread=best.variant.spread, depth_pass_arcs=POLISH_ARC_BUDGET)
        except LimitError:
            return None
        if schedule.transfers == best.schedule.transfers:
            return None  # the plan's pass had converged: the same trees
        return schedule, dataclasses.replace(best.variant, polished=True)

    def _kept(self, best: Measured, candidate: tuple[Schedule, ForestVariant] | None,
              seconds: float | None) -> Measured:
        """The candidate where it was simulated faster than the best, else the best."""
        if candidate is not None and seconds is not None and seconds < best.seconds:
            return Measured(seconds, candidate[1], candidate[0])
        return best

    def spread_variant(self, best: Measured) -> Measured:
        """Step 5: the best, or its tree limit and slices with ``spread`` splitting where that is faster
        (simulated once, cut off at the best time); see :meth:`_spread_candidate`."""
        candidate = self._spread_candidate(best)
        if candidate is None:
            return best
        return self._kept(best, candidate, self.measure(*candidate, best.seconds))

    def polish(self, best: Measured, limit: int | None) -> Measured:
        """Step 6: the best, or its trees (built with tree limit ``limit``) made shallower by a longer depth
        pass (:data:`POLISH_ARC_BUDGET`) where that is faster (simulated once at the best's slices, cut off at
        the best time); see :meth:`_polish_candidate`."""
        candidate = self._polish_candidate(best, limit)
        if candidate is None:
            return best
        return self._kept(best, candidate, self.measure(*candidate, best.seconds))

    def spread_then_polish(self, best: Measured, limit: int | None) -> Measured:
        """Steps 5 and 6 as :meth:`spread_variant` then :meth:`polish` give them, with the spread candidate and
        the best's polished one simulated at once (:meth:`Search.measure_many`, each cut off at the best
        time): where spread loses, that polish is step 6's; where it wins, its own polish is simulated after."""
        spread = self._spread_candidate(best)
        polish = self._polish_candidate(best, limit)
        pending = [candidate for candidate in (spread, polish) if candidate is not None]
        times = iter(self.measure_many(pending, best.seconds))
        spread_s = next(times) if spread is not None else None
        polish_s = next(times) if polish is not None else None
        spread_best = self._kept(best, spread, spread_s)
        if spread_best is not best:
            return self.polish(spread_best, limit)
        return self._kept(best, polish, polish_s)

    def run(self) -> Schedule:
        """Steps 1 to 6; the chosen schedule with the choice's record in its params."""
        best = self.refine_with_halfway(self.first_pass())
        if self.kind not in (Kind.BROADCAST, Kind.REDUCE):
            return self._run_many_roots(best)
        # one root: its trees have no pair of roots to pack again (no step 6)
        more = None
        if best.variant.trees == self.optimal_trees:
            more = self.more_trees(best, self.spread or bool(self.topology.switches))
        if not self.spread:
            best = self.spread_variant(best)
        if more is not None and more.seconds < best.seconds:  # the spread optimum can beat more trees
            best = more
        else:
            more = None
        return self._chosen(best, polished=False, more_trees=more is not None)

    def _run_many_roots(self, best: Measured) -> Schedule:
        """Steps 5 and 6 for a collective with a root per gpu (:meth:`spread_then_polish`)."""
        chosen_limit = self.limit_of[best.variant.trees]
        if self.spread:
            chosen = self.polish(best, chosen_limit)
        else:
            chosen = self.spread_then_polish(best, chosen_limit)
        return self._chosen(chosen, polished=chosen.variant.polished, more_trees=False)

    def _chosen(self, best: Measured, polished: bool, more_trees: bool) -> Schedule:
        variant, seconds = best.variant, best.seconds
        spread = variant.spread or self.spread
        self.search.done("chose " + ForestVariant(variant.trees, variant.slice_bytes, spread and not self.spread).label
                         + ": " + seconds_text(seconds))
        extra: dict[str, Any] = {
            "size": self.size, "variant": f"k={variant.trees}" + (", spread" if spread else "")
            + (", long depth pass" if polished else ""), "modelled_time_s": seconds,
            "size_choice": {"model": "flow", "optimal_trees_per_root": self.optimal_trees,
                            "chosen_trees_per_root": variant.trees, "chosen_slice_bytes": variant.slice_bytes,
                            "chosen_spread": spread, "chosen_polished": polished, "chosen_more_trees": more_trees,
                            "time_s": self.search.times}}
        if variant.slice_bytes is not None:
            extra["plan"] = {**best.schedule.params.get("plan", {}), "slice_bytes": variant.slice_bytes}
        return dataclasses.replace(best.schedule, params={**best.schedule.params, **extra})


def choose(topology: Topology, kind: Kind, size: int, *, progress: ProgressFunction | None = None,
           work_limit: int | None = None, chunks: int | None = None, root: int | None = None,
           max_trees_per_root: int | None = None, min_trees_per_root: int | None = None,
           pipelined: bool = False, symmetric: bool | None = None, spread: bool = False, shards: Any = None,
           **construction: Any) -> Schedule:
    """Forest's schedule for ``size`` bytes: the fastest candidate of the size choice (the module docstring).

    With ``max_trees_per_root`` or ``min_trees_per_root`` the trees are fixed: that forest (with the full
    depth pass, as every candidate has), with ``size`` recorded and nothing chosen. ``work_limit`` replaces :data:`SIZE_CHOICE_WORK_LIMIT` for the refinements;
    ``progress`` receives an event (phase ``"size choice"``) per simulated or skipped candidate and one
    (``"done"``) with the choice. Forest's other options are passed on to every candidate.
    """
    options: dict[str, Any] = dict(chunks=chunks, root=root, pipelined=pipelined, symmetric=symmetric, spread=spread,
                                   shards=shards)
    if (max_trees_per_root is not None or min_trees_per_root is not None) and not construction:
        schedule = forest(topology, kind, max_trees_per_root=max_trees_per_root,
                          min_trees_per_root=min_trees_per_root, depth_pass_arcs=SHALLOW_ARC_BUDGET, **options)
        return dataclasses.replace(schedule, params={**schedule.params, "size": size})
    if construction:
        import inspect

        from synth.errors import InputError

        takes = ", ".join(name for name in inspect.signature(choose).parameters
                          if name not in ("topology", "kind", "construction"))
        raise InputError("", "option", f"forest's size choice has no option {sorted(construction)[0]!r}; it takes {takes}")
    limit = SIZE_CHOICE_WORK_LIMIT if work_limit is None else _checked_limit(work_limit)
    search = Search(topology, kind, size, progress, work_limit=limit)
    return ForestChoice(topology, kind, size, search, **options).run()


def _checked_limit(work_limit: Any) -> int:
    from synth.errors import InputError

    if isinstance(work_limit, bool) or not isinstance(work_limit, int) or work_limit < 0:
        raise InputError("", "work_limit", f"expected a whole number of link-sharing work units, got {work_limit!r}")
    return work_limit

