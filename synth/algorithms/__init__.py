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
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from synth.collectives import Kind, min_transfers, parse_kind
from synth.errors import InputError, NotApplicable
from synth.schedule import Schedule
from synth.topology import Topology

AG, RS, AR, A2A, BC, RD = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.ALLTOALL,
                           Kind.BROADCAST, Kind.REDUCE)
A2AV = Kind.ALLTOALLV


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its name, where its function lives, and what it supports.

    Attributes
    ----------
    name : str
        The name ``synth generate -a`` takes.
    target : str
        ``"module:function"``, imported on first use.
    collectives : frozenset of Kind
        The collectives it does.
    summary : str
        One line for listings.
    size_sensitive : bool
        The schedule depends on the message size: the function takes a ``size`` option, and
        ``compare`` and ``tune`` synthesize it once per message size (with ``size=``) instead of once
        (default False).
    slow : bool
        A solver run that can take minutes: ``compare`` (and ``tune --skip-slow``) leave it out unless
        asked for by name (default False).
    variants : tuple of dict
        The option sets the tuner tries (``{}`` is the default options); default one, ``({},)``.
    reads_as : {"step", "tree"}
        How ``explain`` shows its schedules by default: step by step, or tree by tree (default "step").
    time_limited : bool
        It takes a ``time_limit_s`` option (a solver's wall-clock budget), which ``compare`` and ``tune``
        pass on from their ``time_limit_s`` (default False).
    """

    name: str
    target: str
    collectives: frozenset[Kind]
    summary: str
    size_sensitive: bool = False
    slow: bool = False
    variants: tuple[Mapping[str, Any], ...] = field(default=({},))
    reads_as: Literal["step", "tree"] = "step"
    time_limited: bool = False

    def load(self) -> Callable[..., Schedule]:
        """Import and return the algorithm's function."""
        module_name, function_name = self.target.split(":")
        return getattr(importlib.import_module(module_name), function_name)

    def takes(self, option: str) -> bool:
        """Whether the algorithm's function takes ``option`` (such as ``shards`` or ``progress``)."""
        import inspect

        return option in inspect.signature(self.load()).parameters


REGISTRY: dict[str, Algorithm] = {}


def register(name: str, target: str, collectives: set[Kind], summary: str, *, size_sensitive: bool = False,
             slow: bool = False, variants: tuple[Mapping[str, Any], ...] = ({},),
             reads_as: Literal["step", "tree"] = "step", time_limited: bool = False) -> None:
    """Add an algorithm to the registry (``target`` is ``"module:function"``; the other fields are
    described in :class:`Algorithm`)."""
    REGISTRY[name] = Algorithm(name, target, frozenset(collectives), summary, size_sensitive, slow, tuple(variants),
                               reads_as, time_limited)


def lookup(name: str, source: str = "", field: str = "algorithm") -> Algorithm:
    """The registered algorithm called ``name``; an :class:`InputError` naming ``source`` and ``field``
    and listing the names when there is none."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise InputError(source, field, f"unknown algorithm {name!r}; expected one of {', '.join(REGISTRY)}")
    return entry


register("nccl", "synth.algorithms.nccl:nccl", {AG, RS, AR, A2A, A2AV, BC, RD},
         "what NCCL 2.23 runs (version=2.16: NCCL 2.16): rail-aware ring channels, its double binary tree, "
         "NVLS, NVLS-Tree and CollNet where the switches reduce, chosen with the protocol by its tuning model "
         "at -O size=...", size_sensitive=True)
register("ring", "synth.algorithms.ring:ring", {AG, RS, AR}, "ring over a Hamiltonian cycle; channels=K|auto: one ring per NIC rail on multi-box systems",
         variants=({}, {"channels": 2}, {"channels": "auto"}))
register("direct", "synth.algorithms.direct:direct", {AG, A2A, A2AV}, "every rank sends straight to every other rank")
register("binomial", "synth.algorithms.binomial:binomial", {BC, RD}, "binomial tree from/to the root", reads_as="tree")
register("forest", "synth.algorithms.forest:forest", {AG, RS, AR, BC, RD}, "bandwidth-optimal spanning trees (ForestColl): meets the exact cut bound; "
         "size=...: the trees per root (1 to the optimum) fastest at that size", size_sensitive=True, reads_as="tree")
register("tree", "synth.algorithms.tree:tree", {AR}, "double binary tree, pipelined, chunks from size=... (shape=binomial: binomial tree)",
         size_sensitive=True, variants=({}, {"shape": "binomial"}), reads_as="tree")
register("rhd", "synth.algorithms.rhd:rhd", {AG, RS, AR}, "recursive halving-doubling (Rabenseifner), any N, rank mapping")
register("bruck", "synth.algorithms.bruck:bruck", {AG, RS, A2A}, "Bruck: ceil(log2 N) rounds of doubling distance")
register("hierarchical", "synth.algorithms.hierarchical:hierarchical", {AG, RS, AR}, "Blue-Connect: rings inside boxes, then across")
register("multidim", "synth.algorithms.multidim:multidim", {AG, RS, AR}, "one ring per dimension in turn (scheduler=themis: balanced)",
         variants=({}, {"scheduler": "themis"}))
register("mcf", "synth.algorithms.mcf:mcf", {A2A, A2AV}, "bandwidth-optimal alltoall(v): max concurrent flow LP (GLOP), "
         "rounded to chunks; size=...: the slice size fastest at that size", size_sensitive=True, time_limited=True)
register("nvls", "synth.algorithms.nvls:nvls", {AG, RS, AR, BC, RD}, "NVLink SHARP as NCCL runs it in one NVLink "
         "domain: each chunk reduced (multimem.ld_reduce) and multicast (multimem.st) inside the switch")
register("nvls_tree", "synth.algorithms.nvls_tree:nvls_tree", {AR}, "NCCL's NVLS-Tree across NVLink boxes: NVLS reduce "
         "in each box, a double binary tree between the boxes over the NICs, NVLS multicast in each box")
register("collnet", "synth.algorithms.collnet:collnet", {AR}, "NCCL's CollNet through IB SHARP switches: in-box NVLS, "
         "direct or chain to one head per NIC, the rail switch reduces and multicasts (shape=auto|nvls|direct|chain)",
         variants=({}, {"shape": "chain"}))
register("insw", "synth.algorithms.insw:insw", {AG, RS, AR}, "a share of the chunks through in-switch ops (NVLS, "
         "SHARP; per box, then between boxes), the rest on a ring over the links' remaining capacity; "
         "switch_share=3/4; size=...: the share fastest at that size", size_sensitive=True)
register("milp", "synth.algorithms.milp:milp", {AG, A2A, AR, RS}, "latency-aware time-indexed schedules (TE-CCL style, CP-SAT), sketches",
         size_sensitive=True, slow=True, time_limited=True)


def reads_as(name: str) -> Literal["step", "tree"]:
    """How schedules of the algorithm called ``name`` read best in ``explain``: its registry entry's
    ``reads_as``, or ``"step"`` for a schedule no registered algorithm made (imported, hand-written)."""
    entry = REGISTRY.get(name)
    return entry.reads_as if entry is not None else "step"


def available(kind: Kind | None = None) -> list[Algorithm]:
    """Registered algorithms (supporting ``kind`` when given), in registration order."""
    return [a for a in REGISTRY.values() if kind is None or kind in a.collectives]


def synthesize(topology: Topology, collective: Kind | str, algorithm: str, **options: Any) -> Schedule:
    """Run a registered algorithm: ``synthesize(topo, "allreduce", "ring", chunks=16)``.

    Common options: ``chunks`` (C), ``root`` (for broadcast and reduce). Others are algorithm-specific.
    """
    kind = collective if isinstance(collective, Kind) else parse_kind(collective)
    entry = lookup(algorithm)
    if kind not in entry.collectives:
        supported = ", ".join(sorted(k.value for k in entry.collectives))
        raise NotApplicable(f"algorithm {algorithm!r} does not do {kind}; it does {supported}")
    function = entry.load()
    accepted = inspect.signature(function).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
        for key in options:
            if key not in accepted or key in ("topology", "kind"):
                names = ", ".join(p for p in accepted if p not in ("topology", "kind"))
                chosen = (f" (choosing {algorithm}'s variant for a size is the selection layer's: synth.synthesize, "
                          "synth.choose.synthesize)" if key == "size" and entry.size_sensitive else "")
                raise InputError("", "option", f"algorithm {algorithm!r} has no option {key!r}; it takes {names}{chosen}")
    _check_limits(topology, kind, algorithm, options.get("chunks"))
    schedule = function(topology, kind, **options)
    from synth import limits

    # the cap holds on what was built (ScheduleBuilder also stops at it while building)
    limits.check_transfers(len(schedule.transfers), f"{algorithm} {kind} on {topology.num_ranks} gpus with "
                           f"{schedule.chunks} chunks")
    return schedule


def _check_limits(topology: Topology, kind: Kind, algorithm: str, chunks: Any) -> None:
    """Refuse up front what no algorithm could build within the limits (see :mod:`synth.limits`): even
    the fewest transfers the collective needs at this chunk count are over the transfer cap."""
    from synth import limits
    from synth.collectives import OWNED

    n = topology.num_ranks
    what = f"{algorithm} {kind} on {n} gpus"
    limits.check_ranks(n, what, hint="use a smaller topology")
    least = chunks if isinstance(chunks, int) and not isinstance(chunks, bool) and chunks > 0 else (
        n if kind in OWNED else 1)
    limits.check_transfers(min_transfers(kind, n, least), f"{what} with {least} chunks")
