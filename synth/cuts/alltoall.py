"""The alltoall bandwidth bound: maximum concurrent multi-commodity flow (an LP on GLOP) and the exact
cut bound beside it. A property of the topology; :mod:`synth.algorithms.mcf` rounds the LP's flow into a
schedule.

The LP
------
Every ordered pair of gpus (s, d) must move n/N bytes. The *maximum concurrent flow* finds the largest
rate λ (GB/s) that every pair can sustain at once on the real topology, switches included; the
bandwidth-optimal alltoall time is then (n/N)/λ and its algbw N·λ.

It is written arc-flow and *aggregated by source*: commodity s is the flow of everything gpu s sends,
so there are N commodities instead of N², each with a flow variable per directed link (a switch that
joins just two nodes in series, such as a NIC between its gpu and a rail switch, is folded into one link
each way of the smaller capacity: the same optimum with fewer variables; paths come back through it)::

    maximize λ
    subject to  Σ_s f_s(e) <= b(e)                         for every link e (GB/s)
                out_s(s) - in_s(s) = (N-1)·λ               the source emits one λ per destination
                in_s(v) - out_s(v) = λ                     every other gpu v keeps λ
                in_s(w) - out_s(w) = 0                     switches store nothing
                f >= 0

Gpus as relays
--------------
The constraint at a gpu v ≠ s lets v forward what it does not keep, which is store-and-forward relaying
(cut-through where the topology marks v as forwarding).
This is what gives the *true* optimum of the bandwidth model: any schedule, relayed or not, is a flow of
this form, so forbidding relays (``relays=False``: gpus are pure endpoints, flow may leave a gpu only
from its own commodity) can only lower λ, and on switchless topologies such as DGX-1 it leaves pairs
without any route at all. Relaying is therefore on by default. A second LP (``cleanup``) fixes λ at its
optimum and minimizes the total hop-bytes, which removes flow cycles and detours, so a relay or an
extra hop appears only where it buys throughput. A relayed path becomes separate transfers in the
schedule: a copy to the relay gpu (which holds the chunk in a spare cell), then onwards with a dep.

Any demand (alltoallv)
----------------------
With a demand matrix w (chunk counts, :mod:`synth.demand`), pair (s, d) must carry w[s][d]·λ instead of
λ: the source emits Σ_d w[s][d]·λ and gpu d keeps w[s][d]·λ; λ is then the rate per chunk of the
demand, and with the alltoallv size convention (n = the whole demand, a chunk n/C bytes, C = Σ w) the
optimal time is (n/C)/λ and the algbw C·λ. Uniform alltoall is w = 1 with algbw N·λ (its n is one
rank's buffer). The cut bound generalizes the same way: algbw <= C·B+(S) / w(S → outside).

The cut bound
-------------
For any set S of nodes holding k of the N gpus, k(N-k) pairs must cross the links leaving S, so
T >= k(N-k)(n/N)/B+(S): algbw <= N·B+(S)/(k(N-k)). :func:`alltoall_cut_bound` evaluates it exactly
(fractions) over candidate gpu sets (every subset for N <= 12; otherwise singletons, boxes and unions of
boxes, dimension slices, index halves and the cuts the LP saturates), each with the switch placement
that minimizes B+(S) (a minimum cut). The LP optimum is never above the cut bound, and equals it on
topologies such as one switch or 2 x NDv2, where the bottleneck is a cut.

Examples
--------
>>> from synth.library import load_topology
>>> bound = alltoall_bound(load_topology("switch:n=4,bandwidth=30"))
>>> round(bound.lp_algbw_GBps, 6)
40.0
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import networkx as nx

from synth import limits
from synth.errors import InfeasibleError, LimitError, NotApplicable, SynthError
from synth.routing import chain_paths, neighbors
from synth.topology import Topology

#: Gpu counts up to which the cut bound tries every subset of gpus.
EXHAUSTIVE_CUT_RANKS = 12


@dataclass(frozen=True)
class AlltoallFlow:
    """An optimal alltoall flow: the rate every pair sustains and each pair's paths.

    Attributes
    ----------
    pair_rate_GBps : float
        λ, the rate (GB/s) every ordered pair of gpus sustains at once.
    algbw_GBps : float
        N·λ: the algbw of the bandwidth-optimal alltoall (n / optimal time).
    paths : dict
        ``(src_rank, dst_rank) -> ((node path, rate GB/s), ...)``; the rates of a pair sum to λ.
    link_flow : dict
        Total flow (GB/s) on each directed link.
    relays : bool
        Whether gpus were allowed to forward other gpus' data.
    variables, constraints : int
        Size of the LP.
    solve_s : float
        Wall time of the LP solves (not part of any schedule, so schedules stay deterministic).
    """

    pair_rate_GBps: float
    algbw_GBps: float
    paths: dict[tuple[int, int], tuple[tuple[tuple[str, ...], float], ...]]
    link_flow: dict[tuple[str, str], float]
    relays: bool
    variables: int
    constraints: int
    solve_s: float = field(compare=False)
    #: alltoallv: the chunk-count matrix the flow is for (pair (s, d) carries demand[s][d]·λ); None: alltoall.
    demand: tuple[tuple[int, ...], ...] | None = None

    def weight(self, pair: tuple[int, int]) -> int:
        """The demand of ``pair`` in chunks (1 for alltoall)."""
        return 1 if self.demand is None else self.demand[pair[0]][pair[1]]

    def time(self, size: int) -> float:
        """Optimal alltoall time in seconds for ``size`` bytes per rank (nccl-tests n)."""
        return size / (self.algbw_GBps * 1e9)


@dataclass(frozen=True)
class CutBound:
    """The best alltoall cut bound found: algbw <= N·B+(S)/(k(N-k)), exact.

    Attributes
    ----------
    algbw_GBps : Fraction
        The bound on algbw in GB/s.
    gpus : tuple of int
        The ranks inside the bottleneck cut S.
    egress_GBps : Fraction
        B+(S), the capacity leaving S (with the best switch placement).
    candidates : int
        How many gpu sets were tried.
    exhaustive : bool
        True when every subset of gpus was tried (so this is the best cut bound there is).
    """

    algbw_GBps: Fraction
    gpus: tuple[int, ...]
    egress_GBps: Fraction
    candidates: int
    exhaustive: bool


@dataclass(frozen=True)
class AlltoallBound:
    """Alltoall bounds on one topology: the LP optimum beside the best cut bound.

    ``lp_algbw_GBps`` is the exact optimum of the bandwidth model (what ``mcf`` reaches up to rounding);
    ``cut.algbw_GBps`` is a simpler necessary bound, never below it.
    """

    topology: str
    num_ranks: int
    lp_algbw_GBps: float
    cut: CutBound
    relays: bool
    solve_s: float = field(compare=False)
    #: alltoallv: the chunk-count matrix bounded (algbw with n = the whole demand); None: alltoall.
    demand: tuple[tuple[int, ...], ...] | None = None

    @property
    def cut_algbw_GBps(self) -> float:
        """The cut bound as a float (GB/s)."""
        return float(self.cut.algbw_GBps)

    @property
    def gap(self) -> float:
        """How far the cut bound lies above the LP optimum, relative (0 when they coincide)."""
        gap = self.cut_algbw_GBps / self.lp_algbw_GBps - 1.0
        return 0.0 if abs(gap) < 1e-9 else gap  # solver round-off

    def time(self, size: int) -> float:
        """Optimal alltoall time in seconds for ``size`` bytes per rank."""
        return size / (self.lp_algbw_GBps * 1e9)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict for JSON output."""
        return {"topology": self.topology, "collective": "alltoall" if self.demand is None else "alltoallv",
                "num_ranks": self.num_ranks,
                "lp_algbw_GBps": self.lp_algbw_GBps, "cut_algbw_GBps": self.cut_algbw_GBps,
                "cut_algbw_exact": str(self.cut.algbw_GBps), "cut_gpus": list(self.cut.gpus),
                "cut_egress_GBps": float(self.cut.egress_GBps), "cut_exhaustive": self.cut.exhaustive,
                "cut_candidates": self.cut.candidates, "gap": self.gap, "relays": self.relays}


