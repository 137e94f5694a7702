"""Run every applicable algorithm on a topology and measure each schedule: the engine behind
``synth demo``, ``synth compare`` and the tuner."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from synth.algorithms import available
from synth.choose import synthesize
from synth.collectives import Kind
from synth.errors import NotApplicable, SynthError
from synth.evaluate import PlanOptions, evaluate_sizes
from synth.plan import Plan
from synth.schedule import Schedule
from synth.topology import Topology
from synth.verify import verify

if TYPE_CHECKING:
    from synth.bounds import TimeBound


@dataclass(frozen=True)
class Row:
    """One (algorithm, collective, size) measurement of a verified schedule, with the plan it ran under
    and the topology's lower bound on time at that size."""

    algorithm: str
    collective: str
    size: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    congestion_time_s: float
    synthesis_s: float
    plan: Plan
    bound_time_s: float | None = None
    bound_label: str = "bound"
    variant: str = ""

    @property
    def label(self) -> str:
        """The algorithm's name, with the variant the schedule chose for this size when it records one
        (``forest(k=3)``); the name alone otherwise."""
        return f"{self.algorithm}({self.variant})" if self.variant else self.algorithm

    @property
    def percent_of_bound(self) -> float | None:
        """The bound's time as a percentage of this time (100% = as fast as the links allow), if known."""
        if not self.bound_time_s or self.time_s <= 0:
            return None
        return 100.0 * self.bound_time_s / self.time_s

    @property
    def bound_algbw_GBps(self) -> float | None:
        """The largest algbw any schedule can reach at this size, if known."""
        if not self.bound_time_s:
            return None
        return self.size / self.bound_time_s / 1e9

    def to_dict(self) -> dict[str, object]:
        """A plain dict for JSON output (the plan's fields included)."""
        return {"algorithm": self.algorithm, "collective": self.collective, "size": self.size,
                "time_s": self.time_s, "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps,
                "congestion_time_s": self.congestion_time_s, "synthesis_s": self.synthesis_s,
                "bound_time_s": self.bound_time_s, "bound_algbw_GBps": self.bound_algbw_GBps,
                "bound_label": self.bound_label, "percent_of_bound": self.percent_of_bound,
                "variant": self.variant, **self.plan.to_dict()}


@dataclass(frozen=True)
class Skipped:
    """An algorithm that did not apply (or failed), with the reason."""

    algorithm: str
    collective: str
    reason: str


def lower_bound(topology: Topology, kind: Kind, demand: Any = None, shards: Any = None) -> TimeBound | None:
    """The topology's proven lower bound on time for ``kind`` (:func:`synth.bounds.time_bound`; alltoallv
    for ``demand``, allgather and reduce-scatter for uneven ``shards``), or None when none can be computed
    (a limit, an LP failure). On a fabric at achievable rates (``SPEC@achievable``) it is the bound of its
    line rates (:func:`synth.library.achievable.line_rate`): the hardware cannot beat it.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> line = lower_bound(load_topology("dgx-a100:boxes=2"), Kind.ALLGATHER)
    >>> real = lower_bound(load_topology("dgx-a100:boxes=2@achievable"), Kind.ALLGATHER)
    >>> line.seconds_per_byte == real.seconds_per_byte  # the same bandwidth term; NCCL's latencies
    True
    """
    from synth.bounds import time_bound
    from synth.library.achievable import line_rate

    try:
        return time_bound(line_rate(topology), kind, demand=demand, shards=shards)
    except SynthError:
        return None


def bandwidth_bound(topology: Topology, kind: Kind, demand: Any = None, shards: Any = None) -> float | None:
    """The largest algbw (GB/s) any schedule of ``kind`` reaches on ``topology`` at large sizes, or None."""
    bound = lower_bound(topology, kind, demand, shards)
    return None if bound is None else bound.bandwidth_algbw_GBps()


#: The baseline of every speedup, in order of preference: ``nccl`` (what NCCL would run), else ``ring``
#: (NCCL's ring) where ``nccl`` does not apply.
BASELINE_ALGORITHMS = ("nccl", "ring")


def is_slow(name: str) -> bool:
    """Whether the registered algorithm ``name`` is a slow solver run (left out unless named)."""
    from synth.algorithms import REGISTRY

    return name in REGISTRY and REGISTRY[name].slow


