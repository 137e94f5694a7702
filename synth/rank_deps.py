"""Dependencies of a schedule's transfers as one rank can see them (for per-rank programs and traces).

A rank's program (a Chakra trace, an MSCCL threadblock) can only wait on transfers that rank takes part
in; :class:`NearestTouching` replaces every other dependency by its nearest ancestors that do.
"""

from __future__ import annotations

_EMPTY: frozenset[int] = frozenset()


class NearestTouching:
    """Dependencies of a transfer as one rank can see them: a dep that has the rank as an end stays, a
    dep that does not is replaced by its own nearest such ancestors (sound: they all precede it).

    Memoized per (transfer, rank), so a whole schedule costs about one pass per rank involved. When no
    transfer has more than one dependency (allgather, broadcast, trees: the dependencies form a forest),
    the answer for either end of every transfer is found up front in one depth-first pass over that
    forest, so asking for an end costs O(1) however deep the chains are.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> schedule = synthesize(load_topology("switch:n=4"), "allgather", "ring")
    >>> NearestTouching(schedule.transfers).deps(5, schedule.transfers[5].src) == list(schedule.transfers[5].deps)
    True
    """

    def __init__(self, transfers: tuple) -> None:
        from synth import limits

        self.transfers = transfers
        self._memo: dict[int, dict[int, frozenset[int]]] = {}  # rank -> transfer -> its nearest ones
        self._ends: tuple[list[int], list[int]] | None | bool = False  # False: not worked out yet
        # the sets formed cost time and memory in proportion to their sizes: bounded like the verifier's search
        self._work = 0
        self._budget = limits.limit_value("max_verify_steps")

    def _forest_ends(self) -> tuple[list[int], list[int]] | None:
        """Per transfer, its nearest touching ancestor for its source and for its destination (-1: none),
        when the dependencies form a forest; else None."""
        if self._ends is False:
            self._ends = _forest_nearest(self.transfers)
        return self._ends  # type: ignore[return-value]

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
            self._work += len(deps) + len(union)
            if self._work > self._budget:
                from synth import limits

                limits.check("max_verify_steps", self._work, f"working out which of the {len(transfers):,} "
                             f"transfers each rank waits on", hint="give the transfers fewer, more direct deps")
        return memo[start]

    def answers_ends(self) -> bool:
        """True when asking for either end of a transfer costs O(1) (the dependencies form a forest)."""
        return self._forest_ends() is not None

    def forget(self, rank: int) -> None:
        """Drop what was memoized for ``rank`` (to keep memory low when ranks are asked one at a time)."""
        self._memo.pop(rank, None)

    def deps(self, tid: int, rank: int) -> list[int]:
        """The deps of transfer ``tid`` as rank ``rank`` sees them, sorted."""
        t = self.transfers[tid]
        if rank == t.src or rank == t.dst:
            ends = self._forest_ends()
            if ends is not None:
                nearest = ends[0][tid] if rank == t.src else ends[1][tid]
                return [] if nearest < 0 else [nearest]
        found: set[int] = set()
        for dep in self.transfers[tid].deps:
            found |= self._near(dep, rank)
        self._work += len(found)
        return sorted(found)


def _forest_nearest(transfers: tuple) -> tuple[list[int], list[int]] | None:
    """For dependencies that form a forest (no transfer with two), each transfer's nearest ancestor that
    has its source as an end, and the one that has its destination as an end (-1 when none): one
    depth-first pass that keeps, per rank, the latest transfer on the current path touching it."""
    if any(len(t.deps) > 1 for t in transfers):
        return None
    count = len(transfers)
    children: dict[int, list[int]] = {}
    roots = []
    for t in transfers:
        if t.deps:
            children.setdefault(t.deps[0], []).append(t.id)
        else:
            roots.append(t.id)
    near_src, near_dst = [-1] * count, [-1] * count
    top: dict[int, int] = {}  # rank -> latest transfer touching it on the path from the root
    stack: list[int] = [~tid for tid in reversed(roots)]  # ~tid: enter tid; tid: leave it
    undo: list[tuple[int, int, int]] = []  # per entered transfer: (src's, dst's) previous tops
    while stack:
        item = stack.pop()
        if item >= 0:
            src, old_src, old_dst = undo.pop()
            t = transfers[item]
            top[t.dst] = old_dst
            top[src] = old_src
            continue
        tid = ~item
        t = transfers[tid]
        near_src[tid] = top.get(t.src, -1)
        near_dst[tid] = top.get(t.dst, -1)
        undo.append((t.src, near_src[tid], near_dst[tid]))
        top[t.src] = tid
        top[t.dst] = tid
        stack.append(tid)
        stack.extend(~child for child in reversed(children.get(tid, ())))
    return near_src, near_dst
