"""Running a sweep: in process or on Dask (a local cluster or a scheduler's address), resuming what the
output already holds, flushing results every few seconds, with progress counts."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synth.errors import InputError
from synth.fileio import check_interrupted
from synth.sweep.point import failed_rows, run_point
from synth.sweep.results import (
    ERROR,
    NOT_APPLICABLE,
    OK,
    Row,
    error_text,
    output_lock,
    read_results,
    write_results,
)
from synth.sweep.spec import Point, Sweep

if TYPE_CHECKING:
    pass


#: A point and the sizes it still lacks; then the same with its rows.
Task = tuple[Point, tuple[int, ...]]
Finished = tuple[Point, tuple[int, ...], list[Row]]


@dataclass
class Progress:
    """Counts of a running sweep, passed to the progress callback after every finished point."""

    total: int
    done: int = 0
    failed: int = 0
    not_applicable: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def rate(self) -> float:
        """Points finished per second so far."""
        elapsed = time.perf_counter() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0


@dataclass(frozen=True)
class SweepSummary:
    """What a sweep did: point counts, rows written, where, and how."""

    output: str
    points: int
    already_done: int
    ran: int
    ok: int
    not_applicable: int
    failed: int
    rows: int
    flushes: int
    seconds: float
    runner: str
    workers: int

    def to_dict(self) -> dict[str, Any]:
        """A plain dict for JSON output."""
        return dict(self.__dict__)


def _local_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _SerialRunner:
    """Runs points one after another in this process (Dask's synchronous scheduler, without the graph)."""

    name = "synchronous"
    workers = 1

    def run(self, tasks: Sequence[Task]) -> Iterator[Finished]:
        for point, sizes in tasks:
            yield point, sizes, run_point(point, sizes)

    def close(self) -> None:
        """Nothing to release."""


class _DaskRunner:
    """Runs points as independent Dask tasks on a LocalCluster or an existing scheduler, keeping a bounded
    number in flight so huge grids neither flood the scheduler nor delay the first flush."""

    def __init__(self, scheduler: str | None, workers: int, connect_timeout: float) -> None:
        import logging

        from distributed import Client, LocalCluster

        self.cluster = None
        if scheduler:
            check_scheduler(scheduler, connect_timeout)
            try:
                self.client = Client(scheduler, timeout=f"{connect_timeout}s")
            except Exception as error:  # noqa: BLE001  (any failure to connect is the address's problem)
                raise InputError("", "scheduler", f"cannot reach a Dask scheduler at {scheduler!r} "
                                 f"({error_text(error)})") from None
            try:
                self.client.wait_for_workers(1, timeout=connect_timeout)
            except Exception:  # noqa: BLE001
                self.client.close()
                raise InputError("", "scheduler", f"the Dask scheduler at {scheduler} has no workers "
                                 f"(waited {connect_timeout:g} s)") from None
            self.name = scheduler
        else:
            # CRITICAL: a worker losing its scheduler while an interrupted sweep shuts down logs an ERROR with
            # a traceback; what a failed task says reaches the results' error column instead
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.CRITICAL)
            self.client = Client(self.cluster)
            self.name = "local"
        self.workers = sum(self.client.nthreads().values()) if scheduler else workers

    def run(self, tasks: Sequence[Task]) -> Iterator[Finished]:
        from distributed import as_completed

        pending = iter(tasks)
        window = max(8, 4 * self.workers)
        in_flight: dict[Any, tuple[Any, Task]] = {}  # future key -> (future, task)
        completed = as_completed()

        def submit(task: Task) -> None:
            future = self.client.submit(run_point, *task, pure=False)
            in_flight[future.key] = (future, task)
            completed.add(future)

        for task in itertools.islice(pending, window):
            submit(task)
        try:
            for future in completed:
                _, (point, sizes) = in_flight.pop(future.key)
                try:
                    rows = future.result()
                except Exception as error:  # a worker died or could not run the task
                    rows = failed_rows(point, sizes, ERROR, f"task failed: {error_text(error)}")
                future.release()
                following = next(pending, None)
                if following is not None:
                    submit(following)
                yield point, sizes, rows
        finally:
            # Interrupted: drop the unfinished tasks (they are idempotent; a resume runs them again).
            with contextlib.suppress(Exception):
                self.client.cancel([future for future, _ in in_flight.values()])

    def close(self) -> None:
        """Disconnect; shut the local cluster down (an external cluster keeps running)."""
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()


#: Dask address schemes a ``--scheduler`` may use.
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")
#: Most local worker processes a sweep starts.
MAX_WORKERS = 512


