"""Arborescence packing: k out-trees per root on the logical gpu graph, each arc in at most cap(e) trees.

Edmonds' theorem says the packing exists iff every gpu v has max-flow(s -> v) >= the number of trees,
with s joined to each root by as many arcs as it has trees. Lovász's proof grows the trees one arc at a
time while keeping the condition for the *remaining* problem: with partial trees F_j (node sets V_j), the
rest can be completed iff for every node set X the unused capacity entering X is at least the number of
trees that do not touch X yet. In flow form: an auxiliary node a_j per partial tree, s -> a_j with the
tree's multiplicity and a_j -> v (unbounded) for v in V_j; then max-flow(s -> v) >= the number of
unfinished trees for every v.

Identical trees are kept as one class with a multiplicity m (a root's k trees start as one class). Adding
an arc (x, y) to a class lowers by mu only the slack of the sets X that hold y and some node of V_j but
not x, so the largest mu that keeps the condition is one max-flow: from s, with x forced to the source
side (s -> x unbounded) and a_j forced to the sink side (a_j -> y unbounded), to y; mu = min(m, cap(x, y),
flow - unfinished). When mu < m the class splits into mu copies that take the arc and m - mu that do not.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from synth.cuts.network import INFINITY, FlowSolver


@dataclass
class TreeClass:
    """``copies`` identical out-trees rooted at ``root``; ``arcs`` are (parent, child) in growth order."""

    root: int
    copies: int
    arcs: list[tuple[int, int]] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)


#: Arcs the symmetric packer adds between two completion tests.
SYMMETRIC_BATCH = 32


class PackingError(RuntimeError):
    """The packing could not be completed (the capacities did not pass the flow test)."""


class _PackerSignal(Exception):  # noqa: N818  (not an error: the packer stopped on purpose)
    """The packer stopped early; ``grown`` is how many arcs it had grown (set where it is caught)."""

    grown: int = 0


class _TooDeep(_PackerSignal):  # a tree would pass the packer's depth limit
    pass


class _OverBudget(_PackerSignal):  # the packer has grown its arc limit
    pass


class _DepthBound:
    """Early rejection for :func:`_repack_pair`: the trees packed again must come out with depths (copies
    counted, deepest first) lexicographically below ``old``. Every tree's final depth is at least what it
    has reached so far, so once the depths reached (0 for trees not grown yet) compare at or above ``old``
    no completion can compare below it, and the packer stops. Without ``lexicographic`` it stops only
    once a tree is deeper than ``old``'s deepest."""

    def __init__(self, old: list[int], lexicographic: bool) -> None:
        self.old = old
        self.lexicographic = lexicographic
        self.done: list[int] = []  # depths of the finished trees, copies counted

    def hopeless(self, depth: int, copies: int) -> bool:
        """True when the finished trees and ``copies`` trees of at least ``depth`` already compare at or
        above ``old`` (without ``lexicographic``: when ``depth`` passes its deepest)."""
        if not self.lexicographic or depth > self.old[0]:
            return depth > self.old[0]
        reached = sorted(self.done + [depth] * copies, reverse=True)
        return reached + [0] * (len(self.old) - len(reached)) >= self.old

    def finish(self, depth: int, copies: int) -> None:
        """Count ``copies`` finished trees of ``depth``."""
        self.done += [depth] * copies


