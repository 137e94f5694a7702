"""The flow-level simulator: a schedule streamed the way a runtime streams it, with max-min link sharing.

What it models (the ``flow`` model of :mod:`synth.evaluate`), for a schedule at one message size under
an execution :class:`~synth.plan.Plan`:

- every chunk moves in ``plan.slices`` slices of ``plan.slice_bytes``; a transfer sends its slices one
  after another (one connection), each slice starting once the previous one has left the source, the
  slice ``window`` places back has arrived (``plan.window`` slices in flight), and the same slice of
  every dep has arrived (data a rank forwards or reduces is the data it has received: a relay through a
  gpu is store-and-forward at slice granularity);
- a slice's bytes stream along the transfer's path at the rate max-min fair sharing gives it among all
  slices crossing the same links at that moment (progressive filling; link bandwidth times the
  protocol's efficiency): the standard flow-level model;
- a transfer's latency (its path's link latencies plus the protocol's per-step latency) is paid once per
  slice as a delay between leaving the source and arriving, so slices in flight overlap it: a lone
  transfer of any number of slices takes ``latency + bytes / bandwidth``;
- a transfer whose path has one node (a local copy or reduce) takes no time;
- the protocol's base latency is added once; reductions on gpus cost no time;
- in-switch operations (``switch_ops``): every leg is a transfer on its links like any other, and an
  output leg starts each slice once that slice of every input has reached the switch (its deps), so a
  switch streams its result as the inputs arrive. A switch's ``reduction.throughput`` is one more shared
  resource, crossed by the first output leg of each of its reduce ops (the one that takes the sum as it
  is formed; a reduce with several outputs forms each sum once), and likewise ``multicast.throughput`` by
  the first output of each multicast; both are scaled by the protocol's efficiency like the links (the
  switch handles what crosses the wire). A switch without a throughput limits nothing. A leg pays the
  network step latency when its op's legs reach gpus of more than one box, else the step latency.

How it runs: slices with the same path share one *class* (same rate, FIFO finish order, one byte counter),
and rates are recomputed only when some class's membership changed; the rates of the classes that share
a link come from progressive filling and are remembered by their member counts. State is per transfer
(slices sent, slices arrived), not per slice, so memory is linear in transfers whatever the slice count.
Slices of one class all move at the same rate, so they finish in the order they joined: a class keeps
one byte counter and a queue of its slices, each with the counter value at which it is done. The
classes, deps and link incidence are built here in one pass over the transfers (numpy arrays), then one
of two engines runs the events:

- ``compiled`` (the default): the event loop compiled by numba (:mod:`synth.flow_kernels`), one event at
  a time over flat arrays. numba is imported at the first simulation in a process, not with this module,
  and the machine code is cached on disk: the first simulation on a machine (or after the kernels'
  source changes) compiles it, about 14 s of one core's time, and a later process loads it with numba's
  import in about 0.5 s (where no cache folder is writable, every process compiles);
- ``reference``: the same loop in numpy, a batch of array operations per event
  (:mod:`synth.flow_reference`): 30 to 65 times slower where events dominate (forests whose slices keep
  changing which flows share a link), 4 to 10 times where a million transfers with few events leave the
  Python pass that builds the classes as the main cost (``bench/bench_flow.py``).

Both do the same floating-point operations in the same order, so their results are identical to the
last digit (time, events, rate updates and link-sharing work); the tests compare them.

Latency is never paid per slice, so cutting chunks into more slices (within the window) costs no
latency. Like any greedy schedule under fair sharing, though, the model has small anomalies: reordering
between slices of different transfers on a shared link can cost a little (up to 1.5% in the tests'
cases, DGX-1's tree allreduce, which shows it with every latency zero too).

Examples
--------
>>> from synth.library import load_topology
>>> from synth.algorithms import synthesize
>>> from synth.plan import make_plan
>>> topo = load_topology("ring:n=2,latency=0,bandwidth=1")
>>> ring = synthesize(topo, "allgather", "ring")
>>> round(simulate(ring, topo, 2 * 10**9, make_plan(ring.chunks, 2 * 10**9, "ideal")), 9)  # 1 GB over 1 GB/s
1.0
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from synth.errors import InputError, LimitError, VerificationError
from synth.plan import Plan, Protocol, make_plan
from synth.schedule import ScheduleForm, Transfer
from synth.topology import Topology

GIGA = 10**9
MICRO = 1e-6
#: Relative tolerance under which two events count as simultaneous.
_TOLERANCE = 1e-9

#: The simulator's engines (see the module doc).
Engine = Literal["compiled", "reference"]


@dataclass(frozen=True)
class FlowResult:
    """What the simulation found: the time and how much work it took."""

    time_s: float
    events: int
    rate_updates: int
    #: Link-sharing work done: class-link entries over all progressive-filling rounds (see ``work_limit``).
    sharing_work: int = 0


@dataclass
class _Classes:
    """Path classes: their links (CSR incidence), latency (s) and whether they have no links; and per
    class, the slices each of its transfers sends, how many may be in flight, the bytes of one slice (in
    the units the capacities count) and the part of a joint simulation its transfers belong to."""

    of_transfer: np.ndarray
    entry_link: np.ndarray
    entry_class: np.ndarray
    capacity: np.ndarray
    delay: np.ndarray
    local: np.ndarray
    slices: np.ndarray
    window: np.ndarray
    slice_bytes: np.ndarray
    part: np.ndarray


def _switch_charges(schedule: ScheduleForm,
                    topology: Topology) -> tuple[dict[int, tuple[str, str, float]], list[bool]]:
    """For a schedule with switch ops: the output legs that cross a switch's throughput (transfer id ->
    (switch, ``"reduction"`` or ``"multicast"``, GB/s)) and, per op, whether its legs reach gpus of more
    than one box."""
    ops = schedule.switch_ops
    if not ops:
        return {}, []
    charged: dict[int, tuple[str, str, float]] = {}
    first_output = [-1] * len(ops)
    spans: list[set[int]] = [set() for _ in ops]
    boxes = topology.boxes
    for t in schedule.iter_transfers():
        index = t.to_switch if t.to_switch is not None else t.from_switch
        if index is None:
            continue
        rank = t.src if t.to_switch is not None else t.dst
        if boxes is not None and rank is not None:
            spans[index].add(boxes[rank])
        if t.from_switch is not None and first_output[index] < 0:
            first_output[index] = t.id
    for index, switch_op in enumerate(ops):
        caps = topology.capabilities.get(switch_op.switch)
        if caps is None or first_output[index] < 0:
            continue
        if switch_op.kind == "reduce":
            rate = None if caps.reduction is None else caps.reduction.throughput
        else:
            rate = None if caps.multicast is None else caps.multicast.throughput
        if rate is not None:
            kind = "reduction" if switch_op.kind == "reduce" else "multicast"
            charged[first_output[index]] = (switch_op.switch, kind, float(rate))
    return charged, [len(members) > 1 for members in spans]


def _classes(transfers: Iterable[Transfer], count: int, topology: Topology, plan: Plan,
             schedule: ScheduleForm | None = None) -> tuple[_Classes, np.ndarray, np.ndarray]:
    """The path classes and the deps of ``count`` transfers (ids 0..count-1), in one pass over them, so a
    trees-form schedule streams through without its transfers being held: (classes, each transfer's
    number of deps, every transfer's deps one after the other). ``schedule``, when it has switch ops,
    adds the switches' throughputs as resources (see the module doc)."""
    return _joint_classes([(transfers, count, topology, plan, schedule)])


#: One part of a joint simulation: its transfers, how many, the topology view they run on (the same
#: fabric for every part), the plan and the schedule (for its switch ops).
_Part = tuple[Iterable[Transfer], int, Topology, Plan, "ScheduleForm | None"]


def _joint_classes(parts: list[_Part]) -> tuple[_Classes, np.ndarray, np.ndarray]:
    """:func:`_classes` of several schedules that run at once on one fabric: part p's transfer ids are
    offset by the transfers of the parts before it, a class never mixes parts (its slices have one size),
    and links are shared by their ends. Capacities are scaled by the first part's protocol efficiency; a
    part of another efficiency has its slices scaled by the ratio, so each moves at its protocol's rate
    through a link it shares (one part: exactly :func:`_classes`)."""
    build = _ClassBuilder(float(parts[0][3].costs.efficiency))
    #: where each part's transfers and deps start in ``ids`` and ``dep_flat`` (offset there afterwards)
    id_starts: list[int] = []
    dep_starts: list[int] = []
    for part_index, (transfers, _, topology, plan, schedule) in enumerate(parts):
        id_starts.append(len(build.ids))
        dep_starts.append(len(build.dep_flat))
        build.add(part_index, transfers, topology, plan, schedule)
    total = sum(part[1] for part in parts)
    by_id = np.frombuffer(build.ids, dtype=np.int64) if total else np.empty(0, dtype=np.int64)
    flat = (np.frombuffer(build.dep_flat, dtype=np.int64).copy() if len(build.dep_flat)
            else np.empty(0, dtype=np.int64))
    if len(parts) > 1:
        by_id = by_id.copy()
        for index, part in enumerate(parts[:-1]):  # each later part's ids and deps move past this one's
            by_id[id_starts[index + 1]:] += part[1]
            flat[dep_starts[index + 1]:] += part[1]
    of_transfer = np.empty(total, dtype=np.int64)
    of_transfer[by_id] = np.frombuffer(build.of_class, dtype=np.int64) if total else by_id
    counts = np.empty(total, dtype=np.int64)
    counts[by_id] = np.frombuffer(build.dep_counts, dtype=np.int64) if total else by_id
    classes = _Classes(of_transfer, np.array(build.entry_link, dtype=np.int64),
                       np.array(build.entry_class, dtype=np.int64), np.array(build.capacity, dtype=np.float64),
                       np.array(build.delay, dtype=np.float64), np.array(build.local, dtype=bool),
                       np.array(build.slices, dtype=np.int64), np.array(build.window, dtype=np.int64),
                       np.array(build.slice_bytes, dtype=np.float64), np.array(build.part, dtype=np.int64))
    return classes, counts, flat


class _ClassBuilder:
    """The flat lists :func:`_joint_classes` fills, part by part: links (shared by their ends), switch
    resources, classes (per part) and the transfers' ids, classes and deps (each part's own ids)."""

    def __init__(self, reference_efficiency: float) -> None:
        self.reference_efficiency = reference_efficiency
        self.link_index: dict[tuple[str, str], int] = {}
        #: (switch, "reduction" or "multicast") -> its throughput's index among the capacities
        self.resource_index: dict[tuple[str, str], int] = {}
        self.capacity: list[float] = []
        self.entry_link: list[int] = []
        self.entry_class: list[int] = []
        self.delay: list[float] = []
        self.local: list[bool] = []
        self.slices: list[int] = []
        self.window: list[int] = []
        self.slice_bytes: list[float] = []
        self.part: list[int] = []
        self.ids, self.of_class, self.dep_counts, self.dep_flat = array("q"), array("q"), array("q"), array("q")

    def add(self, part_index: int, transfers: Iterable[Transfer], topology: Topology, plan: Plan,
            schedule: ScheduleForm | None) -> None:
        """One part's transfers, in one pass (its classes made as their paths first appear)."""
        charged, network_op = _switch_charges(schedule, topology) if schedule is not None else ({}, [])
        efficiency = float(plan.costs.efficiency)
        slice_bytes = float(plan.slice_bytes)
        if efficiency != self.reference_efficiency:
            slice_bytes = slice_bytes * self.reference_efficiency / efficiency
        class_of_path: dict[Any, int] = {}  # per part: a class never mixes parts
        known = class_of_path.get
        ids, of_class, dep_counts, dep_flat = self.ids, self.of_class, self.dep_counts, self.dep_flat
        for t in transfers:
            key: Any = t.path
            op_index = t.switch_op
            if network_op and op_index is not None:
                resource = charged.get(t.id)
                key = (t.path, None if resource is None else resource[:2], network_op[op_index])
            cls = known(key)
            if cls is None:
                cls = class_of_path[key] = self._new_class(t, topology, plan, charged, network_op)
                self.slice_bytes.append(slice_bytes)
                self.part.append(part_index)
            ids.append(t.id)
            of_class.append(cls)
            deps = t.deps
            dep_counts.append(len(deps))
            dep_flat.extend(deps)

    def _new_class(self, t: Transfer, topology: Topology, plan: Plan,
                   charged: dict[int, tuple[str, str, float]], network_op: list[bool]) -> int:
        """A new class for ``t``'s path: its link entries, delay, slices and window."""
        cls = len(self.delay)
        for hop in zip(t.path, t.path[1:], strict=False):
            index = self.link_index.get(hop)
            if index is None:
                index = len(self.capacity)
                self.link_index[hop] = index
                self.capacity.append(topology.bandwidth(*hop) * GIGA * self.reference_efficiency)
            self.entry_link.append(index)
            self.entry_class.append(cls)
        resource = charged.get(t.id)
        if resource is not None:  # kept apart from the links: a node may be named "reduction" or "multicast"
            index = self.resource_index.get(resource[:2])
            if index is None:
                index = len(self.capacity)
                self.resource_index[resource[:2]] = index
                self.capacity.append(resource[2] * GIGA * self.reference_efficiency)
            self.entry_link.append(index)
            self.entry_class.append(cls)
        is_local = len(t.path) < 2
        self.local.append(is_local)
        if is_local:
            self.delay.append(0.0)
        else:
            costs = plan.costs
            op_index = t.switch_op
            if op_index is not None:
                between_boxes = network_op[op_index]
            else:
                boxes = topology.boxes
                between_boxes = boxes is not None and boxes[t.src] != boxes[t.dst]  # type: ignore[index]
            step = costs.network_step_latency_us if between_boxes else costs.step_latency_us
            self.delay.append((topology.path_latency(t.path) + step) * MICRO)
        self.slices.append(plan.slices)
        self.window.append(plan.window)
        return cls


#: Memory for remembered max-min rates, in bytes (each set of active flows costs 8 bytes per path class).
MEMO_BYTES = 64 * 2**20


def _shared_classes(entry_link: np.ndarray, entry_class: np.ndarray, num_links: int,
                    num_classes: int) -> np.ndarray:
    """Which classes cross a link that another class crosses too (paths are simple: one entry per link)."""
    shared = np.zeros(num_classes, dtype=bool)
    crossing = np.bincount(entry_link, minlength=num_links)
    shared[entry_class[crossing[entry_link] > 1]] = True
    return shared


def _csr(counts: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pointer = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=pointer[1:])
    return pointer, flat


def _transfers(schedule: ScheduleForm) -> tuple[int, Iterable[Transfer]]:
    """How many transfers ``schedule`` has and the transfers themselves (a trees-form schedule's made one at
    a time as they are read)."""
    return schedule.num_transfers(), schedule.iter_transfers()


def _stall_error() -> VerificationError:
    return VerificationError("flow simulation stalled: some transfers never become ready "
                             "(their deps form a cycle; verify the schedule)")


def _work_limit_error(schedule: ScheduleForm, size: int, plan: Plan, work_limit: int,
                      events: int) -> LimitError:
    return LimitError(f"flow simulation of {schedule.algorithm} {schedule.kind} at {size} "
                      f"bytes under {plan.describe()}: link sharing past the work limit "
                      f"of {work_limit:,} after {events:,} events")


def simulate(schedule: ScheduleForm, topology: Topology, size: int, plan: Plan | None = None,
             cutoff: float | None = None, work_limit: int | None = None, engine: Engine = "compiled") -> float:
    """Completion time in seconds of ``schedule`` at ``size`` bytes under ``plan`` (see the module doc).

    Without a plan: the ``ideal`` protocol with every chunk one slice, the plain chunk-level α-β model
    (the yardstick algorithms use; commands use :func:`synth.evaluate.evaluate` and the plan rule).

    With ``cutoff`` (seconds), a time over the cutoff is returned as ``inf``, and the simulation stops as
    soon as its clock shows that it will be: a caller choosing the fastest of several candidates learns
    that this one loses without simulating it to the end (the times it does return are unchanged).

    With ``work_limit``, a simulation whose link sharing costs more than that (class-link entries summed
    over its progressive-filling rounds, :attr:`FlowResult.sharing_work`) stops with
    :class:`~synth.errors.LimitError`: a caller trying optional candidates skips the few whose sets of
    active flows rarely repeat, so that nearly every event fills the links again (on GB200 NVL72, a
    reduce's sixteen trees with 32 KiB slices: 110,000 fills in 110,300 rate updates, 15 minutes
    unfinished, where 64 KiB slices need 2,900 updates and 70 s).

    A schedule in the trees form (:mod:`synth.trees`) streams through: its transfers are made one at a
    time and only the simulator's arrays are kept, so it runs past the transfer limit.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=2,latency=0,bandwidth=1")
    >>> simulate(synthesize(topo, "allgather", "ring"), topo, 2 * 10**9)  # 1 GB over 1 GB/s
    1.0
    """
    if plan is None:
        plan = make_plan(schedule.collective.chunks, size, Protocol.IDEAL, slices=1)
    return simulate_detailed(schedule, topology, size, plan, cutoff, work_limit, engine).time_s


def simulate_detailed(schedule: ScheduleForm, topology: Topology, size: int, plan: Plan,
                      cutoff: float | None = None, work_limit: int | None = None,
                      engine: Engine = "compiled") -> FlowResult:
    """:func:`simulate` with the event and rate-update counts and the link-sharing work (for benchmarks).

    ``engine``: ``"compiled"`` (numba) or ``"reference"`` (numpy, :mod:`synth.flow_reference`); both give
    the same result to the last digit.
    """
    if engine not in ("compiled", "reference"):
        raise InputError("", "engine", f"unknown flow engine {engine!r}; expected compiled or reference")
    count, transfers = _transfers(schedule)
    base = fixed_latency_s(topology, plan)
    if count == 0:
        return FlowResult(0.0, 0, 0)
    classes, dep_counts, dep_flat = _classes(transfers, count, topology, plan, schedule)

    def over_limit(events: int) -> LimitError:
        assert work_limit is not None
        return _work_limit_error(schedule, size, plan, work_limit, events)

    if engine == "reference":
        from synth.flow_reference import run_reference

        return run_reference(classes, dep_counts, dep_flat, np.array([base]), cutoff, work_limit, over_limit)[0]
    return _run_compiled(classes, dep_counts, dep_flat, np.array([base]), cutoff, work_limit, over_limit)[0]


def _run_compiled(classes: _Classes, dep_counts: np.ndarray, dep_flat: np.ndarray, part_base: np.ndarray,
                  cutoff: float | None, work_limit: int | None,
                  over_limit: Callable[[int], LimitError]) -> tuple[FlowResult, np.ndarray]:
    """The compiled event loop over ``classes`` (:func:`synth.flow_kernels.run`): the result and each
    part's finish; a stall or the work limit raised as the reference engine raises them."""
    from synth import flow_kernels

    limit = 2**63 - 1 if work_limit is None else min(int(work_limit), 2**63 - 1)
    outcome, time_s, events, rate_updates, work, part_finish = flow_kernels.run(
        _TOLERANCE, part_base, math.inf if cutoff is None else float(cutoff), limit,
        *_kernel_arrays(classes, dep_counts, dep_flat))
    if outcome == flow_kernels.STALLED:
        raise _stall_error()
    if outcome == flow_kernels.PAST_WORK_LIMIT:
        raise over_limit(int(events))
    return FlowResult(float(time_s), int(events), int(rate_updates), int(work)), part_finish


@dataclass(frozen=True)
class JointResult:
    """What a joint simulation found: each schedule's finish time (s, in the order given) and the work."""

    finish_s: tuple[float, ...]
    events: int
    rate_updates: int
    sharing_work: int

    @property
    def time_s(self) -> float:
        """The makespan: when the last of the schedules finishes."""
        return max(self.finish_s, default=0.0)


def simulate_together(parts: Sequence[tuple[ScheduleForm, Topology, int, Plan]],
                      work_limit: int | None = None, engine: Engine = "compiled") -> JointResult:
    """Several schedules started together on one fabric, sharing its links and switches: each part is a
    schedule, the topology it was made on (the fabric, or a :func:`synth.groups.group_view` of it), its
    message size and its plan.

    Every part runs as :func:`simulate` runs it alone (its slices, window, latencies and fixed cost), and
    every link's bandwidth is shared max-min among the slices of every part crossing it at that moment;
    a part finishes at its last arrival plus its own fixed latency. One part gives exactly
    :func:`simulate_detailed`'s time. Parts of different protocols share a link at each one's efficiency
    (a slice of payload p at efficiency e occupies p / e of the wire).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=2,latency=0,bandwidth=1")
    >>> ring = synthesize(topo, "allgather", "ring")
    >>> plan = make_plan(ring.chunks, 2 * 10**9, "ideal")
    >>> [round(t, 9) for t in simulate_together([(ring, topo, 2 * 10**9, plan)] * 2).finish_s]  # each at half rate
    [2.0, 2.0]
    """
    if engine not in ("compiled", "reference"):
        raise InputError("", "engine", f"unknown flow engine {engine!r}; expected compiled or reference")
    if not parts:
        return JointResult((), 0, 0, 0)
    fabric = parts[0][1].graph
    for index, (_, view, _, _) in enumerate(parts):
        if view.graph is not fabric and (set(view.graph.edges) != set(fabric.edges)):
            raise InputError("", f"parts[{index}]", "expected schedules on one fabric (the same links), got "
                             f"{view.name!r} and {parts[0][1].name!r}")
    joint: list[_Part] = []
    running: list[int] = []  # the parts with transfers (the others finish at 0)
    for index, (schedule, view, _, plan) in enumerate(parts):
        count, transfers = _transfers(schedule)
        if count:
            joint.append((transfers, count, view, plan, schedule))
            running.append(index)
    finish = [0.0] * len(parts)
    if not joint:
        return JointResult(tuple(finish), 0, 0, 0)
    classes, dep_counts, dep_flat = _joint_classes(joint)
    part_base = np.array([fixed_latency_s(parts[index][1], parts[index][3]) for index in running])

    def over_limit(events: int) -> LimitError:
        return LimitError(f"joint flow simulation of {len(parts)} schedules: link sharing past the work limit "
                          f"of {work_limit:,} after {events:,} events")

    if engine == "reference":
        from synth.flow_reference import run_reference

        result, part_finish = run_reference(classes, dep_counts, dep_flat, part_base, None, work_limit, over_limit)
    else:
        result, part_finish = _run_compiled(classes, dep_counts, dep_flat, part_base, None, work_limit, over_limit)
    for index, seconds in zip(running, part_finish.tolist(), strict=True):
        finish[index] = seconds
    return JointResult(tuple(finish), result.events, result.rate_updates, result.sharing_work)


#: The topology metadata key of a network stack's fixed cost per collective across boxes (µs).
NETWORK_OVERHEAD_KEY = "network_overhead_us"


def fixed_latency_s(topology: Topology, plan: Plan) -> float:
    """What a collective pays once, in seconds: the protocol's base latency, plus the topology's network
    overhead (``metadata["network_overhead_us"]``, set by ``SPEC@achievable:efa`` and the like: the network
    stack's fixed cost per operation) where its ranks span several boxes.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.plan import make_plan
    >>> plan = make_plan(chunks=16, size=2**10, protocol="LL")
    >>> round(fixed_latency_s(load_topology("dgx-h100:boxes=2"), plan) * 1e6, 3)
    3.6
    >>> round(fixed_latency_s(load_topology("dgx-h100:boxes=2@achievable:efa"), plan) * 1e6, 3)
    83.6
    """
    seconds = plan.costs.base_latency_us * MICRO
    overhead = topology.metadata.get(NETWORK_OVERHEAD_KEY)
    if overhead and topology.boxes is not None and len(set(topology.boxes)) > 1:
        seconds += float(overhead) * MICRO
    return seconds


def _kernel_arrays(classes: _Classes, dep_counts: np.ndarray, dep_flat: np.ndarray) -> tuple[Any, ...]:
    """The arrays :func:`synth.flow_kernels.run` takes after its scalars: the classes of the transfers, their
    delays and which are local, their slices, window, slice bytes and part, the deps and children (CSR), the lone classes' narrowest link, the shared
    classes and where each class is among them (-1: lone), the shared classes' class-link entries (link,
    position among the shared), the link capacities and the memo's entry limit (as :class:`_MaxMin` of
    :mod:`synth.flow_reference` sets them up)."""
    count = len(dep_counts)
    num_classes = len(classes.delay)
    entry_link, entry_class, capacity = classes.entry_link, classes.entry_class, classes.capacity
    dep_ptr, _ = _csr(dep_counts, dep_flat)
    owners = np.repeat(np.arange(count, dtype=np.int64), dep_counts)
    order = np.argsort(dep_flat, kind="stable")
    child_ptr, child_flat = _csr(np.bincount(dep_flat, minlength=count), owners[order])
    is_shared = _shared_classes(entry_link, entry_class, len(capacity), num_classes)
    narrowest = np.full(num_classes, np.inf)
    lone_entries = ~is_shared[entry_class]
    np.minimum.at(narrowest, entry_class[lone_entries], capacity[entry_link[lone_entries]])
    shared = np.flatnonzero(is_shared).astype(np.int64)
    shared_at = np.full(num_classes, -1, dtype=np.int64)
    shared_at[shared] = np.arange(len(shared), dtype=np.int64)
    fill_link = np.ascontiguousarray(entry_link[~lone_entries], dtype=np.int64)
    fill_slot = shared_at[entry_class[~lone_entries]]
    memo_entries = max(1, MEMO_BYTES // (16 * max(1, len(shared))))
    return (np.ascontiguousarray(classes.of_transfer, dtype=np.int64), classes.delay, classes.local,
            classes.slices, classes.window, classes.slice_bytes, classes.part, dep_ptr,
            np.ascontiguousarray(dep_flat, dtype=np.int64), child_ptr, np.ascontiguousarray(child_flat),
            narrowest, shared, shared_at, fill_link, fill_slot, np.ascontiguousarray(capacity, dtype=np.float64),
            memo_entries)
