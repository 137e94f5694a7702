"""The selection layer: choosing, by simulation, which variant of an algorithm's schedule to run at a size.

Algorithms construct schedules from explicit options (forest: trees per root, ``spread``, the depth pass's
budget); they know nothing of message sizes' choices. What to choose among those variants for one message
size lives here, on top of the algorithms and the simulator:

- :class:`Search` owns the one step every choice repeats: simulate a candidate at the size (flow model,
  plan rule, an optional slice size) with a cutoff and a work limit, skip it when it is over a simulation
  limit (and say so), record its time under its key, and report it to a progress callback;
- a *chooser* per algorithm (:data:`CHOOSERS`) generates the candidates and decides which to try next
  (:mod:`synth.choose.forest`: forest's size choice; :mod:`synth.choose.insw`: the share of the
  chunks insw puts through the switches; :mod:`synth.choose.mcf`: the slice size mcf's relayed chunks
  stream fastest at; :mod:`synth.choose.milp`: milp's epoch length, greedy order, CP-SAT solution and
  dependency variant; :mod:`synth.choose.job`: a job's schedule set, one per collective run together);
- :func:`synthesize` is the entry every face uses (CLI, compare, tune, demo, catalog, sweep): with a
  ``size`` and a chooser for the algorithm it runs the choice (milp's always, at its default size when
  none is given), otherwise it constructs the schedule with :func:`synth.algorithms.synthesize`.

The choice's record travels in the schedule's ``params`` (``variant``, ``size``, ``size_choice`` with every
simulated candidate's time, ``modelled_time_s``), so every command reports the same time for the chosen
schedule: the chosen plan is pinned in ``params["plan"]``.

Examples
--------
>>> from synth.library import load_topology
>>> schedule = synthesize(load_topology("dgx1"), "allgather", "forest", size="1KiB")
>>> schedule.params["variant"], schedule.params["size_choice"]["model"]
('k=2', 'flow')
>>> synthesize(load_topology("ring:n=4"), "allgather", "ring").algorithm  # no chooser: constructed as is
'ring'
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synth.algorithms import lookup
from synth.algorithms import synthesize as construct
from synth.algorithms.utils import Progress, ProgressFunction, check_progress
from synth.collectives import Kind, parse_kind
from synth.errors import InputError, LimitError, NotApplicable
from synth.schedule import Schedule
from synth.topology import Topology

__all__ = ["CHOOSERS", "Candidate", "Chooser", "Search", "chooser_options", "synthesize", "threads"]

#: The phase name of the progress events a search sends for each candidate.
PHASE = "size choice"


def seconds_text(seconds: float | None) -> str:
    """A candidate's time as the choice reports it: ``3,244.09 us``, or ``slower, cut off`` (None or inf).

    Examples
    --------
    >>> seconds_text(0.00324409), seconds_text(None)
    ('3,244.09 us', 'slower, cut off')
    """
    if seconds is None or not math.isfinite(seconds):
        return "slower, cut off"
    return f"{seconds * 1e6:,.2f} us"


def threads() -> int:
    """How many simulations :meth:`Search.measure_many` runs at once: ``SYNTH_THREADS`` if set (1: one
    after another), else the cpus this process may use."""
    import os

    value = os.environ.get("SYNTH_THREADS")
    if value is not None:
        try:
            return max(1, int(value))
        except ValueError:
            raise InputError("", "SYNTH_THREADS", f"expected a whole number of threads, got {value!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Candidate:
    """One schedule :meth:`Search.measure_many` simulates: its key and label, slices, cutoff and note."""

    schedule: Schedule
    key: str
    label: str
    slice_bytes: int | None = None
    cutoff: float | None = None
    note: str = ""
    #: under the search's work limit (False: the candidates the others are cut off at)
    limited: bool = True
    #: simulated with the plain chunk-level α-β model (:func:`synth.flow.simulate` without a plan: the ideal
    #: protocol, one slice per chunk) instead of the plan rule: the yardstick of milp's epoch-level plans
    ideal: bool = False


class Search:
    """One choice among a schedule's variants at one message size, by simulation.

    Every candidate goes through :meth:`measure`: simulated with the flow model and the plan rule (or the
    candidate's slice size), stopped as soon as it is slower than ``cutoff``, refused past the
    evaluator's slice limit or this search's ``work_limit`` (then skipped and reported as not simulated,
    unless it is ``required``), recorded under its key in :attr:`times` (None: cut off as slower) and
    reported to the progress callback with the time since the search began.

    Parameters
    ----------
    topology : Topology
    kind : Kind
        The collective (progress events carry it).
    size : int
        The message size in bytes.
    progress : callable, optional
        Receives a :class:`~synth.algorithms.utils.Progress` event per candidate (phase ``"size choice"``)
        and one (``"done"``) from :meth:`done`.
    work_limit : int, optional
        The most link-sharing work (:attr:`synth.flow.FlowResult.sharing_work`) one limited simulation may
        do; a candidate past it is skipped.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize as construct
    >>> topo = load_topology("ring:n=4")
    >>> search = Search(topo, Kind.ALLGATHER, 2**20)
    >>> ring = construct(topo, "allgather", "ring")
    >>> fast = search.measure(ring, "ring", "ring")
    >>> search.measure(ring, "ring/cut", "ring, cut off", cutoff=fast / 2), search.times["ring/cut"]
    (inf, None)
    """

    def __init__(self, topology: Topology, kind: Kind, size: int, progress: ProgressFunction | None = None,
                 work_limit: int | None = None) -> None:
        self.topology = topology
        self.kind = kind
        self.size = size
        self.progress = progress
        self.work_limit = work_limit
        #: every simulated candidate's time by key (None: cut off as slower than the best at that point)
        self.times: dict[str, float | None] = {}
        self._started = time.monotonic()

    def report(self, phase: str, message: str) -> None:
        """Send the progress callback an event with the time since the search began."""
        if self.progress is not None:
            self.progress(Progress(phase, self.kind.value, elapsed_s=time.monotonic() - self._started,
                                   message=message))

    def measure(self, schedule: Schedule, key: str, label: str, *, slice_bytes: int | None = None,
                cutoff: float | None = None, limited: bool = True, required: bool = False,
                note: str = "", ideal: bool = False) -> float | None:
        """The candidate's time in seconds (``inf`` when slower than ``cutoff``), recorded and reported; None
        when it was not simulated because it is over a simulation limit (reported as such, not recorded).

        ``limited=False`` simulates without the search's work limit (the first candidates, whose times the
        others are cut off at); ``required=True`` lets a limit's :class:`~synth.errors.LimitError` through
        (a candidate the choice cannot do without). ``note`` is appended to the reported message;
        ``ideal=True`` simulates with the plain chunk-level model instead of the plan rule
        (:attr:`Candidate.ideal`).
        """
        candidate = Candidate(schedule, key, label, slice_bytes, cutoff, note, limited, ideal)
        outcome = self._simulate(candidate)
        if required and isinstance(outcome, LimitError):
            raise outcome
        return self._record(candidate, outcome)

    def measure_many(self, candidates: Sequence[Candidate]) -> list[float | None]:
        """:meth:`measure` of every candidate, simulated at once in threads (the flow model's compiled
        engine releases the GIL), then recorded and reported in the order given; each candidate keeps the
        cutoff it was given, so the times do not depend on which simulation ends first. At most
        :func:`threads` at a time."""
        if threads() > 1 and len(candidates) > 1:  # threads() first: a bad SYNTH_THREADS is refused every time
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(threads(), len(candidates))) as pool:
                outcomes = list(pool.map(self._simulate, candidates))
        else:
            outcomes = [self._simulate(candidate) for candidate in candidates]
        return [self._record(candidate, outcome) for candidate, outcome in zip(candidates, outcomes, strict=True)]

    def _simulate(self, candidate: Candidate) -> float | LimitError:
        """The candidate's time, or the limit that refused its simulation."""
        from synth.evaluate import evaluate

        work_limit = self.work_limit if candidate.limited else None
        try:
            if candidate.ideal:
                from synth.flow import simulate

                return simulate(candidate.schedule, self.topology, self.size, cutoff=candidate.cutoff,
                                work_limit=work_limit)
            return evaluate(candidate.schedule, self.topology, self.size, slice_bytes=candidate.slice_bytes,
                            cutoff=candidate.cutoff, work_limit=work_limit).time_s
        except LimitError as error:
            return error

    def _record(self, candidate: Candidate, outcome: float | LimitError) -> float | None:
        """Record and report one simulation's outcome (a refused one is reported, not recorded)."""
        if isinstance(outcome, LimitError):
            self.report(PHASE, f"{candidate.label}: not simulated (over a simulation limit){candidate.note}")
            return None
        self.times[candidate.key] = outcome if math.isfinite(outcome) else None
        self.report(PHASE, f"{candidate.label}: {seconds_text(outcome)}{candidate.note}")
        return outcome

    def done(self, message: str) -> None:
        """Report the choice (phase ``"done"``)."""
        self.report("done", message)


