"""Helpers shared by the CLI commands: argument parsing, tables, JSON output, schedule files."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import typer
from rich.console import Console
from rich.table import Table

from synth.errors import InputError
from synth.units import parse_size

if TYPE_CHECKING:  # the CLI imports the model where a command needs it, so `synth --help` stays fast
    from synth.schedule import Schedule, ScheduleForm
    from synth.topology import Topology
    from synth.verify import Verified, VerifyReport

#: ``--csv`` given: tables go to stdout as CSV and everything else the command prints goes to stderr.
CSV_MODE = {"on": False}


class _Console(Console):
    """The stdout console. Under ``--csv`` a table made by :func:`table` is written as CSV and any other
    output is sent to stderr, so stdout holds nothing but the CSV."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: D102 (rich's)
        if not CSV_MODE["on"] or self.stderr:
            super().print(*objects, **kwargs)
            return
        for item in objects:
            rows = getattr(item, "csv_rows", None)
            if rows is None:
                err_console.print(item, **kwargs)
            else:
                write_csv(rows)


console = _Console(highlight=False, width=None if sys.stdout is not None and sys.stdout.isatty() else 160)
err_console = Console(stderr=True, highlight=False)

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")


def _csv_flag(value: bool) -> bool:
    if value:
        CSV_MODE["on"] = True
    return value


CSV_OPTION = typer.Option(False, "--csv", callback=_csv_flag,
                          help="Print the table as CSV (a header line, then one line per row) on stdout; "
                               "notes and messages go to stderr.")
GROUP_HELP = ("process group: the member gpus (b0.gpu0,b1.gpu0,...) or a layout tp=K (consecutive groups of K) or "
              "dp=K (K gpus strided by N/K), :I for the I-th group (default all gpus; see docs/process-groups.md)")
TOPOLOGY_HELP = "A topology file (.json/.yaml) or library name such as dgx-a100:boxes=2 (see `synth topologies`)."


class Interrupted(Exception):  # noqa: N818 (it is what happened, not an error)
    """Ctrl-C or SIGTERM stopped a command that kept part of its work: the message says what was kept.

    :func:`synth.cli.main` prints ``interrupted while running `synth ...`: MESSAGE`` and exits with 130,
    instead of its usual "no partial output was written".
    """


def any_topology(spec: str) -> Topology:
    """A topology file, library spec, shipped name or ASTRA-sim network YAML."""
    from synth.astra import is_network_yaml, load_network_yaml
    from synth.library import load_topology

    return load_network_yaml(spec)[0] if is_network_yaml(spec) else load_topology(spec)


def topology_argument(spec: str, what: str = "") -> Topology:
    """Load the topology a user named on the command line; refuse one over the rank limit up front."""
    from synth import limits

    topology = any_topology(spec)
    limits.check_ranks(topology.num_ranks, what or f"a topology of {topology.num_ranks} gpus",
                       hint="use a smaller topology")
    return topology


def check_bound_work(topology: Topology, what: str, hint: str = "use a smaller topology",
                     quotient: bool = False) -> None:
    """Refuse, before starting, exact bound or tree-packing work over the ``max_graph_work`` limit.

    ``quotient``: the command runs only the exact bound, which uses the quotient method where the fabric's
    symmetry allows (:func:`synth.bounds.quotient_representatives`): estimate that method's work then.
    """
    from synth import limits

    representatives = None
    if quotient:
        from synth.bounds import quotient_representatives

        representatives = quotient_representatives(topology)
    limits.check_graph_work(topology.num_ranks, topology.graph.number_of_edges(), what, hint, representatives)


#: The ``--size`` help every command shares (units and ranges: :mod:`synth.units`).
SIZE_HELP = ("message size: 64M or 64MiB (binary, as nccl-tests reads it), 64MB (decimal), 1024 (bytes), or a "
             "range FROM:TO[:FACTOR] like nccl-tests' -b/-e/-f, e.g. 1K:1G:4 (repeatable)")


