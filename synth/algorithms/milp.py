"""Latency-aware schedules from a time-indexed model solved with CP-SAT (``milp``), TE-CCL style.

The model
---------
Time is cut into epochs (see :mod:`synth.algorithms.milp_instance` for the instance: logical links,
per-link delay in epochs from α + chunk/β, per-link capacity in chunks per window of epochs). With
boolean ``send[c, l, k]`` (chunk c leaves on logical link l in epoch k) and ``have[c, v, k]`` (gpu v
can forward c from epoch k)::

    have[c, v, k] = have[c, v, k-1] + Σ_{l into v} send[c, l, k - delay[l]]     (at most one arrival)
    send[c, l, k] <= have[c, src(l), k]                                         (store and forward)
    Σ_{c, l through e, k in any window of e} send[c, l, k] <= cap[e]            (bandwidth)
    have[c, t, K] = 1 for every target t of c                                   (postcondition)
    done[k] <= have[c, t, k],  done[k] <= done[k+1]
    minimize (the epochs until done, then Σ arrival epochs (+ the number of sends, for alltoall))

Gpus keep every chunk they receive and may forward or copy it on any number of links (multicast);
switches store nothing: a route through switches is one logical link crossed within one transfer.
Allgather is multicast; alltoall is unicast (other gpus may relay, store-and-forward); reduce-scatter
is the time-reversed allgather solved on the transposed topology, with the sends of one chunk from one
gpu kept apart in time so that the reversed reductions into one buffer cell can be chained as the
verifier requires; allreduce is that reduce-scatter followed by an allgather (each chunk's allgather
starts when its reduction is complete).

How it is solved
----------------
1. A greedy plan (earliest-arrival routing with capacity reservation, three request orders) for each
   candidate epoch length (:meth:`PhaseSetup.epoch_lengths`); one epoch and order win (below: who
   chooses). Its makespan is the horizon K and the solver's hint.
2. A lower bound in epochs: the farthest target by delay; cut bounds (items that must leave a box, or
   enter a gpu, through links of limited capacity), and for a box, how long the last item to cross
   needs to reach every gpu on the other side from the few places its copies can land. If the greedy
   meets it, it is optimal (``result: optimal``, ``proved_by: bound``).
3. Otherwise CP-SAT (single worker by default, fixed seed) within ``time_limit_s``, on one of two
   models (``routing``):

   - the *time-indexed* model above, every item on every link, when it has at most
     :data:`FULL_MODEL_VARIABLES` variables: CP-SAT's bound then holds for every schedule, so it can
     prove optimality;
   - the *split* model (TACCL's split into routing, then ordering): each item may use only the links
     one of the greedy plans routed it on (the three request orders differ), and CP-SAT decides when
     it crosses them. Far smaller (2 x NDv2 allgather of 1 GB, 32 chunks: 131,538 variables down to
     a few thousand); its bound holds only for those routes.

   A sketch's ``symmetry`` makes box b+1 share box b's variables. Models over the limit
   (``SYNTH_MAX_MILP_VARIABLES``) are refused before they are built (:class:`~synth.errors.LimitError`,
   with the count); with ``cpsat="auto"``, one over :data:`VARIABLES_PER_SECOND` x ``time_limit_s``
   variables is not run (CP-SAT could not load it in time) and the greedy plan is returned, saying so.
4. Every solution CP-SAT finds is kept, and of them and the greedy plan the one a :class:`Rank` puts
   first is the result. Transfers on a contended link get deps that keep their planned order in a few
   *lanes* (``order_deps="link"``), or none (``"none"``: they share the link).

Who chooses: this module constructs from explicit variants and compares them only in its epoch model
(:func:`construct`, :class:`EpochModelRank`: the given epoch, else the finest that fits ``max_epochs``;
the greedy order and the CP-SAT solution with the fewest epochs; ``order_deps="auto"`` builds
``"link"``). The epoch model is coarse, so every command runs :mod:`synth.choose.milp` instead, which
chooses the epoch, the order, the solution and the dependency variant by simulation (synth's flow model
at ``size``, chunk by chunk with the plain α-β costs).

What produced the result (``params``): ``result`` is ``"optimal"`` (``proved_by`` ``"bound"`` or
``"cp-sat"``: no schedule has fewer epochs), ``"improved"`` (the rank puts a CP-SAT solution ahead of
the greedy plan: it simulates faster, in the choice) or ``"greedy"`` (``why`` says why: the model too large, nothing faster found, cpsat
never); ``gap`` ((epochs - lower bound) / epochs, 0 = optimal in the epoch model), ``variables`` and
``model`` (the model CP-SAT solved or would have), ``greedy_epochs`` and ``greedy_us`` /
``simulated_us`` (the greedy plan's and the result's time in the flow model at chunk granularity, the
α-β model the epochs approximate and the yardstick of every choice; set by the choice), ``evaluated_us`` when the
result is a CP-SAT plan (its time and the greedy plan's under synth's evaluator with the default plan
rule: protocol, slices), and ``summary``, the one line ``synth generate`` prints. Allreduce has two
phases (``phases``): its result is ``optimal`` if both are, ``improved`` if CP-SAT improved either,
else ``greedy``.

Time limits and determinism: ``time_limit_s`` is CP-SAT's budget in *deterministic* seconds (default
:data:`DEFAULT_TIME_LIMIT_S`, or ``SYNTH_SOLVER_SECONDS`` when that is smaller), so the same input and
``seed`` give the same schedule, and one solve is one deterministic search: a larger budget extends the
same search, finds every solution the smaller one found and more, and so never returns a slower
schedule in that simulation (unless the wall-clock cap below fires). A wall-clock cap stops a solver slowed down by a loaded machine:
``WALL_FACTOR`` x the budget + ``WALL_SLACK_S``, and never more than ``SYNTH_SOLVER_SECONDS`` (default 600) unless the budget itself
is larger; solutions reached only because of that timing are discarded in favour of the deterministic
greedy plan (the bound stays valid), and ``params['stopped_by']`` is ``"wall-clock"``. ``workers`` > 1
uses CP-SAT's deterministic interleaved parallel search.

Options
-------
``size`` (bytes or ``"64KiB"``, default 1 MiB) sets the chunk size the epochs are cut for;
``chunks`` defaults to N, or 2N when a gpu's share is bandwidth-bound (over 10x the route latency on
the slowest link); ``epoch_us`` overrides the epoch; ``sketch`` restricts the model
(:mod:`synth.algorithms.milp_sketch`: relays, pairing, symmetry, chunks, epochs); ``routing`` is ``"auto"`` (the
time-indexed model when small enough, else the split model), ``"free"`` or ``"greedy"`` (force one);
``progress`` is a callable receiving :class:`Progress` events (the algorithm itself prints nothing).

Examples
--------
>>> from synth.library import load_topology
>>> topo = load_topology("ring:n=4")
>>> s = milp(topo, Kind.ALLGATHER, size=4096, time_limit_s=2)
>>> s.params["epochs"], s.params["gap"], s.params["result"], s.params["proved_by"]
(2, 0.0, 'optimal', 'bound')
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import networkx as nx

from synth import limits
from synth.algorithms.milp_instance import (
    Instance,
    Item,
    LogicalLink,
    Plan,
    best_greedy,
    build_instance,
    greedy_rank,
    logical_links,
    rotation_of,
    send_window,
)
from synth.algorithms.milp_sketch import Sketch, load_sketch
from synth.algorithms.utils import Progress, ProgressFunction, check_progress, make_collective
from synth.collectives import Collective, Kind
from synth.errors import InfeasibleError, InputError, LimitError, NotApplicable
from synth.schedule import COPY, REDUCE, Schedule, ScheduleBuilder
from synth.topology import Topology

#: Default message size the epochs are cut for, in bytes.
DEFAULT_SIZE = 1 << 20
#: Default solver budget in CP-SAT deterministic seconds (lowered to SYNTH_SOLVER_SECONDS when that is less).
DEFAULT_TIME_LIMIT_S = 10.0
#: Default largest horizon, in epochs, when the epoch length is chosen automatically.
DEFAULT_MAX_EPOCHS = 64
#: The greedy's work (deliveries x logical links) is checked against the variable limit times this.
GREEDY_WORK_PER_VARIABLE = 100
#: With ``routing="auto"``, the time-indexed model (every item on every link) up to this many variables.
FULL_MODEL_VARIABLES = 30_000
#: With ``cpsat="auto"``, CP-SAT is run only on models of at most this many variables per second of budget.
VARIABLES_PER_SECOND = 5_000
#: The solver's wall-clock safety cap: WALL_FACTOR x time_limit_s + WALL_SLACK_S seconds (at most
#: SYNTH_SOLVER_SECONDS unless the budget is larger).
WALL_FACTOR = 10.0
WALL_SLACK_S = 60.0
#: Multiples of the fastest transfer tried as the epoch length.
EPOCH_FACTORS = (1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: The request orders of the greedy plans.
GREEDY_ORDERS = ("interleave", "near", "item")
FULL_MODEL = "time-indexed model"
SPLIT_MODEL = "split model (routing from the greedy plans, ordering by CP-SAT)"
ROUTINGS = ("auto", "free", "greedy")


def default_time_limit() -> float:
    """CP-SAT's default budget: :data:`DEFAULT_TIME_LIMIT_S`, or ``SYNTH_SOLVER_SECONDS`` if smaller.

    Examples
    --------
    >>> default_time_limit()
    10.0
    """
    return min(DEFAULT_TIME_LIMIT_S, limits.solver_time_limit())


@dataclass
class PhaseResult:
    """The outcome of solving one instance.

    ``result`` is ``"optimal"`` (no schedule has fewer epochs: ``proved_by`` the combinatorial bound or
    CP-SAT), ``"improved"`` (the rank puts a CP-SAT solution ahead of the greedy plan) or ``"greedy"``
    (the greedy plan, ``why`` says why).
    """

    instance: Instance
    plan: Plan
    lower_bound: int
    status: str
    variables: int
    constraints: int
    stopped_by: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    result: str = "greedy"
    proved_by: str = ""
    why: str = ""
    model: str = "none"

    @property
    def gap(self) -> float:
        """(epochs found - proven lower bound) / epochs found."""
        if self.plan.makespan <= 0:
            return 0.0
        return max(0.0, (self.plan.makespan - self.lower_bound) / self.plan.makespan)


@dataclass
class _Planned:
    """A transfer with its planned epochs, before ids are assigned."""

    src: int
    dst: int
    chunk: int
    path: tuple[str, ...]
    op: Literal["copy", "reduce"]
    start: int
    end: int
    deps: list[int] = field(default_factory=list)


# ------------------------------------------------------------------------------------- public API
def milp(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
         size: int | str = DEFAULT_SIZE, sketch: Sketch | str | dict[str, Any] | None = None,
         time_limit_s: float | None = None, seed: int = 0, workers: int = 1,
         epoch_us: float | None = None, max_epochs: int = DEFAULT_MAX_EPOCHS, order_deps: str = "auto",
         cpsat: str = "auto", routing: str = "auto", progress: ProgressFunction | None = None) -> Schedule:
    """Time-indexed schedule for allgather, alltoall, reduce-scatter or allreduce (see the module notes),
    its variants chosen by the epoch model alone (:func:`construct`; :mod:`synth.choose.milp` chooses them by
    simulation, as every command does).

    Parameters
    ----------
    topology : Topology
    kind : Kind
    chunks : int, optional
        Chunks C per buffer (a multiple of N); default the sketch's ``chunks``, else N, or 2N when a
        gpu's share takes over 10x the route latency on the slowest link (bandwidth-bound sizes).
    size : int or str
        Message size in bytes (nccl-tests n) the epochs are cut for; ``"64KiB"`` is accepted.
    sketch : Sketch, dict or path, optional
        Restrictions (:mod:`synth.algorithms.milp_sketch`).
    time_limit_s : float, optional
        CP-SAT budget in deterministic seconds per solve (allreduce runs two solves of half each);
        default :func:`default_time_limit`.
    seed, workers : int
        CP-SAT random seed and number of workers.
    epoch_us : float, optional
        Epoch length; overrides the sketch's and the automatic choice.
    max_epochs : int
        Largest horizon accepted when the epoch length is chosen automatically.
    order_deps : str
        ``"auto"``, ``"link"`` or ``"none"`` (see the module notes).
    cpsat : str
        ``"auto"`` runs CP-SAT unless the greedy start already meets the lower bound or the model has
        more than ``VARIABLES_PER_SECOND`` x ``time_limit_s`` variables (it could not load it in time);
        ``"always"`` runs it even then (at the greedy's makespan it can still find plans whose items
        arrive earlier, which may simulate faster); ``"never"`` keeps the greedy.
    routing : str
        ``"auto"``, ``"free"`` (the time-indexed model, every item on every link) or ``"greedy"`` (the
        split model: the links the greedy plans route each item on); see the module notes.
    progress : callable or None
        Receives :class:`Progress` events (greedy start, each solution found, done).

    Raises
    ------
    InfeasibleError
        The sketch leaves a gpu unreachable, or no schedule fits its horizon.
    LimitError
        The model CP-SAT would solve exceeds ``SYNTH_MAX_MILP_VARIABLES``/``CONSTRAINTS`` (refused
        before it is built), or the greedy's work would.
    """
    return construct(prepare(topology, kind, chunks=chunks, root=root, size=size, sketch=sketch,
                             time_limit_s=time_limit_s, seed=seed, workers=workers, epoch_us=epoch_us,
                             max_epochs=max_epochs, order_deps=order_deps, cpsat=cpsat, routing=routing,
                             progress=progress))


def prepare(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
            size: int | str = DEFAULT_SIZE, sketch: Sketch | str | dict[str, Any] | None = None,
            time_limit_s: float | None = None, seed: int = 0, workers: int = 1,
            epoch_us: float | None = None, max_epochs: int = DEFAULT_MAX_EPOCHS, order_deps: str = "auto",
            cpsat: str = "auto", routing: str = "auto", progress: ProgressFunction | None = None) -> Problem:
    """The validated request :func:`milp` takes (the same options), before any variant is chosen."""
    from synth.units import parse_size

    if kind not in (Kind.ALLGATHER, Kind.ALLTOALL, Kind.REDUCESCATTER, Kind.ALLREDUCE):
        raise NotApplicable(f"milp does allgather, alltoall, reducescatter and allreduce, not {kind}")
    size_bytes = parse_size(size, "size")
    if size_bytes <= 0:
        raise InputError("", "size", f"expected a positive number of bytes, got {size!r}")
    plan_sketch = load_sketch(sketch)
    if plan_sketch.chunks is not None and chunks is not None and plan_sketch.chunks != chunks:
        raise InputError(plan_sketch.source, "chunks", f"the sketch fixes chunks={plan_sketch.chunks} but "
                         f"chunks={chunks} was passed")
    chunk_count = chunks if chunks is not None else plan_sketch.chunks
    n = topology.num_ranks
    coll = make_collective(topology, kind, chunk_count, root, default_chunks=n * _default_chunks_per_rank(
        topology, size_bytes))
    if coll.chunks % n:
        raise InputError(plan_sketch.source if chunks is None else "", "chunks",
                         f"milp needs chunks to be a multiple of the gpu count {n}, got {coll.chunks}")
    if order_deps not in ("auto", "link", "none"):
        raise InputError("", "order_deps", f"expected auto, link or none, got {order_deps!r}")
    if cpsat not in ("auto", "always", "never"):
        raise InputError("", "cpsat", f"expected auto, always or never, got {cpsat!r}")
    if time_limit_s is None:
        time_limit_s = default_time_limit()
    _check_number(time_limit_s, "time_limit_s", positive=True)
    if routing not in ROUTINGS:
        raise InputError("", "routing", f"expected one of {', '.join(ROUTINGS)}, got {routing!r}")
    check_progress(progress)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError("", "workers", f"expected a positive integer, got {workers!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError("", "seed", f"expected an integer, got {seed!r}")
    if isinstance(max_epochs, bool) or not isinstance(max_epochs, int) or max_epochs < 1:
        raise InputError("", "max_epochs", f"expected a positive integer, got {max_epochs!r}")
    if epoch_us is not None:
        _check_number(epoch_us, "epoch_us", positive=True)
        if not MIN_EPOCH_US <= epoch_us <= MAX_EPOCH_US:
            raise InputError("", "epoch_us", f"expected an epoch from {MIN_EPOCH_US:g} to {MAX_EPOCH_US:g} us "
                             f"(1 ns to 1000 s), got {epoch_us!r}")
    settings = Settings(size_bytes, plan_sketch, float(time_limit_s), seed, workers,
                        epoch_us if epoch_us is not None else plan_sketch.epoch_us, max_epochs, progress, cpsat,
                        routing)
    return Problem(topology, coll, settings, order_deps)


def _default_chunks_per_rank(topology: Topology, size: int) -> int:
    """2 when a gpu's share takes over 10 x the largest route latency on the slowest link (bandwidth
    dominates, and a second chunk per gpu lets transfers pipeline), else 1."""
    from synth.routing import chain_paths

    slowest = min(float(d["bandwidth"]) for _, _, d in topology.graph.edges(data=True))
    share_us = size / topology.num_ranks / (slowest * 1e3)
    latency = max(sum(topology.path_latency(hop) for hop in chain_paths(topology, 0, dst))
                  for dst in range(1, topology.num_ranks))
    return 2 if share_us > 10 * latency else 1


@dataclass
class Settings:
    """A milp request's options, validated (:func:`prepare`)."""

    size: int
    sketch: Sketch
    time_limit_s: float
    seed: int
    workers: int
    epoch_us: float | None
    max_epochs: int
    report: ProgressFunction | None
    cpsat: str = "auto"
    routing: str = "auto"

    def wall_seconds(self, budget: float) -> float:
        """The wall-clock cap of a solve with ``budget`` deterministic seconds (see the module notes)."""
        return max(budget, min(WALL_FACTOR * budget + WALL_SLACK_S, limits.solver_time_limit()))