def check_scheduler(address: str, timeout: float = 5.0) -> None:
    """Refuse a scheduler ``address`` that is malformed or does not answer, in seconds rather than after
    Dask's retries; nothing is written before it answers.

    Examples
    --------
    >>> try:
    ...     check_scheduler("bogus://x")
    ... except InputError as error:
    ...     print(error)
    scheduler: expected an address such as tcp://HOST:8786, got 'bogus://x'
    """
    import socket
    from urllib.parse import urlsplit

    text = str(address).strip()
    try:
        parts = urlsplit(text if "://" in text else f"tcp://{text}")
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in SCHEDULER_SCHEMES or len(text) > 1000 or not text.isprintable() or (
            parts.scheme in ("tcp", "tls", "ws", "wss") and (not parts.hostname or port is None)):
        raise InputError("", "scheduler", f"expected an address such as tcp://HOST:8786, got {text[:100]!r}")
    if parts.scheme not in ("tcp", "tls", "ws", "wss"):
        return
    try:
        with socket.create_connection((parts.hostname, port), timeout=min(timeout, 10.0)):
            pass
    except OSError as error:
        raise InputError("", "scheduler", f"cannot reach a Dask scheduler at {text!r} "
                         f"({error.strerror or type(error).__name__})") from None


def run_sweep(sweep: Sweep, output: str | Path, *, scheduler: str | None = None, workers: int | None = None,
              flush_seconds: float = 5.0, flush_points: int = 0, retry_errors: bool = False,
              connect_timeout: float = 30.0, progress: Callable[[Progress], None] | None = None,
              on_start: Callable[[Progress], None] | None = None) -> SweepSummary:
    """Run every point of ``sweep`` not yet in ``output`` and merge the rows into it.

    Parameters
    ----------
    sweep : Sweep
        The parsed spec (:func:`load_spec`).
    output : str or Path
        The Parquet results file; rows already in it are kept and their points skipped (resume).
    scheduler : str, optional
        Address of an existing Dask scheduler (``tcp://HOST:PORT``); default: a local cluster.
    workers : int, optional
        Local worker processes (default: one per core). 1, or a single core, runs in this process.
    flush_seconds, flush_points : float, int
        Rewrite the output when this many seconds have passed or this many points finished since the last
        write (0 disables a trigger); it is always written at the end and on interrupt.
    retry_errors : bool
        Run points whose stored status is ``error`` again.
    connect_timeout : float
        Seconds to wait for an external scheduler and its first worker.
    progress, on_start : callable, optional
        Called with the counts after every finished point, and once before the first one.

    Examples
    --------
    >>> import tempfile
    >>> from synth.sweep import parse_spec
    >>> sweep = parse_spec({"topology": "switch", "grid": {"n": [4, 8]}, "collectives": ["allreduce"],
    ...                     "algorithms": ["ring"], "sizes": ["1MiB"]})
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first = run_sweep(sweep, Path(folder) / "r.parquet", workers=1)
    ...     again = run_sweep(sweep, Path(folder) / "r.parquet", workers=1)
    >>> (first.ran, first.ok, again.ran, again.already_done)
    (2, 2, 0, 2)
    """
    _check_run_options(scheduler, workers, flush_seconds, connect_timeout)
    from synth.fileio import check_output_file

    output = check_output_file(output)
    if scheduler:
        check_scheduler(scheduler, connect_timeout)
    started = time.perf_counter()
    with output_lock(output):
        existing = read_results(output)
        wanted = {point.point_id for point in sweep.points}
        rerun = {row["point_id"] for row in existing if retry_errors and row.get("status") == ERROR} & wanted
        kept = [row for row in existing if row["point_id"] not in rerun]
        tasks = _missing_tasks(sweep, kept)
        # a file is written once rows change: never an empty one for a run that did not start
        results = _Results(output, sweep, kept, dirty=bool(rerun))
        counts = Progress(total=len(tasks))
        ok = 0
        runner: _SerialRunner | _DaskRunner | None = None
        finished: Iterator[Finished] = iter(())
        cores = workers if workers is not None else _local_cores()
        try:
            if tasks:
                if scheduler is None and min(cores, len(tasks)) <= 1:
                    runner = _SerialRunner()
                else:
                    runner = _DaskRunner(scheduler, min(cores, len(tasks)), connect_timeout)
                finished = runner.run(tasks)
            if on_start:
                on_start(counts)
            ok = _collect(finished, results, counts, progress, flush_seconds, flush_points)
        finally:
            # Done or interrupted: write whatever finished since the last flush, then release the workers.
            with contextlib.suppress(Exception):
                finished.close()  # type: ignore[attr-defined]
            if results.dirty:
                results.flush()
            if runner is not None:
                runner.close()
        return SweepSummary(str(output), len(sweep.points), len(sweep.points) - len(tasks), counts.done, ok,
                            counts.not_applicable, counts.failed, len(results.rows), results.flushes,
                            time.perf_counter() - started, runner.name if runner else "none",
                            runner.workers if runner else 0)


