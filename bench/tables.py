"""The figure tables of README.md and docs/*.md, made from the recorded results: ``python -m bench.tables
[--write]``.

A figure in the manual is a block between two marker lines::

    <!-- table: KEY -->
    ...made from bench/results/KEY.json...
    <!-- /table -->

(``<!-- table: KEY +notes -->`` also prints the table's notes). :func:`render` turns the result file into the
block's Markdown (the cells formatted as ``python -m bench`` formats them, and a line naming the file and the
command that records it); ``--write`` rewrites every block of README.md and docs/*.md, without it the blocks
that differ are listed and the exit code is 1. ``tests/test_readme.py`` checks that every block equals what
:func:`render` makes, so a figure is never edited by hand: rerun the benchmark with ``--record``, then this.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from bench.__main__ import fmt

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MARKER = re.compile(r"^<!-- table: ([\w-]+)( \+notes)? -->$")
END = "<!-- /table -->"


def render(key: str, notes: bool = False, results: Path = RESULTS) -> str:
    """The Markdown of the figure recorded in ``results/KEY.json``.

    Examples
    --------
    >>> render("startup").splitlines()[0].startswith("| case |")
    True
    """
    record: dict[str, Any] = json.loads((results / f"{key}.json").read_text(encoding="utf-8"))
    columns = record["columns"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(cell).replace("|", "\\|") for cell in row) + " |" for row in record["rows"]]
    module = str(record.get("module", "")).removeprefix("bench_")
    lines += ["", f"*{record['title']}.* From `bench/results/{key}.json` (`python -m bench --only {module} "
                  f"--record`; the file names the machine and the date)."]
    if notes and record.get("notes"):
        lines += ["", record["notes"]]
    return "\n".join(lines) + "\n"


def blocks(text: str) -> list[tuple[str, bool, str]]:
    """Every figure block of a Markdown text: (key, with notes, its current body)."""
    found = []
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        match = MARKER.match(line.strip())
        if match:
            end = next(j for j in range(index + 1, len(lines)) if lines[j].strip() == END)
            found.append((match.group(1), bool(match.group(2)), "".join(lines[index + 1:end])))
    return found


def rewrite(text: str) -> str:
    """``text`` with every figure block made again from its result file."""
    out: list[str] = []
    lines = text.splitlines(keepends=True)
    index = 0
    while index < len(lines):
        out.append(lines[index])
        match = MARKER.match(lines[index].strip())
        if match:
            end = next(j for j in range(index + 1, len(lines)) if lines[j].strip() == END)
            out.append(render(match.group(1), bool(match.group(2))))
            index = end
            continue
        index += 1
    return "".join(out)


def pages() -> list[Path]:
    """The Markdown files whose figure blocks this module owns."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    """Check (default) or ``--write`` every figure block."""
    args = sys.argv[1:] if argv is None else argv
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            stale.append(page.relative_to(ROOT).as_posix())
            if args == ["--write"]:
                page.write_text(new, encoding="utf-8")
    verb = "rewrote" if args == ["--write"] else "stale"
    print(f"{verb}: {', '.join(stale)}" if stale else "every figure block is current")
    return 1 if stale and args != ["--write"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