class _Packer:
    def __init__(self, num_compute: int, capacity: dict[tuple[int, int], int], copies: Sequence[int],
                 root_order: Sequence[int] | None = None, depth_bound: _DepthBound | None = None,
                 hops: Mapping[tuple[int, int], int] | None = None, arc_limit: int | None = None) -> None:
        self.n = num_compute
        self.hops: Mapping[tuple[int, int], int] = {} if hops is None else hops  # an arc's length (default 1)
        self.depth_bound = depth_bound
        self.arc_limit = arc_limit  # most arcs to grow (_OverBudget past it)
        self.grown = 0  # arcs added to tree classes so far
        self.root_order = list(range(num_compute)) if root_order is None else list(root_order)
        self.source = num_compute
        self.solver = FlowSolver(num_compute + 1)
        self.remaining: MutableMapping[tuple[int, int], int] = dict(capacity)
        self.arc = {key: self.solver.add_arc(key[0], key[1], cap) for key, cap in sorted(capacity.items())}
        self.out: list[list[int]] = [[] for _ in range(num_compute)]
        for u, v in sorted(capacity):
            self.out[u].append(v)
        self.unstarted = list(copies)
        self.root_arc = [self.solver.add_arc(self.source, r, c) for r, c in enumerate(copies)]
        self.unfinished = sum(copies)
        self.free_aux: list[int] = []
        self.aux_arcs: dict[int, dict[int, int]] = {}
        self.aux_source: dict[int, int] = {}
        self.next_node = num_compute + 1

    # ----------------------------------------------------------------------- auxiliary nodes
    def _new_aux(self, copies: int, nodes: Sequence[int]) -> int:
        if self.free_aux:
            aux = self.free_aux.pop()
            self.solver.set_capacity(self.aux_source[aux], copies)
        else:
            aux = self.next_node
            self.next_node += 1
            self.solver.num_nodes = self.next_node
            self.aux_source[aux] = self.solver.add_arc(self.source, aux, copies)
            self.aux_arcs[aux] = {}
        for v in nodes:
            self._aux_to(aux, v, INFINITY)
        return aux

    def _aux_to(self, aux: int, v: int, capacity: int) -> None:
        arcs = self.aux_arcs[aux]
        if v in arcs:
            self.solver.set_capacity(arcs[v], capacity)
        else:
            arcs[v] = self.solver.add_arc(aux, v, capacity)

    def _free(self, aux: int) -> None:
        self.solver.set_capacity(self.aux_source[aux], 0)
        arcs = self.aux_arcs[aux]
        self.solver.set_capacities(list(arcs.values()), [0] * len(arcs))
        self.free_aux.append(aux)

    # ------------------------------------------------------------------------------- growing
    def _largest_copies(self, tree: TreeClass, aux: int, x: int, y: int) -> int:
        """How many copies of ``tree`` can take arc (x, y) (see the module docstring); the arc from ``aux``
        to ``y`` is left unbounded where some can (as the tree will then hold ``y``), at 0 where none can."""
        limit = min(tree.copies, self.remaining[(x, y)])
        root_arc = self.root_arc[x]
        saved_root = self.solver.capacity(root_arc)
        if saved_root != INFINITY:
            self.solver.set_capacity(root_arc, INFINITY)
        self._aux_to(aux, y, INFINITY)
        flow = self.solver.max_flow(self.source, y)
        if saved_root != INFINITY:
            self.solver.set_capacity(root_arc, saved_root)
        mu = max(0, min(limit, flow - self.unfinished))
        if mu == 0:
            self._aux_to(aux, y, 0)
        return mu

    def _extend(self, tree: TreeClass, auxes: list[int], x: int, y: int,
                stack: list[tuple[TreeClass, list[int]]]) -> int:
        """Add arc (x, y) to as many copies of ``tree`` as the condition allows; return how many (0: none)."""
        aux = auxes[0]
        mu = self._largest_copies(tree, aux, x, y)
        if mu == 0:
            return 0
        if mu < tree.copies:
            rest = TreeClass(tree.root, tree.copies - mu, list(tree.arcs), list(tree.nodes))
            stack.append((rest, [self._new_aux(rest.copies, rest.nodes)]))
            tree.copies = mu
            self.solver.set_capacity(self.aux_source[aux], mu)
        self.remaining[(x, y)] -= mu
        self.solver.set_capacity(self.arc[(x, y)], self.remaining[(x, y)])
        return mu

    def _finish(self, tree: TreeClass, auxes: list[int]) -> None:
        self.unfinished -= tree.copies * len(auxes)
        for aux in auxes:
            self._free(aux)

    def _membership(self, tree: TreeClass) -> tuple[list[bool], dict[int, int]]:
        """Which gpus a partial tree already spans, and each one's depth below the root."""
        inside = [False] * self.n
        depth: dict[int, int] = {tree.root: 0}
        for x in tree.nodes:
            inside[x] = True
        hops = self.hops
        for x, y in tree.arcs:
            depth[y] = depth[x] + hops.get((x, y), 1)
        return inside, depth

    def grow(self, tree: TreeClass, auxes: list[int], stack: list[tuple[TreeClass, list[int]]]) -> None:
        """Grow ``tree`` until it spans every gpu, shallow arcs first, then the widest."""
        inside, depth = self._membership(tree)
        heap: list[tuple[int, int, int, int]] = []
        hops = self.hops

        def push_from(x: int) -> None:
            for y in self.out[x]:
                if not inside[y] and self.remaining[(x, y)] > 0:
                    heapq.heappush(heap, (depth[x] + hops.get((x, y), 1), -self.remaining[(x, y)], x, y))

        for x in tree.nodes:
            push_from(x)
        deferred: list[tuple[int, int, int, int]] = []
        deepest = max(depth.values())
        while len(tree.nodes) < self.n:
            while heap:
                item = heapq.heappop(heap)
                _, _, x, y = item
                if inside[y] or self.remaining[(x, y)] <= 0:
                    continue
                if self._extend(tree, auxes, x, y, stack):
                    break
                deferred.append(item)
            else:
                raise PackingError(f"no arc can extend the tree of root {tree.root} ({len(tree.nodes)} nodes)")
            reached = depth[x] + hops.get((x, y), 1)
            if reached > deepest:
                deepest = reached
                if self.depth_bound is not None and self.depth_bound.hopeless(deepest, tree.copies):
                    raise _TooDeep
            tree.arcs.append((x, y))
            self.grown += 1
            if self.arc_limit is not None and self.grown > self.arc_limit:
                raise _OverBudget
            tree.nodes.append(y)
            inside[y] = True
            depth[y] = reached
            push_from(y)
            for item in deferred:  # a refused arc may become admissible once the tree has grown
                heapq.heappush(heap, item)
            deferred.clear()
        if self.depth_bound is not None:
            self.depth_bound.finish(deepest, tree.copies)
        self._finish(tree, auxes)

    def _start(self, root: int) -> tuple[TreeClass, list[int]]:
        tree = TreeClass(root, self.unstarted[root], [], [root])
        self.unstarted[root] = 0
        self.solver.set_capacity(self.root_arc[root], 0)
        return tree, [self._new_aux(tree.copies, tree.nodes)]

    def roots(self) -> list[int]:
        return [r for r in self.root_order if self.unstarted[r]]

    def pack(self) -> list[TreeClass]:
        done: list[TreeClass] = []
        for root in self.roots():
            stack = [self._start(root)]
            while stack:
                current, auxes = stack.pop()
                self.grow(current, auxes, stack)
                done.append(current)
        return done


