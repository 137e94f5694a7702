"""The per-size tuner: the library function, the runtime table, the plot and ``synth tune``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from synth.algorithms import available
from synth.cli import app
from synth.collectives import Kind
from synth.library import load_topology
from synth.tune import DEFAULT_SIZES, FORMAT, boundary, candidates, tune

runner = CliRunner()
SMALL_SIZES = [1024, 65536, 2**22, 2**26]


def test_default_sizes_are_1kib_to_4gib_in_powers_of_4():
    assert DEFAULT_SIZES[0] == 1024 and DEFAULT_SIZES[-1] == 4 * 2**30
    assert all(b == 4 * a for a, b in zip(DEFAULT_SIZES, DEFAULT_SIZES[1:], strict=False))


def test_ranking_and_ranges():
    result = tune(load_topology("switch:n=8"), Kind.ALLREDUCE, SMALL_SIZES, include_slow=False)
    labels = [c.label for c in result.candidates]
    assert {"ring", "tree", "tree[shape=binomial]", "rhd", "multidim"} <= set(labels)
    assert "hierarchical" in [s.algorithm for s in result.skipped]
    for index, row in enumerate(result.per_size):
        times = sorted(result.times_s[label][index] for label in labels)
        assert row.time_s == times[0] and row.runner_up_time_s == times[1]
        assert row.runner_up != row.winner
        assert 0 < row.percent_of_bound <= 100 + 1e-6
    ranges = result.ranges()
    assert ranges[0]["min_bytes"] == 0 and ranges[-1]["max_bytes"] is None
    for a, b in zip(ranges, ranges[1:], strict=False):
        assert a["max_bytes"] == b["min_bytes"]
        assert (a["candidate"], a["protocol"], a["options"]) != (b["candidate"], b["protocol"], b["options"])
    # every measured size falls in the range of its winner
    for row in result.per_size:
        (hit,) = [r for r in ranges if r["min_bytes"] <= row.size and (r["max_bytes"] is None or row.size < r["max_bytes"])]
        assert hit["candidate"] == row.winner and hit["protocol"] == row.plan.protocol.value


def test_small_messages_go_to_log_depth_and_large_to_bandwidth_optimal():
    result = tune(load_topology("switch:n=16"), Kind.ALLREDUCE, [1024, 2**26], algorithms=["ring", "tree", "rhd"])
    small, large = result.per_size
    assert small.winner in ("tree", "tree[shape=binomial]", "rhd")
    assert large.winner in ("ring", "rhd", "nccl") and large.percent_of_bound > 99  # nccl: its rings


def test_candidates_merge_options_and_time_limits():
    chosen = candidates(Kind.ALLREDUCE, algorithms=["tree"], options={"tree": {"chunks": 8}})
    assert [(c.label, dict(c.options)) for c in chosen] == [
        ("tree", {"chunks": 8}), ("tree[shape=binomial]", {"shape": "binomial", "chunks": 8})]
    chosen = candidates(Kind.ALLTOALL, algorithms=["mcf", "bruck"], time_limit_s=3.0)
    assert {c.label: dict(c.options) for c in chosen} == {"bruck": {}, "mcf": {"time_limit_s": 3.0}}


def test_every_registered_algorithm_is_a_candidate():
    """forest, mcf and milp included when registered (milp is slow: left out only on request)."""
    for kind in (Kind.ALLGATHER, Kind.ALLREDUCE, Kind.ALLTOALL):
        names = {c.algorithm for c in candidates(kind, time_limit_s=2.0)}
        assert names == {a.name for a in available(kind)}
        for c in candidates(kind, time_limit_s=2.0):
            if c.algorithm in ("milp", "mcf"):
                assert c.options["time_limit_s"] == 2.0
        assert "milp" not in {c.algorithm for c in candidates(kind, include_slow=False)}


def test_table_json_is_deterministic(tmp_path):
    topo = load_topology("ring:n=4")
    first = tune(topo, "allgather", SMALL_SIZES, include_slow=False).to_json()
    second = tune(topo, "allgather", SMALL_SIZES, include_slow=False).to_json()
    assert first == second
    data = json.loads(first)
    assert data["format"] == FORMAT and data["collective"] == "allgather" and data["ranks"] == 4
    assert [row["size"] for row in data["sizes"]] == SMALL_SIZES
    for entry in data["candidates"].values():
        assert len(entry["time_s"]) == len(SMALL_SIZES)


def test_boundary_is_the_geometric_mean():
    assert boundary(1024, 4096) == 2048
    assert boundary(1000, 1001) == 1001


@pytest.mark.parametrize("spec, collective", [("switch:n=4", "allreduce"), ("dgx1", "allgather"),
                                              ("ring:n=6", "reducescatter"), ("fully-connected:n=4", "alltoall"),
                                              ("ndv2:boxes=2", "allreduce"), ("bigraph", "allreduce")])
def test_cli_on_small_topologies(tmp_path, spec, collective):
    out, picture = tmp_path / "table.json", tmp_path / "algbw.png"
    result = runner.invoke(app, ["tune", spec, "-c", collective, "-s", "4KiB", "-s", "1MiB", "--time-limit", "5",
                                 "--skip-slow", "--out", str(out), "--plot", str(picture), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == json.loads(out.read_text())
    assert data["topology"] == load_topology(spec).name and len(data["sizes"]) == 2
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_table_output():
    # (among all algorithms forest's spread stars win at 1 KiB here, so the bracketed label is picked out)
    result = runner.invoke(app, ["tune", "switch:n=8", "-c", "allreduce", "-s", "1KiB", "-s", "64MiB", "--skip-slow",
                                 "-a", "tree", "-a", "ring", "-a", "hierarchical"])
    assert result.exit_code == 0, result.output
    assert "winner" in result.stdout and "runner-up" in result.stdout and "% of bound" in result.stdout
    assert "tree[shape=binomial]" in result.stdout  # labels are printed literally, not as markup
    assert "skipped hierarchical" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["-c", "allscatter"], "unknown collective"),
    (["-c", "allreduce", "-O", "tree=3"], "ALGORITHM.key=value"),
    (["-c", "allreduce", "-a", "nosuch"], "unknown algorithm"),
    (["-c", "broadcast", "-a", "ring"], "ring does not do broadcast"),
    (["-c", "allreduce", "-s", "0"], "positive size"),
])
def test_cli_errors_are_one_line_with_exit_2(args, message):
    command = [sys.executable, "-c", "from synth.cli import main; main()", "tune", "switch:n=4", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_registry_facts_agree_with_the_functions():
    import inspect

    from synth.algorithms import REGISTRY
    from synth.choose import chooser_options

    for algorithm in REGISTRY.values():
        taken = inspect.signature(algorithm.load()).parameters
        assert algorithm.time_limited == ("time_limit_s" in taken), algorithm.name
        # size is the algorithm's own rule (nccl, tree, milp) or its variant's choice (forest, in synth.choose)
        assert algorithm.size_sensitive == ("size" in taken or "size" in chooser_options(algorithm.name)), algorithm.name
        for variant in algorithm.variants:
            assert set(variant) <= set(taken), (algorithm.name, variant)


def test_out_file_rebuilds_the_measured_schedule_at_every_size():
    """Each measured size's range holds the options that rebuild the schedule tune measured there: built
    with them, the schedule runs in the time the file records (size-sensitive winners carry their ``size``)."""
    from synth.choose import synthesize  # the selection layer: what `synth generate -O size=...` runs
    from synth.evaluate import evaluate_sizes

    topology = load_topology("dgx-a100")
    sizes = [2**16, 2**30]
    document = tune(topology, Kind.ALLREDUCE, sizes, algorithms=["ring", "forest", "tree"]).to_dict()
    ranges = document["ranges"]
    assert any("size" in r["options"] for r in ranges)
    for row in document["sizes"]:
        chosen = next(r for r in ranges if r["min_bytes"] <= row["size"] and
                      (r["max_bytes"] is None or row["size"] < r["max_bytes"]))
        assert chosen["candidate"] == row["winner"]
        rebuilt = synthesize(topology, Kind.ALLREDUCE, chosen["algorithm"], **chosen["options"])
        (result,) = evaluate_sizes(rebuilt, topology, [row["size"]])
        assert result.time_s == pytest.approx(row["time_s"], rel=1e-12)
        assert chosen.get("variant", "") == row.get("variant", "")
