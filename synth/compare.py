"""Run every applicable algorithm on a topology and measure each schedule: the engine behind
``synth demo``, ``synth compare`` and the tuner."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from synth.algorithms import available, synthesize
from synth.collectives import Kind
from synth.errors import NotApplicable, SynthError
from synth.evaluate import PlanOptions, evaluate_sizes
from synth.plan import Plan
from synth.schedule import Schedule
from synth.topology import Topology
from synth.verify import verify

if TYPE_CHECKING:
    from synth.bounds import TimeBound


@dataclass(frozen=True)
class Row:
    """One (algorithm, collective, size) measurement of a verified schedule, with the plan it ran under
    and the topology's lower bound on time at that size."""

    algorithm: str
    collective: str
    size: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    congestion_time_s: float
    synthesis_s: float
    plan: Plan
    bound_time_s: float | None = None
    bound_label: str = "bound"

    @property
    def percent_of_bound(self) -> float | None:
        """The bound's time as a percentage of this time (100% = as fast as the links allow), if known."""
        if not self.bound_time_s or self.time_s <= 0:
            return None
        return 100.0 * self.bound_time_s / self.time_s

    @property
    def bound_algbw_GBps(self) -> float | None:
        """The largest algbw any schedule can reach at this size, if known."""
        if not self.bound_time_s:
            return None
        return self.size / self.bound_time_s / 1e9

    def to_dict(self) -> dict[str, object]:
        """A plain dict for JSON output (the plan's fields included)."""
        return {"algorithm": self.algorithm, "collective": self.collective, "size": self.size,
                "time_s": self.time_s, "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps,
                "congestion_time_s": self.congestion_time_s, "synthesis_s": self.synthesis_s,
                "bound_time_s": self.bound_time_s, "bound_algbw_GBps": self.bound_algbw_GBps,
                "bound_label": self.bound_label, "percent_of_bound": self.percent_of_bound,
                **self.plan.to_dict()}


@dataclass(frozen=True)
class Skipped:
    """An algorithm that did not apply (or failed), with the reason."""

    algorithm: str
    collective: str
    reason: str


def lower_bound(topology: Topology, kind: Kind) -> TimeBound | None:
    """The topology's proven lower bound on time for ``kind`` (:func:`synth.bounds.time_bound`), or None
    when none can be computed (a limit, an LP failure)."""
    from synth.bounds import time_bound

    try:
        return time_bound(topology, kind)
    except SynthError:
        return None


def bandwidth_bound(topology: Topology, kind: Kind) -> float | None:
    """The largest algbw (GB/s) any schedule of ``kind`` reaches on ``topology`` at large sizes, or None."""
    bound = lower_bound(topology, kind)
    return None if bound is None else bound.bandwidth_algbw_GBps()


#: Algorithms left out unless asked for by name (solver runs that can take minutes).
SLOW_ALGORITHMS = frozenset({"milp"})


def planned(kinds: Iterable[Kind], algorithms: Iterable[str] | None = None,
            include_slow: bool = True) -> list[tuple[Kind, str]]:
    """The (collective, algorithm) pairs :func:`run_all` will try, in its order (for progress bars)."""
    wanted = set(algorithms) if algorithms is not None else None
    return [(kind, a.name) for kind in kinds for a in available(kind)
            if (wanted is None or a.name in wanted) and (include_slow or wanted is not None or a.name not in SLOW_ALGORITHMS)]


def best_rows(rows: Iterable[Row]) -> set[tuple[str, int, str]]:
    """(collective, size, algorithm) of the highest algbw per (collective, size); ties go to the first."""
    best: dict[tuple[str, int], Row] = {}
    for row in rows:
        key = (row.collective, row.size)
        if key not in best or row.algbw_GBps > best[key].algbw_GBps:
            best[key] = row
    return {(r.collective, r.size, r.algorithm) for r in best.values()}


def run_all(topology: Topology, kinds: Iterable[Kind], sizes: Iterable[int], algorithms: Iterable[str] | None = None,
            options: dict[str, dict[str, object]] | None = None, model: str = "flow",
            progress: Callable[[str], None] | None = None, include_slow: bool = True,
            keep_going: bool = False, plan: PlanOptions | None = None,
            ) -> tuple[list[Row], list[Skipped], dict[tuple[str, str], Schedule]]:
    """Synthesize, verify and evaluate every applicable algorithm for each collective and size.

    Every schedule is evaluated by :func:`synth.evaluate.evaluate_sizes` under the same plan rule
    (``plan`` overrides it explicitly, the same for every algorithm), so each row's time is the one
    ``synth evaluate`` prints for that schedule and size.

    ``include_slow=False`` leaves out :data:`SLOW_ALGORITHMS` unless named in ``algorithms``;
    ``keep_going=True`` records an algorithm that fails with a :class:`SynthError` (a limit, an
    infeasible request) as skipped instead of stopping.
    """
    rows: list[Row] = []
    skipped: list[Skipped] = []
    schedules: dict[tuple[str, str], Schedule] = {}
    sizes = list(sizes)
    wanted = set(algorithms) if algorithms is not None else None
    for kind in kinds:
        bound = lower_bound(topology, kind)
        for algorithm in available(kind):
            if wanted is not None and algorithm.name not in wanted:
                continue
            if not include_slow and wanted is None and algorithm.name in SLOW_ALGORITHMS:
                continue
            if progress:
                progress(f"{algorithm.name} {kind}")
            started = time.perf_counter()
            try:
                schedule = synthesize(topology, kind, algorithm.name, **(options or {}).get(algorithm.name, {}))
            except NotApplicable as reason:
                skipped.append(Skipped(algorithm.name, kind.value, str(reason)))
                continue
            except (SynthError, ImportError) as error:
                if not keep_going:
                    raise
                skipped.append(Skipped(algorithm.name, kind.value, f"{type(error).__name__}: {error}"))
                continue
            elapsed = time.perf_counter() - started
            try:
                verify(schedule, topology)
            except SynthError as error:
                if not keep_going:
                    raise
                skipped.append(Skipped(algorithm.name, kind.value, f"schedule failed verification: {error}"))
                continue
            schedules[(algorithm.name, kind.value)] = schedule
            for result in evaluate_sizes(schedule, topology, sizes, model=model, options=plan):
                rows.append(Row(algorithm.name, kind.value, result.size, result.time_s, result.algbw_GBps,
                                result.busbw_GBps, result.congestion_time_s, elapsed, result.plan,
                                None if bound is None else bound.time(result.size),
                                "bound" if bound is None else bound.label))
    return rows, skipped, schedules