def sizes_argument(values: list[str] | None, default: list[str]) -> list[int]:
    """Parse repeated ``--size`` options: sizes with units or ranges ``FROM:TO[:FACTOR]``, in the order
    given, a size named twice kept once.

    Examples
    --------
    >>> sizes_argument(["1K:4K", "2K", "1M"], ["1GiB"])
    [1024, 2048, 4096, 1048576]
    """
    from synth.units import parse_sizes

    return list(dict.fromkeys(s for v in (values or default) for s in parse_sizes(v, "--size")))


DEMAND_HELP = ("alltoallv: a synth.demand/1 file (the N x N matrix of bytes, weights or chunks each rank sends each "
               "other; `synth demand moe` writes one); without it 1 chunk per pair")


def demand_argument(path: str | None, kind: Any, topology: Topology, chunks: int | None = None,
                    option: str = "--demand") -> Any:
    """The chunked demand of ``--demand FILE`` for alltoallv (rounded to ``chunks`` in all, default
    :data:`synth.demand.DEFAULT_CHUNKS_PER_PAIR` per pair; the rounding error is noted), None without one.
    A demand for another collective, or one whose size is not the topology's, is refused naming the option."""
    from synth.collectives import Kind
    from synth.demand import Demand

    if path is None:
        return None
    if kind != Kind.ALLTOALLV:
        raise InputError("", option, f"a demand is for alltoallv (-c alltoallv), not {kind}")
    demand = Demand.from_file(path)
    if demand.ranks != topology.num_ranks:
        raise InputError(path, "ranks", f"the demand is for {demand.ranks} ranks, {topology.name} has "
                         f"{topology.num_ranks} gpus")
    chunked = demand.to_chunks(chunks=chunks)
    unit = {"bytes": "bytes", "weights": "weight", "chunks": "chunk"}[demand.unit]
    note(f"demand {shown(path)}: {chunked.chunks:,} chunks of {chunked.unit_per_chunk:.6g} {unit}s "
         f"(rounding: worst pair off by {100 * chunked.max_pair_error:.2f}%, {100 * chunked.moved_fraction:.3f}% "
         "of the total moved between pairs)")
    return chunked


SHARDS_HELP = ("allgather, reducescatter: uneven shards (allgatherv, reduce-scatterv), one size per rank in rank "
               "order, relative (1,3,2,0) or in bytes (1MiB,3MiB,2MiB,0); forest and direct take them")


def shards_argument(text: str | None, kind: Any, topology: Topology, option: str = "--shards") -> tuple[int, ...] | None:
    """``--shards`` as the smallest whole weights in the same proportions (None without it, or when every
    shard is the same size, noted), refused naming the option for another collective or a wrong count."""
    from synth.collectives import uneven_weights

    if text is None:
        return None
    weights = uneven_weights(kind, text, topology.num_ranks, field=option)
    if weights is None:
        note(f"{option}: every shard is the same size; the plain {kind}")
    return weights


def check_takes_shards(algorithm: str, option: str = "--shards") -> None:
    """Refuse uneven shards for a registered algorithm without a ``shards`` option, naming those with one."""
    from synth.algorithms import REGISTRY

    if algorithm in REGISTRY and not REGISTRY[algorithm].takes("shards"):
        raise InputError("", option, f"{algorithm} does not take uneven shards; "
                         f"{', '.join(name for name in sorted(REGISTRY) if REGISTRY[name].takes('shards'))} do")


def check_chunks(chunks: int, option: str) -> None:
    """Refuse a chunk count no schedule within the transfer limit could have (each chunk moves at least once)."""
    from synth import limits

    if chunks < 1:
        raise InputError("", option, f"expected a positive number of chunks, got {chunks}")
    limits.check_transfers(chunks, f"{chunks:,} chunks", hint="use fewer chunks")