class _ArcValues(MutableMapping[tuple[int, int], int]):
    """A (tail, head) -> value view of an array indexed by solver arc: the symmetric packer keeps the
    remaining capacities in an array (it updates a whole arc orbit at once) and the shared code reads them
    one arc at a time."""

    def __init__(self, index: dict[tuple[int, int], int], values: np.ndarray) -> None:
        self.index = index
        self.array = values

    def __getitem__(self, arc: tuple[int, int]) -> int:
        return int(self.array[self.index[arc]])

    def __setitem__(self, arc: tuple[int, int], value: int) -> None:
        self.array[self.index[arc]] = value

    def __delitem__(self, arc: tuple[int, int]) -> None:
        raise TypeError("the arcs of a packing are fixed")

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self.index)

    def __len__(self) -> int:
        return len(self.index)


class _SymmetricPacker(_Packer):
    """Packs only the trees of one root per gpu orbit; each stands for its images under the group.

    Adding an arc adds its whole orbit (one image per translate of the tree), which keeps the state
    invariant, so the completion test needs one max-flow per gpu orbit rather than one per gpu. The test
    is run for the candidate multiplicity and, if it fails, for smaller ones by bisection.

    A tree class here has one auxiliary node per group element (an int64 array, element i the aux of the
    i-th translate), and every orbit update (remaining capacities, aux arcs) is one array operation over
    the group: the per-arc work is then a few numpy calls, not |group| Python steps, which keeps the time
    proportional to the trees' arcs as clusters grow."""

    def __init__(self, num_compute: int, capacity: dict[tuple[int, int], int], copies: Sequence[int],
                 group: list[list[int]], batch_size: int | None = None) -> None:
        super().__init__(num_compute, capacity, copies)
        self.group = [g[:num_compute] for g in group]
        self.batch_size = SYMMETRIC_BATCH if batch_size is None else batch_size
        # images[v, i]: where the i-th group element sends gpu v
        self.images = np.asarray(self.group, dtype=np.int64).T.copy()
        ordered = np.sort(self.images, axis=1)
        if len(self.group) > 1 and not (ordered[:, 1:] > ordered[:, :-1]).all():
            raise ValueError("the symmetric packer needs a group that moves gpus freely")
        self.representatives = sorted(set(self.images.min(axis=1).tolist()))
        keys = sorted(capacity)  # the solver's first arcs, in this order: arc (x, y) has index keys.index((x, y))
        self.arc_keys = np.asarray([x * num_compute + y for x, y in keys], dtype=np.int64)
        self.remaining_by_arc = np.asarray([capacity[key] for key in keys], dtype=np.int64)
        self.remaining = _ArcValues(self.arc, self.remaining_by_arc)
        # Aux nodes come in blocks, one node per group element (element i's aux is the block's i-th node):
        # per block, each node's arc to each gpu (-1: none yet) and its arc from the source.
        self.aux_base = self.next_node
        self.members = np.arange(len(self.group))
        self.block_arcs: list[np.ndarray] = []
        self.block_sources: list[np.ndarray] = []
        self.free_blocks: list[np.ndarray] = []

    def roots(self) -> list[int]:
        return [r for r in self.representatives if self.unstarted[r]]

    # ------------------------------------------------------------------- orbits as arrays
    def _image_arcs(self, x: int, y: int) -> np.ndarray:
        """Solver arcs of the images of (x, y), one per group element."""
        return np.searchsorted(self.arc_keys, self.images[x] * self.n + self.images[y])

    def _new_auxes(self, copies: int, nodes: Sequence[int]) -> np.ndarray:
        """One aux node per group element, each joined to the images of ``nodes`` under its element."""
        if self.free_blocks:
            auxes = self.free_blocks.pop()
            self.solver.fill_capacities(self.block_sources[self._block(auxes)], copies)
        else:
            count = len(self.group)
            auxes = np.arange(self.next_node, self.next_node + count, dtype=np.int64)
            self.next_node += count
            self.solver.num_nodes = self.next_node
            self.block_arcs.append(np.full((count, self.n), -1, dtype=np.int64))
            self.block_sources.append(self.solver.add_arcs(np.full(count, self.source, dtype=np.int64), auxes, copies))
        for v in nodes:
            self._aux_to_images(auxes, v, INFINITY)
        return auxes

    def _block(self, auxes: np.ndarray) -> int:
        return (int(auxes[0]) - self.aux_base) // len(self.group)

    def _aux_to_images(self, auxes: np.ndarray, v: int, capacity: int) -> None:
        """Set the arc from each aux to its element's image of ``v`` to ``capacity`` (adding it if new)."""
        table = self.block_arcs[self._block(auxes)]
        heads = self.images[v]
        existing = table[self.members, heads]
        have = existing >= 0
        if have.all():
            self.solver.fill_capacities(existing, capacity)
            return
        self.solver.fill_capacities(existing[have], capacity)
        missing = ~have
        table[self.members[missing], heads[missing]] = self.solver.add_arcs(auxes[missing], heads[missing], capacity)

    def _free_block(self, auxes: np.ndarray) -> None:
        block = self._block(auxes)
        self.solver.fill_capacities(self.block_sources[block], 0)
        arcs = self.block_arcs[block].ravel()
        self.solver.fill_capacities(arcs[arcs >= 0], 0)
        self.free_blocks.append(auxes)

    def _finish(self, tree: TreeClass, auxes: list[int]) -> None:
        block = np.asarray(auxes, dtype=np.int64)
        self.unfinished -= tree.copies * len(block)
        self._free_block(block)

    def _start(self, root: int) -> tuple[TreeClass, list[int]]:
        tree = TreeClass(root, self.unstarted[root], [], [root])
        roots = self.images[root].tolist()
        for r in roots:
            self.unstarted[r] = 0
        self.solver.fill_capacities(np.asarray([self.root_arc[r] for r in roots], dtype=np.int64), 0)
        return tree, self._new_auxes(tree.copies, [root])  # type: ignore[return-value]

    def _passes(self) -> bool:
        return all(self.solver.max_flow(self.source, v) >= self.unfinished for v in self.representatives)

    def _apply(self, tree: TreeClass, auxes: list[int], x: int, y: int, mu: int) -> list[int]:
        block = np.asarray(auxes, dtype=np.int64)
        rest = np.zeros(0, dtype=np.int64)
        if mu < tree.copies:
            rest = self._new_auxes(tree.copies - mu, tree.nodes)
            self.solver.fill_capacities(self.block_sources[self._block(block)], mu)
        arcs = self._image_arcs(x, y)
        self.remaining_by_arc[arcs] -= mu
        self.solver.fill_capacities(arcs, self.remaining_by_arc[arcs])
        self._aux_to_images(block, y, INFINITY)
        return rest  # type: ignore[return-value]

    def _revert(self, tree: TreeClass, auxes: list[int], x: int, y: int, mu: int, rest: list[int]) -> None:
        block = np.asarray(auxes, dtype=np.int64)
        if len(rest):
            self._free_block(np.asarray(rest, dtype=np.int64))
        arcs = self._image_arcs(x, y)
        self.remaining_by_arc[arcs] += mu
        self.solver.fill_capacities(arcs, self.remaining_by_arc[arcs])
        self._aux_to_images(block, y, 0)
        self.solver.fill_capacities(self.block_sources[self._block(block)], tree.copies)

    def _orbit_remaining(self, x: int, y: int) -> int:
        """The least remaining capacity over the images of (x, y)."""
        return int(self.remaining_by_arc[self._image_arcs(x, y)].min())

    def _extend(self, tree: TreeClass, auxes: list[int], x: int, y: int,
                stack: list[tuple[TreeClass, list[int]]]) -> int:
        top = min(tree.copies, self._orbit_remaining(x, y))
        if top <= 0:
            return 0
        rest = self._apply(tree, auxes, x, y, top)
        passed = self._passes()
        if not passed:
            self._revert(tree, auxes, x, y, top, rest)
            low, high = 0, top  # low passes (0 trivially), high fails
            while high - low > 1:
                middle = (low + high) // 2
                rest = self._apply(tree, auxes, x, y, middle)
                ok = self._passes()
                self._revert(tree, auxes, x, y, middle, rest)
                low, high = (middle, high) if ok else (low, middle)
            if low == 0:
                return 0
            top = low
            rest = self._apply(tree, auxes, x, y, top)
        if top < tree.copies:
            stack.append((TreeClass(tree.root, tree.copies - top, list(tree.arcs), list(tree.nodes)), rest))
            tree.copies = top
        return top

    def grow(self, tree: TreeClass, auxes: list[int], stack: list[tuple[TreeClass, list[int]]]) -> None:
        """Grow ``tree`` (and its images) in batches: arcs that every copy can take are added without a
        test, and the condition is tested once per batch. A batch that passes doubles the next one; a
        batch that fails keeps its longest prefix that passes (found by bisection: a prefix of a
        completable state is completable), and its first arc that broke it is retried with the exact
        test, which may give it to fewer copies (splitting the class) or defer it. (Only the state after
        a batch matters: if the rest can be completed from there, it is a valid partial packing however it
        was reached.) So a tree costs a few tests per doubling and per failure, not one per arc.

        Longer than the house limit on purpose: the batch loop and its four nested steps (``push_from``,
        ``add``, ``retry_deferred``, ``resize``, each a few lines) share the growing tree's heap and
        bookkeeping; split apart they would pass all of it back and forth on every arc."""
        inside, depth = self._membership(tree)
        heap: list[tuple[int, int, int, int]] = []
        deferred: list[tuple[int, int, int, int]] = []
        batch: list[tuple[int, int]] = []
        undone: list[tuple[int, int]] = []
        refused: set[tuple[int, int]] = set()  # the deferred arcs: kept out of the heap until progress
        size = self.batch_size

        def push_from(x: int) -> None:
            for y in self.out[x]:
                if not inside[y] and self.remaining[(x, y)] > 0 and (x, y) not in refused:
                    heapq.heappush(heap, (depth[x], -self.remaining[(x, y)], x, y))

        def add(x: int, y: int) -> None:
            tree.arcs.append((x, y))
            tree.nodes.append(y)
            inside[y] = True
            depth[y] = depth[x] + 1
            push_from(y)

        def retry_deferred() -> None:
            for entry in deferred:
                heapq.heappush(heap, entry)
            deferred.clear()
            refused.clear()

        def resize(length: int) -> None:
            """Undo or redo batch arcs until the first ``length`` of them are applied."""
            while len(batch) > length:
                x, y = batch.pop()
                self._revert(tree, auxes, x, y, tree.copies, [])
                tree.arcs.pop()
                tree.nodes.pop()
                inside[y] = False
                del depth[y]
                undone.append((x, y))
            while len(batch) < length:
                x, y = undone.pop()
                self._apply(tree, auxes, x, y, tree.copies)
                batch.append((x, y))
                add(x, y)

        def flush() -> tuple[int, int] | None:
            """Test the batch: None when it passes; else keep its longest passing prefix and return the
            arc that came next (undone)."""
            nonlocal heap, size
            if not batch:
                return None
            if self._passes():
                batch.clear()
                size = min(2 * size, self.n)
                retry_deferred()
                return None
            low, high = 0, len(batch)  # the first `low` arcs pass (0: the state before the batch), `high` fail
            while high - low > 1:
                middle = (low + high) // 2
                resize(middle)
                if self._passes():
                    low = middle
                else:
                    high = middle
            resize(low)
            culprit = undone[-1]
            batch.clear()
            undone.clear()
            size = max(2, low)
            heap = []
            for v in tree.nodes:
                push_from(v)
            if low:  # progress: arcs refused before may fit now (the culprit itself is retried by the caller)
                retry_deferred()
            return culprit

        def exact(x: int, y: int) -> None:
            """Add (x, y) to as many copies as the exact test allows, or defer it."""
            if self._extend(tree, auxes, x, y, stack):
                add(x, y)
                retry_deferred()
            else:
                deferred.append((depth[x], -self.remaining[(x, y)], x, y))
                refused.add((x, y))

        for v in tree.nodes:
            push_from(v)
        while True:
            if len(tree.nodes) == self.n:
                culprit = flush()
                if culprit is None:
                    break
                exact(*culprit)
                continue
            if not heap:
                if batch:
                    culprit = flush()
                    if culprit is not None:
                        exact(*culprit)
                    continue
                raise PackingError(f"no arc can extend the tree of root {tree.root} ({len(tree.nodes)} nodes)")
            item = heapq.heappop(heap)
            _, _, x, y = item
            if inside[y] or self.remaining[(x, y)] <= 0:
                continue
            if self.batch_size > 1 and self._orbit_remaining(x, y) >= tree.copies:
                self._apply(tree, auxes, x, y, tree.copies)
                batch.append((x, y))
                add(x, y)
                if len(batch) >= size:
                    culprit = flush()
                    if culprit is not None:
                        exact(*culprit)
                continue
            culprit = flush()
            if culprit is not None:
                exact(*culprit)
                continue
            exact(x, y)
        self._finish(tree, auxes)

    def pack(self) -> list[TreeClass]:
        done = super().pack()
        ends = [([x for x, _ in tree.arcs], [y for _, y in tree.arcs]) for tree in done]
        expanded: list[TreeClass] = []
        for g in self.group:
            image = g.__getitem__
            for tree, (tails, heads) in zip(done, ends, strict=True):
                arcs = list(zip(map(image, tails), map(image, heads), strict=True))
                expanded.append(TreeClass(g[tree.root], tree.copies, arcs, list(map(image, tree.nodes))))
        expanded.sort(key=lambda tree: tree.root)
        return expanded


