"""The catalog of ready schedules in ``schedules/``: for each shipped topology and collective, the best
schedule synth makes (highest algbw at 1 GiB, flow model, among the algorithms that apply, leaving out
slow solver runs), as synth JSON and, where the exporter exists and the schedule fits the runtime's
limits, as MSCCL XML; plus ``README.md`` (a table people read) and ``index.json`` (the same figures,
exact, for tools and tests).

Alltoallv has no cell: an alltoallv schedule is made for one demand and is worth nothing for another, and
an MoE dispatch's demand changes every step, so a ready schedule for a fixed generated demand would be a
schedule for no one's traffic (and MSCCL XML cannot carry one). ``synth demand moe`` and
``synth generate -c alltoallv --demand FILE`` make one for a real demand (docs/alltoallv.md).

Everything in the folder is a function of the code: no dates, no timings, so regenerating an unchanged
catalog gives the same bytes.

Examples
--------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     entries = build_catalog(folder, topologies=["ring:n=4"], kinds=[Kind.ALLGATHER], size=2**20)
>>> [(e.collective, e.file, e.algbw_GBps > 0) for e in entries]
[('allgather', 'ring-n-4.allgather.json', True)]
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from synth.collectives import Kind
from synth.compare import Row, lower_bound, run_all
from synth.errors import InputError, SynthError
from synth.evaluate import evaluate
from synth.fileio import atomic_directory
from synth.library import load_topology, shipped, shipped_files
from synth.schedule import Schedule
from synth.topology import Topology
from synth.units import format_size

#: Message size the catalog ranks schedules at.
CATALOG_SIZE = 2**30
#: Largest schedule JSON the catalog keeps, in bytes (the 64-chip TPU v4 forests are 1.2 and 2.0 MB).
MAX_JSON_BYTES = 2_500_000
#: Largest MSCCL XML the catalog keeps, in bytes (XML is the bulkier form; the JSON is always there).
MAX_XML_BYTES = 100_000
INDEX = "index.json"
README = "README.md"


@dataclass(frozen=True)
class CatalogEntry:
    """One (topology, collective) line of the catalog."""

    topology: str
    topology_name: str
    gpus: int
    collective: str
    algorithm: str | None
    file: str | None
    msccl: str | None
    algbw_GBps: float | None
    bound_GBps: float | None
    transfers: int | None
    command: str | None
    note: str = ""
    plan: dict[str, Any] | None = None
    bound_label: str = "bound"

    @property
    def percent_of_bound(self) -> float | None:
        """algbw as a percentage of the largest algbw the topology's lower bound on time allows at the
        catalog size (the bound's time over the schedule's time), when both are known."""
        if self.algbw_GBps is None or not self.bound_GBps:
            return None
        return 100.0 * self.algbw_GBps / self.bound_GBps

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (an ``index.json`` record)."""
        return dict(asdict(self), percent_of_bound=self.percent_of_bound)


def default_specs() -> list[str]:
    """The shipped topologies: every file in ``topologies/`` (by its library spec when it has one), or
    the shipped library names when there are no files."""
    return [spec or name for name, spec in shipped_files()] or shipped()


def slug(spec: str) -> str:
    """A file-name-safe form of a topology spec: ``dgx-a100:boxes=2`` -> ``dgx-a100-boxes-2``."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", spec).strip("-")


def _msccl_xml(schedule: Schedule, topology: Topology) -> tuple[str | None, str]:
    """The schedule as MSCCL XML text when it fits the runtime's limits, else (None, why)."""
    from synth.export.msccl import lower_msccl

    try:
        text = lower_msccl(schedule).xml()
    except SynthError as error:
        return None, f"no MSCCL XML: {error}"
    size = len(text.encode("utf-8"))
    if size > MAX_XML_BYTES:
        return None, (f"MSCCL XML left out: {size / 1e6:.1f} MB, over the {MAX_XML_BYTES / 1e6:g} MB limit "
                      f"(`synth export msccl` writes it)")
    return text, ""


def _command(spec: str, kind: Kind, algorithm: str, file: str, out: str, size: int) -> str:
    from synth.algorithms import REGISTRY

    # a size-sensitive algorithm was made for the catalog's size: the command says so
    sized = f" -O size={size}" if algorithm in REGISTRY and REGISTRY[algorithm].size_sensitive else ""
    return f"synth generate {spec} -c {kind.value} -a {algorithm}{sized} -o {out.rstrip('/')}/{file}"


