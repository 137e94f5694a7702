"""The arborescence packer's compiled engine: :class:`~synth.algorithms.forest.packing._Packer` in numba.

:func:`pack` grows the trees as the Python packer does (:mod:`synth.algorithms.forest.packing` has the
method): the same roots in the same order, the same heap of candidate arcs (shallowest, then widest, then
by tail and head), the same splits of a class, the same depth bound and arc limit. Each step's choice
depends only on max-flow values, which are unique, so both packers return the same trees; the tests hold
them to that on random capacities. The difference is the cost of a step: one compiled Dinic max-flow
(stopped as soon as the flow reaches what the step needs: ``mu`` is ``min(limit, flow - unfinished)``)
instead of a solver call and the Python around it.

The flow network is fixed once: gpus ``0..n-1``, the source ``n``, then ``max_aux`` auxiliary nodes (a
live class has one; a finished one's is reused, as the Python packer's free list does). Its arcs are the
gpu arcs, source to each root, source to each auxiliary node and every auxiliary node to every gpu (0
where the class does not hold the gpu), each with its reverse. The live classes of one root split its
copies, so ``max_aux`` is at most the largest root's copies.

:mod:`synth.algorithms.forest.packing` imports this module only for packings large enough to repay
numba's import and the first compile; compiled with ``cache=True`` as :mod:`synth.flow_kernels` is.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

#: :func:`pack`'s outcomes.
DONE, TOO_DEEP, OVER_BUDGET, STUCK = 0, 1, 2, 3
#: An unbounded capacity (the value of :data:`synth.cuts.network.INFINITY`).
UNBOUNDED = 1 << 60


def _compiled(function: Callable[..., Any]) -> Any:
    """``function`` compiled in nopython mode, cached on disk where numba finds a writable folder."""
    try:
        return njit(cache=True, nogil=True)(function)
    except RuntimeError:  # numba found no writable cache location
        return njit(nogil=True)(function)


@_compiled
def _max_flow(adj_start: np.ndarray, adj_fixed: np.ndarray, adj: np.ndarray, head: np.ndarray, cap: np.ndarray,
              res: np.ndarray, level: np.ndarray, cursor: np.ndarray, ends: np.ndarray, queue: np.ndarray,
              path: np.ndarray, touched: np.ndarray, n: int, active_aux: int, source: int, sink: int,
              target: int) -> int:
    """The maximum flow from ``source`` to ``sink``, or ``target`` where it is at least that (Dinic).

    ``res`` equals ``cap`` before and after. A gpu's and the source's arcs list the fixed ones first
    (``adj_fixed`` of them), then one per auxiliary node; only the ``active_aux`` first auxiliary nodes
    have ever been used, so the rest are not visited."""
    num_nodes = level.size
    for u in range(num_nodes):
        ends[u] = adj_start[u + 1] if u > n else adj_start[u] + adj_fixed[u] + active_aux
    flow = 0
    num_touched = 0
    overflow = False
    while flow < target:
        level[:] = -1
        level[source] = 0
        queue[0] = source
        first, last = 0, 1
        while first < last and level[sink] < 0:
            u = queue[first]
            first += 1
            for k in range(adj_start[u], ends[u]):
                e = adj[k]
                v = head[e]
                if res[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue[last] = v
                    last += 1
        if level[sink] < 0:
            break
        for u in range(num_nodes):
            cursor[u] = adj_start[u]
        while flow < target:
            depth = 0
            u = source
            while u != sink:
                advanced = False
                while cursor[u] < ends[u]:
                    e = adj[cursor[u]]
                    v = head[e]
                    if res[e] > 0 and level[v] == level[u] + 1:
                        path[depth] = e
                        depth += 1
                        u = v
                        advanced = True
                        break
                    cursor[u] += 1
                if not advanced:
                    if depth == 0:
                        break
                    level[u] = -1  # a dead end in this phase
                    depth -= 1
                    u = head[path[depth] ^ 1]
                    cursor[u] += 1
            if u != sink:
                break
            pushed = target - flow
            for d in range(depth):
                if res[path[d]] < pushed:
                    pushed = res[path[d]]
            for d in range(depth):
                e = path[d]
                res[e] -= pushed
                res[e ^ 1] += pushed
                if num_touched < touched.size:
                    touched[num_touched] = e
                    num_touched += 1
                else:
                    overflow = True
            flow += pushed
    if overflow:
        res[:] = cap
    else:
        for k in range(num_touched):
            e = touched[k]
            res[e] = cap[e]
            res[e ^ 1] = cap[e ^ 1]
    return min(flow, target)


@_compiled
def _hopeless(done: np.ndarray, num_done: int, depth: int, copies: int, old: np.ndarray, scratch: np.ndarray,
              lexicographic: bool) -> bool:
    """:meth:`synth.algorithms.forest.packing._DepthBound.hopeless`."""
    if not lexicographic or depth > old[0]:
        return depth > old[0]
    size = old.size
    scratch[:] = 0
    count = 0
    for i in range(num_done):
        if count < size:
            scratch[count] = done[i]
            count += 1
    for _ in range(copies):
        if count < size:
            scratch[count] = depth
            count += 1
    scratch[:] = np.sort(scratch)[::-1]
    for i in range(size):
        if scratch[i] != old[i]:
            return scratch[i] > old[i]
    return True


@_compiled
def _network(n: int, arc_tail: np.ndarray, arc_head: np.ndarray, arc_cap: np.ndarray, copies: np.ndarray,
             max_aux: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The flow network's arcs (head and capacity per arc; arc ``2i`` is forward, ``2i + 1`` its reverse)
    and adjacency (start, fixed count and arc per node): gpu arcs, then source to each root, source to
    each auxiliary node and each auxiliary node to each gpu, as :func:`arc_ids` numbers them."""
    source = n
    num_nodes = n + 1 + max_aux
    root_base, aux_source_base, aux_base, total = arc_ids(arc_tail.size, n, max_aux)
    head = np.empty(2 * total, dtype=np.int64)
    tail = np.empty(2 * total, dtype=np.int64)
    cap = np.zeros(2 * total, dtype=np.int64)
    for i in range(arc_tail.size):
        tail[2 * i], head[2 * i], cap[2 * i] = arc_tail[i], arc_head[i], arc_cap[i]
    for r in range(n):
        i = root_base + r
        tail[2 * i], head[2 * i], cap[2 * i] = source, r, copies[r]
    for a in range(max_aux):
        i = aux_source_base + a
        tail[2 * i], head[2 * i] = source, n + 1 + a
        for v in range(n):
            i = aux_base + a * n + v
            tail[2 * i], head[2 * i] = n + 1 + a, v
    for i in range(total):
        tail[2 * i + 1], head[2 * i + 1] = head[2 * i], tail[2 * i]
    # a gpu's and the source's fixed arcs first, then one per auxiliary node in its order
    degree = np.zeros(num_nodes + 1, dtype=np.int64)
    for e in range(2 * total):
        degree[tail[e] + 1] += 1
    adj_start = np.cumsum(degree)
    adj_fixed = np.zeros(num_nodes, dtype=np.int64)
    adj = np.empty(2 * total, dtype=np.int64)
    fill = adj_start[:-1].copy()
    for e in range(2 * aux_source_base):  # gpu arcs, root arcs and their reverses
        adj_fixed[tail[e]] += 1
        adj[fill[tail[e]]] = e
        fill[tail[e]] += 1
    for a in range(max_aux):
        for e in [2 * (aux_source_base + a)] + [2 * (aux_base + a * n + v) for v in range(n)]:
            for f in (e, e + 1):
                adj[fill[tail[f]]] = f
                fill[tail[f]] += 1
    return head, cap, adj_start, adj_fixed, adj