def planned(kinds: Iterable[Kind], algorithms: Iterable[str] | None = None,
            include_slow: bool = True) -> list[tuple[Kind, str]]:
    """The (collective, algorithm) pairs :func:`run_all` will try, in its order (for progress bars)."""
    wanted = set(algorithms) if algorithms is not None else None
    return [(kind, a.name) for kind in kinds for a in available(kind)
            if (wanted is None or a.name in wanted) and (include_slow or wanted is not None or not a.slow)]


def best_rows(rows: Iterable[Row]) -> set[tuple[str, int, str]]:
    """(collective, size, algorithm) of the highest algbw per (collective, size); ties go to the first."""
    best: dict[tuple[str, int], Row] = {}
    for row in rows:
        key = (row.collective, row.size)
        if key not in best or row.algbw_GBps > best[key].algbw_GBps:
            best[key] = row
    return {(r.collective, r.size, r.algorithm) for r in best.values()}


def baselines(rows: Iterable[Row]) -> dict[tuple[str, int], Row]:
    """The baseline row per (collective, size): the ``nccl`` row, else the ``ring`` row
    (:data:`BASELINE_ALGORITHMS`), the faster where there are two ways NCCL runs it (uneven shards: grouped
    broadcasts and the padded allgather); a (collective, size) with neither has no entry.

    Examples
    --------
    >>> from synth.plan import make_plan
    >>> plan = make_plan(4, 1024, "Simple")
    >>> rows = [Row("ring", "allgather", 1024, 2.0, 1.0, 1.0, 1.0, 0.0, plan),
    ...         Row("nccl", "allgather", 1024, 4.0, 1.0, 1.0, 1.0, 0.0, plan)]
    >>> baselines(rows)[("allgather", 1024)].algorithm
    'nccl'
    """
    found: dict[tuple[str, int], Row] = {}
    rank = {name: index for index, name in enumerate(BASELINE_ALGORITHMS)}
    for row in rows:
        if row.algorithm not in rank:
            continue
        key = (row.collective, row.size)
        if key not in found or (rank[row.algorithm], row.time_s) < (rank[found[key].algorithm], found[key].time_s):
            found[key] = row
    return found


def speedup(row: Row, baseline: Row | None) -> float | None:
    """The baseline's time over ``row``'s time at the same size (2.0: twice as fast), or None.

    Examples
    --------
    >>> from synth.plan import make_plan
    >>> plan = make_plan(4, 1024, "Simple")
    >>> fast, slow = (Row(a, "allgather", 1024, t, 1.0, 1.0, 1.0, 0.0, plan) for a, t in (("forest", 1.0), ("nccl", 3.0)))
    >>> speedup(fast, slow)
    3.0
    """
    if baseline is None or row.time_s <= 0 or baseline.size != row.size or baseline.collective != row.collective:
        return None
    return baseline.time_s / row.time_s


def baseline_description(topology: Topology, name: str = "nccl", version: str | None = None) -> str:
    """One line saying what the baseline ``name`` runs on ``topology``, naming the NCCL release
    (``version``: the ``nccl`` option, default :data:`synth.algorithms.nccl.DEFAULT_VERSION`): NCCL's
    rail-aware rings and double binary tree on NVLink boxes with NICs, NVLS and NVLS-Tree where the boxes'
    NVLink switches reduce and multicast, CollNet where the network switches do (IB SHARP); NCCL's ring
    elsewhere, e.g. a torus.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> baseline_description(load_topology("torus:dims=3x3")).split(";")[1][:50]
    ' torus:dims=3x3 has no NVLink boxes with NIC rails'
    >>> baseline_description(load_topology("dgx-h100"), version="2.16")[:26]
    'nccl: what NCCL 2.16 would'
    >>> hosts = Topology.build("hosts", ["g0", "g1", "g2"], ["ib"], [(g, "ib", 25.0) for g in ("g0", "g1", "g2")],
    ...                        boxes=(0, 1, 2))
    >>> "PAT" in baseline_description(hosts)
    True
    """
    from synth.algorithms.nccl import (
        DEFAULT_VERSION,
        detect_arch,
        nvls_boxes,
        one_gpu_per_node,
        parse_version,
        sharp_rails,
    )
    from synth.algorithms.ring import box_groups
    from synth.collectives import Kind

    if name != "nccl":
        return f"{name}: NCCL's ring (nccl does not apply here)"
    key = parse_version(version if version is not None else DEFAULT_VERSION)
    release = key  # "2.23": the full tag (RELEASES[key]) is in the schedule's params
    boxes = box_groups(topology)
    extras = []
    if key != "2.16":
        if nvls_boxes(topology, boxes, Kind.ALLREDUCE, detect_arch(topology, "auto")[0]) is not None:
            extras.append("NVLS in the NVLink switch" if not boxes else
                          "NVLS in the boxes' NVLink switches with NVLS-Tree between the boxes")
        if sharp_rails(topology) is not None:
            extras.append("CollNet through the SHARP switches")
    also = "".join(f", {extra}" for extra in extras)
    if boxes:
        return (f"nccl: what NCCL {release} would run: rail-aware ring channels or its double binary tree{also}, "
                "and the protocol, chosen per size by its tuning model")
    single = one_gpu_per_node(topology)
    pat = (f"; every gpu is its own box (one gpu per node), where NCCL {release} also runs PAT for allgather "
           "and reduce-scatter, chosen per size by the same model (PAT runs Simple only, whose per-step network "
           "latency the flow model charges in full, so its time there may exceed the LL ring's that NCCL's "
           "model ranks below it)") if single and key != "2.16" else ""
    return (f"nccl: what NCCL {release} would run; {topology.name} has no NVLink boxes with NIC rails, so that is "
            f"NCCL's ring (and, for allreduce, its tree) over the fabric{' or ' + ', '.join(extras) if extras else ''}, "
            f"protocol by its tuning model{pat}")


