"""Edge splitting: remove switch nodes while keeping every gpu's rooted connectivity.

Switches do not multicast: a tree that enters switch w from u and leaves it towards t1 and t2 uses
(u, w) twice. So each switch is replaced by direct logical arcs: splitting off gamma units of the pair
(u, w), (w, t) lowers both by gamma and adds gamma to a logical arc (u, t) that remembers its physical
path u -> w -> t. A split is admissible when, afterwards, max-flow(s -> v) is still at least the
requirement R for every gpu v (a switch whose ingress equals its egress can always be split off
completely: Bang-Jensen, Frank and Jackson's splitting theorem for rooted connectivity).

Finding the largest admissible gamma costs one round of max-flows: splitting gamma lowers by exactly
gamma the capacity of the cuts it affects (those holding w but not u, t, or u and t but not w) and
leaves the others alone, so after tentatively splitting the largest candidate c, a gpu v whose flow
dropped to R - d < R says that gamma may be at most c - d; the largest such d over all gpus gives the
exact answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from synth.cuts.network import INFINITY, FlowSolver, Network
from synth.cuts.symmetry import orbit_minima

Path = tuple[int, ...]


@dataclass
class LogicalGraph:
    """Arcs between gpus after splitting: capacity (in trees) and the physical paths that carry it.

    ``paths[(u, v)]`` lists ``[path, count]`` bundles whose counts add up to ``capacity[(u, v)]``;
    every path is a tuple of node indices from u to v through switches only.
    """

    num_compute: int
    capacity: dict[tuple[int, int], int]
    paths: dict[tuple[int, int], list[list]]
    flows: int = 0


class SplitFailed(Exception):  # noqa: N818  (a signal caught by the planner)
    """A switch could not be split off completely (its ingress and egress differ)."""


def _shortcut(path: Path) -> Path:
    """Remove cycles from a walk (keeps its ends; only drops link uses)."""
    seen: dict[int, int] = {}
    result: list[int] = []
    for node in path:
        if node in seen:
            cut = seen[node]
            for dropped in result[cut + 1:]:
                del seen[dropped]
            del result[cut + 1:]
        else:
            seen[node] = len(result)
            result.append(node)
    return tuple(result)


class _Splitter:
    def __init__(self, net: Network, capacities: Sequence[int], weights: Sequence[int], trees: int,
                 spread: bool = False) -> None:
        self.net = net
        self.spread = spread
        #: with ``spread``: per switch out-arc (w, t), the most one split may give a pair (u, t), and where
        #: the next split starts among the candidates (see :meth:`_turn`)
        self.quotas: dict[tuple[int, int], int] = {}
        self.rotor: dict[tuple[int, int], int] = {}
        self.n = net.num_compute
        self.source = net.num_nodes
        self.solver = FlowSolver(net.num_nodes + 1)
        self.capacity: dict[tuple[int, int], int] = {}
        self.paths: dict[tuple[int, int], list[list]] = {}
        self.arc: dict[tuple[int, int], int] = {}
        self.out_nb: list[set[int]] = [set() for _ in range(net.num_nodes)]
        self.in_nb: list[set[int]] = [set() for _ in range(net.num_nodes)]
        for tail, head, cap in zip(net.tails, net.heads, capacities, strict=True):
            if cap > 0:
                self.arc[(tail, head)] = self.solver.add_arc(tail, head, cap)
                self.capacity[(tail, head)] = cap
                self.paths[(tail, head)] = [[(tail, head), cap]]
                self.out_nb[tail].add(head)
                self.in_nb[head].add(tail)
        for r, w in enumerate(weights):
            if w:
                self.solver.add_arc(self.source, r, trees * w)
        self.requirement = trees * sum(weights)

    # --------------------------------------------------------------------------- arc bookkeeping
    def _change(self, u: int, v: int, delta: int) -> None:
        key = (u, v)
        self.capacity[key] += delta
        self.solver.set_capacity(self.arc[key], self.solver.capacity(self.arc[key]) + delta)
        if self.capacity[key] == 0:
            self.out_nb[u].discard(v)
            self.in_nb[v].discard(u)
        elif delta > 0:
            self.out_nb[u].add(v)
            self.in_nb[v].add(u)

    def _take(self, key: tuple[int, int], amount: int) -> list[tuple[Path, int]]:
        """Remove ``amount`` units of path bundles from the front of arc ``key``'s list."""
        taken: list[tuple[Path, int]] = []
        stored = self.paths[key]
        while amount:
            path, count = stored[0]
            used = min(count, amount)
            taken.append((path, used))
            amount -= used
            if used == count:
                stored.pop(0)
            else:
                stored[0][1] = count - used
        return taken

    # ------------------------------------------------------------------------------- the test
    def _tested(self) -> Sequence[int]:
        """The gpus whose max-flow the test asks (all of them; one per orbit under a symmetry)."""
        return range(self.n)

    def deficit(self, limit: int) -> int:
        """max over the tested gpus of (R - maxflow(s -> v)), stopping early once it reaches ``limit``."""
        worst = 0
        for v in self._tested():
            short = self.requirement - self.solver.max_flow(self.source, v)
            if short > worst:
                worst = short
                if worst >= limit:
                    return worst
        return worst

    # ------------------------------------------------------------------------------ splitting
    def _tentative(self, u: int, w: int, t: int, amount: int) -> None:
        self._change(u, w, -amount)
        self._change(w, t, -amount)
        if u != t:
            if (u, t) in self.arc:
                self._change(u, t, amount)
            else:
                self.arc[(u, t)] = self.solver.add_arc(u, t, amount)
                self.capacity[(u, t)] = amount
                self.paths[(u, t)] = []
                self.out_nb[u].add(t)
                self.in_nb[t].add(u)

    def _undo(self, u: int, w: int, t: int, amount: int) -> None:
        self._change(u, w, amount)
        self._change(w, t, amount)
        if u != t:
            self._change(u, t, -amount)

    def _record(self, u: int, w: int, t: int, amount: int) -> None:
        first = self._take((u, w), amount)
        second = self._take((w, t), amount)
        if u == t:
            return
        combined: list[tuple[Path, int]] = []
        i = j = 0
        left_a, left_b = first[0][1], second[0][1]
        while i < len(first) and j < len(second):
            used = min(left_a, left_b)
            combined.append((_shortcut(first[i][0] + second[j][0][1:]), used))
            left_a -= used
            left_b -= used
            if left_a == 0:
                i += 1
                left_a = first[i][1] if i < len(first) else 0
            if left_b == 0:
                j += 1
                left_b = second[j][1] if j < len(second) else 0
        stored = self.paths[(u, t)]
        for path, count in combined:
            if stored and stored[-1][0] == path:
                stored[-1][1] += count
            else:
                stored.append([path, count])

    def _drop(self, w: int) -> None:
        for u in list(self.in_nb[w]):
            self.paths[(u, w)] = []
            self._change(u, w, -self.capacity[(u, w)])
        for t in list(self.out_nb[w]):
            self.paths[(w, t)] = []
            self._change(w, t, -self.capacity[(w, t)])

    def _pass_through(self, w: int) -> bool:
        """Split a switch with exactly two neighbours whose capacities match, without any flow test.

        With a and b its only neighbours and c(a,w) = c(w,b), c(b,w) = c(w,a), the direct arcs a->b and
        b->a cross every cut holding a gpu exactly as the paths through w did (cuts that hold w but
        neither a nor b lose capacity, but they are dominated by the same cut without w)."""
        neighbours = self.in_nb[w] | self.out_nb[w]
        if len(neighbours) != 2:
            return False
        a, b = sorted(neighbours)
        cap = self.capacity
        if cap.get((a, w), 0) != cap.get((w, b), 0) or cap.get((b, w), 0) != cap.get((w, a), 0):
            return False
        for u, t in ((a, b), (b, a)):
            amount = cap.get((u, w), 0)
            if amount:
                self._tentative(u, w, t, amount)
                self._record(u, w, t, amount)
        return True

    def _candidates(self, w: int, t: int) -> list[int]:
        """The in-neighbours of ``w`` to pair with its out-arc to ``t``: in cyclic order after ``t`` (which
        spreads the logical arcs evenly), then ``t`` itself (a pair that becomes a loop) last."""
        ins = sorted(self.in_nb[w])
        after = [u for u in ins if u > t] + [u for u in ins if u < t]
        return after + ([t] if t in self.in_nb[w] else [])

    def _quota(self, w: int, t: int) -> int:
        """The most one split may give a pair through ``w`` towards ``t``: without ``spread``, everything
        (the first admissible pair takes all it can, so a switch becomes few heavy pairs, often a ring);
        with it, (w, t)'s capacity shared evenly among w's other in-neighbours, so the logical graph
        gets many light pairs and the packer can grow shallow trees (stars on a single switch)."""
        if not self.spread:
            return INFINITY
        key = (w, t)
        if key not in self.quotas:
            others = len(self.in_nb[w] - {t}) or 1
            self.quotas[key] = max(1, -(-self.capacity[(w, t)] // others))
        return self.quotas[key]

    def _turn(self, w: int, t: int) -> list[int]:
        """The candidates for (w, t), starting (with ``spread``) after the pair that was given the last split."""
        candidates = self._candidates(w, t)
        if not self.spread or not candidates:
            return candidates
        start = self.rotor.get((w, t), 0) % len(candidates)
        return candidates[start:] + candidates[:start]

    def _turned(self, w: int, t: int, index: int) -> None:
        if self.spread:
            self.rotor[(w, t)] = self.rotor.get((w, t), 0) + index + 1

    def split(self, w: int) -> None:
        """Split switch ``w`` off completely (raises :class:`SplitFailed` if that is impossible)."""
        if self._pass_through(w):
            return
        while self.out_nb[w] and self.in_nb[w]:
            t = min(self.out_nb[w])
            for index, u in enumerate(self._turn(w, t)):
                amount = min(self.capacity[(u, w)], self.capacity[(w, t)], self._quota(w, t))
                self._tentative(u, w, t, amount)
                short = self.deficit(amount)
                if short:
                    self._undo(u, w, t, min(short, amount))
                granted = amount - min(short, amount)
                if granted > 0:
                    self._record(u, w, t, granted)
                    self._turned(w, t, index)
                    break
            else:
                raise SplitFailed(f"switch {self.net.names[w]!r}: no admissible pair for its link to "
                                  f"{self.net.names[t]!r}")
        self._drop(w)


class _SymmetricSplitter(_Splitter):
    """Splits a whole orbit of switches at a time under a network automorphism group.

    Every state stays invariant, so max-flow values agree on each gpu orbit and the test only asks one
    gpu per orbit (``representatives``). A pair's orbit is split by the same amount everywhere; when an
    orbit holds several pairs the exact one-round formula no longer applies (a cut may be hit by several of
    them), so the amount is the largest that passes, found by bisection (feasibility is monotone in it)."""

    def __init__(self, net: Network, capacities: Sequence[int], weights: Sequence[int], trees: int,
                 group: list[list[int]], representatives: Sequence[int], spread: bool = False) -> None:
        super().__init__(net, capacities, weights, trees, spread)
        self.group = group
        self.representatives = list(representatives)

    def _tested(self) -> Sequence[int]:
        return self.representatives

    def _orbit(self, u: int, w: int, t: int) -> list[tuple[int, int, int]]:
        return sorted({(g[u], g[w], g[t]) for g in self.group})

    def _apply(self, triples: list[tuple[int, int, int]], amount: int, undo: bool = False) -> None:
        for u, w, t in triples:
            (self._undo if undo else self._tentative)(u, w, t, amount)

    def split_orbit(self, w: int) -> None:
        """Split off ``w`` and its images under the group."""
        members = sorted({g[w] for g in self.group})
        if all(len(self.in_nb[m] | self.out_nb[m]) == 2 for m in members):
            if all(self._pass_through(m) for m in members):
                return
        while self.out_nb[w] and self.in_nb[w]:
            t = min(self.out_nb[w])
            for index, u in enumerate(self._turn(w, t)):
                triples = self._orbit(u, w, t)
                uses: dict[tuple[int, int], int] = {}
                for a, b, c in triples:
                    uses[(a, b)] = uses.get((a, b), 0) + 1
                    uses[(b, c)] = uses.get((b, c), 0) + 1
                top = min(min(self.capacity[arc] // count for arc, count in uses.items()), self._quota(w, t))
                if top <= 0:
                    continue
                granted = self._largest(triples, top)
                if granted > 0:
                    for a, b, c in triples:
                        self._record(a, b, c, granted)
                    self._turned(w, t, index)
                    break
            else:
                raise SplitFailed(f"switch {self.net.names[w]!r}: no admissible pair for its link to "
                                  f"{self.net.names[t]!r}")
        for m in members:
            self._drop(m)

    def _largest(self, triples: list[tuple[int, int, int]], top: int) -> int:
        """Apply and return the largest admissible amount (0: nothing applied)."""
        self._apply(triples, top)
        short = self.deficit(top if len(triples) == 1 else 1)
        if not short:
            return top
        if len(triples) == 1:  # one pair: the one-round formula is exact
            granted = top - min(short, top)
            self._undo(*triples[0], top - granted)
            return granted
        self._apply(triples, top, undo=True)
        low, high = 0, top  # low passes, high fails
        while high - low > 1:
            middle = (low + high) // 2
            self._apply(triples, middle)
            passed = not self.deficit(1)
            self._apply(triples, middle, undo=True)
            low, high = (middle, high) if passed else (low, middle)
        if low:
            self._apply(triples, low)
        return low


def split_switches(net: Network, capacities: Sequence[int], weights: Sequence[int], trees: int,
                   group: list[list[int]] | None = None, spread: bool = False) -> LogicalGraph:
    """Remove every switch by edge splitting; return the logical gpu-to-gpu graph.

    ``capacities`` are arc capacities in trees (e.g. :func:`~synth.cuts.allgather.tree_capacities`)
    that pass the flow test for ``trees`` trees per unit of root weight. Raises :class:`SplitFailed` when
    a switch cannot be split off completely, which happens only when its ingress and egress differ.
    With ``group`` (the node permutations of an automorphism group that leaves ``capacities`` and
    ``weights`` invariant and moves gpus freely) switches are split an orbit at a time and every test asks
    one gpu per orbit (see :mod:`~synth.cuts.symmetry`). With ``spread`` each switch's capacity toward a
    gpu is shared among many pairs instead of the first that can take it (see ``_Splitter._quota``): the same
    cut-bound capacities, in a denser logical graph whose trees can be shallower.

    Examples
    --------
    >>> from synth.topology import Topology
    >>> topo = Topology.build("star", ["a", "b", "c"], ["sw"], [(g, "sw", 10.0) for g in "abc"])
    >>> net = Network.from_topology(topo)
    >>> logical = split_switches(net, [2] * net.num_arcs, [1, 1, 1], 1)  # 2 of the 3 trees per link
    >>> sorted(logical.capacity.items())  # a directed cycle a -> c -> b -> a through the switch
    [((0, 2), 2), ((1, 0), 2), ((2, 1), 2)]
    """
    if group is None:
        splitter: _Splitter = _Splitter(net, capacities, weights, trees, spread)
        switches = range(net.num_compute, net.num_nodes)
        for w in sorted(switches, key=lambda s: (len(splitter.in_nb[s] | splitter.out_nb[s]), s)):
            splitter.split(w)
    else:
        representatives = sorted(set(orbit_minima(group, range(net.num_compute)).values()))
        symmetric = _SymmetricSplitter(net, capacities, weights, trees, group, representatives, spread)
        splitter = symmetric
        heads = sorted(set(orbit_minima(group, range(net.num_compute, net.num_nodes)).values()),
                       key=lambda s: (len(symmetric.in_nb[s] | symmetric.out_nb[s]), s))
        for w in heads:
            symmetric.split_orbit(w)
        if symmetric.deficit(1):
            raise SplitFailed("the symmetric splitting lost connectivity")
    capacity = {key: cap for key, cap in splitter.capacity.items()
                if cap > 0 and key[0] < net.num_compute and key[1] < net.num_compute}
    paths = {key: [[path, count] for path, count in splitter.paths[key] if count] for key in capacity}
    for key, cap in capacity.items():
        assert sum(count for _, count in paths[key]) == cap, key
    return LogicalGraph(net.num_compute, capacity, paths, splitter.solver.calls)
