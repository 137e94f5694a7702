"""Resource limits: refuse a request up front, with the estimate, instead of after an hour or an OOM kill.

Every limit has a documented default and can be raised (or lowered) for one run with an environment
variable, e.g. ``SYNTH_MAX_TRANSFERS=20000000 synth generate ...``. An override must be a finite positive
number no larger than the limit's ceiling (``SYNTH_SOLVER_SECONDS=1e308`` is refused, not obeyed).

The limits, their defaults, variables and what each bounds are :data:`LIMITS`; :func:`table` prints them
as the README's table (``python -m synth.cli.reference --write`` keeps the README's copy current).
The memory limit's default is three quarters of the least of the machine's memory, the process's
address-space and data limits (``ulimit -v``, ``-d``) and its cgroup's ``memory.max``; the memory a command
is about to use is estimated before the work from what it will build or read (:data:`BYTES_PER_TRANSFER`,
:data:`BYTES_PER_TREE_ARC`, :data:`BYTES_PER_INPUT_BYTE`).

So a command asked for more than the machine can hold refuses in one line before allocating, with its
estimate, instead of being killed for memory part way.

An algorithm estimates what it is about to build and calls a ``check_*`` function before building it::

    from synth import limits
    limits.check_transfers(2 * (n - 1) * chunks, "ring allreduce", hint="use fewer chunks")

which raises :class:`~synth.errors.LimitError` (CLI exit code 2) with a message such as
``ring allreduce would make 134,152,192 transfers, over the limit of 4,000,000 (SYNTH_MAX_TRANSFERS);
use fewer chunks``. Solvers take their time limit from :func:`solver_time_limit`, so one always applies.

Examples
--------
>>> check_transfers(1000, "ring allgather")
>>> try:
...     check_transfers(10**9, "ring allgather", hint="use fewer chunks")
... except LimitError as error:
...     print(error)
ring allgather would make 1,000,000,000 transfers, over the limit of 4,000,000 (SYNTH_MAX_TRANSFERS); use fewer chunks
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from synth.errors import InputError, LimitError, ascii_digits


@dataclass(frozen=True)
class Limit:
    """A named limit: its default, the environment variable that overrides it, its unit, and the largest
    override accepted (a ceiling that keeps every computation with it finite)."""

    name: str
    default: float
    env: str
    unit: str
    ceiling: float = 1e15
    #: Computes the default when it depends on the machine (then ``default`` is unused).
    default_from: Callable[[], float] | None = None
    #: What the limit bounds and where it applies, for the README's table (:func:`table`).
    bounds: str = ""
    #: The default in words, where it is not a plain number (the memory limit's rule).
    default_text: str = ""

    def value(self) -> float:
        """The limit in force: the environment override if set (validated), else the default."""
        text = os.environ.get(self.env)
        if text is None or not text.strip():
            return self.default_from() if self.default_from is not None else self.default
        if len(text) > 40:
            raise InputError(self.env, "", f"expected a number, got a text of {len(text)} characters")
        ascii_digits(text, self.env, "")
        try:
            number = float(text.strip().replace("_", "").replace(",", ""))
        except ValueError:
            raise InputError(self.env, "", f"expected a number, got {text!r}") from None
        if not math.isfinite(number) or number <= 0:
            raise InputError(self.env, "", f"expected a positive number, got {text!r}")
        if number > self.ceiling:
            raise InputError(self.env, "", f"expected at most {_count(self.ceiling)} {self.unit}, got {text!r}")
        return number


#: 2^50 bytes: the largest message size accepted anywhere.
PIB = 2**50
#: Memory one transfer of a schedule costs while it is built, verified and written (measured: a direct
#: alltoall of 999,000 transfers on ``switch:n=1000`` peaks at 1.44 GB through ``synth generate``).
BYTES_PER_TRANSFER = 1_500
#: Memory one tree arc costs while a forest is planned (see ``max_tree_arcs``).
BYTES_PER_TREE_ARC = 300
#: Memory per byte of a JSON document while it is parsed and checked (measured: a 20 MB schedule of
#: 4.5 M deps peaks at 270 MB; documents of small numbers are the worst case).
BYTES_PER_INPUT_BYTE = 16
#: The share of the machine's memory (or of the process's limits) a command may plan to use.
MEMORY_SHARE = 0.75


def memory_available() -> float:
    """The default of ``max_memory_bytes``: :data:`MEMORY_SHARE` of the least of physical memory, the
    process's ``RLIMIT_AS`` and ``RLIMIT_DATA``, and its cgroup's ``memory.max`` (v2) or
    ``memory.limit_in_bytes`` (v1), whichever are known.

    Examples
    --------
    >>> memory_available() > 0
    True
    """
    known: list[float] = []
    try:
        known.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import resource

        for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
            soft = resource.getrlimit(which)[0]
            if soft != resource.RLIM_INFINITY and soft > 0:
                known.append(float(soft))
    except (ImportError, ValueError, OSError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as handle:
                text = handle.read(64).strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < 2**60:
            known.append(float(text))
    return MEMORY_SHARE * min(known) if known else float(2**40)

LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit("max_transfers", 4_000_000, "SYNTH_MAX_TRANSFERS", "transfers", 1e9,
              bounds="transfers in one schedule, built, read or imported (the trees form streams past it)"),
        Limit("max_milp_variables", 200_000, "SYNTH_MAX_MILP_VARIABLES", "variables", 1e9,
              bounds="variables of one MILP/LP model"),
        Limit("max_milp_constraints", 400_000, "SYNTH_MAX_MILP_CONSTRAINTS", "constraints", 1e9,
              bounds="constraints of one MILP/LP model"),
        Limit("max_ranks", 16_384, "SYNTH_MAX_RANKS", "ranks", 1e7, bounds="gpus of any command's topology"),
        Limit("solver_seconds", 600, "SYNTH_SOLVER_SECONDS", "seconds", 1e6,
              bounds="wall-clock time of one solver call, when no time limit is given"),
        Limit("max_input_bytes", 32 * 2**20, "SYNTH_MAX_INPUT_BYTES", "bytes", 2**40,
              bounds="a topology, sketch, sweep spec, demand, job, network or MSCCL XML file"),
        Limit("max_yaml_bytes", 4 * 2**20, "SYNTH_MAX_YAML_BYTES", "bytes", 2**40,
              bounds="a YAML file (YAML parses about 100 times slower than JSON)"),
        Limit("max_schedule_bytes", 512 * 2**20, "SYNTH_MAX_SCHEDULE_BYTES", "bytes", 2**40,
              bounds="a schedule file, read or written (generate never writes one that could not be read back)"),
        Limit("max_message_bytes", PIB, "SYNTH_MAX_MESSAGE_BYTES", "bytes", 2**62, default_text="1 PiB",
              bounds="a message size (`--size`, `--max-bytes`, sweep sizes)"),
        Limit("max_sweep_rows", 100_000, "SYNTH_MAX_SWEEP_ROWS", "rows", 1e10,
              bounds="points x sizes of one sweep, counted before the grid is expanded"),
        Limit("max_verify_steps", 200_000_000, "SYNTH_MAX_VERIFY_STEPS", "steps", 1e13,
              bounds="the verifier's search proving each cell's accesses ordered"),
        Limit("max_graph_work", 2_000_000_000, "SYNTH_MAX_GRAPH_WORK", "steps", 1e15,
              bounds="max-flow work of the exact bounds and the tree packing"),
        Limit("max_tree_arcs", 20_000_000, "SYNTH_MAX_TREE_ARCS", "tree arcs", 1e10,
              bounds="arcs of a forest plan's trees, planned or read in the trees form"),
        Limit("max_memory_bytes", 0, "SYNTH_MAX_MEMORY_BYTES", "bytes of memory", 2**50,
              default_from=memory_available,
              bounds=f"memory a command is about to use, estimated before the work ({BYTES_PER_TRANSFER:,} B per "
                     f"transfer, {BYTES_PER_TREE_ARC} B per tree arc, {BYTES_PER_INPUT_BYTE} B per byte of a "
                     "document read)",
              default_text="3/4 of the least of the machine's memory, `ulimit -v` / `-d` and the cgroup's "
                           "`memory.max`"),
    )
}


def table() -> str:
    """Every limit as one Markdown table (limit, default, variable, what it bounds): the README's.

    Examples
    --------
    >>> table().splitlines()[2].split(" | ")[:3]
    ['| `max_transfers`', '4,000,000 transfers', '`SYNTH_MAX_TRANSFERS`']
    """
    lines = ["| limit | default | variable | what it bounds |", "|---|---|---|---|"]
    for limit in LIMITS.values():
        default = limit.default_text or _default_words(limit)
        lines.append(f"| `{limit.name}` | {default} | `{limit.env}` | {limit.bounds} |")
    return "\n".join(lines) + "\n"


def _default_words(limit: Limit) -> str:
    if limit.unit == "bytes":
        from synth.units import format_size

        return format_size(int(limit.default), sep=" ")
    return f"{_count(limit.default)} {limit.unit}"


def limit_value(name: str) -> float:
    """The value in force of the limit called ``name`` (see the table above)."""
    try:
        return LIMITS[name].value()
    except KeyError:
        raise KeyError(f"unknown limit {name!r}; known: {', '.join(LIMITS)}") from None


def check(name: str, estimate: float, what: str, hint: str = "") -> None:
    """Raise :class:`LimitError` when ``estimate`` exceeds the limit ``name``.

    Parameters
    ----------
    name : str
        A key of :data:`LIMITS`.
    estimate : float
        What the request would need, in the limit's unit.
    what : str
        The request, as the user would name it ("ring allreduce on 1024 ranks").
    hint : str
        What the user can do instead ("use fewer chunks").
    """
    limit = LIMITS[name]
    allowed = limit.value()
    if estimate > allowed:
        verb = "make" if limit.unit == "transfers" else "need"
        advice = f"; {hint}" if hint else ""
        raise LimitError(f"{what} would {verb} {_count(estimate)} {limit.unit}, over the limit of "
                         f"{_count(allowed)} ({limit.env}){advice}")


def check_transfers(estimate: int, what: str, hint: str = "use fewer chunks or a smaller topology") -> None:
    """Refuse a schedule estimated to have more than ``max_transfers`` transfers, or to need more memory
    than ``max_memory_bytes`` (:data:`BYTES_PER_TRANSFER` each)."""
    check("max_transfers", estimate, what, hint)
    check_memory(estimate * BYTES_PER_TRANSFER, f"{what} ({_count(estimate)} transfers)", hint)


def check_memory(estimate: float, what: str, hint: str = "") -> None:
    """Refuse work estimated to need more than ``max_memory_bytes`` of memory.

    Examples
    --------
    >>> check_memory(1000, "a small thing")
    """
    if estimate <= 0:
        return
    limit = LIMITS["max_memory_bytes"]
    allowed = limit.value()
    if estimate > allowed:
        advice = f"; {hint}" if hint else ""
        raise LimitError(f"{what} would need about {_gigabytes(estimate)} of memory, over the limit of "
                         f"{_gigabytes(allowed)} ({limit.env}, by default 3/4 of the machine's or the process's "
                         f"memory){advice}")


def _gigabytes(number: float) -> str:
    return f"{number / 1e9:,.1f} GB" if number >= 1e8 else f"{number / 1e6:,.1f} MB"


def check_milp(variables: int, constraints: int, what: str,
               hint: str = "use a smaller topology, fewer chunks or fewer time steps") -> None:
    """Refuse an MILP/LP model estimated to exceed the variable or constraint limit."""
    check("max_milp_variables", variables, what, hint)
    check("max_milp_constraints", constraints, what, hint)


def check_ranks(num_ranks: int, what: str, hint: str = "") -> None:
    """Refuse a topology with more gpus than ``max_ranks``."""
    check("max_ranks", num_ranks, what, hint)


def graph_work(num_ranks: int, num_links: int) -> int:
    """The work estimate of the exact bounds and the tree packing on a topology: one max-flow per gpu on a
    graph of ``num_links`` directed links, times log2 of the gpu count for the search over rates.

    Examples
    --------
    >>> graph_work(16, 64)
    4096
    """
    return max(1, num_ranks) * max(1, num_links) * max(1, math.ceil(math.log2(max(2, num_ranks))))


def quotient_work(num_ranks: int, num_links: int, representatives: int) -> int:
    """The work estimate of the quotient method (:mod:`synth.cuts.quotient`): colour refinement over every
    link, about log2 of the gpu count rounds, once per orbit representative and for the orbit search.

    Examples
    --------
    >>> quotient_work(16384, 98304, 1)
    2752512
    """
    rounds = max(1, math.ceil(math.log2(max(2, num_ranks))))
    return (1 + max(1, representatives)) * max(1, num_links) * rounds


def check_graph_work(num_ranks: int, num_links: int, what: str,
                     hint: str = "use a smaller topology", representatives: int | None = None) -> None:
    """Refuse an exact bound (or tree packing) whose work is over ``max_graph_work``: :func:`graph_work`
    (a max-flow per gpu), or :func:`quotient_work` when ``representatives`` (gpu orbits the quotient
    method tests) is given."""
    if representatives is not None:
        check("max_graph_work", quotient_work(num_ranks, num_links, representatives),
              f"{what} on {num_ranks:,} gpus, {num_links:,} directed links and {representatives:,} gpu orbits "
              "((orbits + 1) x links x log2 gpus)", hint)
        return
    check("max_graph_work", graph_work(num_ranks, num_links),
          f"{what} on {num_ranks:,} gpus and {num_links:,} directed links (gpus x links x log2 gpus)", hint)


def solver_time_limit(requested: float | None = None, default: float | None = None) -> float:
    """Wall-clock seconds a solver may run: ``requested`` if given (and positive), else ``SYNTH_SOLVER_SECONDS``
    when set, else ``default`` (a solver's own quicker default) or the limit's default (600 s).

    A requested limit above the configured one is allowed (the user asked for it explicitly).

    Examples
    --------
    >>> solver_time_limit(30.0)
    30.0
    """
    if requested is None:
        if default is not None and not (os.environ.get(LIMITS["solver_seconds"].env) or "").strip():
            return float(default)
        return float(limit_value("solver_seconds"))
    if isinstance(requested, bool) or not isinstance(requested, int | float) or not math.isfinite(requested) \
            or requested <= 0:
        raise InputError("", "time_limit", f"expected a positive number of seconds, got {requested!r}")
    ceiling = LIMITS["solver_seconds"].ceiling
    if requested > ceiling:
        raise InputError("", "time_limit", f"expected at most {_count(ceiling)} seconds, got {requested!r}")
    return float(requested)


def _count(number: float) -> str:
    if isinstance(number, int):
        return f"{number:,}" if abs(number) < 10**30 else f"{float(number):.3g}"
    if not math.isfinite(number):
        return str(number)
    return f"{int(number):,}" if float(number).is_integer() and abs(number) < 1e30 else f"{number:,.3g}"