def run_all(topology: Topology, kinds: Iterable[Kind], sizes: Iterable[int], algorithms: Iterable[str] | None = None,
            options: dict[str, dict[str, object]] | None = None, model: str = "flow",
            progress: Callable[[str], None] | None = None, include_slow: bool = True,
            keep_going: bool = False, plan: PlanOptions | None = None, demand: Any = None,
            shards: Any = None) -> tuple[list[Row], list[Skipped], dict[tuple[Any, ...], Schedule]]:
    """Synthesize, verify and evaluate every applicable algorithm for each collective and size.

    Every schedule is evaluated by :func:`synth.evaluate.evaluate_sizes` under the same plan rule
    (``plan`` overrides it explicitly, the same for every algorithm), so each row's time is the one
    ``synth evaluate`` prints for that schedule and size.

    A size-sensitive algorithm (:attr:`synth.algorithms.Algorithm.size_sensitive`: ``nccl``, ``tree``,
    ``forest``, ``milp``) is synthesized once per size with ``size=`` (unless ``options`` fix its
    size), and each of its rows is measured on the schedule made for that size; the others are
    synthesized once. A row's ``synthesis_s`` is the time to make the schedule it was measured on.

    ``demand`` (alltoallv; a Demand, its chunks or a chunk-count matrix, default 1 chunk per pair) is
    passed to every algorithm's alltoallv and to its bound; ``shards`` (uneven shards, one size per rank) to
    every algorithm's allgather and reduce-scatter that takes them (the others are skipped, saying so) and
    to their bound.

    ``include_slow=False`` leaves out slow solvers (:attr:`~synth.algorithms.Algorithm.slow`) unless
    named in ``algorithms``; ``keep_going=True`` records an algorithm that fails with a
    :class:`SynthError` (a limit, an infeasible request) as skipped instead of stopping.

    Returns the rows, the skipped algorithms and the schedules: ``schedules[(algorithm, collective,
    size)]`` is the schedule each row was measured on; ``schedules[(algorithm, collective)]`` the one
    for the largest size.
    """
    rows: list[Row] = []
    skipped: list[Skipped] = []
    schedules: dict[tuple[Any, ...], Schedule] = {}
    sizes = list(sizes)
    wanted = set(algorithms) if algorithms is not None else None
    for kind in kinds:
        sharded = shards is not None and kind in (Kind.ALLGATHER, Kind.REDUCESCATTER)
        bound = lower_bound(topology, kind, demand if kind == Kind.ALLTOALLV else None, shards if sharded else None)
        for algorithm in available(kind):
            if wanted is not None and algorithm.name not in wanted:
                continue
            if not include_slow and wanted is None and algorithm.slow:
                continue
            if progress:
                progress(f"{algorithm.name} {kind}")
            user = dict((options or {}).get(algorithm.name, {}))
            if kind == Kind.ALLTOALLV and demand is not None:
                user.setdefault("demand", demand)
            if sharded:
                if not algorithm.takes("shards"):
                    skipped.append(Skipped(algorithm.name, kind.value, f"{algorithm.name} takes no uneven shards"))
                    continue
                user.setdefault("shards", shards)
            per_size = algorithm.size_sensitive and "size" not in user
            groups = [[size] for size in sizes] if per_size else [sizes]
            reasons: set[str] = set()
            for group in groups:
                made = _made(topology, kind, algorithm.name, dict(user, size=group[0]) if per_size else user,
                             keep_going)
                if isinstance(made, str):
                    if made not in reasons:
                        reasons.add(made)
                        skipped.append(Skipped(algorithm.name, kind.value, made))
                    continue
                schedule, elapsed = made
                schedules[(algorithm.name, kind.value)] = schedule
                variant = str(schedule.params.get("variant", ""))
                try:
                    results = evaluate_sizes(schedule, topology, group, model=model, options=plan)
                except NotApplicable as reason:  # a model that cannot run it (astra: in-switch operations)
                    if str(reason) not in reasons:
                        reasons.add(str(reason))
                        skipped.append(Skipped(algorithm.name, kind.value, str(reason)))
                    continue
                for result in results:
                    schedules[(algorithm.name, kind.value, result.size)] = schedule
                    rows.append(Row(algorithm.name, kind.value, result.size, result.time_s, result.algbw_GBps,
                                    result.busbw_GBps, result.congestion_time_s, elapsed, result.plan,
                                    None if bound is None else bound.time(result.size),
                                    "bound" if bound is None else bound.label, variant))
            if sharded and algorithm.name == "nccl":
                rows.extend(padded_rows(topology, kind, sizes, shards, model, plan, bound, keep_going, skipped))
    return rows, skipped, schedules


