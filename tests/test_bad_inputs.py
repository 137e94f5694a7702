"""The bad-input corpus (tests/data/bad/, manifest in its README.md) through the CLI: every file gets exit code
2, one line naming the file and the problem, no traceback, and no output file left behind."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import assert_refused, run_cli, run_process

BAD = Path(__file__).resolve().parent / "data" / "bad"
VECTORS = Path(__file__).resolve().parents[2] / "shared" / "vectors"


@dataclass(frozen=True)
class Case:
    file: str
    kind: str
    topology: str | None
    expect: str
    checks: str

    @property
    def path(self) -> Path:
        return BAD / self.file.rstrip("/")


def _manifest() -> list[Case]:
    cases = []
    for line in (BAD / "README.md").read_text().splitlines():
        match = re.match(r"^\| `([^`]+)` \| (\w+) \| (\S+) \| (?:`(.*)`)? ?\| (.*) \|$", line)
        if match:
            name, kind, topology, expect, checks = match.groups()
            cases.append(Case(name, kind, None if topology == "-" else topology, expect or "", checks))
    return cases


CASES = _manifest()


def commands_for(case: Case, out_dir: Path, good_xml: Path | None = None) -> list[list[str]]:
    path = str(case.path)
    with_topology = ["--topology", case.topology] if case.topology else []
    if case.kind == "topology":
        return [["show", path], ["generate", path, "-c", "allgather", "-a", "ring", "-o", str(out_dir / "s.json")]]
    if case.kind == "schedule":
        return [["verify", path, *with_topology],
                ["evaluate", path, *with_topology, "-s", "1MiB"],
                ["export", "msccl", path, *with_topology, "-o", str(out_dir / "s.xml")],
                ["export", "chakra", path, *with_topology, "-o", str(out_dir / "et")]]
    if case.kind == "msccl":
        return [["import", "msccl", path, *with_topology, "-o", str(out_dir / "s.json")]]
    if case.kind == "chakra":
        return [["import", "chakra", str(case.path / "ring"), *with_topology, "-o", str(out_dir / "s.json")]]
    if case.kind == "network":
        return [["import", "msccl", str(good_xml), "--topology", path, "-o", str(out_dir / "s.json")]]
    if case.kind == "job":
        return [["compare", str(case.topology), "--job", path]]
    raise AssertionError(f"unknown kind {case.kind!r} in the manifest")


@pytest.fixture(scope="session")
def good_msccl(tmp_path_factory) -> Path:
    """A valid MSCCL file (ring allgather on 8 gpus), for imports whose topology file is the bad input."""
    from synth import load_topology, synthesize
    from synth.export.msccl import export_msccl

    target = tmp_path_factory.mktemp("good") / "good.xml"
    export_msccl(synthesize(load_topology("switch:n=8"), "allgather", "ring"), target)
    return target


# ----------------------------------------------------------------------------------------- the corpus
def test_manifest_covers_the_corpus():
    listed = {case.file.rstrip("/") for case in CASES}
    present = {p.name for p in BAD.iterdir() if p.name != "README.md"}
    assert present == listed, {"not in the manifest": present - listed, "missing files": listed - present}
    assert len(CASES) >= 40
    assert {case.kind for case in CASES} == {"topology", "schedule", "msccl", "chakra", "network", "job"}
    assert len({case.file for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_corpus_file_is_refused_cleanly(case, tmp_path, capsys, monkeypatch, request):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    monkeypatch.chdir(tmp_path)
    named = str(case.path / "ring") if case.kind == "chakra" else str(case.path)
    good_xml = request.getfixturevalue("good_msccl") if case.kind == "network" else None
    for args in commands_for(case, out_dir, good_xml):
        outcome = run_cli(args, capsys, monkeypatch)
        assert_refused(outcome, named, case.expect, out_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "a stray file was written in the working folder"


@pytest.mark.parametrize("name", ["topo_bandwidth_nan.json", "sched_cycle.json", "msccl_billion_laughs.xml",
                                  "topo_deep_nesting.yaml"])
def test_corpus_in_a_real_process(name, tmp_path):
    case = next(c for c in CASES if c.file == name)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = commands_for(case, out_dir)[-1]
    assert_refused(run_process(args, tmp_path), str(case.path), case.expect, out_dir)


# ------------------------------------------------------------------------- generated at test time
def test_a_50_megabyte_topology_file_is_refused_before_parsing(tmp_path, capsys, monkeypatch):
    big = tmp_path / "huge.json"
    with big.open("w") as handle:
        handle.write('{"name": "huge", "description": "')
        chunk = "x" * (1 << 20)
        for _ in range(50):
            handle.write(chunk)
        handle.write('", "nodes": [], "links": []}')
    assert big.stat().st_size > 50 * 10**6
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for args in (["show", str(big)], ["generate", str(big), "-c", "allgather", "-o", str(out_dir / "s.json")]):
        line = assert_refused(run_cli(args, capsys, monkeypatch), str(big), "more than the limit", out_dir)
        assert "bytes" in line
    # schedules have their own, larger limit (max_schedule_bytes); lowered here to 32 MiB for the test
    monkeypatch.setenv("SYNTH_MAX_SCHEDULE_BYTES", str(32 * 2**20))
    line = assert_refused(run_cli(["verify", str(big), "-t", "ring:n=4"], capsys, monkeypatch), str(big),
                          "more than the limit of 33554432", out_dir)


def test_a_folder_named_like_a_file(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "topology.json"
    folder.mkdir()
    assert_refused(run_cli(["show", str(folder)], capsys, monkeypatch), str(folder), "not a regular file")


def test_missing_files(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "missing.json"
    assert_refused(run_cli(["show", str(missing)], capsys, monkeypatch), str(missing), "no such file")
    assert_refused(run_cli(["verify", str(missing)], capsys, monkeypatch), str(missing), "no such file")
    assert_refused(run_cli(["evaluate", str(missing)], capsys, monkeypatch), str(missing), "no such file")
    missing_xml = tmp_path / "missing.xml"
    outcome = run_cli(["import", "msccl", str(missing_xml), "-t", "switch:n=8", "-o", str(tmp_path / "o.json")],
                      capsys, monkeypatch)
    assert_refused(outcome, str(missing_xml), "no such file")
    assert not (tmp_path / "o.json").exists()


def test_output_into_a_missing_folder(tmp_path, capsys, monkeypatch):
    target = tmp_path / "nowhere" / "s.json"
    outcome = run_cli(["generate", "ring:n=4", "-c", "allgather", "-o", str(target)], capsys, monkeypatch)
    assert_refused(outcome, str(target), "does not exist")
    assert not (tmp_path / "nowhere").exists()


def test_unknown_library_names_and_parameters(capsys, monkeypatch):
    line = assert_refused(run_cli(["show", "no-such-system"], capsys, monkeypatch), "no-such-system",
                          "neither a file nor a library name")
    assert "dgx-a100" in line and "tpu-v4" in line, "the message lists the library's names"
    assert_refused(run_cli(["show", "ring:n=4,colour=red"], capsys, monkeypatch), "ring", "colour")
    assert_refused(run_cli(["show", "ring:n=1"], capsys, monkeypatch), "ring", "n")


@pytest.mark.skipif(not (VECTORS / "astra-sim").is_dir(), reason=f"test vectors not found at {VECTORS}")
@pytest.mark.parametrize("cut", ["half", "one_byte_short", "garbage_tail"])
def test_truncated_copies_of_real_chakra_traces(cut, tmp_path, capsys, monkeypatch):
    source = VECTORS / "astra-sim" / "custom_ring_allreduce_8npus_1MB"
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in range(8):
        data = (source / f"custom_allreduce.{rank}.et").read_bytes()
        if rank == 3:
            data = {"half": data[: len(data) // 2], "one_byte_short": data[:-1],
                    "garbage_tail": data + b"\xff\xff\xff\xff\x0f" + os.urandom(8)}[cut]
        (folder / f"custom_allreduce.{rank}.et").write_bytes(data)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    prefix = str(folder / "custom_allreduce")
    outcome = run_cli(["import", "chakra", prefix, "-t", "switch:n=8", "-o", str(out_dir / "s.json")],
                      capsys, monkeypatch)
    assert_refused(outcome, prefix, "", out_dir)


# ------------------------------------------------------------------------------------ resource limits
def test_a_request_over_the_transfer_limit_is_refused_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", "100")
    out = tmp_path / "s.json"
    # ring allreduce on 8 gpus needs at least 2 (8 - 1) 8 = 112 transfers
    args = ["generate", "ring:n=8", "-c", "allreduce", "-k", "8", "-o", str(out)]
    line = assert_refused(run_cli(args, capsys, monkeypatch), "ring allreduce on 8 gpus with 8 chunks",
                          "would make 112 transfers, over the limit of 100")
    assert "SYNTH_MAX_TRANSFERS" in line
    assert not out.exists()
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", "1000")
    assert run_cli(args, capsys, monkeypatch).code == 0


def test_limits_are_checked_before_any_work(monkeypatch):
    from synth import load_topology, synthesize
    from synth.errors import LimitError

    topology = load_topology("switch:n=64")
    calls = []
    import synth.algorithms.direct as direct_module

    monkeypatch.setattr(direct_module, "route", lambda *a: calls.append(a))
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", "1000")
    with pytest.raises(LimitError, match="direct alltoall on 64 gpus with 64 chunks would make 4,032 transfers"):
        synthesize(topology, "alltoall", "direct")
    assert not calls, "the algorithm ran before the limit was checked"


def test_limit_values_and_overrides(monkeypatch):
    from synth import limits
    from synth.errors import InputError, LimitError

    assert limits.limit_value("max_transfers") == 4_000_000
    assert limits.solver_time_limit() == 600
    assert limits.solver_time_limit(12.5) == 12.5
    monkeypatch.setenv("SYNTH_SOLVER_SECONDS", "30")
    assert limits.solver_time_limit() == 30
    monkeypatch.setenv("SYNTH_MAX_MILP_VARIABLES", "1_000")
    with pytest.raises(LimitError, match="milp allreduce would need 5,000 variables, over the limit of 1,000"):
        limits.check_milp(5000, 10, "milp allreduce")
    limits.check_milp(999, 10, "milp allreduce")
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", "lots")
    with pytest.raises(InputError, match="SYNTH_MAX_TRANSFERS: expected a number, got 'lots'"):
        limits.check_transfers(1, "x")
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", "-5")
    with pytest.raises(InputError, match="expected a positive number"):
        limits.check_transfers(1, "x")
    with pytest.raises(InputError, match="positive number of seconds"):
        limits.solver_time_limit(float("nan"))
    with pytest.raises(KeyError, match="unknown limit"):
        limits.limit_value("max_everything")


def test_too_many_ranks_is_refused(monkeypatch):
    from synth import load_topology, synthesize
    from synth.errors import LimitError

    monkeypatch.setenv("SYNTH_MAX_RANKS", "16")
    with pytest.raises(LimitError, match="a topology of 32 gpus would need 32 ranks, over the limit of 16"):
        synthesize(load_topology("ring:n=32"), "allgather", "ring")
