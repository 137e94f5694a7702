"""Helpers for CLI tests: run ``synth`` in this process or as a subprocess, and check a clean refusal."""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SYNTH = Path(sys.executable).parent / "synth"


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


#: ``subprocess.Popen`` arguments for a child the test will interrupt: a suite started as a background job
#: (``cmd &`` without job control) ignores SIGINT, its children inherit that, and synth leaves an ignored
#: signal ignored, so the child gets the default dispositions back.
INTERRUPTIBLE = {"preexec_fn": _default_signals}


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def run_cli(args: list[str], capsys, monkeypatch) -> Outcome:
    """Run ``synth ARGS`` in this process through the real entry point (``synth.cli.main``)."""
    from synth.cli import main

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["synth", *args])
    try:
        main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def run_process(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Outcome:
    """Run ``synth ARGS`` as a separate process, as a user would (``env`` is added to the environment)."""
    import os

    done = subprocess.run([str(SYNTH), *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, **(env or {})})
    return Outcome(done.returncode, done.stdout, done.stderr)


def assert_refused(outcome: Outcome, named: str, expect: str, out_dir: Path | None = None) -> str:
    """Exit code 2, exactly one stderr line ``error: ...`` naming ``named`` and saying ``expect``."""
    everything = outcome.out + outcome.err
    assert "Traceback" not in everything, everything
    assert outcome.code == 2, (outcome.code, everything)
    lines = outcome.err.strip().splitlines()
    assert len(lines) == 1, outcome.err
    line = lines[0]
    assert line.startswith("error: "), line
    assert named in line, f"the message does not name {named!r}: {line}"
    assert expect in line, f"expected {expect!r} in: {line}"
    if out_dir is not None:
        left = sorted(p.name for p in out_dir.rglob("*"))
        assert not left, f"output left behind: {left}"
    return line


@functools.cache
def synthesized(spec: str, kind: str, algorithm: str):
    """``synthesize(load_topology(spec), kind, algorithm)``, made once per test session: schedules are
    immutable, and the exporters' round trips share milp's, which take seconds each. Refusals are not
    remembered (each caller sees its own exception)."""
    from synth.algorithms import synthesize
    from synth.library import load_topology

    return synthesize(load_topology(spec), kind, algorithm)


def every_schedule(topology, kind):
    """(name, verified schedule) of every registered algorithm but milp that applies to ``kind`` on
    ``topology`` (an algorithm that does not apply, or refuses on a limit, is left out)."""
    from synth import synthesize, verify
    from synth.algorithms import available
    from synth.errors import NotApplicable, SynthError

    for algorithm in available(kind):
        if algorithm.name == "milp":
            continue
        try:
            schedule = synthesize(topology, kind, algorithm.name)
        except (NotApplicable, SynthError):
            continue
        verify(schedule, topology)
        yield algorithm.name, schedule