@dataclass(frozen=True)
class Chooser:
    """How one algorithm's variant is chosen for a size.

    ``function(topology, kind, size, progress=..., work_limit=..., **options)`` returns the chosen schedule with its
    record in ``params``; ``options`` names the options the choice takes beyond the algorithm's own
    (listed by ``synth algorithms``), with their defaults.
    """

    target: str
    options: Mapping[str, Any]
    #: the choice runs without a size too, at the algorithm's own default size (milp: its epochs are
    #: always cut for a size)
    always: bool = False

    def load(self) -> Callable[..., Schedule]:
        """Import and return the choice's function."""
        import importlib

        module_name, function_name = self.target.split(":")
        function: Callable[..., Schedule] = getattr(importlib.import_module(module_name), function_name)
        return function


#: The algorithms whose variant is chosen here for a size (the others use ``size`` as a rule of their own:
#: NCCL's tuning model, the tree's chunk count).
CHOOSERS: dict[str, Chooser] = {
    "milp": Chooser("synth.choose.milp:choose", {"size": None, "progress": None, "work_limit": None}, always=True),
    "forest": Chooser("synth.choose.forest:choose", {"size": None, "progress": None, "work_limit": None}),
    "insw": Chooser("synth.choose.insw:choose", {"size": None, "progress": None, "work_limit": None}),
    "mcf": Chooser("synth.choose.mcf:choose", {"size": None, "progress": None, "work_limit": None}),
}


