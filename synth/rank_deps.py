"""Dependencies of a schedule's transfers as one rank can see them (for per-rank programs and traces).

A rank's program (a Chakra trace, an MSCCL threadblock) can only wait on transfers that rank takes part
in; :class:`NearestTouching` replaces every other dependency by its nearest ancestors that do.
"""

from __future__ import annotations


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
        self._memo: dict[tuple[int, int], frozenset[int]] = {}

    def _near(self, start: int, rank: int) -> frozenset[int]:
        memo, transfers = self._memo, self.transfers
        stack = [start]
        while stack:
            tid = stack[-1]
            if (tid, rank) in memo:
                stack.pop()
                continue
            t = transfers[tid]
            if t.src == rank or t.dst == rank:
                memo[(tid, rank)] = frozenset((tid,))
                stack.pop()
                continue
            missing = [p for p in t.deps if (p, rank) not in memo]
            if missing:
                stack.extend(missing)
                continue
            parents = [memo[(p, rank)] for p in t.deps]
            memo[(tid, rank)] = parents[0] if len(parents) == 1 else frozenset().union(*parents)
            stack.pop()
        return memo[(start, rank)]

    def deps(self, tid: int, rank: int) -> list[int]:
        """The deps of transfer ``tid`` as rank ``rank`` sees them, sorted."""
        found: set[int] = set()
        for dep in self.transfers[tid].deps:
            found |= self._near(dep, rank)
        return sorted(found)
