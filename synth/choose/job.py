"""Choosing a job's schedule set: one schedule per collective, so that together they finish soonest.

A job (:mod:`synth.jobs`) runs its collectives at once on one fabric. For each collective this makes its
candidates (every algorithm the job names, or every applicable one but the slow solvers; each at the
collective's size, its variant chosen by :func:`synth.choose.synthesize`), verifies each and times it
alone (:func:`synth.evaluate.evaluate`, the flow model and the plan rule: the time every command prints
for that schedule). The plan each gets alone is the one it runs under in the job.

The set is then chosen by joint simulation (:func:`synth.flow.simulate_together`): start from each
collective's fastest schedule alone, then, collective by collective, try each of its other candidates
with the rest fixed and keep a change that lowers the objective (the makespan, or the weighted sum of
finish times), until a whole pass changes nothing (at most :data:`MAX_PASSES` passes). Where every
collective has an ``nccl`` candidate, NCCL's own choice for each, run together, is the baseline; if it
beats the set found, the search starts again from it, so the chosen set is never worse than it. This
is a local search over the candidates, not a proof: the result says how far it is from the joint bound
(:func:`synth.jobs.joint_bound`), which no set beats.

Examples
--------
>>> from synth.library import load_topology
>>> from synth.jobs import Job
>>> topo = load_topology("dgx-h100:boxes=2")
>>> job = Job.from_dict({"format": "synth.job/1", "collectives": [
...     {"collective": "allreduce", "size": "64MiB", "group": "dp=2", "algorithm": ["ring", "nccl"]},
...     {"collective": "allgather", "size": "64MiB", "group": "dp=2", "algorithm": "ring"}]}, topo)
>>> result = choose_job(topo, job)
>>> [(m.chosen.algorithm, round(m.slowdown, 2)) for m in result.members]  # both cross the same two NICs
[('nccl', 1.13), ('ring', 2.95)]
>>> round(result.bound.makespan_s / result.makespan_s, 3), result.bound.binding
(0.991, 'shared cut gpu b0.gpu0 -> the rest')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synth.errors import InputError, LimitError, NotApplicable, SynthError
from synth.jobs import Job, JobCollective, JointBound, joint_bound
from synth.plan import Plan
from synth.schedule import Schedule
from synth.topology import Topology

__all__ = ["MAX_PASSES", "Candidate", "JobResult", "Member", "candidates", "choose_job", "objective_value"]

#: The most passes the local search makes over the collectives.
MAX_PASSES = 3


@dataclass(frozen=True)
class Candidate:
    """One verified schedule for a job's collective: the view it runs on, its plan and its time alone."""

    algorithm: str
    schedule: Schedule
    view: Topology
    plan: Plan
    alone_s: float


@dataclass(frozen=True)
class Member:
    """A collective of the chosen set: its schedule, its time alone and when it finishes in the job."""

    collective: JobCollective
    chosen: Candidate
    finish_s: float

    @property
    def slowdown(self) -> float:
        """Its finish in the job over its time alone (1: sharing costs it nothing)."""
        return self.finish_s / self.chosen.alone_s if self.chosen.alone_s > 0 else 1.0


