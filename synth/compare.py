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
    pipeline: int = 1

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
                "bound_algbw_GBps": self.bound_algbw_GBps, "percent_of_bound": self.percent_of_bound,
                "pipeline": self.pipeline}


@dataclass(frozen=True)
class Skipped:
    """An algorithm that did not apply (or failed), with the reason."""

    algorithm: str
    collective: str
    reason: str


BoundFunction = Callable[[Topology, Kind], float | None]

#: Target piece size for automatic pipelining: runtimes stream large messages in pieces of this order
#: (NCCL's chunk steps, MSCCL's loop iterations over ``nchunksperloop`` chunks).
PIECE_BYTES = 512 * 1024
#: Most pieces per chunk, and most simulated flows, that automatic pipelining will ask for.
MAX_PIPELINE = 16
MAX_PIPELINED_FLOWS = 64_000


def auto_pipeline(schedule: Schedule, size: int) -> int:
    """How many pieces to split each chunk into when a runtime would stream a message of ``size`` bytes.

    Every algorithm gets the same rule, so comparisons stay fair: pieces of about :data:`PIECE_BYTES`,
    at most :data:`MAX_PIPELINE` per chunk, and at most :data:`MAX_PIPELINED_FLOWS` simulated flows.

    Examples
    --------
    >>> from synth import load_topology, synthesize
    >>> ring = synthesize(load_topology("ring:n=4"), "allgather", "ring")
    >>> auto_pipeline(ring, 2**20), auto_pipeline(ring, 2**30)
    (1, 16)
    """
    chunk_bytes = schedule.collective.chunk_bytes(size)
    pieces = max(1, min(MAX_PIPELINE, int(chunk_bytes // PIECE_BYTES)))
    transfers = max(1, len(schedule.transfers))
    return max(1, min(pieces, MAX_PIPELINED_FLOWS // transfers))


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
            keep_going: bool = False, pipeline: int | str = "auto",
            ) -> tuple[list[Row], list[Skipped], dict[tuple[str, str], Schedule]]:
    """Synthesize, verify and evaluate every applicable algorithm for each collective and size.

    ``pipeline`` is the number of pieces per chunk in the flow model, or ``"auto"`` for
    :func:`auto_pipeline` (the same rule for every algorithm); other models take 1.

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
        bound = bandwidth_bound(topology, kind)
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
            report = congestion(schedule, topology)
            for size in sizes:
                pieces = pipeline_for(schedule, size, pipeline, model)
                result = evaluate(schedule, topology, size, model=model, pipeline=pieces)
                rows.append(Row(algorithm.name, kind.value, size, result.time_s, result.algbw_GBps,
                                result.busbw_GBps, report.time(size), elapsed, bound, pieces))
    return rows, skipped, schedules


def pipeline_for(schedule: Schedule, size: int, pipeline: int | str, model: str) -> int:
    """The pieces per chunk to evaluate with: ``pipeline`` itself, or :func:`auto_pipeline` for ``"auto"``."""
    if model != "flow":
        return 1
    if pipeline == "auto":
        return auto_pipeline(schedule, size)
    return int(pipeline)