def _best_fitting(rows: list[Row], schedules: dict[tuple[str, str], Schedule]) -> tuple[Row | None, str, str]:
    """The highest-algbw row whose schedule JSON fits, its JSON text, and a note about any better
    schedule that was too large."""
    ranked = sorted(rows, key=lambda r: -r.algbw_GBps)  # stable: registry order breaks ties
    notes: list[str] = []
    for row in ranked:
        text = schedules[(row.algorithm, row.collective)].to_json()
        if len(text.encode("utf-8")) <= MAX_JSON_BYTES:
            return row, text, "; ".join(notes)
        notes.append(f"{row.algorithm} ({row.algbw_GBps:.2f} GB/s) left out: its JSON is "
                     f"{len(text.encode('utf-8')) / 1e6:.1f} MB, over the {MAX_JSON_BYTES / 1e6:g} MB limit")
    return None, "", "; ".join(notes)


def _catalog_cell(spec: str, kind: Kind, out_name: str, size: int) -> tuple[CatalogEntry, dict[str, str]]:
    """The catalog entry for one (topology, collective) and the files it adds (name -> text)."""
    topology = load_topology(spec)
    rows, skipped, schedules = run_all(topology, [kind], [size], include_slow=False, keep_going=True)
    time_bound = lower_bound(topology, kind)
    bound = time_bound.algbw_GBps(size) if time_bound else None
    label = time_bound.label if time_bound else "bound"
    row, text, note = _best_fitting(rows, schedules)
    if row is None:
        reasons = note or "; ".join(f"{s.algorithm}: {s.reason}" for s in skipped) or "no algorithm applies"
        return (CatalogEntry(spec, topology.name, topology.num_ranks, kind.value, None, None, None,
                             None, bound, None, None, reasons, None, label), {})
    schedule = schedules[(row.algorithm, row.collective)]
    name = f"{slug(spec)}.{kind.value}.json"
    files = {name: text}
    xml, why = _msccl_xml(schedule, topology)
    xml_name = None
    if xml is not None:
        xml_name = f"{slug(spec)}.{kind.value}.xml"
        files[xml_name] = xml
    chosen = f"{row.label}: the variant fastest at {size} bytes" if row.variant else ""
    note = "; ".join(part for part in (chosen, note, why) if part)
    return (CatalogEntry(spec, topology.name, topology.num_ranks, kind.value, row.algorithm, name,
                         xml_name, row.algbw_GBps, bound, len(schedule.transfers),
                         _command(spec, kind, row.algorithm, name, out_name, size), note,
                         row.plan.to_dict(), label), files)