@dataclass(frozen=True)
class JobResult:
    """The chosen schedule set, its joint times, the joint bound, every set simulated (algorithm names in
    job order, makespan, weighted sum), the candidates left out (collective, algorithm, why) and, where
    every collective has an ``nccl`` candidate, the finish times of NCCL's own choice for each, together."""

    job: Job
    members: tuple[Member, ...]
    bound: JointBound
    tried: tuple[tuple[tuple[str, ...], float, float], ...]
    skipped: tuple[tuple[str, str, str], ...]
    nccl_finish_s: tuple[float, ...] | None = None

    @property
    def makespan_s(self) -> float:
        """When the last collective finishes."""
        return max(m.finish_s for m in self.members)

    @property
    def weighted_s(self) -> float:
        """The weighted sum of the finish times."""
        return sum(m.collective.weight * m.finish_s for m in self.members)

    @property
    def alone_makespan_s(self) -> float:
        """The slowest collective alone: what the job would take if sharing cost nothing."""
        return max(m.chosen.alone_s for m in self.members)

    @property
    def serial_s(self) -> float:
        """The collectives one after another, each alone."""
        return sum(m.chosen.alone_s for m in self.members)

    def objective_s(self) -> float:
        """The job's objective for this set."""
        return self.makespan_s if self.job.objective == "makespan" else self.weighted_s

    def bound_s(self) -> float:
        """The joint bound on the job's objective."""
        return self.bound.makespan_s if self.job.objective == "makespan" else self.bound.weighted_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {"objective": self.job.objective, "makespan_s": self.makespan_s, "weighted_s": self.weighted_s,
                "alone_makespan_s": self.alone_makespan_s, "serial_s": self.serial_s,
                "bound": self.bound.to_dict(),
                "collectives": [{"name": m.collective.name, "collective": m.collective.kind.value,
                                 "size": m.collective.size, "group": list(m.collective.members or []),
                                 "algorithm": m.chosen.algorithm, "variant": m.chosen.schedule.params.get("variant"),
                                 "plan": m.chosen.plan.describe(), "alone_s": m.chosen.alone_s,
                                 "finish_s": m.finish_s, "slowdown": m.slowdown,
                                 "bound_alone_s": self.bound.alone_s[i]}
                                for i, m in enumerate(self.members)],
                "nccl_finish_s": None if self.nccl_finish_s is None else list(self.nccl_finish_s),
                "nccl_objective_s": None if self.nccl_finish_s is None else objective_value(self.job, self.nccl_finish_s),
                "tried": [{"algorithms": list(names), "makespan_s": makespan, "weighted_s": weighted}
                          for names, makespan, weighted in self.tried],
                "skipped": [{"name": n, "algorithm": a, "reason": r} for n, a, r in self.skipped]}


def candidates(topology: Topology, collective: JobCollective, progress: Callable[[str], None] | None = None,
               source: str = "", field: str = "algorithm") -> tuple[list[Candidate], list[tuple[str, str]]]:
    """Every candidate schedule of ``collective`` on ``topology``, fastest alone first, and the algorithms
    left out with why (not applicable, refused, failed verification); an unknown algorithm name is an
    :class:`InputError` naming ``source`` and ``field``."""
    from synth.algorithms import REGISTRY, available
    from synth.choose import synthesize
    from synth.evaluate import evaluate
    from synth.verify import verify

    view = collective.view(topology)
    if collective.algorithms is not None:
        names = list(collective.algorithms)
        for name in names:
            if name not in REGISTRY:
                raise InputError(source, field, f"unknown algorithm {name!r}; expected one of {', '.join(REGISTRY)}")
    else:
        names = [a.name for a in available(collective.kind) if not a.slow]
    made: list[Candidate] = []
    skipped: list[tuple[str, str]] = []
    for name in names:
        entry = REGISTRY[name]
        if collective.kind not in entry.collectives:
            skipped.append((name, f"{name} does not do {collective.kind}"))
            continue
        options: dict[str, Any] = {}
        if entry.size_sensitive:
            options["size"] = collective.size
        if collective.demand is not None:
            options["demand"] = collective.demand
        if collective.shards is not None:
            if not entry.takes("shards"):
                skipped.append((name, f"{name} takes no uneven shards"))
                continue
            options["shards"] = collective.shards
        if progress:
            progress(f"{collective.name}: {name}")
        try:
            schedule = synthesize(view, collective.kind, name, **options)
            verify(schedule, view)
            result = evaluate(schedule, view, collective.size)
        except NotApplicable as reason:
            skipped.append((name, str(reason)))
            continue
        except SynthError as error:
            skipped.append((name, f"{type(error).__name__}: {error}"))
            continue
        made.append(Candidate(name, schedule, view, result.plan, result.time_s))
    made.sort(key=lambda c: c.alone_s)
    return made, skipped