# ------------------------------------------------------------------------------------------- LP
def solve_alltoall_lp(topology: Topology, relays: bool = True, cleanup: bool = True,
                      time_limit_s: float | None = None,
                      demand: tuple[tuple[int, ...], ...] | None = None) -> AlltoallFlow:
    """Solve the maximum concurrent flow for the alltoall demand with GLOP and decompose it into paths.

    Parameters
    ----------
    topology : Topology
    relays : bool
        Let gpus forward other gpus' data (store-and-forward); see the module notes.
    cleanup : bool
        Re-solve at the optimal λ minimizing hop-bytes (shorter, cycle-free paths).
    time_limit_s : float, optional
        Wall-clock limit for each LP solve (default: :func:`synth.limits.solver_time_limit`).
    demand : tuple of tuples of int, optional
        alltoallv: chunks per ordered pair (see the module notes); None is alltoall (1 per pair).

    Returns
    -------
    AlltoallFlow

    Raises
    ------
    InfeasibleError
        When some pair has no route (only possible with ``relays=False``).
    LimitError
        When the LP is too large or the solver runs out of time.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> round(solve_alltoall_lp(load_topology("ring:n=4,bandwidth=50")).algbw_GBps, 6)
    100.0
    """
    from ortools.linear_solver import pywraplp

    started = time.perf_counter()
    n = topology.num_ranks
    network = _SeriesContracted(topology)
    edges = network.edges
    weights = _weights(n, demand)
    if not relays:
        _check_switch_reachability(topology, weights)
    usable = _usable_links(topology, edges, relays, weights)
    num_variables = 1 + sum(len(c) for c in usable)
    num_constraints = len(edges) + n * len(network.nodes)
    limits.check_milp(num_variables, num_constraints, f"the alltoall LP on {topology.name}",
                      hint="use a smaller topology")
    seconds = limits.solver_time_limit(time_limit_s)

    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - GLOP ships with every OR-Tools build
        raise NotApplicable("OR-Tools GLOP is not available")
    solver.SetTimeLimit(int(seconds * 1000))
    rate, flow = _concurrent_flow_lp(solver, topology, network, usable, weights)
    solver.Maximize(rate)
    _solve(solver, topology, "maximum concurrent flow")
    best = rate.solution_value()
    if best <= 0:
        raise InfeasibleError(f"alltoall on {topology.name}: some pair of gpus has no route "
                              f"({'with' if relays else 'without'} gpu relays)")
    if cleanup:
        _minimize_hop_bytes(solver, topology, rate, flow, best, network.hops)

    values = [{index: variable.solution_value() for index, variable in flow[s].items()} for s in range(n)]
    link_flow = dict.fromkeys(topology.graph.edges, 0.0)
    for index in range(len(edges)):
        amount = sum(values[s].get(index, 0.0) for s in range(n))
        for hop in network.original_hops(index):
            link_flow[hop] += amount
    paths: dict[tuple[int, int], tuple[tuple[tuple[str, ...], float], ...]] = {}
    for s in range(n):
        decomposed = _decompose(topology, s, values[s], edges, best, weights[s])
        paths.update({pair: tuple((network.expand(path), amount) for path, amount in options)
                      for pair, options in decomposed.items()})
    factor = n if demand is None else sum(map(sum, weights))
    return AlltoallFlow(best, factor * best, paths, link_flow, relays, num_variables, num_constraints,
                        time.perf_counter() - started, demand)


