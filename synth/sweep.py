"""Design-space sweeps: synthesize, verify and evaluate every point of a parameter grid, in parallel on Dask.

A sweep spec (YAML or JSON) names a topology builder from the library, a grid of its parameters, the
collectives, the algorithms and the message sizes. Every *point* -- one combination of builder
parameters x collective x algorithm -- is synthesized, verified (exactly) and evaluated at every size.
The results are one row per (point, size) in a Parquet file.

Spec format
-----------
::

    name: dgx-a100-nics          # optional, free text
    topology: dgx-a100           # a library builder (`synth topologies` lists them)
    grid:                        # builder parameters; the sweep runs the cross product, first key outermost
      boxes: {from: 1, to: 50}   # inclusive range, step 1 (or `step: k`)
      nic_bandwidth: [12.5, 25, 50, 100]   # a list of values
      latency: 0.7               # a scalar is a fixed parameter
      # size: {from: 2, to: 64, times: 2}  # geometric range: 2, 4, 8, ..., 64
      # dims: [[4, 4], [8, 8]]   # a list of ints is a tuple parameter (shown as "4x4" in the results)
    collectives: [allgather, allreduce]    # any spelling `synth` accepts (ag, all-reduce, ...)
    algorithms: [ring, direct]   # optional; default: every registered algorithm. A collective is paired
                                 # only with the algorithms that support it.
    sizes: [1MiB, 64MiB, 1GiB]   # or a geometric range {from: 1KiB, to: 1GiB, times: 4}
    model: flow                  # optional evaluator model (default flow)
    plan: {protocol: auto}       # optional execution-plan overrides: protocol (auto, LL, LL128, Simple,
                                 # ideal), slice_bytes, slices, window (default: the rule of synth.plan)
    options:                     # optional per-algorithm options, passed to the algorithm as is
      ring: {chunks: 8}

Unknown keys, unknown parameters or algorithms, empty lists and duplicate values are rejected with an
error naming the spec file and the field.

Results
-------
One row per (point, size), with the columns ``point_id`` (a stable hash of the topology builder, its
parameters, the collective, the algorithm, its options, the model, the plan overrides and the evaluator's
version), ``topology``, one column per grid parameter, ``num_ranks``, ``collective``, ``algorithm``,
``model``, ``size`` (bytes), ``status`` (``ok``, ``not-applicable`` or ``error``), ``bound_algbw_GBps``
(the largest algbw the topology's lower bound on time allows at that size, empty when none),
``time_s``, ``algbw_GBps``, ``busbw_GBps``, ``percent_of_bound`` (bound time over time), the plan the
time was computed with (``protocol``, ``slices`` per chunk, ``slice_bytes``, ``window``),
``congestion_time_s``, ``synthesis_s`` (wall time of the synthesis alone, the only column that varies
between runs) and ``error`` (the reason when the status is not ``ok``). Rows are in grid order, then size
order. The times are the ones ``synth evaluate`` prints for the same schedule, size, model and plan.

Running
-------
``synth sweep SPEC.yaml -o results.parquet`` runs on a local Dask cluster with one worker process per core
(one core or ``--workers 1``: in process, one point after another); ``--scheduler tcp://HOST:PORT`` runs the
same spec on an existing Dask cluster whose workers can import ``synth``. Points are independent and
idempotent. A failed point is recorded with its error and the sweep goes on. The output is rewritten
atomically every few seconds, so a kill loses at most the points finished since the last flush; re-running
the same command skips every (point, size) already in the output (``--retry-errors`` runs the failed ones
again).

Examples
--------
>>> sweep = parse_spec({"topology": "ring", "grid": {"n": [4, 6]}, "collectives": ["allgather"],
...                     "algorithms": ["ring"], "sizes": ["1MiB"]})
>>> [(p.params["n"], p.collective, p.algorithm) for p in sweep.points]
[(4, 'allgather', 'ring'), (6, 'allgather', 'ring')]
>>> run_point(sweep.points[0], sweep.sizes)[0]["status"]
'ok'
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import io
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from synth.errors import InputError, LimitError, NotApplicable, SynthError, invalid
from synth.topology import Topology

if TYPE_CHECKING:
    from synth.bounds import TimeBound

#: Largest number of points a spec may expand to.
MAX_POINTS = 1_000_000
#: Largest number of values one range may expand to.
MAX_AXIS_VALUES = 100_000

OK = "ok"
NOT_APPLICABLE = "not-applicable"
ERROR = "error"

#: Result columns before the grid parameters, then after them, in file order.
LEADING_COLUMNS = ("point_id", "topology")
TRAILING_COLUMNS = ("num_ranks", "collective", "algorithm", "model", "size", "status", "bound_algbw_GBps",
                    "time_s", "algbw_GBps", "busbw_GBps", "percent_of_bound", "protocol", "slices",
                    "slice_bytes", "window", "congestion_time_s", "synthesis_s", "error")
RESERVED_COLUMNS = frozenset(LEADING_COLUMNS + TRAILING_COLUMNS)
#: Changes whenever the evaluator's times change, so results of an older evaluator are never resumed.
EVALUATOR_VERSION = 2
_INT_COLUMNS = ("num_ranks", "size", "slices", "window")
_FLOAT_COLUMNS = ("bound_algbw_GBps", "time_s", "algbw_GBps", "busbw_GBps", "percent_of_bound", "slice_bytes",
                  "congestion_time_s", "synthesis_s")

Row = dict[str, Any]


# ----------------------------------------------------------------------------------------- the spec
class _SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = ""
    topology: str
    grid: dict[str, Any] = {}
    collectives: list[str]
    algorithms: list[str] | None = None
    sizes: Any
    model: str = "flow"
    options: dict[str, dict[str, Any]] = {}
    plan: dict[str, Any] = {}


@dataclass(frozen=True)
class Point:
    """One design point: builder parameters x collective x algorithm (evaluated at every size).

    ``index`` is the point's position in grid order; ``point_id`` is a stable hash of everything that
    determines its results, so it names the point across runs, machines and spec edits.
    """

    index: int
    point_id: str
    topology: str
    params: dict[str, Any]
    collective: str
    algorithm: str
    model: str
    options: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sweep:
    """A parsed, validated spec: the expanded points, the sizes and the grid parameter names."""

    name: str
    topology: str
    parameters: tuple[str, ...]
    points: tuple[Point, ...]
    sizes: tuple[int, ...]
    model: str
    source: str = ""


#: A point and the sizes it still lacks; then the same with its rows.
Task = tuple[Point, tuple[int, ...]]
Finished = tuple[Point, tuple[int, ...], list[Row]]


def point_id(topology: str, params: dict[str, Any], collective: str, algorithm: str, options: dict[str, Any],
             model: str, plan: dict[str, Any] | None = None) -> str:
    """The stable id of a point: 16 hex digits of a SHA-256 of its canonical JSON description.

    Examples
    --------
    >>> point_id("ring", {"n": 4}, "allgather", "ring", {}, "flow") == point_id("ring", {"n": 4}, "allgather",
    ...                                                                         "ring", {}, "flow")
    True
    """
    canonical = json.dumps({"topology": topology, "params": params, "collective": collective,
                            "algorithm": algorithm, "options": options, "model": model, "plan": plan or {},
                            "evaluator": EVALUATOR_VERSION},
                           sort_keys=True, separators=(",", ":"), default=list)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def load_spec(path: str | Path) -> Sweep:
    """Read and validate a sweep spec file (YAML or JSON); raises :class:`InputError` naming the field."""
    from synth.topology import read_document

    return parse_spec(read_document(path), source=str(path))


def parse_spec(data: Any, source: str = "") -> Sweep:
    """Validate a parsed spec document and expand its grid into points (see the module docstring)."""
    from synth.units import parse_size

    spec = _validated_spec(data, source)
    builder = _builder_name(spec.topology, source)
    axes = _grid_axes(spec.grid, builder, source)
    kinds = _collective_kinds(spec.collectives, source)
    algorithms = _algorithm_names(spec.algorithms, spec.options, source)
    pairs = _pairs(kinds, algorithms, source)
    sizes = _sizes(spec.sizes, source, parse_size)
    model = spec.model
    _check_model(model, source)
    plan = _plan_fields(spec.plan, source, parse_size)

    total = math.prod(len(values) for values in axes.values()) * len(pairs)
    if total > MAX_POINTS:
        raise LimitError(f"{source}: the spec expands to {total:,} points, more than the limit of {MAX_POINTS:,}")
    from synth import limits

    limits.check("max_sweep_rows", total * len(sizes), f"the sweep {source or ''} ({total:,} points x "
                 f"{len(sizes)} sizes)".replace("  ", " "), hint="use fewer grid values or sizes")
    points: list[Point] = []
    names = list(axes)
    for combination in itertools.product(*axes.values()):
        params = dict(zip(names, combination, strict=True))
        for kind, algorithm in pairs:
            options = dict(spec.options.get(algorithm, {}))
            pid = point_id(builder, params, kind, algorithm, options, model, plan)
            points.append(Point(len(points), pid, builder, params, kind, algorithm, model, options, plan))
    return Sweep(spec.name, builder, tuple(names), tuple(points), tuple(sizes), model, source)


def _validated_spec(data: Any, source: str) -> _SpecModel:
    """The document checked against the spec's fields and types; the first problem (a misspelt key
    before anything else) becomes an :class:`InputError`."""
    if not isinstance(data, dict):
        raise InputError(source, "", f"expected a mapping at the top level, got {type(data).__name__}")
    try:
        return _SpecModel.model_validate(data)
    except ValidationError as error:
        raise invalid(error, source, expected="name, topology, grid, collectives, algorithms, sizes, model, plan, "
                      "options") from None


def _builder_name(topology: str, source: str) -> str:
    """The library builder ``topology`` names (``_`` and ``-`` are interchangeable)."""
    from synth.library import LIBRARY

    spellings = (topology, topology.replace("_", "-"), topology.replace("-", "_"))
    builder = next((name for name in spellings if name in LIBRARY), None)
    if builder is None:
        raise InputError(source, "topology", f"unknown topology builder {topology!r}; expected one of "
                         f"{', '.join(LIBRARY)}")
    return builder


def _grid_axes(grid: dict[str, Any], builder: str, source: str) -> dict[str, list[Any]]:
    """Builder parameter -> its values, in the grid's order: parameters the builder takes, named once, none
    clashing with a result column."""
    from synth.library import LIBRARY

    signature = inspect.signature(LIBRARY[builder].builder).parameters
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
    axes: dict[str, list[Any]] = {}
    for raw_key, raw_value in grid.items():
        key = str(raw_key).strip().replace("-", "_")
        where = f"grid.{raw_key}"
        if key not in signature and not open_ended:
            raise InputError(source, where, f"{builder} has no parameter {key!r}; it takes "
                             f"{', '.join(signature) or 'none'}")
        if key in RESERVED_COLUMNS:
            raise InputError(source, where, f"{key!r} clashes with a result column; rename the parameter")
        if key in axes:
            raise InputError(source, where, f"parameter {key!r} is given twice")
        axes[key] = _axis_values(raw_value, source, where)
    return axes


def _collective_kinds(collectives: list[str], source: str) -> list[str]:
    """The collectives' canonical names, in order; at least one, no duplicates."""
    from synth.collectives import parse_kind

    kinds: list[str] = []
    for index, text in enumerate(collectives):
        kind = parse_kind(text, source, f"collectives.{index}").value
        if kind in kinds:
            raise InputError(source, f"collectives.{index}", f"duplicate collective {kind!r}")
        kinds.append(kind)
    if not kinds:
        raise InputError(source, "collectives", "expected at least one collective")
    return kinds


