"""Small graph routines every layer shares (the basics layer): one deterministic topological order.

Examples
--------
>>> smallest_first_order(range(4), [[2], [2], [3], []])
[0, 1, 2, 3]
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


def smallest_first_order(nodes: Iterable[int], successors: Sequence[Iterable[int]] | Mapping[int, Iterable[int]],
                         key: Callable[[int], Any] | None = None) -> list[int]:
    """A topological order of ``nodes`` (Kahn's algorithm) in which, among the nodes that are ready, the
    smallest goes first (by ``key``, then by node), so the order is the same on every run.

    ``successors[n]`` lists the nodes that must come after ``n``, each once; successors outside ``nodes`` are
    ignored. Nodes on or after a cycle are left out, so a result shorter than ``nodes`` means a cycle.

    Examples
    --------
    >>> smallest_first_order([0, 1, 2], {0: [1], 1: [], 2: [1]})
    [0, 2, 1]
    >>> smallest_first_order([0, 1, 2], {0: [1], 1: [0], 2: []})  # 0 and 1 wait for each other
    [2]
    >>> smallest_first_order([0, 1, 2], {0: [], 1: [], 2: []}, key=lambda n: -n)
    [2, 1, 0]
    """
    members = list(nodes)
    waiting = dict.fromkeys(members, 0)
    for node in members:
        for follower in successors[node]:
            if follower in waiting:
                waiting[follower] += 1
    rank = key if key is not None else (lambda node: 0)
    ready = [(rank(node), node) for node in members if not waiting[node]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for follower in successors[node]:
            if follower in waiting:
                waiting[follower] -= 1
                if not waiting[follower]:
                    heapq.heappush(ready, (rank(follower), follower))
    return order
