"""The steps of each threadblock: what one op (or a fused recv and send) becomes, and the waits between
threadblocks (``depid``/``deps``, ``hasdep``, ``nop`` steps).

A step waits for the steps of the same gpu that its transfer depends on; a dependency on another
threadblock beyond the first becomes a ``nop`` step. A recv followed on the same threadblock by the send
of the chunk it received is one step: ``rcs`` (copy), ``rrcs`` (reduce, keep the result) or ``rrs``
(reduce, result needed only by the send); a reduction that is not forwarded is ``rrc``. A local copy is
a ``cpy`` step, a local reduction a ``re`` step (preceded by a ``cpy`` when the partial value is not yet
where the result belongs).
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.errors import InputError
from synth.export.msccl.locations import Lowering, local_deps
from synth.export.msccl.program import Location, Step, Threadblock
from synth.schedule import COPY, REDUCE, Schedule


@dataclass(slots=True)
class Op:
    """One thing a threadblock does, before it becomes steps."""

    time: tuple[int, int]  # (2 level [+1 for a split recv], transfer id); copies (-1, -1)
    kind: str  # "send", "recv", "local" (a local op of the schedule) or "cpy" (a buffer copy at the start)
    tid: int = -1
    copy: tuple[Location, Location] | None = None


#: One op, or a recv fused with the send after it; becomes one step (two for a ``re`` after a ``cpy``).
Unit = tuple[Op, ...]


def make_steps(unit: Unit, schedule: Schedule, lowering: Lowering) -> list[Step]:
    """The steps of one unit, without waits."""
    first = unit[0]
    if first.kind == "cpy":
        (sb, so), (db, do) = first.copy  # type: ignore[misc]
        return [Step("cpy", sb, so, db, do)]
    t = schedule.transfers[first.tid]
    (sb, so), (db, do) = lowering.src_loc[t.id], lowering.dst_loc[t.id]
    operand = lowering.operand_loc[t.id]
    if first.kind == "local":
        if t.op == COPY:
            return [Step("cpy", sb, so, db, do)]
        assert operand is not None
        # re: dst = dst + src in place; a partial value kept elsewhere is first copied where it belongs
        moved = [] if operand == (db, do) else [Step("cpy", operand[0], operand[1], db, do)]
        return [*moved, Step("re", sb, so, db, do)]
    if first.kind == "send":
        return [Step("s", sb, so, db, do)]
    if len(unit) == 1:
        if t.op == REDUCE:
            return [Step("rrc", operand[0], operand[1], db, do)]  # type: ignore[index]
        return [Step("r", sb, so, db, do)]
    if t.op == COPY:
        return [Step("rcs", db, do, db, do)]
    kind = "rrcs" if lowering.needed[t.id] else "rrs"
    return [Step(kind, operand[0], operand[1], db, do)]  # type: ignore[index]


class _GpuSteps:
    """Emits one gpu's steps in the global order, with dependencies and nops.

    A threadblock runs its steps in order, so a wait that an earlier step of it (or a step that one
    awaited, transitively) already made is left out: each step's clock holds, per threadblock, the last
    step known complete before it.
    """

    def __init__(self, g: int, schedule: Schedule, lowering: Lowering, tbs: list[Threadblock],
                 units: list[list[Unit]]) -> None:
        self.g, self.schedule, self.lowering, self.tbs, self.units = g, schedule, lowering, tbs, units
        self.placed: dict[tuple[str, int], tuple[int, int]] = {}  # ("send"/"recv", tid) -> (tb, step)
        self.clock: list[dict[int, int]] = [{} for _ in tbs]
        self.step_clock: dict[tuple[int, int], dict[int, int]] = {}

    def emit(self) -> None:
        queue = sorted(((unit[0].time, b, u) for b, tb_units in enumerate(self.units)
                        for u, unit in enumerate(tb_units)), key=lambda item: (item[0], item[1], item[2]))
        for _, b, u in queue:
            unit = self.units[b][u]
            awaited = self._awaited(self._needs(b, unit))
            self._advance_clock(b, awaited)
            self._append(b, unit, awaited)

    def _needs(self, b: int, unit: Unit) -> dict[int, int]:
        """Per other threadblock, the last of its steps that ``unit`` waits for and ``b`` does not know done."""
        g, transfers, clock = self.g, self.schedule.transfers, self.clock[b]
        needs: dict[int, int] = {}
        inside = {op.tid for op in unit}
        for op in unit:
            if op.kind == "cpy":
                continue
            for dep in local_deps(self.schedule, op.tid, g, self.lowering):
                if dep in inside:
                    continue
                d = transfers[dep]
                target = self.placed.get(("recv", dep) if d.dst == g else ("send", dep))
                if target is None:
                    raise InputError("", f"transfers.{op.tid}", f"depends on transfer {dep}, which comes later "
                                     "in the order (the verifier refuses this schedule)")
                if target[0] != b and clock.get(target[0], -1) < target[1]:
                    needs[target[0]] = max(needs.get(target[0], -1), target[1])
        return needs

    def _awaited(self, needs: dict[int, int]) -> list[tuple[int, int]]:
        """The needed steps that no other needed step already implies."""
        return [(x, k) for x, k in sorted(needs.items())
                if not any(self.step_clock[(y, j)].get(x, -1) >= k for y, j in needs.items() if y != x)]

    def _advance_clock(self, b: int, awaited: list[tuple[int, int]]) -> None:
        if not awaited:
            return
        merged = dict(self.clock[b])  # a new dict: the clocks of earlier steps keep theirs
        for x, k in awaited:
            merged[x] = max(merged.get(x, -1), k)
            for y, j in self.step_clock[(x, k)].items():
                if y != b and merged.get(y, -1) < j:
                    merged[y] = j
        self.clock[b] = merged

    def _append(self, b: int, unit: Unit, awaited: list[tuple[int, int]]) -> None:
        tbs = self.tbs
        tb = tbs[b]
        for dep_tb, dep_step in awaited[:-1]:
            tb.steps.append(Step("nop", cnt=0, depid=dep_tb, deps=dep_step))
            tbs[dep_tb].steps[dep_step].hasdep = 1
        steps = make_steps(unit, self.schedule, self.lowering)
        if awaited:
            steps[0].depid, steps[0].deps = awaited[-1]
            tbs[steps[0].depid].steps[steps[0].deps].hasdep = 1
        tb.steps.extend(steps)
        self.step_clock[(b, len(tb.steps) - 1)] = self.clock[b]
        for op in unit:
            if op.kind != "cpy":
                self.placed[("send" if op.kind == "send" else "recv", op.tid)] = (b, len(tb.steps) - 1)


def emit_steps(schedule: Schedule, lowering: Lowering, g: int, gpu_tbs: list[Threadblock],
               units: list[list[Unit]]) -> None:
    """Append to every threadblock of gpu ``g`` (``gpu_tbs``) the steps of its ``units``, in the global
    order (gpus are independent: each waits only on its own steps)."""
    _GpuSteps(g, schedule, lowering, gpu_tbs, units).emit()
