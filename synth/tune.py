"""The per-size tuner: which algorithm to run at which message size, as NCCL's tuner or MSCCL's per-size
algorithm registration decide it.

:func:`tune` synthesizes every applicable registered algorithm once (each *candidate*: an algorithm and
a set of options; a few algorithms are tried in more than one variant, the ``variants`` of their
registry record, :class:`synth.algorithms.Algorithm`), verifies it, evaluates it at every message size (1 KiB to 4 GiB in powers of 4 by default) with the
evaluator, and ranks the candidates per size. Algorithms that do not apply, or that stop on a limit,
are listed as skipped with the reason. Slow solvers (``milp``) get ``time_limit_s`` when a time limit is
given. Size-sensitive algorithms (``nccl``, ``tree``, ``forest``, ``milp``) are synthesized once per
size (:func:`synth.compare.run_all`).

The baseline ``nccl`` (what NCCL would run at that size) is always a candidate, even when ``algorithms``
names others, so the tuned choice is never slower than it under the same evaluator; each size's row
gives the baseline's time and the speedup over it (``baseline``, ``baseline_time_s``,
``speedup_vs_baseline``). Where ``nccl`` does not apply the baseline is ``ring``.

The runtime table (``synth tune ... --out table.json``), format ``synth.tune/1``::

    {
      "format": "synth.tune/1",
      "topology": "dgx-a100:boxes=2",      # the topology's name (a library spec or file name)
      "collective": "allreduce",
      "ranks": 16,
      "model": "flow",                     # the evaluator model the times come from
      "bound_algbw_GBps": 173.3,           # the topology's bandwidth bound for the collective, or null
      "ranges": [                          # size ranges -> what to run; they tile [0, infinity)
        {"min_bytes": 0, "max_bytes": 8192, "algorithm": "tree", "options": {"shape": "binomial"},
         "candidate": "tree[shape=binomial]"},
        {"min_bytes": 8192, "max_bytes": null, "algorithm": "ring", "options": {}, "candidate": "ring"}
      ],
      "sizes": [                           # one row per measured size, in increasing size
        {"size": 1024, "winner": "tree[shape=binomial]", "time_s": 1.1e-05, "algbw_GBps": 0.09,
         "runner_up": "rhd", "runner_up_time_s": 1.3e-05, "percent_of_bound": 0.05,
         "baseline": "nccl", "baseline_time_s": 1.2e-05, "speedup_vs_baseline": 1.09}
      ],
      "candidates": {                      # every candidate's measurements, in the order of "sizes"
        "ring": {"algorithm": "ring", "options": {}, "time_s": [...], "algbw_GBps": [...]}
      },
      "skipped": [{"candidate": "multidim", "reason": "topology ... has no dimensions ..."}]
    }

``min_bytes`` is inclusive and ``max_bytes`` exclusive (null: no upper limit). A range boundary lies
halfway (geometrically) between two measured sizes with different winners. ``options`` are the
algorithm options to pass to ``synth generate`` (``-O key=value``) to rebuild the schedule that was
measured: for a size-sensitive winner (one that chooses its shape per size) they include the ``size`` it
was built for, and each measured size with its own schedule gets its own range, with the ``variant`` the
schedule chose (``k=1, spread``).

Examples
--------
>>> from synth.library import load_topology
>>> result = tune(load_topology("switch:n=8"), "allreduce", sizes=[1024, 2**30], algorithms=["ring", "tree"])
>>> [row.winner for row in result.per_size]
['tree[shape=binomial]', 'ring']
>>> [(r["min_bytes"], r["max_bytes"], r["algorithm"], r["options"]) for r in result.ranges()]
[(0, 1048576, 'tree', {'shape': 'binomial', 'size': 1024}), (1048576, None, 'ring', {})]
>>> [row.speedup_vs_baseline >= 1 for row in result.per_size]
[True, True]
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth.algorithms import REGISTRY, available, lookup
from synth.collectives import Kind, parse_kind
from synth.compare import BASELINE_ALGORITHMS, Skipped, lower_bound, run_all
from synth.errors import InputError
from synth.evaluate import PlanOptions
from synth.fileio import atomic_write_bytes, atomic_write_text
from synth.plan import Plan
from synth.topology import Topology

FORMAT = "synth.tune/1"

#: The default message sizes: 1 KiB to 4 GiB in powers of 4.
DEFAULT_SIZES: tuple[int, ...] = tuple(1024 * 4**i for i in range(12))

#: The baseline every size's row is measured against (always a candidate; ``ring`` where it does not apply).
BASELINE = BASELINE_ALGORITHMS[0]


@dataclass(frozen=True)
class Candidate:
    """One algorithm with one set of options, named by ``label`` (``tree[shape=binomial]``)."""

    label: str
    algorithm: str
    options: Mapping[str, Any]
    variant: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SizeResult:
    """The ranking at one message size."""

    size: int
    winner: str
    time_s: float
    algbw_GBps: float
    runner_up: str | None
    runner_up_time_s: float | None
    percent_of_bound: float | None
    plan: Plan | None = None
    baseline: str | None = None
    baseline_time_s: float | None = None
    variant: str = ""

    @property
    def winner_name(self) -> str:
        """The winner's label with the variant its schedule chose at this size (``forest(k=3)``)."""
        return f"{self.winner}({self.variant})" if self.variant else self.winner

    @property
    def speedup_vs_baseline(self) -> float | None:
        """The baseline's time over the winner's (1.0 when the baseline wins), or None without one."""
        if self.baseline_time_s is None or self.time_s <= 0:
            return None
        return self.baseline_time_s / self.time_s

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON row (the winner's plan as ``protocol``, ``slices``, ``slice_bytes``, ``window``)."""
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "plan"}
        return {**row, "speedup_vs_baseline": self.speedup_vs_baseline, **(self.plan.to_dict() if self.plan else {})}


