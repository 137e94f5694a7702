"""Every ``sh``, ``console`` and ``python`` block of README.md runs, in README order, in one empty folder,
with this checkout's ``synth`` first on PATH; where a block shows output, the output is checked.

- ``sh``: every command (a line; ``\\`` continues it) must exit 0.
- ``console``: ``$ COMMAND`` lines, each followed by the output the README shows. Every shown line (spaces
  collapsed; a line ``...`` stands for lines left out) must be a line of what the command prints, in order;
  the exit status must be 0, or 2 when the shown output starts with ``error:``.
- ``python``: the block runs as a script.

A block is left out only with a reason, on the line before its fence:
``<!-- readme-test: skip: REASON -->``, or ``<!-- readme-test: slow: REASON -->`` for one that runs when
``SYNTH_README_SLOW=1`` is set. A command that starts with ``ASTRA_SIM=`` needs ASTRA-sim's binaries: with
``SYNTH_ASTRA_BIN`` set it runs with that binary, otherwise the script it names must exist and parse
(``bash -n``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUN = ("sh", "console", "python")
MARKER = re.compile(r"^<!-- readme-test: (skip|slow): (.+?) -->$")


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    text: list[str]
    mark: str | None = None  # skip or slow
    reason: str = ""
    commands: list[tuple[str, list[str]]] = field(default_factory=list)  # (command, output shown)

    @property
    def name(self) -> str:
        return f"L{self.line}-{self.lang}"


def blocks(text: str) -> list[Block]:
    """The README's fenced blocks in the languages run here, with their markers."""
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[index])
        if not fence:
            index += 1
            continue
        end = next(j for j in range(index + 1, len(lines)) if lines[j].startswith("```"))
        lang = fence.group(1)
        if lang in RUN:
            before = next((lines[j] for j in range(index - 1, -1, -1) if lines[j].strip()), "")
            marker = MARKER.match(before.strip())
            block = Block(index + 1, lang, lines[index + 1:end], marker.group(1) if marker else None,
                          marker.group(2) if marker else "")
            block.commands = _commands(block)
            found.append(block)
        index = end + 1
    return found


def _commands(block: Block) -> list[tuple[str, list[str]]]:
    if block.lang == "python":
        return [("\n".join(block.text), [])]
    result: list[tuple[str, list[str]]] = []
    pending = ""
    for raw in block.text:
        if block.lang == "console":
            if raw.startswith("$ "):
                result.append((raw[2:].strip(), []))
            elif result:
                result[-1][1].append(raw)
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line and not line.startswith("#"):
            result.append((line, []))
    return result


ALL = blocks(README.read_text(encoding="utf-8"))


def test_readme_has_blocks_and_every_left_out_one_says_why():
    assert len([b for b in ALL if b.mark is None]) >= 6
    for block in ALL:
        if block.mark:
            assert len(block.reason) >= 20, f"{block.name}: say why it is left out"
        assert block.commands, f"{block.name}: an empty block"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    place = tmp_path_factory.mktemp("readme")
    for shared in ("examples", "topologies"):
        (place / shared).symlink_to(ROOT / shared)
    return place


def _env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "COLUMNS": "160",
            "PYTHONHASHSEED": "0", "SYNTH_README_TEST": "1"}


def _normal(line: str) -> str:
    return " ".join(line.split())


def check_shown(shown: list[str], printed: str, where: str) -> None:
    """Every shown line is a printed line (spaces collapsed), in order; ``...`` skips any number."""
    lines = [_normal(line) for line in printed.splitlines()]
    position = 0
    for expected in (_normal(line) for line in shown):
        if not expected or expected == "...":
            continue
        try:
            position = lines.index(expected, position) + 1
        except ValueError:
            raise AssertionError(f"{where}: the README shows\n  {expected}\nbut the command printed:\n{printed}") \
                from None


def _astra_line(command: str, cwd: Path, where: str) -> None:
    binary = os.environ.get("SYNTH_ASTRA_BIN")
    words = shlex.split(command)
    script = next(w for w in words if w.endswith(".sh"))
    assert (cwd / script).is_file(), f"{where}: the README names {script}, which the commands before did not write"
    syntax = subprocess.run(["bash", "-n", script], cwd=cwd, capture_output=True, text=True)
    assert syntax.returncode == 0, f"{where}: {script}: {syntax.stderr}"
    if binary:
        done = subprocess.run(["bash", script], cwd=cwd, capture_output=True, text=True, timeout=600,
                              env={**_env(), "ASTRA_SIM": binary})
        assert done.returncode == 0, f"{where}: {done.stdout}{done.stderr}"


@pytest.mark.parametrize("block", ALL, ids=lambda b: b.name)
def test_readme_block_runs(block, folder):
    if block.mark == "skip":
        pytest.skip(block.reason)
    if block.mark == "slow" and not os.environ.get("SYNTH_README_SLOW"):
        pytest.skip(f"{block.reason} (SYNTH_README_SLOW=1 runs it)")
    for command, shown in block.commands:
        where = f"README.md line {block.line}: {command.splitlines()[0][:80]}"
        if block.lang == "python":
            done = subprocess.run([sys.executable, "-c", command], cwd=folder, capture_output=True, text=True,
                                  timeout=300, env=_env())
            assert done.returncode == 0, f"{where}: {done.stderr}"
            continue
        if command.startswith("ASTRA_SIM="):
            _astra_line(command, folder, where)
            continue
        done = subprocess.run(["bash", "-c", command], cwd=folder, capture_output=True, text=True, timeout=300,
                              env=_env())
        printed = done.stdout + done.stderr
        assert "Traceback" not in printed, f"{where}: {printed}"
        failing = next((line for line in shown if line.strip()), "").startswith("error:")
        assert done.returncode == (2 if failing else 0), f"{where}: exit {done.returncode}: {printed}"
        if shown:
            check_shown(shown, printed, where)


def test_check_shown_catches_a_drifted_line():
    check_shown(["a  b", "...", "d"], "a b\nc\nd\n", "x")
    with pytest.raises(AssertionError):
        check_shown(["a b", "e"], "a b\nc\n", "x")
    with pytest.raises(AssertionError):
        check_shown(["c", "a b"], "a b\nc\n", "x")  # out of order
