"""``synth sweep``: run a design-space sweep spec on Dask (local cores or an existing cluster)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from synth.cli.common import (
    CSV_OPTION,
    JSON_OPTION,
    VERBOSITY,
    Interrupted,
    console,
    err_console,
    note,
    output_file,
    print_json,
    table,
)

MAX_WORKERS = 512  # synth.sweep.MAX_WORKERS (it imports Dask; a test keeps the two equal)

if TYPE_CHECKING:
    from synth.sweep import Progress, SweepSummary


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to ``app``."""
    app.command("sweep")(sweep)


class _RateColumn(ProgressColumn):
    """Points per second over the run so far."""

    def render(self, task: Task) -> Text:
        """The rate as ``12.3 pts/s``."""
        rate = task.fields.get("rate", 0.0)
        return Text(f"{rate:.1f} pts/s", style="cyan")


def sweep(
    spec: Annotated[str, typer.Argument(help="Sweep spec (.yaml/.json): a topology builder and a grid of its "
                                             "parameters, or topology files and library specs; collectives, "
                                             "algorithms, sizes (format: docs/sweeps.md).")],
    output: Annotated[str, typer.Option(
        "--output", "-o", help="Results file (Parquet). Rows already in it are kept and their points skipped.")],
    scheduler: Annotated[str | None, typer.Option(
        "--scheduler", help="Address of an existing Dask scheduler, e.g. tcp://10.0.0.5:8786.")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-w", min=1, max=MAX_WORKERS, help="Local worker processes (default: one per core; 1 runs in process).")] = None,
    flush_seconds: Annotated[float, typer.Option(
        "--flush-seconds", min=0.0, max=1e6, help="Rewrite the output at least this often while running.")] = 5.0,
    flush_points: Annotated[int, typer.Option(
        "--flush-points", min=0, help="Also rewrite it after this many finished points (0: off).")] = 0,
    retry_errors: Annotated[bool, typer.Option(
        "--retry-errors", help="Run points stored with status error again.")] = False,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
) -> None:
    """Synthesize, verify and evaluate every point of a design-space grid in parallel (Dask), one row per
    point and size in a Parquet file; resumable, flushed every few seconds. Exit code 0 when every point run
    is ok or not applicable, 1 when any failed (its error is in the 'error' column), 2 for a bad spec."""
    from synth.sweep import load_spec, run_sweep

    output_file(output, inputs=[spec])
    sweep_spec = load_spec(spec)
    # Same rule as the shared progress_bar (stderr; off when --quiet or stdout is not a terminal), plus
    # the failed count and the rate.
    show_progress = VERBOSITY["level"] > 0 and sys.stdout.isatty() and err_console.is_terminal
    bar = RichProgress(TextColumn("[bold]sweep[/bold]"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("[red]{task.fields[failed]} failed[/red]"), _RateColumn(), TimeElapsedColumn(),
                       console=err_console, transient=False, disable=not show_progress)
    task_id = bar.add_task("sweep", total=None, failed=0, rate=0.0)

    def on_start(counts: Progress) -> None:
        bar.update(task_id, total=counts.total)

    finished = [0]

    def on_point(counts: Progress) -> None:
        finished[0] = counts.done
        bar.update(task_id, completed=counts.done, failed=counts.failed, rate=counts.rate)

    try:
        with bar:
            summary = run_sweep(sweep_spec, output, scheduler=scheduler, workers=workers,
                                flush_seconds=flush_seconds, flush_points=flush_points, retry_errors=retry_errors,
                                progress=on_point, on_start=on_start)
    except KeyboardInterrupt:
        if not finished[0]:
            raise  # nothing finished, nothing written: the usual message is the truth
        raise Interrupted(f"the {finished[0]} point(s) finished in this run are saved in {output} (with any rows "
                          "it held before); run the same command again to resume") from None
    _report(summary, as_json)
    if summary.failed:  # the rows are saved (errors in the 'error' column); the exit code says some failed
        raise typer.Exit(1)


def _report(summary: SweepSummary, as_json: bool) -> None:
    if as_json:
        print_json(summary.to_dict())
        return
    rows: list[list[object]] = [["points in spec", summary.points], ["already in output", summary.already_done],
            ["ran now", summary.ran], ["ok", summary.ok], ["not applicable", summary.not_applicable],
            ["failed", summary.failed], ["rows in output", summary.rows],
            ["runner", f"{summary.runner} ({summary.workers} worker{'' if summary.workers == 1 else 's'})"], ["seconds", f"{summary.seconds:.1f}"]]
    console.print(table(f"synth sweep -> {summary.output}", ["", "value"], rows, {1}))
    if summary.failed:
        note(f"[yellow]{summary.failed} points failed; their errors are in the 'error' column "
             "(--retry-errors runs them again)[/yellow]")