@dataclass(frozen=True)
class TuneResult:
    """Everything :func:`tune` measured: per-candidate times and the per-size ranking."""

    topology: str
    collective: Kind
    num_ranks: int
    model: str
    sizes: tuple[int, ...]
    bound_algbw_GBps: float | None
    candidates: tuple[Candidate, ...]
    times_s: Mapping[str, tuple[float, ...]]
    algbw_GBps: Mapping[str, tuple[float, ...]]
    per_size: tuple[SizeResult, ...]
    skipped: tuple[Skipped, ...]
    plans: Mapping[str, tuple[Plan, ...]] = field(default_factory=dict)
    bound_label: str = "bound"

    def ranges(self) -> list[dict[str, Any]]:
        """Size ranges -> winning candidate (see the module docstring for the fields)."""
        by_label = {c.label: c for c in self.candidates}
        result: list[dict[str, Any]] = []
        for index, row in enumerate(self.per_size):
            protocol = row.plan.protocol.value if row.plan else None
            chosen = by_label[row.winner]
            options = _plain(chosen.options)
            if _chooses_per_size(chosen):  # its schedule at this size is the one built for this size
                options["size"] = row.size
            if (result and result[-1]["candidate"] == row.winner and result[-1]["protocol"] == protocol
                    and result[-1]["options"] == options):
                continue
            low = 0 if index == 0 else boundary(self.per_size[index - 1].size, row.size)
            if result:
                result[-1]["max_bytes"] = low
            entry = {"min_bytes": low, "max_bytes": None, "algorithm": chosen.algorithm, "options": options,
                     "candidate": row.winner, "protocol": protocol}
            if row.variant:
                entry["variant"] = row.variant
            result.append(entry)
        return result

    def to_dict(self) -> dict[str, Any]:
        """The ``synth.tune/1`` document."""
        return {
            "format": FORMAT,
            "topology": self.topology,
            "collective": self.collective.value,
            "ranks": self.num_ranks,
            "model": self.model,
            "bound_algbw_GBps": self.bound_algbw_GBps,
            "bound_label": self.bound_label,
            "ranges": self.ranges(),
            "sizes": [row.to_dict() for row in self.per_size],
            "candidates": {c.label: {"algorithm": c.algorithm, "options": _plain(c.options),
                                     "time_s": list(self.times_s[c.label]),
                                     "algbw_GBps": list(self.algbw_GBps[c.label]),
                                     "protocol": [p.protocol.value for p in self.plans.get(c.label, ())]}
                           for c in self.candidates if c.label in self.times_s},
            "skipped": [{"candidate": s.algorithm, "reason": s.reason} for s in self.skipped],
        }

    def to_json(self) -> str:
        """Deterministic JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), indent=1) + "\n"


def boundary(smaller: int, larger: int) -> int:
    """The range boundary between two measured sizes: their geometric mean, rounded up.

    Examples
    --------
    >>> boundary(1024, 4096)
    2048
    """
    return math.isqrt(smaller * larger - 1) + 1


def _chooses_per_size(candidate: Candidate) -> bool:
    """Whether ``candidate``'s schedule depends on the message size it is built for (a size-sensitive
    algorithm given no fixed ``size``): :func:`tune` builds it once per measured size."""
    return bool(candidate.algorithm in REGISTRY and REGISTRY[candidate.algorithm].size_sensitive
                and "size" not in candidate.options)


def _plain(options: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): (list(v) if isinstance(v, tuple) else v) for k, v in sorted(options.items())}


def _label(name: str, variant: Mapping[str, Any]) -> str:
    if not variant:
        return name
    inner = ",".join(f"{k}={','.join(map(str, v)) if isinstance(v, list | tuple) else v}"
                     for k, v in sorted(variant.items()))
    return f"{name}[{inner}]"


def candidates(kind: Kind, algorithms: Iterable[str] | None = None,
               options: Mapping[str, Mapping[str, Any]] | None = None,
               variants: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
               time_limit_s: float | None = None, include_slow: bool = True) -> list[Candidate]:
    """The candidates :func:`tune` runs for ``kind``, in registry order.

    ``options[name]`` is merged into every variant of algorithm ``name`` (and wins); ``time_limit_s``
    is passed to every algorithm whose function takes a ``time_limit_s`` option.

    Examples
    --------
    >>> [c.label for c in candidates(Kind.ALLREDUCE, algorithms=["ring", "tree"])]
    ['ring', 'ring[channels=2]', 'ring[channels=auto]', 'tree', 'tree[shape=binomial]']
    """
    wanted = list(algorithms) if algorithms is not None else None
    for name in wanted or ():
        lookup(name)
    user = {name: dict(values) for name, values in (options or {}).items()}
    for name in user:
        lookup(name, field="options")
    result: list[Candidate] = []
    seen: set[tuple[str, str]] = set()
    for algorithm in available(kind):
        name = algorithm.name
        if wanted is not None and name not in wanted:
            continue
        if wanted is None and not include_slow and algorithm.slow:
            continue
        extra: dict[str, Any] = {}
        if time_limit_s is not None and algorithm.time_limited:
            extra["time_limit_s"] = time_limit_s
        table = algorithm.variants if variants is None else variants.get(name, [{}])
        for variant in table or [{}]:
            merged = {**variant, **extra, **user.get(name, {})}
            key = (name, json.dumps(_plain(merged), sort_keys=True, default=str))
            if key in seen:
                continue
            seen.add(key)
            result.append(Candidate(_label(name, variant), name, merged, dict(variant)))
    return result


def tune(topology: Topology, collective: Kind | str, sizes: Iterable[int] | None = None,
         algorithms: Iterable[str] | None = None, options: Mapping[str, Mapping[str, Any]] | None = None,
         variants: Mapping[str, Sequence[Mapping[str, Any]]] | None = None, time_limit_s: float | None = None,
         model: str = "flow", include_slow: bool = True,
         progress: Callable[[str], None] | None = None, plan: PlanOptions | None = None,
         baseline: bool = True) -> TuneResult:
    """Evaluate every applicable candidate at every size and rank them (see the module docstring).

    Parameters
    ----------
    topology : Topology
    collective : Kind or str
    sizes : iterable of int, optional
        Message sizes in bytes (default :data:`DEFAULT_SIZES`).
    algorithms : iterable of str, optional
        Only these registered algorithms (default: every one that does the collective).
    options : dict, optional
        Per-algorithm options, ``{"milp": {"time_limit_s": 30}}``.
    variants : dict, optional
        Per-algorithm list of option variants (default: each registry record's ``variants``).
    time_limit_s : float, optional
        Passed to every algorithm that takes ``time_limit_s`` (the solvers).
    model : str
        Evaluator model (default ``flow``).
    include_slow : bool
        Include slow solvers (``milp``) when no algorithm list is given.
    progress : callable, optional
        Called with a short description before each candidate runs.
    plan : PlanOptions, optional
        Overrides of the execution plan, the same for every candidate (default: the rule of
        :mod:`synth.plan`, protocol auto).
    baseline : bool
        Add :data:`BASELINE` (``nccl``) to the candidates when ``algorithms`` leaves it out, and report
        every size against it (default True); False: only the named algorithms, and the baseline is
        reported only if among them.
    """
    kind = collective if isinstance(collective, Kind) else parse_kind(collective)
    size_list = sorted(set(DEFAULT_SIZES if sizes is None else sizes))
    if not size_list:
        raise InputError("", "size", "expected at least one message size")
    if any(not isinstance(s, int) or isinstance(s, bool) or s <= 0 for s in size_list):
        raise InputError("", "size", f"expected positive whole byte counts, got {size_list}")
    algorithms = list(algorithms) if algorithms is not None else None
    if (baseline and algorithms is not None and BASELINE not in algorithms
            and any(name in REGISTRY and kind in REGISTRY[name].collectives for name in algorithms)):
        algorithms.append(BASELINE)  # the baseline joins named algorithms that do the collective
    chosen = candidates(kind, algorithms, options, variants, time_limit_s, include_slow)
    times: dict[str, tuple[float, ...]] = {}
    algbw: dict[str, tuple[float, ...]] = {}
    plans: dict[str, tuple[Plan, ...]] = {}
    variant_names: dict[str, tuple[str, ...]] = {}
    skipped: list[Skipped] = []
    for name in algorithms or ():
        if kind not in REGISTRY[name].collectives:
            does = ", ".join(sorted(k.value for k in REGISTRY[name].collectives))
            skipped.append(Skipped(name, kind.value, f"{name} does not do {kind}; it does {does}"))
    for candidate in chosen:
        if progress:
            progress(candidate.label)
        rows, missed, _ = run_all(topology, [kind], size_list, algorithms=[candidate.algorithm],
                                  options={candidate.algorithm: dict(candidate.options)}, model=model,
                                  keep_going=True, plan=plan)
        skipped.extend(Skipped(candidate.label, s.collective, s.reason) for s in missed)
        if rows and len(rows) != len(size_list):
            missing = sorted(set(size_list) - {row.size for row in rows})
            if not missed:
                skipped.append(Skipped(candidate.label, kind.value, f"no schedule at {len(missing)} of the sizes"))
        elif rows:
            rows.sort(key=lambda row: row.size)
            times[candidate.label] = tuple(row.time_s for row in rows)
            algbw[candidate.label] = tuple(row.algbw_GBps for row in rows)
            plans[candidate.label] = tuple(row.plan for row in rows)
            variant_names[candidate.label] = tuple(row.variant for row in rows)
    if not times:
        reasons = "; ".join(f"{s.algorithm}: {s.reason}" for s in skipped) or "no algorithm does it"
        raise InputError("", "collective", f"no algorithm applies to {kind} on {topology.name}: {reasons}")
    bound = lower_bound(topology, kind)
    order = [c.label for c in chosen if c.label in times]
    base = next((name for name in BASELINE_ALGORITHMS if name in times), None)
    per_size = []
    for index, size in enumerate(size_list):
        ranked = sorted(order, key=lambda label: (times[label][index], order.index(label)))
        winner = ranked[0]
        runner = ranked[1] if len(ranked) > 1 else None
        best_algbw = algbw[winner][index]
        per_size.append(SizeResult(
            size, winner, times[winner][index], best_algbw, runner,
            times[runner][index] if runner else None,
            100.0 * bound.time(size) / times[winner][index] if bound else None, plans[winner][index],
            base, times[base][index] if base else None, variant_names[winner][index]))
    return TuneResult(topology.name, kind, topology.num_ranks, model, tuple(size_list),
                      bound.bandwidth_algbw_GBps() if bound else None,
                      tuple(c for c in chosen if c.label in times), times, algbw, tuple(per_size), tuple(skipped),
                      plans, bound.label if bound else "bound")


def write_table(result: TuneResult, path: str | Path) -> None:
    """Write the ``synth.tune/1`` runtime table atomically."""
    atomic_write_text(path, result.to_json())


def plot(result: TuneResult, path: str | Path) -> None:
    """Draw algbw against message size for every candidate (log axes) to a PNG file, atomically.

    The bandwidth bound, when known, is drawn as a dashed line.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), dpi=100)
    axes = figure.subplots()
    markers = "os^vD<>ph*x+"
    for index, candidate in enumerate(result.candidates):
        axes.plot(result.sizes, result.algbw_GBps[candidate.label], marker=markers[index % len(markers)],
                  markersize=4, linewidth=1.2, label=candidate.label)
    if result.bound_algbw_GBps:
        axes.axhline(result.bound_algbw_GBps, color="black", linestyle="--", linewidth=1,
                     label=f"{result.bound_label} {result.bound_algbw_GBps:.1f} GB/s (large sizes)")
    from synth.units import format_size

    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    sizes = list(result.sizes)
    ticks = sizes if len(sizes) <= 12 else sizes[:: math.ceil(len(sizes) / 12)]
    axes.set_xticks(ticks)
    axes.set_xticklabels([format_size(size, sep=" ") for size in ticks], fontsize=7, rotation=30)
    axes.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    axes.set_xlabel("message size")
    axes.set_ylabel("algbw (GB/s)")
    axes.set_title(f"{result.collective} on {result.topology} ({result.num_ranks} ranks, {result.model} model)")
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    atomic_write_bytes(path, buffer.getvalue())