def chooser_options(algorithm: str) -> Mapping[str, Any]:
    """The options the choice for ``algorithm`` takes beyond the algorithm's own (empty: no chooser)."""
    chooser = CHOOSERS.get(algorithm)
    return {} if chooser is None else chooser.options


def _check_names(algorithm: str, function: Callable[..., Schedule], chooser: Chooser,
                 options: Mapping[str, Any]) -> None:
    """Refuse an option neither the algorithm nor its chooser takes, listing what they take."""
    import inspect

    own = [name for name in inspect.signature(function).parameters if name not in ("topology", "kind")]
    takes = own + [name for name in chooser.options if name not in own]
    for key in options:
        if key not in takes:
            raise InputError("", "option", f"algorithm {algorithm!r} has no option {key!r}; it takes {', '.join(takes)}")


def synthesize(topology: Topology, collective: Kind | str, algorithm: str, **options: Any) -> Schedule:
    """A registered algorithm's schedule, its variant chosen for ``size`` where the algorithm has a chooser.

    The same call as :func:`synth.algorithms.synthesize`, plus the chooser's options
    (:func:`chooser_options`: forest's ``size``, ``progress`` and ``work_limit``). Without a size, or for an
    algorithm without a chooser, the schedule is constructed as asked.
    """
    kind = collective if isinstance(collective, Kind) else parse_kind(collective)
    chooser = CHOOSERS.get(algorithm)
    if chooser is None:
        return construct(topology, kind, algorithm, **options)
    entry = lookup(algorithm)
    if kind not in entry.collectives:
        supported = ", ".join(sorted(k.value for k in entry.collectives))
        raise NotApplicable(f"algorithm {algorithm!r} does not do {kind}; it does {supported}")
    _check_names(algorithm, entry.load(), chooser, options)
    choice = {name: options.pop(name) for name in list(options) if name in chooser.options}
    check_progress(choice.get("progress"))
    size = choice.get("size")
    rest = {name: value for name, value in choice.items() if name != "size"}
    if size is None and chooser.always:
        return chooser.load()(topology, kind, None, **rest, **options)
    if size is None:
        unused = sorted(name for name, value in choice.items() if value is not None and name != "progress")
        if unused:
            raise InputError("", unused[0], f"{algorithm}'s {unused[0]} applies to its size choice; give size too")
        return construct(topology, kind, algorithm, **options)
    from synth.units import parse_size

    nbytes = parse_size(size, "size")
    return chooser.load()(topology, kind, nbytes, **rest, **options)
