"""One (schedule, size, model) gives one time in every command: `evaluate --json`, `compare --json`,
`tune --out` and `sweep` agree to the last bit for every registered algorithm, and each names the plan."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli

from synth import Kind, load_topology
from synth.algorithms import REGISTRY, available
from synth.compare import run_all
from synth.evaluate import evaluate_sizes
from synth.sweep import parse_spec, run_point
from synth.tune import tune

SIZES = ["64KiB", "4MiB"]  # at 4 MiB: LL, LL128 and Simple plans, some of 8 slices per chunk (forest, hierarchical)
SIZE_BYTES = [64 * 1024, 4 * 2**20]
KINDS = [k.value for k in Kind]
#: Solver runs are left out of compare and tune by default (they are slow); everything else is checked.
SLOW = {"milp"}


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    """``cli(*args)`` runs synth in this process from an empty working folder."""
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_cli(list(args), capsys, monkeypatch)


def _as_json(outcome):
    assert outcome.code == 0, outcome.err
    return json.loads(outcome.out)


@pytest.mark.slow
def test_every_command_reports_the_same_time_and_plan(cli, tmp_path):
    spec = "dgx-a100:boxes=2"
    compared = _as_json(cli("compare", spec, *[a for k in KINDS for a in ("-c", k)],
                            *[a for s in SIZES for a in ("-s", s)], "--json"))
    rows = {(r["algorithm"], r["collective"], r["size"]): r for r in compared["rows"]}
    expected_pairs = {(a.name, k.value) for k in Kind for a in available(k) if a.name not in SLOW}
    assert {(a, c) for a, c, _ in rows} <= expected_pairs
    assert len({(a, c) for a, c, _ in rows}) >= 15
    sweep = parse_spec({"topology": "dgx-a100", "grid": {"boxes": [2]}, "collectives": KINDS,
                        "algorithms": sorted({a for a, _, _ in rows}), "sizes": SIZES})
    swept = {(row["algorithm"], row["collective"], row["size"]): row
             for point in sweep.points for row in run_point(point, sweep.sizes) if row["status"] == "ok"}
    for (algorithm, kind, size), row in rows.items():
        for field in ("protocol", "slices", "slice_bytes", "window"):
            assert field in row
        per_size = REGISTRY[algorithm].size_sensitive  # compare made it for this size
        out = tmp_path / (f"{algorithm}.{kind}.{size}.json" if per_size else f"{algorithm}.{kind}.json")
        if not out.exists():
            extra = ("-O", f"size={size}") if per_size else ()
            assert cli("generate", spec, "-c", kind, "-a", algorithm, *extra, "-o", str(out)).code == 0
        evaluated = _as_json(cli("evaluate", str(out), *[a for s in SIZES for a in ("-s", s)], "--json"))
        record = next(r for r in evaluated if r["size"] == size)
        assert record["time_s"] == row["time_s"], (algorithm, kind, size)
        assert {k: record[k] for k in ("protocol", "slices", "slice_bytes", "window")} == \
            {k: row[k] for k in ("protocol", "slices", "slice_bytes", "window")}
        assert swept[(algorithm, kind, size)]["time_s"] == row["time_s"], (algorithm, kind, size)
        assert swept[(algorithm, kind, size)]["protocol"] == row["protocol"]
    for kind in ("allgather", "allreduce"):
        table = tmp_path / f"tune-{kind}.json"
        assert cli("tune", spec, "-c", kind, *[a for s in SIZES for a in ("-s", s)], "--skip-slow",
                   "--out", str(table), "--json").code == 0
        data = json.loads(table.read_text())
        for label, candidate in data["candidates"].items():
            if label != candidate["algorithm"]:
                continue  # a variant with other options: a different schedule
            for index, size in enumerate(SIZE_BYTES):
                assert candidate["time_s"][index] == rows[(label, kind, size)]["time_s"], (label, kind, size)
                assert candidate["protocol"][index] == rows[(label, kind, size)]["protocol"]


@pytest.mark.parametrize("spec", ["dgx1", "torus:dims=3x3"])
def test_compare_rows_are_the_evaluator_times_of_the_same_schedules(spec):
    topology = load_topology(spec)
    rows, _, schedules = run_all(topology, list(Kind), SIZE_BYTES, include_slow=False, keep_going=True)
    assert rows
    for row in rows:
        schedule = schedules[(row.algorithm, row.collective, row.size)]
        (again,) = evaluate_sizes(schedule, topology, [row.size])
        assert again.time_s == row.time_s and again.plan == row.plan


def test_tune_winner_times_are_compare_times():
    topology = load_topology("switch:n=8")
    result = tune(topology, Kind.ALLREDUCE, SIZE_BYTES, algorithms=["ring", "rhd", "tree"], variants={})
    rows, _, _ = run_all(topology, [Kind.ALLREDUCE], SIZE_BYTES, algorithms=["ring", "rhd", "tree", "nccl"])
    by_key = {(r.algorithm, r.size): r for r in rows}
    for row in result.per_size:
        assert by_key[(row.winner, row.size)].time_s == row.time_s
        assert by_key[(row.winner, row.size)].plan == row.plan