def _weights(n: int, demand: tuple[tuple[int, ...], ...] | None) -> list[list[int]]:
    """The demand per ordered pair: the matrix, or 1 off the diagonal for alltoall."""
    if demand is None:
        return [[0 if s == d else 1 for d in range(n)] for s in range(n)]
    if len(demand) != n or any(len(row) != n for row in demand):
        raise NotApplicable(f"the demand is a {len(demand)}-rank matrix, the topology has {n} gpus")
    return [list(row) for row in demand]


def _usable_links(topology: Topology, edges: list[tuple[str, str]], relays: bool,
                  weights: list[list[int]]) -> list[list[int]]:
    """Per commodity (source rank) s, the links its flow may use: those that do not enter s, neither enter nor
    leave a gpu outside the collective's ranks (a process group's non-members) unless it forwards, and
    (without relays) do not leave another gpu unless that gpu forwards; none for a source that sends nothing."""
    outside = {node for node in topology.graph if topology.is_gpu(node) and node not in topology.rank_of
               and not topology.forwards(node)}
    if outside:
        edges_kept = {index for index, (u, v) in enumerate(edges) if u not in outside and v not in outside}
    usable: list[list[int]] = []
    for s in range(topology.num_ranks):
        source = topology.gpus[s]
        chosen: list[int] = []
        if not any(weights[s]):
            usable.append(chosen)
            continue
        for index, (u, v) in enumerate(edges):
            if v == source or (outside and index not in edges_kept):
                continue
            if not relays and u in topology.rank_of and u != source and not topology.forwards(u):
                continue
            chosen.append(index)
        usable.append(chosen)
    return usable


