"""Bandwidth-optimal alltoall by maximum concurrent multi-commodity flow (``mcf``).

The LP and its cut bound are the topology's alltoall bound (:mod:`synth.cuts.alltoall`); this module turns
the LP's flow into a chunk schedule.

From flow to chunks
-------------------
Each commodity is decomposed into paths per destination. With m chunks per pair (C = N·m chunks per
rank), each pair's m chunks are shared among its paths in proportion to the flow, rounded by a greedy
that keeps the busiest link low. The *rounding loss* is the schedule's congestion time over the LP
optimum, minus one; the smallest m whose loss is within ``max_loss`` (2% by default) is used, and the
loss is reported in ``schedule.params``.

Alltoallv
---------
For a demand (``demand=``: chunk counts w per pair, :mod:`synth.demand`) the LP carries w[s][d]·λ per pair
(:mod:`synth.cuts.alltoall`); each chunk of the demand may be cut into m equal pieces (the demand becomes
m·w, the same bytes per pair), pair (s, d)'s m·w[s][d] pieces are shared among its paths in proportion
to the flow by the same rounding, and the smallest m within ``max_loss`` is used (``chunks_per_pair``
in ``params`` is m).

Examples
--------
>>> from synth.library import load_topology
>>> topo = load_topology("switch:n=4,bandwidth=30")
>>> schedule = mcf(topo, Kind.ALLTOALL)
>>> round(schedule.params["lp_algbw_GBps"], 6), schedule.params["rounding_loss"]
(40.0, 0.0)
"""

from __future__ import annotations

import math
from typing import Any

from synth import limits
from synth.algorithms.utils import alltoallv_collective, make_collective
from synth.collectives import Collective, Kind
from synth.cuts.alltoall import AlltoallFlow, solve_alltoall_lp
from synth.errors import InputError, NotApplicable
from synth.schedule import Schedule, ScheduleBuilder
from synth.topology import Topology

#: Largest number of chunks per ordered pair tried when searching for a small rounding loss.
MAX_CHUNKS_PER_PAIR = 64


def _round_paths(flow: AlltoallFlow, topology: Topology, per_pair: int
                 ) -> tuple[dict[tuple[int, int], list[tuple[tuple[str, ...], int]]], float]:
    """Give each pair ``per_pair`` chunks (times its demand, for alltoallv) spread over its paths; return
    the split and the rounding loss.

    The loss is max over links of (chunks on the link x λ) / (per_pair x bandwidth), minus one: the
    schedule's congestion time over the LP optimum.
    """
    bandwidth = {(u, v): float(d["bandwidth"]) for u, v, d in topology.graph.edges(data=True)}
    load: dict[tuple[str, str], int] = {edge: 0 for edge in bandwidth}
    hops = {}
    assignment: dict[tuple[int, int], list[int]] = {}
    pending: list[tuple[float, tuple[int, int], int]] = []
    rate = flow.pair_rate_GBps
    for pair, options in sorted(flow.paths.items()):
        counts = []
        for index, (path, amount) in enumerate(options):
            hops[(pair, index)] = list(zip(path, path[1:], strict=False))
            share = amount / rate * per_pair
            whole = math.floor(share + 1e-9)
            counts.append(whole)
            for hop in hops[(pair, index)]:
                load[hop] += whole
            if share - whole > 1e-9:
                pending.append((-(share - whole), pair, index))
        assignment[pair] = counts
    # Hand out the remaining chunks: largest fractional share first, each to the pair's path that keeps
    # the busiest link it crosses lowest.
    pending.sort()
    missing = {pair: per_pair * flow.weight(pair) - sum(counts) for pair, counts in assignment.items()}
    fractional = {(pair, index): -negative for negative, pair, index in pending}
    for _, pair, _ in pending:
        if missing[pair] <= 0:
            continue
        candidates = [i for i in range(len(flow.paths[pair])) if fractional.get((pair, i), 0.0) > 0.0]

        def cost(i: int, pair: tuple[int, int] = pair) -> tuple[float, float, int]:
            worst = max((load[hop] + 1) / bandwidth[hop] for hop in hops[(pair, i)])
            return (worst, -fractional[(pair, i)], i)

        chosen = min(candidates, key=cost)
        assignment[pair][chosen] += 1
        fractional[(pair, chosen)] = 0.0
        for hop in hops[(pair, chosen)]:
            load[hop] += 1
        missing[pair] -= 1
    for pair, count in missing.items():  # floating-point slack: give any remainder to the best path
        def after_one_more(index: int, pair: tuple[int, int] = pair) -> tuple[float, int]:
            return max((load[h] + 1) / bandwidth[h] for h in hops[(pair, index)]), index

        for _ in range(count):
            chosen = min(range(len(flow.paths[pair])), key=after_one_more)
            assignment[pair][chosen] += 1
            for hop in hops[(pair, chosen)]:
                load[hop] += 1
    _rebalance(flow, assignment, hops, load, bandwidth)
    worst = max(load[hop] / bandwidth[hop] for hop in load if load[hop])
    loss = worst * rate / per_pair - 1.0
    loss = 0.0 if loss < 1e-9 else loss  # solver round-off, not rounding
    split = {pair: [(flow.paths[pair][i][0], count) for i, count in enumerate(counts) if count]
             for pair, counts in assignment.items()}
    return split, loss