#: The variant label of the rows :func:`padded_rows` makes.
PADDED = "padded"


def padded_rows(topology: Topology, kind: Kind, sizes: list[int], shards: Any, model: str,
                plan: PlanOptions | None, bound: TimeBound | None, keep_going: bool = False,
                skipped: list[Skipped] | None = None) -> list[Row]:
    """Uneven shards as frameworks that pad run them (FSDP, Megatron: every shard padded to the largest,
    then NCCL's even allgather or reduce-scatter): ``nccl``'s schedule of the even collective over N x the
    largest shard, timed at that padded size, one row per size of the real data (algbw and busbw of the
    real bytes; variant ``padded``). The padded bytes are moved, so the time is what that run takes; the
    schedule is of the padded collective, not of these shards."""
    from synth.collectives import shard_weights

    weights = shard_weights(shards, topology.num_ranks)
    if weights is None:
        return []
    total, largest = sum(weights), max(weights)
    found: list[Row] = []
    for size in sizes:
        padded = -(-size * largest * topology.num_ranks // total)
        made = _made(topology, kind, "nccl", {"size": padded}, keep_going)
        if isinstance(made, str):
            if skipped is not None:
                skipped.append(Skipped("nccl", kind.value, f"padded: {made}"))
            continue
        schedule, elapsed = made
        result = evaluate_sizes(schedule, topology, [padded], model=model, options=plan)[0]
        algbw = size / result.time_s / 1e9 if result.time_s > 0 else 0.0
        factor = result.busbw_GBps / result.algbw_GBps if result.algbw_GBps else 0.0
        found.append(Row("nccl", kind.value, size, result.time_s, algbw, algbw * factor, result.congestion_time_s,
                         elapsed, result.plan, None if bound is None else bound.time(size),
                         "bound" if bound is None else bound.label, PADDED))
    return found


def _made(topology: Topology, kind: Kind, name: str, options: dict[str, Any],
          keep_going: bool) -> tuple[Schedule, float] | str:
    """A verified schedule and its synthesis time, or the reason it is skipped."""
    started = time.perf_counter()
    try:
        schedule = synthesize(topology, kind, name, **options)
    except NotApplicable as reason:
        return str(reason)
    except (SynthError, ImportError) as error:
        if not keep_going:
            raise
        return f"{type(error).__name__}: {error}"
    elapsed = time.perf_counter() - started
    try:
        verify(schedule, topology)
    except SynthError as error:
        if not keep_going:
            raise
        return f"schedule failed verification: {error}"
    return schedule, elapsed