def build_catalog(out: str | Path = "schedules", topologies: Sequence[str] | None = None,
                  kinds: Iterable[Kind] | None = None, out_label: str | None = None,
                  progress: Callable[[str], None] | None = None, jobs: int = 1,
                  size: int = CATALOG_SIZE) -> list[CatalogEntry]:
    """Regenerate the catalog in ``out`` (atomically: a failure leaves the old catalog as it was).

    Parameters
    ----------
    out : path
        The catalog folder (created if missing).
    topologies : list of str, optional
        Topology specs; default every shipped topology (:func:`default_specs`).
    kinds : iterable of Kind, optional
        Collectives; default every one but alltoallv (broadcast and reduce from root 0).

        With ``topologies`` or ``kinds`` only those cells are rebuilt and merged into the catalog already
        in ``out``: its other entries and files stay, each rebuilt entry takes its old place in the index
        (new ones go last). Merging at another size than the index records is refused (the figures would
        mix sizes) unless every entry it holds is rebuilt. Without either, the catalog is replaced whole.
    out_label : str, optional
        How the folder is named in the commands written to the README (default ``out`` as given).
    progress : callable, optional
        Called with a short description after each (topology, collective) is done.
    jobs : int
        Worker processes; each (topology, collective) is one task. The result does not depend on it.
    size : int
        The message size (bytes) schedules are ranked and timed at; default :data:`CATALOG_SIZE` (1 GiB),
        the size of the shipped catalog. The index records it, and :func:`check_catalog` evaluates at it.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InputError("", "jobs", f"expected a whole number of worker processes, at least 1, got {jobs!r}")
    out = Path(out)
    specs = list(topologies) if topologies is not None else default_specs()
    # alltoallv has no ready schedule: a schedule is for one demand (see the module docstring)
    kinds = list(kinds) if kinds is not None else [kind for kind in Kind if kind != Kind.ALLTOALLV]
    out_name = out_label if out_label is not None else str(out)
    for spec in specs:
        load_topology(spec)  # a bad spec fails before any work starts
    cells = [(spec, kind) for spec in specs for kind in kinds]
    merging = topologies is not None or kinds is not None
    rebuilt = {(spec, kind.value) for spec, kind in cells}
    recorded, previous = _read_index(out)
    kept = [entry for entry in previous if (entry.topology, entry.collective) not in rebuilt] if merging else []
    if kept and recorded is not None and recorded != size:
        raise InputError(str(out / INDEX), "size", f"the catalog there is at {format_size(recorded)}; rebuilding "
                         f"some of its entries at {format_size(size)} would mix sizes: give --size "
                         f"{format_size(recorded)}, rebuild every entry, or use another --out")
    results: dict[tuple[str, Kind], tuple[CatalogEntry, dict[str, str]]] = {}
    if jobs == 1 or len(cells) < 2:
        for spec, kind in cells:
            results[(spec, kind)] = _catalog_cell(spec, kind, out_name, size)
            if progress:
                progress(f"{spec} {kind.value}")
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=min(jobs, len(cells)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_catalog_cell, spec, kind, out_name, size): (spec, kind) for spec, kind in cells}
            for future in as_completed(futures):
                spec, kind = futures[future]
                results[(spec, kind)] = future.result()
                if progress:
                    progress(f"{spec} {kind.value}")
    entries: list[CatalogEntry] = []
    files: dict[str, str] = {}
    for cell in cells:  # the order of the cells, not of completion: the bytes do not depend on jobs
        entry, cell_files = results[cell]
        entries.append(entry)
        files.update(cell_files)
    if merging:
        new = {(entry.topology, entry.collective): entry for entry in entries}
        listed = [new.pop((old.topology, old.collective), old) for old in previous]
        listed += [entry for entry in entries if (entry.topology, entry.collective) in new]
        replaced = [old for old in previous if (old.topology, old.collective) in rebuilt]
    else:
        listed, replaced = entries, previous
    stale = {name for old in replaced for name in (old.file, old.msccl) if name} - set(files)
    files[INDEX] = json.dumps({"size": size, "model": "flow",
                               "entries": [e.to_dict() for e in listed]}, indent=1) + "\n"
    files[README] = render_readme(listed, out_name, size)
    with atomic_directory(out, option="--out", merge=True, kind="schedule catalog") as temp:
        for name, content in files.items():
            (temp / name).write_text(content, encoding="utf-8")
    for name in sorted(stale):
        _remove_old_entry_file(out, name)
    return entries


def _remove_old_entry_file(out: Path, name: str) -> None:
    """Remove a file an earlier catalog listed and this one does not: only a plain name in ``out`` (no
    folder part) of a regular ``.json`` or ``.xml`` file; anything else the index names is left alone."""
    import stat

    if Path(name).name != name or name.startswith(".") or not name.endswith((".json", ".xml")):
        return
    try:
        if stat.S_ISREG(os.lstat(out / name).st_mode):
            (out / name).unlink()
    except OSError:
        return


def _read_index(out: Path) -> tuple[int | None, list[CatalogEntry]]:
    """The size and entries the catalog index in ``out`` records ((None, []) when there is no readable index),
    so a rebuild can merge into it and drop the files it no longer lists. An index or README that exists
    as anything but a regular file (a pipe, a device, a folder, a symbolic link) is refused before any work."""
    import stat

    for name in (INDEX, README):
        try:
            mode = os.lstat(out / name).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            raise InputError(str(out / name), "--out", "exists and is not a regular file (a folder, device, pipe, "
                             "socket or symbolic link); synth replaces only regular files")
    known = {f.name for f in fields(CatalogEntry)}
    try:
        data = json.loads((out / INDEX).read_text(encoding="utf-8"))
        entries = [CatalogEntry(**{key: value for key, value in record.items() if key in known})
                   for record in data["entries"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, []
    size = data.get("size")
    return (size if isinstance(size, int) and not isinstance(size, bool) else None), entries


def render_readme(entries: Sequence[CatalogEntry], out_label: str = "schedules", size: int = CATALOG_SIZE) -> str:
    """The catalog's README: how it was made and one table row per (topology, collective)."""
    lines = [
        "# Schedule catalog",
        "",
        "Ready-made, verified schedules for the shipped topologies: for each topology and collective, the",
        f"best schedule synth makes, ranked by algbw at {format_size(size)} in the flow model among the "
        "algorithms that apply, each timed under the execution plan every synth command uses (protocol, slices",
        "and slices in flight: the `plan` column and the `plan` field of `index.json`; see `synth evaluate --help`)",
        "(slow solver runs such as `milp` left out). Broadcast and reduce use root 0. Files are synth JSON",
        "(`synth.schedule/2`); `.xml` files are MSCCL XML where the exporter exists, the schedule fits the",
        f"runtime's limits and the XML is under {MAX_XML_BYTES // 1000} kB. `index.json` holds the same figures, unrounded.",
        "",
        f"Regenerate with `synth catalog --out {out_label}`; `synth catalog --check` re-verifies every file",
        "and re-evaluates its figures. % of bound: the topology's proven lower bound on time at that size",
        "over the schedule's time (`-` where none is available), for the fabric as described: links, and in-switch",
        "reduction where the topology's switches declare it (NVLS: `bound_label` \"in-switch bound\" in `index.json`).",
        "",
        f"| topology | gpus | collective | algorithm | algbw GB/s at {format_size(size)} | % of bound | plan | files | command |",
        "| --- | ---: | --- | --- | ---: | ---: | --- | --- | --- |",
    ]
    for e in entries:
        if e.algorithm is None:
            lines.append(f"| {e.topology} | {e.gpus} | {e.collective} | - | - | - | - | - | none: {_cell(e.note)} |")
            continue
        percent = "-" if e.percent_of_bound is None else f"{e.percent_of_bound:.1f}%"
        files = f"[json]({e.file})" + (f", [xml]({e.msccl})" if e.msccl else "")
        note = f" ({_cell(e.note)})" if e.note else ""
        plan = _plan_text(e.plan)
        lines.append(f"| {e.topology} | {e.gpus} | {e.collective} | {e.algorithm} | {e.algbw_GBps:.2f} | {percent} "
                     f"| {plan} | {files} | `{e.command}`{note} |")
    if not entries:
        lines.append("| (no shipped topologies) | | | | | | | | |")
    return "\n".join(lines) + "\n"


