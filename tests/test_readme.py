"""Every ``sh``, ``console`` and ``python`` block of README.md and of the docs/*.md pages runs, README first and
then the pages in name order, each page's blocks in its order, all in one empty folder (a page may use files an
earlier page wrote), with this checkout's ``synth`` first on PATH; where a block shows output, the output is
checked. The README also keeps to its budget (lines, no dated lines: history lives in CHANGELOG.md), its CLI
reference equals the commands' help (:mod:`synth.cli.reference`) and its figure tables equal what
:mod:`bench.tables` makes from the recorded results.

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

import json
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
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_LINES = 500
DATED = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
RUN = ("sh", "console", "python")
MARKER = re.compile(r"^<!-- readme-test: (skip|slow): (.+?) -->$")


@dataclass
class Block:
    page: str  # the file, relative to the checkout
    line: int  # 1-based line of the opening fence
    lang: str
    text: list[str]
    mark: str | None = None  # skip or slow
    reason: str = ""
    commands: list[tuple[str, list[str]]] = field(default_factory=list)  # (command, output shown)

    @property
    def name(self) -> str:
        return f"{self.page}:L{self.line}-{self.lang}"


def blocks(text: str, page: str = "README.md") -> list[Block]:
    """A page's fenced blocks in the languages run here, with their markers."""
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
            block = Block(page, index + 1, lang, lines[index + 1:end], marker.group(1) if marker else None,
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


ALL = [block for page in PAGES
       for block in blocks(page.read_text(encoding="utf-8"), page.relative_to(ROOT).as_posix())]


def test_readme_has_blocks_and_every_left_out_one_says_why():
    assert len([b for b in ALL if b.mark is None and b.page == "README.md"]) >= 6
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
    # the venv's `synth` script imports whichever checkout the venv was installed from: PYTHONPATH makes it this one
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": path,
            "COLUMNS": "160",
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
        where = f"{block.page} line {block.line}: {command.splitlines()[0][:80]}"
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


def test_readme_keeps_to_its_budget_and_its_history_lives_in_the_changelog():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines, over its budget of {README_LINES}"
    dated = [f"README.md:{n}: {line[:80]}" for n, line in enumerate(lines, 1) if DATED.search(line)]
    assert not dated, "dated lines belong in CHANGELOG.md:\n" + "\n".join(dated)
    assert (ROOT / "CHANGELOG.md").is_file()


def test_budget_checks_catch_a_dated_line():
    assert DATED.search("rerun on 2026-11-28 after the change")
    assert not DATED.search("schedule/2 at 1024x2048, 1-2 ms")


def test_the_readme_lists_every_limit_as_the_code_has_it():
    """One table of every limit, its default, its variable and what it bounds, written from synth.limits."""
    from synth import limits
    from synth.cli import reference

    block = reference.between(README.read_text(encoding="utf-8"), reference.LIMITS_BEGIN, reference.LIMITS_END)
    assert block == limits.table(), "README's limits table is stale: python -m synth.cli.reference --write"
    assert all(f"`{limit.env}`" in block and limit.bounds for limit in limits.LIMITS.values())


def test_cli_reference_equals_the_commands_help():
    from synth.cli import reference

    text = README.read_text(encoding="utf-8")
    assert reference.between(text) == reference.summary(), \
        "README's CLI reference is stale: python -m synth.cli.reference --write"
    assert reference.FULL.read_text(encoding="utf-8") == reference.full(), \
        "docs/cli.md is stale: python -m synth.cli.reference --write"
    names = {entry.words.split()[0] for entry in reference.entries()}
    assert {"generate", "bound", "tune", "export", "import"} <= names


def _tables(text: str) -> list[tuple[int, str]]:
    """(line, first row) of every Markdown table of a text, with whether it lies inside a figure block."""
    found, inside, previous = [], False, ""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("<!-- table: "):
            inside = True
        elif line.strip() == "<!-- /table -->":
            inside = False
        elif line.startswith("|") and not previous.startswith("|"):
            found.append((number, "figure" if inside else line))
        previous = line
    return found


def test_every_figure_table_equals_what_its_result_file_makes():
    from bench import tables

    checked = 0
    for page in tables.pages():
        for key, notes, body in tables.blocks(page.read_text(encoding="utf-8")):
            assert body == tables.render(key, notes), \
                f"{page.name}: the {key} table differs from bench/results/{key}.json: python -m bench.tables --write"
            checked += 1
    keys = {key for key, _, _ in tables.blocks(README.read_text(encoding="utf-8"))}
    assert {"headline", "inswitch"} <= keys and checked >= len(keys)


def test_readme_figures_are_all_generated():
    """Under "Figures", every table is a figure block: no hand-typed numbers."""
    text = README.read_text(encoding="utf-8")
    section = text.partition("\n## Figures\n")[2].partition("\n## ")[0]
    assert section, "README.md has no Figures section"
    hand = [first for _, first in _tables(section) if first != "figure"]
    assert not hand, f"hand-written tables under Figures: {hand}"


def test_a_hand_edited_figure_or_reference_is_caught(tmp_path):
    from bench import tables
    from synth.cli import reference

    current = tables.render("startup")
    edited = current.replace("| synth --help |", "| synth --help (edited) |", 1)
    assert edited != current
    page = f"# x\n\n<!-- table: startup -->\n{edited}<!-- /table -->\n"
    assert tables.blocks(page) == [("startup", False, edited)]
    assert tables.blocks(tables.rewrite(page)) == [("startup", False, current)]
    record = json.loads((tables.RESULTS / "startup.json").read_text(encoding="utf-8"))
    record["rows"][0][2] = 99.0
    (tmp_path / "startup.json").write_text(json.dumps(record), encoding="utf-8")
    assert tables.render("startup", results=tmp_path) != current  # a new recording changes the table
    text = reference.splice(README.read_text(encoding="utf-8"), "| command | what it does |\n")
    assert reference.between(text) != reference.summary()
