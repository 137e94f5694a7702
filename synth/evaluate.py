"""The evaluator: congestion bound, flow-level α-β simulation, and nccl-tests metrics.

Models
------
``flow``
    A transfer starts when its deps are done, pays its path's latency (the sum of link latencies, α),
    then streams its bytes while sharing every link on its path with the transfers crossing it at the
    same time, by max-min fair sharing (the standard flow-level model). Optional pipelining splits each
    chunk into P pieces: piece j of a transfer waits for piece j of its deps and piece j-1 of itself.
``astra``
    ASTRA-sim's congestion-aware analytical network (store-and-forward per link, first come first
    served), registered by :mod:`synth.astra` when present.

Metrics follow nccl-tests: algbw = n / t, busbw = algbw x factor (see :mod:`synth.collectives`).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from synth.errors import InputError, VerificationError
from synth.schedule import Schedule
from synth.topology import Topology

GIGA = 10**9
MICRO = 1e-6


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
    pipeline: int = 1

    def to_dict(self) -> dict[str, float | int | str]:
        """The record as a plain dict, in documented field order."""
        return {"size": self.size, "time_s": self.time_s, "algbw_GBps": self.algbw_GBps,
                "busbw_GBps": self.busbw_GBps, "congestion_time_s": self.congestion_time_s,
                "model": self.model, "pipeline": self.pipeline}


def congestion(schedule: Schedule, topology: Topology, top: int = 5) -> CongestionReport:
    """Exact congestion bound of a schedule: max over links of (chunks x chunk bytes) / bandwidth.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=4")
    >>> report = congestion(synthesize(topo, "allgather", "ring"), topo)
    >>> report.time(4 * 10**9) == 3 / 4 * 4 * 10**9 / (topo.bandwidth("gpu0", "gpu1") * 10**9)
    True
    """
    counts: dict[tuple[str, str], int] = {}
    for t in schedule.transfers:
        path = t.path
        for hop in zip(path, path[1:], strict=False):
            counts[hop] = counts.get(hop, 0) + 1
    chunks = schedule.collective.chunks
    per_link = {hop: Fraction(count, chunks) / (topology.exact_bandwidth(*hop) * GIGA) for hop, count in counts.items()}
    ranked = sorted(per_link.items(), key=lambda item: (-item[1], item[0]))
    worst = ranked[0][1] if ranked else Fraction(0)
    busiest = tuple((u, v, spb) for (u, v), spb in ranked[:top])
    return CongestionReport(worst, busiest, counts)


def metrics(schedule: Schedule, size: int, time_s: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s by the nccl-tests conventions."""
    if time_s <= 0:
        return float("inf"), float("inf")
    algbw = size / time_s / GIGA
    return algbw, algbw * schedule.collective.busbw_factor()


ModelFunction = Callable[[Schedule, Topology, int, int], float]
MODELS: dict[str, ModelFunction] = {}


def register_model(name: str, function: ModelFunction) -> None:
    """Register an evaluator model ``function(schedule, topology, size, pipeline) -> seconds``."""
    MODELS[name] = function


def evaluate(schedule: Schedule, topology: Topology, size: int, model: str = "flow", pipeline: int = 1) -> Evaluation:
    """Evaluate a schedule at one message size with the chosen model.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=4")
    >>> result = evaluate(synthesize(topo, "allreduce", "ring"), topo, 2**20)
    >>> result.model, result.time_s > 0
    ('flow', True)
    """
    _load_optional_models()
    if model not in MODELS:
        raise InputError("", "model", f"unknown evaluator model {model!r}; expected one of {', '.join(sorted(MODELS))}")
    if pipeline < 1:
        raise InputError("", "pipeline", f"expected at least 1, got {pipeline}")
    seconds = MODELS[model](schedule, topology, size, pipeline)
    algbw, busbw = metrics(schedule, size, seconds)
    bound = congestion(schedule, topology).time(size)
    return Evaluation(size, seconds, algbw, busbw, bound, model, pipeline)


