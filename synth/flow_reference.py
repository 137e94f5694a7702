"""The flow simulator's reference engine: the event loop over numpy state arrays, one batch per event.

It runs the model of :mod:`synth.flow` with the same classes, the same floating-point operations in the
same order and the same memo of max-min rates as the compiled engine, so the two give identical
:class:`~synth.flow.FlowResult` (time to the last digit, events, rate updates and link-sharing work);
tests compare them, and ``bench/bench_flow.py`` times both. Select it with
``simulate_detailed(..., engine="reference")``.

How it runs: events are handled in batches (every slice finishing at one instant together, numpy over
the batch), slices with the same path share one *class* (same rate, FIFO finish order, one byte counter)
and rates are recomputed only when some class's membership changed. State is per transfer (slices
sent, slices arrived), not per slice, so memory is linear in transfers whatever the slice count. Slices
of one class all move at the same rate, so they finish in the order they joined: a class keeps one byte
counter and a queue of the groups of slices that joined together, with the counter value at which
each group is done. Each event costs a few dozen numpy calls, which dominate on schedules of many small
events.

Examples
--------
>>> from synth.library import load_topology
>>> from synth.algorithms import synthesize
>>> from synth.plan import make_plan
>>> topo = load_topology("ring:n=2,latency=0,bandwidth=1")
>>> ring = synthesize(topo, "allgather", "ring")
>>> plan = make_plan(ring.chunks, 2 * 10**9, "ideal")
>>> round(simulate_reference(ring, topo, 2 * 10**9, plan).time_s, 9)  # 1 GB over 1 GB/s
1.0
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable

import numpy as np

from synth.flow import (
    _TOLERANCE,
    MEMO_BYTES,
    FlowResult,
    _Classes,
    _csr,
    _shared_classes,
    _stall_error,
    simulate_detailed,
)
from synth.plan import Plan
from synth.schedule import ScheduleForm
from synth.topology import Topology


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


def simulate_reference(schedule: ScheduleForm, topology: Topology, size: int, plan: Plan,
                       cutoff: float | None = None, work_limit: int | None = None) -> FlowResult:
    """:func:`synth.flow.simulate_detailed` by the reference engine (same arguments, same result)."""
    return simulate_detailed(schedule, topology, size, plan, cutoff, work_limit, engine="reference")


def run_reference(classes: _Classes, dep_counts: np.ndarray, dep_flat: np.ndarray, part_base: np.ndarray,
                  cutoff: float | None, work_limit: int | None,
                  over_limit: Callable[[int], Exception]) -> tuple[FlowResult, np.ndarray]:
    """The reference event loop over ``classes`` (:func:`synth.flow._joint_classes`): the result and each
    part's finish (its last arrival plus its ``part_base``), as :func:`synth.flow_kernels.run` gives them.

    Longer than the house limit on purpose: one event loop over numpy state arrays shared with its two
    nested steps (``start``: slices that may start now; ``settle``: what finishing and arriving slices
    free), each under 40 lines; the loop body is the model's definition read in one place, and it runs
    once per event on schedules of millions of slice transfers, so its state stays in local variables.
    """
    count = len(dep_counts)
    base = float(part_base.min())
    num_classes = len(classes.delay)
    of_class = classes.of_transfer
    slices_of = classes.slices[of_class]
    window_of = classes.window[of_class]
    part_of = classes.part[of_class]
    multi = len(part_base) > 1
    part_last = np.zeros(len(part_base))
    class_slice_bytes = classes.slice_bytes
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
    total = int(slices_of.sum())
    now = 0.0
    events = 0
    rate_updates = 0
    tolerance = _TOLERANCE * class_slice_bytes

    last_arrival = 0.0

    def depmin(rows: np.ndarray) -> np.ndarray:
        values, owner = _gather(dep_ptr, dep_flat, rows)
        result: np.ndarray = slices_of[rows].copy()
        if len(values):
            np.minimum.at(result, owner, arrived[values])
        return result

    def start(candidates: np.ndarray) -> np.ndarray:
        """Start the next slice of every candidate that may; returns the transfers that completed
        instantly (local ops), whose slices arrived now."""
        nonlocal changed
        rows: np.ndarray = candidates[~busy[candidates]]
        next_slice = sent[rows]
        rows = rows[(next_slice < slices_of[rows]) & (arrived[rows] > next_slice - window_of[rows])]
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
                slice_bytes = float(class_slice_bytes[c])
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
                if multi:
                    part_last[part_of[pending_arrived]] = now
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
                return FlowResult(math.inf, events, rate_updates, sharing.work), part_last
            events += 1
            active = bool(members.any())
            if not active and not arrivals:
                raise _stall_error()
            if changed:
                if (members != rated).any():
                    sharing.rates(members, rate)
                    rated[:] = members
                    rate_updates += 1
                    if work_limit is not None and sharing.work > work_limit:
                        raise over_limit(events)
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
                    limit = float(progress[c]) + tolerance[c]
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
    if not multi:
        part_last[0] = last_arrival
    part_finish = part_last + part_base
    finish = float(part_finish.max())
    return (FlowResult(math.inf if cutoff is not None and finish > cutoff else finish, events, rate_updates,
                       sharing.work), part_finish)
