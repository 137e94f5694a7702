"""Algorithms: functions from (topology, collective, options) to a :class:`~synth.schedule.Schedule`.

Every algorithm is registered here by name and imported lazily, so the CLI, the demo, the tuner and the
catalog all read one registry. An algorithm that does not apply raises
:class:`~synth.errors.NotApplicable` with the reason.

Examples
--------
>>> from synth.library import load_topology
>>> schedule = synthesize(load_topology("ring:n=4"), "allgather", "ring")
>>> schedule.algorithm, len(schedule.transfers)
('ring', 12)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synth.collectives import Kind, parse_kind
from synth.errors import InputError, NotApplicable
from synth.schedule import Schedule
from synth.topology import Topology

AG, RS, AR, A2A, BC, RD = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.ALLTOALL,
                           Kind.BROADCAST, Kind.REDUCE)


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its name, where its function lives, and what it supports."""

    name: str
    target: str
    collectives: frozenset[Kind]
    summary: str

    def load(self) -> Callable[..., Schedule]:
        """Import and return the algorithm's function."""
        module_name, function_name = self.target.split(":")
        return getattr(importlib.import_module(module_name), function_name)


REGISTRY: dict[str, Algorithm] = {}


def register(name: str, target: str, collectives: set[Kind], summary: str) -> None:
    """Add an algorithm to the registry (``target`` is ``"module:function"``)."""
    REGISTRY[name] = Algorithm(name, target, frozenset(collectives), summary)


register("ring", "synth.algorithms.ring:ring", {AG, RS, AR}, "ring over a Hamiltonian cycle (shortest paths otherwise)")
register("direct", "synth.algorithms.direct:direct", {AG, A2A}, "every rank sends straight to every other rank")
register("binomial", "synth.algorithms.binomial:binomial", {BC, RD}, "binomial tree from/to the root")


def available(kind: Kind | None = None) -> list[Algorithm]:
    """Registered algorithms (supporting ``kind`` when given), in registration order."""
    return [a for a in REGISTRY.values() if kind is None or kind in a.collectives]


def synthesize(topology: Topology, collective: Kind | str, algorithm: str, **options: Any) -> Schedule:
    """Run a registered algorithm: ``synthesize(topo, "allreduce", "ring", chunks=16)``.

    Common options: ``chunks`` (C), ``root`` (for broadcast and reduce). Others are algorithm-specific.
    """
    kind = collective if isinstance(collective, Kind) else parse_kind(collective)
    entry = REGISTRY.get(algorithm)
    if entry is None:
        raise InputError("", "algorithm", f"unknown algorithm {algorithm!r}; expected one of {', '.join(REGISTRY)}")
    if kind not in entry.collectives:
        supported = ", ".join(sorted(k.value for k in entry.collectives))
        raise NotApplicable(f"algorithm {algorithm!r} does not do {kind}; it does {supported}")
    return entry.load()(topology, kind, **options)
