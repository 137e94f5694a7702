"""The first hour of a new user: ``python -m synth``, a fast ``--help``, size units and ranges,
``--csv``, ``catalog --check`` filters, one message on an interrupted sweep, outputs checked before work."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.errors import InputError
from synth.units import format_size, parse_size, parse_sizes
from tests.helpers import INTERRUPTIBLE, SYNTH, assert_refused, run_cli, run_process

ROOT = Path(__file__).resolve().parents[1]

#: Modules the command line may import only in the commands that need them (not for ``--help``).
HEAVY = ("ortools", "pandas", "dask", "distributed", "matplotlib", "scipy", "networkx", "numpy", "pyarrow")


# ------------------------------------------------------------------------- python -m synth, fast --help
def test_python_m_synth_is_the_synth_command(tmp_path):
    done = subprocess.run([sys.executable, "-m", "synth", "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("synth "), done.stderr
    bad = subprocess.run([sys.executable, "-m", "synth", "bound", "nope:n=3"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("error: "), bad.stderr


def test_help_imports_no_heavy_module():
    """Building the whole command line (every command's options) imports none of the heavy libraries."""
    code = ("import sys, synth.cli, typer.main; typer.main.get_command(synth.cli.app); "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", f"imported at start-up: {done.stdout.strip()}"


def test_lazy_package_keeps_function_names():
    """``synth.evaluate`` and ``synth.verify`` stay the functions after their modules are imported."""
    code = ("import synth.evaluate, synth.verify, synth; t = synth.load_topology('switch:n=4'); "
            "s = synth.synthesize(t, 'allgather', 'ring'); print(synth.verify(s, t).transfers, "
            "callable(synth.evaluate), sorted(set(synth.__all__) - set(dir(synth))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["12", "True", "[]"]


def test_sweep_worker_cap_matches_the_sweep_module():
    from synth.cli.sweep import MAX_WORKERS
    from synth.sweep import MAX_WORKERS as SWEEP_MAX_WORKERS

    assert MAX_WORKERS == SWEEP_MAX_WORKERS


# -------------------------------------------------------------------------------- size units and ranges
def test_units_are_nccl_tests_units():
    assert parse_size("64M") == parse_size("64MiB") == 64 * 2**20
    assert parse_size("64MB") == 64_000_000
    assert parse_size("1k") == 1024 and parse_size("1G") == 2**30 and parse_size("2kb") == 2000


def test_ranges():
    assert parse_sizes("1K:4G:2") == [2**k for k in range(10, 33)]
    assert [format_size(s) for s in parse_sizes("1K:1M:4")] == ["1KiB", "4KiB", "16KiB", "64KiB", "256KiB", "1MiB"]
    assert parse_sizes("3:100:3") == [3, 9, 27, 81]  # TO only when the steps reach it
    assert parse_sizes("1M:1M") == [2**20]


@pytest.mark.parametrize(("text", "says"), [
    ("1M:1K", "starts above its end"), ("1K:1M:1", "whole factor"), ("1K:1M:1.5", "whole factor"),
    ("1K:1M:x", "whole factor"), ("1K:", "expected a size or a range"), (":1K", "expected a size or a range"),
    ("1K:2K:2:2", "expected a size or a range"), ("1K:2Q", "expected a size such as"),
    ("0:1K", "positive"), ("1K:2PiB", "expected a size"),
])
def test_bad_ranges_are_refused_with_the_syntax(text, says):
    with pytest.raises(InputError) as caught:
        parse_sizes(text, "--size")
    assert says in str(caught.value) and "--size" in str(caught.value)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2**40), st.integers(0, 40), st.integers(2, 64))
def test_range_is_geometric_and_within_its_ends(low, span, factor):
    high = min(low * 2**span, 2**50)
    sizes = parse_sizes(f"{low}:{high}:{factor}")
    assert sizes[0] == low and sizes[-1] <= high < sizes[-1] * factor
    assert all(b == a * factor for a, b in zip(sizes, sizes[1:], strict=False))


def test_cli_takes_ranges_and_refuses_bad_ones(capsys, monkeypatch):
    outcome = run_cli(["compare", "switch:n=4", "-c", "allgather", "-a", "ring", "-s", "1K:64K:8", "--json"],
                      capsys, monkeypatch)
    assert outcome.code == 0, outcome.err
    assert sorted({row["size"] for row in json.loads(outcome.out)["rows"]}) == [1024, 8192, 65536]
    refused = run_cli(["compare", "switch:n=4", "-s", "64K:1K"], capsys, monkeypatch)
    assert_refused(refused, "--size", "starts above its end")


def test_size_help_says_the_units():
    outcome = run_process(["compare", "--help"])
    assert "binary" in outcome.out and "FROM:TO" in outcome.out


# ---------------------------------------------------------------------------------------------- --csv
def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize("args", [
    ["compare", "switch:n=4", "-c", "allgather", "-a", "ring", "-a", "direct", "-s", "1K:1M:32"],
    ["tune", "switch:n=4", "-c", "allgather", "-a", "ring", "-a", "direct", "-s", "1K:1M:32"],
    ["topologies"],
    ["show", "ring:n=4"],
], ids=lambda a: a[0])
def test_csv_is_the_table_and_only_the_table(args, capsys, monkeypatch):
    table = run_cli([*args], capsys, monkeypatch)
    as_csv = run_cli([*args, "--csv"], capsys, monkeypatch)
    assert table.code == as_csv.code == 0, as_csv.err
    rows = _csv(as_csv.out)
    header, body = rows[0], rows[1:]
    assert len(header) >= 3 and all(len(row) == len(header) for row in body)
    assert all(name in table.out for name in header[:2])
    # every row of the CSV is a row of the table: its first three cells are on one table line
    lines = table.out.splitlines()
    for row in body[:20]:
        assert any(all(cell.strip("* ")[:20] in line for cell in row[:3]) for line in lines), row
    if args[0] in ("compare", "tune"):
        assert len(body) >= 3  # 1K, 32K, 1M


def test_csv_and_json_together_are_refused(capsys, monkeypatch):
    outcome = run_cli(["show", "ring:n=4", "--csv", "--json"], capsys, monkeypatch)
    assert_refused(outcome, "--csv", "choose one of --json and --csv")


def test_csv_mode_does_not_leak_into_the_next_command(capsys, monkeypatch):
    assert run_cli(["show", "ring:n=4", "--csv"], capsys, monkeypatch).out.startswith("rank,gpu,")
    plain = run_cli(["show", "ring:n=4"], capsys, monkeypatch)
    assert "┃" in plain.out or "|" in plain.out or "rank" in plain.out.splitlines()[2]
    assert not plain.out.startswith("rank,gpu,")


# ----------------------------------------------------------------------------- catalog --check filters
def test_catalog_check_honours_its_filters(tmp_path, capsys, monkeypatch):
    out = tmp_path / "cat"
    built = run_cli(["catalog", "-o", str(out), "-t", "switch:n=4", "-c", "allgather", "-c", "reducescatter", "-s", "1MiB",
                     "--quiet"], capsys, monkeypatch)
    assert built.code == 0, built.err
    index = json.loads((out / "index.json").read_text())
    broken = next(e for e in index["entries"] if e["collective"] == "reducescatter")
    (out / broken["file"]).write_text("{}")  # the reducescatter file is damaged
    allgather = run_cli(["catalog", "--check", "-o", str(out), "-c", "allgather", "--json"], capsys, monkeypatch)
    assert allgather.code == 0 and json.loads(allgather.out) == {"ok": True, "problems": []}, allgather.out
    everything = run_cli(["catalog", "--check", "-o", str(out), "--json"], capsys, monkeypatch)
    assert everything.code == 1 and json.loads(everything.out)["problems"], everything.out
    assert all("reducescatter" in p for p in json.loads(everything.out)["problems"])
    by_topology = run_cli(["catalog", "--check", "-o", str(out), "-t", "switch:n=4", "-c", "reducescatter",
                           "--json"], capsys, monkeypatch)
    assert by_topology.code == 1
    unknown = run_cli(["catalog", "--check", "-o", str(out), "-t", "ring:n=4"], capsys, monkeypatch)
    assert_refused(unknown, "--topology", "the catalog has no entry for 'ring:n=4'")


# ------------------------------------------------------------------------------- interrupting a sweep
def test_interrupted_sweep_says_one_consistent_thing(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("topology: ring\ngrid:\n  n: {from: 4, to: 400}\ncollectives: [allgather]\n"
                    "algorithms: [ring]\nsizes: [1MiB]\n")
    output = tmp_path / "out.parquet"
    process = subprocess.Popen([str(SYNTH), "sweep", str(spec), "-o", str(output), "--workers", "1",
                                "--flush-points", "1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, **INTERRUPTIBLE)
    try:
        deadline = time.monotonic() + 120
        while not output.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, "the sweep ended before it could be interrupted"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("interrupted while running `synth sweep") and "saved in" in lines[0], err
    assert "no partial output" not in err
    import pandas as pd

    saved = pd.read_parquet(output)
    count = int(lines[0].split("the ", 1)[1].split(" point", 1)[0])
    assert len(saved) == count >= 1


def test_interrupt_python_swallowed_still_stops_the_sweep(tmp_path):
    """A signal handler's KeyboardInterrupt that lands in a ``__del__`` (pyarrow's ParquetWriter has one) is
    dropped by Python with an "Exception ignored" message; the CLI's hook keeps it quiet and the sweep stops
    at the next point with what finished saved, instead of running to the end (CI saw this once)."""
    from synth.cli import _watch_signals
    from synth.sweep import load_spec, run_sweep
    from synth.sweep.results import read_results

    spec = tmp_path / "spec.yaml"
    spec.write_text("topology: ring\ngrid:\n  n: {from: 4, to: 40}\ncollectives: [allgather]\n"
                    "algorithms: [ring]\nsizes: [1MiB]\n")
    output = tmp_path / "out.parquet"

    class InterruptedInDel:
        def __del__(self) -> None:
            raise KeyboardInterrupt

    def progress(counts) -> None:
        if counts.done == 3:
            InterruptedInDel()  # dropped at once: its KeyboardInterrupt cannot propagate

    seen, restore = _watch_signals()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sweep(load_spec(spec), output, workers=1, flush_seconds=0, flush_points=0, progress=progress)
    finally:
        restore()
    assert len(read_results(output)) == 3  # the point that was running is kept, none after it ran


# ------------------------------------------------------------------------ outputs checked before work
@pytest.mark.parametrize("args", [
    ["generate", "torus:dims=16x16", "-c", "alltoall", "-a", "direct", "-o", "{bad}/x.json"],
    ["compare", "torus:dims=16x16", "--plot", "{bad}/x.png"],
    ["tune", "torus:dims=16x16", "-c", "allreduce", "--out", "{bad}/x.json"],
    ["tune", "torus:dims=16x16", "-c", "allreduce", "--plot", "{bad}/x.png"],
    ["draw", "torus:dims=16x16", "-o", "{bad}/x.png"],
    ["catalog", "-o", "{bad}/catalog", "-t", "torus:dims=16x16"],
    ["sweep", str(ROOT / "examples" / "sweep-dgx-a100.yaml"), "-o", "{bad}/x.parquet"],
], ids=lambda a: "-".join(a[:1] + [x for x in a if x.startswith("-") and x not in ("-c", "-a", "-t")]))
@pytest.mark.parametrize("bad", ["missing", "readonly"])
def test_bad_output_place_fails_before_the_work(args, bad, tmp_path, capsys, monkeypatch):
    """A folder that does not exist or cannot be written: one line, exit 2, before any work (the work
    here would take minutes; the refusal comes at once, and nothing is written)."""
    if bad == "readonly":
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        (tmp_path / bad).mkdir()
        (tmp_path / bad).chmod(0o500)
    place = str(tmp_path / bad)
    monkeypatch.chdir(tmp_path)
    try:
        outcome = run_cli([a.replace("{bad}", place) for a in args], capsys, monkeypatch)
    finally:
        if bad == "readonly":
            (tmp_path / bad).chmod(0o700)
    assert_refused(outcome, place, "does not exist" if bad == "missing" else "cannot be written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if bad == "missing" else [bad])


# -------------------------------------------------------------------------- benchmarks leave the tree
def test_benchmarks_write_to_an_ignored_folder_unless_recording():
    from bench.__main__ import HERE, results_folder

    for quick in (False, True):
        local = results_folder(quick)
        probe = local / "core_quality.json"
        ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=ROOT)
        assert ignored.returncode == 0, f"{probe} is not ignored by git"
        recorded = results_folder(quick, record=True) / "core_quality.json"
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(recorded)], cwd=ROOT,
                                 capture_output=True)
        assert tracked.returncode == 0, f"{recorded} should be the recorded (tracked) figures"
        assert HERE in local.parents
    assert results_folder(True, results=Path("/x")) == Path("/x")


def test_make_bench_quick_does_not_record():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nbench-quick:", 1)[1].split("\n\n", 1)[0]
    assert "python -m bench --quick" in recipe and "--record" not in recipe and "--results" not in recipe


def test_bench_record_and_results_exclude_each_other():
    done = subprocess.run([sys.executable, "-m", "bench", "--record", "--results", "x"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "not allowed with" in done.stderr


def _command_paths(node, path=()):
    yield path
    for name, child in sorted(getattr(node, "commands", {}).items()):
        yield from _command_paths(child, (*path, name))


def test_help_has_no_markup_or_type_placeholders(capsys, monkeypatch):
    """Every command's ``--help`` reads as plain text: no reStructuredText double backticks, and flags
    (options without a value) show no ``<bool>`` placeholder, while options that take a value keep theirs."""
    from synth.cli import command

    paths = list(_command_paths(command()))
    assert len(paths) > 15
    for path in paths:
        done = run_cli([*path, "--help"], capsys, monkeypatch)
        assert done.code == 0, (path, done.err)
        assert "``" not in done.out and "<bool>" not in done.out, path
    assert "<int" in run_cli(["bound", "--help"], capsys, monkeypatch).out


def test_csv_times_are_seconds(capsys, monkeypatch):
    """CSV times are numbers in one unit (seconds, said in the header), matching the table's readable times."""
    args = ["compare", "switch:n=4", "-c", "allgather", "-a", "ring", "-s", "1K", "-s", "1G"]
    rows = _csv(run_cli([*args, "--csv"], capsys, monkeypatch).out)
    header, body = rows[0], rows[1:]
    assert "time s" in header and "time" not in header
    column = header.index("time s")
    ring = [float(row[column]) for row in body if row[header.index("algorithm")].strip("* ") == "ring"]
    assert len(ring) == 2 and ring[0] < 1e-3 < ring[1] < 1
    table = run_cli(args, capsys, monkeypatch).out
    assert f"{ring[0] * 1e6:.2f} us" in table and f"{ring[1] * 1e3:.3f} ms" in table


def test_evaluate_shows_percent_of_bound_as_compare_does(tmp_path, capsys, monkeypatch):
    """``evaluate`` rates a schedule against the topology's bound exactly as ``compare`` rates the same one."""
    path = str(tmp_path / "ag.json")
    assert run_cli(["generate", "dgx-a100", "-c", "allgather", "-a", "ring", "-o", path], capsys, monkeypatch).code == 0
    shown = _csv(run_cli(["evaluate", path, "-s", "1G", "--csv"], capsys, monkeypatch).out)
    compared = _csv(run_cli(["compare", "dgx-a100", "-c", "allgather", "-a", "ring", "-s", "1G", "--csv"],
                            capsys, monkeypatch).out)
    ring = next(row for row in compared[1:] if row[compared[0].index("algorithm")].strip("* ") == "ring")
    percent = shown[1][shown[0].index("% of bound")]
    assert percent.endswith("%") and 0 < float(percent[:-1]) <= 100
    assert percent == ring[compared[0].index("% of bound")]
    as_json = json.loads(run_cli(["evaluate", path, "-s", "1G", "--json"], capsys, monkeypatch).out)
    assert f"{as_json[0]['percent_of_bound']:.1f}%" == percent and as_json[0]["bound_label"]
