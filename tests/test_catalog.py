"""The schedule catalog: every file in schedules/ verifies and its figures match a fresh evaluation; the
generator is deterministic, atomic, drops stale files and respects the size limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import synth.catalog as catalog
from synth.catalog import CATALOG_SIZE, build_catalog, check_catalog, render_readme, slug
from synth.cli import app
from synth.collectives import Kind
from synth.compare import lower_bound
from synth.errors import InputError
from synth.evaluate import congestion, evaluate
from synth.explain import critical_path, explain, levels
from synth.library import load_topology
from synth.schedule import Schedule
from synth.verify import verify

SCHEDULES = Path(__file__).resolve().parents[1] / "schedules"
runner = CliRunner()


def shipped_entries() -> list[dict]:
    index = SCHEDULES / "index.json"
    if not index.is_file():
        return []
    return [e for e in json.loads(index.read_text())["entries"] if e["file"]]


#: Entries whose 1 GiB simulation moves at most this many slice transfers (transfers x the plan's slices)
#: are simulated again here, a second or so each. The larger ones take from ten seconds to minutes each
#: (half an hour together), so the test suite checks everything else about them and `make catalog-check`
#: (`synth catalog --check`) re-simulates every entry. 520,000 since the broadcast and reduce entries took
#: more trees per root (2026-11-29: 2 x DGX A100's broadcast 120 -> 240 transfers), so that still more than
#: half of the entries, and every collective, are simulated again.
RESIMULATED_WORK = 520_000


def _work(entry: dict) -> int:
    return entry["transfers"] * entry["plan"]["slices"]


@pytest.mark.parametrize("entry", shipped_entries(), ids=lambda e: f"{e['topology']}-{e['collective']}")
@pytest.mark.slow
def test_catalog_schedule_verifies_and_matches_its_figures(entry):
    topology = load_topology(entry["topology"])
    schedule = Schedule.from_file(SCHEDULES / entry["file"])
    verify(schedule, topology)
    assert schedule.algorithm == entry["algorithm"]
    assert schedule.kind.value == entry["collective"]
    assert len(schedule.transfers) == entry["transfers"]
    assert (SCHEDULES / entry["file"]).stat().st_size <= catalog.MAX_JSON_BYTES
    algbw = entry["algbw_GBps"]
    time_s = CATALOG_SIZE / (algbw * 1e9)
    if _work(entry) <= RESIMULATED_WORK:
        result = evaluate(schedule, topology, CATALOG_SIZE)
        assert result.plan.to_dict() == entry["plan"]
        assert result.algbw_GBps == pytest.approx(algbw, rel=1e-9)
        algbw, time_s = result.algbw_GBps, result.time_s
    bound = lower_bound(topology, schedule.kind)
    if bound is not None:  # the index's bound is today's proven one, and no shipped schedule beats it
        assert bound.algbw_GBps(CATALOG_SIZE) == pytest.approx(entry["bound_GBps"], rel=1e-9)
        assert time_s >= bound.time(CATALOG_SIZE) * (1 - 1e-9)
    readme = (SCHEDULES / "README.md").read_text()
    assert f"| {entry['algorithm']} | {algbw:.2f} |" in readme
    assert entry["command"] in readme
    if entry["msccl"]:
        assert (SCHEDULES / entry["msccl"]).read_text().lstrip().startswith("<")
    # `synth explain` works on every catalog file (at 1 MiB: the largest entries take minutes at 1 GiB)
    summary = explain(schedule, topology, size=2**20)
    assert sum(step.transfers for step in summary.steps) == len(schedule.transfers)
    assert summary.time_s is not None and summary.lower_bound_s <= summary.time_s * (1 + 1e-9)
    # and explain's lower bound at 1 GiB (congestion, critical path) holds against the time of the index
    chain = critical_path(schedule, topology, CATALOG_SIZE, levels(schedule), entry["plan"]["slices"])
    assert max(congestion(schedule, topology).time(CATALOG_SIZE), chain.time_s) <= time_s * (1 + 1e-9)


def test_most_catalog_entries_are_simulated_again_in_the_suite():
    entries = shipped_entries()
    resimulated = [e for e in entries if _work(e) <= RESIMULATED_WORK]
    assert len(resimulated) >= len(entries) // 2
    assert {e["collective"] for e in resimulated} == {e["collective"] for e in entries}


def test_catalog_is_present_and_small():
    total = sum(p.stat().st_size for p in SCHEDULES.iterdir() if p.is_file())
    # 19.9 MB before the broadcast and reduce entries took more trees (GB200 NVL72's reduce: 71 -> 2,059
    # transfers), 20.6 MB after: the bound is a guard against a runaway entry, not a target
    assert total < 24 * 10**6, f"the catalog is {total / 1e6:.1f} MB; keep it a few MB"
    data = json.loads((SCHEDULES / "index.json").read_text())
    assert data["size"] == CATALOG_SIZE
    listed = {e["file"] for e in data["entries"] if e["file"]} | {e["msccl"] for e in data["entries"] if e["msccl"]}
    on_disk = {p.name for p in SCHEDULES.iterdir() if p.suffix in (".json", ".xml")} - {"index.json"}
    assert on_disk == listed, "every schedule file is listed in the index and vice versa"


#: The size the tests of the catalog's mechanics build at (1 GiB is the shipped catalog's size: minutes of
#: simulation even for four gpus, where forest chooses its trees and slices for that size).
SMALL = 2**20


def test_build_catalog_small_is_deterministic_and_checks(tmp_path):
    first = tmp_path / "one"
    entries = build_catalog(first, ["ring:n=4", "switch:n=4"], [Kind.ALLGATHER, Kind.BROADCAST], size=SMALL)
    assert [(e.topology, e.collective) for e in entries] == [
        ("ring:n=4", "allgather"), ("ring:n=4", "broadcast"), ("switch:n=4", "allgather"), ("switch:n=4", "broadcast")]
    for e in entries:
        assert e.file == f"{slug(e.topology)}.{e.collective}.json"
        schedule = Schedule.from_file(first / e.file)
        topo = load_topology(e.topology)
        verify(schedule, topo)
        result = evaluate(schedule, topo, SMALL)
        assert result.algbw_GBps == e.algbw_GBps and result.plan.to_dict() == e.plan
    assert check_catalog(first) == []
    second = tmp_path / "two"
    # in two worker processes: the same bytes whatever order the cells finish in
    build_catalog(second, ["ring:n=4", "switch:n=4"], [Kind.ALLGATHER, Kind.BROADCAST], out_label=str(first), jobs=2,
                  size=SMALL)
    for path in first.iterdir():
        assert (second / path.name).read_bytes() == path.read_bytes(), f"{path.name} differs between runs"
    readme = (first / "README.md").read_text()
    assert readme.count("\n| ring:n=4 |") == 2 and "synth generate switch:n=4 -c broadcast -a" in readme
    assert "algbw GB/s at 1MiB" in readme and json.loads((first / "index.json").read_text())["size"] == SMALL


def test_best_is_chosen_by_algbw_at_the_catalog_size(tmp_path):
    entries = build_catalog(tmp_path, ["switch:n=4"], [Kind.ALLGATHER], size=SMALL)
    (entry,) = entries
    from synth.compare import run_all

    rows, _, _ = run_all(load_topology("switch:n=4"), [Kind.ALLGATHER], [SMALL], include_slow=False,
                         keep_going=True)
    assert entry.algbw_GBps == max(r.algbw_GBps for r in rows)


def test_rebuilding_some_cells_merges_them_into_the_catalog(tmp_path):
    """`synth catalog -t X -c Y` on a catalog refreshes those entries and keeps every other one."""
    build_catalog(tmp_path, ["ring:n=4", "switch:n=4"], [Kind.ALLGATHER, Kind.ALLREDUCE], size=SMALL)
    before = json.loads((tmp_path / "index.json").read_text())
    readme = (tmp_path / "README.md").read_text()
    (rebuilt,) = build_catalog(tmp_path, ["switch:n=4"], [Kind.ALLGATHER], size=SMALL)
    after = json.loads((tmp_path / "index.json").read_text())
    assert after == before and (tmp_path / "README.md").read_text() == readme  # same code, same bytes
    assert rebuilt.to_dict() == after["entries"][2]  # in its old place
    assert all((tmp_path / e["file"]).is_file() for e in after["entries"])
    build_catalog(tmp_path, ["ring:n=3"], [Kind.ALLGATHER], size=SMALL)
    cells = [(e["topology"], e["collective"]) for e in json.loads((tmp_path / "index.json").read_text())["entries"]]
    assert cells == [(e["topology"], e["collective"]) for e in before["entries"]] + [("ring:n=3", "allgather")]
    assert check_catalog(tmp_path) == []
    with pytest.raises(InputError, match="would mix sizes") as refused:
        build_catalog(tmp_path, ["ring:n=4"], [Kind.ALLGATHER], size=2 * SMALL)
    assert refused.value.source.endswith("index.json") and refused.value.field == "size"
    assert len(json.loads((tmp_path / "index.json").read_text())["entries"]) == 5  # nothing changed
    # rebuilding every entry it holds may change the size
    build_catalog(tmp_path, ["ring:n=4", "switch:n=4", "ring:n=3"], [Kind.ALLGATHER, Kind.ALLREDUCE], size=2 * SMALL)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["size"] == 2 * SMALL and len(index["entries"]) == 6


def test_stale_files_are_removed_and_size_limit_is_kept(tmp_path, monkeypatch):
    build_catalog(tmp_path, ["ring:n=4"], [Kind.ALLGATHER, Kind.ALLREDUCE], size=SMALL)
    assert (tmp_path / "ring-n-4.allreduce.json").is_file()
    (tmp_path / "notes.txt").write_text("mine")
    build_catalog(tmp_path, ["ring:n=4"], [Kind.ALLGATHER], size=SMALL)
    assert (tmp_path / "ring-n-4.allreduce.json").is_file(), "a cell not rebuilt keeps its file"
    assert (tmp_path / "notes.txt").read_text() == "mine", "files the catalog did not write are left alone"
    monkeypatch.setattr(catalog, "MAX_JSON_BYTES", 100)
    (entry,) = build_catalog(tmp_path, ["ring:n=4"], [Kind.ALLGATHER], size=SMALL)
    assert entry.file is None and "over the 0.0001 MB limit" in entry.note
    assert "| ring:n=4 | 4 | allgather | - |" in (tmp_path / "README.md").read_text()
    assert not (tmp_path / "ring-n-4.allgather.json").exists()


def test_msccl_xml_is_written_when_small_enough(tmp_path, monkeypatch):
    pytest.importorskip("synth.export.msccl", reason="the MSCCL exporter is not available")
    (entry,) = build_catalog(tmp_path / "a", ["switch:n=4"], [Kind.ALLGATHER], size=SMALL)
    assert entry.msccl == "switch-n-4.allgather.xml"
    assert (tmp_path / "a" / entry.msccl).read_text().startswith("<algo ")
    monkeypatch.setattr(catalog, "MAX_XML_BYTES", 10)
    (entry,) = build_catalog(tmp_path / "b", ["switch:n=4"], [Kind.ALLGATHER], size=SMALL)
    assert entry.msccl is None and "MSCCL XML left out" in entry.note and entry.file
    assert not list((tmp_path / "b").glob("*.xml"))


def test_check_catalog_finds_tampering(tmp_path):
    build_catalog(tmp_path, ["switch:n=4"], [Kind.ALLREDUCE], size=SMALL)
    (entry,) = json.loads((tmp_path / "index.json").read_text())["entries"]
    index = json.loads((tmp_path / "index.json").read_text())
    index["entries"][0]["algbw_GBps"] *= 1.01
    (tmp_path / "index.json").write_text(json.dumps(index))
    problems = check_catalog(tmp_path)
    assert problems and "algbw is" in problems[0]
    data = json.loads((tmp_path / entry["file"]).read_text())
    data["transfers"] = data["transfers"][:-1]
    (tmp_path / entry["file"]).write_text(json.dumps(data))
    assert any("postcondition" in p or "does not" in p or "never" in p or "missing" in p
               for p in check_catalog(tmp_path)), check_catalog(tmp_path)


def test_readme_without_entries_says_so():
    assert "(no shipped topologies)" in render_readme([])


def test_cli_catalog_and_check(tmp_path):
    out = tmp_path / "cat"
    result = runner.invoke(app, ["catalog", "--out", str(out), "-t", "ring:n=4", "-c", "allgather", "-s", "1MiB",
                                 "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["topology"] == "ring:n=4" and row["file"] == "ring-n-4.allgather.json"
    result = runner.invoke(app, ["catalog", "--out", str(out), "--check"])
    assert result.exit_code == 0 and "every schedule verifies" in result.stdout
    (out / "ring-n-4.allgather.json").write_text("{}")
    result = runner.invoke(app, ["catalog", "--out", str(out), "--check"])
    assert result.exit_code == 1 and "problem" in result.stdout


def test_cli_catalog_size_is_checked_and_not_taken_with_check(tmp_path, capsys, monkeypatch):
    from helpers import assert_refused, run_cli

    out = tmp_path / "cat"
    for size, expect in (("0", "expected a positive size"), ("abc", "expected a size such as")):
        outcome = run_cli(["catalog", "-o", str(out), "-t", "ring:n=4", "-c", "allgather", "-s", size], capsys,
                          monkeypatch)
        assert_refused(outcome, "--size", expect)
        assert not out.exists(), "nothing is written for a refused size"
    assert run_cli(["catalog", "-o", str(out), "-t", "ring:n=4", "-c", "allgather", "-s", "1MiB", "--json"], capsys,
                   monkeypatch).code == 0
    assert json.loads((out / "index.json").read_text())["size"] == 2**20
    outcome = run_cli(["catalog", "--check", "-o", str(out), "-s", "1GiB"], capsys, monkeypatch)
    assert_refused(outcome, "--size", "evaluates at the size the catalog's index.json records")
