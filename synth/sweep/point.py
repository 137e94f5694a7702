"""One design point's work: build the topology, synthesize, verify and evaluate at every size; a problem
of the point becomes rows with its status and reason, never an exception."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from synth.errors import InputError, NotApplicable
from synth.sweep.results import ERROR, NOT_APPLICABLE, OK, Row, error_text
from synth.sweep.spec import Point
from synth.topology import Topology

if TYPE_CHECKING:
    from synth.bounds import TimeBound


@lru_cache(maxsize=32)
def _build_topology(builder: str, params_json: str) -> Topology:
    from synth.library import LIBRARY

    params = {key: tuple(value) if isinstance(value, list) else value
              for key, value in json.loads(params_json).items()}
    try:
        return LIBRARY[builder].builder(**params)
    except (TypeError, ValueError, InputError) as error:
        raise InputError("", "topology", f"{builder} with {params_json}: {error}") from None


@lru_cache(maxsize=32)
def _fixed_topology(name: str, document: str | None) -> Topology:
    """A fixed topology of a sweep: its file's document (at achievable rates where ``name`` ends in
    ``@achievable``), or the library spec ``name``."""
    if document is not None:
        from synth.library.achievable import achievable, split_suffix

        topology = Topology.from_dict(json.loads(document), source=name)
        network = split_suffix(name)[1]
        return topology if network is None else achievable(topology, network=network)
    from synth.library import load_topology

    return load_topology(name)


def point_topology(point: Point) -> Topology:
    """The topology a point runs on: its builder with its parameters, or its fixed topology."""
    if point.fixed:
        return _fixed_topology(point.topology, point.document)
    return _build_topology(point.topology, json.dumps(point.params, sort_keys=True, default=list))


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
    from synth.choose import synthesize
    from synth.evaluate import PlanOptions, evaluate_sizes
    from synth.verify import verify

    try:
        topology = point_topology(point)
    except Exception as error:  # a bad parameter value fails this point only
        return failed_rows(point, sizes, ERROR, f"building the topology: {error_text(error)}")
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
        return failed_rows(point, sizes, NOT_APPLICABLE, error_text(reason), topology.num_ranks, bound)
    except Exception as error:  # recorded in the results; the sweep goes on
        return failed_rows(point, sizes, ERROR, error_text(error), topology.num_ranks, bound)
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