def _plan_text(plan: dict[str, Any] | None) -> str:
    if not plan:
        return "-"
    from synth.plan import Plan, Protocol

    return Plan(Protocol(plan["protocol"]), plan["slice_bytes"], plan["slices"], plan["window"]).short()


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def check_catalog(out: str | Path = "schedules", tolerance: float = 1e-9, topologies: Sequence[str] | None = None,
                  kinds: Sequence[Kind] | None = None) -> list[str]:
    """Re-verify every catalog schedule and re-evaluate its algbw; returns the problems found (empty: OK).

    ``topologies`` (specs as the index records them, e.g. ``dgx-a100:boxes=2``, or the topology's name) and
    ``kinds`` restrict the check to those entries; a filter that matches no entry is refused, naming what the
    catalog holds.
    """
    from synth.verify import verify

    out = Path(out)
    index = out / INDEX
    if not index.is_file():
        raise InputError(str(index), "", "no catalog index here; run `synth catalog` first")
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        entries = data["entries"]
        size = int(data["size"])
    except (ValueError, KeyError, TypeError) as error:
        raise InputError(str(index), "entries", f"not a catalog index: {error}") from None
    entries = _filtered(entries, index, topologies, kinds)
    problems = []
    readme = (out / README).read_text(encoding="utf-8") if (out / README).is_file() else ""
    for entry in entries:
        if not entry.get("file"):
            continue
        where = f"{entry['topology']} {entry['collective']}"
        try:
            topology = load_topology(entry["topology"])
            schedule = Schedule.from_file(out / entry["file"])
            verify(schedule, topology)
            result = evaluate(schedule, topology, size)
            algbw = result.algbw_GBps
        except SynthError as error:
            problems.append(f"{where}: {error}")
            continue
        if schedule.algorithm != entry["algorithm"]:
            problems.append(f"{where}: file says algorithm {schedule.algorithm}, index says {entry['algorithm']}")
        if abs(algbw - entry["algbw_GBps"]) > tolerance * max(1.0, abs(algbw)):
            problems.append(f"{where}: algbw is {algbw!r} GB/s now, the index says {entry['algbw_GBps']!r}")
        if entry.get("plan") != result.plan.to_dict():
            problems.append(f"{where}: the plan is {result.plan.describe()} now, the index says {entry.get('plan')}")
        if f"| {entry['algorithm']} | {algbw:.2f} |" not in readme:
            problems.append(f"{where}: README has no row with {entry['algorithm']} at {algbw:.2f} GB/s")
        if entry.get("msccl") and not (out / entry["msccl"]).is_file():
            problems.append(f"{where}: missing {entry['msccl']}")
    return problems


def _filtered(entries: list[dict[str, Any]], index: Path, topologies: Sequence[str] | None,
              kinds: Sequence[Kind] | None) -> list[dict[str, Any]]:
    """The index entries the ``--topology``/``--collective`` filters of ``catalog --check`` select."""
    if topologies:
        known = sorted({str(e.get("topology")) for e in entries})
        for spec in topologies:
            if not any(spec in (e.get("topology"), e.get("topology_name")) for e in entries):
                raise InputError(str(index), "--topology", f"the catalog has no entry for {spec!r}; it has "
                                 f"{', '.join(known)}")
        entries = [e for e in entries if e.get("topology") in topologies or e.get("topology_name") in topologies]
    if kinds:
        wanted = {str(k) for k in kinds}
        entries = [e for e in entries if e.get("collective") in wanted]
    return entries