def pack_trees(num_compute: int, capacity: dict[tuple[int, int], int], copies: Sequence[int],
               group: list[list[int]] | None = None) -> tuple[list[TreeClass], int]:
    """Pack ``copies[r]`` spanning out-trees rooted at each gpu r; return the tree classes and the flow count.

    With ``group`` (permutations of an automorphism group of the capacities and copies that moves gpus
    freely) only one root per gpu orbit is packed and its trees are copied by the group.

    Examples
    --------
    >>> classes, _ = pack_trees(3, {(0, 1): 2, (1, 2): 2, (2, 0): 2}, [1, 1, 1])
    >>> [(c.root, c.arcs) for c in classes]
    [(0, [(0, 1), (1, 2)]), (1, [(1, 2), (2, 0)]), (2, [(2, 0), (0, 1)])]
    """
    if group is None:
        classes, _, calls = run_packer(num_compute, capacity, copies,
                                       compiled=compiled_pays(sum(copies) * (num_compute - 1), PACK_SAVING_US))
        return classes, calls
    packer = _SymmetricPacker(num_compute, capacity, copies, group)
    classes = packer.pack()
    return classes, packer.solver.calls


#: What the compiled packer (:mod:`~synth.algorithms.forest.packing_kernel`) saves per tree arc over the
#: Python packer (µs, 2-core machine): on a first packing, whose completion tests are few and cheap, and
#: in the depth pass, which packs pairs of roots again on nearly full capacities.
PACK_SAVING_US = 2.0
DEPTH_PASS_SAVING_US = 30.0
#: The compiled packer's one-time cost in a process (seconds, 2-core machine): numba's import, then
#: loading the kernel's cached machine code.
NUMBA_IMPORT_S = 0.6
KERNEL_LOAD_S = 0.4