def _algorithm_names(names: list[str] | None, options: dict[str, dict[str, Any]], source: str) -> list[str]:
    """The listed algorithms (default: every registered one), each registered and listed once; the
    ``options`` must name registered algorithms too."""
    from synth.algorithms import REGISTRY

    if names is None:
        algorithms = list(REGISTRY)
    else:
        algorithms = []
        for index, name in enumerate(names):
            if name not in REGISTRY:
                raise InputError(source, f"algorithms.{index}", f"unknown algorithm {name!r}; expected one of "
                                 f"{', '.join(REGISTRY)}")
            if name in algorithms:
                raise InputError(source, f"algorithms.{index}", f"duplicate algorithm {name!r}")
            algorithms.append(name)
        if not algorithms:
            raise InputError(source, "algorithms", "expected at least one algorithm (or leave the field out)")
    for name in options:
        if name not in REGISTRY:
            raise InputError(source, f"options.{name}", f"unknown algorithm {name!r}")
    return algorithms


def _pairs(kinds: list[str], algorithms: list[str], source: str) -> list[tuple[str, str]]:
    """(collective, algorithm) for every algorithm that supports the collective, collectives outermost;
    every collective needs at least one."""
    from synth.algorithms import REGISTRY

    pairs = [(kind, name) for kind in kinds for name in algorithms
             if kind in {k.value for k in REGISTRY[name].collectives}]
    for kind in kinds:
        if not any(k == kind for k, _ in pairs):
            raise InputError(source, "algorithms", f"no listed algorithm does {kind}")
    return pairs