def _rebalance(flow: AlltoallFlow, assignment: dict[tuple[int, int], list[int]],
               hops: dict[tuple[tuple[int, int], int], list[tuple[str, str]]],
               load: dict[tuple[str, str], int], bandwidth: dict[tuple[str, str], float],
               rounds: int = 200) -> None:
    """Local search: move single chunks off the busiest link to another path of the same pair while that
    lowers the busiest utilization (deterministic, bounded)."""
    through: dict[tuple[str, str], list[tuple[tuple[int, int], int]]] = {}
    for (pair, index), path_hops in hops.items():
        for hop in path_hops:
            through.setdefault(hop, []).append((pair, index))
    for _ in range(rounds):
        utilization = {hop: load[hop] / bandwidth[hop] for hop in load}
        worst_hop = max(sorted(utilization), key=utilization.__getitem__)
        worst = utilization[worst_hop]
        moved = False
        for pair, index in through.get(worst_hop, ()):
            if assignment[pair][index] == 0:
                continue
            for other in range(len(flow.paths[pair])):
                if other == index or worst_hop in hops[(pair, other)]:
                    continue
                after = max((load[h] + 1) / bandwidth[h] for h in hops[(pair, other)]
                            if h not in hops[(pair, index)]) if any(
                    h not in hops[(pair, index)] for h in hops[(pair, other)]) else 0.0
                if after < worst - 1e-12:
                    assignment[pair][index] -= 1
                    assignment[pair][other] += 1
                    for h in hops[(pair, index)]:
                        load[h] -= 1
                    for h in hops[(pair, other)]:
                        load[h] += 1
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


