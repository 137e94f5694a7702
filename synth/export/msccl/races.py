"""Races in an MSCCL program: happens-before between its executed steps, checked on every buffer position."""

from __future__ import annotations

from array import array
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
        #: per threadblock (numbered across gpus): its gpu and id, for messages
        self.names: list[tuple[int, int]] = []
        for g, gpu_tbs in enumerate(tbs):
            self.base.append(len(self.names))
            self.names.extend((g, tb.id) for tb in gpu_tbs)
        total = len(self.names)
        #: per threadblock, per step: its position in execution order
        self.order = [array("q", bytes(8 * len(tb.steps))) for gpu_tbs in tbs for tb in gpu_tbs]
        self.executed = 0
        #: per threadblock: positions where an edge enters, and the edges' sources, in step order
        self.into: list[list[int]] = [[] for _ in range(total)]
        self.sources: list[list[tuple[int, int]]] = [[] for _ in range(total)]
        #: per record: the step that sent it (None for a local step's record)
        self.sent: list[tuple[int, int] | None] = []
        self.current: tuple[int, int] = (0, 0)
        #: per (gpu, location): the step that last wrote it, and the steps that read it since
        self.access: dict[tuple[int, Location], tuple[tuple[int, int] | None, list[tuple[int, int]]]] = {}

    def start(self, g: int, k_tb: int, s: int) -> None:
        self.current = (self.base[g] + k_tb, s)
        self.order[self.current[0]][s] = self.executed
        self.executed += 1

    def sent_by(self, record: int) -> None:
        """Record ``record`` is sent by the current step."""
        self.sent.extend([None] * (record - len(self.sent)))
        self.sent.append(self.current)

    def where(self, step: tuple[int, int]) -> str:
        g, tb_id = self.names[step[0]]
        return f"gpu {g} tb {tb_id} step {step[1]}"

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
        order = self.order
        limit = order[a[0]][a[1]]
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
                elif order[source[0]][source[1]] > limit:
                    stack.append(source)
        return False

    def _race(self, other: tuple[int, int], location: Location, what: str) -> None:
        raise InputError(self.source, self.where(self.current), f"{what} buffer {location[0]}[{location[1]}] and "
                         f"{self.where(other)} also touches it, with nothing ordering the two (a race: add a "
                         "depid/deps or a nop)")

    def read(self, g: int, location: Location) -> None:
        key = (g, location)
        writer, readers = self.access.get(key, (None, []))
        if writer is not None and writer != self.current and not self.before(writer, self.current):
            self._race(writer, location, "reads")
        readers.append(self.current)
        self.access[key] = (writer, readers)

    def write(self, g: int, location: Location) -> None:
        writer, readers = self.access.get((g, location), (None, []))
        for other in ([writer] if writer is not None else []) + readers:
            if other != self.current and not self.before(other, self.current):
                self._race(other, location, "writes")
        self.access[(g, location)] = (self.current, [])