def _check_run_options(scheduler: str | None, workers: int | None, flush_seconds: float,
                       connect_timeout: float) -> None:
    """Refuse ``workers`` with an external scheduler, a worker count out of range, and durations that are
    not a number of seconds from 0 to 10^6."""
    if scheduler and workers is not None:
        raise InputError("", "workers", "sets the size of the local cluster; an external scheduler "
                         "(`scheduler`) brings its own workers")
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise InputError("", "workers", f"expected 1 to {MAX_WORKERS}, got {workers}")
    for name, value in (("flush_seconds", flush_seconds), ("connect_timeout", connect_timeout)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0 \
                or value > 10**6:
            raise InputError("", name, f"expected a number of seconds from 0 to 1000000, got {value!r}")


def _missing_tasks(sweep: Sweep, kept: list[Row]) -> list[Task]:
    """Each point of the sweep with the sizes it has no row for in ``kept``, in grid order (points with
    every size are left out)."""
    have: dict[str, set[int]] = {}
    for row in kept:
        have.setdefault(row["point_id"], set()).add(int(row["size"]))
    tasks = []
    for point in sweep.points:
        missing = tuple(size for size in sweep.sizes if size not in have.get(point.point_id, set()))
        if missing:
            tasks.append((point, missing))
    return tasks


class _Results:
    """The rows of an output file by (point_id, size), and writing them in file order: the sweep's points
    in grid order, each in size order, then rows of other specs in the order they were found.

    ``dirty`` says rows changed since the last write; ``flushes`` counts the writes.
    """

    def __init__(self, output: Path, sweep: Sweep, kept: list[Row], dirty: bool) -> None:
        self.output = output
        self.parameters = sweep.parameters
        self.rows: dict[tuple[str, int], Row] = {(row["point_id"], int(row["size"])): row for row in kept}
        self.order = {point.point_id: point.index for point in sweep.points}
        self.size_order = {size: index for index, size in enumerate(sweep.sizes)}
        self.others = {pid: index for index, pid in enumerate(dict.fromkeys(r["point_id"] for r in kept if
                                                                          r["point_id"] not in self.order))}
        self.dirty = dirty
        self.flushes = 0

    def sort_key(self, key: tuple[str, int]) -> tuple[int, int, int, int]:
        """Where the row of (point_id, size) goes in the file."""
        pid, size = key
        if pid in self.order:
            return (0, self.order[pid], self.size_order.get(size, len(self.size_order)), size)
        return (1, self.others[pid], 0, size)

    def add(self, point: Point, rows: list[Row]) -> None:
        """Record a finished point's rows (replacing older rows of the same sizes)."""
        for row in rows:
            self.rows[(point.point_id, int(row["size"]))] = row
        self.dirty = True

    def flush(self) -> None:
        """Rewrite the output with every row, atomically."""
        write_results(self.output, [self.rows[key] for key in sorted(self.rows, key=self.sort_key)],
                      self.parameters)
        self.flushes += 1
        self.dirty = False


def _collect(finished: Iterator[Finished], results: _Results, counts: Progress,
             progress: Callable[[Progress], None] | None, flush_seconds: float, flush_points: int) -> int:
    """Record each finished point's rows, count it, report progress, and flush when ``flush_points`` points
    finished or ``flush_seconds`` passed since the last flush (0 disables a trigger). Returns the number of
    points whose status is ok."""
    ok = 0
    last_flush = time.monotonic()
    since_flush = 0
    for point, _sizes, rows in finished:
        results.add(point, rows)
        status = rows[0]["status"] if rows else OK
        counts.done += 1
        counts.failed += status == ERROR
        counts.not_applicable += status == NOT_APPLICABLE
        ok += status == OK
        since_flush += 1
        if progress:
            progress(counts)
        waited = time.monotonic() - last_flush
        if (flush_points and since_flush >= flush_points) or (flush_seconds and waited >= flush_seconds):
            results.flush()
            since_flush = 0
            last_flush = time.monotonic()
        check_interrupted()  # a Ctrl-C Python swallowed meanwhile stops here, this point kept
    return ok
