"""The first pass of the import: run an MSCCL program symbolically.

Threadblocks run in step order, with ``depid``/``deps`` waits and FIFO connections per (sender, receiver,
channel); every step is checked (peers, buffers, chunk counts, races: :class:`~synth.export.msccl.races.Races`)
and logged, and every chunk sent and every local step becomes a record.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synth.errors import InputError
from synth.export.msccl.parse import XmlStep, XmlThreadblock
from synth.export.msccl.program import Location
from synth.export.msccl.races import Races
from synth.schedule import COPY, REDUCE

RECEIVING = {"r": COPY, "rcs": COPY, "rrc": REDUCE, "rrs": REDUCE, "rrcs": REDUCE}
FORWARDING = {"rcs", "rrs", "rrcs"}
#: A buffer of one rank in the schedule IR: ``("d", chunk)`` is the data cell of a chunk,
#: ``("s", slot)`` a scratch slot.
Cell = tuple[str, int]
#: (gpu, buffer location) -> the chunk it holds
Content = dict[tuple[int, Location], int]
#: resolve(gpu, buffer, offset, where) -> the location (in-place buffers mapped, offsets checked)
Resolve = Callable[[int, str, int, str], Location]


@dataclass(slots=True)
class Record:
    """A transfer or local op of the imported schedule, before renumbering."""

    src: int
    dst: int
    chunk: int
    op: str
    #: the records it waits for, each once (a tuple: records of one step share it)
    deps: tuple[int, ...]
    src_cell: Cell | None = None
    dst_cell: Cell | None = None
    #: (log entry, emission order) where it got its final form; orders the renumbering
    position: tuple[int, int] = (-1, -1)
    #: a copy between two buffer locations that share one cell: no op in the schedule
    elided: bool = False


@dataclass(slots=True)
class LogEntry:
    """One executed step for one chunk of its ``cnt``, in execution order.

    ``send``: ``src`` is read for transfer ``record``. ``recv``: transfer ``record`` arrives and is
    written to ``dst`` (None for ``rrs``), reduced with ``operand`` when it reduces, and sent on as
    transfer ``forward`` by ``rcs``/``rrs``/``rrcs``. ``cpy``: ``dst`` takes ``src``. ``re``: ``dst``
    becomes ``dst`` + ``src``. Local steps own the placeholder ``record``.
    """

    kind: str
    gpu: int
    record: int
    chunk: int
    src: Location | None = None
    dst: Location | None = None
    operand: Location | None = None
    forward: int | None = None


def _union(first: tuple[int, ...], second: tuple[int, ...]) -> tuple[int, ...]:
    """The records of both, each once, in order of first appearance."""
    if not first:
        return second
    if not second:
        return first
    return tuple(dict.fromkeys(first + second))


class _Machine:
    """The symbolic executor's state: buffer contents, records, the log, the connections' FIFOs, and per
    executed step the records whose completion implies its own."""

    def __init__(self, source: str, tbs: list[list[XmlThreadblock]], resolve: Resolve,
                 inputs: list[dict[Location, int]]) -> None:
        n = len(tbs)
        self.source, self.tbs, self.resolve = source, tbs, resolve
        self.content: Content = {(g, loc): c for g in range(n) for loc, c in inputs[g].items()}
        self.records: list[Record] = []
        self.log: list[LogEntry] = []
        self.queues: dict[tuple[int, int, int], deque[int]] = {}
        # records whose completion implies a step's (a step starts only after the previous step of its
        # threadblock and its depid step complete; a send's transfer carries that): per threadblock for its
        # latest completed step, and per (gpu, tb index, step) for the steps some depid names
        self.last: list[list[tuple[int, ...]]] = [[()] * len(gpu_tbs) for gpu_tbs in tbs]
        self.completed: dict[tuple[int, int, int], tuple[int, ...]] = {}
        self.position = [[0] * len(gpu_tbs) for gpu_tbs in tbs]
        self.tb_index = [{tb.id: k for k, tb in enumerate(gpu_tbs)} for gpu_tbs in tbs]
        self.awaited = {(g, self.tb_index[g][st.depid], st.deps) for g, gpu_tbs in enumerate(tbs) for tb in gpu_tbs
                        for st in tb.steps if st.depid != -1 and st.depid in self.tb_index[g]}
        self.races = Races(tbs, source)

    # ------------------------------------------------------------------ helpers of one step
    def send(self, g: int, tb: XmlThreadblock, chunk: int, where: str, before: tuple[int, ...]) -> int:
        """A new transfer of ``chunk`` from gpu ``g`` to ``tb``'s send peer, queued on its connection."""
        if tb.send < 0:
            raise InputError(self.source, where, "sends, but its threadblock has send=\"-1\"")
        tid = len(self.records)
        self.records.append(Record(g, tb.send, chunk, COPY, before))
        self.races.sent_by(tid)
        self.queues.setdefault((g, tb.send, tb.chan), deque()).append(tid)
        return tid

    def holding(self, g: int, step: XmlStep, k: int, where: str, verb: str) -> tuple[Location, int]:
        """The source location of chunk ``k`` of ``step`` and the chunk it holds (read now)."""
        location = self.resolve(g, step.srcbuf, step.srcoff + k, f"{where}.srcoff")
        chunk = self.content.get((g, location))
        if chunk is None:
            raise InputError(self.source, where, f"{verb} buffer {location[0]}[{location[1]}], which holds no data yet")
        self.races.read(g, location)
        return location, chunk

    def _after(self, g: int, k_tb: int, step: XmlStep, where: str) -> tuple[int, ...] | None:
        """The records the step's completion implies before it runs (its threadblock's previous step and
        its ``depid`` step), or None while the ``depid`` step has not completed."""
        before = self.last[g][k_tb]
        if step.depid != -1:
            target = self.tb_index[g].get(step.depid)
            if target is None:
                raise InputError(self.source, f"{where}.depid", f"no threadblock {step.depid} on gpu {g}")
            if not 0 <= step.deps < len(self.tbs[g][target].steps):
                raise InputError(self.source, f"{where}.deps", f"threadblock {step.depid} has no step {step.deps}")
            if (g, target, step.deps) not in self.completed:
                return None
            before = _union(before, self.completed[(g, target, step.deps)])
        return before

    def _complete(self, g: int, k_tb: int, s: int, done: tuple[int, ...]) -> None:
        self.last[g][k_tb] = done
        if (g, k_tb, s) in self.awaited:
            self.completed[(g, k_tb, s)] = done

    # ------------------------------------------------------------------ one step
    def execute(self, g: int, k_tb: int, tb: XmlThreadblock, step: XmlStep) -> bool:
        """Run one step if it can run now; record what its completion implies."""
        where = f"gpu {g} tb {tb.id} step {step.s}"
        before = self._after(g, k_tb, step, where)
        if before is None:
            return False
        kind_ = step.type
        queue = None
        if kind_ in RECEIVING:
            if tb.recv < 0:
                raise InputError(self.source, where, "receives, but its threadblock has recv=\"-1\"")
            queue = self.queues.get((tb.recv, g, tb.chan))
            if queue is None or len(queue) < step.cnt:
                return False
        self.races.start(g, k_tb, step.s)
        if step.depid != -1:
            self.races.edge(self.races.step_of(g, self.tb_index[g][step.depid], step.deps))
        if kind_ == "nop":
            self._complete(g, k_tb, step.s, before)
            return True
        if not 0 <= step.cnt < 10**6 or (step.cnt == 0 and kind_ != "nop"):
            raise InputError(self.source, f"{where}.cnt", f"expected a positive chunk count, got {step.cnt}")
        if queue is not None:
            done = self._receive(g, tb, step, where, before, queue)
        elif kind_ == "s":
            done = self._send(g, tb, step, where, before)
        elif kind_ in ("cpy", "re"):
            done = self._local(g, step, where, before)
        else:
            raise InputError(self.source, f"{where}.type", f"unknown step type {kind_!r} (expected s, r, rcs, rrs, "
                             "rrc, rrcs, cpy, re or nop)")
        self._complete(g, k_tb, step.s, done)
        return True

    def _receive(self, g: int, tb: XmlThreadblock, step: XmlStep, where: str, before: tuple[int, ...],
                 queue: deque[int]) -> tuple[int, ...]:
        kind_ = step.type
        received, forwarded = [], []
        for k in range(step.cnt):
            tid = queue.popleft()
            self.races.edge(self.races.sent[tid])  # type: ignore[arg-type]
            record = self.records[tid]
            chunk = record.chunk
            destination = self.resolve(g, step.dstbuf, step.dstoff + k, f"{where}.dstoff")
            operand = None
            if RECEIVING[kind_] == REDUCE:
                operand = self.resolve(g, step.srcbuf, step.srcoff + k, f"{where}.srcoff")
                if self.content.get((g, operand)) != chunk:
                    raise InputError(self.source, where, f"reduces received chunk {chunk} with buffer {operand[0]}"
                                     f"[{operand[1]}], which holds {self.content.get((g, operand), 'nothing')}")
                self.races.read(g, operand)
                record.op = REDUCE
            if kind_ != "rrs":
                self.races.write(g, destination)
            forward = self.send(g, tb, chunk, where, before) if kind_ in FORWARDING else None
            if kind_ != "rrs":
                self.content[(g, destination)] = chunk
            self.log.append(LogEntry("recv", g, tid, chunk, None, None if kind_ == "rrs" else destination, operand,
                                     forward))
            received.append(tid)
            if forward is not None:
                forwarded.append(forward)
        return tuple(forwarded) if forwarded else _union(before, tuple(received))

    def _send(self, g: int, tb: XmlThreadblock, step: XmlStep, where: str, before: tuple[int, ...]) -> tuple[int, ...]:
        sent = []
        for k in range(step.cnt):
            location, chunk = self.holding(g, step, k, where, "sends")
            tid = self.send(g, tb, chunk, where, before)
            self.log.append(LogEntry("send", g, tid, chunk, location))
            sent.append(tid)
        return tuple(sent)

    def _local(self, g: int, step: XmlStep, where: str, before: tuple[int, ...]) -> tuple[int, ...]:
        kind_ = step.type
        done = []
        for k in range(step.cnt):
            location, chunk = self.holding(g, step, k, where, "copies" if kind_ == "cpy" else "reduces")
            destination = self.resolve(g, step.dstbuf, step.dstoff + k, f"{where}.dstoff")
            if kind_ == "re" and self.content.get((g, destination)) != chunk:
                raise InputError(self.source, where, f"reduces buffer {location[0]}[{location[1]}] (chunk {chunk}) into "
                                 f"buffer {destination[0]}[{destination[1]}], which holds "
                                 f"{self.content.get((g, destination), 'nothing')}")
            if kind_ == "re":
                self.races.read(g, destination)
            self.races.write(g, destination)
            rid = len(self.records)
            self.records.append(Record(g, g, chunk, COPY if kind_ == "cpy" else REDUCE, before))
            self.content[(g, destination)] = chunk
            self.log.append(LogEntry(kind_, g, rid, chunk, location, destination))
            done.append(rid)
        return _union(before, tuple(done))

    # ------------------------------------------------------------------ the whole program
    def run(self) -> None:
        """Run threadblocks from a work list: one that cannot go on waits for the step or the message queue
        it needs and is woken when that completes (linear in steps, even for a long chain of threadblocks
        that unblock each other in reverse order)."""
        tbs, position = self.tbs, self.position
        ready = deque((g, k) for g in range(len(tbs)) for k in range(len(tbs[g])))
        waiting: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
        while ready:
            g, k = ready.popleft()
            tb = tbs[g][k]
            while position[g][k] < len(tb.steps) and self.execute(g, k, tb, tb.steps[position[g][k]]):
                done_step = tb.steps[position[g][k]].s
                position[g][k] += 1
                ready.extend(waiting.pop(("step", g, k, done_step), ()))
                if tb.send >= 0:
                    ready.extend(waiting.pop(("queue", g, tb.send, tb.chan), ()))
            if position[g][k] < len(tb.steps):
                waiting.setdefault(self._awaits(g, k), []).append((g, k))
        self._check_finished()

    def _awaits(self, g: int, k: int) -> tuple[Any, ...]:
        """What the stopped threadblock ``k`` of gpu ``g`` waits for: a step, or its receive queue."""
        tb = self.tbs[g][k]
        step = tb.steps[self.position[g][k]]
        target = self.tb_index[g].get(step.depid) if step.depid != -1 else None
        if target is not None and (g, target, step.deps) not in self.completed:
            return ("step", g, target, step.deps)
        return ("queue", tb.recv, g, tb.chan)  # its previous step has completed: threadblocks run in order

    def _check_finished(self) -> None:
        """Refuse a program that deadlocks, leaves chunks unreceived or moves no data."""
        tbs, position, source = self.tbs, self.position, self.source
        stuck = next(((g, tb, tb.steps[position[g][k]]) for g in range(len(tbs)) for k, tb in enumerate(tbs[g])
                      if position[g][k] < len(tb.steps)), None)
        if stuck is not None:
            g, tb, step = stuck
            raise InputError(source, f"gpu {g} tb {tb.id} step {step.s}", "the program deadlocks here: it waits for a "
                             "dependency or a message that never comes")
        leftover = [(key, len(q)) for key, q in self.queues.items() if q]
        if leftover:
            (src, dst, chan), count = leftover[0]
            raise InputError(source, f"gpu {src}", f"{count} chunk(s) sent to gpu {dst} on channel {chan} are never "
                             "received")
        if not any(r.src != r.dst for r in self.records):
            raise InputError(source, "", "the program moves no data")


def execute_program(source: str, tbs: list[list[XmlThreadblock]], resolve: Resolve,
                    inputs: list[dict[Location, int]]) -> tuple[list[Record], list[LogEntry], Content]:
    """Run the program symbolically: threadblocks in step order, ``depid``/``deps`` waits, FIFO
    connections per (sender, receiver, channel). Returns the records (one per chunk sent and per local
    step), the log of executed steps, and which chunk each buffer location holds at the end."""
    machine = _Machine(source, tbs, resolve, inputs)
    machine.run()
    return machine.records, machine.log, machine.content
