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
- the protocol's base latency is added once; reductions cost no time.

How it runs: events are handled in batches (every slice finishing at one instant together, numpy over
the batch), slices with the same path share one *class* (same rate, FIFO finish order, one byte counter)
and rates are recomputed only when some class's membership changed. State is per transfer (slices
sent, slices arrived), not per slice, so memory is linear in transfers whatever the slice count. Slices
of one class all move at the same rate, so they finish in the order they joined: a class keeps one byte
counter and a queue of the groups of slices that joined together, with the counter value at which
each group is done.

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

import heapq
import itertools
import math
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from synth.errors import LimitError, VerificationError
from synth.plan import Plan, Protocol, make_plan
from synth.schedule import Schedule, Transfer
from synth.topology import Topology
from synth.trees import TreeSchedule

GIGA = 10**9
MICRO = 1e-6
#: Relative tolerance under which two events count as simultaneous.
_TOLERANCE = 1e-9


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
    """Path classes: their links (CSR incidence), latency (s) and whether they have no links."""

    of_transfer: np.ndarray
    entry_link: np.ndarray
    entry_class: np.ndarray
    capacity: np.ndarray
    delay: np.ndarray
    local: np.ndarray


def _classes(transfers: Iterable[Transfer], count: int, topology: Topology,
             plan: Plan) -> tuple[_Classes, np.ndarray, np.ndarray]:
    """The path classes and the deps of ``count`` transfers (ids 0..count-1), in one pass over them, so a
    trees-form schedule streams through without its transfers being held: (classes, each transfer's
    number of deps, every transfer's deps one after the other)."""
    costs = plan.costs
    boxes = topology.boxes
    efficiency = float(costs.efficiency)
    link_index: dict[tuple[str, str], int] = {}
    capacity: list[float] = []
    class_of_path: dict[tuple[str, ...], int] = {}
    entry_link: list[int] = []
    entry_class: list[int] = []
    delay: list[float] = []
    local: list[bool] = []
    of_transfer = np.empty(count, dtype=np.int64)
    dep_counts = np.empty(count, dtype=np.int64)
    dep_flat = array("q")
    for t in transfers:
        cls = class_of_path.get(t.path)
        if cls is None:
            cls = len(delay)
            class_of_path[t.path] = cls
            for hop in zip(t.path, t.path[1:], strict=False):
                index = link_index.get(hop)
                if index is None:
                    index = len(capacity)
                    link_index[hop] = index
                    capacity.append(topology.bandwidth(*hop) * GIGA * efficiency)
                entry_link.append(index)
                entry_class.append(cls)
            is_local = len(t.path) < 2
            local.append(is_local)
            if is_local:
                delay.append(0.0)
            else:
                between_boxes = boxes is not None and boxes[t.src] != boxes[t.dst]
                step = costs.network_step_latency_us if between_boxes else costs.step_latency_us
                delay.append((topology.path_latency(t.path) + step) * MICRO)
        of_transfer[t.id] = cls
        dep_counts[t.id] = len(t.deps)
        dep_flat.extend(t.deps)
    classes = _Classes(of_transfer, np.array(entry_link, dtype=np.int64), np.array(entry_class, dtype=np.int64),
                       np.array(capacity, dtype=np.float64), np.array(delay, dtype=np.float64),
                       np.array(local, dtype=bool))
    flat = np.frombuffer(dep_flat, dtype=np.int64).copy() if len(dep_flat) else np.empty(0, dtype=np.int64)
    return classes, dep_counts, flat


#: Memory for remembered max-min rates, in bytes (each set of active flows costs 8 bytes per path class).
MEMO_BYTES = 64 * 2**20