def compiled_pays(arcs: int, saving_us: float) -> bool:
    """True when growing about ``arcs`` tree arcs with the compiled packer, at ``saving_us`` saved per
    arc, repays what this process has yet to pay for it (numba's import where no module has imported it,
    the kernel's load where it is not loaded). Both packers give the same trees, so this decides time only.

    Examples
    --------
    >>> compiled_pays(10**6, DEPTH_PASS_SAVING_US)  # a depth pass of a million arcs: about 30 s saved
    True
    """
    import sys

    pending = 0.0 if "synth.algorithms.forest.packing_kernel" in sys.modules else \
        KERNEL_LOAD_S + (0.0 if "numba" in sys.modules else NUMBA_IMPORT_S)
    return arcs * saving_us * 1e-6 > pending


def run_packer(num_compute: int, capacity: Mapping[tuple[int, int], int], copies: Sequence[int],
               root_order: Sequence[int] | None = None, depth_bound: _DepthBound | None = None,
               hops: Mapping[tuple[int, int], int] | None = None, arc_limit: int | None = None,
               compiled: bool = False) -> tuple[list[TreeClass], int, int]:
    """Pack the trees without symmetry: the tree classes, the arcs grown and the max-flow count.

    ``compiled``: with :func:`synth.algorithms.forest.packing_kernel.pack`, which returns the same trees
    as the Python packer (:class:`_Packer`) in a fraction of its time. Raises :class:`PackingError`, and
    the depth bound's and arc limit's signals, as the Python packer does.

    Examples
    --------
    >>> capacity = {(0, 1): 2, (1, 2): 2, (2, 0): 2}
    >>> python, grown, _ = run_packer(3, capacity, [1, 1, 1])
    >>> run_packer(3, capacity, [1, 1, 1], compiled=True)[0] == python, grown
    (True, 6)
    """
    if not compiled:
        packer = _Packer(num_compute, dict(capacity), copies, root_order, depth_bound, hops, arc_limit)
        try:
            return packer.pack(), packer.grown, packer.solver.calls
        except _PackerSignal as stopped:
            stopped.grown = packer.grown
            raise
    from synth.algorithms.forest import packing_kernel

    keys = sorted(capacity)
    length = {} if hops is None else hops
    tails = np.fromiter((x for x, _ in keys), dtype=np.int64, count=len(keys))
    heads = np.fromiter((y for _, y in keys), dtype=np.int64, count=len(keys))
    caps = np.fromiter((capacity[key] for key in keys), dtype=np.int64, count=len(keys))
    arc_hops = np.fromiter((length.get(key, 1) for key in keys), dtype=np.int64, count=len(keys))
    order = np.asarray(range(num_compute) if root_order is None else root_order, dtype=np.int64)
    if depth_bound is None:
        old, mode = np.zeros(1, dtype=np.int64), 0
    else:
        old, mode = np.asarray(depth_bound.old, dtype=np.int64), 2 if depth_bound.lexicographic else 1
    outcome, grown, calls, stuck_root, stuck_nodes, roots, counts, arcs = packing_kernel.pack(
        num_compute, tails, heads, caps, arc_hops, np.asarray(copies, dtype=np.int64), order, old, mode,
        -1 if arc_limit is None else arc_limit, max(max(copies, default=1), 1))
    if outcome == packing_kernel.STUCK:
        raise PackingError(f"no arc can extend the tree of root {stuck_root} ({stuck_nodes} nodes)")
    if outcome != packing_kernel.DONE:
        stop = _TooDeep() if outcome == packing_kernel.TOO_DEEP else _OverBudget()
        stop.grown = int(grown)
        raise stop
    classes = []
    width = num_compute - 1
    tails_list, heads_list = tails.tolist(), heads.tolist()
    for k, (root, count) in enumerate(zip(roots.tolist(), counts.tolist(), strict=True)):
        indices = arcs[k * width:(k + 1) * width].tolist()
        tree_arcs = [(tails_list[i], heads_list[i]) for i in indices]
        classes.append(TreeClass(root, count, tree_arcs, [root, *(heads_list[i] for i in indices)]))
    return classes, int(grown), int(calls)


