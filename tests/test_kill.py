"""Fault injection: ``generate`` and ``export chakra`` are killed (SIGTERM, SIGKILL) at many points of their write
window. Afterwards the old output is intact or the new one complete, byte for byte; SIGTERM leaves nothing else
behind; after a SIGKILL only a synth temporary can remain, which the next write leaves alone (synth never removes a file it did not create in this run)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import INTERRUPTIBLE, SYNTH

pytestmark = [pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the write window"),
              pytest.mark.slow]

TEMPORARY = re.compile(r"^\..+\.\d+-[0-9a-f]{8}\.tmp$")
#: Seconds to wait, once the write window is seen, before the signal (0: at once; the last ones land after it).
DELAYS = [0.0, 0.003, 0.03]

GENERATE = ["generate", "ring:n=16", "-c", "allgather", "-k", "1600"]
OLD_GENERATE = ["generate", "ring:n=4", "-c", "allgather"]
EXPORT = ["export", "chakra", "new.json", "-s", "1MiB", "-s", "4MiB", "-s", "16MiB"]
OLD_EXPORT = ["export", "chakra", "old.json", "-s", "1MiB"]


def synth(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([str(SYNTH), *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def tree(path: Path) -> dict[str, bytes] | bytes | None:
    """A file's bytes, a folder's files (relative name -> bytes), or None when absent."""
    if path.is_file():
        return path.read_bytes()
    if path.is_dir():
        return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    return None


def writing_file(pid: int, folder: Path) -> bool:
    """True once the process holds an open file in ``folder`` (its unnamed or named temporary)."""
    prefix = str(folder) + os.sep
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(prefix):
                return True
    except OSError:
        return False
    return False


def writing_folder(pid: int, folder: Path) -> bool:
    """True once a temporary folder has appeared beside the output."""
    return any(TEMPORARY.match(name) for name in os.listdir(folder))


def kill_during_write(args: list[str], cwd: Path, seen, delay: float, signum: int) -> tuple[int, str, bool]:
    """Start ``synth ARGS``, wait for its write window, wait ``delay``, send ``signum``; return the exit code,
    stderr and whether the window was seen before the process ended."""
    process = subprocess.Popen([str(SYNTH), *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, **INTERRUPTIBLE)
    caught = False
    deadline = time.monotonic() + 240
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if seen(process.pid, cwd):
                caught = True
                break
            time.sleep(0.0003)
        if caught:
            if delay:
                time.sleep(delay)
            process.send_signal(signum)
        _, err = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, err, caught


def check_outcome(cwd: Path, output: str, old, new, signum: int, code: int, err: str) -> None:
    now = tree(cwd / output)
    assert now == old or now == new, "the output is neither the old one nor the complete new one"
    assert "Traceback" not in err, err
    extra = sorted(set(os.listdir(cwd)) - {output, "old.json", "new.json"})
    if signum == signal.SIGTERM:
        # 130: stopped cleanly; 0 or -SIGTERM: the signal came after the work (the output is the new one)
        assert code == 130 or (code in (0, -signal.SIGTERM) and now == new), (code, err)
        if code == 130:
            assert err.strip().endswith("no partial output was written"), err
        assert extra == [], f"SIGTERM left {extra}"
    else:
        assert all(TEMPORARY.match(name) for name in extra), extra


def _left_alone_by_the_next_write(folder: Path, args: list[str], expected: list[str]) -> None:
    """A SIGKILL between naming a temporary and the rename leaves it: the next write leaves it alone (synth
    never removes a file it did not create in this run, whatever its name); then it is removed by hand."""
    left = sorted(name for name in os.listdir(folder) if TEMPORARY.match(name))
    synth(args, folder)
    assert sorted(name for name in os.listdir(folder) if TEMPORARY.match(name)) == left
    for name in left:
        shutil.rmtree(folder / name) if (folder / name).is_dir() else (folder / name).unlink()
    assert sorted(os.listdir(folder)) == expected


@pytest.fixture(scope="module")
def reference_schedule(tmp_path_factory) -> tuple[bytes, bytes]:
    folder = tmp_path_factory.mktemp("reference")
    synth([*OLD_GENERATE, "-o", "old.out"], folder)
    synth([*GENERATE, "-o", "new.out"], folder)
    return (folder / "old.out").read_bytes(), (folder / "new.out").read_bytes()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_generate_killed_while_writing(tmp_path, reference_schedule, signum):
    old, new = reference_schedule
    seen = 0
    for delay in DELAYS:
        (tmp_path / "s.json").write_bytes(old)
        code, err, caught = kill_during_write([*GENERATE, "-o", "s.json"], tmp_path, writing_file, delay, signum)
        seen += caught
        check_outcome(tmp_path, "s.json", old, new, signum, code, err)
        _left_alone_by_the_next_write(tmp_path, [*OLD_GENERATE, "-o", "s.json"], ["s.json"])
    assert seen >= len(DELAYS) // 2, "the write window was hardly ever seen: the test checked little"


@pytest.fixture(scope="module")
def reference_export(tmp_path_factory) -> tuple[dict, dict, Path]:
    folder = tmp_path_factory.mktemp("reference")
    synth(["generate", "ring:n=8", "-c", "allgather", "-o", "old.json"], folder)
    synth(["generate", "ring:n=16", "-c", "allgather", "-k", "64", "-o", "new.json"], folder)
    synth([*OLD_EXPORT, "-o", "old"], folder)
    synth([*EXPORT, "-o", "new"], folder)
    return tree(folder / "old"), tree(folder / "new"), folder  # type: ignore[return-value]


def setup_export(tmp_path: Path, reference: Path) -> None:
    """The two schedules and the old export (a copy of the reference one) in ``tmp_path``."""
    import shutil

    for name in ("old.json", "new.json"):
        shutil.copy(reference / name, tmp_path / name)
    shutil.rmtree(tmp_path / "et", ignore_errors=True)
    shutil.copytree(reference / "old", tmp_path / "et")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_export_chakra_killed_while_writing(tmp_path, reference_export, signum):
    old, new, reference = reference_export
    seen = 0
    for delay in [*DELAYS, 0.1]:
        setup_export(tmp_path, reference)
        assert tree(tmp_path / "et") == old
        code, err, caught = kill_during_write([*EXPORT, "-o", "et"], tmp_path, writing_folder, delay, signum)
        seen += caught
        check_outcome(tmp_path, "et", old, new, signum, code, err)
        _left_alone_by_the_next_write(tmp_path, [*OLD_EXPORT, "-o", "et"], ["et", "new.json", "old.json"])
    assert seen >= len(DELAYS) // 2, "the write window was hardly ever seen: the test checked little"


def test_a_second_signal_while_cleaning_up_changes_nothing(tmp_path, reference_export):
    """SIGTERM, then SIGINT and SIGTERM again at once: the first starts the clean path, the others are ignored."""
    old, _, reference = reference_export
    setup_export(tmp_path, reference)

    def seen(pid: int, cwd: Path) -> bool:
        return writing_folder(pid, cwd)

    process = subprocess.Popen([str(SYNTH), *EXPORT, "-o", "et"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, **INTERRUPTIBLE)
    deadline = time.monotonic() + 240
    while process.poll() is None and not seen(process.pid, tmp_path) and time.monotonic() < deadline:
        time.sleep(0.0003)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM, signal.SIGINT):
        if process.poll() is None:
            process.send_signal(signum)
    _, err = process.communicate(timeout=240)
    assert process.returncode in (0, 130, -signal.SIGTERM, -signal.SIGINT) and "Traceback" not in err, err
    assert err.count("\n") <= 1, err
    if process.returncode == 130:
        assert tree(tmp_path / "et") == old
    assert sorted(os.listdir(tmp_path)) == ["et", "new.json", "old.json"]