class _MaxMin:
    """Max-min fair per-flow rates of path classes by progressive filling.

    Raise every unfrozen flow's rate together until some link is full, freeze the flows crossing it,
    repeat. A class of ``m`` active flows weighs ``m`` on each of its links.

    Classes that share no link with another class (a torus's neighbour-to-neighbour paths, a box's direct
    links) need no filling: such a class's rate is its narrowest link over its own flow count, one array
    division for all of them. Only the classes that share a link are filled, and their rates are
    remembered by their member counts alone, so an event that changes only a lone class reuses them. A
    lone class touches no other class's link, so leaving it out changes no other class's level.
    """

    def __init__(self, entry_link: np.ndarray, entry_class: np.ndarray, capacity: np.ndarray,
                 num_classes: int) -> None:
        self.capacity = capacity
        self.num_classes = num_classes
        shared = _shared_classes(entry_link, entry_class, len(capacity), num_classes)
        # a lone class's rate is its narrowest link over its flow count (inf: no links, never active)
        self._narrowest = np.full(num_classes, np.inf)
        lone_entries = ~shared[entry_class]
        np.minimum.at(self._narrowest, entry_class[lone_entries], capacity[entry_link[lone_entries]])
        self.shared = np.flatnonzero(shared)
        self.entry_link = entry_link[~lone_entries]
        self.entry_class = entry_class[~lone_entries]
        # Pipelined schedules revisit the same sets of active flows many times (every slice of a step):
        # the rates of the shared classes are a function of their member counts alone, so remember the
        # latest few.
        self._memo: dict[bytes, np.ndarray] = {}
        self._memo_entries = max(1, MEMO_BYTES // (16 * max(1, len(self.shared))))
        self._scratch = np.zeros(num_classes)
        #: class-link entries handled by :meth:`_fill` so far, summed over its rounds (the cost that grows
        #: where few rates can be remembered: sets of active flows that rarely repeat)
        self.work = 0

    def rates(self, members: np.ndarray, rate: np.ndarray) -> None:
        """Write the per-flow rate (bytes/s) of every class into ``rate`` (0 for idle classes)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(self._narrowest, members, out=rate)
        rate[members == 0] = 0.0
        if not len(self.shared):
            return
        key = members[self.shared].tobytes()
        known = self._memo.get(key)
        if known is None:
            self._fill(members, self._scratch)
            known = self._scratch[self.shared]
            if len(self._memo) >= self._memo_entries:
                self._memo.clear()
            self._memo[key] = known
        rate[self.shared] = known

    def _fill(self, members: np.ndarray, rate: np.ndarray) -> None:
        """Progressive filling over the shared classes' entries (rates of other classes left at 0)."""
        rate[:] = 0.0
        weight_all = members[self.entry_class].astype(np.float64)
        live = weight_all > 0
        entry_link = self.entry_link[live]
        entry_class = self.entry_class[live]
        entry_weight = weight_all[live]
        num_links = len(self.capacity)
        remaining = self.capacity.copy()
        hit = np.zeros(self.num_classes, dtype=bool)
        share = np.empty(num_links)
        used = np.empty(num_links, dtype=bool)
        bincount = np.bincount
        while entry_link.size:
            self.work += entry_link.size
            load = bincount(entry_link, weights=entry_weight, minlength=num_links)
            np.greater(load, 0, out=used)
            share.fill(np.inf)
            np.divide(remaining, load, out=share, where=used)
            level = share.min()
            bottleneck = share <= level * (1 + 1e-12)
            hit[:] = False
            hit[entry_class[bottleneck[entry_link]]] = True
            rate[hit] = level
            newly = hit[entry_class]
            if newly.all():
                break
            remaining -= bincount(entry_link[newly], weights=entry_weight[newly] * level, minlength=num_links)
            np.maximum(remaining, 0.0, out=remaining)
            keep = ~newly
            entry_link = entry_link[keep]
            entry_class = entry_class[keep]
            entry_weight = entry_weight[keep]


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


def _gather(pointer: np.ndarray, flat: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The entries of CSR ``rows`` concatenated, and each entry's position in ``rows``."""
    if len(rows) == 1:
        row = int(rows[0])
        values = flat[pointer[row]:pointer[row + 1]]
        return values, np.zeros(len(values), dtype=np.int64)
    starts = pointer[rows]
    lengths = pointer[rows + 1] - starts
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=flat.dtype), np.empty(0, dtype=np.int64)
    owner = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
    first = np.cumsum(lengths) - lengths
    index = np.arange(total, dtype=np.int64) - np.repeat(first, lengths) + np.repeat(starts, lengths)
    return flat[index], owner


def simulate(schedule: Schedule | TreeSchedule, topology: Topology, size: int, plan: Plan | None = None,
             cutoff: float | None = None, work_limit: int | None = None) -> float:
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
    return simulate_detailed(schedule, topology, size, plan, cutoff, work_limit).time_s


def simulate_detailed(schedule: Schedule | TreeSchedule, topology: Topology, size: int, plan: Plan,
                      cutoff: float | None = None, work_limit: int | None = None) -> FlowResult:
    """:func:`simulate` with the event and rate-update counts (for benchmarks).

    Longer than the house limit on purpose: one event loop over numpy state arrays shared with its two
    nested steps (``start``: slices that may start now; ``settle``: what finishing and arriving slices
    free), each under 40 lines; the loop body is the model's definition read in one place, and it runs
    once per event on schedules of millions of slice transfers, so its state stays in local variables.
    """
    if isinstance(schedule, TreeSchedule):
        count = schedule.num_transfers()
        transfers: Iterable[Transfer] = schedule.iter_transfers()
    else:
        count = len(schedule.transfers)
        transfers = schedule.transfers
    base = plan.costs.base_latency_us * MICRO
    if count == 0:
        return FlowResult(0.0, 0, 0)
    slices = plan.slices
    window = plan.window
    slice_bytes = float(plan.slice_bytes)
    classes, dep_counts, dep_flat = _classes(transfers, count, topology, plan)
    num_classes = len(classes.delay)
    of_class = classes.of_transfer
    delay_of = classes.delay[of_class]
    local_of = classes.local[of_class]
    sharing = _MaxMin(classes.entry_link, classes.entry_class, classes.capacity, num_classes)

    dep_ptr, _ = _csr(dep_counts, dep_flat)
    owners = np.repeat(np.arange(count, dtype=np.int64), dep_counts)
    order = np.argsort(dep_flat, kind="stable")
    child_ptr, child_flat = _csr(np.bincount(dep_flat, minlength=count), owners[order])

    sent = np.zeros(count, dtype=np.int64)        # slices that have left the source
    arrived = np.zeros(count, dtype=np.int64)     # slices that have arrived
    busy = np.zeros(count, dtype=bool)            # a slice is streaming now
    members = np.zeros(num_classes, dtype=np.int64)
    rated = np.zeros(num_classes, dtype=np.int64)
    progress = np.zeros(num_classes)      # bytes each slice of the class has moved since the class was idle
    head = np.full(num_classes, np.inf)   # progress at which the class's oldest slice is done
    rate = np.zeros(num_classes)          # bytes/s of each slice of the class
    queues: list[deque[tuple[float, np.ndarray]]] = [deque() for _ in range(num_classes)]
    arrivals: list[tuple[float, int, np.ndarray]] = []
    sequence = itertools.count()
    changed = False
    done = 0
    total = count * slices
    now = 0.0
    events = 0
    rate_updates = 0
    tolerance = _TOLERANCE * slice_bytes

    last_arrival = 0.0

    def depmin(rows: np.ndarray) -> np.ndarray:
        values, owner = _gather(dep_ptr, dep_flat, rows)
        result = np.full(len(rows), slices, dtype=np.int64)
        if len(values):
            np.minimum.at(result, owner, arrived[values])
        return result

    def start(candidates: np.ndarray) -> np.ndarray:
        """Start the next slice of every candidate that may; returns the transfers that completed
        instantly (local ops), whose slices arrived now."""
        nonlocal changed
        rows: np.ndarray = candidates[~busy[candidates]]
        next_slice = sent[rows]
        rows = rows[(next_slice < slices) & (arrived[rows] > next_slice - window)]
        if len(rows) > 1:
            rows = np.unique(rows)
        elif not len(rows):
            return rows
        rows = rows[depmin(rows) > sent[rows]]
        if not len(rows):
            return rows
        instant = local_of[rows]
        if instant.any():
            quick: np.ndarray = rows[instant]
            sent[quick] += 1
            arrived[quick] += 1
            rows = rows[~instant]
        else:
            quick = rows[:0]
        if len(rows):
            busy[rows] = True
            cls = of_class[rows]
            if len(rows) == 1:
                groups = [(int(cls[0]), rows)]
            else:
                by_class = np.argsort(cls, kind="stable")
                cls_sorted = cls[by_class]
                rows_sorted = rows[by_class]
                cuts = (np.flatnonzero(np.diff(cls_sorted)) + 1).tolist()
                groups = [(int(cls_sorted[a]), rows_sorted[a:b])
                          for a, b in zip([0, *cuts], [*cuts, len(rows_sorted)], strict=True)]
            for c, group in groups:
                queue = queues[c]
                if not queue:
                    progress[c] = 0.0
                    head[c] = slice_bytes
                queue.append((float(progress[c]) + slice_bytes, group))
                members[c] += len(group)
            changed = True
        return quick

    def settle(arrived_rows: np.ndarray, finished_rows: np.ndarray) -> None:
        """Handle slices that finished sending and slices that arrived at one instant."""
        nonlocal done, last_arrival
        pending_arrived = arrived_rows
        pending_finished = finished_rows
        while len(pending_arrived) or len(pending_finished):
            if len(pending_arrived):
                last_arrival = now
            done += len(pending_arrived)
            children, _ = _gather(child_ptr, child_flat, pending_arrived)
            candidates = np.concatenate((pending_finished, pending_arrived, children))
            quick = start(candidates)
            pending_arrived = quick
            pending_finished = quick

    settle(np.empty(0, dtype=np.int64), np.flatnonzero(dep_counts == 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        while done < total:
            # Slices are still to arrive, none before ``now``: the time is at least now + base.
            if cutoff is not None and now + base > cutoff:
                return FlowResult(math.inf, events, rate_updates, sharing.work)
            events += 1
            active = bool(members.any())
            if not active and not arrivals:
                raise VerificationError("flow simulation stalled: some transfers never become ready "
                                        "(their deps form a cycle; verify the schedule)")
            if changed:
                if (members != rated).any():
                    sharing.rates(members, rate)
                    rated[:] = members
                    rate_updates += 1
                    if work_limit is not None and sharing.work > work_limit:
                        raise LimitError(f"flow simulation of {schedule.algorithm} {schedule.kind} at {size} "
                                         f"bytes under {plan.describe()}: link sharing past the work limit "
                                         f"of {work_limit:,} after {events:,} events")
                changed = False
            step = float(np.min((head - progress) / rate)) if active else np.inf
            if arrivals:
                step = min(step, max(arrivals[0][0] - now, 0.0))
            now += step
            finished_parts: list[np.ndarray] = []
            if active:
                progress += rate * step
                for c in np.flatnonzero(head <= progress + tolerance).tolist():
                    queue = queues[c]
                    limit = float(progress[c]) + tolerance
                    while queue and queue[0][0] <= limit:
                        group = queue.popleft()[1]
                        finished_parts.append(group)
                        members[c] -= len(group)
                    head[c] = queue[0][0] if queue else np.inf
                    changed = True
            finished = np.concatenate(finished_parts) if finished_parts else np.empty(0, dtype=np.int64)
            if len(finished):
                busy[finished] = False
                sent[finished] += 1
                delays = delay_of[finished]
                immediate = finished[delays <= 0]
                later = finished[delays > 0]
                if len(later) == 1:
                    heapq.heappush(arrivals, (now + float(delays[delays > 0][0]), next(sequence), later))
                elif len(later):
                    later_delays = delays[delays > 0]
                    for value in np.unique(later_delays).tolist():
                        heapq.heappush(arrivals, (now + value, next(sequence), later[later_delays == value]))
            else:
                immediate = finished
            arrived_parts = [immediate] if len(immediate) else []
            horizon = now + max(now, 1e-30) * _TOLERANCE
            while arrivals and arrivals[0][0] <= horizon:
                arrived_parts.append(heapq.heappop(arrivals)[2])
            arrived_now = np.concatenate(arrived_parts) if arrived_parts else np.empty(0, dtype=np.int64)
            if len(arrived_now) == 1:
                arrived[arrived_now] += 1
            elif len(arrived_now):
                np.add.at(arrived, arrived_now, 1)
            settle(arrived_now, finished)
    finish = last_arrival + base
    return FlowResult(math.inf if cutoff is not None and finish > cutoff else finish, events, rate_updates,
                      sharing.work)
