"""The CLI: topologies, show, generate, verify, evaluate, demo, --version; --json outputs parse
and carry the documented fields; user errors exit 2 with one line and no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import INTERRUPTIBLE, assert_refused, run_cli, run_process

import synth
from synth import Schedule, evaluate, load_topology, verify
from synth.library import LIBRARY, TOPOLOGY_DIR

TOPOLOGIES = ["ring:n=4", "dgx-a100:boxes=2", str(TOPOLOGY_DIR / "dgx1.json")]


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    """``cli(*args)`` runs synth in this process from an empty working folder and returns the outcome."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str):
        return run_cli(list(args), capsys, monkeypatch)

    return run


def ok(outcome):
    assert "Traceback" not in outcome.out + outcome.err
    assert outcome.code == 0, outcome.err
    return outcome


def as_json(outcome):
    return json.loads(ok(outcome).out)


# ------------------------------------------------------------------------------------------ basics
def test_version_in_a_real_process():
    outcome = run_process(["--version"])
    assert outcome.code == 0
    assert outcome.out.strip() == f"synth {synth.__version__}"


def test_help_lists_the_core_commands(cli):
    text = ok(cli("--help")).out
    for command in ("topologies", "show", "generate", "verify", "evaluate", "demo"):
        assert command in text


# --------------------------------------------------------------------------------------- topologies
def test_topologies_json_lists_the_whole_library(cli):
    rows = as_json(cli("topologies", "--json"))
    names = [row["name"] for row in rows]
    assert names[:len(LIBRARY)] == list(LIBRARY)  # the builders first, then any shipped files
    for row in rows:
        assert set(row) >= {"name", "parameters", "summary", "shipped"}
        assert isinstance(row["shipped"], bool) and row["summary"]
    assert {"ring", "switch", "dgx-a100"} <= {row["name"] for row in rows}


def test_topologies_table(cli):
    text = ok(cli("topologies")).out
    assert "ring" in text and "dgx-a100" in text


# --------------------------------------------------------------------------------------------- show
@pytest.mark.parametrize("spec", TOPOLOGIES)
def test_show_json(cli, spec):
    summary = as_json(cli("show", spec, "--json"))
    topology = load_topology(spec)
    assert set(summary) >= {"name", "description", "gpus", "switches", "directed_links", "per_gpu"}
    assert summary["gpus"] == topology.num_ranks == len(summary["per_gpu"])
    assert summary["switches"] == len(topology.switches)
    assert summary["directed_links"] == topology.graph.number_of_edges()
    for rank, entry in enumerate(summary["per_gpu"]):
        assert entry["rank"] == rank and entry["gpu"] == topology.gpus[rank]
        assert entry["egress_GBps"] == pytest.approx(topology.egress_bandwidth(entry["gpu"]))
        assert entry["ingress_GBps"] == pytest.approx(topology.ingress_bandwidth(entry["gpu"]))


def test_show_numbers_for_a_ring(cli):
    summary = as_json(cli("show", "ring:n=4,bandwidth=25", "--json"))
    assert (summary["gpus"], summary["switches"], summary["directed_links"]) == (4, 0, 8)
    assert all(entry["egress_GBps"] == 50.0 and entry["ingress_GBps"] == 50.0 for entry in summary["per_gpu"])


def test_show_table(cli):
    text = ok(cli("show", "switch:n=4")).out
    assert "4 gpus, 1 switches" in text and "gpu3" in text


# ---------------------------------------------------------------------------- generate, verify, evaluate
CASES = [("ring:n=4", "allreduce", "ring", []), ("ring:n=4", "allgather", "direct", ["--chunks", "8"]),
         ("dgx-a100:boxes=2", "alltoall", "direct", []), ("dgx-a100:boxes=2", "reducescatter", "ring", []),
         (str(TOPOLOGY_DIR / "dgx1.json"), "broadcast", "binomial", ["--root", "3"]),
         (str(TOPOLOGY_DIR / "dgx1.json"), "reduce", "binomial", ["--root", "5", "-k", "2"])]


