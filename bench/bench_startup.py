"""The command line's start-up cost: ``synth --help`` and what each command imports before its work.

Table ``startup``: the median wall time of five fresh processes for ``synth --help``, and for the imports
each command needs before it starts working (the CLI, then the modules the command's first step loads:
``generate`` the library, the selection layer and the verifier; ``evaluate`` the evaluator; ``bound`` the
bounds). ``python -m bench --only startup``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from bench import Table

RUNS = 5
#: (case, python statement run in a fresh interpreter)
CASES: tuple[tuple[str, str], ...] = (
    ("synth --help", "import sys; sys.argv = ['synth', '--help']\nfrom synth.cli import main\ntry:\n    main()\n"
                     "except SystemExit:\n    pass"),
    ("import synth.cli", "import synth.cli"),
    ("generate: before the algorithm", "import synth.cli, synth.cli.basic, synth.library, synth.choose, synth.verify"),
    ("evaluate: before the simulation", "import synth.cli, synth.cli.basic, synth.library, synth.evaluate"),
    ("bound: before the max-flows", "import synth.cli, synth.cli.bound, synth.library, synth.bounds"),
)


#: The children's environment: bytecode written and read as in an installation (a session that sets
#: PYTHONDONTWRITEBYTECODE would otherwise compile every module from source in every process).
_ENVIRONMENT = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _seconds(statement: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], check=True, capture_output=True, env=_ENVIRONMENT)
    return time.perf_counter() - started


def run(quick: bool) -> list[Table]:
    """The start-up table (see the module docstring)."""
    table = Table("startup", "Command-line start-up: median of fresh processes",
                  ["case", "runs", "median s", "fastest s"])
    bare = statistics.median(_seconds("pass") for _ in range(RUNS))
    for case, statement in CASES[:2] if quick else CASES:
        _seconds(statement)  # writes the bytecode a first run of an installation writes
        times = [_seconds(statement) for _ in range(RUNS)]
        table.add(case, RUNS, statistics.median(times), min(times))
    table.add("python -c pass (the interpreter alone)", RUNS, bare, bare)
    table.notes = ("Wall time of whole processes, interpreter start included, bytecode cached (one warm-up run per "
                   "case); the machine's other load included.")
    return [table]