class _SeriesContracted:
    """The network the LP is written on: the topology with every switch that joins exactly two nodes in
    series (a NIC between its gpu and the network switch) replaced by one link each way of the smaller
    capacity. A flow through such a switch can only go on to its other neighbour, so the LP keeps its
    optimum and its paths, with a third fewer variables on rail-optimised clusters (8 x DGX A100: 24,449
    to 16,257, twice as fast); paths and link flows are mapped back to the topology's links."""

    def __init__(self, topology: Topology) -> None:
        graph = topology.graph
        inner: dict[str, tuple[str, str]] = {}
        for switch in topology.switches:
            around = set(graph.successors(switch))
            if len(around) != 2 or set(graph.predecessors(switch)) != around:
                continue
            a, b = sorted(around)
            if graph.has_edge(a, b) or graph.has_edge(b, a) or a in inner or b in inner or (a, b) in inner.values():
                continue  # a parallel link or switch, or a chain of such switches: kept as they are
            inner[switch] = (a, b)
        self.nodes = [node for node in graph.nodes if node not in inner]
        self.edges: list[tuple[str, str]] = [(u, v) for u, v in graph.edges if u not in inner and v not in inner]
        self.capacity = [float(graph.edges[u, v]["bandwidth"]) for u, v in self.edges]
        #: the switch inside each contracted link, by link
        self.through: dict[tuple[str, str], str] = {}
        for switch, (a, b) in inner.items():
            for u, v in ((a, b), (b, a)):
                self.edges.append((u, v))
                self.capacity.append(min(float(graph.edges[u, switch]["bandwidth"]),
                                         float(graph.edges[switch, v]["bandwidth"])))
                self.through[(u, v)] = switch
        #: the topology's links each LP link stands for (its hop count is its weight in hop-bytes)
        self.hops = [2 if edge in self.through else 1 for edge in self.edges]

    def original_hops(self, index: int) -> list[tuple[str, str]]:
        """The topology's links that LP link ``index`` stands for."""
        u, v = self.edges[index]
        switch = self.through.get((u, v))
        return [(u, v)] if switch is None else [(u, switch), (switch, v)]

    def expand(self, path: tuple[str, ...]) -> tuple[str, ...]:
        """A node path on the LP's network as a path on the topology."""
        if not self.through:
            return path
        nodes = [path[0]]
        for u, v in zip(path, path[1:], strict=False):
            switch = self.through.get((u, v))
            if switch is not None:
                nodes.append(switch)
            nodes.append(v)
        return tuple(nodes)


def _concurrent_flow_lp(solver: Any, topology: Topology, network: _SeriesContracted,
                        usable: list[list[int]], weights: list[list[int]]) -> tuple[Any, list[dict[int, Any]]]:
    """The maximum concurrent flow LP's variables and constraints: the rate λ, and per commodity s the
    flow on each usable link; link capacities, and flow balance (the source emits Σ_d w[s][d]·λ, every
    other gpu d absorbs w[s][d]·λ, switches and relays conserve). Returns λ and the flow variables
    (commodity -> link -> var)."""
    n = topology.num_ranks
    edges = network.edges
    rate = solver.NumVar(0.0, solver.infinity(), "lambda")
    flow: list[dict[int, Any]] = []
    for s in range(n):
        flow.append({e: solver.NumVar(0.0, solver.infinity(), "") for e in usable[s]})
    for index in range(len(edges)):
        capacity = solver.Constraint(-solver.infinity(), network.capacity[index])
        for s in range(n):
            variable = flow[s].get(index)
            if variable is not None:
                capacity.SetCoefficient(variable, 1.0)
    out_edges: dict[str, list[int]] = {node: [] for node in network.nodes}
    in_edges: dict[str, list[int]] = {node: [] for node in network.nodes}
    for index, (u, v) in enumerate(edges):
        out_edges[u].append(index)
        in_edges[v].append(index)
    for s in range(n):
        if not usable[s]:
            continue
        source = topology.gpus[s]
        for node in network.nodes:
            balance = solver.Constraint(0.0, 0.0)
            for index in in_edges[node]:
                if index in flow[s]:
                    balance.SetCoefficient(flow[s][index], 1.0)
            for index in out_edges[node]:
                if index in flow[s]:
                    balance.SetCoefficient(flow[s][index], -1.0)
            if node == source:
                balance.SetCoefficient(rate, float(sum(weights[s])))            # in - out + Σ w λ = 0
            elif node in topology.rank_of:
                balance.SetCoefficient(rate, -float(weights[s][topology.rank_of[node]]))  # in - out - w λ = 0
    return rate, flow