@_compiled
def arc_ids(num_arcs: int, n: int, max_aux: int) -> tuple[int, int, int, int]:
    """Where the flow network's arc groups start: source to root ``r`` is arc ``root_base + r``, source to
    auxiliary node ``a`` is ``aux_source_base + a``, auxiliary node ``a`` to gpu ``v`` is
    ``aux_base + a * n + v``; and the arc count (each doubled by its reverse)."""
    return num_arcs, num_arcs + n, num_arcs + n + max_aux, num_arcs + n + max_aux + max_aux * n


@_compiled
def _room(table: np.ndarray, class_arcs: np.ndarray, order: np.ndarray, count: int,
          block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The class arrays with room for one more class than ``count`` (doubled where full)."""
    if count < table.shape[0]:
        return table, class_arcs, order
    rows = 2 * table.shape[0]
    bigger = np.empty((rows, table.shape[1]), dtype=np.int64)
    bigger[:count] = table[:count]
    arcs = np.empty(rows * block, dtype=np.int64)
    arcs[:count * block] = class_arcs[:count * block]
    orders = np.empty((rows, 2), dtype=np.int64)
    orders[:count] = order[:count]
    return bigger, arcs, orders


@_compiled
def _new_class(table: np.ndarray, class_arcs: np.ndarray, order: np.ndarray, count: int, block: int,
               free_aux: np.ndarray, num_free: int,
               next_aux: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """Room for class ``count`` (:func:`_room`) and an auxiliary node for it: the last one freed, else a
    new one. Returns the arrays, the node, and the free count and next new node after."""
    table, class_arcs, order = _room(table, class_arcs, order, count, block)
    if num_free > 0:
        return table, class_arcs, order, free_aux[num_free - 1], num_free - 1, next_aux
    return table, class_arcs, order, next_aux, num_free, next_aux + 1


#: Columns of :func:`pack`'s class table.
_ROOT, _COPIES, _AUX, _SIZE = 0, 1, 2, 3


@_compiled
def pack(n: int, arc_tail: np.ndarray, arc_head: np.ndarray, arc_cap: np.ndarray, arc_hop: np.ndarray,
         copies: np.ndarray, root_order: np.ndarray, old: np.ndarray, bound_mode: int, arc_limit: int,
         max_aux: int) -> tuple[int, int, int, int, int, np.ndarray, np.ndarray, np.ndarray]:
    """Pack ``copies[r]`` out-trees per root ``r`` (roots in ``root_order``) within the arcs' capacities.

    The arcs (``arc_tail``, ``arc_head``, ``arc_cap``, ``arc_hop`` its length) are sorted by (tail, head).
    ``bound_mode``: 0 no depth bound, 1 stop once a tree is deeper than ``old[0]``, 2 stop once the depths
    reached compare at or above ``old`` (deepest first, copies counted); ``arc_limit`` < 0: no limit.

    Returns (outcome, arcs grown, max-flow count, the stuck root and its node count (for :data:`STUCK`),
    then per finished class its root and copies (in finishing order) and its arcs' indices, ``n - 1``
    per class).

    Longer than the house limit on purpose: the packer's steps (start a root's class, grow it, split it,
    finish it) share a dozen arrays and run once per candidate arc; numba calls between them would pass
    every array again on each step.
    """
    source = n
    num_nodes = n + 1 + max_aux
    root_base, aux_source_base, aux_base, _ = arc_ids(arc_tail.size, n, max_aux)
    head, cap, adj_start, adj_fixed, adj = _network(n, arc_tail, arc_head, arc_cap, copies, max_aux)
    res = cap.copy()  # equal to cap between max-flows: every capacity change below sets both
    level = np.empty(num_nodes, dtype=np.int64)
    ends = np.empty(num_nodes, dtype=np.int64)
    cursor = np.empty(num_nodes, dtype=np.int64)
    queue = np.empty(num_nodes, dtype=np.int64)
    path = np.empty(num_nodes, dtype=np.int64)
    touched = np.empty(64 * num_nodes, dtype=np.int64)
    out_start = np.zeros(n + 1, dtype=np.int64)
    for i in range(arc_tail.size):
        out_start[arc_tail[i] + 1] += 1
    out_start = np.cumsum(out_start)

    remaining = arc_cap.copy()
    unstarted = copies.copy()
    unfinished = np.sum(copies)
    free_aux = np.empty(max_aux, dtype=np.int64)
    num_free = 0
    next_aux = 0
    # per class: root, copies, aux, arcs grown (their indices in a block of n - 1 in ``class_arcs``);
    # order[k] = (finished class k, class on the stack at height k)
    block = max(n - 1, 1)
    table = np.empty((16, 4), dtype=np.int64)
    class_arcs = np.empty(16 * block, dtype=np.int64)
    order = np.empty((16, 2), dtype=np.int64)
    num_classes = 0
    num_finished = 0
    done_depths = np.zeros(max(old.size, 1), dtype=np.int64)
    num_done = 0
    scratch = np.zeros(max(old.size, 1), dtype=np.int64)
    inside = np.zeros(n, dtype=np.bool_)
    depth = np.zeros(n, dtype=np.int64)
    grown = 0
    calls = 0
    nothing = np.empty(0, dtype=np.int64)

    for root in root_order:
        if unstarted[root] == 0:
            continue
        # a class of all the root's copies, its auxiliary node on the root
        table, class_arcs, order, aux, num_free, next_aux = _new_class(table, class_arcs, order, num_classes, block,
                                                                       free_aux, num_free, next_aux)
        c = num_classes
        num_classes += 1
        table[c, _ROOT], table[c, _COPIES], table[c, _AUX], table[c, _SIZE] = root, unstarted[root], aux, 0
        unstarted[root] = 0
        e = 2 * (root_base + root)
        cap[e] = res[e] = 0
        e = 2 * (aux_source_base + aux)
        cap[e] = res[e] = table[c, _COPIES]
        e = 2 * (aux_base + aux * n + root)
        cap[e] = res[e] = UNBOUNDED
        order[0, 1] = c
        height = 1
        while height > 0:
            height -= 1
            c = order[height, 1]
            # grow class c until it spans every gpu: shallow arcs first, then the widest
            aux = table[c, _AUX]
            inside[:] = False
            inside[table[c, _ROOT]] = True
            depth[table[c, _ROOT]] = 0
            deepest = 0
            for j in range(table[c, _SIZE]):
                i = class_arcs[c * block + j]
                inside[arc_head[i]] = True
                depth[arc_head[i]] = depth[arc_tail[i]] + arc_hop[i]
                deepest = max(deepest, depth[arc_head[i]])
            heap = [(np.int64(0), np.int64(0), np.int64(0))]  # (depth reached, -remaining, arc)
            heap.pop()
            deferred = heap.copy()
            for x in range(n):
                if inside[x]:
                    for i in range(out_start[x], out_start[x + 1]):
                        if not inside[arc_head[i]] and remaining[i] > 0:
                            heapq.heappush(heap, (depth[x] + arc_hop[i], -remaining[i], np.int64(i)))
            nodes = table[c, _SIZE] + 1
            while nodes < n:
                chosen = -1
                while len(heap) > 0:
                    item = heapq.heappop(heap)
                    arc = item[2]
                    x, y = arc_tail[arc], arc_head[arc]
                    if inside[y] or remaining[arc] <= 0:
                        continue
                    # the largest mu: max-flow to y with s -> x and aux -> y unbounded
                    limit = min(table[c, _COPIES], remaining[arc])
                    root_arc = 2 * (root_base + x)
                    aux_arc = 2 * (aux_base + aux * n + y)
                    saved_root = cap[root_arc]
                    cap[root_arc] = res[root_arc] = UNBOUNDED
                    cap[aux_arc] = res[aux_arc] = UNBOUNDED
                    calls += 1
                    flow = _max_flow(adj_start, adj_fixed, adj, head, cap, res, level, cursor, ends, queue, path,
                                     touched, n, next_aux, source, y, unfinished + limit)
                    cap[root_arc] = res[root_arc] = saved_root
                    mu = max(0, min(limit, flow - unfinished))
                    if mu == 0:
                        cap[aux_arc] = res[aux_arc] = 0
                        deferred.append(item)
                        continue
                    if mu < table[c, _COPIES]:
                        # the class splits: mu copies take the arc, the rest wait on the stack
                        table, class_arcs, order, rest_aux, num_free, next_aux = _new_class(
                            table, class_arcs, order, num_classes, block, free_aux, num_free, next_aux)
                        rest = num_classes
                        num_classes += 1
                        size = table[c, _SIZE]
                        table[rest, _ROOT], table[rest, _COPIES] = table[c, _ROOT], table[c, _COPIES] - mu
                        table[rest, _AUX], table[rest, _SIZE] = rest_aux, size
                        class_arcs[rest * block:rest * block + size] = class_arcs[c * block:c * block + size]
                        e = 2 * (aux_source_base + rest_aux)
                        cap[e] = res[e] = table[rest, _COPIES]
                        for v in range(n):
                            if inside[v]:
                                e = 2 * (aux_base + rest_aux * n + v)
                                cap[e] = res[e] = UNBOUNDED
                        order[height, 1] = rest
                        height += 1
                        table[c, _COPIES] = mu
                        e = 2 * (aux_source_base + aux)
                        cap[e] = res[e] = mu
                    remaining[arc] -= mu
                    cap[2 * arc] = res[2 * arc] = remaining[arc]
                    chosen = int(arc)
                    break
                if chosen < 0:
                    return STUCK, grown, calls, table[c, _ROOT], nodes, nothing, nothing, nothing
                x, y = arc_tail[chosen], arc_head[chosen]
                reached = depth[x] + arc_hop[chosen]
                if reached > deepest:
                    deepest = reached
                    if bound_mode > 0 and _hopeless(done_depths, num_done, deepest, table[c, _COPIES], old, scratch,
                                                    bound_mode == 2):
                        return TOO_DEEP, grown, calls, -1, 0, nothing, nothing, nothing
                class_arcs[c * block + table[c, _SIZE]] = chosen
                table[c, _SIZE] += 1
                grown += 1
                if 0 <= arc_limit < grown:
                    return OVER_BUDGET, grown, calls, -1, 0, nothing, nothing, nothing
                nodes += 1
                inside[y] = True
                depth[y] = reached
                for j in range(out_start[y], out_start[y + 1]):
                    if not inside[arc_head[j]] and remaining[j] > 0:
                        heapq.heappush(heap, (depth[y] + arc_hop[j], -remaining[j], np.int64(j)))
                for item in deferred:  # a refused arc may take copies once the tree has grown
                    heapq.heappush(heap, item)
                deferred.clear()
            if bound_mode > 0:
                for _ in range(table[c, _COPIES]):
                    if num_done < done_depths.size:
                        done_depths[num_done] = deepest
                        num_done += 1
            # the class's trees are done: its auxiliary node is freed for the next class
            unfinished -= table[c, _COPIES]
            e = 2 * (aux_source_base + aux)
            cap[e] = res[e] = 0
            for v in range(n):
                e = 2 * (aux_base + aux * n + v)
                cap[e] = res[e] = 0
            free_aux[num_free] = aux
            num_free += 1
            order[num_finished, 0] = c
            num_finished += 1
    roots = np.empty(num_finished, dtype=np.int64)
    counts = np.empty(num_finished, dtype=np.int64)
    arcs = np.empty(num_finished * (n - 1), dtype=np.int64)
    for k in range(num_finished):
        c = order[k, 0]
        roots[k], counts[k] = table[c, _ROOT], table[c, _COPIES]
        arcs[k * (n - 1):(k + 1) * (n - 1)] = class_arcs[c * block:c * block + n - 1]
    return DONE, grown, calls, -1, 0, roots, counts, arcs
