"""``synth catalog``: regenerate (or check) the folder of ready-made best schedules."""

from __future__ import annotations

from typing import Annotated

import typer

from synth.cli.common import (
    CSV_OPTION,
    JSON_OPTION,
    QUIET_OPTION,
    VERBOSE_OPTION,
    command_verbosity,
    console,
    detail,
    note,
    print_json,
    progress_bar,
    shown,
    table,
)
from synth.collectives import parse_kind
from synth.errors import InputError, SynthError
from synth.fileio import check_interrupted
from synth.units import format_size, parse_size


def register(app: typer.Typer) -> None:
    """Add ``catalog`` to ``app``."""
    app.command("catalog")(catalog)


def catalog(
    out: Annotated[str, typer.Option("--out", "-o", help="catalog folder")] = "schedules",
    topology: Annotated[list[str] | None, typer.Option("--topology", "-t",
                        help="only these topologies (repeatable), merged into the catalog in --out (its other entries stay); "
                        "default every shipped one, replacing it")] = None,
    collective: Annotated[list[str] | None, typer.Option("--collective", "-c",
                          help="only these collectives (repeatable), merged like --topology; default all six")] = None,
    size: Annotated[str | None, typer.Option("--size", "-s", help="the message size schedules are ranked and timed "
                    "at, default 1GiB (recorded in index.json; --check evaluates at the recorded size)")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1,
                    help="worker processes, one (topology, collective) each; the files do not depend on it")] = 1,
    check: Annotated[bool, typer.Option("--check", help="do not regenerate: re-verify the files (those "
                                        "--topology/--collective select, default all) and compare their figures with "
                                        "a fresh evaluation")] = False,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
    quiet: bool = QUIET_OPTION,
    verbose: bool = VERBOSE_OPTION,
) -> None:
    """Regenerate the schedule catalog: for each shipped topology and collective the best schedule at
    1 GiB (--size) as synth JSON (and MSCCL XML where it fits), with README.md and index.json."""
    from synth.catalog import CATALOG_SIZE, build_catalog, check_catalog, default_specs

    command_verbosity(quiet, verbose)
    kinds = [parse_kind(c, field="--collective") for c in collective] if collective else None
    if check and size is not None:
        raise InputError("", "--size", "--check evaluates at the size the catalog's index.json records; "
                         "leave --size out")
    nbytes = CATALOG_SIZE if size is None else parse_size(size, "--size")
    if check:
        problems = check_catalog(out, topologies=topology, kinds=kinds)
        if as_json:
            print_json({"ok": not problems, "problems": problems})
        else:
            for problem in problems:
                console.print(f"[red]problem[/red] {shown(problem)}")
            console.print(f"{shown(out)}: " + ("every schedule verifies and matches its figures" if not problems
                                        else f"{len(problems)} problem(s)"))
        if problems:
            raise typer.Exit(1)
        return
    from synth.fileio import check_merge_folder

    check_merge_folder(out, option="--out")
    specs = list(topology) if topology else default_specs()
    if not specs:
        raise SynthError("no shipped topologies to catalog (the topology library lists none); pass --topology")
    total = len(specs) * (len(kinds) if kinds else 6)
    with progress_bar(total, "building the catalog") as (bar, task):
        def step(what: str) -> None:
            bar.update(task, advance=1, description=f"done: {what}")
            detail(f"done: {what}")
            check_interrupted()

        entries = build_catalog(out, specs, kinds, progress=step, jobs=jobs, size=nbytes)
    if as_json:
        print_json([e.to_dict() for e in entries])
        return
    rows = [[e.topology, e.collective, e.algorithm or "-", "-" if e.algbw_GBps is None else f"{e.algbw_GBps:.2f}",
             "-" if e.percent_of_bound is None else f"{e.percent_of_bound:.1f}%", e.file or e.note]
            for e in entries]
    console.print(table(f"catalog in {out}/ ({format_size(nbytes)}, flow model)", ["topology", "collective", "algorithm",
                                                                  "algbw GB/s", "% of bound", "file"], rows, {3, 4}))
    note(f"wrote {sum(1 for e in entries if e.file)} schedules, {shown(out)}/README.md and {shown(out)}/index.json")
