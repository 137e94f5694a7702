"""Run the benchmark suite: ``python -m bench [--quick] [--only NAME ...] [--record | --results DIR]``.

Discovers every ``bench/bench_*.py`` module, calls its ``run(quick)`` (see :mod:`bench` for the protocol),
prints each table, writes it to ``<results>/<key>.json`` and writes ``<results>/summary.md``: every table in
Markdown with the machine and the date. The figure tables of README.md and docs/*.md are made from the JSON files
by :mod:`bench.tables` (``python -m bench.tables --write``, or ``make docs``).

Where: by default ``bench/results/local/`` (``bench/results/local/quick/`` with ``--quick``), a folder git
ignores, so running the benchmarks never changes the repository. ``--record`` writes the figures the README
cites, ``bench/results/`` (``bench/results/quick/``); ``--results DIR`` writes anywhere.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from bench import Skip, Table

HERE = Path(__file__).resolve().parent


def machine() -> dict[str, Any]:
    """Where the numbers were measured."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 0
    return {"cpu": cpu, "cores": cores, "python": platform.python_version(), "system": platform.system(),
            "machine": platform.machine()}


def fmt(value: Any) -> str:
    """A cell for humans: floats to 3 significant digits (thousands separated when large)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 0.01:
            return f"{value:.3g}"
        return f"{value:.2e}"
    return str(value)


def modules(only: list[str] | None) -> list[str]:
    names = sorted(p.stem for p in HERE.glob("bench_*.py"))
    if only:
        wanted = {n if n.startswith("bench_") else f"bench_{n}" for n in only}
        unknown = wanted - set(names)
        if unknown:
            raise SystemExit(f"unknown benchmark module(s): {', '.join(sorted(unknown))}; have {', '.join(names)}")
        names = [n for n in names if n in wanted]
    return names


def to_rich(table: Table) -> RichTable:
    view = RichTable(title=table.title, header_style="bold", title_justify="left")
    numeric = [all(isinstance(row[i], int | float) or row[i] is None for row in table.rows) for i in
               range(len(table.columns))]
    for column, is_number in zip(table.columns, numeric, strict=True):
        view.add_column(column, justify="right" if is_number else "left")
    for row in table.rows:
        view.add_row(*[fmt(cell) for cell in row])
    return view


def to_markdown(table: Table) -> str:
    lines = [f"#### {table.title}", "", "| " + " | ".join(table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    for row in table.rows:
        lines.append("| " + " | ".join(fmt(cell).replace("|", "\\|") for cell in row) + " |")
    if table.notes:
        lines += ["", table.notes]
    return "\n".join(lines) + "\n"


def results_folder(quick: bool, record: bool = False, results: Path | None = None) -> Path:
    """Where a run writes its tables: ``results`` if given, the recorded figures with ``record``, else an
    ignored local folder.

    Examples
    --------
    >>> results_folder(True).relative_to(HERE).as_posix(), results_folder(False, record=True).name
    ('results/local/quick', 'results')
    """
    if results is not None:
        return results
    base = HERE / "results" if record else HERE / "results" / "local"
    return base / "quick" if quick else base


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smallest sizes only (make bench-quick, < 2 min)")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only bench_NAME (repeatable)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--record", action="store_true",
                       help="write the figures the README cites: bench/results/ (quick: bench/results/quick/)")
    where.add_argument("--results", type=Path, default=None,
                       help="folder for the JSON and summary.md (default bench/results/local/, ignored by git)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    from synth.fileio import atomic_write_text

    results = results_folder(args.quick, args.record, args.results)
    results.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    about = machine()
    when = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    mode = "quick" if args.quick else "full"
    console.print(f"[bold]synth benchmarks[/bold] ({mode}) on {about['cpu']}, {about['cores']} cores, "
                  f"Python {about['python']}, {when}")
    failures: list[str] = []
    summary = [f"### Benchmarks ({mode})", "",
               f"Measured {when} on {about['cpu']} ({about['cores']} cores), Python {about['python']}, "
               f"{about['system']} {about['machine']}, with `python -m bench{' --quick' if args.quick else ''}`.", ""]
    started = time.perf_counter()
    for name in modules(args.only):
        module_started = time.perf_counter()
        console.rule(name)
        try:
            module = importlib.import_module(f"bench.{name}")
            tables = module.run(args.quick)
        except Skip as reason:
            console.print(f"[yellow]skipped {name}: {reason}[/yellow]")
            summary += [f"*{name} skipped: {reason}*", ""]
            continue
        except Exception as error:  # report and go on: one broken module must not hide the others
            console.print(f"[red]{name} failed: {type(error).__name__}: {error}[/red]")
            console.print(traceback.format_exc(), markup=False, highlight=False)
            failures.append(name)
            continue
        for table in tables:
            console.print(to_rich(table))
            if table.notes:
                console.print(table.notes, style="dim")
            record = {**table.to_dict(), "module": name, "mode": mode, "machine": about, "date": when}
            atomic_write_text(results / f"{table.key}.json", json.dumps(record, indent=1) + "\n")
            summary.append(to_markdown(table))
        console.print(f"[dim]{name}: {time.perf_counter() - module_started:.1f} s[/dim]")
    total = time.perf_counter() - started
    summary.append(f"Total benchmark time: {total:.0f} s.")
    atomic_write_text(results / "summary.md", "\n".join(summary) + "\n")
    console.print(f"wrote {results}/*.json and {results / 'summary.md'} in {total:.0f} s")
    if failures:
        console.print(f"[red]failed: {', '.join(failures)}[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
