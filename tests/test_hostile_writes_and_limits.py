"""Hostile input, round 3: each class is checked on inputs built here, through the real entry point. Every
refusal is exit code 2 and one bounded line ``error: ...``, and no file in the folder changes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from helpers import run_cli


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    """``cli(*args)`` runs synth in this process, in ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_cli([str(a) for a in args], capsys, monkeypatch)


PAIR = ('{"name": "pair", "nodes": [{"id": "a", "type": "gpu"}, {"id": "b", "type": "gpu"}], '
        '"links": [{"src": "a", "dst": "b", "bandwidth": 10}]}')


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder``: its kind, inode, link count and (for a regular file) its bytes."""
    result = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else os.readlink(path) if path.is_symlink() else b""
        result[str(path.relative_to(folder))] = (stat.S_IFMT(info.st_mode), info.st_ino, info.st_nlink, data)
    return result


def refused(outcome, *expect: str) -> str:
    """Exit code 2 and one line ``error: ...`` of bounded size that says each of ``expect``."""
    everything = outcome.out + outcome.err
    assert "Traceback" not in everything, everything[-3000:]
    assert outcome.code == 2, (outcome.code, everything[-3000:])
    lines = outcome.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), outcome.err[-3000:]
    assert len(outcome.err) < 2000, f"{len(outcome.err)} bytes of message"
    for text in expect:
        assert text in lines[0], (text, lines[0])
    return lines[0]


@pytest.fixture
def inputs(tmp_path, cli) -> dict[str, Path]:
    """A topology file, a schedule made on it, and a sketch, in ``tmp_path``."""
    topology = tmp_path / "pair.json"
    topology.write_text(PAIR)
    schedule = tmp_path / "s.json"
    assert cli("generate", topology, "-c", "allgather", "-o", schedule).code == 0
    sketch = tmp_path / "sketch.json"
    sketch.write_text('{"format": "synth.sketch/1"}')
    return {"topology": topology, "schedule": schedule, "sketch": sketch}


# ------------------------------------------------------------------------------ 1. unsafe writes
def _writers(files: dict[str, Path]) -> list[tuple[list[str], str, str]]:
    """(a command writing to ``{}``, the input it reads, the suffix its output needs)."""
    topology, schedule, sketch = str(files["topology"]), str(files["schedule"]), str(files["sketch"])
    return [
        (["generate", topology, "-c", "allgather", "-o", "{}"], "topology", ".json"),
        (["generate", "ring:n=4", "-c", "allgather", "-a", "milp", "-O", f"sketch={sketch}", "-o", "{}"], "sketch",
         ".json"),
        (["export", "msccl", schedule, "-o", "{}"], "schedule", ".xml"),
        (["export", "msccl", schedule, "-o", "{}"], "topology", ".xml"),  # the topology the schedule records
        (["draw", topology, "--no-cut", "-o", "{}"], "topology", ".png"),
        (["draw", "pair.json", "--no-cut", "--schedule", schedule, "-o", "{}"], "schedule", ".png"),
        (["tune", topology, "-c", "allgather", "-s", "1MiB", "--out", "{}"], "topology", ".json"),
    ]


@pytest.mark.parametrize("how", ["symlink", "hardlink", "same"])
def test_an_output_that_is_an_input_or_a_link_to_one_is_refused(cli, tmp_path, inputs, how):
    for args, which, suffix in _writers(inputs):
        victim = inputs[which]
        target = tmp_path / f"out{suffix}"
        if how == "symlink":
            target.symlink_to(victim.name)
        elif how == "hardlink":
            os.link(victim, target)
        else:
            target = victim
        before = snapshot(tmp_path)
        line = refused(cli(*[str(target) if a == "{}" else a for a in args]))
        expect = "symbolic link" if how == "symlink" else "input"
        assert expect in line or (how == "same" and "expected a file name ending" in line), (args, line)
        assert snapshot(tmp_path) == before, args
        if target != victim:
            target.unlink()


def test_an_output_through_a_linked_folder_to_an_input_is_refused(cli, tmp_path, inputs):
    (tmp_path / "alias").symlink_to(".")
    before = snapshot(tmp_path)
    refused(cli("generate", inputs["topology"], "-c", "allgather", "-o", "alias/pair.json"), "input")
    refused(cli("generate", "ring:n=4", "-c", "allgather", "-a", "milp", "-O", "sketch=sketch.json", "-o",
                "alias/sketch.json"), "input")
    assert snapshot(tmp_path) == before


def test_the_topology_file_a_schedule_records_is_an_input(cli, tmp_path, inputs):
    """`export chakra` finds the topology through the schedule: a folder holding it is never replaced."""
    folder = tmp_path / "et"
    assert cli("export", "chakra", inputs["schedule"], "-o", folder).code == 0
    os.replace(inputs["topology"], folder / "pair.json")
    data = json.loads(inputs["schedule"].read_text())
    data["topology_file"] = "et/pair.json"
    inputs["schedule"].write_text(json.dumps(data))
    before = snapshot(tmp_path)
    refused(cli("export", "chakra", inputs["schedule"], "-o", folder), "input")
    os.link(folder / "pair.json", tmp_path / "pair.json")
    data["topology_file"] = "pair.json"
    inputs["schedule"].write_text(json.dumps(data))
    before = snapshot(tmp_path)
    refused(cli("export", "chakra", inputs["schedule"], "-o", folder), "input")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["fifo", "folder", "symlink"])
def test_catalog_never_replaces_what_is_not_a_regular_file(cli, tmp_path, kind):
    out = tmp_path / "cat"
    assert cli("catalog", "--out", out, "-t", "ring:n=4", "-c", "allgather", "-s", "1MiB").code == 0
    index = out / "index.json"
    index.unlink()
    if kind == "fifo":
        os.mkfifo(index)
    elif kind == "folder":
        index.mkdir()
    else:
        index.symlink_to("README.md")
    before = snapshot(tmp_path)
    refused(cli("catalog", "--out", out, "-t", "ring:n=4", "-c", "allgather", "-s", "1MiB"), "index.json",
            "not a regular file")
    assert snapshot(tmp_path) == before


def test_files_that_look_like_temporaries_are_never_touched(cli, tmp_path, inputs):
    """Names of synth's temporaries (``.NAME.PID-XXXXXXXX.tmp``, a dead process id) and the sweep lock."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"topology": "ring", "grid": {"n": [4]}, "collectives": ["allgather"],
                                "algorithms": ["ring"], "sizes": ["1MiB"]}))
    decoys = {}
    for output in ("r.parquet", "new.json", "et", "x.xml"):
        for name in (f".{output}.999999999-0123abcd.tmp", f".{output}.1-deadbeef.tmp", f".{output}.x.tmp"):
            decoys[name] = f"mine {name}".encode()
    decoys[".r.parquet.lock"] = b"my notes"
    for name, data in decoys.items():
        (tmp_path / name).write_bytes(data)
    assert cli("sweep", spec, "-o", "r.parquet", "--workers", "1").code == 0
    assert cli("generate", "ring:n=4", "-c", "allgather", "-o", "new.json").code == 0
    assert cli("export", "chakra", "new.json", "-o", "et").code == 0
    assert cli("export", "chakra", "new.json", "-o", "et").code == 0
    assert cli("export", "msccl", "new.json", "-o", "x.xml").code == 0
    for name, data in decoys.items():
        assert (tmp_path / name).read_bytes() == data, name
    os.unlink(tmp_path / ".r.parquet.lock")
    os.mkfifo(tmp_path / ".r.parquet.lock")
    before = snapshot(tmp_path)
    refused(cli("sweep", spec, "-o", "r.parquet", "--workers", "1"), "lock")
    assert snapshot(tmp_path) == before


