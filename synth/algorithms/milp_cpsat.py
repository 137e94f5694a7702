"""milp's CP-SAT stage: the time-indexed model of one phase, solved once with the greedy plan as a hint.

The model is the one :mod:`synth.algorithms.milp` describes: booleans ``send[item, link, epoch]`` and
``have[item, rank, epoch]``, store and forward, bandwidth windows, the postcondition, ``done[epoch]``
flags, and one lexicographic objective (fewest epochs, then earliest arrivals, then for alltoall fewest
sends). :func:`solve_time_indexed` builds it for one :class:`~synth.algorithms.milp_instance.Instance`
(every logical link, or each item's ``allowed`` links: the split model), hints the greedy plan, runs
one deterministic search and keeps every solution CP-SAT reports; choosing among them is milp's job.

It lives apart from :mod:`synth.algorithms.milp` so that OR-Tools' CP-SAT (over half a second to import)
is loaded only when a phase is solved, not whenever the algorithm's module is (``synth algorithms``,
the tuner).

Examples
--------
>>> from synth.library import load_topology
>>> from synth.algorithms.milp_sketch import load_sketch
>>> from synth.algorithms.milp_instance import Item, best_greedy, build_instance, logical_links
>>> topology = load_topology("ring:n=4")
>>> items = [Item(c, c, tuple(r for r in range(4) if r != c)) for c in range(4)]
>>> instance = build_instance(topology, logical_links(topology, load_sketch(None)), items, True, 1024.0, 1.0)
>>> greedy = best_greedy(instance)
>>> outcome = solve_time_indexed(instance, greedy.makespan, 1, greedy, None, "allgather",
...                              SolverBudget(deterministic_s=1.0, wall_s=60.0))
>>> outcome.status, outcome.hinted, outcome.model_bound <= greedy.makespan
('OPTIMAL', True, True)
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from synth.algorithms.milp_instance import Instance, Plan, Send, send_window
from synth.errors import InfeasibleError

#: A variable's key: (representative item, link or rank as seen from it, epoch).
Key = tuple[int, int, int]
#: Told about each solution: its makespan, CP-SAT's bound (both in epochs) and the seconds since the solve began.
SolutionFunction = Callable[[int, int, float], None]


@dataclass(frozen=True)
class SolverBudget:
    """CP-SAT's limits and search settings for one solve.

    ``deterministic_s`` is the budget in deterministic seconds (what makes a solve reproducible);
    ``wall_s`` the wall-clock safety cap; ``workers`` > 1 uses the deterministic interleaved search.
    """

    deterministic_s: float
    wall_s: float
    seed: int = 0
    workers: int = 1


@dataclass(frozen=True)
class SolveOutcome:
    """What one solve gave: every solution (in the order found), CP-SAT's status name, the bound in
    epochs it proved on this model (``lower`` when none), ``stopped_by`` (``"wall-clock"`` when the safety
    cap fired first: ``found`` is then empty, those solutions depending on timing), the deterministic
    seconds spent, and whether the greedy plan was given as a hint."""

    found: list[Plan]
    status: str
    model_bound: int
    stopped_by: str
    deterministic_s: float
    hinted: bool


class TimeIndexedModel:
    """The CP-SAT model of one phase over ``horizon`` epochs (see the module docstring).

    Under the sketch's symmetry a rotated item shares its representative's variables: the keys map every
    (item, link or rank) to the representative's. ``lower``: epochs below which no plan exists; the
    objective counts the epochs beyond it. ``allowed``: the links each item may use (None: every link).
    """

    def __init__(self, instance: Instance, horizon: int, lower: int, allowed: list[set[int]] | None,
                 label: str) -> None:
        self.model = cp_model.CpModel()
        self.instance = instance
        self.horizon = horizon
        self.lower = lower
        self.label = label
        self.send_vars: dict[Key, Any] = {}
        self.have_vars: dict[Key, Any] = {}
        self.done: dict[int, Any] = {}
        #: which sends exist: (item, link) -> range of epochs
        self.send_epochs = self._send_epochs(allowed)
        arrivals, load, fanout = self._add_sends()
        secondary_terms = self._add_holdings(arrivals)
        self._add_link_capacities(load)
        for per_epoch in fanout.values():
            for terms in per_epoch.values():
                if len(terms) > 1:
                    self.model.add_at_most_one(terms)
        self._add_done()
        self._add_objective(secondary_terms)

    # ------------------------------------------------------------------------------- variables
    def send_key(self, item: int, link: int, epoch: int) -> Key:
        """The key of ``send[item, link, epoch]`` (its representative's)."""
        rep, power = self.instance.representative[item]
        return (rep, self.instance.link_image[power][link], epoch)

    def have_key(self, item: int, rank: int, epoch: int) -> Key:
        """The key of ``have[item, rank, epoch]`` (its representative's)."""
        rep, power = self.instance.representative[item]
        return (rep, self.instance.rank_image[power][rank], epoch)

    def send(self, item: int, link: int, epoch: int) -> Any:
        """The boolean ``send[item, link, epoch]``, made on first use."""
        return self._variable(self.send_vars, "s", self.send_key(item, link, epoch))

    def have(self, item: int, rank: int, epoch: int) -> Any:
        """The boolean ``have[item, rank, epoch]``, made on first use."""
        return self._variable(self.have_vars, "h", self.have_key(item, rank, epoch))

    def _variable(self, made: dict[Key, Any], prefix: str, key: Key) -> Any:
        """The boolean under ``key`` in ``made``, created (named ``prefix`` + key) on first use."""
        var = made.get(key)
        if var is None:
            var = made[key] = self.model.new_bool_var(f"{prefix}{key}")
        return var

    # ----------------------------------------------------------------------------- constraints
    def _send_epochs(self, allowed: list[set[int]] | None) -> dict[tuple[int, int], range]:
        """(item, link) -> the epochs a send can start in: not before the item can reach the link's source,
        and (unicast) early enough to still reach the target within the horizon."""
        send_epochs: dict[tuple[int, int], range] = {}
        for i in range(len(self.instance.items)):
            for link_index in range(len(self.instance.links)):
                window = send_window(self.instance, i, link_index, self.horizon, allowed)
                if window:
                    send_epochs[(i, link_index)] = window
        return send_epochs

    def _add_sends(self) -> tuple[dict[tuple[int, int], dict[int, list[Any]]], list[dict[int, list[Any]]],
                                  dict[tuple[int, int], dict[int, list[Any]]]]:
        """Make the send variables with store and forward (a relay sends only what it has); return them
        by (item, rank) and arrival epoch, by physical link and start epoch, and (serial fan-out) by
        (item, sender) and busy epoch."""
        instance = self.instance
        arrivals: dict[tuple[int, int], dict[int, list[Any]]] = defaultdict(lambda: defaultdict(list))
        load: list[dict[int, list[Any]]] = [defaultdict(list) for _ in instance.edges]
        fanout: dict[tuple[int, int], dict[int, list[Any]]] = defaultdict(lambda: defaultdict(list))
        for (i, link_index), epochs in self.send_epochs.items():
            link = instance.links[link_index]
            delay = instance.delay[link_index]
            for epoch in epochs:
                var = self.send(i, link_index, epoch)
                arrivals[(i, link.dst)][epoch + delay].append(var)
                for edge in link.hops:
                    load[edge][epoch].append(var)
                if instance.serial_fanout:
                    for busy in range(epoch, epoch + delay):
                        fanout[(i, link.src)][busy].append(var)
                if link.src != instance.items[i].source:
                    self.model.add_implication(var, self.have(i, link.src, epoch))
        return arrivals, load, fanout

    def _add_holdings(self, arrivals: dict[tuple[int, int], dict[int, list[Any]]]) -> list[Any]:
        """``have`` accumulates arrivals (at most one), every target ends holding its items; return the
        ``have`` variables of targets before the horizon (the secondary objective counts them)."""
        instance = self.instance
        model = self.model
        secondary_terms: list[Any] = []
        for i, item in enumerate(instance.items):
            targets = set(item.targets)
            for v in range(instance.num_ranks):
                if v == item.source:
                    continue
                incoming = arrivals.get((i, v), {})
                if not incoming:
                    if v in targets:
                        raise InfeasibleError(f"milp {self.label}: rank {v} cannot receive chunk {item.chunk} "
                                              f"within {self.horizon} epochs")
                    continue
                previous = None
                for epoch in range(instance.dist[item.source][v], self.horizon + 1):
                    current = self.have(i, v, epoch)
                    terms = incoming.get(epoch, [])
                    if previous is None:
                        model.add(current == sum(terms))
                    else:
                        model.add(current == previous + sum(terms))
                    previous = current
                    if v in targets and epoch < self.horizon:
                        secondary_terms.append(current)
                if v in targets:
                    model.add(previous == 1)
        defined = {self.have_key(i, v, epoch) for i, item in enumerate(instance.items)
                   for v in range(instance.num_ranks) if v != item.source and arrivals.get((i, v))
                   for epoch in range(instance.dist[item.source][v], self.horizon + 1)}
        for key, var in self.have_vars.items():
            if key not in defined:  # no arrival can make it true (cannot happen with the pruning above; a guard)
                model.add(var == 0)
        return secondary_terms

    def _add_link_capacities(self, load: list[dict[int, list[Any]]]) -> None:
        """Physical link e starts at most ``cap[e]`` sends in any ``window[e]`` consecutive epochs."""
        for edge, per_epoch in enumerate(load):
            width, limit = self.instance.window[edge], self.instance.cap[edge]
            if not per_epoch:
                continue
            epochs = sorted(per_epoch)
            for start in range(epochs[0] - width + 1, epochs[-1] + 1):
                terms = [var for e in range(start, start + width) for var in per_epoch.get(e, ())]
                if len(terms) > limit:
                    self.model.add(sum(terms) <= limit)

    def _add_done(self) -> None:
        """``done[k]`` (k from ``lower`` to the horizon) implies every target holds its items at epoch k,
        and stays true once true."""
        for epoch in range(self.lower, self.horizon):
            self.done[epoch] = self.model.new_bool_var(f"done{epoch}")
            for i, item in enumerate(self.instance.items):
                for t in item.targets:
                    self.model.add_implication(self.done[epoch], self.have(i, t, epoch))
            if epoch > self.lower:
                self.model.add_implication(self.done[epoch - 1], self.done[epoch])

    def _add_objective(self, secondary_terms: list[Any]) -> None:
        """One lexicographic objective (fewest epochs, then earliest arrivals, then for unicast fewest
        sends) in one solve, so that a larger budget only extends the same deterministic search."""
        secondary_max = len(secondary_terms)
        self.makespan_expr = (self.horizon - self.lower) - sum(self.done.values())  # epochs beyond the lower bound
        secondary = secondary_max - sum(secondary_terms)                            # epochs items still travel
        secondary_top = secondary_max
        if not self.instance.multicast:
            secondary += sum(self.send_vars.values())                               # fewer relay hops
            secondary_top += len(self.send_vars)
        self.weight = secondary_top + 1
        self.model.minimize(self.makespan_expr * self.weight + secondary)

    # ------------------------------------------------------------------------ hints and reading
    def hint(self, plan: Plan) -> bool:
        """Give CP-SAT the plan as a complete hint; a plan that breaks the sketch's symmetry is not given
        (returns False)."""
        instance = self.instance
        if instance.rotation is not None and not instance.plan_is_symmetric(plan):
            return False
        chosen = {self.send_key(s.item, s.link, s.epoch) for s in plan.sends}
        for key, var in self.send_vars.items():
            self.model.add_hint(var, key in chosen)
        held = {}
        for (item, rank), epoch in arrivals(instance, plan.sends).items():
            held[self.have_key(item, rank, 0)[:2]] = epoch
        for key, var in self.have_vars.items():
            got = held.get(key[:2])
            self.model.add_hint(var, got is not None and got <= key[2])
        for epoch, var in self.done.items():
            self.model.add_hint(var, epoch >= plan.makespan)
        return True

    def read(self, value: Callable[[Any], bool]) -> list[Send]:
        """The sends a solution chose (``value`` reads a boolean), in (epoch, link, item) order."""
        sends = [Send(i, link_index, epoch) for (i, link_index), epochs in self.send_epochs.items()
                 for epoch in epochs if value(self.send(i, link_index, epoch))]
        return sorted(sends, key=lambda s: (s.epoch, s.link, s.item))


class SolutionCollector(cp_model.CpSolverSolutionCallback):
    """Keeps every solution CP-SAT reports as a :class:`~synth.algorithms.milp_instance.Plan`, in the
    order found, and tells ``on_solution`` about each."""

    def __init__(self, model: TimeIndexedModel, on_solution: SolutionFunction | None) -> None:
        super().__init__()
        self._time_indexed = model
        self._on_solution = on_solution
        self._started = time.perf_counter()
        self.found: list[Plan] = []

    def on_solution_callback(self) -> None:
        """Read the solution's sends and makespan."""
        model = self._time_indexed
        sends = model.read(self.boolean_value)
        makespan = model.lower + round(self.value(model.makespan_expr))
        self.found.append(Plan(sends, makespan, arrival_sum(model.instance, sends), "cp-sat"))
        if self._on_solution is not None:
            best_bound = model.lower + int(self.best_objective_bound // model.weight + 1e-9)
            self._on_solution(makespan, best_bound, time.perf_counter() - self._started)


def solve_time_indexed(instance: Instance, horizon: int, lower: int, plan: Plan | None,
                       allowed: list[set[int]] | None, label: str, budget: SolverBudget,
                       on_solution: SolutionFunction | None = None) -> SolveOutcome:
    """Build the model over ``horizon`` epochs, hint ``plan`` (the greedy plan, if any) and solve it once.

    Parameters
    ----------
    instance : Instance
    horizon : int
        Epochs the model spans (the greedy plan's makespan, or the sketch's ``epochs``).
    lower : int
        Epochs below which no plan exists (the objective counts the epochs beyond it).
    plan : Plan or None
        The hint.
    allowed : list of set of int, or None
        Per item, the logical links it may use (the split model); None for every link.
    label : str
        The phase, for messages (``"allgather"``, ...).
    budget : SolverBudget
    on_solution : callable, optional
        Told each solution's makespan, CP-SAT's bound and the seconds since the solve began.

    Raises
    ------
    InfeasibleError
        A target cannot be reached within the horizon, or CP-SAT proves that nothing fits it.
    """
    time_indexed = TimeIndexedModel(instance, horizon, lower, allowed, label)
    hinted = plan is not None and time_indexed.hint(plan)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = budget.wall_s
    params.max_deterministic_time = float(budget.deterministic_s)
    params.random_seed = budget.seed
    params.num_workers = budget.workers
    params.symmetry_level = 1  # the full symmetry search costs seconds of presolve on these models
    if budget.workers > 1:
        params.interleave_search = True
    collector = SolutionCollector(time_indexed, on_solution)
    status = solver.solve(time_indexed.model, collector)
    spent = solver.deterministic_time
    found = collector.found
    stopped_by = ""
    if status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and spent < params.max_deterministic_time * 0.999:
        # the wall-clock safety cap fired first (a loaded machine): what the solver reached depends on
        # timing, so keep only the deterministic greedy start and the (still valid) combinatorial bound
        stopped_by = "wall-clock"
        found = []
    if status == cp_model.INFEASIBLE:
        raise InfeasibleError(f"milp {label} on {instance.topology.name}: no schedule fits {horizon} epochs of "
                              f"{instance.epoch_us:.4g} us under the sketch (proven by CP-SAT)")
    model_bound = lower
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and not stopped_by:
        model_bound = lower + int(solver.best_objective_bound // time_indexed.weight + 1e-9)
        if status == cp_model.OPTIMAL and found:
            model_bound = found[-1].makespan
    return SolveOutcome(found, solver.status_name(status), model_bound, stopped_by, spent, hinted)


def arrivals(instance: Instance, sends: list[Send]) -> dict[tuple[int, int], int]:
    """(item, rank) -> the first epoch the item can be forwarded from that rank under ``sends``."""
    result: dict[tuple[int, int], int] = {}
    for s in sends:
        key = (s.item, instance.links[s.link].dst)
        arrival = s.epoch + instance.delay[s.link]
        result[key] = min(result.get(key, arrival), arrival)
    return result


def arrival_sum(instance: Instance, sends: list[Send]) -> int:
    """The sum over items and their targets of the arrival epoch (the secondary objective)."""
    arrival = arrivals(instance, sends)
    return sum(arrival.get((i, t), 0) for i, item in enumerate(instance.items) for t in item.targets)


__all__ = ["SolveOutcome", "SolverBudget", "SolutionCollector", "TimeIndexedModel", "arrival_sum", "arrivals",
           "solve_time_indexed"]
