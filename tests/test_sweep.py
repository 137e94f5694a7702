"""Design-space sweeps: spec parsing, the per-point task, the Dask driver, resume, kill safety, and a
sweep against a separately started ``dask scheduler`` / ``dask worker`` on loopback."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.algorithms import REGISTRY, Algorithm
from synth.collectives import Kind
from synth.errors import InputError, LimitError, NotApplicable
from synth.sweep import (
    ERROR,
    EVALUATOR_VERSION,
    NOT_APPLICABLE,
    OK,
    load_spec,
    parse_spec,
    point_id,
    read_results,
    run_point,
    run_sweep,
    write_results,
)

BIN = Path(sys.executable).parent
CORE_ALGORITHMS = ["ring", "direct", "binomial"]

SMALL = {"topology": "switch", "grid": {"n": [4, 6], "bandwidth": [25, 50.5]},
         "collectives": ["allgather", "allreduce", "alltoall", "broadcast"], "algorithms": CORE_ALGORITHMS,
         "sizes": ["64KiB", "16MiB"]}


def comparable(rows):
    """Rows without the wall-clock column, which is the only one allowed to differ between runs."""
    return [{k: v for k, v in row.items() if k != "synthesis_s"} for row in rows]


def serial_rows(sweep):
    """The reference: every point computed in this process, one after another, in grid order."""
    return [row for point in sweep.points for row in run_point(point, sweep.sizes)]


def write_spec(folder: Path, data: dict, name: str = "spec.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------------------------------- the spec
def test_grid_expands_in_order_and_pairs_only_supported_algorithms():
    sweep = parse_spec(SMALL)
    # 2 n x 2 bandwidths x (allgather: ring, direct; allreduce: ring; alltoall: direct; broadcast: binomial)
    assert len(sweep.points) == 2 * 2 * 5
    assert sweep.parameters == ("n", "bandwidth")
    first = sweep.points[:5]
    assert [(p.collective, p.algorithm) for p in first] == [
        ("allgather", "ring"), ("allgather", "direct"), ("allreduce", "ring"), ("alltoall", "direct"),
        ("broadcast", "binomial")]
    assert all(p.params == {"n": 4, "bandwidth": 25} for p in first)
    assert sweep.points[-1].params == {"n": 6, "bandwidth": 50.5}
    assert [p.index for p in sweep.points] == list(range(20))
    assert len({p.point_id for p in sweep.points}) == 20
    assert sweep.sizes == (64 * 1024, 16 * 2**20)


def test_point_id_is_stable_across_runs_and_versions():
    # A fixed value: changing the id scheme silently would make every resume recompute everything. It
    # changes on purpose with EVALUATOR_VERSION (times of an older evaluator must not be resumed).
    assert EVALUATOR_VERSION == 3
    assert point_id("ring", {"n": 4}, "allgather", "ring", {}, "flow") == "ac722e5b1159283f"
    assert point_id("ring", {"n": 4}, "allgather", "ring", {}, "flow", {"protocol": "LL"}) != "ac722e5b1159283f"
    pid = point_id("ring", {"n": 4, "bandwidth": 25.0}, "allgather", "ring", {"chunks": 8}, "flow")
    assert pid == point_id("ring", {"bandwidth": 25.0, "n": 4}, "allgather", "ring", {"chunks": 8}, "flow")
    assert pid != point_id("ring", {"n": 4, "bandwidth": 25.0}, "allgather", "ring", {"chunks": 4}, "flow")
    assert len(pid) == 16 and int(pid, 16) >= 0


def test_ranges_are_exact_and_inclusive():
    sweep = parse_spec({"topology": "ring", "grid": {"n": {"from": 2, "to": 16, "times": 2},
                                                     "bandwidth": {"from": 0.1, "to": 0.3, "step": 0.1}},
                        "collectives": ["allgather"], "algorithms": ["ring"],
                        "sizes": {"from": "1KiB", "to": "1MiB", "times": 32}})
    assert sorted({p.params["n"] for p in sweep.points}) == [2, 4, 8, 16]
    assert sorted({p.params["bandwidth"] for p in sweep.points}) == [0.1, 0.2, 0.3]
    assert sweep.sizes == (1024, 32 * 1024, 1024 * 1024)


def test_scalars_are_fixed_and_int_lists_are_tuples(tmp_path):
    sweep = parse_spec({"topology": "torus", "grid": {"dims": ["2x2", [2, 3]], "bandwidth": 25},
                        "collectives": ["ag"], "algorithms": ["ring"], "sizes": "1MiB"})
    assert [p.params for p in sweep.points] == [{"dims": (2, 2), "bandwidth": 25}, {"dims": (2, 3), "bandwidth": 25}]
    run_sweep(sweep, tmp_path / "r.parquet", workers=1)
    rows = read_results(tmp_path / "r.parquet")
    assert [(r["dims"], r["bandwidth"], r["num_ranks"], r["status"]) for r in rows] == [
        ("2x2", 25, 4, OK), ("2x3", 25, 6, OK)]


def test_a_spec_sweeps_the_users_topology_files_and_library_specs(tmp_path):
    """``topology`` may list fixed topologies: files (relative to the spec's folder) and library specs; each
    runs every (collective, algorithm) and gives what ``evaluate`` gives on the same topology; editing a
    file gives its points new ids, so a resumed sweep reruns them."""
    from synth.choose import synthesize
    from synth.evaluate import evaluate
    from synth.library import load_topology
    from synth.topology import Topology

    (tmp_path / "fabrics").mkdir()
    mine = load_topology("ring:n=4").to_dict()
    mine["name"] = "my-ring"
    mine.pop("dimensions", None)  # a link is edited below
    (tmp_path / "fabrics" / "mine.json").write_text(json.dumps(mine))
    data = {"topology": ["fabrics/mine.json", "switch:n=4"], "collectives": ["allgather"],
            "algorithms": ["ring", "direct"], "sizes": ["1MiB"]}
    sweep = load_spec(write_spec(tmp_path, data))
    assert [(p.topology, p.algorithm) for p in sweep.points] == [
        ("fabrics/mine.json", "ring"), ("fabrics/mine.json", "direct"), ("switch:n=4", "ring"),
        ("switch:n=4", "direct")]
    assert sweep.parameters == ()
    run_sweep(sweep, tmp_path / "r.parquet", workers=1)
    rows = read_results(tmp_path / "r.parquet")
    assert [r["status"] for r in rows] == [OK] * 4
    topology = Topology.from_dict(mine)
    expected = evaluate(synthesize(topology, "allgather", "ring"), topology, 2**20).time_s
    assert rows[0]["topology"] == "fabrics/mine.json" and rows[0]["time_s"] == expected
    mine["links"][0]["bandwidth"] = 1.0
    (tmp_path / "fabrics" / "mine.json").write_text(json.dumps(mine))
    edited = load_spec(write_spec(tmp_path, data))
    assert edited.points[0].point_id != sweep.points[0].point_id
    assert edited.points[2].point_id == sweep.points[2].point_id
    real = load_spec(write_spec(tmp_path, {**data, "topology": ["fabrics/mine.json@achievable"]}))
    rows, line_rows = run_point(real.points[0], real.sizes), run_point(edited.points[0], edited.sizes)
    assert rows[0]["status"] == OK and rows[0]["topology"] == "fabrics/mine.json@achievable"
    assert rows[0]["time_s"] > line_rows[0]["time_s"] * 1.05  # the same file's ring at achievable rates


@pytest.mark.parametrize("change, field, words", [
    ({"topolgy": "ring"}, "topolgy", "unknown field"),
    ({"topology": "nosuch"}, "topology", "neither a file nor a library name"),
    ({"topology": "dgx-a100:boxes=2"}, "grid", "the topology 'dgx-a100:boxes=2' is fixed"),
    ({"topology": ["ring:n=4", "nosuch.yaml"], "grid": {}}, "topology.1", "no such topology file"),
    ({"topology": ["ring:n=4", "ring:n=4"], "grid": {}}, "topology", "listed twice"),
    ({"topology": [], "grid": {}}, "topology", "at least one topology"),
    ({"grid": {"boxes": [1, 2]}}, "grid.boxes", "has no parameter 'boxes'"),
    ({"grid": {"n": [4, 4]}}, "grid.n.1", "duplicate value"),
    ({"grid": {"n": []}}, "grid.n", "at least one value"),
    ({"grid": {"n": {"from": 8, "to": 4}}}, "grid.n", "empty range"),
    ({"grid": {"n": {"from": 4, "to": 8, "step": 0}}}, "grid.n.step", "positive step"),
    ({"grid": {"n": {"start": 4}}}, "grid.n", "{from, to, step}"),
    ({"grid": {"n": [None]}}, "grid.n.0", "expected a number"),
    ({"collectives": ["allgatherr"]}, "collectives.0", "unknown collective"),
    ({"collectives": ["ag", "allgather"]}, "collectives.1", "duplicate collective"),
    ({"algorithms": ["nosuch"]}, "algorithms.0", "unknown algorithm"),
    ({"algorithms": ["binomial"]}, "algorithms", "no listed algorithm does allgather"),
    ({"sizes": ["1 parsec"]}, "sizes.0", "expected a size"),
    ({"sizes": ["1MiB", "1048576"]}, "sizes", "duplicate size"),
    ({"model": "nosuch"}, "model", "unknown evaluator model"),
    ({"options": {"nosuch": {}}}, "options.nosuch", "unknown algorithm"),
])
def test_bad_specs_name_the_file_and_field(tmp_path, change, field, words):
    data = {"topology": "ring", "grid": {"n": [4]}, "collectives": ["allgather"], "algorithms": ["ring"],
            "sizes": ["1MiB"]}
    data.update(change)
    if "topolgy" in change:
        data.pop("topology")
    path = write_spec(tmp_path, data)
    with pytest.raises(InputError) as caught:
        load_spec(path)
    assert caught.value.source == str(path)
    assert caught.value.field == field
    assert words in caught.value.problem


def test_huge_grids_are_refused_before_running():
    with pytest.raises(LimitError, match="more than the limit"):
        parse_spec({"topology": "ring", "grid": {"n": {"from": 2, "to": 2000}, "bandwidth": {"from": 1, "to": 1000}},
                    "collectives": ["allgather"], "algorithms": ["ring"], "sizes": ["1MiB"]})


def test_spec_file_errors_are_input_errors(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("topology: [unclosed\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_spec(path)
    with pytest.raises(InputError, match="expected a mapping"):
        parse_spec(["not", "a", "mapping"], source="x.yaml")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(builder=st.sampled_from(["ring", "switch", "fully-connected"]),
       ns=st.lists(st.integers(2, 7), min_size=1, max_size=3, unique=True),
       bandwidths=st.lists(st.sampled_from([1.0, 12.5, 25, 50, 100.0]), min_size=1, max_size=2, unique=True),
       kinds=st.lists(st.sampled_from(["allgather", "reducescatter", "allreduce", "alltoall", "reduce"]),
                      min_size=1, max_size=3, unique=True))
def test_random_grids_run_and_every_ok_row_is_consistent(builder, ns, bandwidths, kinds):
    sweep = parse_spec({"topology": builder, "grid": {"n": ns, "bandwidth": bandwidths}, "collectives": kinds,
                        "algorithms": CORE_ALGORITHMS, "sizes": ["1MiB", "256MiB"]})
    assert len({p.point_id for p in sweep.points}) == len(sweep.points)
    for point in sweep.points:
        rows = run_point(point, sweep.sizes)  # synthesizes, verifies exactly, evaluates
        assert [r["size"] for r in rows] == list(sweep.sizes)
        for row in rows:
            assert row["status"] == OK, row["error"]
            assert row["num_ranks"] == point.params["n"]
            # The flow simulation can never beat the congestion bound of the same schedule.
            assert row["time_s"] >= row["congestion_time_s"] * (1 - 1e-9) > 0
            assert row["algbw_GBps"] == pytest.approx(row["size"] / row["time_s"] / 1e9)


# ---------------------------------------------------------------------------------- one point's task
def test_bad_parameter_values_and_failures_become_rows(monkeypatch):
    sweep = parse_spec({"topology": "ring", "grid": {"n": [1, 4]}, "collectives": ["allgather"],
                        "algorithms": ["ring"], "sizes": ["1MiB", "2MiB"], "options": {"ring": {"chunks": 3}}})
    bad_n, bad_chunks = (run_point(p, sweep.sizes) for p in sweep.points)
    assert [r["status"] for r in bad_n] == [ERROR, ERROR]
    assert "n must be at least 2" in bad_n[0]["error"] and bad_n[0]["num_ranks"] is None
    assert [r["status"] for r in bad_chunks] == [ERROR, ERROR]
    assert "chunks" in bad_chunks[0]["error"] and bad_chunks[0]["num_ranks"] == 4
    assert bad_chunks[0]["time_s"] is None


def never(topology, kind, **options):
    raise NotApplicable("needs a torus")


def test_not_applicable_is_its_own_status(monkeypatch):
    monkeypatch.setitem(REGISTRY, "never", Algorithm("never", "tests.test_sweep:never",
                                                     frozenset({Kind.ALLGATHER}), "test"))
    sweep = parse_spec({"topology": "ring", "grid": {"n": [4]}, "collectives": ["allgather"],
                        "algorithms": ["never"], "sizes": ["1MiB"]})
    [row] = run_point(sweep.points[0], sweep.sizes)
    assert row["status"] == NOT_APPLICABLE and row["error"] == "needs a torus" and row["num_ranks"] == 4


# ------------------------------------------------------------------------------- driver and resume
def test_serial_sweep_writes_rows_in_grid_order_and_resumes(tmp_path):
    sweep = parse_spec(SMALL)
    output = tmp_path / "r.parquet"
    first = run_sweep(sweep, output, workers=1)
    assert (first.ran, first.ok, first.failed, first.rows, first.runner) == (20, 20, 0, 40, "synchronous")
    rows = read_results(output)
    assert comparable(rows) == comparable(serial_rows(sweep))
    assert pq.read_schema(output).names[:4] == ["point_id", "topology", "n", "bandwidth"]
    again = run_sweep(sweep, output, workers=1)
    assert (again.already_done, again.ran) == (20, 0)
    assert read_results(output) == rows  # untouched, timing column included

    # Grow the grid and the sizes: only the missing (point, size) cells run; the result equals a fresh run.
    bigger = parse_spec({**SMALL, "grid": {"n": [4, 6, 8], "bandwidth": [25, 50.5]},
                         "sizes": ["64KiB", "16MiB", "4MiB"]})
    grown = run_sweep(bigger, output, workers=1)
    assert grown.already_done == 0 and grown.ran == 30  # every point lacked the new size
    merged = read_results(output)
    assert comparable(merged) == comparable(serial_rows(bigger))
    kept = {(r["point_id"], r["size"]): r["synthesis_s"] for r in rows}
    assert all(r["synthesis_s"] == kept[(r["point_id"], r["size"])] for r in merged
               if (r["point_id"], r["size"]) in kept)


def test_failed_points_are_kept_and_retried_only_on_request(tmp_path):
    data = {"topology": "ring", "grid": {"n": [1, 4]}, "collectives": ["allgather"], "algorithms": ["ring"],
            "sizes": ["1MiB"]}
    output = tmp_path / "r.parquet"
    summary = run_sweep(parse_spec(data), output, workers=1)
    assert (summary.ok, summary.failed) == (1, 1)
    assert run_sweep(parse_spec(data), output, workers=1).ran == 0
    retried = run_sweep(parse_spec(data), output, workers=1, retry_errors=True)
    assert (retried.ran, retried.failed) == (1, 1)
    assert [r["status"] for r in read_results(output)] == [ERROR, OK]


def test_rows_of_other_specs_are_kept_after_the_current_ones(tmp_path):
    output = tmp_path / "r.parquet"
    other = parse_spec({"topology": "ring", "grid": {"n": [5]}, "collectives": ["allgather"],
                        "algorithms": ["ring"], "sizes": ["1MiB"]})
    run_sweep(other, output, workers=1)
    current = parse_spec({"topology": "switch", "grid": {"n": [4]}, "collectives": ["allreduce"],
                          "algorithms": ["ring"], "sizes": ["1MiB"]})
    run_sweep(current, output, workers=1)
    rows = read_results(output)
    assert [(r["topology"], r["n"]) for r in rows] == [("switch", 4), ("ring", 5)]


def test_same_rows_give_the_same_bytes(tmp_path):
    rows = serial_rows(parse_spec(SMALL))
    write_results(tmp_path / "a.parquet", rows, ("n", "bandwidth"))
    write_results(tmp_path / "b.parquet", rows, ("n", "bandwidth"))
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_a_foreign_output_file_is_refused_not_overwritten(tmp_path):
    output = tmp_path / "r.parquet"
    output.write_text("not parquet")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        run_sweep(parse_spec(SMALL), output, workers=1)
    assert output.read_text() == "not parquet"


def test_two_sweeps_never_write_one_output(tmp_path):
    output = tmp_path / "r.parquet"
    with open(tmp_path / ".r.parquet.lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(InputError, match="another sweep"):
            run_sweep(parse_spec(SMALL), output, workers=1)
    assert not output.exists()


def test_workers_and_scheduler_are_exclusive(tmp_path):
    with pytest.raises(InputError, match="external scheduler"):
        run_sweep(parse_spec(SMALL), tmp_path / "r.parquet", scheduler="tcp://127.0.0.1:1", workers=2)


def test_local_cluster_with_two_processes_matches_serial(tmp_path):
    sweep = parse_spec({**SMALL, "grid": {"n": [4, 6, 8], "bandwidth": [25, 50.5]}})
    seen = []
    summary = run_sweep(sweep, tmp_path / "r.parquet", workers=2, progress=lambda c: seen.append(c.done))
    assert (summary.runner, summary.workers, summary.ran, summary.ok) == ("local", 2, 30, 30)
    assert seen == list(range(1, 31))
    assert comparable(read_results(tmp_path / "r.parquet")) == comparable(serial_rows(sweep))


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(InputError, match="cannot reach a Dask scheduler"):
        run_sweep(parse_spec(SMALL), tmp_path / "r.parquet", scheduler=f"tcp://127.0.0.1:{port}",
                  connect_timeout=2)


# ------------------------------------------------------------------------- the command, kill, resume
KILL_SPEC = {"topology": "switch", "grid": {"n": {"from": 8, "to": 28, "step": 4}, "bandwidth": [25, 50]},
             "collectives": ["allgather", "allreduce", "alltoall"], "algorithms": ["ring", "direct"],
             "sizes": ["1MiB", "64MiB"]}


def synth_command(*args: str) -> list[str]:
    return [str(BIN / "synth"), *args]


def stop_group(process: subprocess.Popen) -> None:
    """Kill a process group this test started (the process and any children) and reap the leader."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=30)


def wait_for_partial(output: Path, total: int, process: subprocess.Popen, limit: float = 60) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if output.exists():
            count = pq.read_metadata(output).num_rows  # always a whole file: writes are atomic renames
            if count:
                return count
        if process.poll() is not None:
            pytest.fail(f"the sweep ended before it was killed: {process.stderr.read()}")
        time.sleep(0.02)
    pytest.fail("no partial output within the time limit")


@pytest.mark.parametrize("kill, workers", [(signal.SIGKILL, "1"), (signal.SIGTERM, "2")])
@pytest.mark.slow
def test_a_killed_sweep_keeps_flushed_rows_and_resumes_to_the_same_rows(tmp_path, kill, workers):
    """SIGKILL: no chance to clean up, the last atomic flush must be intact. SIGTERM (on a LocalCluster):
    the sweep flushes what finished, shuts its workers down and exits 130."""
    spec = write_spec(tmp_path, KILL_SPEC)
    sweep = load_spec(spec)
    total = len(sweep.points) * len(sweep.sizes)
    output = tmp_path / "r.parquet"
    process = subprocess.Popen(synth_command("sweep", str(spec), "-o", str(output), "--workers", workers,
                                             "--flush-points", "1", "--json"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_partial(output, total, process)
        process.send_signal(kill)
        process.wait(timeout=30)
    finally:
        stop_group(process)
    if kill == signal.SIGTERM:
        errors = process.stderr.read()
        assert process.returncode == 130, errors
        assert "run the same command again to resume" in errors and "Traceback" not in errors
    partial = read_results(output)
    assert 0 < len(partial) < total
    reference = {(r["point_id"], r["size"]): r for r in comparable(serial_rows(sweep))}
    assert all(reference[(r["point_id"], r["size"])] == r for r in comparable(partial))

    resumed = subprocess.run(synth_command("sweep", str(spec), "-o", str(output), "--workers", "1", "--json"),
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["already_done"] == len(partial) // len(sweep.sizes)
    assert summary["ran"] == len(sweep.points) - summary["already_done"]
    assert comparable(read_results(output)) == list(reference.values())
    assert not list(tmp_path.glob(".r.parquet*"))  # no temp or lock files left behind


def test_command_reports_bad_specs_in_one_line(tmp_path):
    spec = write_spec(tmp_path, {"topology": "ring", "grid": {"m": [4]}, "collectives": ["allgather"],
                                 "sizes": ["1MiB"]})
    result = subprocess.run(synth_command("sweep", str(spec), "-o", str(tmp_path / "r.parquet")),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {spec}: grid.m: ring has no parameter 'm'; it takes n, bandwidth, latency"
    assert not (tmp_path / "r.parquet").exists()


@pytest.mark.skipif(not (BIN / "dask").exists(), reason="the dask command is not installed in this environment")
@pytest.mark.slow
def test_same_spec_runs_unchanged_on_a_separately_started_scheduler(tmp_path):
    spec = write_spec(tmp_path, SMALL)
    scheduler_file = tmp_path / "scheduler.json"
    started: list[subprocess.Popen] = []
    logs = tmp_path / "dask.log"
    try:
        with open(logs, "w") as log:
            started.append(subprocess.Popen(
                [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                 "--scheduler-file", str(scheduler_file), "--idle-timeout", "120s"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path))
            deadline = time.monotonic() + 60
            while not scheduler_file.exists() or not scheduler_file.read_text().strip():
                assert time.monotonic() < deadline, logs.read_text()
                assert started[0].poll() is None, logs.read_text()
                time.sleep(0.1)
            address = json.loads(scheduler_file.read_text())["address"]
            assert address.startswith("tcp://127.0.0.1:")
            started.append(subprocess.Popen(
                [str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nworkers", "2", "--nthreads", "1",
                 "--no-dashboard", "--death-timeout", "60s"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path))
            output = tmp_path / "r.parquet"
            result = subprocess.run(synth_command("sweep", str(spec), "-o", str(output), "--scheduler", address,
                                                  "--json"), capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr + logs.read_text()
        summary = json.loads(result.stdout)
        assert summary["runner"] == address and summary["workers"] >= 1
        assert (summary["ran"], summary["ok"]) == (20, 20)
        assert comparable(read_results(output)) == comparable(serial_rows(load_spec(spec)))
    finally:
        for process in reversed(started):
            stop_group(process)