def test_a_temporary_name_in_use_is_skipped(tmp_path, monkeypatch):
    """Two names drawn alike: the second draw is used, the file already there keeps its bytes."""
    from synth import fileio

    names = iter(["0123abcd", "0123abcd", "0123abcd", "fedcba98", "0123abcd", "fedcba98", "77777777"])
    monkeypatch.setattr(fileio.secrets, "token_hex", lambda n: next(names))
    monkeypatch.setattr(fileio, "_link_unnamed", lambda fd, name: False)  # the named path
    taken = tmp_path / f".out.txt.{os.getpid()}-0123abcd.tmp"
    taken.write_text("someone's")
    fileio.atomic_write_text(tmp_path / "out.txt", "new")
    assert (tmp_path / "out.txt").read_text() == "new" and taken.read_text() == "someone's"
    taken_folder = tmp_path / f".et.{os.getpid()}-0123abcd.tmp"
    taken_folder.mkdir()
    (taken_folder / "keep").write_text("k")
    with fileio.atomic_directory(tmp_path / "et") as temp:
        (temp / "a").write_text("a")
    assert (tmp_path / "et" / "a").read_text() == "a" and (taken_folder / "keep").read_text() == "k"


# --------------------------------------------------------------- 2. nothing written by a failed command
def test_a_command_failing_after_its_first_output_writes_nothing(cli, tmp_path):
    (tmp_path / "t.json").write_text("old table")
    before = snapshot(tmp_path)
    # the table and the picture are made, then the command fails (--json and --csv conflict)
    refused(cli("tune", "ring:n=4", "-c", "allgather", "-s", "1MiB", "--out", "t.json", "--plot", "p.png",
                "--json", "--csv"), "--csv")
    assert snapshot(tmp_path) == before
    refused(cli("export", "chakra", "nothing.json", "-o", "et"), "nothing.json")
    assert snapshot(tmp_path) == before


