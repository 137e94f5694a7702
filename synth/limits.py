"""Resource limits: refuse a request up front, with the estimate, instead of after an hour or an OOM kill.

Every limit has a documented default and can be raised (or lowered) for one run with an environment
variable, e.g. ``SYNTH_MAX_TRANSFERS=20000000 synth generate ...``.

========================  ==========================  ====================================================
limit                     default                     what it bounds
========================  ==========================  ====================================================
``max_transfers``         4,000,000                   transfers in one schedule (about 1 KB of RAM each
                                                      while building, verifying and writing it)
``max_milp_variables``    200,000                     variables of one MILP/LP model
``max_milp_constraints``  400,000                     constraints of one MILP/LP model
``max_ranks``             16,384                      gpus an algorithm is asked to handle
``solver_seconds``        600                         default wall-clock limit of any solver call
========================  ==========================  ====================================================

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
from dataclasses import dataclass

from synth.collectives import Kind
from synth.errors import InputError, LimitError


@dataclass(frozen=True)
class Limit:
    """A named limit: its default, the environment variable that overrides it, and its unit."""

    name: str
    default: float
    env: str
    unit: str

    def value(self) -> float:
        """The limit in force: the environment override if set (validated), else the default."""
        text = os.environ.get(self.env)
        if text is None or not text.strip():
            return self.default
        try:
            number = float(text.replace("_", "").replace(",", ""))
        except ValueError:
            raise InputError(self.env, "", f"expected a number, got {text!r}") from None
        if not math.isfinite(number) or number <= 0:
            raise InputError(self.env, "", f"expected a positive number, got {text!r}")
        return number


LIMITS: dict[str, Limit] = {
    limit.name: limit
    for limit in (
        Limit("max_transfers", 4_000_000, "SYNTH_MAX_TRANSFERS", "transfers"),
        Limit("max_milp_variables", 200_000, "SYNTH_MAX_MILP_VARIABLES", "variables"),
        Limit("max_milp_constraints", 400_000, "SYNTH_MAX_MILP_CONSTRAINTS", "constraints"),
        Limit("max_ranks", 16_384, "SYNTH_MAX_RANKS", "ranks"),
        Limit("solver_seconds", 600, "SYNTH_SOLVER_SECONDS", "seconds"),
    )
}


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
    """Refuse a schedule estimated to have more than ``max_transfers`` transfers."""
    check("max_transfers", estimate, what, hint)


def check_milp(variables: int, constraints: int, what: str,
               hint: str = "use a smaller topology, fewer chunks or fewer time steps") -> None:
    """Refuse an MILP/LP model estimated to exceed the variable or constraint limit."""
    check("max_milp_variables", variables, what, hint)
    check("max_milp_constraints", constraints, what, hint)


def check_ranks(num_ranks: int, what: str, hint: str = "") -> None:
    """Refuse a topology with more gpus than ``max_ranks``."""
    check("max_ranks", num_ranks, what, hint)


def solver_time_limit(requested: float | None = None) -> float:
    """Wall-clock seconds a solver may run: ``requested`` if given (and positive), else the default limit.

    A requested limit above the configured one is allowed (the user asked for it explicitly).

    Examples
    --------
    >>> solver_time_limit(30.0)
    30.0
    """
    if requested is None:
        return float(limit_value("solver_seconds"))
    if not math.isfinite(requested) or requested <= 0:
        raise InputError("", "time_limit", f"expected a positive number of seconds, got {requested!r}")
    return float(requested)


def min_transfers(kind: Kind, num_ranks: int, chunks: int) -> int:
    """A lower bound on the transfers of any schedule for the collective (one transfer moves one chunk
    to one rank): every rank but one must receive (or, for reduce, send) each chunk it needs at least once.

    Examples
    --------
    >>> min_transfers(Kind.ALLGATHER, 8, 8), min_transfers(Kind.ALLREDUCE, 8, 8)
    (56, 112)
    """
    n = num_ranks
    if kind == Kind.ALLREDUCE:
        return 2 * (n - 1) * chunks
    if kind in (Kind.ALLGATHER, Kind.BROADCAST, Kind.REDUCE):
        return (n - 1) * chunks
    # reducescatter: every chunk needs N-1 contributions moved; alltoall: (N-1)/N of N*C chunks move
    return (n - 1) * chunks


def _count(number: float) -> str:
    return f"{int(number):,}" if float(number).is_integer() else f"{number:,.3g}"
