"""insw's size choice: the share of the chunks the switches take, and how, fastest at one size.

:func:`synth.algorithms.insw.insw` splits a collective's chunks between in-switch operations and a ring on
an explicit ``switch_share``. Which share is fastest depends on the size: at large sizes the in-switch
allreduce bound's split (:func:`analytic_share`: the fraction f the switches' reduction throughput R can
take while the links carry the rest, f = R T / M for the bound's time T) is the target; at small sizes the
ring's 2(N-1) steps cost more than they save and the switch alone wins. :func:`choose` simulates, with the
flow model (:class:`~synth.choose.Search`), NVLS itself first (share 1, the pair, N chunks: the ``nvls``
schedule, so the choice is never slower than it), then the shares :data:`SHARES` and the analytic one from
the largest down, an allreduce's switch chunks both fused (one reduce op multicast by the switch) and as
NCCL's NVLS pair (reduce, then multicast), each form's descent ending at the first share slower than the one
before (the time is taken to be unimodal in the share), and share 0 (the ring alone); on several boxes with a network switch that reduces, the best share also
with rings of the rail gpus between boxes instead (``network=False``); an allreduce on several boxes, the best
share with double binary trees of the rail gpus between boxes (``between="tree"``), and all in the switches
in B and 2B chunks by rail (B the box size: CollNet's and NVLS-Tree's chunking, fewer chunks than N), between
boxes as the fabric does it and on the trees (NVLS-Tree's own shape); each candidate is cut
off once slower than the best so far, or skipped when its congestion time alone is no faster. Around the best share, shares with denominators up to :data:`REFINE_DENOMINATOR`
are tried while faster; then the two fastest with finer slices (:data:`SLICES`, pinned in
``params["plan"]`` when chosen). The chosen schedule records
the choice in ``params`` (``variant``: the share and form, ``size``, ``modelled_time_s``, ``size_choice`` with every
candidate's time by key and the chosen slice size).

Examples
--------
>>> from synth.library import load_topology
>>> schedule = choose(load_topology("dgx-h100"), Kind.ALLREDUCE, 2**30)
>>> schedule.params["variant"], schedule.params["size_choice"]["analytic_share"]
('share=5/6, fused', '0.8352')
>>> schedule.params["plan"]["slice_bytes"]
32768
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

from synth.algorithms.insw import fusable, insw, parse_share
from synth.algorithms.utils import ProgressFunction
from synth.choose import PHASE, Search, seconds_text
from synth.collectives import Kind
from synth.errors import InputError
from synth.schedule import Schedule
from synth.topology import Topology

__all__ = ["REFINE_CANDIDATES", "REFINE_DENOMINATOR", "SHARES", "SLICES", "SLICE_CANDIDATES", "analytic_share", "choose"]

#: The switch shares every choice tries (besides the analytic one).
SHARES: tuple[Fraction, ...] = (Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(5, 8), Fraction(3, 4),
                                Fraction(7, 8), Fraction(1))


#: The slice sizes tried for the fastest shares (bytes): finer slices let the ring's and the switch's
#: flows share the links more evenly (1 GiB on DGX H100, share 5/6: 379.6 GB/s with the rule's 512 KiB,
#: 390.1 with 64 KiB).
SLICES: tuple[int, ...] = (256 * 1024, 128 * 1024, 64 * 1024, 32 * 1024)
#: How many of the fastest candidates are tried with :data:`SLICES`.
SLICE_CANDIDATES = 2
#: The finest denominator, and how many shares at a time, the refinement tries around the best share.
REFINE_DENOMINATOR = 12
REFINE_CANDIDATES = 4


def analytic_share(topology: Topology, kind: Kind) -> Fraction:
    """The share of an allreduce the switches combine at the in-switch bound's optimum: R times the bound's
    seconds per byte (R the summed ``reduction.throughput``), at most 1; 1 where a switch reduces without a
    throughput limit, and for reduce-scatter and allgather (no split beats the links there).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> float(analytic_share(load_topology("dgx-h100"), Kind.ALLREDUCE))  # 334.5 x 14 / 5607
    0.8352059925093633
    """
    if kind != Kind.ALLREDUCE:
        return Fraction(1)
    total = Fraction(0)
    for switch in topology.switches:
        reduction = topology.reduction(switch)
        if reduction is None:
            continue
        if reduction.throughput is None:
            return Fraction(1)
        total += Fraction(repr(reduction.throughput))
    if total == 0:
        return Fraction(1)
    from synth.bounds import time_bound

    share = total * 10**9 * time_bound(topology, kind).seconds_per_byte
    return min(share, Fraction(1))


def _key(share: Fraction, fused: bool | None) -> str:
    if share == 0:
        return "share=0"
    return f"share={share}" + ("" if fused is None else ", fused" if fused else ", nvls pair")


class _Choice:
    """The candidates tried so far and the fastest, for one size."""

    def __init__(self, topology: Topology, kind: Kind, size: int, search: Search, chunks: int | None) -> None:
        self.topology, self.kind, self.size, self.search, self.chunks = topology, kind, size, search, chunks
        self.best: tuple[float, Schedule, str] | None = None
        self.tried: dict[tuple[Fraction, bool], float] = {}
        self.measured: list[tuple[float, Schedule, str]] = []
        #: the candidates cut by rail (:func:`_by_rail`), kept apart so that they never push a share out of
        #: :meth:`slices`
        self.measured_by_rail: list[tuple[float, Schedule, str]] = []
        #: the candidates with trees between boxes at the descent's chunking, kept apart for the same reason
        self.measured_trees: list[tuple[float, Schedule, str]] = []
        #: the slice size of the best (None: the plan rule's)
        self.slice_bytes: int | None = None

    def try_share(self, share: Fraction, fused: bool, chunks: int | None, network: bool = True,
                  between: str = "ring") -> float:
        """Build and simulate one candidate (cut off at the best time; skipped unsimulated where its
        congestion time alone is no faster than the best); the first is simulated without the work limit.
        Its time, ``inf`` where it was cut off, skipped or not simulated."""
        from synth.evaluate import congestion

        schedule = insw(self.topology, self.kind, chunks=chunks, switch_share=share, fused=fused, network=network,
                        between=between)
        built = parse_share(schedule.params["switch_share"])
        by_rail = chunks is not None and chunks % self.topology.num_ranks != 0
        key = _key(built, schedule.params.get("fused")) + (
            ", rail trees" if between == "tree" else "" if network else ", rail rings") + (
            f", {chunks} chunks by rail" if by_rail else "")
        # the share descent's record holds N-multiple chunkings the default way between boxes only
        network = network and not by_rail and between == "ring"
        if key in self.search.times:
            known = self.search.times[key]
            return math.inf if known is None else known
        first = self.best is None
        if self.best is not None:
            floor = float(congestion(schedule, self.topology).seconds_per_byte * self.size)
            if floor >= self.best[0]:
                self.search.times[key] = None
                if network:
                    self.tried[(built, fused)] = math.inf
                self.search.report(PHASE, f"{key}: slower, its congestion time alone is {seconds_text(floor)}")
                return math.inf
        seconds = self.search.measure(schedule, key, key, cutoff=None if self.best is None else self.best[0],
                                      limited=not first, required=first)
        if seconds is None:
            return math.inf
        if network:
            self.tried[(built, fused)] = seconds
        (self.measured_by_rail if by_rail else self.measured_trees if between == "tree" else self.measured).append(
            (seconds, schedule, key))
        if self.best is None or seconds < self.best[0]:
            self.best = (seconds, schedule, key)
        return seconds

    def descend(self, shares: list[Fraction], fused: bool, chunks: int | None, start: float = math.inf) -> None:
        """The ``shares`` (largest first, 0 left out) in one form while each is faster than the one before
        (``start``: the time of share 1 in this form where known): the time is taken to be unimodal in the
        share, so a candidate slower than its larger neighbour, or cut off, ends the descent."""
        previous = start
        for share in shares:
            if share == 0:
                continue
            seconds = self.try_share(share, fused, chunks)
            if seconds >= previous:
                return
            previous = seconds

    def slices(self, candidates: int = SLICE_CANDIDATES) -> None:
        """The ``candidates`` fastest schedules of the share descent, the fastest cut by rail and the fastest
        with trees between boxes at the descent's chunking, again with each slice size of :data:`SLICES`
        smaller than their chunks (cut off at the best time); the fastest is kept with its slice size."""
        assert self.best is not None
        fastest = sorted(self.measured, key=lambda m: m[0])[:candidates]
        fastest += sorted(self.measured_by_rail, key=lambda m: m[0])[:1]
        fastest += sorted(self.measured_trees, key=lambda m: m[0])[:1]
        for _, schedule, key in fastest:
            for slice_bytes in SLICES:
                if self.size / schedule.chunks <= slice_bytes:
                    break
                label = f"{key}, {slice_bytes // 1024} KiB slices"
                seconds = self.search.measure(schedule, label, label, slice_bytes=slice_bytes, cutoff=self.best[0])
                if seconds is not None and seconds < self.best[0]:
                    self.best, self.slice_bytes = (seconds, schedule, label), slice_bytes

    def refine(self, count: int = REFINE_CANDIDATES) -> None:
        """The shares s/q (q up to :data:`REFINE_DENOMINATOR`) strictly between the best's neighbours among
        the shares tried in its form, nearest to the best first, ``count`` of them, while one is faster;
        nothing where the best is share 0 or 1."""
        while self.best is not None:
            current = self.best
            fused = bool(current[1].params.get("fused", True))
            share = parse_share(current[1].params["switch_share"])
            if share in (0, 1):
                return  # the time is taken to be unimodal in the share: an end beat its one neighbour
            tried = sorted(f for f, form in self.tried if form == fused or f == 0)
            lower = max((f for f in tried if f < share), default=share)
            upper = min((f for f in tried if f > share), default=share)
            between = sorted({Fraction(s, q) for q in range(2, REFINE_DENOMINATOR + 1) for s in range(1, q)
                              if lower < Fraction(s, q) < upper and (Fraction(s, q), fused) not in self.tried},
                             key=lambda f: (abs(f - share), f))
            for candidate in between[:count]:
                self.try_share(candidate, fused, self.chunks)
            if self.best is current:
                return


def _by_rail(choice: _Choice) -> None:
    """On several boxes, the whole allreduce in the switches cut as CollNet and NVLS-Tree cut it: B and 2B
    chunks (B the box size, one rail each) instead of a multiple of N; at small sizes (1 MiB on a 32-gpu
    SHARP superpod) fewer, larger chunks pay the per-chunk latency fewer times. Tried after the share
    descent, so that the descent's candidates (which win at large sizes) are all measured."""
    from synth.algorithms.ring import box_groups

    boxes = box_groups(choice.topology)
    if boxes is None or len(boxes) < 2:
        return
    width = len(boxes[0])
    for chunks in (width, 2 * width):
        if chunks % choice.topology.num_ranks:
            choice.try_share(Fraction(1), True, chunks)
            choice.try_share(Fraction(1), True, chunks, network=False, between="tree")