def test_an_output_transaction_is_all_or_nothing(tmp_path):
    from synth.errors import InputError
    from synth.fileio import atomic_directory, atomic_write_text, output_transaction

    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(RuntimeError), output_transaction():
        atomic_write_text(tmp_path / "a.txt", "new a")
        with atomic_directory(tmp_path / "folder") as temp:
            (temp / "x").write_text("x")
        atomic_write_text(tmp_path / "b.txt", "new b")
        raise RuntimeError("the command failed after writing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"] and (tmp_path / "a.txt").read_text() == "old a"
    # a destination that changed while the command ran (here: made a pipe) stops every output
    with pytest.raises(InputError, match="not a regular file"), output_transaction():
        atomic_write_text(tmp_path / "a.txt", "new a")
        atomic_write_text(tmp_path / "b.txt", "new b")
        os.mkfifo(tmp_path / "b.txt")
    assert (tmp_path / "a.txt").read_text() == "old a" and stat.S_ISFIFO((tmp_path / "b.txt").lstat().st_mode)
    (tmp_path / "b.txt").unlink()
    with output_transaction():
        atomic_write_text(tmp_path / "a.txt", "new a")
        assert (tmp_path / "a.txt").read_text() == "old a"
    assert (tmp_path / "a.txt").read_text() == "new a" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_staged_file_is_copied_where_it_cannot_be_named(tmp_path, monkeypatch):
    from synth import fileio

    monkeypatch.setattr(fileio, "_link_unnamed", lambda fd, name: False)
    with fileio.output_transaction():
        fileio.atomic_write_text(tmp_path / "a.txt", "x" * 100_000)
    assert (tmp_path / "a.txt").read_text() == "x" * 100_000 and len(list(tmp_path.iterdir())) == 1


# ------------------------------------------------------------------------------ 3. bounded messages
def test_messages_quoting_huge_input_stay_short(cli, tmp_path, inputs):
    big = "g" * 5_000_000
    topology = tmp_path / "bigid.json"
    topology.write_text(json.dumps({"name": "pair", "nodes": [{"id": "a", "type": "gpu"}, {"id": big, "type": "gpu"}],
                                    "links": [{"src": "a", "dst": big + "x", "bandwidth": 10}]}))
    data = json.loads(inputs["schedule"].read_text())
    data.update(topology="t" * 5_000_000, topology_file=None, topology_sha256=None)
    named = tmp_path / "bigname.json"
    named.write_text(json.dumps(data))
    data = json.loads(inputs["schedule"].read_text())
    data["transfers"][0]["path"] = ["a", *(f"n{i}" for i in range(100_000)), "b"]
    path = tmp_path / "bigpath.json"
    path.write_text(json.dumps(data))
    before = snapshot(tmp_path)
    line = refused(cli("show", topology), "bigid.json", "characters")
    assert len(line) < 1200
    refused(cli("verify", named), "bigname.json", "characters")
    refused(cli("verify", path, "-t", inputs["topology"]), "bigpath.json")
    refused(cli("generate", "ring:n=4", "-c", "z" * 100_000, "-o", "x.json"), "--collective")
    refused(cli("generate", "ring:n=4", "-c", "allgather", "-O", "chunks=" + "z" * 100_000, "-o", "x.json"))
    refused(cli("show", "ring:n=" + "7" * 100_000))
    assert snapshot(tmp_path) == before


def test_excerpt_and_bounded():
    from synth.errors import InputError, SynthError, bounded, excerpt

    assert excerpt("abc") == "abc" and "(1,000 characters)" in excerpt("x" * 1000)
    assert len(excerpt("x" * 10**6)) < 240
    assert len(str(SynthError("y" * 10**6))) < 1100 and len(bounded("y" * 10**6, 100)) < 200
    error = InputError("s" * 10**6, "f" * 10**6, "p" * 10**6)
    assert len(str(error)) < 1100 and "characters" in error.source


