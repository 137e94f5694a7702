"""synth's benchmark suite: ``python -m bench [--quick] [--only NAME ...]`` (``make bench`` / ``make bench-quick``).

Protocol for a benchmark module
-------------------------------
Every ``bench/bench_<name>.py`` module is discovered automatically and must expose::

    def run(quick: bool) -> list[Table]: ...

- ``quick=True`` is ``make bench-quick``: the whole suite must finish in under 2 minutes on 2 cores, so
  use only the smallest sizes (a few seconds per module). ``quick=False`` is ``make bench``: the whole
  suite must finish in under 15 minutes on 2 cores; give each size a budget and stop growing a series
  when a step exceeds it (:func:`over_budget`), instead of letting one case run for minutes.
- A :class:`Table` is a title, column names and rows of plain values (str, int, float, None). Put units in
  column names (``"time s"``, ``"peak MiB"``, ``"transfers/s"``), not in the cells. Keep numbers as numbers:
  the driver formats floats for the terminal and writes the raw values to JSON.
- ``Table.key`` names the JSON file: the driver writes ``bench/results/<key>.json`` (atomically) with the
  title, columns, rows, notes, the machine and the date, and prints every table with rich.
- Do not assert timings; benchmarks measure and print. Every schedule a benchmark makes must still pass
  :func:`synth.verify` (outside the timed region unless the verifier is what is measured).
- A module may raise :class:`Skip` (e.g. an optional solver missing); the driver reports it and goes on.
  Any other exception is reported with its message and the driver exits non-zero at the end.

Helpers: :func:`timed` (wall time and result), :func:`peak_memory` (peak traced allocation of a call, in
MiB; a second run under :mod:`tracemalloc`, so time it separately), :func:`over_budget`.

Example
-------
>>> table = Table("demo", "An example", ["n", "time s"], [[8, 0.5]])
>>> table.to_dict()["columns"]
['n', 'time s']
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class Table:
    """One result table of a benchmark module.

    Parameters
    ----------
    key : str
        File-name-safe identifier; results go to ``bench/results/<key>.json``.
    title : str
        Human-readable title printed above the table.
    columns : list of str
        Column names, with units.
    rows : list of list
        Rows of plain values (str, int, float, None).
    notes : str
        Free text printed under the table (method, caveats, what a ratio compares).
    """

    key: str
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    notes: str = ""

    def add(self, *values: Any) -> None:
        """Append one row (one value per column); it is echoed to stderr as progress."""
        if len(values) != len(self.columns):
            raise ValueError(f"table {self.key}: row has {len(values)} values for {len(self.columns)} columns")
        self.rows.append(list(values))
        shown = ", ".join(f"{c}={v:.3g}" if isinstance(v, float) else f"{c}={v}" for c, v in zip(self.columns, values, strict=True))
        print(f"  [{self.key}] {shown}", file=sys.stderr, flush=True)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written under ``bench/results/``."""
        return {"key": self.key, "title": self.title, "columns": list(self.columns),
                "rows": [list(row) for row in self.rows], "notes": self.notes}


class Skip(Exception):  # noqa: N818  (a signal, not an error)
    """Raised by a benchmark module that cannot run here (the message says why)."""


def timed(function: Callable[[], T]) -> tuple[float, T]:
    """Run ``function()`` once and return (wall seconds, result)."""
    gc.collect()
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def peak_memory(function: Callable[[], object]) -> float:
    """Peak memory traced by :mod:`tracemalloc` while ``function()`` runs, in MiB (numpy included)."""
    gc.collect()
    tracemalloc.start()
    try:
        function()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


def over_budget(seconds: float, quick: bool, full_budget: float = 60.0, quick_budget: float = 5.0) -> bool:
    """True when one step took longer than the per-step budget, so a size series should stop growing."""
    return seconds > (quick_budget if quick else full_budget)
