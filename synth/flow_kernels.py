"""The flow simulator's compiled engine: its event loop and max-min filling, compiled by numba.

:func:`run` is the event loop of :mod:`synth.flow` over flat arrays, one event at a time, with the model,
the floating-point operations and their order, and the memo of max-min rates of the reference engine
(:mod:`synth.flow_reference`), so both give identical results. :mod:`synth.flow` imports this module only
when a simulation runs (numba's import and the first compile cost time; nothing else imports it).

State per transfer (slices sent, slices arrived, whether a slice is streaming) and per path class (member
count, byte counter ``progress``, the threshold ``head`` at which its oldest slice is done, rate): as in
the reference. A class's FIFO queue is a ring buffer of (threshold, transfer) entries, one per streaming
slice, in a block as long as the class's transfer count (a transfer streams one slice at a time); the
slices in flight wait in a binary heap on arrival time, those that finished on one event and arrive at
the same time chained into one entry (every arrival within the horizon is taken at once, and every later
step treats what arrived as a set, so the order among equal times never matters).
Only the classes with members are visited on an event (an idle class has rate 0 and threshold inf, so it
never sets the step nor finishes a slice), and the lone classes whose members changed on a rate update.

Compiled with ``nogil=True`` (simulations in threads run at once: :meth:`synth.choose.Search.measure_many`)
and ``cache=True``: the machine code is kept on disk (in the package's ``__pycache__``, or a
per-user cache folder where that is read-only) and later processes load it; where no cache folder is
writable it is compiled again in each process. No ``fastmath``, and ``error_model="numpy"`` so a division
by zero gives inf or nan as numpy does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

#: :func:`run`'s outcomes.
DONE, CUT_OFF, STALLED, PAST_WORK_LIMIT = 0, 1, 2, 3


def _compiled(function: Callable[..., Any], **options: Any) -> Any:
    """``function`` compiled in nopython mode, its machine code cached on disk where numba finds a
    writable cache folder, else compiled in each process."""
    try:
        return njit(cache=True, error_model="numpy", nogil=True, **options)(function)
    except RuntimeError:  # numba found no writable cache location
        return njit(error_model="numpy", nogil=True, **options)(function)


def _inlined(function: Callable[..., Any]) -> Any:
    """:func:`_compiled`, and inlined where it is called (numba's IR inlining), for the small heap and memo
    steps called once per group of slices or per rate update. Inlining saves the call but not numba's
    reference counting of the array arguments, so the steps run per slice are written out instead."""
    return _compiled(function, inline="always")


@_compiled
def _grown(values: np.ndarray, length: int) -> np.ndarray:
    """``values`` in an array twice as long (its first ``length`` entries copied)."""
    bigger = np.empty(2 * values.size, dtype=values.dtype)
    bigger[:length] = values[:length]
    return bigger


@_compiled
def _more_nodes(node_row: np.ndarray, node_next: np.ndarray, free: int) -> tuple[np.ndarray, np.ndarray]:
    """The node pool twice as large, its new nodes put on the free list ahead of ``free`` (the first new
    node, the pool's old size, is the list's new head)."""
    size = node_row.size
    rows = _grown(node_row, size)
    links = _grown(node_next, size)
    for node in range(size, 2 * size - 1):
        links[node] = node + 1
    links[2 * size - 1] = free
    return rows, links


@_inlined
def _push(times: np.ndarray, rows: np.ndarray, n: int, time: float, row: int) -> None:
    """Push (time, row) on the binary min-heap of the first ``n`` entries (room for one more); ``row`` is
    any int (the event loop pushes the first node of a group of slices)."""
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if times[parent] <= time:
            break
        times[i] = times[parent]
        rows[i] = rows[parent]
        i = parent
    times[i] = time
    rows[i] = row


@_inlined
def _pop(times: np.ndarray, rows: np.ndarray, n: int) -> int:
    """Pop the earliest entry's row from the heap of ``n`` entries (``n - 1`` remain)."""
    top = int(rows[0])
    n -= 1
    time = times[n]
    row = rows[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and times[child + 1] < times[child]:
            child += 1
        if times[child] >= time:
            break
        times[i] = times[child]
        rows[i] = rows[child]
        i = child
    if n > 0:
        times[i] = time
        rows[i] = row
    return top


@_inlined
def _push_groups(times: np.ndarray, heads: np.ndarray, n: int, group_time: np.ndarray, group_head: np.ndarray,
                 groups: int) -> int:
    """Push the ``groups`` groups of slices (arrival time, first node) on the heap of ``n`` entries (room
    for them); returns the heap's new size."""
    for g in range(groups):
        _push(times, heads, n + g, group_time[g], group_head[g])
    return n + groups


@_compiled
def _fill(members: np.ndarray, shared: np.ndarray, fill_link: np.ndarray, fill_slot: np.ndarray,
          capacity: np.ndarray, out: np.ndarray, scratch_int: np.ndarray, scratch: np.ndarray,
          hit: np.ndarray) -> int:
    """Progressive filling of the shared classes (``out[s]``: the rate of class ``shared[s]``); returns the
    work (live class-link entries summed over the rounds).

    The reference's numpy steps one for one: link loads summed in entry order, the level the least
    remaining capacity over load, every class on a link within ``1e-12`` of it frozen at the level, the
    frozen entries' ``weight * level`` summed in entry order and taken off once, clamped at 0.
    """
    num_links = capacity.size
    entries = fill_link.size
    live_link = scratch_int[:entries]
    live_slot = scratch_int[entries:2 * entries]
    live_weight = scratch[:entries]
    load = scratch[entries:entries + num_links]
    remaining = scratch[entries + num_links:entries + 2 * num_links]
    share = scratch[entries + 2 * num_links:entries + 3 * num_links]
    taken = scratch[entries + 3 * num_links:entries + 4 * num_links]
    out[:] = 0.0
    n = 0
    for e in range(entries):
        weight = np.float64(members[shared[fill_slot[e]]])
        if weight > 0:
            live_link[n] = fill_link[e]
            live_slot[n] = fill_slot[e]
            live_weight[n] = weight
            n += 1
    remaining[:] = capacity
    work = 0
    while n > 0:
        work += n
        load[:] = 0.0
        for i in range(n):
            load[live_link[i]] += live_weight[i]
        level = np.inf
        for link in range(num_links):
            share[link] = remaining[link] / load[link] if load[link] > 0 else np.inf
            if share[link] < level:
                level = share[link]
        bound = level * (1 + 1e-12)
        hit[:] = False
        for i in range(n):
            if share[live_link[i]] <= bound:
                hit[live_slot[i]] = True
        everything = True
        for i in range(n):
            if hit[live_slot[i]]:
                out[live_slot[i]] = level
            else:
                everything = False
        if everything:
            break
        taken[:] = 0.0
        for i in range(n):
            if hit[live_slot[i]]:
                taken[live_link[i]] += live_weight[i] * level
        for link in range(num_links):
            left = remaining[link] - taken[link]
            remaining[link] = 0.0 if left < 0.0 else left
        kept = 0
        for i in range(n):
            if not hit[live_slot[i]]:
                live_link[kept] = live_link[i]
                live_slot[kept] = live_slot[i]
                live_weight[kept] = live_weight[i]
                kept += 1
        n = kept
    return work


@_inlined
def _key_hash(members: np.ndarray, shared: np.ndarray) -> np.uint64:
    """A 64-bit hash of the shared classes' member counts (FNV-1a over the words, then a final mix)."""
    h = np.uint64(14695981039346656037)
    prime = np.uint64(1099511628211)
    for s in range(shared.size):
        h = (h ^ np.uint64(members[shared[s]])) * prime
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(29)
    return h


@_inlined
def _memo_find(h: np.uint64, members: np.ndarray, shared: np.ndarray, index: np.ndarray, hashes: np.ndarray,
               keys: np.ndarray) -> tuple[int, int]:
    """(entry, slot): the memo entry of these member counts (-1 if none) and its slot in the open-addressing
    ``index`` (where a new one goes)."""
    n = shared.size
    mask = index.size - 1
    slot = np.int64(h & np.uint64(mask))
    while True:
        entry = int(index[slot])
        if entry < 0:
            return -1, int(slot)
        if hashes[entry] == h:
            same = True
            for s in range(n):
                if keys[entry * n + s] != members[shared[s]]:
                    same = False
                    break
            if same:
                return entry, int(slot)
        slot = (slot + 1) & mask


@_inlined
def _free_slot(h: np.uint64, index: np.ndarray) -> int:
    """The first empty slot of ``index`` on ``h``'s probe sequence."""
    mask = index.size - 1
    slot = np.int64(h & np.uint64(mask))
    while index[slot] >= 0:
        slot = (slot + 1) & mask
    return int(slot)


@_compiled
def _memo_grown(hashes: np.ndarray, keys: np.ndarray, values: np.ndarray, count: int, entries: int,
                width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The memo's arrays with room for ``entries`` (its ``count`` entries kept) and a new index for them."""
    new_hashes = np.empty(entries, dtype=np.uint64)
    new_keys = np.empty(entries * width, dtype=np.int64)
    new_values = np.empty(entries * width, dtype=np.float64)
    new_hashes[:count] = hashes[:count]
    new_keys[:count * width] = keys[:count * width]
    new_values[:count * width] = values[:count * width]
    size = 4
    while size < 2 * entries:
        size *= 2
    index = np.full(size, -1, dtype=np.int64)
    for entry in range(count):
        index[_free_slot(new_hashes[entry], index)] = entry
    return index, new_hashes, new_keys, new_values


@_compiled
def _shared_rates(members: np.ndarray, rate: np.ndarray, shared: np.ndarray, fill_link: np.ndarray,
                  fill_slot: np.ndarray, capacity: np.ndarray, memo_entries: int, memo_count: int,
                  index: np.ndarray, hashes: np.ndarray, keys: np.ndarray, values: np.ndarray,
                  out: np.ndarray, scratch_int: np.ndarray, scratch: np.ndarray, hit: np.ndarray
                  ) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Write the shared classes' rates into ``rate``, from the memo or by filling (then remembered: the
    memo is emptied whole when it holds ``memo_entries``, as the reference's dict); returns (work, the
    memo's count, its index, hashes, keys, values)."""
    width = shared.size
    h = _key_hash(members, shared)
    entry, slot = _memo_find(h, members, shared, index, hashes, keys)
    work = 0
    if entry < 0:
        work = _fill(members, shared, fill_link, fill_slot, capacity, out, scratch_int, scratch, hit)
        if memo_count >= memo_entries:
            memo_count = 0
            index[:] = -1
            slot = _free_slot(h, index)
        if memo_count >= hashes.size:
            index, hashes, keys, values = _memo_grown(hashes, keys, values, memo_count,
                                                      min(2 * hashes.size, memo_entries), width)
            slot = _free_slot(h, index)
        entry = memo_count
        memo_count += 1
        index[slot] = entry
        hashes[entry] = h
        for s in range(width):
            keys[entry * width + s] = members[shared[s]]
            values[entry * width + s] = out[s]
    for s in range(width):
        rate[shared[s]] = values[entry * width + s]
    return work, memo_count, index, hashes, keys, values


@_compiled
def _settle(arrivals: np.ndarray, n_arrived: int, finished: np.ndarray, n_finished: int, quick_a: np.ndarray,
            quick_b: np.ndarray, rows: np.ndarray, mark: np.ndarray, busy: np.ndarray, sent: np.ndarray,
            arrived: np.ndarray, class_int: np.ndarray, dep_ptr: np.ndarray,
            dep_flat: np.ndarray, child_ptr: np.ndarray, child_flat: np.ndarray, of_class: np.ndarray,
            local: np.ndarray, members: np.ndarray, progress: np.ndarray, head: np.ndarray,
            class_slice_bytes: np.ndarray, multi: bool,
            ring_base: np.ndarray, ring_cap: np.ndarray, ring_front: np.ndarray, ring_len: np.ndarray,
            ring_threshold: np.ndarray, ring_row: np.ndarray, active: np.ndarray, touched: np.ndarray,
            flagged: np.ndarray, counters: np.ndarray) -> tuple[int, bool]:
    """Handle slices that finished sending and slices that arrived at one instant: start what they free,
    again for local copies that complete at once; returns (slices arrived, whether any did).

    Longer than the house limit on purpose: its three steps are written out in one body, not called,
    since numba counts references (atomically) to every array passed to a call, which on schedules of
    millions of short events costs more than the steps. The steps: (1) the candidates, each once
    (``mark``ed with a fresh stamp, ``counters[2]``): the finished and arrived transfers and the arrived
    ones' children; (2) those whose next slice may start, every test reading the state before any of
    them starts: none streaming, slices left, the slice ``window`` back arrived, and this slice of every
    dep (slices and window are its class's); (3) start them: a local one arrives at once (``quick``,
    handled on the next round), any other joins its class's queue at ``progress + slice_bytes`` (the
    counter restarting at 0 on an idle class), the class noted as touched (``counters``: classes with
    members, classes touched). ``class_int`` holds each class's slices, window and part (rows 0, 1, 2); with
    ``multi`` (a joint simulation), every part p a slice arrived in is flagged in ``counters[3 + p]`` (packed
    into the arrays the call takes anyway: numba counts references to every array argument, per call).
    """
    done = 0
    any_arrival = False
    first = True
    source_a = arrivals
    source_f = finished
    n_a = n_arrived
    n_f = n_finished
    while n_a > 0 or n_f > 0:
        if n_a > 0:
            any_arrival = True
        done += n_a
        counters[2] += 1
        stamp = counters[2]
        count = 0
        for i in range(n_f + n_a):
            row = source_f[i] if i < n_f else source_a[i - n_f]
            if mark[row] != stamp:
                mark[row] = stamp
                rows[count] = row
                count += 1
        for i in range(n_a):
            parent = source_a[i]
            if multi:
                counters[3 + class_int[2, of_class[parent]]] = 1
            for k in range(child_ptr[parent], child_ptr[parent + 1]):
                row = child_flat[k]
                if mark[row] != stamp:
                    mark[row] = stamp
                    rows[count] = row
                    count += 1
        kept = 0
        for i in range(count):
            row = rows[i]
            if busy[row]:
                continue
            next_slice = sent[row]
            if multi:  # one part: every class has the first's slices and window (no per-row lookup)
                c = of_class[row]
                slices, window = class_int[0, c], class_int[1, c]
            else:
                slices, window = class_int[0, 0], class_int[1, 0]
            if next_slice >= slices or arrived[row] <= next_slice - window:
                continue
            ready = True
            for k in range(dep_ptr[row], dep_ptr[row + 1]):
                if arrived[dep_flat[k]] <= next_slice:
                    ready = False
                    break
            if ready:
                rows[kept] = row
                kept += 1
        quick = quick_a if first else quick_b
        first = not first
        instant = 0
        for i in range(kept):
            row = rows[i]
            c = of_class[row]
            if local[c]:
                sent[row] += 1
                arrived[row] += 1
                quick[instant] = row
                instant += 1
                continue
            busy[row] = True
            if ring_len[c] == 0:
                progress[c] = 0.0
                head[c] = class_slice_bytes[c]
                active[counters[0]] = c
                counters[0] += 1
            at = ring_base[c] + (ring_front[c] + ring_len[c]) % ring_cap[c]
            ring_threshold[at] = progress[c] + class_slice_bytes[c]
            ring_row[at] = row
            ring_len[c] += 1
            members[c] += 1
            if not flagged[c]:
                flagged[c] = True
                touched[counters[1]] = c
                counters[1] += 1
        source_a = quick
        source_f = quick
        n_a = instant
        n_f = instant
    return done, any_arrival


@_compiled
def run(relative_tolerance: float, part_base: np.ndarray, cutoff: float, work_limit: int, of_class: np.ndarray,
        delay: np.ndarray, local: np.ndarray, class_slices: np.ndarray, class_window: np.ndarray,
        class_slice_bytes: np.ndarray, class_part: np.ndarray, dep_ptr: np.ndarray,
        dep_flat: np.ndarray, child_ptr: np.ndarray, child_flat: np.ndarray, narrowest: np.ndarray,
        shared: np.ndarray, shared_at: np.ndarray, fill_link: np.ndarray, fill_slot: np.ndarray,
        capacity: np.ndarray, memo_entries: int) -> tuple[int, float, int, int, int, np.ndarray]:
    """The event loop: (outcome, time, events, rate updates, link-sharing work, each part's finish), the
    outcome one of :data:`DONE`, :data:`CUT_OFF` (time inf), :data:`STALLED` and :data:`PAST_WORK_LIMIT`.

    The slices per transfer, slices in flight and bytes per slice are per class; ``class_part`` and
    ``part_base`` (each part's fixed latency, s) make it a joint simulation of several schedules, each
    part finishing at its last arrival plus its base latency, and the time the latest of them (one
    part: the plain simulation).

    Longer than the house limit on purpose: the reference's loop body step for step (rates, step, progress
    and finished slices, departures and arrivals, settle) over state that lives in this frame (arrays
    that grow are reassigned here); the steps that run per slice are written out, not called, since
    numba counts references (atomically) to every array passed to a call, which on schedules of millions
    of short events costs more than the steps (:func:`_settle` is the one call per event).
    """
    count = of_class.size
    num_classes = delay.size
    width = shared.size
    class_tolerance = relative_tolerance * class_slice_bytes
    parts = part_base.size
    multi = parts > 1
    base = part_base.min()
    part_last = np.zeros(parts)
    class_int = np.empty((3, num_classes), dtype=np.int64)
    for c in range(num_classes):
        class_int[0, c] = class_slices[c]
        class_int[1, c] = class_window[c]
        class_int[2, c] = class_part[c]
    sent = np.zeros(count, dtype=np.int64)
    arrived = np.zeros(count, dtype=np.int64)
    busy = np.zeros(count, dtype=np.bool_)
    members = np.zeros(num_classes, dtype=np.int64)
    rated = np.zeros(num_classes, dtype=np.int64)
    progress = np.zeros(num_classes)
    head = np.full(num_classes, np.inf)
    rate = np.zeros(num_classes)
    ring_cap = np.bincount(of_class, minlength=num_classes).astype(np.int64)
    ring_base = np.cumsum(ring_cap) - ring_cap
    ring_front = np.zeros(num_classes, dtype=np.int64)
    ring_len = np.zeros(num_classes, dtype=np.int64)
    ring_threshold = np.empty(count)
    ring_row = np.empty(count, dtype=np.int64)
    active = np.empty(num_classes, dtype=np.int64)
    touched = np.empty(num_classes, dtype=np.int64)
    flagged = np.zeros(num_classes, dtype=np.bool_)
    # classes with members, classes touched, candidate stamp, then a flag per part (a slice arrived in it)
    counters = np.zeros(3 + parts, dtype=np.int64)
    mark = np.zeros(count, dtype=np.int64)
    rows = np.empty(count, dtype=np.int64)
    quick_a = np.empty(count, dtype=np.int64)
    quick_b = np.empty(count, dtype=np.int64)
    finished = np.empty(count, dtype=np.int64)
    heap_time = np.empty(64)  # the heap and the node pool grow as slices wait in flight
    heap_head = np.empty(64, dtype=np.int64)
    # slices in flight: a pool of nodes (row, next) chained into groups that arrive at one time, a group
    # per distinct arrival time among the slices that finish on one event (at most 32 looked up);
    # ``pool``: the heap's size, the first free node, how many are free
    nodes = 1024
    node_row = np.empty(nodes, dtype=np.int64)
    node_next = np.arange(1, nodes + 1, dtype=np.int64)
    node_next[nodes - 1] = -1
    pool = np.array([0, 0, nodes], dtype=np.int64)
    arrivals = np.empty(nodes + count, dtype=np.int64)  # room for every node in flight and every transfer
    group_time = np.empty(32)
    group_head = np.empty(32, dtype=np.int64)
    memo_count = 0
    index, hashes, keys, values = _memo_grown(np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64),
                                              np.empty(0), 0, min(64, memo_entries), width)
    out = np.empty(width)
    scratch_int = np.empty(2 * fill_link.size, dtype=np.int64)
    scratch = np.empty(fill_link.size + 4 * capacity.size)
    hit = np.empty(width, dtype=np.bool_)

    done = 0
    total = 0
    for row in range(count):
        total += class_slices[of_class[row]]
    now = 0.0
    events = 0
    rate_updates = 0
    work = 0
    last_arrival = 0.0
    n_finished = 0
    for row in range(count):
        if dep_ptr[row + 1] == dep_ptr[row]:
            finished[n_finished] = row
            n_finished += 1
    added, any_arrival = _settle(arrivals, 0, finished, n_finished, quick_a, quick_b, rows, mark, busy, sent,
                                 arrived, class_int, dep_ptr, dep_flat, child_ptr, child_flat, of_class, local,
                                 members, progress, head, class_slice_bytes, multi, ring_base, ring_cap, ring_front,
                                 ring_len, ring_threshold, ring_row, active, touched, flagged, counters)
    done += added
    counters[3:] = 0  # what arrives at time 0 leaves each part's last arrival at 0
    while done < total:
        # Slices are still to arrive, none before ``now``: the time is at least now + base.
        if now + base > cutoff:
            return CUT_OFF, np.inf, events, rate_updates, work, part_last
        events += 1
        streaming = counters[0] > 0
        if not streaming and pool[0] == 0:
            return STALLED, np.nan, events, rate_updates, work, part_last
        if counters[1] > 0:
            differ = False
            for i in range(counters[1]):
                if members[touched[i]] != rated[touched[i]]:
                    differ = True
            if differ:
                for i in range(counters[1]):
                    c = touched[i]
                    if shared_at[c] < 0:
                        rate[c] = narrowest[c] / members[c] if members[c] != 0 else 0.0
                if width > 0:
                    added, memo_count, index, hashes, keys, values = _shared_rates(
                        members, rate, shared, fill_link, fill_slot, capacity, memo_entries, memo_count, index,
                        hashes, keys, values, out, scratch_int, scratch, hit)
                    work += added
                for i in range(counters[1]):
                    rated[touched[i]] = members[touched[i]]
                rate_updates += 1
                if work > work_limit:
                    return PAST_WORK_LIMIT, np.nan, events, rate_updates, work, part_last
            for i in range(counters[1]):
                flagged[touched[i]] = False
            counters[1] = 0
        step = np.inf
        if streaming:
            for i in range(counters[0]):
                c = active[i]
                time = (head[c] - progress[c]) / rate[c]
                if time < step:
                    step = time
                elif time != time:
                    step = time
                    break
        if pool[0] > 0:
            gap = heap_time[0] - now
            if 0.0 > gap:
                gap = 0.0
            if gap < step:
                step = gap
        now += step
        # every class with members moves on; its slices within progress + tolerance are done
        n_finished = 0
        if streaming:
            for i in range(counters[0]):
                c = active[i]
                progress[c] += rate[c] * step
            i = counters[0] - 1
            while i >= 0:
                c = active[i]
                if head[c] <= progress[c] + class_tolerance[c]:
                    limit = progress[c] + class_tolerance[c]
                    at = ring_base[c]
                    while ring_len[c] > 0 and ring_threshold[at + ring_front[c]] <= limit:
                        finished[n_finished] = ring_row[at + ring_front[c]]
                        n_finished += 1
                        ring_front[c] = (ring_front[c] + 1) % ring_cap[c]
                        ring_len[c] -= 1
                        members[c] -= 1
                    head[c] = ring_threshold[at + ring_front[c]] if ring_len[c] > 0 else np.inf
                    if not flagged[c]:
                        flagged[c] = True
                        touched[counters[1]] = c
                        counters[1] += 1
                    if ring_len[c] == 0:
                        counters[0] -= 1
                        active[i] = active[counters[0]]
                i -= 1
        while pool[2] < n_finished:
            size = node_row.size
            node_row, node_next = _more_nodes(node_row, node_next, pool[1])
            pool[1] = size
            pool[2] += size
            arrivals = np.empty(node_row.size + count, dtype=np.int64)
        while heap_time.size < pool[0] + n_finished:
            heap_time = _grown(heap_time, pool[0])
            heap_head = _grown(heap_head, pool[0])
        # the finished slices have left: without latency they arrive now, else they wait in the heap,
        # chained in a group per arrival time
        n_arrived = 0
        groups = 0
        for i in range(n_finished):
            row = finished[i]
            busy[row] = False
            sent[row] += 1
            wait = delay[of_class[row]]
            if wait <= 0:
                arrivals[n_arrived] = row
                n_arrived += 1
            elif wait > 0:
                when = now + wait
                g = 0
                while g < groups and group_time[g] != when:
                    g += 1
                if g == groups:
                    if groups == group_time.size:
                        pool[0] = _push_groups(heap_time, heap_head, pool[0], group_time, group_head, groups)
                        g = groups = 0
                    group_time[g] = when
                    group_head[g] = -1
                    groups += 1
                node = pool[1]
                pool[1] = node_next[node]
                pool[2] -= 1
                node_row[node] = row
                node_next[node] = group_head[g]
                group_head[g] = node
        pool[0] = _push_groups(heap_time, heap_head, pool[0], group_time, group_head, groups)
        # every group due by the horizon arrives (its nodes freed)
        horizon = now + (1e-30 if 1e-30 > now else now) * relative_tolerance
        while pool[0] > 0 and heap_time[0] <= horizon:
            node = _pop(heap_time, heap_head, pool[0])
            pool[0] -= 1
            while node >= 0:
                arrivals[n_arrived] = node_row[node]
                n_arrived += 1
                after = node_next[node]
                node_next[node] = pool[1]
                pool[1] = node
                pool[2] += 1
                node = after
        for i in range(n_arrived):
            arrived[arrivals[i]] += 1
        added, any_arrival = _settle(arrivals, n_arrived, finished, n_finished, quick_a, quick_b, rows, mark,
                                     busy, sent, arrived, class_int, dep_ptr, dep_flat, child_ptr, child_flat,
                                     of_class, local, members, progress, head, class_slice_bytes, multi,
                                     ring_base, ring_cap, ring_front, ring_len, ring_threshold, ring_row,
                                     active, touched, flagged, counters)
        done += added
        if any_arrival:
            last_arrival = now
            if multi:
                for p in range(parts):
                    if counters[3 + p]:
                        part_last[p] = now
                        counters[3 + p] = 0
    if not multi:
        part_last[0] = last_arrival
    part_finish = part_last + part_base
    finish = part_finish.max()
    if finish > cutoff:
        return CUT_OFF, np.inf, events, rate_updates, work, part_finish
    return DONE, finish, events, rate_updates, work, part_finish
