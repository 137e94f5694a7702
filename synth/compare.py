"""Run every applicable algorithm on a topology and measure each schedule: the engine behind
``synth demo``, ``synth compare`` and the tuner."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from synth.algorithms import available, synthesize
from synth.collectives import Kind
from synth.errors import NotApplicable, SynthError
from synth.evaluate import congestion, evaluate
from synth.schedule import Schedule
from synth.topology import Topology
from synth.verify import verify


@dataclass(frozen=True)
class Row:
    """One (algorithm, collective, size) measurement of a verified schedule."""

    algorithm: str
    collective: str
    size: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    congestion_time_s: float
    synthesis_s: float
    bound_algbw_GBps: float | None = None

    @property
    def percent_of_bound(self) -> float | None:
        """algbw as a percentage of the topology's bandwidth bound for the collective, if known."""
        if not self.bound_algbw_GBps:
            return None
        return 100.0 * self.algbw_GBps / self.bound_algbw_GBps

    def to_dict(self) -> dict[str, object]:
        """A plain dict for JSON output."""
        return {"algorithm": self.algorithm, "collective": self.collective, "size": self.size,
                "time_s": self.time_s, "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps,
                "congestion_time_s": self.congestion_time_s, "synthesis_s": self.synthesis_s,
                "bound_algbw_GBps": self.bound_algbw_GBps, "percent_of_bound": self.percent_of_bound}


@dataclass(frozen=True)
class Skipped:
    """An algorithm that did not apply (or failed), with the reason."""

    algorithm: str
    collective: str
    reason: str


BoundFunction = Callable[[Topology, Kind], float | None]


def bandwidth_bound(topology: Topology, kind: Kind) -> float | None:
    """The best known algbw bound (GB/s) for ``kind`` on ``topology``, or None when none is available."""
    try:
        from synth.bounds import algbw_bound
    except ImportError:
        return None
    try:
        return algbw_bound(topology, kind)
    except SynthError:
        return None


def run_all(topology: Topology, kinds: Iterable[Kind], sizes: Iterable[int], algorithms: Iterable[str] | None = None,
            options: dict[str, dict[str, object]] | None = None, model: str = "flow",
            progress: Callable[[str], None] | None = None) -> tuple[list[Row], list[Skipped], dict[tuple[str, str], Schedule]]:
    """Synthesize, verify and evaluate every applicable algorithm for each collective and size."""
    rows: list[Row] = []
    skipped: list[Skipped] = []
    schedules: dict[tuple[str, str], Schedule] = {}
    sizes = list(sizes)
    wanted = set(algorithms) if algorithms is not None else None
    for kind in kinds:
        bound = bandwidth_bound(topology, kind)
        for algorithm in available(kind):
            if wanted is not None and algorithm.name not in wanted:
                continue
            if progress:
                progress(f"{algorithm.name} {kind}")
            started = time.perf_counter()
            try:
                schedule = synthesize(topology, kind, algorithm.name, **(options or {}).get(algorithm.name, {}))
            except NotApplicable as reason:
                skipped.append(Skipped(algorithm.name, kind.value, str(reason)))
                continue
            elapsed = time.perf_counter() - started
            verify(schedule, topology)
            schedules[(algorithm.name, kind.value)] = schedule
            report = congestion(schedule, topology)
            for size in sizes:
                result = evaluate(schedule, topology, size, model=model)
                rows.append(Row(algorithm.name, kind.value, size, result.time_s, result.algbw_GBps,
                                result.busbw_GBps, report.time(size), elapsed, bound))
    return rows, skipped, schedules