def _check_joint_work(parts: list[tuple[Schedule, Topology, int, Plan]]) -> None:
    """Refuse a joint simulation over the evaluator's slice limit before it runs (each schedule alone is
    within it; together they may not be)."""
    from synth.evaluate import MAX_SLICE_TRANSFERS

    work = sum(len(schedule.transfers) * plan.slices for schedule, _, _, plan in parts)
    if work > MAX_SLICE_TRANSFERS:
        raise LimitError(f"a joint simulation of {len(parts)} schedules: {work:,} slice transfers, over the limit of "
                         f"{MAX_SLICE_TRANSFERS:,} (about a minute of simulation); run fewer or smaller collectives "
                         "together, or name algorithms with fewer transfers")


def objective_value(job: Job, finish: tuple[float, ...]) -> float:
    """The job's objective for these finish times (job order)."""
    if job.objective == "makespan":
        return max(finish)
    return sum(c.weight * t for c, t in zip(job.collectives, finish, strict=True))


def choose_job(topology: Topology, job: Job, progress: Callable[[str], None] | None = None) -> JobResult:
    """The schedule set for ``job`` on ``topology`` (see the module doc); an :class:`NotApplicable` when a
    collective has no candidate."""
    from synth.flow import simulate_together

    options: list[list[Candidate]] = []
    skipped: list[tuple[str, str, str]] = []
    for index, collective in enumerate(job.collectives):
        made, left = candidates(topology, collective, progress, job.source, f"collectives[{index}].algorithm")
        skipped.extend((collective.name, name, why) for name, why in left)
        if not made:
            reasons = "; ".join(f"{name}: {why}" for name, why in left) or "no algorithm"
            raise NotApplicable(f"{collective.name} ({collective.describe()}) has no schedule: {reasons}")
        options.append(made)
    tried: dict[tuple[int, ...], tuple[float, ...]] = {}

    def finish_of(choice: tuple[int, ...]) -> tuple[float, ...]:
        known = tried.get(choice)
        if known is None:
            if progress:
                progress("together: " + " + ".join(options[j][i].algorithm for j, i in enumerate(choice)))
            parts = [(c.schedule, c.view, job.collectives[j].size, c.plan)
                     for j, c in enumerate(options[j][i] for j, i in enumerate(choice))]
            _check_joint_work(parts)
            known = tried[choice] = simulate_together(parts).finish_s
        return known

    def descend(choice: tuple[int, ...]) -> tuple[tuple[int, ...], float]:
        best = objective_value(job, finish_of(choice))
        for _ in range(MAX_PASSES):
            changed = False
            for j, made in enumerate(options):
                for i in range(len(made)):
                    if i == choice[j]:
                        continue
                    other = choice[:j] + (i,) + choice[j + 1:]
                    value = objective_value(job, finish_of(other))
                    if value < best * (1 - 1e-9):
                        choice, best, changed = other, value, True
            if not changed:
                break
        return choice, best

    nccl = [next((i for i, c in enumerate(made) if c.algorithm == "nccl"), None) for made in options]
    nccl_set = None if None in nccl else tuple(i for i in nccl if i is not None)
    choice, best = descend(tuple(0 for _ in options))  # from each one's fastest alone
    if nccl_set is not None and objective_value(job, finish_of(nccl_set)) < best * (1 - 1e-9):
        choice, best = descend(nccl_set)  # never worse than what NCCL would run
    finish = finish_of(choice)
    members = tuple(Member(c, options[j][choice[j]], finish[j]) for j, c in enumerate(job.collectives))
    baseline = None if nccl_set is None else finish_of(nccl_set)
    record = tuple((tuple(options[j][i].algorithm for j, i in enumerate(key)), max(times),
                    sum(c.weight * t for c, t in zip(job.collectives, times, strict=True)))
                   for key, times in tried.items())
    result = JobResult(job, members, joint_bound(topology, job), record, tuple(skipped), baseline)
    assert math.isfinite(result.makespan_s)
    return result