def _minimize_hop_bytes(solver: Any, topology: Topology, rate: Any, flow: list[dict[int, Any]],
                        best: float, hops: list[int]) -> None:
    """Re-solve keeping λ at its optimum (to solver precision) with the fewest hop-bytes among optimal flows
    (``hops``: the topology links each LP link stands for).

    GLOP can call the re-solve infeasible when λ's bound is within its own tolerance of the optimum (seen on
    a 2-gpu topology with a cycle of switches at 1e-9), so the bound is loosened once to 1e-7; should that
    fail too, the maximum concurrent flow is solved again and kept as it is.
    """
    from ortools.linear_solver import pywraplp

    objective = solver.Objective()
    objective.Clear()
    for commodity in flow:
        for index, variable in commodity.items():
            objective.SetCoefficient(variable, float(hops[index]))
    objective.SetMinimization()
    for slack in (1e-9, 1e-7):
        rate.SetLb(best * (1 - slack))
        status = solver.Solve()
        if status != pywraplp.Solver.INFEASIBLE:
            _check(status, topology, "hop-byte cleanup")
            return
    rate.SetLb(0.0)
    objective.Clear()
    solver.Maximize(rate)
    _solve(solver, topology, "maximum concurrent flow")


def _solve(solver: Any, topology: Topology, what: str) -> None:
    _check(solver.Solve(), topology, what)


def _check(status: int, topology: Topology, what: str) -> None:
    from ortools.linear_solver import pywraplp

    if status == pywraplp.Solver.OPTIMAL:
        return
    if status == pywraplp.Solver.INFEASIBLE:
        raise InfeasibleError(f"the alltoall LP ({what}) on {topology.name} is infeasible")
    if status == pywraplp.Solver.NOT_SOLVED or status == pywraplp.Solver.FEASIBLE:
        raise LimitError(f"the alltoall LP ({what}) on {topology.name} did not finish within the time limit; "
                         "pass a larger time_limit_s")
    raise SynthError(f"the alltoall LP ({what}) on {topology.name} failed (solver status {status})")


def _check_switch_reachability(topology: Topology, weights: list[list[int]]) -> None:
    """Without relays every pair needs a route through switches and forwarding gpus; name a pair that has
    none."""
    for src in topology.ranks:
        reachable = set(neighbors(topology, src))
        for dst in topology.ranks:
            if dst != src and weights[src][dst] and dst not in reachable:
                raise InfeasibleError(
                    f"alltoall on {topology.name} without gpu relays: rank {dst} ({topology.gpus[dst]}) cannot be "
                    f"reached from rank {src} ({topology.gpus[src]}) through switches and forwarding gpus only; "
                    "allow relays=true")