def output_file(path: str, option: str = "--output", inputs: Sequence[str | None] | None = None,
                suffixes: tuple[str, ...] | None = None) -> str:
    """Check, before any work, that ``path`` can be written and is none of ``inputs`` (see synth.fileio)."""
    from synth.fileio import check_output_file

    check_output_file(path, option=option, inputs=[i for i in (inputs or []) if i], suffixes=suffixes)
    return path


#: How :func:`load_schedule` hands a file over: ``transfers`` (every command that needs the transfers), ``stored``
#: (as stored: the trees form stays trees, for the judges that read it), ``streamed`` (the transfers where
#: they fit the limit, else the trees form, for the consumers that stream it).
ScheduleUse = Literal["transfers", "stored", "streamed"]


@overload
def load_schedule(path: str) -> Schedule: ...
@overload
def load_schedule(path: str, use: ScheduleUse) -> ScheduleForm: ...
def load_schedule(path: str, use: ScheduleUse = "transfers") -> ScheduleForm:
    """Load a schedule file named on the command line, in the form the command uses (:data:`ScheduleUse`).

    A transfers-form file over the ``max_transfers`` limit is refused as it is read; a trees-form file
    (:mod:`synth.trees`) is expanded for ``transfers`` (refused with a clear message over the limit) and for
    ``streamed`` where it fits.
    """
    from synth import limits
    from synth.trees import read_schedule

    if not Path(path).exists():
        raise InputError(path, "", "no such file")
    stored = read_schedule(path)
    if use == "stored":
        return stored
    transfers, allowed = stored.num_transfers(), int(limits.limit_value("max_transfers"))
    if transfers <= allowed:
        return stored.expand()
    if use == "streamed":
        return stored  # only the trees form can be over the limit here: it streams
    raise InputError(path, "trees", f"the trees form expands to {transfers:,} transfers, over the limit of "
                     f"{allowed:,} (SYNTH_MAX_TRANSFERS), and this command needs the transfers; `synth verify` "
                     "reads the trees form as it is")


def group_argument(topology: Topology, group: str | None) -> Topology:
    """The view of ``topology`` for the process group a ``--group`` value names (``topology`` for None);
    see :mod:`synth.groups`."""
    from synth.groups import group_view, parse_group

    return topology if group is None else group_view(topology, parse_group(topology, group))


def schedule_group(schedule: ScheduleForm, topology: Topology, path: str) -> Topology:
    """``topology`` viewed as the schedule's process group when its ranks are some of its gpus
    (``topology`` itself when they are every gpu, in any order)."""
    from synth.groups import check_group, group_view

    ranks = tuple(schedule.ranks)
    members, gpus = set(ranks), set(topology.gpus)
    if members == gpus or not members <= gpus:
        return topology  # every gpu (in any order), or a rank the verifier names as not a gpu of it
    return group_view(topology, check_group(topology, ranks, path, "ranks"))


def check_made_for(schedule: ScheduleForm, topology: Topology, path: str, where: str) -> Topology:
    """``topology`` if the schedule was made for it (same fingerprint, when the schedule records one);
    otherwise refuse, naming where the topology came from."""
    from synth.topology import fingerprint

    topology = schedule_group(schedule, topology, path)
    expected = schedule.topology_sha256
    if expected is not None:
        found = fingerprint(topology)
        # the same fabric at achievable rates (SPEC@achievable) runs the schedules made for its line rates
        if found != expected and topology.metadata.get("line_rate_sha256") != expected:
            raise InputError(path, "topology_sha256", f"the schedule was made for a different topology than {where} "
                             f"(fingerprint {found[:12]}, expected {expected[:12]}); pass the topology it was made "
                             "for with --topology")
    return topology