#: Most tree arcs :func:`shallower_trees` may pack again in all (its attempts stop there): the pass costs
#: time proportional to it, and on 32 gpus with a few trees per root it settles long before.
SHALLOW_ARC_BUDGET = 150_000
#: A share of the packed trees' arcs (:func:`tree_arcs`) for a quick depth pass (``shallow_share`` of
#: :func:`~synth.algorithms.forest.plan.build_plan`): a pass arc costs about what a packing arc does, so the
#: pass then takes at most about this share of the packing's time, a fifth of the rest of the synthesis or less.
#: That buys about one attempt: on most named systems it finds no pair that helps (on 2 x MI250 the deepest
#: tree goes from 28 arcs to 25, where the full pass reaches 12).
QUICK_SHALLOW_SHARE = 0.15
#: How many of the deepest roots :func:`shallower_trees` tries to pair with a shallow one, each round.
SHALLOW_DEEP_ROOTS = 4


def tree_arcs(classes: Sequence[TreeClass]) -> int:
    """The arcs of the classes, one tree per class: about how many arcs their packing grew.

    Examples
    --------
    >>> tree_arcs([TreeClass(0, 2, [(0, 1), (1, 2)], [0, 1, 2]), TreeClass(1, 1, [(1, 0)], [1, 0])])
    3
    """
    return sum(len(tree.arcs) for tree in classes)


