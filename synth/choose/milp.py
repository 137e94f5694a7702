"""milp's choice: the epoch length, greedy order, CP-SAT solution and dependency variant that simulate fastest.

:func:`synth.algorithms.milp.milp` constructs from explicit variants and compares them in its epoch model
alone. The epoch model is coarse (a transfer takes a whole number of epochs; latency and bandwidth are
rounded into them), so every command runs this choice instead, phase by phase (allreduce: the
reduce-scatter, then the allgather), each plan simulated as the forward schedule on its phase's topology
with the plain chunk-level α-β model (the ideal protocol, one slice per chunk, :func:`synth.flow.simulate`:
the model the epochs approximate), best of its two dependency variants:

1. the epoch: for each candidate of :meth:`~synth.algorithms.milp.PhaseSetup.epoch_lengths`, finest first,
   the greedy plan of the interleaved request order; the fastest whose plan fits ``max_epochs`` wins
   (none fits: the one with the fewest epochs); an epoch the options or the sketch fix is taken as is;
2. the greedy order: of the three request orders' plans at that epoch, the fastest is CP-SAT's hint and
   horizon, and every one of them is a route of the split model;
3. the solution: of CP-SAT's solutions and the greedy plan, the fastest
   (:meth:`~synth.algorithms.milp.PhaseSetup.solve` with this yardstick);
4. the dependency variant of the whole schedule (``order_deps="auto"``): ``"link"`` or ``"none"``,
   whichever simulates faster.

Every simulation goes through one :class:`~synth.choose.Search` per phase (progress, work limit); the
times of the epoch candidates are kept in ``params["epoch_choice"]`` (seconds, None: not simulated, over a
simulation limit), the chosen plan's and the greedy plan's in ``simulated_us`` / ``greedy_us``, and when
CP-SAT's plan won, both under synth's evaluator with the default plan rule in ``evaluated_us``.

Examples
--------
>>> from synth.library import load_topology
>>> schedule = choose(load_topology("ring:n=4"), Kind.ALLGATHER, 4096, time_limit_s=2)
>>> schedule.params["epochs"], schedule.params["result"], sorted(schedule.params["epoch_choice"]["allgather"])
(2, 'optimal', ['0.52048', '0.78072'])
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from synth.algorithms.milp import (
    GREEDY_ORDERS,
    PhaseResult,
    PhaseSetup,
    Problem,
    prepare,
    time_text,
)
from synth.algorithms.milp_instance import Instance, Plan
from synth.algorithms.utils import ProgressFunction
from synth.choose import Search
from synth.collectives import Kind
from synth.errors import InputError
from synth.schedule import Schedule
from synth.topology import Topology

__all__ = ["FlowRank", "choose"]

T = TypeVar("T")


def _fastest(candidates: Iterable[T], seconds: Callable[[T], float]) -> tuple[float, T] | None:
    """The first candidate no later one beats by more than a relative 1e-9 (round-off is no win), with its
    time; None for no candidates."""
    best: tuple[float, T] | None = None
    for candidate in candidates:
        time_s = seconds(candidate)
        if best is None or time_s < best[0] * (1 - 1e-9):
            best = (time_s, candidate)
    return best


def choose(topology: Topology, kind: Kind, size: int | str | None = None, *, progress: ProgressFunction | None = None,
           work_limit: int | None = None, **options: Any) -> Schedule:
    """milp's schedule (``options`` as :func:`~synth.algorithms.milp.milp` takes them) with its variants chosen
    by simulation at ``size`` bytes (None: milp's default size; see the module notes). ``work_limit`` caps
    each simulation's link-sharing work (a plan past it is not simulated and counts as slowest)."""
    if work_limit is not None and (isinstance(work_limit, bool) or not isinstance(work_limit, int) or work_limit < 0):
        raise InputError("", "work_limit", f"expected a whole number of link-sharing work units, got {work_limit!r}")
    if size is not None:
        options["size"] = size
    problem = prepare(topology, kind, progress=progress, **options)
    phases: list[tuple[str, PhaseResult]] = []
    record: dict[str, dict[str, float | None]] = {}
    for setup in problem.setups():
        rank = FlowRank(setup, work_limit)
        instance, plan, candidates = _choose_epoch(setup, rank)
        result = setup.solve(instance, plan, candidates, rank)
        if result.info["greedy_epochs"] is not None:
            result.info["greedy_us"] = rank.seconds(instance, result.info["greedy_plan"]) * 1e6
        result.info["simulated_us"] = rank.seconds(instance, result.plan) * 1e6
        phases.append((setup.name, result))
        record[setup.name] = rank.epochs
    schedule = _fastest_variant(problem, phases)
    params = {**schedule.params, "epoch_choice": record}
    if any(result.plan is not result.info["greedy_plan"] for _, result in phases):
        params.update(_evaluated(problem, phases, schedule))
    return dataclasses.replace(schedule, params=params)


class FlowRank:
    """The yardstick of milp's choice: a phase plan's time as its forward schedule, in the flow model
    with one slice per chunk and the ideal protocol, the faster of its two dependency variants (each
    simulated once per plan)."""

    verb = "simulate"

    def __init__(self, setup: PhaseSetup, work_limit: int | None) -> None:
        self.setup = setup
        self.search = Search(setup.topology, setup.problem.collective.kind, setup.problem.settings.size,
                             setup.problem.settings.report, work_limit=work_limit)
        #: the epoch candidates' times (seconds by epoch length; None: not simulated)
        self.epochs: dict[str, float | None] = {}
        # keyed by id, holding the plan so that its id cannot be reused by another plan while cached
        self._cache: dict[int, tuple[Plan, float]] = {}

    def seconds(self, instance: Instance, plan: Plan) -> float:
        """The plan's simulated time in seconds (``inf`` when over the work limit in both variants)."""
        hit = self._cache.get(id(plan))
        if hit is not None and hit[0] is plan:
            return hit[1]
        label = f"{self.setup.name}: {time_text(instance.epoch_us)} epochs, plan {len(self._cache) + 1} " \
                f"({plan.makespan} epochs)"
        best = math.inf
        for variant in ("link", "none"):
            schedule = self.setup.forward_schedule(instance, plan, variant)
            seconds = self.search.measure(schedule, f"{label}, {variant}", f"{label}, {variant} deps", ideal=True)
            if seconds is not None:
                best = min(best, seconds)
        self._cache[id(plan)] = (plan, best)
        return best


def _choose_epoch(setup: PhaseSetup, rank: FlowRank) -> tuple[Instance, Plan | None, list[Plan]]:
    """The chosen epoch's instance, its fastest greedy plan and every greedy plan made for it (steps 1 and
    2 of the module notes)."""
    fixed = setup.fixed_epoch()
    if fixed is not None:
        instance = setup.instance(fixed)
        return (instance, *_best_plan(setup, instance, rank))
    best: tuple[float, Instance, Plan] | None = None
    fallback: tuple[Instance, Plan | None] | None = None
    for epoch in setup.epoch_lengths():
        instance = setup.instance(epoch)
        plan = setup.greedy(instance, GREEDY_ORDERS[0])
        if plan is None:
            fallback = fallback or (instance, None)
        elif plan.makespan <= setup.problem.settings.max_epochs:
            score = rank.seconds(instance, plan)
            rank.epochs[f"{epoch:.6g}"] = score if math.isfinite(score) else None
            if best is None or score < best[0] * (1 - 1e-9):
                best = (score, instance, plan)
        elif fallback is None or fallback[1] is None or plan.makespan < fallback[1].makespan:
            fallback = (instance, plan)
    if best is not None:
        instance = best[1]
        return (instance, *_best_plan(setup, instance, rank, best[2]))
    assert fallback is not None
    return fallback[0], fallback[1], [fallback[1]] if fallback[1] is not None else []


def _best_plan(setup: PhaseSetup, instance: Instance, rank: FlowRank,
               known: Plan | None = None) -> tuple[Plan | None, list[Plan]]:
    """The greedy order whose plan simulates fastest (``known``: the first order's plan, already made), and
    every plan made."""
    made = [known] if known is not None else []
    for order in GREEDY_ORDERS[1:] if known is not None else GREEDY_ORDERS:
        plan = setup.greedy(instance, order)
        if plan is not None:
            made.append(plan)
    best = _fastest(made, lambda plan: rank.seconds(instance, plan))
    return (best[1] if best else None), made


def _fastest_variant(problem: Problem, phases: list[tuple[str, PhaseResult]]) -> Schedule:
    """The whole schedule in the dependency variant that simulates fastest (step 4), through a
    :class:`~synth.choose.Search` without progress (the phases have reported their end)."""
    variants = problem.variants()
    if len(variants) == 1:
        return problem.schedule(phases, variants[0])
    search = Search(problem.topology, problem.collective.kind, problem.settings.size)

    def seconds(schedule: Schedule) -> float:
        variant = schedule.params["order_deps"]
        time_s = search.measure(schedule, variant, f"{variant} deps", ideal=True, limited=False)
        assert time_s is not None  # not limited: never refused
        return time_s

    best = _fastest((problem.schedule(phases, variant) for variant in variants), seconds)
    assert best is not None
    return best[1]


def _evaluated(problem: Problem, phases: list[tuple[str, PhaseResult]], schedule: Schedule) -> dict[str, Any]:
    """CP-SAT's improvement stated under synth's evaluator too (the default plan rule: protocol, slices):
    ``evaluated_us`` and the summary's tail."""
    from synth.evaluate import evaluate

    greedy_phases = [(name, dataclasses.replace(result, plan=result.info["greedy_plan"])) for name, result in phases]
    greedy = _fastest_variant(problem, greedy_phases)
    size = problem.settings.size
    ours, theirs = evaluate(schedule, problem.topology, size), evaluate(greedy, problem.topology, size)
    return {"evaluated_us": {"result": round(ours.time_s * 1e6, 6), "greedy": round(theirs.time_s * 1e6, 6),
                             "plan": ours.plan.describe()},
            "summary": schedule.params["summary"] + (
                f"; synth's evaluator ({ours.plan.protocol.value}): {time_text(ours.time_s * 1e6)} against "
                f"the greedy plan's {time_text(theirs.time_s * 1e6)}")}
