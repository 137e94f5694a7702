"""Dependencies of a schedule's transfers as one rank can see them (for per-rank programs and traces).

A rank's program (a Chakra trace, an MSCCL threadblock) can only wait on transfers that rank takes part
in; :class:`NearestTouching` replaces every other dependency by its nearest ancestors that do.
"""

from __future__ import annotations

_EMPTY: frozenset[int] = frozenset()


class NearestTouching:
    """Dependencies of a transfer as one rank can see them: a dep that has the rank as an end stays, a
    dep that does not is replaced by its own nearest such ancestors (sound: they all precede it).

    Memoized per (transfer, rank), so a whole schedule costs about one pass per rank involved.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> schedule = synthesize(load_topology("switch:n=4"), "allgather", "ring")
    >>> NearestTouching(schedule.transfers).deps(5, schedule.transfers[5].src) == list(schedule.transfers[5].deps)
    True
    """

    def __init__(self, transfers: tuple) -> None:
        self.transfers = transfers
        self._memo: dict[int, dict[int, frozenset[int]]] = {}  # rank -> transfer -> its nearest ones

    def _near(self, start: int, rank: int) -> frozenset[int]:
        memo = self._memo.get(rank)
        if memo is None:
            memo = self._memo[rank] = {}
        transfers = self.transfers
        stack = [start]
        while stack:
            tid = stack[-1]
            if tid in memo:
                stack.pop()
                continue
            t = transfers[tid]
            if t.src == rank or t.dst == rank:
                memo[tid] = frozenset((tid,))
                stack.pop()
                continue
            deps = t.deps
            waiting = False
            for dep in deps:
                if dep not in memo:
                    stack.append(dep)
                    waiting = True
            if waiting:
                continue
            stack.pop()
            if len(deps) == 1:
                memo[tid] = memo[deps[0]]
                continue
            union = _EMPTY
            for dep in deps:  # the union, reusing a parent's set where it holds the others
                found = memo[dep]
                if not found <= union:
                    union = found if union <= found else union | found
            memo[tid] = union
        return memo[start]

    def forget(self, rank: int) -> None:
        """Drop what was memoized for ``rank`` (to keep memory low when ranks are asked one at a time)."""
        self._memo.pop(rank, None)

    def deps(self, tid: int, rank: int) -> list[int]:
        """The deps of transfer ``tid`` as rank ``rank`` sees them, sorted."""
        found: set[int] = set()
        for dep in self.transfers[tid].deps:
            found |= self._near(dep, rank)
        return sorted(found)