#: The epochs ``epoch_us`` may set (microseconds): 1 ns to 1000 s; outside, times overflow or round to nothing.
MIN_EPOCH_US = 1e-3
MAX_EPOCH_US = 1e9


def _check_number(value: Any, name: str, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or \
            (positive and value <= 0):
        raise InputError("", name, f"expected a positive number, got {value!r}")


# ------------------------------------------------------------------------------ problem and phases
class Rank(Protocol):
    """How plans of one phase are compared: ``seconds`` of a plan on an instance, and the ``verb`` the
    reasons use for it (``"simulate"``: the flow model of :mod:`synth.choose.milp`)."""

    verb: str

    def seconds(self, instance: Instance, plan: Plan) -> float:
        """The time the plan is compared by, in seconds."""
        ...


class EpochModelRank:
    """Plans compared in the epoch model itself: epochs x epoch length (no simulation)."""

    verb = "take, in the epoch model,"

    def seconds(self, instance: Instance, plan: Plan) -> float:
        """The plan's makespan in seconds of epochs."""
        return plan.makespan * instance.epoch_us * 1e-6


@dataclass(frozen=True)
class Problem:
    """A validated milp request (:func:`prepare`): the topology, the collective and the settings."""

    topology: Topology
    collective: Collective
    settings: Settings
    order_deps: str

    @property
    def chunk_bytes(self) -> float:
        """Bytes per chunk at the settings' size."""
        return self.settings.size / self.collective.chunks

    def setups(self) -> Iterator[PhaseSetup]:
        """The phases to solve, each set up when the previous one is done: allgather or alltoall; the
        reduce-scatter on the transposed topology; allreduce's reduce-scatter then allgather (half the
        budget each)."""
        kind, budget = self.collective.kind, self.settings.time_limit_s
        if kind in (Kind.ALLGATHER, Kind.ALLTOALL):
            yield PhaseSetup.make(self, kind.value, self.topology, kind == Kind.ALLGATHER, False, budget)
            return
        half = budget if kind == Kind.REDUCESCATTER else budget / 2
        yield PhaseSetup.make(self, "reducescatter", _transpose(self.topology), True, True, half)
        if kind == Kind.ALLREDUCE:
            yield PhaseSetup.make(self, "allgather", self.topology, True, False, half)

    def schedule(self, phases: list[tuple[str, PhaseResult]], variant: str) -> Schedule:
        """The schedule of the phases' plans, with ``variant``'s dependencies (``"link"`` or ``"none"``,
        see the module notes)."""
        coll = self.collective
        first = phases[0][1]
        if coll.kind in (Kind.ALLGATHER, Kind.ALLTOALL):
            planned = _forward_transfers(first, coll)
        else:
            planned, tails = _reversed_transfers(first, coll)
            if len(phases) > 1:
                gather = phases[1][1]
                planned += _forward_transfers(gather, coll, offset=first.plan.makespan, after=tails,
                                              base=len(planned))
        return _assemble(self.topology, coll, planned, phases, self.settings, variant)

    def variants(self) -> list[str]:
        """The dependency variants to build: both for ``order_deps="auto"``, else the one asked for."""
        return ["link", "none"] if self.order_deps == "auto" else [self.order_deps]


@dataclass
class PhaseSetup:
    """One phase before its epoch, greedy order and solution are chosen: its (maybe transposed) topology,
    logical links, items and symmetry. Made by :meth:`Problem.setups`."""

    problem: Problem
    name: str
    topology: Topology
    multicast: bool
    reverse: bool
    time_limit_s: float
    links: list[LogicalLink]
    items: list[Item]
    rotation: list[int] | None
    chunk_map: dict[int, int] | None
    spread: list[int]
    started: float

    @classmethod
    def make(cls, problem: Problem, name: str, topology: Topology, multicast: bool, reverse: bool,
             time_limit_s: float) -> PhaseSetup:
        """Set one phase up, refusing greedy work over the limits, and report it (phase ``"greedy"``)."""
        started = time.perf_counter()
        settings, coll = problem.settings, problem.collective
        sketch = settings.sketch
        links = logical_links(topology, sketch)
        rotation = rotation_of(topology, sketch, links) if sketch.symmetry == "rotate-boxes" else None
        items = _items(coll, multicast)
        chunk_map = _chunk_rotation(coll, rotation, multicast) if rotation else None
        requests = sum(len(item.targets) for item in items)
        limits.check("max_milp_variables", requests * len(links) / GREEDY_WORK_PER_VARIABLE,
                     f"milp {name} on {topology.name} ({requests:,} deliveries over {len(links):,} links, "
                     "greedy routing)", hint="use a sketch (relays, pairing, intra_box) or fewer chunks")
        if settings.report:
            settings.report(Progress("greedy", name, message="choosing epochs and a greedy start"))
        spread = list(sketch.local_index(topology) or range(topology.num_ranks))
        return cls(problem, name, topology, multicast, reverse, time_limit_s, links, items, rotation, chunk_map,
                   spread, started)

    @property
    def horizon(self) -> int:
        """The most epochs a greedy plan may take: the sketch's, else 100,000."""
        return self.problem.settings.sketch.epochs or 100_000

    def instance(self, epoch_us: float) -> Instance:
        """The phase's instance with epochs of ``epoch_us``."""
        return build_instance(self.topology, self.links, self.items, self.multicast, self.problem.chunk_bytes,
                              epoch_us, serial_fanout=self.reverse, rotation=self.rotation,
                              chunk_rotation=self.chunk_map, spread=self.spread)

    def fixed_epoch(self) -> float | None:
        """The epoch the options or the sketch fix (refused when the slowest link would take more epochs
        than the horizon), or None when it is to be chosen among :meth:`epoch_lengths`."""
        epoch = self.problem.settings.epoch_us
        if epoch is None:
            return None
        # refuse before building: an epoch so short that one hop takes more epochs than the horizon would
        # make every per-epoch table enormous (epoch_us 1e-9 on a 1 µs link: 10^9 epochs per hop)
        chunk_bytes = self.problem.chunk_bytes
        slowest = max(link.latency_us + chunk_bytes / (link.bandwidth * 1e3) for link in self.links)
        hop = slowest / epoch
        if hop > self.horizon:
            raise LimitError(f"epoch_us {epoch:g} makes the slowest link take {hop:,.0f} epochs, more than "
                             f"the horizon of {self.horizon:,} epochs; use an epoch_us of at least "
                             f"{slowest / self.horizon:.3g}")
        return epoch

    def epoch_lengths(self) -> list[float]:
        """The candidate epoch lengths, finest first: :data:`EPOCH_FACTORS` x the fastest transfer (α +
        chunk/β on a logical link), up to the first one past the slowest."""
        chunk_bytes = self.problem.chunk_bytes
        times = [link.latency_us + chunk_bytes / (link.bandwidth * 1e3) for link in self.links]
        fastest, slowest = min(times), max(times)
        lengths = []
        for factor in EPOCH_FACTORS:
            lengths.append(fastest * factor)
            if fastest * factor >= slowest * 1.01:
                break
        return lengths

    def greedy(self, instance: Instance, order: str) -> Plan | None:
        """The greedy plan of one request order (``"interleave"``, ``"near"`` or ``"item"``), None when
        none fits the horizon."""
        return best_greedy(instance, self.horizon, orders=(order,))

    def forward_schedule(self, instance: Instance, plan: Plan, variant: str) -> Schedule:
        """A plan as the forward schedule (allgather or alltoall) on the instance's topology, with
        ``variant``'s dependencies: the form in which a phase's plans are compared by simulation."""
        coll = self.problem.collective
        kind = Kind.ALLGATHER if self.multicast else Kind.ALLTOALL
        forward = Collective(kind, coll.num_ranks, coll.chunks)
        result = PhaseResult(instance, plan, 0, "", 0, 0)
        planned = _forward_transfers(result, forward)
        return _build(instance.topology, forward, planned, [("", result)], variant, self.problem.settings.size, {})

    def solve(self, instance: Instance, plan: Plan | None, candidates: list[Plan], rank: Rank) -> PhaseResult:
        """The phase's result from the chosen epoch's instance and greedy ``plan`` (``candidates``: every
        greedy plan made for it, the split model's routes): the lower bound, then CP-SAT unless the
        greedy plan meets it or the options say otherwise; of CP-SAT's solutions and the greedy plan the
        one ``rank`` puts first is the result."""
        settings = self.problem.settings
        sketch, topology, label = settings.sketch, self.topology, self.name
        boxes = sketch.boxes(topology)
        groups = [[r for r in range(topology.num_ranks) if boxes[r] == b] for b in sorted(set(boxes))] if boxes else []
        bound = instance.lower_bound(groups)
        horizon = plan.makespan if plan is not None else (sketch.epochs or 0)
        if sketch.epochs is not None and horizon > sketch.epochs:
            horizon = sketch.epochs
            plan = None
        if horizon < bound:
            raise InfeasibleError(
                f"the sketch allows {sketch.epochs} epochs of {instance.epoch_us:.4g} us on {topology.name}, but "
                f"no schedule can finish in fewer than {bound} (delays and link capacities); raise 'epochs'")
        lower = min(bound, plan.makespan) if plan is not None else bound
        full_variables, full_constraints = _model_size(instance, horizon)
        if plan is not None and plan.makespan <= bound and settings.cpsat != "always":
            result = PhaseResult(instance, plan, plan.makespan, "optimal (the greedy plan meets the lower bound)",
                                 full_variables, full_constraints, result="optimal", proved_by="bound",
                                 why="the greedy plan meets the lower bound")
        elif plan is not None and settings.cpsat == "never":
            result = PhaseResult(instance, plan, lower, "greedy (cpsat=never)", full_variables, full_constraints,
                                 why="CP-SAT not run (cpsat=never)")
        else:
            split = plan is not None and (settings.routing == "greedy" or (
                settings.routing == "auto" and full_variables > FULL_MODEL_VARIABLES))
            allowed = _candidate_links(instance, candidates) if split else None
            variables, constraints = (_model_size(instance, horizon, allowed) if split
                                      else (full_variables, full_constraints))
            model = SPLIT_MODEL if split else FULL_MODEL
            # refuse up front, before building anything the limits do not allow
            limits.check_milp(variables, constraints, f"milp {label} on {topology.name} ({model}: {horizon} "
                              f"epochs of {instance.epoch_us:.4g} us, {len(self.items)} chunks, "
                              f"{len(self.links)} links)",
                              hint="use a sketch (relays, symmetry), fewer chunks or a longer epoch_us")
            if plan is not None and settings.cpsat == "auto" and variables > VARIABLES_PER_SECOND * self.time_limit_s:
                result = PhaseResult(instance, plan, lower, "greedy (model too large for the time limit)", variables,
                                     constraints, model=model,
                                     why=f"the {variables:,}-variable {model} is too large for CP-SAT in "
                                         f"{self.time_limit_s:g} s (raise time_limit_s or use a sketch)")
            else:
                result = _solve_cpsat(instance, horizon, lower, bound, plan, settings, label, self.time_limit_s,
                                      variables, constraints, allowed, model, rank)
        result.info["solve_s"] = time.perf_counter() - self.started
        result.info["bound"] = bound
        result.info["greedy_plan"] = plan if plan is not None else result.plan
        result.info["greedy_epochs"] = plan.makespan if plan is not None else None
        if settings.report:
            settings.report(Progress("done", label, result.plan.makespan, result.lower_bound,
                                     time.perf_counter() - self.started, result.status))
        return result


# ------------------------------------------------------------------------- construction by rule
def construct(problem: Problem) -> Schedule:
    """The schedule of a prepared request with every variant chosen by the epoch model (no simulation):
    the given epoch, else the finest candidate whose greedy plan fits ``max_epochs``; the greedy order
    with the fewest epochs; of CP-SAT's solutions, the one with the fewest epochs; ``order_deps="auto"``
    builds ``"link"``."""
    rank = EpochModelRank()
    phases = []
    for setup in problem.setups():
        instance, plan, candidates = _rule_epoch(setup)
        phases.append((setup.name, setup.solve(instance, plan, candidates, rank)))
    return problem.schedule(phases, problem.variants()[0])


def _rule_epoch(setup: PhaseSetup) -> tuple[Instance, Plan | None, list[Plan]]:
    """The instance, greedy plan and greedy candidates :func:`construct` takes (see there)."""
    fixed = setup.fixed_epoch()
    fallback: tuple[Instance, Plan | None, list[Plan]] | None = None
    for epoch in [fixed] if fixed is not None else setup.epoch_lengths():
        instance = setup.instance(epoch)
        plans = [plan for plan in (setup.greedy(instance, order) for order in GREEDY_ORDERS) if plan is not None]
        best = min(plans, key=greedy_rank) if plans else None
        if fixed is not None or (best is not None and best.makespan <= setup.problem.settings.max_epochs):
            return instance, best, plans
        if fallback is None or fallback[1] is None or (best is not None and best.makespan < fallback[1].makespan):
            fallback = (instance, best, plans)
    assert fallback is not None
    return fallback


# ---------------------------------------------------------------------------------------- phases
def _items(coll: Collective, multicast: bool) -> list[Item]:
    n = coll.num_ranks
    per = coll.chunks_per_rank
    if multicast:
        return [Item(c, c // per, tuple(r for r in range(n) if r != c // per)) for c in range(coll.chunks)]
    items = []
    for origin in range(n):
        for dst in range(n):
            if dst == origin:
                continue
            for j in range(per):
                items.append(Item(origin * coll.chunks + dst * per + j, origin, (dst,)))
    return items


def _chunk_rotation(coll: Collective, rotation: list[int], multicast: bool) -> dict[int, int]:
    per = coll.chunks_per_rank
    if multicast:
        return {c: rotation[c // per] * per + c % per for c in range(coll.chunks)}
    mapping = {}
    for origin in range(coll.num_ranks):
        for local in range(coll.chunks):
            dst, j = divmod(local, per)
            mapping[origin * coll.chunks + local] = rotation[origin] * coll.chunks + rotation[dst] * per + j
    return mapping



def _candidate_links(instance: Instance, plans: list[Plan]) -> list[set[int]]:
    """Per item, the logical links any of the greedy plans sends it on (closed under the sketch's
    symmetry): the routing the split model keeps, TACCL's first stage."""
    per_rep: dict[int, set[int]] = defaultdict(set)
    for plan in plans:
        for send in plan.sends:
            rep, power = instance.representative[send.item]
            per_rep[rep].add(instance.link_image[power][send.link])
    allowed: list[set[int]] = []
    for index in range(len(instance.items)):
        rep, power = instance.representative[index]
        image = instance.link_image[power]
        allowed.append({link for link in range(len(instance.links)) if image[link] in per_rep[rep]})
    return allowed


def _model_size(instance: Instance, horizon: int, allowed: list[set[int]] | None = None) -> tuple[int, int]:
    """Variables and constraints the CP-SAT model would have for ``horizon`` epochs (``allowed``: the
    links each item may use, None for all)."""
    sends = 0
    haves = 0
    for index, item in enumerate(instance.items):
        if instance.representative[index][0] != index:
            continue  # under symmetry a rotated item shares its representative's variables
        dist = instance.dist[item.source]
        sends += sum(len(send_window(instance, index, link_index, horizon, allowed))
                     for link_index in range(len(instance.links)))
        haves += sum(max(0, horizon - dist[v] + 1) for v in range(instance.num_ranks) if v != item.source)
    orbit = len(instance.item_image)
    constraints = orbit * (2 * haves + sends) + len(instance.edges) * horizon + horizon
    return sends + haves + horizon, constraints



# ---------------------------------------------------------------------------------------- CP-SAT
def _solve_cpsat(instance: Instance, horizon: int, lower: int, bound: int, plan: Plan | None, settings: Settings,
                 label: str, time_limit_s: float, variables: int, constraints: int, allowed: list[set[int]] | None,
                 model_name: str, rank: Rank) -> PhaseResult:
    """One CP-SAT solve of the time-indexed model (every link, or each item's ``allowed`` links), with
    the greedy plan as hint (:mod:`synth.algorithms.milp_cpsat`); every solution found is kept, and the
    one ``rank`` puts first (the greedy plan included) is the result. ``lower``: epochs below which
    no plan exists (the combinatorial bound, or the greedy's makespan if lower); ``bound``: the
    combinatorial bound itself."""
    from synth.algorithms.milp_cpsat import SolverBudget, solve_time_indexed

    def on_solution(makespan: int, best_bound: int, elapsed_s: float) -> None:
        assert settings.report is not None
        settings.report(Progress("solve", label, makespan, best_bound, elapsed_s, "makespan"))

    budget = SolverBudget(time_limit_s, settings.wall_seconds(time_limit_s), settings.seed, settings.workers)
    outcome = solve_time_indexed(instance, horizon, lower, plan, allowed, label, budget,
                                 on_solution if settings.report else None)
    found, model_bound = outcome.found, outcome.model_bound
    # the model's bound holds for every schedule only when the model had every link
    global_bound = max(bound, model_bound) if allowed is None else bound
    candidates = ([plan] if plan is not None else []) + found
    if not candidates:
        raise InfeasibleError(f"milp {label} on {instance.topology.name}: no schedule within {horizon} epochs was "
                              f"found in {time_limit_s:g} s (not proven impossible; raise time_limit_s or epochs)")
    best = min(candidates, key=lambda p: (round(rank.seconds(instance, p), 15), p.makespan))
    global_bound = min(global_bound, min(p.makespan for p in candidates))
    result = PhaseResult(instance, best, min(global_bound, best.makespan), "", variables, constraints,
                         outcome.stopped_by, model=model_name)
    result.info.update({"hinted": outcome.hinted, "solver_status": outcome.status, "solutions": len(found),
                        "model_bound_epochs": model_bound, "deterministic_s": round(outcome.deterministic_s, 3),
                        "candidates": [(p.makespan, rank.seconds(instance, p) * 1e6) for p in candidates]})
    budget_text = f"{time_limit_s:g} s"
    if best.makespan <= global_bound:
        result.result, result.proved_by = "optimal", ("bound" if best.makespan <= bound else "cp-sat")
        origin = "the greedy plan" if best is plan else "CP-SAT's plan"
        result.why = (f"{origin} meets the lower bound" if result.proved_by == "bound" else
                      f"CP-SAT proved that no schedule has fewer epochs than {origin}")
    elif best is not plan:
        result.result = "improved"
        result.why = f"CP-SAT improved the greedy plan ({model_name}, {budget_text})"
    else:
        result.result = "greedy"
        if outcome.stopped_by:
            result.why = f"CP-SAT stopped by the wall-clock cap before its {budget_text} budget (a loaded machine)"
        elif found:
            assert plan is not None
            fastest = min(found, key=lambda p: (round(rank.seconds(instance, p), 15), p.makespan))
            fewest = min(p.makespan for p in found)
            proven = " (optimal in the epoch model)" if fewest <= model_bound and allowed is None else ""
            result.why = (f"CP-SAT's {len(found)} solutions in {budget_text}, down to {fewest} epochs{proven}, "
                          f"{rank.verb} no faster than the greedy plan ({time_text(rank.seconds(instance, fastest) * 1e6)}"
                          f" against {time_text(rank.seconds(instance, plan) * 1e6)})")
            if allowed is not None and model_bound >= plan.makespan:
                result.why += "; the greedy plan is optimal for its routing"
        else:
            result.why = f"CP-SAT found no solution other than the greedy plan in {budget_text}"
    result.status = f"{result.result}: {result.why}"
    return result



# ----------------------------------------------------------------------------------- to schedules
def _forward_transfers(result: PhaseResult, coll: Collective, offset: int = 0,
                       after: dict[int, int] | None = None, base: int = 0) -> list[_Planned]:
    """Copies in planned order; a copy from a non-source waits for the copy that delivered the chunk.
    ``after`` maps chunk -> planned index the source must wait for (allreduce: its reduction)."""
    instance = result.instance
    planned: list[_Planned] = []
    delivered: dict[tuple[int, int], int] = {}
    for s in sorted(result.plan.sends, key=lambda s: (s.epoch, s.link, s.item)):
        item = instance.items[s.item]
        link = instance.links[s.link]
        deps = []
        if link.src != item.source:
            deps.append(delivered[(s.item, link.src)])
        elif after is not None and item.chunk in after:
            deps.append(after[item.chunk])
        index = base + len(planned)
        planned.append(_Planned(link.src, link.dst, item.chunk, link.path, COPY, offset + s.epoch,
                                offset + s.epoch + instance.delay[s.link], deps))
        delivered[(s.item, link.dst)] = index
    return planned


def _reversed_transfers(result: PhaseResult, coll: Collective) -> tuple[list[_Planned], dict[int, int]]:
    """Reduce-scatter as the time-reversed allgather (solved on the transposed topology): every copy
    a -> b of chunk c at epochs [k, k+d) becomes a reduce b -> a at [K-k-d, K-k). Reduces into one cell
    are chained in time order; a gpu sends its partial value after the last reduce into it."""
    instance = result.instance
    horizon = result.plan.makespan
    raw = []
    for s in result.plan.sends:
        item = instance.items[s.item]
        link = instance.links[s.link]
        start = horizon - s.epoch - instance.delay[s.link]
        raw.append((start, horizon - s.epoch, link.dst, link.src, item.chunk, tuple(reversed(link.path))))
    raw.sort(key=lambda r: (r[0], r[1], r[4], r[2], r[3]))
    planned = [_Planned(src, dst, chunk, path, REDUCE, start, end) for start, end, src, dst, chunk, path in raw]
    into: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, t in enumerate(planned):
        into[(t.dst, t.chunk)].append(index)
    tails: dict[tuple[int, int], int] = {}
    for cell, indices in into.items():
        indices.sort(key=lambda i: (planned[i].start, planned[i].end, i))
        for before, current in zip(indices, indices[1:], strict=False):
            planned[current].deps.append(before)
        tails[cell] = indices[-1]
    for t in planned:
        tail = tails.get((t.src, t.chunk))
        if tail is not None:
            t.deps.append(tail)
    per = coll.chunks_per_rank
    finished = {chunk: tails[(chunk // per, chunk)] for chunk in range(coll.chunks) if (chunk // per, chunk) in tails}
    return planned, finished


def _transpose(topology: Topology) -> Topology:
    """The same network with every link reversed (for the reduce-scatter phase)."""
    return Topology(name=topology.name, graph=nx.freeze(topology.graph.reverse(copy=True)), gpus=topology.gpus,
                    description=topology.description, boxes=topology.boxes, dimensions=topology.dimensions,
                    metadata=topology.metadata)


def _order_by_link(planned: list[_Planned], phases: list[tuple[str, PhaseResult]], chunk_bytes: float,
                   topology: Topology) -> list[list[int]]:
    """Extra deps that keep the transfers on each contended physical link in their planned order.

    A contended link (one the plan fills to capacity somewhere) gets L lanes: its transfers, sorted by
    planned start, are dealt to the lanes in turn and each waits for the previous one in its lane.
    L is the plan's parallelism on the link, and at least α/(chunk time) of the slowest route using
    it, so that a chain does not idle the link while each transfer pays its latency.
    """
    contended: dict[tuple[str, str], int] = {}
    for _, result in phases:
        instance = result.instance
        usage: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for s in result.plan.sends:
            for edge in instance.links[s.link].hops:
                usage[edge][s.epoch] += 1
        for edge, per_epoch in usage.items():
            width, limit = instance.window[edge], instance.cap[edge]
            if any(sum(per_epoch.get(e, 0) for e in range(epoch, epoch + width)) >= limit for epoch in per_epoch):
                u, v = instance.edges[edge]
                parallel = max(1, math.ceil(limit / width))
                contended[(u, v)] = max(contended.get((u, v), 1), parallel)
                contended[(v, u)] = max(contended.get((v, u), 1), parallel)  # as seen from a transposed phase
    if not contended:
        return [[] for _ in planned]
    on_link: dict[tuple[str, str], list[int]] = defaultdict(list)
    alpha: dict[tuple[str, str], float] = defaultdict(float)
    for index, t in enumerate(planned):
        latency = None
        for hop in zip(t.path, t.path[1:], strict=False):
            if hop in contended:
                on_link[hop].append(index)
                if latency is None:
                    latency = topology.path_latency(t.path)
                alpha[hop] = max(alpha[hop], latency)
    extra: list[set[int]] = [set() for _ in planned]
    for hop, indices in on_link.items():
        seconds_per_chunk = chunk_bytes / (topology.bandwidth(*hop) * 1e3)  # microseconds
        in_flight = math.floor((alpha[hop] + seconds_per_chunk) / seconds_per_chunk + 0.5) if seconds_per_chunk else 1
        lanes = max(contended[hop], in_flight)
        indices.sort(key=lambda i: (planned[i].start, planned[i].end, i))
        for position in range(lanes, len(indices)):
            extra[indices[position]].add(indices[position - lanes])
    return [sorted(e) for e in extra]


def _build(topology: Topology, coll: Collective, planned: list[_Planned], phases: list[tuple[str, PhaseResult]],
           variant: str, size: int, params: dict[str, Any]) -> Schedule:
    """Number the planned transfers in planned-time order and make the schedule."""
    chunk_bytes = size / coll.chunks
    extra = _order_by_link(planned, phases, chunk_bytes, topology) if variant == "link" else [[] for _ in planned]
    order = sorted(range(len(planned)), key=lambda i: (planned[i].start, planned[i].end, i))
    new_id = {old: new for new, old in enumerate(order)}
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "milp", params)
    for old in order:
        t = planned[old]
        deps = {new_id[d] for d in t.deps} | {new_id[d] for d in extra[old]}
        builder.add(t.src, t.dst, t.chunk, t.path, t.op, deps)
    return builder.build()


def time_text(us: float) -> str:
    """Microseconds as ``12.3 us`` or ``4.56 ms``."""
    return f"{us / 1e3:.4g} ms" if us >= 1e3 else f"{us:.4g} us"


def phase_summary(result: PhaseResult) -> str:
    """One line saying what produced a phase's plan (see the module notes)."""
    epochs = f"{result.plan.makespan} epochs of {time_text(result.instance.epoch_us)}"
    gap = "" if result.result == "optimal" else \
        f", gap {100 * result.gap:.1f}% to the lower bound of {result.lower_bound}"
    size = f"{result.model}, {result.variables:,} variables" if result.model != "none" else \
        f"the time-indexed model would have {result.variables:,} variables"
    greedy_epochs = result.info.get("greedy_epochs")
    if result.result == "optimal":
        who = "by the lower bound" if result.proved_by == "bound" else "by CP-SAT"
        return f"proven optimal {who}: {epochs} ({result.why}; {size})"
    if result.result == "improved":
        simulated = (f", simulated {time_text(result.info['simulated_us'])} against the greedy plan's "
                     f"{time_text(result.info['greedy_us'])}" if "greedy_us" in result.info else "")
        return (f"improved by CP-SAT: {epochs} (greedy plan {greedy_epochs}){simulated}{gap} "
                f"({size})")
    return f"greedy plan: {epochs}{gap}; {result.why} ({size})"


def _assemble(topology: Topology, coll: Collective, planned: list[_Planned], phases: list[tuple[str, PhaseResult]],
              settings: Settings, variant: str) -> Schedule:
    first = phases[0][1]
    epochs = sum(result.plan.makespan for _, result in phases)
    lower = sum(result.lower_bound for _, result in phases)
    results = {result.result for _, result in phases}
    overall = "optimal" if results == {"optimal"} else "improved" if "improved" in results else "greedy"
    if len(phases) == 1:
        summary = phase_summary(first)
    else:
        summary = f"{overall}: " + "; ".join(f"{name} {phase_summary(result)}" for name, result in phases)
    params: dict[str, Any] = {
        "chunks": coll.chunks,
        "size": settings.size,
        "result": overall,
        "proved_by": first.proved_by if overall == "optimal" and len(phases) == 1 else (
            "+".join(result.proved_by for _, result in phases) if overall == "optimal" else ""),
        "summary": summary,
        "epoch_us": first.instance.epoch_us,
        "epochs": epochs,
        "lower_bound_epochs": lower,
        "combinatorial_bound_epochs": sum(result.info["bound"] for _, result in phases),
        "gap": (epochs - lower) / epochs if epochs else 0.0,
        "greedy_epochs": sum(result.info.get("greedy_epochs") or 0 for _, result in phases) or None,
        "model": "; ".join(result.model for _, result in phases),
        "variables": sum(result.variables for _, result in phases),
        "why": "; ".join(result.why for _, result in phases),
        "status": "; ".join(f"{name}: {result.status}" for name, result in phases),
        "solver": "CP-SAT",
        "time_limit_s": settings.time_limit_s,
        "seed": settings.seed,
        "workers": settings.workers,
        "order_deps": variant,
        "sketch": settings.sketch.name or ("custom" if settings.sketch.to_dict() != load_sketch(None).to_dict()
                                           else "none"),
        "logical_links": len(first.instance.links),
    }
    if len(phases) == 1:
        for key in ("greedy_us", "simulated_us"):
            if key in first.info:
                params[key] = round(first.info[key], 6)
    stopped = [result.stopped_by for _, result in phases if result.stopped_by]
    if stopped:
        params["stopped_by"] = stopped[0]
    if len(phases) > 1:
        params["phases"] = {name: {"result": r.result, "epochs": r.plan.makespan, "lower_bound_epochs": r.lower_bound,
                                   "gap": r.gap, "greedy_epochs": r.info.get("greedy_epochs"), "model": r.model,
                                   "variables": r.variables, "why": r.why, "epoch_us": r.instance.epoch_us}
                            for name, r in phases}
    limits.check_transfers(len(planned), f"milp {coll.kind} on {topology.name}")
    return _build(topology, coll, planned, phases, variant, settings.size, params)


__all__ = ["EpochModelRank", "PhaseResult", "PhaseSetup", "Problem", "Progress", "Rank", "Settings", "construct",
           "default_time_limit", "milp", "phase_summary", "prepare", "time_text"]