def choose(topology: Topology, kind: Kind, size: int, *, progress: ProgressFunction | None = None,
           work_limit: int | None = None, chunks: int | None = None, switch_share: Any = None,
           fused: bool | None = None) -> Schedule:
    """insw's schedule for ``size`` bytes: the fastest candidate of the size choice (the module docstring).

    With ``switch_share`` the share is fixed (and ``fused``, default True): that schedule, with ``size``
    recorded and nothing chosen. ``fused`` alone restricts the candidates to that form. ``chunks`` is passed
    on to every candidate; ``work_limit`` caps each simulation's link-sharing work (a candidate past it is
    skipped, except NVLS itself).
    """
    if switch_share is not None:
        schedule = insw(topology, kind, chunks=chunks, switch_share=switch_share, fused=True if fused is None else fused)
        return dataclasses.replace(schedule, params={**schedule.params, "size": size})
    if work_limit is not None and (isinstance(work_limit, bool) or not isinstance(work_limit, int) or work_limit < 0):
        raise InputError("", "work_limit", f"expected a whole number of link-sharing work units, got {work_limit!r}")
    target = analytic_share(topology, kind)
    search = Search(topology, kind, size, progress, work_limit=work_limit)
    choice = _Choice(topology, kind, size, search, chunks)
    two_forms = fusable(topology, kind)
    forms = [True, False] if two_forms and fused is None else [True if fused is None else fused]
    nvls = math.inf
    if two_forms and fused is not True:
        nvls = choice.try_share(Fraction(1), False, topology.num_ranks if chunks is None else chunks)  # nvls itself
    shares = sorted({*SHARES, target.limit_denominator(16)}, reverse=True)
    for form in forms:
        choice.descend([f for f in shares if (f, form) != (1, False)], form, chunks, nvls if form is False else math.inf)
    choice.try_share(Fraction(0), True, chunks)
    choice.refine()
    if choice.best is not None and "in-network" in choice.best[1].params["levels"]:
        # between boxes, the rail rings instead of the network switch's reduction, at the best share
        choice.try_share(parse_share(choice.best[1].params["switch_share"]), True, chunks, network=False)
    if kind == Kind.ALLREDUCE and not two_forms and choice.best is not None:
        # several boxes (an allreduce's two forms differ in one domain only): between them, double binary
        # trees of the rail gpus (NVLS-Tree's shape), at the best share
        choice.try_share(parse_share(choice.best[1].params["switch_share"]), True, chunks, network=False,
                         between="tree")
    if kind == Kind.ALLREDUCE and chunks is None and not two_forms:
        _by_rail(choice)
    choice.slices()
    best = choice.best
    assert best is not None
    seconds, schedule, key = best
    search.done(f"chose {key}: {seconds_text(seconds)}")
    record = {"model": "flow", "analytic_share": f"{float(target):.4g}", "chosen_share": schedule.params["switch_share"],
              "chosen_fused": schedule.params.get("fused"), "chosen_slice_bytes": choice.slice_bytes,
              "time_s": search.times}
    variant = key if choice.slice_bytes is None else key.removesuffix(f", {choice.slice_bytes // 1024} KiB slices")
    extra: dict[str, Any] = {"size": size, "variant": variant, "modelled_time_s": seconds, "size_choice": record}
    if choice.slice_bytes is not None:
        extra["plan"] = {**schedule.params.get("plan", {}), "slice_bytes": choice.slice_bytes}
    return dataclasses.replace(schedule, params={**schedule.params, **extra})
