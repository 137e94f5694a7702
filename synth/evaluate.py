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
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from synth.errors import InputError
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
    """Completion time in seconds of the flow-level α-β simulation with max-min fair sharing."""
    transfers = schedule.transfers
    if not transfers:
        return 0.0
    pieces = pipeline
    piece_bytes = size / schedule.collective.chunks / pieces

    link_index: dict[tuple[str, str], int] = {}
    capacity_list: list[float] = []
    path_links: dict[tuple[str, ...], np.ndarray] = {}
    path_latency: dict[tuple[str, ...], float] = {}
    for t in transfers:
        if t.path in path_links:
            continue
        ids = []
        for hop in zip(t.path, t.path[1:], strict=False):
            index = link_index.get(hop)
            if index is None:
                index = len(capacity_list)
                link_index[hop] = index
                capacity_list.append(topology.bandwidth(*hop) * GIGA)
            ids.append(index)
        path_links[t.path] = np.array(ids, dtype=np.int64)
        path_latency[t.path] = topology.path_latency(t.path) * MICRO
    capacity = np.array(capacity_list)

    count = len(transfers) * pieces
    waiting = np.zeros(count, dtype=np.int64)
    children: list[list[int]] = [[] for _ in range(count)]
    for t in transfers:
        for j in range(pieces):
            flow = t.id * pieces + j
            parents = {d * pieces + j for d in t.deps}
            if j:
                parents.add(flow - 1)
            waiting[flow] = len(parents)
            for parent in parents:
                children[parent].append(flow)

    now = 0.0
    latency_heap: list[tuple[float, int]] = []
    active: dict[int, float] = {}  # flow -> remaining bytes

    def make_ready(flow: int, at: float) -> None:
        delay = path_latency[transfers[flow // pieces].path]
        if delay > 0:
            heapq.heappush(latency_heap, (at + delay, flow))
        else:
            active[flow] = piece_bytes

    for flow in range(count):
        if waiting[flow] == 0:
            make_ready(flow, 0.0)
    done = 0
    finish = 0.0
    while done < count:
        if not active and not latency_heap:
            raise RuntimeError("flow simulation stalled: dependencies never satisfied (verify the schedule)")
        rates = _max_min_rates(active, transfers, pieces, path_links, capacity) if active else {}
        next_finish = min((remaining / rates[f] for f, remaining in active.items()), default=float("inf"))
        next_latency = latency_heap[0][0] - now if latency_heap else float("inf")
        step = min(next_finish, next_latency)
        now += step
        finished: list[int] = []
        tolerance = 1e-12 * max(piece_bytes, 1.0)
        for flow in list(active):
            remaining = active[flow] - rates[flow] * step
            if remaining <= tolerance:
                finished.append(flow)
                del active[flow]
            else:
                active[flow] = remaining
        while latency_heap and latency_heap[0][0] <= now * (1 + 1e-15) + 1e-18:
            _, flow = heapq.heappop(latency_heap)
            active[flow] = piece_bytes
        for flow in sorted(finished):
            done += 1
            finish = now
            for child in children[flow]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    make_ready(child, now)
    return finish


def _max_min_rates(active: dict[int, float], transfers: tuple, pieces: int,
                   path_links: dict[tuple[str, ...], np.ndarray], capacity: np.ndarray) -> dict[int, float]:
    """Max-min fair rates (bytes/s) by progressive filling over the links the active flows cross."""
    flows = list(active)
    if len(flows) == 1:
        links = path_links[transfers[flows[0] // pieces].path]
        return {flows[0]: float(capacity[links].min())}
    link_arrays = [path_links[transfers[f // pieces].path] for f in flows]
    lengths = np.fromiter((len(a) for a in link_arrays), dtype=np.int64, count=len(flows))
    entry_link = np.concatenate(link_arrays)
    entry_flow = np.repeat(np.arange(len(flows)), lengths)
    used, entry_link = np.unique(entry_link, return_inverse=True)
    remaining = capacity[used].astype(float)
    rate = np.zeros(len(flows))
    frozen = np.zeros(len(flows), dtype=bool)
    entry_alive = np.ones(len(entry_link), dtype=bool)
    while True:
        alive_links = entry_link[entry_alive]
        if alive_links.size == 0:
            break
        counts = np.bincount(alive_links, minlength=len(used))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(counts > 0, remaining / np.maximum(counts, 1), np.inf)
        level = share.min()
        bottleneck = share <= level * (1 + 1e-12)
        hit_flows = np.unique(entry_flow[entry_alive & bottleneck[entry_link]])
        hit_flows = hit_flows[~frozen[hit_flows]]
        frozen[hit_flows] = True
        rate[hit_flows] = level
        newly = np.isin(entry_flow, hit_flows) & entry_alive
        np.subtract.at(remaining, entry_link[newly], level)
        entry_alive &= ~newly
        remaining = np.maximum(remaining, 0.0)
    return {flow: float(rate[i]) for i, flow in enumerate(flows)}


register_model("flow", simulate_flow)