def schedule_topology(schedule: ScheduleForm, spec: str | None, path: str) -> Topology:
    """The topology to judge a schedule on, never a different one than it was made for.

    ``--topology`` if given; else the topology file the schedule records (``topology_file``, relative to the
    schedule's folder); else the library entry it names. When the schedule carries ``topology_sha256``, the
    topology found must have that fingerprint, or the command stops with a message saying which differs.
    """
    from synth.library import library_topology
    from synth.topology import fingerprint

    if spec:
        return check_made_for(schedule, any_topology(spec), path, repr(spec))
    expected = schedule.topology_sha256
    if schedule.topology_file is not None:
        recorded = Path(schedule.topology_file)
        candidate = recorded if recorded.is_absolute() else Path(path).parent / recorded
        if _is_file(candidate):
            return check_made_for(schedule, any_topology(str(candidate)), path,
                                  f"its topology file {str(candidate)!r}")
        if expected is None:
            raise InputError(path, "topology_file", f"the schedule's topology file {str(candidate)!r} does not exist; "
                             "pass --topology FILE")
    missing = f"its topology file {schedule.topology_file!r} is missing and " if schedule.topology_file else ""
    try:
        topology = library_topology(schedule.topology)
    except InputError:
        raise InputError(path, "topology", f"{missing}the schedule names topology {schedule.topology!r}, which is not "
                         "in the library; pass --topology FILE") from None
    topology = schedule_group(schedule, topology, path)
    if expected is not None and fingerprint(topology) != expected:
        raise InputError(path, "topology", f"{missing}the library's {schedule.topology!r} is not the topology the "
                         "schedule was made for (a different fingerprint); pass --topology FILE")
    return topology


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def write_schedule(schedule: ScheduleForm, topology: Topology, spec: str | None, output: str,
                   inputs: Sequence[str | None] | None = None) -> ScheduleForm:
    """Write ``schedule`` to ``output`` atomically, recording where its topology came from (the file,
    relative to the output's folder, and the topology's fingerprint) so later commands find it again.

    Refuses a file over the schedule file limit, which every loader of schedules applies: synth never
    writes a schedule it would refuse to read.
    """
    import os

    from synth import limits
    from synth.fileio import atomic_write_text
    from synth.topology import fingerprint

    source = None
    if spec and _is_file(Path(spec)):
        topology_path = Path(spec).resolve()
        folder = Path(output).resolve().parent
        try:
            source = os.path.relpath(topology_path, folder)
        except ValueError:
            source = str(topology_path)
        if len(source) > len(str(topology_path)):
            source = str(topology_path)
    schedule = schedule.with_topology_source(source, fingerprint(topology))
    schedule.check_storable(repr(output))
    text = schedule.to_json()
    limits.check("max_schedule_bytes", len(text.encode("utf-8")), f"the schedule file {output!r}",
                 hint="it would be refused when read back; use fewer chunks or a smaller topology")
    atomic_write_text(output, text, inputs=[i for i in (inputs or []) if i])
    return schedule


@overload
def verify_file(schedule: Schedule, topology: Topology, path: str) -> VerifyReport: ...
@overload
def verify_file(schedule: ScheduleForm, topology: Topology, path: str) -> Verified: ...
def verify_file(schedule: ScheduleForm, topology: Topology, path: str) -> Verified:
    """Verify a schedule in either form read from (or imported out of) ``path``; a failure names the file."""
    from synth.errors import VerificationError
    from synth.verify_trees import verify_any

    try:
        return verify_any(schedule, topology)
    except VerificationError as error:
        raise VerificationError(f"{path}: {error}", error.transfer) from None


def write_csv(rows: list[list[Any]]) -> None:
    """Write rows (the first one the header) to stdout as CSV; a second table in the same run is set off
    by an empty line. Cells are printed as the table shows them, control characters escaped.

    Examples
    --------
    >>> write_csv([["size", "algorithm"], ["1MiB", "ring, 8 chunks"]])
    size,algorithm
    1MiB,"ring, 8 chunks"
    """
    import csv
    import io

    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([[one_line(str(cell)) for cell in row] for row in rows])
    if CSV_MODE.get("written"):
        sys.stdout.write("\n")
    sys.stdout.write(buffer.getvalue())
    sys.stdout.flush()
    CSV_MODE["written"] = True