# ------------------------------------------------------------------------------------ algorithm
def mcf(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
        relays: bool = True, max_loss: float = 0.02, max_chunks_per_pair: int = MAX_CHUNKS_PER_PAIR,
        time_limit_s: float | None = None, demand: Any = None) -> Schedule:
    """Bandwidth-optimal alltoall or alltoallv from the maximum concurrent flow LP (see the module notes).

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``alltoall`` or ``alltoallv``.
    chunks : int, optional
        Chunks per rank C (a multiple of N); alltoallv: the demand rounded to this many chunks in all, no
        further cutting. Default: the smallest N·m whose rounding loss is within
        ``max_loss``, m up to ``max_chunks_per_pair``.
    relays : bool
        Allow gpus to relay other gpus' data (store-and-forward); on by default because it gives the
        true optimum.
    max_loss : float
        Largest accepted rounding loss (schedule congestion time over the LP optimum, minus one).
    max_chunks_per_pair : int
        Upper end of the search for m.
    time_limit_s : float, optional
        Wall-clock limit per LP solve.
    demand : optional
        alltoallv only: a Demand, its chunks or a chunk-count matrix (default 1 chunk per pair); the search
        for m then cuts every chunk into m pieces.

    Returns
    -------
    Schedule
        ``params`` holds ``lp_algbw_GBps`` (the optimum), ``schedule_algbw_GBps`` (its congestion-only
        algbw), ``rounding_loss``, ``chunks``, ``relays``, ``paths`` and the LP size.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = mcf(load_topology("ring:n=4"), Kind.ALLTOALL)
    >>> s.params["rounding_loss"] <= 0.02, s.chunks % 4
    (True, 0)
    """
    if kind not in (Kind.ALLTOALL, Kind.ALLTOALLV):
        raise NotApplicable(f"mcf does alltoall and alltoallv only, not {kind}")
    if demand is not None and kind != Kind.ALLTOALLV:
        raise NotApplicable(f"a demand is for alltoallv, not {kind}")
    n = topology.num_ranks
    if not 0 <= max_loss < 1:
        raise InputError("", "max_loss", f"expected a fraction in [0, 1), got {max_loss!r}")
    if isinstance(max_chunks_per_pair, bool) or not isinstance(max_chunks_per_pair, int) or max_chunks_per_pair < 1:
        raise InputError("", "max_chunks_per_pair", f"expected a positive integer, got {max_chunks_per_pair!r}")
    base = None
    if kind == Kind.ALLTOALLV:
        coll = alltoallv_collective(topology, demand, chunks, root)
        base = coll.demand
    else:
        coll = make_collective(topology, kind, chunks, root, default_chunks=n)  # validates chunks and root
    flow = solve_alltoall_lp(topology, relays=bool(relays), time_limit_s=time_limit_s, demand=base)

    if chunks is not None:
        per_pair = coll.chunks // n if base is None else 1  # alltoallv: chunks=K already rounded the demand
        split, loss = _round_paths(flow, topology, per_pair)
    else:
        best: tuple[float, int, Any] | None = None
        # alltoallv: cut chunks only while the schedule stays within a quarter of the transfer limit
        cap = max_chunks_per_pair if base is None else max(1, min(
            max_chunks_per_pair, int(limits.limit_value("max_transfers")) // (4 * coll.chunks)))
        for per_pair in range(1, cap + 1):
            split, loss = _round_paths(flow, topology, per_pair)
            if best is None or loss < best[0] - 1e-12:
                best = (loss, per_pair, split)
            if loss <= max_loss:
                break
        assert best is not None
        loss, per_pair, split = best
        if base is not None:
            coll = Collective.alltoallv([[per_pair * count for count in row] for row in base])
        else:
            coll = make_collective(topology, kind, n * per_pair, root)

    segments_total = sum(count * _segments_count(topology, path) for options in split.values()
                         for path, count in options)
    limits.check_transfers(segments_total, f"mcf {kind} on {topology.name} with {coll.chunks} chunks"
                           f"{'' if base is not None else ' per rank'}")
    params = {
        "chunks": coll.chunks,
        "chunks_per_pair": per_pair,
        "lp_algbw_GBps": flow.algbw_GBps,
        "schedule_algbw_GBps": flow.algbw_GBps / (1 + loss),
        "rounding_loss": loss,
        "max_loss": max_loss,
        "relays": flow.relays,
        "paths": sum(len(options) for options in split.values()),
        "lp_variables": flow.variables,
        "lp_constraints": flow.constraints,
        "solver": "GLOP",
    }
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "mcf", params)
    rank_of = topology.rank_of
    for (src, dst), options in sorted(split.items()):
        ids = iter(coll.pair_chunks(src, dst) if base is not None else
                   range(src * coll.chunks + dst * per_pair, src * coll.chunks + (dst + 1) * per_pair))
        for path, count in options:
            legs = [(rank_of[piece[0]], rank_of[piece[-1]], piece) for piece in _split_at_relays(topology, path)]
            for _ in range(count):
                builder.add_chain(next(ids), legs)
    return builder.build()


def _split_at_relays(topology: Topology, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Cut a node path at the intermediate gpus that do not forward: each piece is one store-and-forward
    transfer (the relay holds the chunk in a data cell it has no other use for)."""
    blocked = topology.non_forwarding_gpus
    pieces = []
    start = 0
    for index in range(1, len(path)):
        if path[index] in blocked or index == len(path) - 1:
            pieces.append(path[start:index + 1])
            start = index
    return pieces


def _segments_count(topology: Topology, path: tuple[str, ...]) -> int:
    blocked = topology.non_forwarding_gpus
    return 1 + sum(1 for node in path[1:-1] if node in blocked)