def _load_optional_models() -> None:
    if "astra" not in MODELS:
        try:
            import synth.astra  # noqa: F401  (registers the model)
        except ImportError:
            pass


# --------------------------------------------------------------------------------- flow model
def simulate_flow(schedule: Schedule, topology: Topology, size: int, pipeline: int = 1) -> float:
    """Completion time in seconds of the flow-level α-β simulation with max-min fair sharing.

    Transfers that cross the same path always get the same max-min rate, so the simulation works on
    *path classes*: per class, the number of active flows, one shared per-flow rate and a byte-progress
    counter (numpy arrays over all classes). Every flow of a class moves the same number of bytes at the
    same rate, so a class's flows finish in the order they joined (a FIFO of finish thresholds). Rates
    are recomputed only when some class's flow count has changed since the last computation, and all
    events at one instant are handled together.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("ring:n=2,latency=0,bandwidth=1")
    >>> simulate_flow(synthesize(topo, "allgather", "ring"), topo, 2 * 10**9)  # 1 GB over 1 GB/s
    1.0
    """
    transfers = schedule.transfers
    if not transfers:
        return 0.0
    pieces = pipeline
    piece_bytes = size / schedule.collective.chunks / pieces

    # ---- path classes: their links (CSR arrays) and latency
    link_index: dict[tuple[str, str], int] = {}
    capacity_list: list[float] = []
    class_of_path: dict[tuple[str, ...], int] = {}
    flat_links: list[int] = []
    flat_class: list[int] = []
    class_delay: list[float] = []
    transfer_class = [0] * len(transfers)
    for t in transfers:
        cls = class_of_path.get(t.path)
        if cls is None:
            cls = len(class_delay)
            class_of_path[t.path] = cls
            for hop in zip(t.path, t.path[1:], strict=False):
                index = link_index.get(hop)
                if index is None:
                    index = len(capacity_list)
                    link_index[hop] = index
                    capacity_list.append(topology.bandwidth(*hop) * GIGA)
                flat_links.append(index)
                flat_class.append(cls)
            class_delay.append(topology.path_latency(t.path) * MICRO)
        transfer_class[t.id] = cls
    num_classes = len(class_delay)
    sharing = _MaxMin(np.array(flat_links, dtype=np.int64), np.array(flat_class, dtype=np.int64),
                      np.array(capacity_list, dtype=np.float64), num_classes)

    # ---- dependencies: flow t*P + j waits for piece j of each dep and piece j-1 of itself
    children: list[list[int]] = [[] for _ in transfers]
    count = len(transfers) * pieces
    waiting = [0] * count
    for t in transfers:
        parents = set(t.deps)
        for dep in parents:
            children[dep].append(t.id)
        base = t.id * pieces
        waiting[base] = len(parents)
        for j in range(1, pieces):
            waiting[base + j] = len(parents) + 1

    # ---- per-class state
    members = np.zeros(num_classes, dtype=np.int64)      # active flows per class
    rated = np.zeros(num_classes, dtype=np.int64)        # members when rates were last computed
    progress = np.zeros(num_classes)                     # bytes each flow of the class has moved
    head = np.full(num_classes, np.inf)                  # finish threshold of the class's oldest flow
    rate = np.zeros(num_classes)                         # bytes/s of each flow of the class
    queues: list[deque[tuple[float, int]]] = [deque() for _ in range(num_classes)]
    touched: set[int] = set()
    latency_heap: list[tuple[float, int]] = []
    active_count = 0

    def join(flow: int) -> None:
        nonlocal active_count
        cls = transfer_class[flow // pieces]
        queue = queues[cls]
        if not queue:
            progress[cls] = 0.0
            head[cls] = piece_bytes
            active_count += 1
            queue.append((piece_bytes, flow))
        else:
            queue.append((float(progress[cls]) + piece_bytes, flow))
        members[cls] += 1
        touched.add(cls)

    def make_ready(flow: int, at: float) -> None:
        delay = class_delay[transfer_class[flow // pieces]]
        if delay > 0:
            heapq.heappush(latency_heap, (at + delay, flow))
        else:
            join(flow)

    for flow in range(count):
        if waiting[flow] == 0:
            make_ready(flow, 0.0)
    now = 0.0
    done = 0
    finish = 0.0
    tolerance = 1e-9 * piece_bytes
    with np.errstate(divide="ignore", invalid="ignore"):
        while done < count:
            if not active_count and not latency_heap:
                raise VerificationError("flow simulation stalled: some transfers never become ready "
                                        "(their deps form a cycle; verify the schedule)")
            if touched:
                changed = np.fromiter(touched, dtype=np.int64, count=len(touched))
                touched.clear()
                if (members[changed] != rated[changed]).any():
                    sharing.rates(members, rate)
                    rated[:] = members
            step = float(np.min((head - progress) / rate)) if active_count else float("inf")
            if latency_heap:
                step = min(step, max(latency_heap[0][0] - now, 0.0))
            now += step
            progress += rate * step
            finished: list[int] = []
            for cls in np.flatnonzero(head <= progress * (1 + 1e-15) + tolerance).tolist():
                queue = queues[cls]
                limit = float(progress[cls]) * (1 + 1e-15) + tolerance
                while queue and queue[0][0] <= limit:
                    finished.append(queue.popleft()[1])
                members[cls] = len(queue)
                touched.add(cls)
                if queue:
                    head[cls] = queue[0][0]
                else:
                    head[cls] = np.inf  # its rate stays: valid again if the same flows come back
                    active_count -= 1
            while latency_heap and latency_heap[0][0] <= now * (1 + 1e-15) + 1e-18:
                join(heapq.heappop(latency_heap)[1])
            finished.sort()
            for flow in finished:
                done += 1
                finish = now
                tid, j = divmod(flow, pieces)
                if j + 1 < pieces:
                    waiting[flow + 1] -= 1
                    if waiting[flow + 1] == 0:
                        make_ready(flow + 1, now)
                for child in children[tid]:
                    successor = child * pieces + j
                    waiting[successor] -= 1
                    if waiting[successor] == 0:
                        make_ready(successor, now)
    return finish


class _MaxMin:
    """Max-min fair per-flow rates of path classes by progressive filling.

    Raise every unfrozen flow's rate together until some link is full, freeze the flows crossing it,
    repeat. A class of ``m`` active flows weighs ``m`` on each of its links. ``entry_link`` and
    ``entry_class`` list every (link, class) incidence once.
    """

    def __init__(self, entry_link: np.ndarray, entry_class: np.ndarray, capacity: np.ndarray,
                 num_classes: int) -> None:
        self.entry_link = entry_link
        self.entry_class = entry_class
        self.capacity = capacity
        self.num_classes = num_classes

    def rates(self, members: np.ndarray, rate: np.ndarray) -> None:
        """Write the per-flow rate (bytes/s) of every class into ``rate`` (0 for idle classes)."""
        rate[:] = 0.0
        weight_all = members[self.entry_class].astype(np.float64)
        live = weight_all > 0
        entry_link = self.entry_link[live]
        entry_class = self.entry_class[live]
        entry_weight = weight_all[live]
        num_links = len(self.capacity)
        remaining = self.capacity.copy()
        hit = np.zeros(self.num_classes, dtype=bool)
        while entry_link.size:
            load = np.bincount(entry_link, weights=entry_weight, minlength=num_links)
            share = np.where(load > 0, remaining / np.where(load > 0, load, 1.0), np.inf)
            level = share.min()
            bottleneck = share <= level * (1 + 1e-12)
            hit[:] = False
            hit[entry_class[bottleneck[entry_link]]] = True
            rate[hit] = level
            newly = hit[entry_class]
            remaining -= np.bincount(entry_link[newly], weights=entry_weight[newly] * level, minlength=num_links)
            np.maximum(remaining, 0.0, out=remaining)
            keep = ~newly
            entry_link = entry_link[keep]
            entry_class = entry_class[keep]
            entry_weight = entry_weight[keep]


register_model("flow", simulate_flow)