def print_json(data: Any) -> None:
    """Print JSON to stdout (sorted keys off, stable order as built)."""
    if CSV_MODE["on"]:
        raise InputError("", "--csv", "choose one of --json and --csv")
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def one_line(text: str) -> str:
    """``text`` with every character that could break a line or fool a terminal escaped, repr-style.

    A file can then never forge a second ``error:`` line or hide text: newlines, carriage returns, escape
    sequences, other control and format characters and lone surrogates are shown as ``\\n``, ``\\x1b``...

    Examples
    --------
    >>> print(one_line("node 'a\\nerror: forged'"))
    node 'a\\nerror: forged'
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def shown(value: Any) -> str:
    r"""User text (a node id, a file name, a topology name) made safe to print: rich markup escaped and
    control characters shown repr-style, so a name can neither break the output nor forge a line.

    Examples
    --------
    >>> shown("gpu[/bold]\nerror: x")
    'gpu\\[/bold]\\nerror: x'
    """
    from rich.markup import escape

    return escape(one_line(str(value)))


def table(title: str | None, columns: list[str], rows: list[list[Any]], justify_right: set[int] | None = None) -> Table:
    """A rich table with the given columns; numeric columns right-aligned. Titles and cells are printed as
    plain text (see :func:`shown`)."""
    result = Table(title=None if title is None else shown(title), show_lines=False, header_style="bold")
    for index, column in enumerate(columns):
        result.add_column(column, justify="right" if justify_right and index in justify_right else "left")
    for row in rows:
        result.add_row(*[shown(cell) for cell in row])
    result.csv_rows = _csv_rows(columns, rows)  # type: ignore[attr-defined]
    return result


def _csv_rows(columns: list[str], rows: list[list[Any]]) -> list[list[Any]]:
    """A table's CSV form: times (cells made by :func:`fmt_time`) in seconds, to nine significant digits, under a
    header that says so (``time s``); every other cell as the table prints it.

    Examples
    --------
    >>> _csv_rows(["size", "time"], [["1MiB", fmt_time(1.5e-05)], ["1GiB", "-"]])
    [['size', 'time s'], ['1MiB', '1.5e-05'], ['1GiB', '-']]
    """
    timed = {index for row in rows for index, cell in enumerate(row) if isinstance(cell, TimeText)}
    header = [f"{column} s" if index in timed else column for index, column in enumerate(columns)]
    body = [[format(cell.seconds, ".9g") if isinstance(cell, TimeText) else cell.strip() if isinstance(cell, str) else cell
             for cell in row] for row in rows]
    return [header, *body]


class TimeText(str):
    """A time as a table prints it (``11.12 us``), carrying its value in seconds for ``--csv``."""

    seconds: float

    def __new__(cls, text: str, seconds: float) -> TimeText:
        made = super().__new__(cls, text)
        made.seconds = float(seconds)
        return made


def fmt_time(seconds: float) -> str:
    """Seconds with a readable unit; under ``--csv`` the cell is written in seconds (:class:`TimeText`)."""
    if seconds == 0:
        text = "0"
    elif seconds < 1e-3:
        text = f"{seconds * 1e6:.2f} us"
    elif seconds < 1:
        text = f"{seconds * 1e3:.3f} ms"
    else:
        text = f"{seconds:.3f} s"
    return TimeText(text, seconds)


def parse_options(items: list[str] | None) -> dict[str, Any]:
    """Parse ``-O key=value`` algorithm options (ints, floats, booleans, comma lists)."""
    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError("", "--option", f"expected key=value, got {item!r}")
        options[key.replace("-", "_")] = _typed(value)
    return options


def _typed(value: str) -> Any:
    from synth.errors import ascii_digits

    ascii_digits(value, "", "--option")
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if "," in value:
        return [_typed(v) for v in value.split(",") if v]
    if sum(ch.isdigit() for ch in value) > 30 and value.lstrip("+-").replace(".", "", 1).replace("e", "", 1).isdigit():
        raise InputError("", "--option", f"a number of more than 30 digits is not accepted, got {value[:20]}...")
    for cast in (int, float):
        try:
            number = cast(value)
        except ValueError:
            continue
        if isinstance(number, float) and not math.isfinite(number):
            raise InputError("", "--option", f"expected a finite number, got {value!r}")
        return number
    return value


# ------------------------------------------------------------------------ verbosity and progress
#: 0 quiet, 1 normal, 2 verbose; set by the global ``--quiet``/``--verbose`` flags or a command's own.
VERBOSITY = {"level": 1}
QUIET_OPTION = typer.Option(False, "--quiet", "-q", help="Print only results and errors: no progress, no notes.")
VERBOSE_OPTION = typer.Option(False, "--verbose", "-v", help="Also print details (timings, skipped algorithms).")


def set_verbosity(quiet: bool = False, verbose: bool = False) -> None:
    """Apply the global ``--quiet``/``--verbose`` (neither: normal)."""
    VERBOSITY["level"] = 0 if quiet else 2 if verbose else 1


def reset_csv_mode() -> None:
    """Start a command with ``--csv`` off (the option's callback turns it on)."""
    CSV_MODE.clear()
    CSV_MODE["on"] = False


def command_verbosity(quiet: bool, verbose: bool) -> None:
    """Apply a command's own ``--quiet``/``--verbose``, which override the global flags when given."""
    if quiet or verbose:
        set_verbosity(quiet, verbose)


def note(message: str) -> None:
    """A side remark on stderr, hidden by ``--quiet``."""
    if VERBOSITY["level"] >= 1:
        err_console.print(message, soft_wrap=True)


def detail(message: str) -> None:
    """A detail on stderr, shown only with ``--verbose``."""
    if VERBOSITY["level"] >= 2:
        err_console.print(f"[dim]{message}[/dim]", soft_wrap=True)


def progress_bar(total: int | None, description: str) -> Any:
    """A rich progress bar on stderr; disabled (a no-op) when quiet or when stdout is not a terminal.

    Use as ``with progress_bar(n, "running") as (bar, task): ... bar.update(task, advance=1)``.
    """
    import contextlib

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    disabled = VERBOSITY["level"] == 0 or not sys.stdout.isatty() or not err_console.is_terminal
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err_console, transient=True, disable=disabled)

    @contextlib.contextmanager
    def run() -> Any:
        with progress:
            yield progress, progress.add_task(description, total=total)

    return run()