# ----------------------------------------------------------------------------- 4. Unicode digits
UNICODE_DIGITS = ["²", "①", "٣", "３", "1٣", "۴"]


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_unicode_digits_are_refused_where_a_number_is_expected(cli, tmp_path, inputs, monkeypatch, digit):
    from synth.export.msccl import export_msccl
    from synth.schedule import Schedule

    xml = tmp_path / "s.xml"
    export_msccl(Schedule.from_file(inputs["schedule"]), xml)
    bad_xml = tmp_path / "bad.xml"
    bad_xml.write_text(xml.read_text().replace('i_chunks="1"', f'i_chunks="{digit}"', 1))
    before = snapshot(tmp_path)
    cases = [
        (["generate", "ring:n=4", "-c", "allgather", "-O", f"chunks={digit}", "-o", "u.json"], "--option"),
        (["show", f"ring:n={digit}"], "topology"),
        (["show", f"torus:dims={digit}x4"], "topology"),
        (["show", f"ring:n=4,bandwidth={digit}"], "topology"),
        (["evaluate", inputs["schedule"], "-s", f"{digit}MiB"], "--size"),
        (["evaluate", inputs["schedule"], "-s", f"1K:1M:{digit}"], "--size"),
        (["import", "msccl", bad_xml, "-t", inputs["topology"], "-o", "u.json"], "i_chunks"),
    ]
    for args, field in cases:
        refused(cli(*args), field, "ASCII digits")
    monkeypatch.setenv("SYNTH_MAX_TRANSFERS", f"{digit}000")
    refused(cli("generate", "ring:n=4", "-c", "allgather", "-o", "u.json"), "SYNTH_MAX_TRANSFERS", "ASCII digits")
    monkeypatch.delenv("SYNTH_MAX_TRANSFERS")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"topology": "torus", "grid": {"dims": [f"{digit}x4"]}, "collectives": ["allgather"],
                                "algorithms": ["ring"], "sizes": ["1MiB"]}))
    outcome = cli("sweep", spec, "-o", "r.parquet", "--workers", "1")
    assert "Traceback" not in outcome.out + outcome.err and outcome.code == 1  # the point failed
    spec.unlink()
    (tmp_path / "r.parquet").unlink(missing_ok=True)
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------- 5. numbers past a C long
@pytest.mark.parametrize("field", ["parent", "child", "path", "chunks"])
def test_trees_form_numbers_past_a_c_long(cli, tmp_path, field):
    assert cli("generate", "ring:n=4", "-c", "allgather", "-a", "forest", "--compact", "-o", "t.json").code == 0
    data = json.loads((tmp_path / "t.json").read_text())
    if field == "chunks":
        data["chunks"] = 10**29
    else:
        data["trees"]["phases"][0]["trees"][0][field][0] = 10**29
    (tmp_path / "t.json").write_text(json.dumps(data))
    before = snapshot(tmp_path)
    for args in (["verify", "t.json"], ["evaluate", "t.json", "-s", "1MiB"], ["export", "msccl", "t.json", "-o", "x.xml"]):
        refused(cli(*args), "t.json", "over the limit" if field == "chunks" else "expected integers")
    assert snapshot(tmp_path) == before


# -------------------------------------------------------------------------------- 6. exit codes
def test_a_sweep_with_failed_points_exits_1(cli, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"topology": "ring", "grid": {"n": [4]}, "collectives": ["allgather"],
                                "algorithms": ["ring"], "sizes": ["1MiB"]}))
    assert cli("sweep", spec, "-o", "ok.parquet", "--workers", "1").code == 0
    spec.write_text(json.dumps({"topology": "ring", "grid": {"n": ["x"]}, "collectives": ["allgather"],
                                "algorithms": ["ring"], "sizes": ["1MiB"]}))
    outcome = cli("sweep", spec, "-o", "bad.parquet", "--workers", "1")
    assert outcome.code == 1 and "failed" in outcome.err and "Traceback" not in outcome.err


@pytest.mark.parametrize("args, expect", [
    (["generate", "ring:n=4", "-c", "allgather", "-k", "abc"], "--chunks"),
    (["generate", "ring:n=4"], "--collective"),
    (["no-such-command"], "No such command"),
    (["generate"], "topology"),
    (["generate", "ring:n=4", "-c", "allgather", "-k", "z" * 100_000], "--chunks"),
])
def test_usage_errors_give_the_error_line_first(cli, args, expect):
    outcome = cli(*args)
    assert outcome.code == 2 and "Traceback" not in outcome.err
    lines = outcome.err.strip().splitlines()
    assert lines[0].startswith("error: ") and expect in lines[0], outcome.err[:500]
    assert any(line.startswith("Usage: ") for line in lines[1:]) and len(outcome.err) < 3000