def tree_depths(classes: Sequence[TreeClass], hops: Mapping[tuple[int, int], int] | None = None) -> list[int]:
    """Each class's depth: the longest way from its root to a gpu, in arcs or (with ``hops``) the arcs'
    lengths (1 where not given).

    Examples
    --------
    >>> tree_depths([TreeClass(0, 2, [(0, 1), (1, 2)], [0, 1, 2]), TreeClass(1, 1, [(1, 0), (1, 2)], [1, 0, 2])])
    [2, 1]
    """
    length = {} if hops is None else hops
    depths = []
    for tree in classes:
        depth = {tree.root: 0}
        for parent, child in tree.arcs:
            depth[child] = depth[parent] + length.get((parent, child), 1)
        depths.append(max(depth.values()))
    return depths


def _depth_profile(classes: Sequence[TreeClass], depths: Sequence[int]) -> list[int]:
    """The classes' depths, copies counted, deepest first: the order :func:`shallower_trees` lowers."""
    return sorted((depth for tree, depth in zip(classes, depths, strict=True) for _ in range(tree.copies)),
                  reverse=True)


def _arc_load(classes: Sequence[TreeClass]) -> dict[tuple[int, int], int]:
    """How many of the classes' trees take each arc."""
    load: dict[tuple[int, int], int] = {}
    for tree in classes:
        for arc in tree.arcs:
            load[arc] = load.get(arc, 0) + tree.copies
    return load