def _decompose(topology: Topology, source_rank: int, values: dict[int, float], edges: list[tuple[str, str]],
               unit_rate: float, weights: list[int]
               ) -> dict[tuple[int, int], tuple[tuple[tuple[str, ...], float], ...]]:
    """Split one source's aggregated flow into paths to each destination (fewest hops first); a
    destination with weight w gets w·unit_rate, one with weight 0 no entry."""
    tolerance = 1e-9 * max(unit_rate, 1e-12)
    residual: dict[str, dict[str, float]] = {}
    for index, amount in values.items():
        if amount > tolerance:
            u, v = edges[index]
            residual.setdefault(u, {})[v] = residual.setdefault(u, {}).get(v, 0.0) + amount
    order = {node: i for i, node in enumerate(topology.graph.nodes)}
    # each node's out-links in the topology's node order, sorted once: the BFS skips the ones used up
    adjacency = {node: sorted(after, key=order.__getitem__) for node, after in residual.items()}
    source = topology.gpus[source_rank]
    result: dict[tuple[int, int], tuple[tuple[tuple[str, ...], float], ...]] = {}
    for dst_rank in topology.ranks:
        if dst_rank == source_rank or not weights[dst_rank]:
            continue
        target = topology.gpus[dst_rank]
        rate = unit_rate * weights[dst_rank]
        remaining = rate
        found: dict[tuple[str, ...], float] = {}
        while remaining > 1e-7 * rate:
            path = _bfs_path(residual, adjacency, source, target, tolerance)
            if path is None:
                break
            amount = min(remaining, *(residual[u][v] for u, v in zip(path, path[1:], strict=False)))
            for u, v in zip(path, path[1:], strict=False):
                residual[u][v] -= amount
                if residual[u][v] <= tolerance:
                    del residual[u][v]
            found[path] = found.get(path, 0.0) + amount
            remaining -= amount
        if remaining > 1e-7 * rate:
            # numerical leftovers of the LP: route the rest on the default shortest path
            hops = chain_paths(topology, source_rank, dst_rank)
            fallback = hops[0] + tuple(node for hop in hops[1:] for node in hop[1:])
            found[fallback] = found.get(fallback, 0.0) + remaining
        total = sum(found.values())
        result[(source_rank, dst_rank)] = tuple((path, amount * rate / total) for path, amount in found.items())
    return result


def _bfs_path(residual: dict[str, dict[str, float]], adjacency: dict[str, list[str]], source: str, target: str,
              tolerance: float) -> tuple[str, ...] | None:
    parent: dict[str, str] = {source: source}
    queue = deque([source])
    while queue:
        node = queue.popleft()
        left = residual.get(node, {})
        for nxt in adjacency.get(node, ()):
            if nxt in parent or left.get(nxt, 0.0) <= tolerance:
                continue
            parent[nxt] = node
            if nxt == target:
                path = [target]
                while path[-1] != source:
                    path.append(parent[path[-1]])
                return tuple(reversed(path))
            queue.append(nxt)
    return None


# ------------------------------------------------------------------------------------ cut bound
def alltoall_cut_bound(topology: Topology, flow: AlltoallFlow | None = None,
                       demand: tuple[tuple[int, ...], ...] | None = None) -> CutBound:
    """The best alltoall cut bound over candidate gpu sets, exact (see the module notes).

    Parameters
    ----------
    topology : Topology
    flow : AlltoallFlow, optional
        An LP solution whose saturated links suggest more candidate cuts.
    demand : tuple of tuples of int, optional
        alltoallv: algbw <= C·B+(S) / w(S → outside) instead (see the module notes).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> alltoall_cut_bound(load_topology("switch:n=8,bandwidth=50")).algbw_GBps
    Fraction(400, 7)
    """
    n = topology.num_ranks
    candidates, exhaustive = _cut_candidates(topology, flow)
    cutter = _MinCut(topology)
    best: tuple[Fraction, tuple[int, ...], Fraction] | None = None
    weights = _weights(n, demand)
    factor = n if demand is None else sum(map(sum, weights))
    for gpus in candidates:
        k = len(gpus)
        inside = set(gpus)
        crossing = k * (n - k) if demand is None else sum(
            weights[s][d] for s in gpus for d in range(n) if d not in inside)
        if not crossing:
            continue
        egress = cutter.egress(gpus)
        bound = Fraction(factor) * egress / crossing
        if best is None or bound < best[0]:
            best = (bound, gpus, egress)
    assert best is not None  # some pair has demand, so the cut around its source alone crosses it
    return CutBound(best[0], best[1], best[2], len(candidates), exhaustive)