def test_run_astrasim_without_the_binary_fails_and_says_so(cli, tmp_path, inputs):
    import subprocess

    assert cli("export", "chakra", inputs["schedule"], "-o", "et").code == 0
    script = tmp_path / "et" / "run_astrasim.sh"
    env = {"PATH": "/usr/bin:/bin", "ASTRA_SIM": str(tmp_path / "missing-binary")}
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 127 and "was not found" in done.stderr, (done.returncode, done.stdout, done.stderr)
    silent = tmp_path / "silent"  # a binary that runs but prints no finish line is a failure too
    silent.write_text("#!/bin/sh\necho nothing useful\n")
    silent.chmod(0o755)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={**env, "ASTRA_SIM": str(silent)})
    assert done.returncode == 1 and "no 'sys[i] finished' line" in done.stderr, (done.stdout, done.stderr)


# ------------------------------------------------------------------ 7. progress and kill-and-restart
def test_demo_says_what_it_is_doing_on_a_pipe(cli):
    outcome = cli("demo", "--topology", "ring:n=4", "-s", "1MiB")
    assert outcome.code == 0
    steps = [line for line in outcome.err.splitlines() if line.startswith("demo: running ")]
    assert steps and steps[0].endswith(f"(1/{len(steps)})") and steps[-1].endswith(f"({len(steps)}/{len(steps)})")


@pytest.mark.slow
def test_runs_after_a_killed_one_give_the_same_bytes(tmp_path):
    import signal
    import subprocess
    import time

    from helpers import SYNTH

    generate = [str(SYNTH), "generate", "ring:n=16", "-c", "allgather", "-k", "1600", "-o", "s.json"]
    export = [str(SYNTH), "export", "chakra", "s.json", "-o", "et", "-s", "1MiB", "-s", "4MiB"]
    for args in (generate, export):
        process = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.8)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        outputs = []
        for _ in range(2):
            subprocess.run(args, cwd=tmp_path, check=True, capture_output=True, timeout=300)
            target = tmp_path / args[args.index("-o") + 1]
            outputs.append({str(p.relative_to(target)): p.read_bytes() for p in sorted(target.rglob("*"))
                            if p.is_file()} if target.is_dir() else target.read_bytes())
        assert outputs[0] == outputs[1], args


@pytest.mark.parametrize("value", ["1e300", "1e-300", "0"])
def test_an_absurd_milp_epoch_is_refused(cli, tmp_path, value):
    outcome = cli("generate", "ring:n=4", "-c", "allgather", "-a", "milp", "-O", f"epoch_us={value}", "-o",
                  tmp_path / "m.json")
    assert outcome.code == 2 and "epoch_us" in outcome.err and "Traceback" not in outcome.err
    assert not (tmp_path / "m.json").exists()


# -------------------------------------------------------------------------------- 7. memory estimates
def test_work_over_the_memory_limit_is_refused_before_it_starts(cli, tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("SYNTH_MAX_MEMORY_BYTES", "200e6")
    started = time.monotonic()
    outcome = cli("generate", "switch:n=400", "-c", "alltoall", "-a", "direct", "-o", tmp_path / "a.json")
    assert outcome.code == 2 and "Traceback" not in outcome.err, outcome.err
    line = outcome.err.strip()
    assert "\n" not in line and "of memory" in line and "SYNTH_MAX_MEMORY_BYTES" in line and len(line) < 400
    assert time.monotonic() - started < 20 and not (tmp_path / "a.json").exists()


def test_a_document_too_big_to_parse_in_memory_is_refused(cli, tmp_path, monkeypatch):
    schedule = tmp_path / "s.json"
    assert cli("generate", "ring:n=8", "-c", "allreduce", "-a", "ring", "-k", "512", "-o", schedule).code == 0
    monkeypatch.setenv("SYNTH_MAX_MEMORY_BYTES", str(schedule.stat().st_size * 4))
    outcome = cli("verify", schedule)
    assert outcome.code == 2 and "of memory" in outcome.err and str(schedule) in outcome.err, outcome.err


def test_a_topology_over_the_rank_limit_is_refused_before_it_is_built(cli):
    import time

    started = time.monotonic()
    outcome = cli("show", "hypercube:d=16")  # 65,536 gpus and 1 M links if it were built
    assert outcome.code == 2 and "SYNTH_MAX_RANKS" in outcome.err and time.monotonic() - started < 10


def test_the_memory_default_follows_the_process_limit():
    import resource

    from synth import limits

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = 8 * 2**30 if hard == resource.RLIM_INFINITY else min(8 * 2**30, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        assert limits.memory_available() <= limits.MEMORY_SHARE * cap
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