def _repack_pair(num_compute: int, capacity: dict[tuple[int, int], int], classes: list[TreeClass],
                 depths: list[int], copies: list[int], pair: tuple[int, int],
                 hops: Mapping[tuple[int, int], int], arc_limit: int | None, compiled: bool = False,
                 load: Mapping[tuple[int, int], int] | None = None,
                 ) -> tuple[tuple[list[TreeClass], list[int]] | None, int]:
    """The roots of ``pair`` packed again on the capacity the other roots' trees leave, either one first:
    the first forest (its classes and their depths) whose depth profile is below the current one, or None;
    and how many arcs were grown to find out.

    The other roots' trees are the same in both forests, so the forests' profiles compare as the pair's
    own trees' profiles do. With ``arc_limit`` a repacking stops as soon as the depths its trees have
    reached show it cannot come out below (:class:`_DepthBound`), and the attempt is given up past
    ``arc_limit`` arcs; without, a repacking stops once a tree is deeper than the pair's deepest.
    ``load``: the trees per arc of all of ``classes`` (:func:`_arc_load`), where the caller has it."""
    inside = [tree.root in pair for tree in classes]
    kept = [tree for tree, own in zip(classes, inside, strict=True) if not own]
    kept_depths = [depth for depth, own in zip(depths, inside, strict=True) if not own]
    old = _depth_profile([tree for tree, own in zip(classes, inside, strict=True) if own],
                         [depth for depth, own in zip(depths, inside, strict=True) if own])
    kept_load = dict(_arc_load(classes) if load is None else load)
    for tree, own in zip(classes, inside, strict=True):
        if own:
            for arc in tree.arcs:
                kept_load[arc] -= tree.copies
    left = {arc: cap - kept_load.get(arc, 0) for arc, cap in capacity.items() if cap > kept_load.get(arc, 0)}
    pair_copies = [copies[r] if r in pair else 0 for r in range(num_compute)]
    grown = 0
    for first, second in (pair, pair[::-1]):
        order = [first, second] + [r for r in range(num_compute) if r not in pair]
        bound = _DepthBound(old, lexicographic=arc_limit is not None)
        try:
            packed, spent, _ = run_packer(num_compute, left, pair_copies, order, bound, hops,
                                          None if arc_limit is None else arc_limit - grown, compiled)
        except _TooDeep as too_deep:
            grown += too_deep.grown
            continue  # its depths cannot compare below the pair's
        except _OverBudget as over:
            return None, grown + over.grown
        grown += spent
        packed_depths = tree_depths(packed, hops)
        if _depth_profile(packed, packed_depths) < old:
            return (kept + packed, kept_depths + packed_depths), grown
    return None, grown


def shallower_trees(num_compute: int, capacity: dict[tuple[int, int], int], classes: list[TreeClass],
                    hops: Mapping[tuple[int, int], int] | None = None,
                    arc_budget: int = SHALLOW_ARC_BUDGET, quick: bool = False) -> list[TreeClass]:
    """The same packing problem's trees, made shallower by packing two roots' trees again.

    The packer grows one root's trees after another, so the last roots take what capacity the others
    left and their trees come out deep (on 2 x MI250, 5 or 6 arcs for the first roots and up to 16 or 25
    for the last); a deep tree fills and drains its pipeline slowly, and a reduction waits on it. This pass
    takes one of the deepest roots' trees and another root's trees out, packs the two roots again on the
    capacity the others leave (either one first; the pair's own trees show it can be done, so Edmonds'
    condition holds), and keeps the result where the forest's depths, deepest first and copies counted,
    compare lower. It repeats until no pair helps or ``arc_budget`` tree arcs have been grown. Every root
    keeps its tree count and no arc carries more than its capacity, so the forest's rate is unchanged;
    only which trees, and how deep, changes. Deterministic.

    ``quick``: stop each attempt as soon as the depths its trees have reached show that it cannot compare
    lower, and give up an attempt that would pass the budget (which then bounds the pass's work however
    small it is). The pass takes the same steps as without, spending fewer arcs on each, so with the same
    budget it takes the same steps or more.

    Examples
    --------
    >>> capacity = {(0, 1): 2, (1, 2): 2, (2, 0): 2, (1, 0): 1, (2, 1): 1, (0, 2): 1}
    >>> classes, _ = pack_trees(3, capacity, [1, 1, 1])
    >>> max(tree_depths(shallower_trees(3, capacity, classes))) <= max(tree_depths(classes))
    True
    """
    classes = list(classes)
    copies = [0] * num_compute
    for tree in classes:
        copies[tree.root] += tree.copies
    roots = [r for r in range(num_compute) if copies[r]]
    if len(roots) < 2:
        return classes
    hops = {} if hops is None else hops
    depths = tree_depths(classes, hops)
    compiled = compiled_pays(arc_budget, DEPTH_PASS_SAVING_US)
    spent = 0
    while spent < arc_budget:
        depth_of = dict.fromkeys(roots, 0)
        for tree, depth in zip(classes, depths, strict=True):
            depth_of[tree.root] = max(depth_of[tree.root], depth)
        improved = None
        load = _arc_load(classes)
        for deep in sorted(roots, key=lambda r: (-depth_of[r], r))[:SHALLOW_DEEP_ROOTS]:
            for other in sorted(roots, key=lambda r: (depth_of[r], r)):
                if other == deep:
                    continue
                if spent >= arc_budget:
                    break
                improved, grown = _repack_pair(num_compute, capacity, classes, depths, copies, (deep, other), hops,
                                               arc_budget - spent if quick else None, compiled, load)
                spent += grown
                if improved is not None:
                    break
            if improved is not None:
                break
        if improved is None:
            break
        classes, depths = improved
    classes.sort(key=lambda tree: tree.root)
    return classes