def _plan_fields(raw: dict[str, Any], source: str, parse_size: Callable[[Any, str], int]) -> dict[str, Any]:
    """The spec's ``plan`` overrides, validated (protocol names, sizes with units, whole numbers)."""
    from synth.plan import MAX_SLICES, MAX_WINDOW, parse_protocol

    fields: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"plan.{key}"
        if key == "protocol":
            protocol = parse_protocol(str(value), where)
            if protocol is not None:
                fields["protocol"] = protocol.value
        elif key == "slice_bytes":
            try:
                fields["slice_bytes"] = parse_size(value, where)
            except InputError as error:
                raise InputError(source, where, error.problem) from None
        elif key in ("slices", "window"):
            upper = MAX_SLICES if key == "slices" else MAX_WINDOW
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
                raise InputError(source, where, f"expected a whole number in 1..{upper}, got {value!r}")
            fields[key] = value
        else:
            raise InputError(source, where, "unknown plan field; expected protocol, slice_bytes, slices or window")
    return fields


def _check_model(model: str, source: str) -> None:
    from synth.evaluate import MODELS

    if model not in MODELS:
        with contextlib.suppress(ImportError):
            import synth.astra  # noqa: F401  (registers the optional astra model)
    if model not in MODELS:
        raise InputError(source, "model", f"unknown evaluator model {model!r}; expected one of "
                         f"{', '.join(sorted(MODELS))}")


def _scalar(value: Any, source: str, where: str) -> Any:
    if isinstance(value, str):
        parts = value.lower().split("x")
        if len(parts) > 1 and all(part.isdigit() for part in parts):  # "4x4", as in name:dims=4x4 specs
            return tuple(int(part) for part in parts)
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(source, where, f"expected a finite number, got {value!r}")
        return value
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise InputError(source, where, f"expected a number, a string, a boolean or a list of ints, got {value!r}")