def _cut_candidates(topology: Topology, flow: AlltoallFlow | None) -> tuple[list[tuple[int, ...]], bool]:
    n = topology.num_ranks
    everyone = frozenset(range(n))
    seen: set[frozenset[int]] = set()
    result: list[tuple[int, ...]] = []

    def add(members: Iterable[int]) -> None:
        group = frozenset(members)
        if group and group != everyone and group not in seen:
            seen.add(group)
            result.append(tuple(sorted(group)))

    if n <= EXHAUSTIVE_CUT_RANKS:
        for size in range(1, n):
            for group in itertools.combinations(range(n), size):
                add(group)
        return result, True
    for rank in range(n):
        add([rank])
        add(everyone - {rank})
    add(range(n // 2))
    add(range(n // 2, n))
    if topology.boxes is not None:
        boxes: dict[int, list[int]] = {}
        for rank, box in enumerate(topology.boxes):
            boxes.setdefault(box, []).append(rank)
        labels = sorted(boxes)
        if len(labels) <= 10:
            for size in range(1, len(labels)):
                for chosen in itertools.combinations(labels, size):
                    add(r for label in chosen for r in boxes[label])
        else:
            for start in range(len(labels)):
                for width in range(1, len(labels)):
                    add(r for label in labels[start:start + width] for r in boxes[label])
    if topology.dimensions:
        stride = 1
        for dim in topology.dimensions:
            for cut in range(1, dim.size):
                add(r for r in range(n) if (r // stride) % dim.size < cut)
            stride *= dim.size
    if flow is not None:
        graph = topology.graph
        unsaturated = nx.DiGraph()
        unsaturated.add_nodes_from(graph.nodes)
        for (u, v), amount in flow.link_flow.items():
            if amount < graph.edges[u, v]["bandwidth"] * (1 - 1e-6):
                unsaturated.add_edge(u, v)
        rank_of = topology.rank_of
        for gpu in topology.gpus:
            ahead = nx.descendants(unsaturated, gpu) | {gpu}
            add(rank_of[g] for g in ahead if g in rank_of)
            behind = nx.ancestors(unsaturated, gpu) | {gpu}
            add(everyone - {rank_of[g] for g in behind if g in rank_of})
    return result, False


class _MinCut:
    """B+(S) for a gpu set, minimized over where the switches go, with exact integer arithmetic."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        capacities = {(u, v): topology.exact_bandwidth(u, v) for u, v in topology.graph.edges}
        self.scale = math.lcm(*(c.denominator for c in capacities.values())) if capacities else 1
        self.capacities = {edge: int(c * self.scale) for edge, c in capacities.items()}
        self.has_switches = bool(topology.switches)
        if self.has_switches:
            network = nx.DiGraph()
            for (u, v), capacity in self.capacities.items():
                network.add_edge(u, v, capacity=capacity)
            self.network = network

    def egress(self, gpus: tuple[int, ...]) -> Fraction:
        inside = {self.topology.gpus[r] for r in gpus}
        if not self.has_switches:
            total = sum(c for (u, v), c in self.capacities.items() if u in inside and v not in inside)
            return Fraction(total, self.scale)
        network = self.network.copy()
        for gpu in self.topology.gpus:
            if gpu in inside:
                network.add_edge("__source__", gpu)      # no capacity attribute: infinite
            else:
                network.add_edge(gpu, "__sink__")
        value, _ = nx.minimum_cut(network, "__source__", "__sink__")
        return Fraction(int(value), self.scale)


def alltoall_bound(topology: Topology, relays: bool = True, time_limit_s: float | None = None,
                   demand: tuple[tuple[int, ...], ...] | None = None) -> AlltoallBound:
    """The alltoall LP optimum and the best cut bound beside it (alltoallv with a ``demand``).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> bound = alltoall_bound(load_topology("switch:n=8,bandwidth=50"))
    >>> round(bound.lp_algbw_GBps, 6), bound.cut.algbw_GBps, abs(bound.gap) < 1e-9
    (57.142857, Fraction(400, 7), True)
    """
    started = time.perf_counter()
    flow = solve_alltoall_lp(topology, relays=relays, time_limit_s=time_limit_s, demand=demand)
    cut = alltoall_cut_bound(topology, flow, demand)
    return AlltoallBound(topology.name, topology.num_ranks, flow.algbw_GBps, cut, relays,
                         time.perf_counter() - started, demand)
