"""The evaluator: congestion bound, the execution plan, timing models and nccl-tests metrics.

One (schedule, size, model) gives one time in every command: each model applies the one plan rule of
:mod:`synth.plan` (slices, slices in flight, protocol), every result carries the plan it used, and the
options that override the plan (``protocol``, ``slice_bytes``, ``slices``, ``window``) do so explicitly.

Models
------
``flow``
    The flow-level simulator of :mod:`synth.flow`: slices stream with max-min fair link sharing, a
    transfer's latency overlaps its slices, the protocol's costs apply. Protocol ``auto`` (the default)
    tries LL, LL128 and Simple and keeps the fastest, as NCCL's tuner does; a schedule may pin one in
    ``params["plan"]``.
``astra``
    ASTRA-sim's congestion-aware analytical network replayed on the exact Chakra traces synth exports
    (:mod:`synth.astra`). ASTRA-sim has no protocols: the plan is the ``ideal`` protocol, and the trace is
    the schedule's chunks as exported (1 slice per chunk).

Metrics follow nccl-tests: algbw = n / t, busbw = algbw x factor (see :mod:`synth.collectives`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from synth.errors import InputError, LimitError
from synth.flow import simulate
from synth.plan import AUTO_PROTOCOLS, PROTOCOL_COSTS, Plan, Protocol, make_plan, parse_protocol, pinned
from synth.schedule import ScheduleForm
from synth.topology import Topology

GIGA = 10**9
MICRO = 1e-6
#: Most slice transfers (transfers x slices per chunk) one simulation may take: about a minute on one core
#: (``python -m bench --only flow``). Past it the evaluator refuses with the estimate and the flags that
#: lower it, rather than change the plan without a word.
MAX_SLICE_TRANSFERS = 20_000_000


@dataclass(frozen=True)
class CongestionReport:
    """The schedule's bandwidth-only time: busiest link bytes over its bandwidth.

    ``seconds_per_byte`` is exact: the time for a message of ``size`` bytes is
    ``size * seconds_per_byte`` seconds.
    """

    seconds_per_byte: Fraction
    busiest_links: tuple[tuple[str, str, Fraction], ...]
    chunks_per_link: dict[tuple[str, str], int] = field(repr=False, compare=False)

    def time(self, size: int) -> float:
        """Congestion-bound time in seconds for a message of ``size`` bytes."""
        return float(self.seconds_per_byte * size)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a schedule at one message size (the documented ``--json`` record)."""

    size: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    congestion_time_s: float
    model: str
    plan: Plan

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict, in documented field order (the plan's fields last)."""
        return {"size": self.size, "time_s": self.time_s, "algbw_GBps": self.algbw_GBps,
                "busbw_GBps": self.busbw_GBps, "congestion_time_s": self.congestion_time_s,
                "model": self.model, **self.plan.to_dict()}


def congestion(schedule: ScheduleForm, topology: Topology, top: int = 5) -> CongestionReport:
    """Exact congestion bound of a schedule in either form: max over links of (chunks x chunk bytes) /
    bandwidth (the trees form's link loads come from its trees, without building its transfers).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=4")
    >>> report = congestion(synthesize(topo, "allgather", "ring"), topo)
    >>> report.time(4 * 10**9) == 3 / 4 * 4 * 10**9 / (topo.bandwidth("gpu0", "gpu1") * 10**9)
    True
    >>> from synth.algorithms.forest import forest_trees
    >>> from synth.collectives import Kind
    >>> form = forest_trees(load_topology("dgx1"), Kind.ALLGATHER)
    >>> congestion(form, load_topology("dgx1")) == congestion(form.expand(), load_topology("dgx1"))
    True
    """
    return _congestion_report(schedule.link_chunks(), schedule.collective.chunks, topology, top)


def _congestion_report(counts: dict[tuple[str, str], int], chunks: int, topology: Topology, top: int) -> CongestionReport:
    per_link = {hop: Fraction(count, chunks) / (topology.exact_bandwidth(*hop) * GIGA) for hop, count in counts.items()}
    ranked = sorted(per_link.items(), key=lambda item: (-item[1], item[0]))
    worst = ranked[0][1] if ranked else Fraction(0)
    busiest = tuple((u, v, spb) for (u, v), spb in ranked[:top])
    return CongestionReport(worst, busiest, counts)


def metrics(schedule: ScheduleForm, size: int, time_s: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s by the nccl-tests conventions."""
    if time_s <= 0:
        return float("inf"), float("inf")
    algbw = size / time_s / GIGA
    return algbw, algbw * schedule.collective.busbw_factor()


@dataclass(frozen=True)
class Model:
    """A timing model: ``function(schedule, topology, size, plan) -> seconds``.

    ``protocols``: the model charges protocol costs (else only ``ideal`` applies); ``slicing``: it
    streams chunks in the plan's slices (else every chunk is one slice); ``cutoff``: the function takes
    a ``cutoff=`` keyword (seconds) and returns ``inf`` as soon as it knows the time would exceed it;
    ``work_limit``: it takes a ``work_limit=`` keyword and raises :class:`~synth.errors.LimitError` past it.
    """

    name: str
    function: Callable[..., float]
    protocols: bool
    slicing: bool
    cutoff: bool = False
    work_limit: bool = False


MODELS: dict[str, Model] = {}


def register_model(name: str, function: Callable[..., float], *, protocols: bool, slicing: bool,
                   cutoff: bool = False, work_limit: bool = False) -> None:
    """Register a timing model (see :class:`Model`)."""
    MODELS[name] = Model(name, function, protocols, slicing, cutoff, work_limit)


def _load_optional_models() -> None:
    if "astra" not in MODELS:
        import synth.astra  # noqa: F401  (registers the model)


def get_model(name: str) -> Model:
    """The registered model called ``name``; raises :class:`InputError` naming the known ones."""
    _load_optional_models()
    if name not in MODELS:
        raise InputError("", "model", f"unknown evaluator model {name!r}; expected one of {', '.join(sorted(MODELS))}")
    return MODELS[name]


@dataclass(frozen=True)
class PlanOptions:
    """What a user asked of the plan; None leaves a field to the schedule's pins, then to the rule.

    ``protocol`` is a protocol name or ``"auto"`` (None also means auto unless the schedule pins one).
    """

    protocol: str | None = None
    slice_bytes: int | None = None
    slices: int | None = None
    window: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON fields (None where not given)."""
        return {"protocol": self.protocol, "slice_bytes": self.slice_bytes, "slices": self.slices,
                "window": self.window}


def candidate_plans(schedule: ScheduleForm, size: int, model: Model, options: PlanOptions | None = None) -> list[Plan]:
    """The plans to try for ``schedule`` at ``size``: one, or one per protocol when the protocol is auto.

    Precedence: ``options`` (explicit), then the schedule's ``params["plan"]`` pins, then the rule of
    :mod:`synth.plan`.
    """
    options = options or PlanOptions()
    pins = pinned(schedule.params)
    chosen: Protocol | None = None
    if options.protocol is not None:
        chosen = parse_protocol(options.protocol)
    if chosen is None and options.protocol is None:
        chosen = pins.get("protocol")
    if not model.protocols:
        if chosen not in (None, Protocol.IDEAL) and options.protocol is not None:
            raise InputError("", "protocol", f"the {model.name} model has no protocols; set `protocol` to ideal or auto")
        chosen = Protocol.IDEAL
    slice_bytes = options.slice_bytes if options.slice_bytes is not None else pins.get("slice_bytes")
    window = options.window if options.window is not None else pins.get("window")
    slices = options.slices
    if not model.slicing:
        if slices not in (None, 1) or options.slice_bytes is not None:
            raise InputError("", "slices", f"the {model.name} model runs every chunk as one message; "
                             "give the schedule more chunks instead")
        slices = 1
    protocols = [chosen] if chosen is not None else list(AUTO_PROTOCOLS)
    return [make_plan(schedule.collective.chunks, size, protocol, slice_bytes=slice_bytes, window=window,
                      slices=slices) for protocol in protocols]


def evaluate_sizes(schedule: ScheduleForm, topology: Topology, sizes: Iterable[int], model: str = "flow",
                   options: PlanOptions | None = None, cutoff: float | None = None,
                   work_limit: int | None = None) -> list[Evaluation]:
    """Evaluate a schedule at several message sizes (the congestion report is computed once).

    With protocol auto, each protocol is simulated unless its lower bound (the congestion time at the
    protocol's efficiency plus its base latency) already exceeds the best time found; ties go to the
    protocol tried first (the one with the smaller lower bound, then LL, LL128, Simple). A protocol's
    simulation also stops as soon as it cannot beat the best time found (models that support it).

    ``cutoff`` (seconds): a caller choosing among candidates that only needs to know whether this one
    is faster; a size whose time would exceed it is reported with ``time_s`` = ``inf``.

    ``work_limit``: the most link-sharing work one simulation may do (models that support it, such as
    ``flow``: see :func:`synth.flow.simulate`), past which :class:`~synth.errors.LimitError` is raised; for
    callers that try optional candidates (forest's size choice).

    A schedule in the trees form (:mod:`synth.trees`): the congestion time comes from its trees and the
    flow model streams its transfers (past the transfer limit); other models get its expansion.
    """
    chosen_model = get_model(model)
    if work_limit is not None and (isinstance(work_limit, bool) or not isinstance(work_limit, int) or work_limit < 0):
        raise InputError("", "work_limit", f"expected a whole number of work units, at least 0, got {work_limit!r}")
    report = congestion(schedule, topology)
    if chosen_model.name != "flow":  # the flow model streams the trees form; the others take the transfers
        schedule = schedule.expand()
    results = []
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InputError("", "size", f"expected a positive whole number of bytes, got {size!r}")
        bandwidth_time = report.time(size)
        plans = candidate_plans(schedule, size, chosen_model, options)
        for plan in plans:
            _check_work(schedule, size, plan)
        floor = {plan: bandwidth_time / float(plan.costs.efficiency) + plan.costs.base_latency_us * MICRO
                 for plan in plans}
        best: tuple[float, Plan] | None = None
        for plan in sorted(plans, key=lambda p: floor[p]):
            if best is not None and floor[plan] >= best[0]:
                continue
            if cutoff is not None and floor[plan] > cutoff:
                seconds = math.inf
                if best is None:
                    best = (seconds, plan)
                continue
            limit = cutoff if best is None else best[0] if cutoff is None else min(cutoff, best[0])
            keywords: dict[str, Any] = {}
            if limit is not None and chosen_model.cutoff:
                keywords["cutoff"] = limit
            if work_limit is not None and chosen_model.work_limit:
                keywords["work_limit"] = work_limit
            seconds = chosen_model.function(schedule, topology, size, plan, **keywords)
            if best is None or seconds < best[0]:
                best = (seconds, plan)
        assert best is not None
        seconds, plan = best
        algbw, busbw = metrics(schedule, size, seconds)
        results.append(Evaluation(size, seconds, algbw, busbw, bandwidth_time, model, plan))
    return results


def _check_work(schedule: ScheduleForm, size: int, plan: Plan) -> None:
    count = schedule.num_transfers()
    work = count * plan.slices
    if work <= MAX_SLICE_TRANSFERS:
        return
    fewest = max(1, MAX_SLICE_TRANSFERS // max(1, count))
    chunk = size / schedule.collective.chunks
    raise LimitError(
        f"evaluating {schedule.algorithm} {schedule.kind} at {size} bytes under {plan.describe()}: "
        f"{count} transfers x {plan.slices} slices = {work:,} slice transfers, over the limit of "
        f"{MAX_SLICE_TRANSFERS:,} (about a minute of simulation); ask for at most {fewest} slices per chunk "
        f"(`slices` {fewest}, or `slice_bytes` {math.ceil(chunk / fewest)})")


def evaluate(schedule: ScheduleForm, topology: Topology, size: int, model: str = "flow",
             options: PlanOptions | None = None, cutoff: float | None = None, work_limit: int | None = None,
             **plan: Any) -> Evaluation:
    """Evaluate a schedule at one message size with the chosen model and plan.

    Plan fields may be given as ``options`` or as keywords (``protocol=``, ``slice_bytes=``,
    ``slices=``, ``window=``).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=4")
    >>> result = evaluate(synthesize(topo, "allreduce", "ring"), topo, 2**20)
    >>> result.model, result.plan.protocol.value, result.time_s > 0
    ('flow', 'LL128', True)
    >>> evaluate(synthesize(topo, "allreduce", "ring"), topo, 2**20, protocol="Simple").plan.describe()
    'Simple, 1 slice of 256 KiB per chunk, 8 in flight'
    """
    if plan:
        unknown = set(plan) - {"protocol", "slice_bytes", "slices", "window"}
        if unknown:
            raise InputError("", sorted(unknown)[0], "unknown plan option; expected protocol, slice_bytes, slices, window")
        options = PlanOptions(**{**(options.to_dict() if options else {}), **plan})
    return evaluate_sizes(schedule, topology, [size], model, options, cutoff, work_limit)[0]


def protocol_costs_table() -> Mapping[str, Mapping[str, float]]:
    """The protocols' costs as plain numbers (for ``--json`` outputs and the README)."""
    return {p.value: {"efficiency": float(c.efficiency), "base_latency_us": c.base_latency_us,
                      "step_latency_us": c.step_latency_us, "network_step_latency_us": c.network_step_latency_us,
                      "slice_bytes": c.slice_bytes} for p, c in PROTOCOL_COSTS.items()}


register_model("flow", simulate, protocols=True, slicing=True, cutoff=True, work_limit=True)