def _axis_values(value: Any, source: str, where: str) -> list[Any]:
    """The values of one grid axis: a list, a scalar, or a ``{from, to, step|times}`` range."""
    if isinstance(value, dict):
        values = _range(value, source, where)
    elif isinstance(value, list):
        values = [_scalar(item, source, f"{where}.{index}") for index, item in enumerate(value)]
    else:
        values = [_scalar(value, source, where)]
    if not values:
        raise InputError(source, where, "expected at least one value")
    seen: set[str] = set()
    for index, item in enumerate(values):
        token = json.dumps(item, default=list)
        if token in seen:
            raise InputError(source, f"{where}.{index}", f"duplicate value {item!r}")
        seen.add(token)
    return values


def _number(value: Any, source: str, where: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(source, where, f"expected a finite number, got {value!r}")
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


def _range(spec: dict[str, Any], source: str, where: str,
           convert: Callable[[Any, str, str], Fraction] | None = None) -> list[Any]:
    """Expand ``{from, to, step}`` (arithmetic, default step 1) or ``{from, to, times}`` (geometric),
    both inclusive of ``to``; exact arithmetic, so ``{from: 0.1, to: 0.3, step: 0.1}`` has 3 values."""
    convert = convert or _number
    keys = set(spec)
    if not {"from", "to"} <= keys or not keys <= {"from", "to", "step", "times"} or {"step", "times"} <= keys:
        raise InputError(source, where, "expected a list, a value, or a range {from, to, step} or "
                         "{from, to, times}")
    start = convert(spec["from"], source, f"{where}.from")
    stop = convert(spec["to"], source, f"{where}.to")
    integral = all(isinstance(spec[k], int) for k in keys)
    values: list[Fraction] = []
    if "times" in spec:
        factor = _number(spec["times"], source, f"{where}.times")
        if factor <= 1 or start <= 0:
            raise InputError(source, where, "a geometric range needs times > 1 and from > 0")
        # count the values before making them: times 1.0000001 would otherwise mean 10^5 exact fractions of
        # up to 700,000 digits each
        count = math.floor(math.log(float(stop / start)) / math.log(float(factor)) + 1e-9) + 1 if stop >= start else 0
        _check_axis_count(count, source, where, "times")
        if factor.denominator == 1 and start.denominator == 1:
            current = start
            while current <= stop:
                values.append(current)
                current *= factor
        else:  # not exact anyway: 15 significant digits, no digit growth
            for index in range(count + 1):
                value = Fraction(float(f"{float(start) * float(factor) ** index:.15g}"))
                if value > stop:
                    break
                values.append(value)
    else:
        step = _number(spec.get("step", 1), source, f"{where}.step")
        if step <= 0:
            raise InputError(source, f"{where}.step", f"expected a positive step, got {spec.get('step')!r}")
        count = math.floor((stop - start) / step) + 1 if stop >= start else 0
        _check_axis_count(count, source, where, "step")
        current = start
        while current <= stop:
            values.append(current)
            current += step
    if not values:
        raise InputError(source, where, f"empty range: from {spec['from']!r} is above to {spec['to']!r}")
    return [int(v) if integral and v.denominator == 1 else float(v) for v in values]


def _check_axis_count(count: int, source: str, where: str, knob: str) -> None:
    if count > MAX_AXIS_VALUES:
        raise LimitError(f"{source}: {where}: the range would have {count:,} values, more than the limit of "
                         f"{MAX_AXIS_VALUES:,}; use a larger {knob}")


def _sizes(value: Any, source: str, parse_size: Callable[[Any, str], int]) -> list[int]:
    def size_number(item: Any, src: str, where: str) -> Fraction:
        if isinstance(item, bool):
            raise InputError(src, where, f"expected a size such as 1GiB, got {item!r}")
        try:
            return Fraction(parse_size(item if isinstance(item, int) else str(item), where))
        except InputError as error:
            raise InputError(src, where, error.problem) from None

    if isinstance(value, dict):
        sizes = [int(v) for v in _range(value, source, "sizes", convert=size_number)]
    elif isinstance(value, list):
        sizes = [int(size_number(item, source, f"sizes.{index}")) for index, item in enumerate(value)]
    else:
        sizes = [int(size_number(value, source, "sizes"))]
    if not sizes:
        raise InputError(source, "sizes", "expected at least one size")
    if len(set(sizes)) != len(sizes):
        raise InputError(source, "sizes", "duplicate size")
    return sizes


# ------------------------------------------------------------------------------- one point's work
@lru_cache(maxsize=32)
def _build_topology(builder: str, params_json: str) -> Topology:
    from synth.library import LIBRARY

    params = {key: tuple(value) if isinstance(value, list) else value
              for key, value in json.loads(params_json).items()}
    try:
        return LIBRARY[builder].builder(**params)
    except (TypeError, ValueError) as error:
        raise InputError("", "topology", f"{builder} with {params_json}: {error}") from None


@lru_cache(maxsize=256)
def _bound(topology: Topology, collective: str) -> TimeBound | None:
    from synth.collectives import parse_kind
    from synth.compare import lower_bound

    return lower_bound(topology, parse_kind(collective))


def _column_value(value: Any) -> Any:
    """A parameter value as stored in the results: tuples become ``"4x4"``."""
    if isinstance(value, tuple | list):
        return "x".join(str(v) for v in value)
    return value


def _error_text(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, SynthError):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _base_row(point: Point) -> dict[str, Any]:
    row: dict[str, Any] = {"point_id": point.point_id, "topology": point.topology}
    row.update({key: _column_value(value) for key, value in point.params.items()})
    row.update({"num_ranks": None, "collective": point.collective, "algorithm": point.algorithm,
                "model": point.model})
    return row


def failed_rows(point: Point, sizes: Sequence[int], status: str, message: str,
                num_ranks: int | None = None, bound: TimeBound | None = None) -> list[Row]:
    """The rows of a point that produced no schedule: one per size, with the status and the reason."""
    rows = []
    for size in sizes:
        row = _base_row(point)
        row.update({"num_ranks": num_ranks, "size": int(size), "status": status,
                    "bound_algbw_GBps": bound.algbw_GBps(int(size)) if bound else None,
                    "time_s": None, "algbw_GBps": None, "busbw_GBps": None, "percent_of_bound": None,
                    "protocol": None, "slices": None, "slice_bytes": None, "window": None,
                    "congestion_time_s": None, "synthesis_s": None, "error": message})
        rows.append(row)
    return rows


def run_point(point: Point, sizes: Sequence[int]) -> list[Row]:
    """Build the topology, synthesize, verify and evaluate one point at every size: one row per size.

    Never raises for a problem of the point itself: it comes back as rows with status
    ``not-applicable`` or ``error`` and the reason, so one bad point never stops a sweep. The same point
    gives the same rows (but ``synthesis_s``) wherever and however often it runs.
    """
    from synth.algorithms import synthesize
    from synth.evaluate import PlanOptions, evaluate_sizes
    from synth.verify import verify

    try:
        topology = _build_topology(point.topology, json.dumps(point.params, sort_keys=True, default=list))
    except Exception as error:  # a bad parameter value fails this point only
        return failed_rows(point, sizes, ERROR, f"building the topology: {_error_text(error)}")
    from synth import limits

    try:
        limits.check_graph_work(topology.num_ranks, topology.graph.number_of_edges(), "the bound")
        bound = _bound(topology, point.collective)
    except Exception:  # a bound is optional information (and skipped when over its limit)
        bound = None
    from synth.algorithms import REGISTRY

    entry = REGISTRY.get(point.algorithm)
    # a size-sensitive algorithm (nccl, tree, forest, milp) is made for each size, as compare does
    per_size = entry is not None and entry.size_sensitive and "size" not in point.options
    groups = [[int(size)] for size in sizes] if per_size else [[int(size) for size in sizes]]
    evaluations = []
    timings = []
    try:
        for group in groups:
            started = time.perf_counter()
            schedule = synthesize(topology, point.collective, point.algorithm,
                                  **(dict(point.options, size=group[0]) if per_size else point.options))
            synthesis_s = time.perf_counter() - started
            verify(schedule, topology)
            made = evaluate_sizes(schedule, topology, group, model=point.model, options=PlanOptions(**point.plan))
            evaluations.extend(made)
            timings.extend([synthesis_s] * len(made))
    except NotApplicable as reason:
        return failed_rows(point, sizes, NOT_APPLICABLE, _error_text(reason), topology.num_ranks, bound)
    except Exception as error:  # recorded in the results; the sweep goes on
        return failed_rows(point, sizes, ERROR, _error_text(error), topology.num_ranks, bound)
    rows = []
    for result, synthesis_s in zip(evaluations, timings, strict=True):
        row = _base_row(point)
        percent = 100.0 * bound.time(result.size) / result.time_s if bound and result.time_s > 0 else None
        row.update({"num_ranks": topology.num_ranks, "size": result.size, "status": OK,
                    "bound_algbw_GBps": bound.algbw_GBps(result.size) if bound else None,
                    "time_s": result.time_s, "algbw_GBps": result.algbw_GBps,
                    "busbw_GBps": result.busbw_GBps, "percent_of_bound": percent, **result.plan.to_dict(),
                    "congestion_time_s": result.congestion_time_s, "synthesis_s": synthesis_s,
                    "error": None})
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------- results file
def read_results(path: str | Path) -> list[Row]:
    """The rows of a results file as dicts (empty when the file does not exist)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        return []
    try:
        table = pq.read_table(path)
    except Exception as error:
        raise InputError(str(path), "", f"exists but is not a readable Parquet file ({_error_text(error)}); "
                         "choose another output or remove it") from None
    missing = {"point_id", "size", "status"} - set(table.column_names)
    if missing:
        raise InputError(str(path), "", f"exists but is not a synth sweep result (no {', '.join(sorted(missing))} "
                         "column); choose another output")
    import pyarrow as pa

    expected = {"point_id": pa.string(), "size": pa.int64(), "status": pa.string()}
    for name, kind in expected.items():
        if table.schema.field(name).type != kind:
            raise InputError(str(path), name, f"the column has type {table.schema.field(name).type}, not {kind}: not "
                             "a synth sweep result (or a damaged one); choose another output")
    rows = table.to_pylist()
    for index, row in enumerate(rows):
        if row["point_id"] is None or row["size"] is None or row["status"] not in (OK, NOT_APPLICABLE, ERROR):
            raise InputError(str(path), f"row {index}", "has no point_id or size, or an unknown status: a damaged "
                             "sweep result; choose another output")
    return rows


def _column_type(values: Iterable[Any]) -> Any:
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if not present:
        return pa.string()
    if all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pa.float64()
    return pa.string()


def results_table(rows: Sequence[dict[str, Any]], parameters: Sequence[str] = ()) -> Any:
    """A :class:`pyarrow.Table` of result rows with a fixed column order and types.

    Parameter columns come from ``parameters`` first, then any other non-result column found in the rows
    (rows kept from an earlier spec), each typed from its values: bool, int64, float64 or string.
    """
    import pyarrow as pa

    extra = [key for row in rows for key in row if key not in RESERVED_COLUMNS]
    param_columns = list(dict.fromkeys([*parameters, *extra]))
    columns: dict[str, Any] = {}
    fields = []
    for name in [*LEADING_COLUMNS, *param_columns, *TRAILING_COLUMNS]:
        values = [row.get(name) for row in rows]
        if name in _INT_COLUMNS:
            kind = pa.int64()
        elif name in _FLOAT_COLUMNS:
            kind = pa.float64()
        elif name in RESERVED_COLUMNS:
            kind = pa.string()
        else:
            kind = _column_type(values)
        if kind == pa.string():
            values = [None if v is None else str(v) for v in values]
        elif kind == pa.float64():
            values = [None if v is None else float(v) for v in values]
        columns[name] = values
        fields.append(pa.field(name, kind))
    return pa.table(columns, schema=pa.schema(fields))


def write_results(path: str | Path, rows: Sequence[dict[str, Any]], parameters: Sequence[str] = ()) -> None:
    """Write result rows to ``path`` as Parquet, atomically (temp file, fsync, rename)."""
    import pyarrow.parquet as pq

    from synth.fileio import atomic_write_bytes

    buffer = io.BytesIO()
    pq.write_table(results_table(rows, parameters), buffer, compression="zstd")
    atomic_write_bytes(path, buffer.getvalue())


@contextlib.contextmanager
def _output_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside the output, so two sweeps never write one file; the OS drops it when
    the process dies, even on SIGKILL. Stale temp files of killed runs are removed under the lock."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(str(path), "", f"folder {folder} does not exist")
    lock_path = folder / f".{path.name}.lock"
    handle = open(lock_path, "a+b")  # noqa: SIM115  (held for the whole sweep)
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InputError(str(path), "", "another sweep is writing this output right now") from None
        for stale in folder.glob(f".{path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()
        yield
    finally:
        handle.close()
        with contextlib.suppress(OSError):
            lock_path.unlink()


# ------------------------------------------------------------------------------------------ running
@dataclass
class Progress:
    """Counts of a running sweep, passed to the progress callback after every finished point."""

    total: int
    done: int = 0
    failed: int = 0
    not_applicable: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def rate(self) -> float:
        """Points finished per second so far."""
        elapsed = time.perf_counter() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0


@dataclass(frozen=True)
class SweepSummary:
    """What a sweep did: point counts, rows written, where, and how."""

    output: str
    points: int
    already_done: int
    ran: int
    ok: int
    not_applicable: int
    failed: int
    rows: int
    flushes: int
    seconds: float
    runner: str
    workers: int

    def to_dict(self) -> dict[str, Any]:
        """A plain dict for JSON output."""
        return dict(self.__dict__)


def _local_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _SerialRunner:
    """Runs points one after another in this process (Dask's synchronous scheduler, without the graph)."""

    name = "synchronous"
    workers = 1

    def run(self, tasks: Sequence[Task]) -> Iterator[Finished]:
        for point, sizes in tasks:
            yield point, sizes, run_point(point, sizes)

    def close(self) -> None:
        """Nothing to release."""


class _DaskRunner:
    """Runs points as independent Dask tasks on a LocalCluster or an existing scheduler, keeping a bounded
    number in flight so huge grids neither flood the scheduler nor delay the first flush."""

    def __init__(self, scheduler: str | None, workers: int, connect_timeout: float) -> None:
        import logging

        from distributed import Client, LocalCluster

        self.cluster = None
        if scheduler:
            check_scheduler(scheduler, connect_timeout)
            try:
                self.client = Client(scheduler, timeout=f"{connect_timeout}s")
            except Exception as error:  # noqa: BLE001  (any failure to connect is the address's problem)
                raise InputError("--scheduler", "", f"cannot reach a Dask scheduler at {scheduler!r} "
                                 f"({_error_text(error)})") from None
            try:
                self.client.wait_for_workers(1, timeout=connect_timeout)
            except Exception:  # noqa: BLE001
                self.client.close()
                raise InputError("--scheduler", "", f"the Dask scheduler at {scheduler} has no workers "
                                 f"(waited {connect_timeout:g} s)") from None
            self.name = scheduler
        else:
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.ERROR)
            self.client = Client(self.cluster)
            self.name = "local"
        self.workers = sum(self.client.nthreads().values()) if scheduler else workers

    def run(self, tasks: Sequence[Task]) -> Iterator[Finished]:
        from distributed import as_completed

        pending = iter(tasks)
        window = max(8, 4 * self.workers)
        in_flight: dict[str, tuple[Any, Task]] = {}  # future key -> (future, task)
        completed = as_completed()

        def submit(task: Task) -> None:
            future = self.client.submit(run_point, *task, pure=False)
            in_flight[future.key] = (future, task)
            completed.add(future)

        for task in itertools.islice(pending, window):
            submit(task)
        try:
            for future in completed:
                _, (point, sizes) = in_flight.pop(future.key)
                try:
                    rows = future.result()
                except Exception as error:  # a worker died or could not run the task
                    rows = failed_rows(point, sizes, ERROR, f"task failed: {_error_text(error)}")
                future.release()
                following = next(pending, None)
                if following is not None:
                    submit(following)
                yield point, sizes, rows
        finally:
            # Interrupted: drop the unfinished tasks (they are idempotent; a resume runs them again).
            with contextlib.suppress(Exception):
                self.client.cancel([future for future, _ in in_flight.values()])

    def close(self) -> None:
        """Disconnect; shut the local cluster down (an external cluster keeps running)."""
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()


#: Dask address schemes a ``--scheduler`` may use.
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")
#: Most local worker processes a sweep starts.
MAX_WORKERS = 512


def check_scheduler(address: str, timeout: float = 5.0) -> None:
    """Refuse a ``--scheduler`` address that is malformed or does not answer, in seconds rather than after
    Dask's retries; nothing is written before it answers.

    Examples
    --------
    >>> try:
    ...     check_scheduler("bogus://x")
    ... except InputError as error:
    ...     print(error)
    --scheduler: expected an address such as tcp://HOST:8786, got 'bogus://x'
    """
    import socket
    from urllib.parse import urlsplit

    text = str(address).strip()
    try:
        parts = urlsplit(text if "://" in text else f"tcp://{text}")
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in SCHEDULER_SCHEMES or len(text) > 1000 or not text.isprintable() or (
            parts.scheme in ("tcp", "tls", "ws", "wss") and (not parts.hostname or port is None)):
        raise InputError("--scheduler", "", f"expected an address such as tcp://HOST:8786, got {text[:100]!r}")
    if parts.scheme not in ("tcp", "tls", "ws", "wss"):
        return
    try:
        with socket.create_connection((parts.hostname, port), timeout=min(timeout, 10.0)):
            pass
    except OSError as error:
        raise InputError("--scheduler", "", f"cannot reach a Dask scheduler at {text!r} "
                         f"({error.strerror or type(error).__name__})") from None


def run_sweep(sweep: Sweep, output: str | Path, *, scheduler: str | None = None, workers: int | None = None,
              flush_seconds: float = 5.0, flush_points: int = 0, retry_errors: bool = False,
              connect_timeout: float = 30.0, progress: Callable[[Progress], None] | None = None,
              on_start: Callable[[Progress], None] | None = None) -> SweepSummary:
    """Run every point of ``sweep`` not yet in ``output`` and merge the rows into it.

    Parameters
    ----------
    sweep : Sweep
        The parsed spec (:func:`load_spec`).
    output : str or Path
        The Parquet results file; rows already in it are kept and their points skipped (resume).
    scheduler : str, optional
        Address of an existing Dask scheduler (``tcp://HOST:PORT``); default: a local cluster.
    workers : int, optional
        Local worker processes (default: one per core). 1, or a single core, runs in this process.
    flush_seconds, flush_points : float, int
        Rewrite the output when this many seconds have passed or this many points finished since the last
        write (0 disables a trigger); it is always written at the end and on interrupt.
    retry_errors : bool
        Run points whose stored status is ``error`` again.
    connect_timeout : float
        Seconds to wait for an external scheduler and its first worker.
    progress, on_start : callable, optional
        Called with the counts after every finished point, and once before the first one.

    Examples
    --------
    >>> import tempfile
    >>> sweep = parse_spec({"topology": "switch", "grid": {"n": [4, 8]}, "collectives": ["allreduce"],
    ...                     "algorithms": ["ring"], "sizes": ["1MiB"]})
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first = run_sweep(sweep, Path(folder) / "r.parquet", workers=1)
    ...     again = run_sweep(sweep, Path(folder) / "r.parquet", workers=1)
    >>> (first.ran, first.ok, again.ran, again.already_done)
    (2, 2, 0, 2)
    """
    _check_run_options(scheduler, workers, flush_seconds, connect_timeout)
    from synth.fileio import check_output_file

    output = check_output_file(output)
    if scheduler:
        check_scheduler(scheduler, connect_timeout)
    started = time.perf_counter()
    with _output_lock(output):
        existing = read_results(output)
        wanted = {point.point_id for point in sweep.points}
        rerun = {row["point_id"] for row in existing if retry_errors and row.get("status") == ERROR} & wanted
        kept = [row for row in existing if row["point_id"] not in rerun]
        tasks = _missing_tasks(sweep, kept)
        # a file is written once rows change: never an empty one for a run that did not start
        results = _Results(output, sweep, kept, dirty=bool(rerun))
        counts = Progress(total=len(tasks))
        ok = 0
        runner: _SerialRunner | _DaskRunner | None = None
        finished: Iterator[Finished] = iter(())
        cores = workers if workers is not None else _local_cores()
        try:
            if tasks:
                if scheduler is None and min(cores, len(tasks)) <= 1:
                    runner = _SerialRunner()
                else:
                    runner = _DaskRunner(scheduler, min(cores, len(tasks)), connect_timeout)
                finished = runner.run(tasks)
            if on_start:
                on_start(counts)
            ok = _collect(finished, results, counts, progress, flush_seconds, flush_points)
        finally:
            # Done or interrupted: write whatever finished since the last flush, then release the workers.
            with contextlib.suppress(Exception):
                finished.close()  # type: ignore[attr-defined]
            if results.dirty:
                results.flush()
            if runner is not None:
                runner.close()
        return SweepSummary(str(output), len(sweep.points), len(sweep.points) - len(tasks), counts.done, ok,
                            counts.not_applicable, counts.failed, len(results.rows), results.flushes,
                            time.perf_counter() - started, runner.name if runner else "none",
                            runner.workers if runner else 0)


def _check_run_options(scheduler: str | None, workers: int | None, flush_seconds: float,
                       connect_timeout: float) -> None:
    """Refuse ``workers`` with an external scheduler, a worker count out of range, and durations that are
    not a number of seconds from 0 to 10^6."""
    if scheduler and workers is not None:
        raise InputError("--workers", "", "sets the size of the local cluster; an external scheduler "
                         "(--scheduler) brings its own workers")
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise InputError("--workers", "", f"expected 1 to {MAX_WORKERS}, got {workers}")
    for name, value in (("--flush-seconds", flush_seconds), ("--connect-timeout", connect_timeout)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0 \
                or value > 10**6:
            raise InputError(name, "", f"expected a number of seconds from 0 to 1000000, got {value!r}")


def _missing_tasks(sweep: Sweep, kept: list[Row]) -> list[Task]:
    """Each point of the sweep with the sizes it has no row for in ``kept``, in grid order (points with
    every size are left out)."""
    have: dict[str, set[int]] = {}
    for row in kept:
        have.setdefault(row["point_id"], set()).add(int(row["size"]))
    tasks = []
    for point in sweep.points:
        missing = tuple(size for size in sweep.sizes if size not in have.get(point.point_id, set()))
        if missing:
            tasks.append((point, missing))
    return tasks


class _Results:
    """The rows of an output file by (point_id, size), and writing them in file order: the sweep's points
    in grid order, each in size order, then rows of other specs in the order they were found.

    ``dirty`` says rows changed since the last write; ``flushes`` counts the writes.
    """

    def __init__(self, output: Path, sweep: Sweep, kept: list[Row], dirty: bool) -> None:
        self.output = output
        self.parameters = sweep.parameters
        self.rows: dict[tuple[str, int], Row] = {(row["point_id"], int(row["size"])): row for row in kept}
        self.order = {point.point_id: point.index for point in sweep.points}
        self.size_order = {size: index for index, size in enumerate(sweep.sizes)}
        self.others = {pid: index for index, pid in enumerate(dict.fromkeys(r["point_id"] for r in kept if
                                                                          r["point_id"] not in self.order))}
        self.dirty = dirty
        self.flushes = 0

    def sort_key(self, key: tuple[str, int]) -> tuple[int, int, int, int]:
        """Where the row of (point_id, size) goes in the file."""
        pid, size = key
        if pid in self.order:
            return (0, self.order[pid], self.size_order.get(size, len(self.size_order)), size)
        return (1, self.others[pid], 0, size)

    def add(self, point: Point, rows: list[Row]) -> None:
        """Record a finished point's rows (replacing older rows of the same sizes)."""
        for row in rows:
            self.rows[(point.point_id, int(row["size"]))] = row
        self.dirty = True

    def flush(self) -> None:
        """Rewrite the output with every row, atomically."""
        write_results(self.output, [self.rows[key] for key in sorted(self.rows, key=self.sort_key)],
                      self.parameters)
        self.flushes += 1
        self.dirty = False


def _collect(finished: Iterator[Finished], results: _Results, counts: Progress,
             progress: Callable[[Progress], None] | None, flush_seconds: float, flush_points: int) -> int:
    """Record each finished point's rows, count it, report progress, and flush when ``flush_points`` points
    finished or ``flush_seconds`` passed since the last flush (0 disables a trigger). Returns the number of
    points whose status is ok."""
    ok = 0
    last_flush = time.monotonic()
    since_flush = 0
    for point, _sizes, rows in finished:
        results.add(point, rows)
        status = rows[0]["status"] if rows else OK
        counts.done += 1
        counts.failed += status == ERROR
        counts.not_applicable += status == NOT_APPLICABLE
        ok += status == OK
        since_flush += 1
        if progress:
            progress(counts)
        waited = time.monotonic() - last_flush
        if (flush_points and since_flush >= flush_points) or (flush_seconds and waited >= flush_seconds):
            results.flush()
            since_flush = 0
            last_flush = time.monotonic()
    return ok
