"""The second pass of the import: the schedule's buffers (data cells, scratch slots) for every buffer
location, the dependencies as data hazards on them, and the order of the resulting transfers."""

from __future__ import annotations

from bisect import bisect_right

from synth.errors import InputError
from synth.export.msccl.execute import Cell, LogEntry, Record
from synth.export.msccl.program import Location
from synth.graphs import smallest_first_order
from synth.schedule import COPY, REDUCE


class Cells:
    """Second pass of the import: which buffer of the schedule IR holds each buffer location's value.

    A location that must end holding chunk ``c`` (its *home*: the output position of ``c``) writes
    the data cell of ``c``; every other location writes a scratch slot of its own. A chunk's input
    location shares the data cell until the home is written. Copies between locations that share a
    cell are no ops; a value that is overwritten while another location still reads it later is first
    copied to that location's own slot (a local copy). A reduction writes in place when nothing reads
    the old value later, else into a copy. Dependencies are the data hazards on these buffers in
    execution order: a transfer or local op waits for the write of what it reads, and for the
    previous write and the reads since of what it writes (plus the sender's program order).
    """

    def __init__(self, records: list[Record], log: list[LogEntry], homes: list[dict[Location, int]],
                 inputs: list[dict[Location, int]]) -> None:
        self.records = records
        self.log = log
        self.homes = homes
        self.cell: dict[tuple[int, Location], Cell] = {}
        #: per (gpu, cell): the locations bound to it (one Location, or a set of them when several)
        self.aliases: dict[tuple[int, Cell], Location | set[Location]] = {}
        self._data_cells: dict[int, Cell] = {}  # one shared ("d", chunk) tuple per chunk
        self.chunk_of: dict[tuple[int, Cell], int] = {}
        self.slot_of: dict[tuple[int, Location], int] = {}
        self.slots = [0] * len(homes)
        self.last_writer: dict[tuple[int, Cell], int] = {}
        self.readers: dict[tuple[int, Cell], list[int]] = {}
        self.entry = -1
        self.emitted = 0
        # per location: the log entries that touch it, each as 2 * entry + 1 when it reads the location, else
        # 2 * entry (one list of ints: millions of locations in a large program)
        self.touches: dict[tuple[int, Location], list[int]] = {}
        for j, e in enumerate(log):
            reads = {"send": (e.src,), "recv": (e.operand,), "cpy": (e.src,), "re": (e.src, e.dst)}[e.kind]
            for location, read in [(e.dst, False)] + [(loc, True) for loc in reads]:
                if location is None or (e.kind == "send" and not read):
                    continue
                marks = self.touches.setdefault((e.gpu, location), [])
                if marks and marks[-1] >> 1 == j:
                    marks[-1] |= read
                else:
                    marks.append(2 * j + read)
        for g, gpu_inputs in enumerate(inputs):
            for location, chunk in gpu_inputs.items():
                cell = self.data_cell(chunk)
                self.bind(g, location, cell)
                self.chunk_of[(g, cell)] = chunk

    # ------------------------------------------------------------------ state
    def live(self, g: int, location: Location) -> bool:
        """True when the location's value is read after the current entry, or is its final output."""
        marks = self.touches.get((g, location))
        if marks:
            k = bisect_right(marks, 2 * self.entry + 1)
            if k < len(marks):
                return bool(marks[k] & 1)
        return location in self.homes[g]

    def data_cell(self, chunk: int) -> Cell:
        cell = self._data_cells.get(chunk)
        if cell is None:
            cell = self._data_cells[chunk] = ("d", chunk)
        return cell

    def bound(self, g: int, cell: Cell) -> set[Location]:
        """The locations bound to ``cell`` (a new set)."""
        held = self.aliases.get((g, cell))
        return set() if held is None else set(held) if isinstance(held, set) else {held}

    def bind(self, g: int, location: Location, cell: Cell) -> None:
        self.unbind(g, location)
        self.cell[(g, location)] = cell
        key = (g, cell)
        held = self.aliases.get(key)
        if held is None:
            self.aliases[key] = location
        elif isinstance(held, set):
            held.add(location)
        elif held != location:
            self.aliases[key] = {held, location}

    def unbind(self, g: int, location: Location) -> None:
        old = self.cell.pop((g, location), None)
        if old is not None:
            key = (g, old)
            held = self.aliases.get(key)
            if isinstance(held, set):
                held.discard(location)
            elif held == location:
                del self.aliases[key]

    def scratch(self, g: int, location: Location | None = None) -> Cell:
        """The scratch slot of ``location`` (a fresh one when None)."""
        if location is not None and (g, location) in self.slot_of:
            return ("s", self.slot_of[(g, location)])
        slot = self.slots[g]
        self.slots[g] += 1
        if location is not None:
            self.slot_of[(g, location)] = slot
        return ("s", slot)

    def target(self, g: int, location: Location, chunk: int) -> Cell:
        """Where a new value of ``chunk`` at ``location`` goes."""
        return self.data_cell(chunk) if self.homes[g].get(location) == chunk else self.scratch(g, location)

    # ------------------------------------------------------------------ hazards
    def depend(self, rid: int, others: list[int]) -> None:
        """Record ``rid`` waits for ``others`` too (never for itself)."""
        record = self.records[rid]
        deps = dict.fromkeys(record.deps)
        deps.update(dict.fromkeys(others))
        deps.pop(rid, None)
        if len(deps) != len(record.deps):
            record.deps = tuple(deps)

    def read(self, g: int, cell: Cell, rid: int) -> None:
        writer = self.last_writer.get((g, cell))
        if writer is not None and writer != rid:
            self.depend(rid, [writer])
        self.readers.setdefault((g, cell), []).append(rid)

    def write(self, g: int, cell: Cell, rid: int, chunk: int) -> None:
        key = (g, cell)
        writer = self.last_writer.get(key)
        self.depend(rid, ([] if writer is None else [writer]) + self.readers.get(key, []))
        self.last_writer[key] = rid
        self.readers[key] = []
        self.chunk_of[key] = chunk

    def finish(self, rid: int) -> None:
        self.records[rid].position = (self.entry, self.emitted)
        self.emitted += 1

    def local(self, g: int, chunk: int, op: str, src: Cell, dst: Cell, rid: int | None = None) -> int:
        """A local op (copy ``src`` to ``dst`` or reduce it into ``dst``); a new record unless ``rid``."""
        if rid is None:
            rid = len(self.records)
            self.records.append(Record(g, g, chunk, op, ()))
        record = self.records[rid]
        record.src_cell, record.dst_cell = src, dst
        self.read(g, src, rid)
        self.write(g, dst, rid, chunk)
        self.finish(rid)
        return rid

    def evict(self, g: int, cell: Cell, keep: set[Location], reading: set[Location]) -> None:
        """Before ``cell`` is overwritten: the other locations whose value it holds and that are read
        later (or by the current step: ``reading``) move to their own slot; the rest lose their value."""
        for location in sorted(self.bound(g, cell) - keep):
            if location in reading or self.live(g, location):
                slot = self.scratch(g, location)
                if slot == cell:
                    raise AssertionError("a location evicted from its own slot")
                self.evict(g, slot, {location}, reading)
                self.local(g, self.chunk_of[(g, cell)], COPY, cell, slot)
                self.bind(g, location, slot)
            else:
                self.unbind(g, location)

    def modifiable(self, g: int, operand: Location, dest: Location | None, chunk: int,
                   reading: set[Location]) -> Cell:
        """A cell that holds ``operand``'s value and may take ``dest``'s new value (a reduction's result)."""
        held = self.cell[(g, operand)]
        goal = self.target(g, dest, chunk) if dest is not None else None
        keep = {dest} if dest is not None else set()
        if held == goal:
            self.evict(g, held, keep, reading)
            return held
        others = self.bound(g, held) - keep
        if (dest is None or self.homes[g].get(dest) != chunk) and \
                not any(location in reading or self.live(g, location) for location in others):
            for location in sorted(others):  # nobody reads the old value again: reduce in place
                self.unbind(g, location)
            return held
        cell = goal if goal is not None else self.scratch(g)
        self.evict(g, cell, keep, reading)
        self.local(g, chunk, COPY, held, cell)
        return cell

    # ------------------------------------------------------------------ the pass
    def run(self) -> None:
        """Give every record its cells and dependencies, in execution order."""
        records = self.records
        for j, e in enumerate(self.log):
            self.entry = j
            g = e.gpu
            record = records[e.record]
            if e.kind == "send":
                assert e.src is not None
                record.src_cell = self.cell[(g, e.src)]
                self.read(g, record.src_cell, e.record)
            elif e.kind == "recv":
                if record.op == COPY:
                    assert e.dst is not None
                    cell = self.target(g, e.dst, e.chunk)
                    self.evict(g, cell, {e.dst}, set())
                else:
                    assert e.operand is not None
                    cell = self.modifiable(g, e.operand, e.dst, e.chunk, set())
                record.dst_cell = cell
                self.write(g, cell, e.record, e.chunk)
                self.finish(e.record)
                if e.dst is not None:
                    self.bind(g, e.dst, cell)
                if e.forward is not None:
                    records[e.forward].src_cell = cell
                    self.read(g, cell, e.forward)
            elif e.kind == "cpy":
                assert e.src is not None and e.dst is not None
                held = self.cell[(g, e.src)]
                cell = self.target(g, e.dst, e.chunk)
                if held == cell:  # the value is already there
                    record.elided = True
                    writer = self.last_writer.get((g, cell))
                    if writer is not None:
                        self.depend(e.record, [writer])
                else:
                    self.evict(g, cell, {e.dst}, {e.src})
                    self.local(g, e.chunk, COPY, held, cell, e.record)
                self.bind(g, e.dst, cell)
            else:  # re: dst += src
                assert e.src is not None and e.dst is not None
                cell = self.modifiable(g, e.dst, e.dst, e.chunk, {e.src})
                held = self.cell[(g, e.src)]
                if held == cell:  # a location reduced into itself: reduce a copy (the verifier reports it)
                    held = self.scratch(g)
                    self.local(g, e.chunk, COPY, cell, held)
                self.local(g, e.chunk, REDUCE, held, cell, e.record)
                self.bind(g, e.dst, cell)


def renumber(records: list[Record], log: list[LogEntry], source: str) -> list[int]:
    """Records in a topological order of their deps (earliest finished first), elided copies replaced
    by what they wait for."""
    stands_for: dict[int, tuple[int, ...]] = {}
    for e in log:  # an elided copy waits only for records finished or elided before it
        record = records[e.record]
        if record.elided:
            stands_for[e.record] = tuple(sorted(set().union(*(stands_for.get(d, (d,)) for d in record.deps))))
    live = [rid for rid, r in enumerate(records) if not r.elided]
    for rid in live:
        record = records[rid]
        if any(d in stands_for for d in record.deps):
            record.deps = tuple(sorted(set().union(*(stands_for.get(d, (d,)) for d in record.deps))))
    children: dict[int, list[int]] = {rid: [] for rid in live}
    for rid in live:
        for d in records[rid].deps:
            children.setdefault(d, []).append(rid)
    order = smallest_first_order(live, children, key=lambda rid: records[rid].position)
    if len(order) != len(live):
        raise InputError(source, "", "the program's steps wait for each other in a cycle in synth's model (a "
                         "send is taken to complete when its data arrives)")
    return order