# ------------------------------------------------------------------------------- execution plan
PROTOCOL_OPTION = typer.Option(
    "--protocol", help="wire protocol: auto (fastest of LL, LL128, Simple, as NCCL's tuner picks), LL, LL128, "
                       "Simple, or ideal (plain α-β: full bandwidth, no protocol latency)")
SLICE_BYTES_OPTION = typer.Option("--slice-bytes", help="bytes per slice (default: the protocol's step size, "
                                                        "512KiB for Simple)")
SLICES_OPTION = typer.Option("--slices", help="slices per chunk (default: chunk bytes / slice bytes, rounded up)")
WINDOW_OPTION = typer.Option("--window", help="slices in flight per transfer (default 8, NCCL_STEPS)")


def plan_options(protocol: str | None, slice_bytes: str | None, slices: int | None, window: int | None) -> Any:
    """The :class:`~synth.evaluate.PlanOptions` the plan flags ask for (None: the documented rule)."""
    from synth.evaluate import PlanOptions
    from synth.plan import MAX_SLICES, MAX_WINDOW, parse_protocol

    if protocol is not None:
        parse_protocol(protocol, "--protocol")
    size = parse_size(slice_bytes, "--slice-bytes") if slice_bytes is not None else None
    for name, value, upper in (("--slices", slices, MAX_SLICES), ("--window", window, MAX_WINDOW)):
        if value is not None and not 1 <= value <= upper:
            raise InputError("", name, f"expected a whole number in 1..{upper}, got {value}")
    return PlanOptions(protocol, size, slices, window)
