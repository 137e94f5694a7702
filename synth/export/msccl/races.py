"""Races in an MSCCL program: happens-before between its executed steps, checked on every buffer position."""

from __future__ import annotations

from bisect import bisect_right

from synth.errors import InputError
from synth.export.msccl.parse import XmlThreadblock
from synth.export.msccl.program import Location


class Races:
    """Happens-before between the executed steps of an MSCCL program, and the race check on buffer positions.

    A step happens after the previous step of its threadblock, after its ``depid``/``deps`` step and,
    for a receive, after the sends whose chunks it receives. Two steps that touch one buffer position of
    a gpu, at least one of them writing, must be ordered so; otherwise the runtime's result depends on
    timing and the import is refused. Each threadblock's steps form a chain, so "a before b" searches
    back from ``b`` over the edges that enter other chains, pruned by execution order.
    """

    def __init__(self, tbs: list[list[XmlThreadblock]], source: str) -> None:
        self.source = source
        self.base: list[int] = []
        total = 0
        for gpu_tbs in tbs:
            self.base.append(total)
            total += len(gpu_tbs)
        self.order: dict[tuple[int, int], int] = {}
        #: per threadblock: positions where an edge enters, and the edges' sources, in step order
        self.into: list[list[int]] = [[] for _ in range(total)]
        self.sources: list[list[tuple[int, int]]] = [[] for _ in range(total)]
        self.sent: dict[int, tuple[int, int]] = {}
        self.current: tuple[int, int] = (0, 0)
        self.where: str = ""
        self.access: dict[tuple[int, Location], tuple[tuple[tuple[int, int], str] | None,
                                                       list[tuple[tuple[int, int], str]]]] = {}

    def start(self, g: int, k_tb: int, s: int, where: str) -> None:
        self.current = (self.base[g] + k_tb, s)
        self.where = where
        self.order[self.current] = len(self.order)

    def edge(self, a: tuple[int, int]) -> None:
        """``a`` happens before the current step."""
        tb, s = self.current
        if a[0] != tb:
            self.into[tb].append(s)
            self.sources[tb].append(a)

    def step_of(self, g: int, k_tb: int, s: int) -> tuple[int, int]:
        return (self.base[g] + k_tb, s)

    def before(self, a: tuple[int, int], b: tuple[int, int]) -> bool:
        if a[0] == b[0]:
            return a[1] < b[1]
        limit = self.order[a]
        explored: dict[int, int] = {}
        stack = [b]
        while stack:
            tb, s = stack.pop()
            low = explored.get(tb, -1)
            if low >= s:
                continue
            explored[tb] = s
            into, sources = self.into[tb], self.sources[tb]
            for k in range(bisect_right(into, low), bisect_right(into, s)):
                source = sources[k]
                if source[0] == a[0]:
                    if source[1] >= a[1]:
                        return True
                elif self.order[source] > limit:
                    stack.append(source)
        return False

    def _race(self, other: tuple[tuple[int, int], str], location: Location, what: str) -> None:
        raise InputError(self.source, self.where, f"{what} buffer {location[0]}[{location[1]}] and {other[1]} also "
                         "touches it, with nothing ordering the two (a race: add a depid/deps or a nop)")

    def read(self, g: int, location: Location) -> None:
        writer, readers = self.access.get((g, location), (None, []))
        if writer is not None and writer[0] != self.current and not self.before(writer[0], self.current):
            self._race(writer, location, "reads")
        readers.append((self.current, self.where))
        self.access[(g, location)] = (writer, readers)

    def write(self, g: int, location: Location) -> None:
        writer, readers = self.access.get((g, location), (None, []))
        for other in ([writer] if writer is not None else []) + readers:
            if other[0] != self.current and not self.before(other[0], self.current):
                self._race(other, location, "writes")
        self.access[(g, location)] = ((self.current, self.where), [])