@pytest.mark.parametrize("spec,kind,algorithm,extra", CASES)
def test_generate_verify_evaluate(cli, tmp_path, spec, kind, algorithm, extra):
    out = tmp_path / "s.json"
    text = ok(cli("generate", spec, "-c", kind, "-a", algorithm, *extra, "-o", str(out))).out
    assert f"wrote {out}" in " ".join(text.split()) and "verified" in text
    schedule = Schedule.from_file(out)
    topology = load_topology(spec)
    assert schedule.kind == kind and schedule.algorithm == algorithm
    verify(schedule, topology)
    if "--root" in extra:
        assert schedule.collective.root == int(extra[extra.index("--root") + 1])
    if "--chunks" in extra or "-k" in extra:
        flag = "--chunks" if "--chunks" in extra else "-k"
        assert schedule.chunks == int(extra[extra.index(flag) + 1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"], "temporary files left behind"

    topo_args = [] if spec.startswith("ring") or spec.startswith("dgx-a100") else ["--topology", spec]
    report = as_json(cli("verify", str(out), *topo_args, "--json"))
    assert report == {"ok": True, "transfers": len(schedule.transfers), "depth": report["depth"],
                      "max_chunks_on_a_link": report["max_chunks_on_a_link"]}
    assert report["depth"] == verify(schedule, topology).depth
    assert "OK:" in ok(cli("verify", str(out), *topo_args)).out

    records = as_json(cli("evaluate", str(out), *topo_args, "-s", "1KiB", "--size", "1MB", "-s", "1GiB", "--json"))
    assert [r["size"] for r in records] == [1024, 10**6, 2**30]
    for record in records:
        assert set(record) >= {"size", "time_s", "algbw_GBps", "busbw_GBps", "congestion_time_s", "model"}
        assert record["model"] == "flow"
        expected = evaluate(schedule, topology, record["size"])
        assert record["time_s"] == pytest.approx(expected.time_s, rel=1e-12)
        assert record["algbw_GBps"] == pytest.approx(record["size"] / record["time_s"] / 1e9, rel=1e-12)
        assert record["time_s"] >= record["congestion_time_s"] > 0
    table = ok(cli("evaluate", str(out), *topo_args, "-s", "64MiB")).out
    assert "64MiB" in table and "busiest links" in table


def test_evaluate_plan_options(cli, tmp_path):
    out = tmp_path / "b.json"
    ok(cli("generate", "switch:n=8", "-c", "broadcast", "-a", "binomial", "-o", str(out)))
    one, four = (as_json(cli("evaluate", str(out), "-s", "1GiB", "--protocol", "ideal", "--slices", p, "--json"))[0]
                 for p in ("1", "4"))
    assert (one["slices"], four["slices"]) == (1, 4) and four["time_s"] < one["time_s"]
    assert one["protocol"] == four["protocol"] == "ideal"
    auto = as_json(cli("evaluate", str(out), "-s", "1KiB", "-s", "1GiB", "--json"))
    assert [r["protocol"] for r in auto] == ["LL", "Simple"]
    assert auto[1]["slices"] == 2**30 // 512 // 1024 and auto[1]["window"] == 8
    table = ok(cli("evaluate", str(out), "-s", "1GiB", "--slice-bytes", "1MiB", "--window", "4")).out
    assert "1024 slices of 1 MiB per chunk, 4 in flight" in table


def test_generate_algorithm_options(cli, tmp_path):
    out = tmp_path / "r.json"
    ok(cli("generate", "ring:n=4", "-c", "allgather", "-a", "ring", "-O", "reverse=true", "-o", str(out)))
    schedule = Schedule.from_file(out)
    assert schedule.params["order"] == [3, 2, 1, 0]


def test_generate_default_output_in_the_working_folder(cli, tmp_path):
    ok(cli("generate", "ring:n=4", "-c", "allgather"))
    assert (tmp_path / "schedule.json").is_file()


def test_generate_is_deterministic(cli, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for target in (first, second):
        ok(cli("generate", "dgx-a100:boxes=2", "-c", "allreduce", "-a", "ring", "-o", str(target)))
    assert first.read_bytes() == second.read_bytes()


# --------------------------------------------------------------------------------------------- demo
@pytest.mark.parametrize("spec", ["ring:n=4", "switch:n=6"])
@pytest.mark.slow
def test_demo_json(cli, spec):
    result = as_json(cli("demo", "--topology", spec, "-s", "1MiB", "-s", "16MiB", "--json"))
    assert set(result) >= {"topology", "rows", "skipped"}
    rows = result["rows"]
    assert rows, "the demo ran nothing"
    kinds = {row["collective"] for row in rows}
    assert {"allgather", "reducescatter", "allreduce", "alltoall"} <= kinds
    for row in rows:
        assert set(row) >= {"algorithm", "collective", "size", "time_s", "algbw_GBps", "busbw_GBps",
                            "congestion_time_s"}
        assert row["size"] in (2**20, 2**24)
        assert row["time_s"] >= row["congestion_time_s"] * (1 - 1e-12)
    for skipped in result["skipped"]:
        assert skipped["reason"]


def test_demo_lists_a_refusing_algorithm_as_skipped_and_goes_on(cli, monkeypatch):
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", "20")  # nccl and forest refuse their schedules: the demo still runs
    result = as_json(cli("demo", "--topology", "ring:n=4", "-s", "1MiB", "--json"))
    assert {row["algorithm"] for row in result["rows"]} >= {"ring", "direct"}
    refused = {(s["algorithm"], s["collective"]) for s in result["skipped"] if "LimitError" in s["reason"]}
    assert ("nccl", "allgather") in refused and ("forest", "allgather") in refused
    assert not refused & {(row["algorithm"], row["collective"]) for row in result["rows"]}
    reasons = [s["reason"] for s in result["skipped"] if s["algorithm"] in ("nccl", "forest")]
    assert reasons and all("transfers" in reason or "LimitError" not in reason for reason in reasons)


def test_demo_table(cli):
    text = ok(cli("demo", "--topology", "ring:n=4", "-s", "1MiB")).out
    assert "ring" in text and "allreduce" in text and "1MiB" in text


# ------------------------------------------------------------------------------------------- errors
ERRORS = [
    (["show", "no-such-topology"], "no-such-topology", "neither a file nor a library name"),
    (["show", "ring:n=4,colour=red"], "colour", "has no parameter"),
    (["generate", "ring:n=4", "-c", "gather"], "gather", "unknown collective"),
    (["generate", "ring:n=4", "-c", "allgather", "-a", "nope"], "nope", "unknown algorithm"),
    (["generate", "ring:n=4", "-c", "alltoall", "-a", "ring"], "ring", "does not do alltoall"),
    (["generate", "ring:n=4", "-c", "allgather", "-k", "3"], "chunks", "multiple of"),
    (["generate", "ring:n=4", "-c", "broadcast", "-a", "binomial", "--root", "9"], "root", "0..3"),
    (["generate", "ring:n=4", "-c", "allgather", "-O", "novalue"], "--option", "key=value"),
    (["evaluate", "missing.json"], "missing.json", "no such file"),
]


@pytest.mark.parametrize("args,named,expect", ERRORS, ids=[" ".join(e[0][:3]) for e in ERRORS])
def test_user_errors_are_one_line_with_exit_code_2(cli, tmp_path, args, named, expect):
    assert_refused(cli(*args), named, expect)
    assert not any(tmp_path.iterdir()), "an error left a file behind"


def test_bad_sizes_and_models(cli, tmp_path):
    out = tmp_path / "s.json"
    ok(cli("generate", "ring:n=4", "-c", "allgather", "-o", str(out)))
    assert_refused(cli("evaluate", str(out), "-s", "1XB"), "--size", "expected a size")
    assert_refused(cli("evaluate", str(out), "-s", "0"), "--size", "positive")
    assert_refused(cli("evaluate", str(out), "-m", "warp"), "model", "unknown evaluator model 'warp'")
    assert_refused(cli("evaluate", str(out), "--slices", "0"), "--slices", "1..")
    assert_refused(cli("evaluate", str(out), "--window", "0"), "--window", "1..")
    assert_refused(cli("evaluate", str(out), "--protocol", "fast"), "--protocol", "unknown protocol 'fast'")
    assert_refused(cli("evaluate", str(out), "--slice-bytes", "0"), "--slice-bytes", "positive")


def test_verify_on_the_wrong_topology_names_the_file(cli, tmp_path):
    out = tmp_path / "s.json"
    ok(cli("generate", "ring:n=4", "-c", "allgather", "-o", str(out)))
    # the schedule records its topology's fingerprint: another topology is refused before verifying
    line = assert_refused(cli("verify", str(out), "--topology", "switch:n=4"), str(out), "different topology")
    # without the fingerprint (a schedule from elsewhere) the verifier says what is wrong
    data = json.loads(out.read_text())
    del data["topology_sha256"]
    out.write_text(json.dumps(data))
    line = assert_refused(cli("verify", str(out), "--topology", "switch:n=4"), str(out), "transfer 0:")
    assert "not a link" in line


@pytest.mark.parametrize("args,expect", [
    (["generate", "ring:n=4"], "--collective"),  # a required option missing
    (["generate", "ring:n=4", "-c", "allgather", "--chunks", "x"], "--chunks"),  # not an integer
    (["no-such-command"], "No such command"),
    (["evaluate"], "SCHEDULE"),
])
def test_usage_errors_exit_2_without_a_traceback(args, expect, tmp_path):
    outcome = run_process(args, cwd=tmp_path)
    assert outcome.code == 2, outcome.err
    assert "Traceback" not in outcome.out + outcome.err
    assert expect in outcome.err


def test_errors_in_a_real_process(tmp_path):
    outcome = run_process(["show", "ring:n=1"], cwd=tmp_path)
    assert_refused(outcome, "ring", "n must be at least 2")
    outcome = run_process(["generate", "ring:n=4", "-c", "allgather", "-o", str(tmp_path / "no" / "x.json")])
    assert_refused(outcome, str(tmp_path / "no" / "x.json"), "does not exist")


def test_json_outputs_are_pure_json(cli, tmp_path):
    # nothing but the JSON document on stdout, so scripts can pipe it
    out = tmp_path / "s.json"
    ok(cli("generate", "ring:n=4", "-c", "allgather", "-o", str(out)))
    for args in (["topologies", "--json"], ["show", "ring:n=4", "--json"], ["verify", str(out), "--json"],
                 ["evaluate", str(out), "--json"]):
        text = ok(cli(*args)).out
        json.loads(text)
        assert text.lstrip()[0] in "[{"


def test_paths_relative_to_the_working_folder(cli, tmp_path):
    # a topology file given by a relative path
    (tmp_path / "pair.json").write_text(json.dumps({
        "name": "pair", "nodes": [{"id": "a", "type": "gpu"}, {"id": "b", "type": "gpu"}],
        "links": [{"src": "a", "dst": "b", "bandwidth": 10}]}))
    ok(cli("generate", "pair.json", "-c", "allreduce", "-o", "out.json"))
    records = as_json(cli("evaluate", "out.json", "--topology", "pair.json", "-s", "1GB", "--protocol", "ideal",
                          "--slices", "1", "--json"))
    # two ranks, one link each way at 10 GB/s: reduce-scatter then allgather of half the data each
    assert records[0]["time_s"] == pytest.approx(2 * 0.5e9 / 10e9, rel=1e-9)
    assert Path("out.json").is_file()


# --------------------------------------------------------------------------------------- interrupts
def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see when the command is busy")
def test_ctrl_c_during_generate_leaves_no_file_and_says_what_it_was_doing(tmp_path):
    # a ring allreduce with 800k transfers takes several seconds to build; interrupt it once the process
    # has used 2.5 s of CPU (imports take under 1 s), i.e. while it is synthesizing
    from helpers import SYNTH

    args = [str(SYNTH), "generate", "ring:n=64", "-c", "allreduce", "-k", "6400", "-o", "big.json"]
    process = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               **INTERRUPTIBLE)
    deadline = time.monotonic() + 120
    while process.poll() is None and _cpu_seconds(process.pid) < 2.5 and time.monotonic() < deadline:
        time.sleep(0.05)
    if process.poll() is not None:
        pytest.skip("the command finished before it could be interrupted (machine too fast)")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in out + err
    assert err.strip() == ("interrupted while running `synth generate ring:n=64 -c allreduce -k 6400 -o big.json`:"
                           " no partial output was written")
    assert list(tmp_path.iterdir()) == [], "an interrupted run left files behind"


def test_atomic_write_interrupted_keeps_the_old_file(tmp_path, monkeypatch):
    from synth import fileio

    target = tmp_path / "s.json"
    target.write_text("old")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fileio.atomic_write_text(target, "new" * 10**6)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"], "the temporary file was left behind"
    monkeypatch.undo()
    fileio.atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_atomic_directory_interrupted_leaves_nothing(tmp_path):
    from synth.fileio import atomic_directory

    target = tmp_path / "et"
    with pytest.raises(KeyboardInterrupt), atomic_directory(target) as folder:
        (folder / "a.0.et").write_bytes(b"x" * 1000)
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with atomic_directory(target) as folder:
        (folder / "a.0.et").write_bytes(b"ok")
    assert [p.name for p in tmp_path.iterdir()] == ["et"] and (target / "a.0.et").read_bytes() == b"ok"
