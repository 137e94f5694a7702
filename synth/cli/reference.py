"""The CLI reference, written from the commands themselves: ``python -m synth.cli.reference [--write]``.

Two Markdown texts come out of the same walk over the ``synth`` command tree:

- :func:`summary`: one table row per command (its usage and the first sentence of its help), the part of the
  README between ``<!-- cli-reference -->`` and ``<!-- /cli-reference -->``;
- :func:`full`: ``docs/cli.md``, every command with its usage, its whole help and a table of its options.

``--write`` rewrites both files in place; without it the texts are printed. ``tests/test_readme.py`` checks
that the README and ``docs/cli.md`` equal what this module writes, so a changed option shows up as a failing
test until the reference is regenerated.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FULL = ROOT / "docs" / "cli.md"
BEGIN, END = "<!-- cli-reference -->", "<!-- /cli-reference -->"
#: The README's table of limits (:func:`synth.limits.table`).
LIMITS_BEGIN, LIMITS_END = "<!-- limits -->", "<!-- /limits -->"


@dataclass(frozen=True)
class Entry:
    """One leaf command: its words after ``synth``, usage, help text and (option, help) rows."""

    words: str
    usage: str
    help: str
    options: tuple[tuple[str, str], ...]


def _plain(text: str) -> str:
    """Help text as Markdown: reST double backticks become single ones, lines are joined."""
    return re.sub(r"``([^`]+)``", r"`\1`", " ".join(text.split()))


def _walk(command: Any, context: Any, words: list[str], found: list[Entry]) -> None:
    from typer import _click as click  # typer's bundled click: the classes its commands are built from

    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            _walk(sub, click.Context(sub, info_name=name, parent=context), [*words, name], found)
        return
    rows = []
    for param in command.params:
        record = param.get_help_record(context)
        if record is not None and "--help" not in record[0]:
            rows.append((record[0], _plain(record[1])))
    usage = " ".join(["synth", *words, *command.collect_usage_pieces(context)])
    found.append(Entry(" ".join(words), usage, _plain(command.help or ""), tuple(rows)))


def entries() -> list[Entry]:
    """Every leaf command of ``synth``, in the order ``synth --help`` lists them.

    Examples
    --------
    >>> names = [e.words for e in entries()]
    >>> "bound" in names and "export mscclpp" in names
    True
    """
    from typer import _click as click

    from synth.cli import command

    root = command()  # the tree `synth` runs: help texts as the terminal shows them
    found: list[Entry] = []
    _walk(root, click.Context(root, info_name="synth"), [], found)
    return found


def _first_sentence(text: str) -> str:
    match = re.match(r"(.+?\.)(\s|$)", text)
    return (match.group(1) if match else text).rstrip(".")


def summary() -> str:
    """The README's command table (without its markers).

    Examples
    --------
    >>> summary().splitlines()[0]
    '| command | what it does |'
    """
    lines = ["| command | what it does |", "|---|---|"]
    for entry in entries():
        usage = entry.usage.replace("|", "\\|")
        lines.append(f"| `{usage}` | {_first_sentence(entry.help).replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def full() -> str:
    """``docs/cli.md``: every command's usage, help and options."""
    lines = ["# CLI reference", "",
             "Written by `python -m synth.cli.reference --write` from the commands' own help; "
             "`tests/test_readme.py` keeps it equal. `synth COMMAND --help` prints the same.", ""]
    for entry in entries():
        lines += [f"## synth {entry.words}", "", f"`{entry.usage}`", "", entry.help, ""]
        if entry.options:
            lines += ["| option | meaning |", "|---|---|"]
            lines += [f"| `{name.replace('|', chr(92) + '|')}` | {text.replace('|', chr(92) + '|')} |"
                      for name, text in entry.options]
            lines.append("")
    return "\n".join(lines)


def splice(text: str, body: str, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with what lies between the ``begin`` and ``end`` marker lines replaced by ``body``.

    Examples
    --------
    >>> splice("a\\n<!-- x -->\\nold\\n<!-- /x -->\\nb\\n", "new\\n", "<!-- x -->", "<!-- /x -->")
    'a\\n<!-- x -->\\nnew\\n<!-- /x -->\\nb\\n'
    """
    head, found, rest = text.partition(begin + "\n")
    if not found or end not in rest:
        raise ValueError(f"no {begin} ... {end} block")
    return head + begin + "\n" + body + end + rest.partition(end)[2]


def between(text: str, begin: str = BEGIN, end: str = END) -> str:
    """What lies between the marker lines (the part :func:`splice` replaces)."""
    return text.partition(begin + "\n")[2].partition(end)[0]


def main(argv: list[str] | None = None) -> int:
    """Print the reference, or with ``--write`` rewrite README.md's block and docs/cli.md."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        from synth.limits import table

        text = splice(README.read_text(encoding="utf-8"), summary())
        README.write_text(splice(text, table(), LIMITS_BEGIN, LIMITS_END), encoding="utf-8")
        FULL.write_text(full(), encoding="utf-8")
        print(f"wrote {README.name}'s CLI reference and limits, and {FULL.relative_to(ROOT)}")
        return 0
    if args:
        print("usage: python -m synth.cli.reference [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(summary() + "\n" + full())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
