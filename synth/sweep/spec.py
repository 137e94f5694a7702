"""Sweep specs: the document validated (pydantic, one error adapter) and its grid expanded into points
(the format is in :mod:`synth.sweep`)."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from synth.errors import InputError, LimitError, excerpt, invalid
from synth.sweep.results import EVALUATOR_VERSION, RESERVED_COLUMNS

if TYPE_CHECKING:
    pass


#: Largest number of points a spec may expand to.
MAX_POINTS = 1_000_000
#: Largest number of values one range may expand to.
MAX_AXIS_VALUES = 100_000


class _SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = ""
    topology: str | list[str]
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
    #: a fixed topology's document (canonical JSON) when it came from a file; None for a library name
    document: str | None = None
    #: True when ``topology`` is a fixed topology (a file or a library spec), False for a builder and its ``params``
    fixed: bool = False


@dataclass(frozen=True)
class Fixed:
    """One fixed topology of a spec's ``topology`` list: its name as written, and its document when it is a
    file (canonical JSON, so a point can be built where the file is not, e.g. on a Dask worker)."""

    name: str
    document: str | None


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


def point_id(topology: str, params: dict[str, Any], collective: str, algorithm: str, options: dict[str, Any],
             model: str, plan: dict[str, Any] | None = None, document: str | None = None) -> str:
    """The stable id of a point: 16 hex digits of a SHA-256 of its canonical JSON description (with a
    topology file's ``document``, so that editing the file gives its points new ids).

    Examples
    --------
    >>> point_id("ring", {"n": 4}, "allgather", "ring", {}, "flow") == point_id("ring", {"n": 4}, "allgather",
    ...                                                                         "ring", {}, "flow")
    True
    """
    described: dict[str, Any] = {"topology": topology, "params": params, "collective": collective,
                                 "algorithm": algorithm, "options": options, "model": model, "plan": plan or {},
                                 "evaluator": EVALUATOR_VERSION}
    if document is not None:
        described["document"] = hashlib.sha256(document.encode("utf-8")).hexdigest()
    canonical = json.dumps(described, sort_keys=True, separators=(",", ":"), default=list)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def load_spec(path: str | Path) -> Sweep:
    """Read and validate a sweep spec file (YAML or JSON); raises :class:`InputError` naming the field."""
    from synth.documents import read_document

    return parse_spec(read_document(path), source=str(path))


def parse_spec(data: Any, source: str = "") -> Sweep:
    """Validate a parsed spec document and expand its grid into points (see the module docstring)."""
    spec = _validated_spec(data, source)
    builder = _builder_of(spec.topology)
    if builder is None:
        if spec.grid:
            if isinstance(spec.topology, str):
                _fixed_topology(spec.topology, source, "topology")  # an unknown name says so first
            raise InputError(source, "grid", "a grid varies a library builder's parameters; the topology "
                             f"{_quoted(spec.topology)} is fixed (a file or a library spec): leave the grid out, "
                             "or name a builder (`synth topologies` lists them)")
        return _fixed_sweep(spec, source)
    axes = _grid_axes(spec.grid, builder, source)
    pairs, sizes, plan = _runs(spec, source, math.prod(len(values) for values in axes.values()), "grid values")
    points: list[Point] = []
    names = list(axes)
    for combination in itertools.product(*axes.values()):
        params = dict(zip(names, combination, strict=True))
        for kind, algorithm in pairs:
            options = dict(spec.options.get(algorithm, {}))
            pid = point_id(builder, params, kind, algorithm, options, spec.model, plan)
            points.append(Point(len(points), pid, builder, params, kind, algorithm, spec.model, options, plan))
    return Sweep(spec.name, builder, tuple(names), tuple(points), tuple(sizes), spec.model, source)


def _runs(spec: _SpecModel, source: str, topologies: int,
          fewer: str) -> tuple[list[tuple[str, str]], list[int], dict[str, Any]]:
    """The spec's (collective, algorithm) pairs, sizes and plan overrides, validated, with the sweep's size
    (``topologies`` x pairs points, times the sizes in rows) checked against the limits before any work."""
    from synth.units import parse_size

    kinds = _collective_kinds(spec.collectives, source)
    algorithms = _algorithm_names(spec.algorithms, spec.options, source)
    pairs = _pairs(kinds, algorithms, source)
    sizes = _sizes(spec.sizes, source, parse_size)
    _check_model(spec.model, source)
    plan = _plan_fields(spec.plan, source, parse_size)
    total = topologies * len(pairs)
    if total > MAX_POINTS:
        raise LimitError(f"{source}: the spec expands to {total:,} points, more than the limit of {MAX_POINTS:,}")
    from synth import limits

    limits.check("max_sweep_rows", total * len(sizes), f"the sweep {source or ''} ({total:,} points x "
                 f"{len(sizes)} sizes)".replace("  ", " "), hint=f"use fewer {fewer} or sizes")
    return pairs, sizes, plan


def _fixed_sweep(spec: _SpecModel, source: str) -> Sweep:
    """The sweep of a spec whose ``topology`` is one fixed topology or a list of them: every topology x
    (collective, algorithm), topologies outermost."""
    names = [spec.topology] if isinstance(spec.topology, str) else list(spec.topology)
    if not names:
        raise InputError(source, "topology", "expected at least one topology")
    pairs, sizes, plan = _runs(spec, source, len(names), "topologies")  # before any topology is read
    if len(set(names)) != len(names):
        raise InputError(source, "topology", "a topology is listed twice")
    fixed = [_fixed_topology(name, source, f"topology.{index}" if isinstance(spec.topology, list) else "topology")
             for index, name in enumerate(names)]
    points: list[Point] = []
    for entry in fixed:
        for kind, algorithm in pairs:
            options = dict(spec.options.get(algorithm, {}))
            pid = point_id(entry.name, {}, kind, algorithm, options, spec.model, plan, entry.document)
            points.append(Point(len(points), pid, entry.name, {}, kind, algorithm, spec.model, options, plan,
                                entry.document, fixed=True))
    return Sweep(spec.name, ", ".join(entry.name for entry in fixed), (), tuple(points), tuple(sizes), spec.model,
                 source)


def _quoted(topology: str | list[str]) -> str:
    """The spec's topology field for a message (at most 200 characters)."""
    return excerpt(repr(topology) if isinstance(topology, str) else ", ".join(topology))


def _fixed_topology(name: str, source: str, where: str) -> Fixed:
    """A fixed topology of the spec, checked now: a ``.json``/``.yaml`` file (a relative path is taken from
    the spec file's folder, then as a shipped topology file) or a library spec such as ``dgx-a100:boxes=2``;
    either may end in ``@achievable``."""
    from synth.documents import read_document
    from synth.library import load_topology
    from synth.library.achievable import split_suffix
    from synth.topology import Topology

    if not name.strip():
        raise InputError(source, where, "expected a topology file or library name, got an empty string")
    try:
        base, _ = split_suffix(name)  # FILE@achievable: the file is found as FILE is
    except InputError as error:
        raise InputError(source, where, error.problem) from None
    path = Path(base)
    if path.suffix.lower() in (".json", ".yaml", ".yml"):
        local = path if path.is_absolute() or not source else Path(source).parent / path
        if local.is_file():
            document = read_document(local)
            Topology.from_dict(document, source=str(local))
            return Fixed(name, json.dumps(document, sort_keys=True, separators=(",", ":")))
        if local.exists():
            raise InputError(source, where, f"{str(local)!r} is not a regular file (a topology file is expected)")
        if not (path.parent == Path(".") and _shipped(path.name)):
            folder = str(Path(source).parent) if source else "."
            raise InputError(source, where, f"no such topology file {str(local)!r} (a relative path is taken from "
                             f"the spec's folder {folder!r})")
    try:
        load_topology(name)
    except InputError as error:
        detail = error.problem if error.field == "topology" or error.source == excerpt(name) else str(error)
        raise InputError(source, where, detail) from None
    return Fixed(name, None)


def _shipped(file_name: str) -> bool:
    """Whether ``file_name`` is a topology file shipped in the library's ``topologies/`` folder."""
    from synth.library.files import TOPOLOGY_DIR

    return (TOPOLOGY_DIR / file_name).is_file()


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


def _builder_of(topology: str | list[str]) -> str | None:
    """The library builder a one-name ``topology`` names (``_`` and ``-`` are interchangeable); None for a list,
    a file or a library spec with parameters."""
    from synth.library import LIBRARY

    if not isinstance(topology, str):
        return None
    spellings = (topology, topology.replace("_", "-"), topology.replace("-", "_"))
    return next((name for name in spellings if name in LIBRARY), None)


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
    from synth.algorithms import REGISTRY, lookup

    if names is None:
        algorithms = list(REGISTRY)
    else:
        algorithms = []
        for index, name in enumerate(names):
            lookup(name, source, f"algorithms.{index}")
            if name in algorithms:
                raise InputError(source, f"algorithms.{index}", f"duplicate algorithm {name!r}")
            algorithms.append(name)
        if not algorithms:
            raise InputError(source, "algorithms", "expected at least one algorithm (or leave the field out)")
    for name in options:
        lookup(name, source, f"options.{name}")
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
        if len(parts) > 1 and all(part.isascii() and part.isdigit() for part in parts):  # "4x4", as in name:dims=4x4 specs
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


