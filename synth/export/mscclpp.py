"""MSCCL++ JSON execution plans (``synth export mscclpp``): a schedule as the plan MSCCL++'s executor runs,
with switch channels (NVLink SHARP multimem) for in-switch operations.

Read from microsoft/mscclpp at commit 1f5f065d7b13ab02df32c22568f38785d1eeec01 (``v0.10.0-15-g1f5f065``,
2026-08-20): the runtime's parser ``src/core/executor/execution_plan.cc``, the kernel
``src/core/include/execution_kernel.hpp`` and its limits ``src/core/include/execution_common.hpp``, the
DSL's JSON emitter ``python/mscclpp/language/`` (``program.py``, ``internal/gpu.py``,
``internal/threadblock.py``, ``internal/operations.py``) and the NVLS example plan
``test/executor-tests/execution-plans/reduce_nvls.json``. :data:`MSCCLPP_COMMIT` records it.

The plan (every field the parser reads, written as the DSL writes it)
--------------------------------------------------------------------
- Top level: ``name``, ``collective``, ``protocol`` (``"Simple"``: no packet ops are emitted), ``inplace``
  (true), ``reuse_resources`` (false), ``gpus``, ``num_threads_per_block``, ``use_double_scratch_buffer``
  (false), ``buffer_alignment`` (16), ``min_message_size``, ``max_message_size``.
- Per gpu (``gpus[r]``, ``id == r``): ``input_chunks``, ``output_chunks``, ``scratch_chunks``,
  ``threadblocks``, ``channels`` (one ``memory`` entry and one ``port`` entry with ``connected_to`` peers,
  a channel's id being its index there; one ``switch`` entry per switch channel with ``buffer_type`` and
  ``rank_groups: [{size, ranks}]``), ``remote_buffers`` (``{rank, type, access_channel_types}``) and
  ``semaphores`` (``{init_value}``).
- Per threadblock: ``id``, ``ops``, ``channels`` (``{channel_type, channel_ids}``: the gpu's channel ids it
  uses; an op's ``channel_ids`` and ``switch_channel_id`` index this list) and ``remote_buffer_refs``
  (``{access_channel_type, remote_buffer_ids}``; an op's ``buffer_id`` indexes this list).
- Ops used (``name``): ``put`` (memory channel: the sender stores into the peer's buffer), ``pwsf`` (port
  channel put with signal and flush, for peers in another box), ``signal`` / ``wait`` (memory or port
  channel semaphores), ``copy`` and ``re`` (local copy and reduce: ``src_buff [target, other]``),
  ``glres`` (switch channel: ``multimem.ld_reduce`` then ``multimem.st``), ``gstore`` (switch channel:
  ``multimem.st`` of a local chunk), ``nop`` (``__syncthreads``, between a data op and a signal, after a
  wait, ...) and ``sem_acquire`` / ``sem_release`` (device semaphores chaining a gpu's threadblocks).
  Buffers are ``{type: i|o|s, index, size}`` (local), ``{buffer_id, index, size}`` (remote) or
  ``{switch_channel_id, index, size}`` (multimem); ``index`` and ``size`` count chunks.

How a schedule maps
-------------------
- Data cells: in place, in the input buffer ``i`` at the chunk's index (the output buffer ``o`` for
  allgather, whose input is a slice of it); with ``inplace`` the executor aliases the two as NCCL does.
  Scratch slot k is ``s`` index k; a transfer that reduces into a peer gets a fresh staging slot above
  every gpu's schedule slots (``scratch_chunks`` is the largest count over the gpus, on every gpu).
- Point-to-point transfer s -> d: ``put`` on s into d's cell (copy) or staging slot (reduce), ``nop``,
  ``signal``; on d ``wait``, ``nop`` and, for a reduce, ``re`` of the staging slot into the cell. Across
  boxes (topology ``box`` differs) the put is a port channel ``pwsf`` and d waits on the port channel.
  Local ops become ``copy`` / ``re``.
- Order: every gpu runs its ops in one topological order of the schedule, the same on every gpu, so the
  k-th wait on a channel always matches the k-th signal of the peer (the semaphores count). A dependency
  whose completion the issuing gpu cannot know yet (vector clocks over the signals it has waited for)
  becomes one more signal from a gpu where it completed to the issuer. Each gpu first signals and waits
  for every peer it has a channel with, so no peer writes into a buffer of the previous call.
- In-switch ops: a switch channel per (switch, buffer) over every gpu the switch links to. A reduce
  becomes one ``glres`` issued by one member, after the signals its legs' dependencies need (as for any
  op: an input that is a gpu's initial data needs none, the start handshake covers it); then it signals
  every member, which waits (the result is in its buffer). A multicast becomes ``gstore`` from its
  input's rank, the same way.
- Threadblocks: a gpu's ops are cut into threadblocks of at most 64 ops (``MAX_OPERATION``), 16 channels of
  each type and 16 remote buffers (``MAX_CHANNEL``), 8 channels per op (``MAX_CHANNEL_PER_OPERATION``);
  threadblock k+1 starts with ``sem_acquire`` of the semaphore threadblock k releases last, so a gpu's
  threadblocks run one after the other. More threadblocks than ``--max-threadblocks`` (SMs) is refused.

Which switch ops can be expressed
---------------------------------
MSCCL++'s executor at this commit runs ``glres`` (reduce, then store the result to *every* member at one
offset) and ``gstore`` (store to every member): the DSL's lone ``glre`` (reduce into one rank's local
buffer) is not an op the parser accepts. So a switch op is exported when:

- its switch links only gpus of one box (one NVLink domain: switch channels are CUDA multicast objects
  over NVLink; an InfiniBand SHARP switch joining boxes through NICs has no MSCCL++ counterpart);
- a reduce has an input from *every* gpu of the switch's group (``multimem.ld_reduce`` reads the same
  address on every member), all reading the same position (their data cells of the op's chunk, or the
  same scratch slot), sums (``multimem.ld_reduce.add``), and copies (never adds) its result to one
  position on each output rank;
- its result may land on every member: the output ranks take it; on any other member the position must
  be dead (no later transfer touches it, it is no data cell the postcondition needs) or the reduce's one
  output is followed by a multicast of it from that rank to the other members at the same position (the
  NVLS allreduce form), which is fused into one ``glres``;
- a multicast has one input from a member and outputs copying to one position of members, the others
  (the sender included) dead there or, for the sender, the position it sends from.

Everything else is refused with :class:`~synth.errors.NotApplicable` naming the switch op and why.
Alltoall is refused (its in-place form is not one buffer a plan names). Port channels are used between
gpus of different boxes (the topology's ``box``); a topology without boxes is taken as one NVLink domain.

What it needs from the runtime
------------------------------
MSCCL++ at or after the commit above (the plan fields and op names here); for switch channels NVLink SHARP:
Hopper or later gpus on third-generation NVSwitch (HGX H100/H200, B200, GB200 NVL72), CUDA multicast
objects (CUDA 12.1+, driver support, ``cuMulticastCreate``) and the executor's buffers allocated so that
they can be bound to a multicast object, as MSCCL++'s own NVLS plans need. The reduction operation and
element type come from the ``execute`` call; the ``reduce_op`` field is written as the DSL writes it.
The plan is ``inplace`` only (the executor picks it for in-place calls: out-of-place calls need a plan
with the data cells in the output buffer, not written yet); message sizes must be multiples of 16 bytes
times the chunk counts (the parser's ``checkMessageSize``). The plan is correct, not tuned: one op stream
per gpu (threadblocks run one after the other), no pipelining or packet (LL) protocol.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.schedule import COPY, REDUCE, SWITCH_MULTICAST, SWITCH_REDUCE, Schedule, Transfer
from synth.topology import Topology

#: The microsoft/mscclpp commit whose executor and DSL this exporter follows.
MSCCLPP_COMMIT = "1f5f065d7b13ab02df32c22568f38785d1eeec01"
MSCCLPP_DESCRIBE = "v0.10.0-15-g1f5f065"

PROTOCOLS = ("Simple",)

Loc = tuple[str, int]  # (buffer type i|o|s, chunk index)


@dataclass(frozen=True)
class MscclppLimits:
    """The executor's limits (``execution_common.hpp``) and the threadblocks a gpu may run."""

    max_ops_per_threadblock: int = 64
    max_channels_per_threadblock: int = 16
    max_channels_per_op: int = 8
    max_threadblocks: int = 132


@dataclass
class _Action:
    """One step of the plan in global order: a point-to-point transfer, a local op, or a switch event."""

    kind: str  # "p2p" | "local" | "switch"
    transfers: tuple[int, ...]
    issuer: int
    done_at: frozenset[int] = frozenset()
    # switch events
    members: tuple[int, ...] = ()
    op: str = ""  # glres | gstore
    channel_src: tuple[str, str] | None = None
    channel_dst: tuple[str, str] | None = None
    src: Loc | None = None
    dst: Loc | None = None
    reduce_op: str = "sum"
    label: str = ""


def _data_buffer(kind: Kind) -> str:
    return "o" if kind == Kind.ALLGATHER else "i"


def _switch_label(schedule: Schedule, k: int) -> str:
    op = schedule.switch_ops[k]
    return f"switch op {k} (a {op.kind} of chunk {op.chunk} on switch {op.switch})"


@dataclass
class _OpView:
    """One switch op with its legs, group and what finishes before it."""

    k: int
    op: Any
    label: str
    group: tuple[int, ...]
    in_legs: list[Transfer]
    out_legs: list[Transfer]
    before: set[int]
    legs: set[int]

    @classmethod
    def of(cls, low: _Lowering, k: int, inputs: list[list[int]], outputs: list[list[int]]) -> _OpView:
        s = low.s
        return cls(k, s.switch_ops[k], _switch_label(s, k), low.group(s.switch_ops[k].switch),
                   [s.transfers[i] for i in inputs[k]], [s.transfers[i] for i in outputs[k]],
                   low.ancestors(inputs[k]), set(inputs[k]) | set(outputs[k]))


class _Lowering:
    def __init__(self, schedule: Schedule, topology: Topology, limits: MscclppLimits) -> None:
        self.s = schedule
        self.topo = topology
        self.limits = limits
        self.n = schedule.collective.num_ranks
        if schedule.kind == Kind.ALLTOALL:
            raise NotApplicable("MSCCL++ plans from synth cover allgather, reducescatter, allreduce, broadcast and "
                                "reduce; an alltoall's in-place form is not one buffer the plan can name")
        if schedule.collective.shards is not None:
            raise NotApplicable("MSCCL++ plans from synth name each rank's share of a buffer as one equal part; a "
                                "schedule with uneven shards (allgatherv, reduce-scatterv) has none; use "
                                "`synth export chakra` instead")
        if topology.num_ranks != self.n:
            raise InputError("", "topology", f"the schedule has {self.n} ranks, topology {topology.name!r} "
                             f"{topology.num_ranks}")
        self.data = _data_buffer(schedule.kind)
        self.boxes = topology.boxes
        self.deps_of = [t.deps for t in schedule.transfers]
        self._touch: dict[tuple[int, Loc], list[int]] | None = None
        self._fused: set[int] = set()
        self.act_deps: list[set[int]] = []

    # ------------------------------------------------------------------------------------ helpers
    def src_loc(self, t: Transfer) -> Loc:
        return ("s", t.src_scratch) if t.src_scratch is not None else (self.data, t.chunk)

    def dst_loc(self, t: Transfer) -> Loc:
        return ("s", t.dst_scratch) if t.dst_scratch is not None else (self.data, t.chunk)

    def same_box(self, a: int, b: int) -> bool:
        return self.boxes is None or self.boxes[a] == self.boxes[b]

    def ancestors(self, starts: Iterable[int]) -> set[int]:
        seen: set[int] = set()
        stack = list(starts)
        while stack:
            tid = stack.pop()
            for dep in self.deps_of[tid]:
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    def touchers(self, rank: int, loc: Loc) -> list[int]:
        """Transfers that read or write ``loc`` on ``rank``."""
        if self._touch is None:
            touch: dict[tuple[int, Loc], list[int]] = {}
            for t in self.s.transfers:
                if t.src is not None:
                    touch.setdefault((t.src, self.src_loc(t)), []).append(t.id)
                if t.dst is not None:
                    touch.setdefault((t.dst, self.dst_loc(t)), []).append(t.id)
            self._touch = touch
        return self._touch.get((rank, loc), [])

    def group(self, switch: str) -> tuple[int, ...]:
        gpus = self.topo.gpus
        return tuple(r for r in range(self.n)
                     if self.topo.has_link(gpus[r], switch) or self.topo.has_link(switch, gpus[r]))

    # ---------------------------------------------------------------------------- switch events
    def dead_elsewhere(self, rank: int, loc: Loc, before: set[int], legs: set[int], why: str) -> str | None:
        """Why a store to ``loc`` on ``rank`` would break the schedule, or None when it is harmless: every
        other access to it is finished before (in ``before``) and the postcondition does not need it."""
        if loc[0] != "s" and any(chunk == loc[1] for chunk, _ in self.s.collective.final(rank)):
            return f"rank {rank}'s data cell of chunk {loc[1]} is part of the result, and {why}"
        for x in self.touchers(rank, loc):
            if x not in before and x not in legs:
                return f"transfer {x} uses that position on rank {rank} afterwards, and {why}"
        return None

    def switch_events(self) -> tuple[list[_Action], dict[int, int]]:
        """The switch events and, for each leg, the index of its event."""
        inputs, outputs = self.s.legs()
        events: list[_Action] = []
        leg_event: dict[int, int] = {}
        for k in range(len(self.s.switch_ops)):
            if k in self._fused:
                continue
            event = self._event(_OpView.of(self, k, inputs, outputs), inputs, outputs)
            for tid in event.transfers:
                leg_event[tid] = len(events)
            events.append(event)
        return events, leg_event

    def _event(self, v: _OpView, inputs: list[list[int]], outputs: list[list[int]]) -> _Action:
        op, label, group = v.op, v.label, v.group
        if self.boxes is not None and len({self.boxes[r] for r in group}) > 1:
            raise NotApplicable(f"{label} cannot be exported to MSCCL++: switch {op.switch} joins gpus of "
                                f"boxes {sorted({self.boxes[r] for r in group})}; MSCCL++ switch channels are "
                                "CUDA multicast objects over NVLink inside one box (NVLS), an in-network "
                                "reduction across boxes (InfiniBand SHARP) has no MSCCL++ counterpart")
        if not v.out_legs:
            raise NotApplicable(f"{label} has no outputs")
        for leg in v.out_legs:
            if leg.op != COPY:
                raise NotApplicable(f"{label} cannot be exported to MSCCL++: its output transfer {leg.id} adds "
                                    f"the result into rank {leg.dst}'s value; multimem.st stores, it does not "
                                    "accumulate")
        dsts = sorted({self.dst_loc(t) for t in v.out_legs})
        if len(dsts) > 1:
            raise NotApplicable(f"{label} cannot be exported to MSCCL++: its outputs write different "
                                f"positions ({', '.join(f'{b}[{i}]' for b, i in dsts)}); multimem.st writes "
                                "one offset on every gpu of the group")
        if op.kind == SWITCH_REDUCE:
            return self._reduce_event(v, dsts[0], inputs, outputs)
        return self._multicast_event(v, dsts[0])

    def _reduce_event(self, v: _OpView, dst: Loc, inputs: list[list[int]], outputs: list[list[int]]) -> _Action:
        op, label, group, k = v.op, v.label, v.group, v.k
        in_ranks = sorted(t.src for t in v.in_legs if t.src is not None)
        srcs = sorted({self.src_loc(t) for t in v.in_legs})
        if in_ranks != list(group):
            missing = sorted(set(group) - set(in_ranks))
            raise NotApplicable(
                f"{label} cannot be exported to MSCCL++: its inputs come from ranks {in_ranks} only, "
                f"not from ranks {missing} of switch {op.switch}'s group {list(group)}; "
                "multimem.ld_reduce reads the same address on every gpu of a switch channel's group, "
                "and this exporter makes one switch channel per switch over all its gpus")
        if len(srcs) > 1:
            raise NotApplicable(f"{label} cannot be exported to MSCCL++: its inputs read different "
                                f"positions ({', '.join(f'{b}[{i}]' for b, i in srcs)}); "
                                "multimem.ld_reduce reads one offset on every gpu of the group")
        if op.op != "sum":
            raise NotApplicable(f"{label} cannot be exported to MSCCL++: it reduces with {op.op!r}; the "
                                "executor's glres is multimem.ld_reduce.add (sum)")
        out_ranks = sorted(t.dst for t in v.out_legs if t.dst is not None)
        issuer = out_ranks[0] if len(out_ranks) == 1 else group[op.chunk % len(group)]
        fuse = self.fusable_multicast(k, v.out_legs, dst, group, v.before, inputs, outputs) \
            if len(out_ranks) == 1 else None
        ids = [*inputs[k], *outputs[k]]
        if fuse is not None:
            self._fused.add(fuse)
            ids += [*inputs[fuse], *outputs[fuse]]
            label = f"{label} with switch op {fuse} (its multicast)"
        else:
            for r in group:
                if r in out_ranks:
                    continue
                problem = self.dead_elsewhere(r, dst, v.before, v.legs, "glres stores the result there too")
                if problem:
                    raise NotApplicable(
                        f"{label} cannot be exported to MSCCL++: its result goes to ranks {out_ranks} "
                        f"only, but the executor's only switch reduce (glres) stores it to every gpu "
                        f"of the group at {dst[0]}[{dst[1]}]: {problem}")
        return _Action("switch", tuple(sorted(ids)), issuer, frozenset(group), group, "glres",
                       (op.switch, srcs[0][0]), (op.switch, dst[0]), srcs[0], dst, op.op, label)

    def _multicast_event(self, v: _OpView, dst: Loc) -> _Action:
        op, label, group = v.op, v.label, v.group
        sender = v.in_legs[0].src
        assert sender is not None
        if sender not in group:
            raise NotApplicable(f"{label} cannot be exported to MSCCL++: its input comes from rank "
                                f"{sender}, which is not in switch {op.switch}'s group")
        src = self.src_loc(v.in_legs[0])
        out_ranks = sorted(t.dst for t in v.out_legs if t.dst is not None)
        for r in group:
            if r in out_ranks or (r == sender and src == dst):
                continue
            problem = self.dead_elsewhere(r, dst, v.before, v.legs, "gstore writes every gpu of the group")
            if problem:
                raise NotApplicable(f"{label} cannot be exported to MSCCL++: it sends to ranks {out_ranks} "
                                    f"only, but multimem.st stores to every gpu of the group at "
                                    f"{dst[0]}[{dst[1]}]: {problem}")
        return _Action("switch", tuple(sorted(v.legs)), sender, frozenset(group), group, "gstore", None,
                       (op.switch, dst[0]), src, dst, "sum", label)

    def fusable_multicast(self, k: int, out_legs: list[Transfer], dst: Loc, group: tuple[int, ...],
                          before: set[int], inputs: list[list[int]], outputs: list[list[int]]) -> int | None:
        """The multicast that sends reduce ``k``'s one result on to the rest of the group (same chunk,
        same position, every other member), when fusing the two into one glres changes nothing else."""
        s = self.s
        out = out_legs[0]
        owner = out.dst
        for m, cand in enumerate(s.switch_ops):
            if m <= k or m in self._fused or cand.kind != SWITCH_MULTICAST or cand.switch != s.switch_ops[k].switch or len(inputs[m]) != 1:
                continue
            leg = s.transfers[inputs[m][0]]
            if leg.src != owner or self.src_loc(leg) != dst:
                continue
            if out.id not in self.ancestors([leg.id]):
                continue
            m_out = [s.transfers[i] for i in outputs[m]]
            if any(t.op != COPY or self.dst_loc(t) != dst for t in m_out):
                continue
            if sorted(t.dst for t in m_out if t.dst is not None) != sorted(r for r in group if r != owner):
                continue
            # everything the multicast's legs wait for beyond the reduce is done before the reduce starts
            own = set(inputs[k]) | set(outputs[k]) | set(inputs[m]) | set(outputs[m])
            outside = {d for i in own for d in s.transfers[i].deps} - own
            if not outside <= before:
                continue
            # and nothing touches a member's target between its reduce input and its multicast output
            ok = True
            for t in m_out:
                assert t.dst is not None
                for x in self.touchers(t.dst, dst):
                    if x in own or x in before:
                        continue
                    if t.id not in self.ancestors([x]):
                        ok = False
                        break
                if not ok:
                    break
            if ok:
                return m
        return None

    # ------------------------------------------------------------------------------------ order
    def actions(self) -> list[_Action]:
        s = self.s
        events, leg_event = self.switch_events()
        acts: list[_Action] = []
        owner: dict[int, int] = {}
        for t in s.transfers:
            if t.leg:
                continue
            assert t.src is not None and t.dst is not None
            if t.local:
                act = _Action("local", (t.id,), t.src, frozenset({t.src}))
            else:
                act = _Action("p2p", (t.id,), t.src, frozenset({t.src, t.dst}) if t.op == COPY else
                              frozenset({t.dst}))
            owner[t.id] = len(acts)
            acts.append(act)
        base = len(acts)
        for i, event in enumerate(events):
            for tid in event.transfers:
                owner[tid] = base + i
            acts.append(event)
        # topological order, smallest transfer id first among the ready ones (deterministic)
        deps: list[set[int]] = [set() for _ in acts]
        for a, act in enumerate(acts):
            for tid in act.transfers:
                for d in s.transfers[tid].deps:
                    if owner[d] != a:
                        deps[a].add(owner[d])
        users: list[list[int]] = [[] for _ in acts]
        for a, ds in enumerate(deps):
            for d in ds:
                users[d].append(a)
        waiting = [len(ds) for ds in deps]
        ready = [(min(act.transfers), a) for a, act in enumerate(acts) if not waiting[a]]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            _, a = heapq.heappop(ready)
            order.append(a)
            for u in users[a]:
                waiting[u] -= 1
                if not waiting[u]:
                    heapq.heappush(ready, (min(acts[u].transfers), u))
        if len(order) != len(acts):
            stuck = next(acts[a] for a in range(len(acts)) if waiting[a])
            raise NotApplicable(f"{stuck.label or f'transfer {stuck.transfers[0]}'} cannot be ordered: fusing a "
                                "reduce with its multicast into one glres made the dependencies circular")
        ranked = [acts[a] for a in order]
        position = {a: i for i, a in enumerate(order)}
        self.act_deps = [{position[d] for d in deps[a]} for a in order]
        return ranked


class _Emitter:
    """Per-gpu op streams built in global order, with vector clocks to skip dependency signals."""

    def __init__(self, low: _Lowering) -> None:
        self.low = low
        n = low.n
        self.n = n
        self.ops: list[list[tuple[Any, ...]]] = [[] for _ in range(n)]
        self.known = [[-1] * n for _ in range(n)]
        self.staging = [0] * n
        self.peers: list[dict[int, str]] = [{} for _ in range(n)]

    def ctype(self, a: int, b: int) -> str:
        kind = "memory" if self.low.same_box(a, b) else "port"
        self.peers[a][b] = kind
        self.peers[b][a] = kind
        return kind

    def signal(self, src: int, dst: int, q: int) -> list[int]:
        self.ops[src].append(("signal", self.ctype(src, dst), dst))
        snap = list(self.known[src])
        snap[src] = q - 1
        return snap

    def wait(self, dst: int, src: int, snap: list[int]) -> None:
        self.ops[dst].append(("wait", self.ctype(dst, src), src))
        mine = self.known[dst]
        for i, v in enumerate(snap):
            if v > mine[i]:
                mine[i] = v

    def sync_deps(self, issuer: int, deps: set[int], acts: list[_Action], q: int) -> None:
        pending: list[tuple[int, list[int]]] = []
        for d in sorted(deps):
            done = acts[d].done_at
            if issuer in done or any(self.known[issuer][g] >= d for g in done):
                continue
            near = sorted(done, key=lambda g: (not self.low.same_box(g, issuer), g))
            g = near[0]
            snap = self.signal(g, issuer, q)
            for i, v in enumerate(snap):  # counted now so later deps done on g are seen as covered
                if v > self.known[issuer][i]:
                    self.known[issuer][i] = v
            pending.append((g, snap))
        for g, snap in pending:
            self.wait(issuer, g, snap)

    def run(self, acts: list[_Action], deps: list[set[int]], scratch_base: list[int]) -> None:
        s = self.low.s
        for q, act in enumerate(acts):
            if act.kind == "local":
                t = s.transfers[act.transfers[0]]
                g = act.issuer
                self.sync_deps(g, deps[q], acts, q)
                src, dst = self.low.src_loc(t), self.low.dst_loc(t)
                if t.op == REDUCE:
                    self.ops[g].append(("re", dst, src))
                else:
                    self.ops[g].append(("copy", src, dst))
            elif act.kind == "p2p":
                t = s.transfers[act.transfers[0]]
                assert t.src is not None and t.dst is not None
                self.sync_deps(t.src, deps[q], acts, q)
                kind = self.ctype(t.src, t.dst)
                src, dst = self.low.src_loc(t), self.low.dst_loc(t)
                target = dst
                if t.op == REDUCE:
                    target = ("s", scratch_base[t.dst] + self.staging[t.dst])
                    self.staging[t.dst] += 1
                if kind == "memory":
                    self.ops[t.src].append(("put", src, t.dst, target))
                    snap = self.signal(t.src, t.dst, q)
                else:
                    self.ops[t.src].append(("pwsf", src, t.dst, target))
                    snap = list(self.known[t.src])
                    snap[t.src] = q - 1
                self.wait(t.dst, t.src, snap)
                if t.op == REDUCE:
                    self.ops[t.dst].append(("re", dst, target))
            else:
                issuer = act.issuer
                self.sync_deps(issuer, deps[q], acts, q)
                assert act.src is not None and act.dst is not None and act.channel_dst is not None
                if act.op == "glres":
                    self.ops[issuer].append(("glres", act.channel_src, act.src[1], act.channel_dst, act.dst[1],
                                             act.reduce_op))
                else:
                    self.ops[issuer].append(("gstore", act.src, act.channel_dst, act.dst[1]))
                posts = [(m, self.signal(issuer, m, q + 1)) for m in act.members if m != issuer]
                for m, snap in posts:
                    snap[issuer] = q  # the issuer finished this event too
                    self.wait(m, issuer, snap)


def _chunks(items: list[int], size: int) -> list[list[int]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [[]]


def to_mscclpp_plan(schedule: Schedule, topology: Topology, *, name: str | None = None, protocol: str = "Simple",
                    num_threads_per_block: int = 1024, min_message_size: int = 0,
                    max_message_size: int = 2**64 - 1, limits: MscclppLimits | None = None) -> dict[str, Any]:
    """The MSCCL++ execution plan of ``schedule`` on ``topology`` as a JSON-ready dict (see the module
    docstring for the mapping and what is refused with :class:`~synth.errors.NotApplicable`).

    Examples
    --------
    >>> from synth.algorithms import synthesize
    >>> from synth.library import load_topology
    >>> topo = load_topology("switch:n=4")
    >>> plan = to_mscclpp_plan(synthesize(topo, "allreduce", "ring"), topo)
    >>> plan["collective"], len(plan["gpus"]), plan["gpus"][0]["channels"][0]["channel_type"]
    ('allreduce', 4, 'memory')
    """
    limits = limits or MscclppLimits()
    if protocol not in PROTOCOLS:
        raise InputError("", "--protocol", f"expected one of {', '.join(PROTOCOLS)} (this exporter writes no packet "
                         f"ops), got {protocol!r}")
    if not 1 <= num_threads_per_block <= 1024:
        raise InputError("", "--threads", f"expected 1..1024 threads per block, got {num_threads_per_block}")
    if not 0 <= min_message_size < max_message_size <= 2**64 - 1:
        raise InputError("", "--min-bytes", "expected 0 <= min_message_size < max_message_size < 2**64")
    low = _Lowering(schedule, topology, limits)
    acts = low.actions()
    n = low.n
    used = schedule.scratch_slots()
    base = [max(used, default=0)] * n  # staging slots above every gpu's schedule slots (a multimem store to a
    # scratch slot lands on every member: it must never be another gpu's staging slot)
    emitter = _Emitter(low)
    emitter.run(acts, low.act_deps, base)
    scratch = max(b + st for b, st in zip(base, emitter.staging, strict=True))
    for act in acts:  # a switch channel on scratch needs the slot on every member
        if act.kind == "switch" and "s" in {act.src[0] if act.src else "", act.dst[0] if act.dst else ""}:
            scratch = max(scratch, (act.src[1] if act.src and act.src[0] == "s" else 0) + 1,
                          (act.dst[1] if act.dst and act.dst[0] == "s" else 0) + 1)
    # switch channels: one per (switch, buffer type) used, in one global order on every member
    switch_keys = sorted({key for act in acts if act.kind == "switch"
                          for key in (act.channel_src, act.channel_dst) if key is not None})
    groups = {key: low.group(key[0]) for key in switch_keys}
    coll = schedule.collective
    per = coll.chunks // n if schedule.kind in (Kind.ALLGATHER, Kind.REDUCESCATTER) else coll.chunks
    in_chunks = per if schedule.kind == Kind.ALLGATHER else coll.chunks
    out_chunks = per if schedule.kind == Kind.REDUCESCATTER else coll.chunks
    gpus = []
    for g in range(n):
        memory = sorted(p for p, kind in emitter.peers[g].items() if kind == "memory")
        port = sorted(p for p, kind in emitter.peers[g].items() if kind == "port")
        my_switch = [key for key in switch_keys if g in groups[key]]
        start: list[tuple[Any, ...]] = [("signal", "memory", p) for p in memory] + \
            [("signal", "port", p) for p in port] + [("wait", "memory", p) for p in memory] + \
            [("wait", "port", p) for p in port]
        body = start + emitter.ops[g]
        gpus.append(_gpu_dict(g, body, memory, port, my_switch, groups, in_chunks, out_chunks, scratch, limits))
    return {
        "name": name or f"synth_{schedule.algorithm}_{schedule.kind.value}",
        "collective": schedule.kind.value,
        "protocol": protocol,
        "inplace": True,
        "reuse_resources": False,
        "gpus": gpus,
        "num_threads_per_block": num_threads_per_block,
        "use_double_scratch_buffer": False,
        "buffer_alignment": 16,
        "min_message_size": min_message_size,
        "max_message_size": max_message_size,
    }


_SYNC = {"signal", "wait"}


def _needs_nop(prev: str, nxt: str) -> bool:
    """A ``__syncthreads`` between two ops: always, except between signals, between waits, and from a
    signal to a wait (one thread per channel signals; nothing waits on what it did)."""
    if prev == nxt and prev in _SYNC:
        return False
    return not (prev == "signal" and nxt == "wait")


def _gpu_dict(g: int, body: list[tuple[Any, ...]], memory: list[int], port: list[int],
              switch_keys: list[tuple[str, str]], groups: dict[tuple[str, str], tuple[int, ...]], in_chunks: int,
              out_chunks: int, scratch: int, limits: MscclppLimits) -> dict[str, Any]:
    gpu = _GpuPlan(g, memory, port, switch_keys, body, limits)
    blocks = gpu.blocks(body)
    channels: list[dict[str, Any]] = []
    if memory:
        channels.append({"channel_type": "memory", "connected_to": memory})
    if port:
        channels.append({"channel_type": "port", "connected_to": port})
    for key in switch_keys:
        ranks = list(groups[key])
        channels.append({"channel_type": "switch", "buffer_type": key[1],
                         "rank_groups": [{"size": len(ranks), "ranks": ranks}]})
    remote_buffers = [{"rank": peer, "type": btype, "access_channel_types": [gpu.access[gpu.remote[(peer, btype)]]]}
                      for peer, btype in sorted(gpu.remote)]
    return {
        "id": g,
        "input_chunks": in_chunks,
        "output_chunks": out_chunks,
        "scratch_chunks": scratch,
        "threadblocks": [gpu.threadblock(b, ops, len(blocks)) for b, ops in enumerate(blocks)],
        "channels": channels,
        "remote_buffers": remote_buffers,
        "semaphores": [{"init_value": 0} for _ in range(len(blocks) - 1)],
    }


class _GpuPlan:
    """One gpu's op stream cut into threadblocks, with its channel and remote buffer ids."""

    def __init__(self, g: int, memory: list[int], port: list[int], switch_keys: list[tuple[str, str]],
                 body: list[tuple[Any, ...]], limits: MscclppLimits) -> None:
        self.g = g
        self.limits = limits
        self.chan_id = {("memory", p): i for i, p in enumerate(memory)} | {("port", p): i for i, p in enumerate(port)}
        self.switch_id = {key: i for i, key in enumerate(switch_keys)}
        # remote buffers: (peer, type) -> id, and each id's access channel type
        keys = sorted({(op[2], op[3][0]) for op in body if op[0] in ("put", "pwsf")})
        self.remote = {key: i for i, key in enumerate(keys)}
        self.access = {i: "memory" if key[0] in memory else "port" for i, key in enumerate(keys)}

    def needs(self, op: tuple[Any, ...]) -> dict[str, set[Any]]:
        """The channels and remote buffers an op takes in its threadblock, by kind."""
        if op[0] in _SYNC:
            return {op[1]: {self.chan_id[(op[1], p)] for p in op[2]}}
        if op[0] in ("put", "pwsf"):
            rid = self.remote[(op[2], op[3][0])]
            access = self.access[rid]
            return {access: {self.chan_id[(access, op[2])]}, "rb-" + access: {rid}}
        if op[0] == "glres":
            return {"switch": {self.switch_id[op[1]], self.switch_id[op[3]]}}
        if op[0] == "gstore":
            return {"switch": {self.switch_id[op[2]]}}
        return {}

    def blocks(self, body: list[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
        """Consecutive signals / waits of one channel type merged (distinct channels, at most 8 an op), then
        consecutive runs of ops within the threadblock limits."""
        limits = self.limits
        merged: list[tuple[Any, ...]] = []
        for op in body:
            if op[0] in _SYNC and merged and merged[-1][0] == op[0] and merged[-1][1] == op[1] \
                    and op[2] not in merged[-1][2] and len(merged[-1][2]) < limits.max_channels_per_op:
                merged[-1] = (op[0], op[1], (*merged[-1][2], op[2]))
            elif op[0] in _SYNC:
                merged.append((op[0], op[1], (op[2],)))
            else:
                merged.append(op)
        blocks: list[list[tuple[Any, ...]]] = [[]]
        usage: list[dict[str, set[Any]]] = [{}]
        reserve = 4  # sem_acquire + nop at the start, nop + sem_release at the end
        for op in merged:
            want = self.needs(op)
            count = 2 * (len(blocks[-1]) + 1)  # each op and a nop before it
            fits = count + reserve <= limits.max_ops_per_threadblock and all(
                len(usage[-1].get(k, set()) | v) <= limits.max_channels_per_threadblock for k, v in want.items())
            if not fits and blocks[-1]:
                blocks.append([])
                usage.append({})
            blocks[-1].append(op)
            for k, v in want.items():
                usage[-1].setdefault(k, set()).update(v)
        if len(blocks) > limits.max_threadblocks:
            raise NotApplicable(f"rank {self.g} needs {len(blocks)} threadblocks of at most "
                                f"{limits.max_ops_per_threadblock} ops, more than --max-threadblocks "
                                f"{limits.max_threadblocks} (SMs per gpu)")
        return blocks

    def threadblock(self, b: int, ops: list[tuple[Any, ...]], count: int) -> dict[str, Any]:
        """Threadblock ``b`` of ``count``: its ops with threadblock-local channel and buffer ids."""
        local_chan: dict[str, list[int]] = {"memory": [], "port": [], "switch": []}
        local_rb: dict[str, list[int]] = {"memory": [], "port": []}

        def local(table: dict[str, list[int]], kind: str, gid: int) -> int:
            if gid not in table[kind]:
                table[kind].append(gid)
            return table[kind].index(gid)

        out: list[dict[str, Any]] = []
        kinds: list[str] = []
        if b > 0:
            out.append({"name": "sem_acquire", "semaphore_ids": [b - 1]})
            kinds.append("sem")
        for op in ops:
            kind = op[0]
            if kinds and _needs_nop(kinds[-1], kind):
                out.append({"name": "nop"})
            kinds.append(kind)
            if kind in _SYNC:
                ids = [local(local_chan, op[1], self.chan_id[(op[1], p)]) for p in op[2]]
                out.append({"name": kind, "channel_ids": ids, "channel_type": op[1]})
            elif kind in ("put", "pwsf"):
                rid = self.remote[(op[2], op[3][0])]
                access = self.access[rid]
                entry: dict[str, Any] = {"name": kind, "src_buff": [_local(op[1])],
                                         "dst_buff": [{"buffer_id": local(local_rb, access, rid), "index": op[3][1],
                                                       "size": 1}]}
                cid = local(local_chan, access, self.chan_id[(access, op[2])])
                if access == "port":
                    entry["channel_ids"] = [cid]
                entry["channel_type"] = access
                out.append(entry)
            elif kind == "copy":
                out.append({"name": "copy", "src_buff": [_local(op[1])], "dst_buff": [_local(op[2])]})
            elif kind == "re":
                out.append({"name": "re", "src_buff": [_local(op[1]), _local(op[2])], "dst_buff": [_local(op[1])],
                            "reduce_op": "sum"})
            elif kind == "glres":
                out.append({"name": "glres",
                            "src_buff": [{"switch_channel_id": local(local_chan, "switch", self.switch_id[op[1]]),
                                          "index": op[2], "size": 1}],
                            "dst_buff": [{"switch_channel_id": local(local_chan, "switch", self.switch_id[op[3]]),
                                          "index": op[4], "size": 1}],
                            "channel_type": "switch", "reduce_op": op[5]})
            elif kind == "gstore":
                out.append({"name": "gstore", "src_buff": [_local(op[1])],
                            "dst_buff": [{"switch_channel_id": local(local_chan, "switch", self.switch_id[op[2]]),
                                          "index": op[3], "size": 1}],
                            "channel_type": "switch"})
        if b < count - 1:
            out.append({"name": "nop"})
            out.append({"name": "sem_release", "semaphore_ids": [b]})
        return {
            "id": b,
            "ops": out,
            "channels": [{"channel_type": k, "channel_ids": v} for k, v in local_chan.items() if v],
            "remote_buffer_refs": [{"access_channel_type": k, "remote_buffer_ids": v} for k, v in local_rb.items() if v],
        }


def _local(loc: Loc) -> dict[str, Any]:
    return {"type": loc[0], "index": loc[1], "size": 1}


def plan_json(plan: dict[str, Any]) -> str:
    """The plan's JSON text: indented as the DSL's ``to_json`` writes it, keys in the emitter's order."""
    return json.dumps(plan, indent=2) + "\n"


def write_mscclpp_plan(schedule: Schedule, topology: Topology, path: str | Path, **options: Any) -> dict[str, Any]:
    """Build the plan (:func:`to_mscclpp_plan`) and write it atomically to ``path`` (a temporary file renamed
    into place: a refusal or failure leaves no file); returns the plan."""
    from synth.fileio import atomic_write_text

    plan = to_mscclpp_plan(schedule, topology, **options)
    atomic_write_text(path, plan_json(plan))
    return plan


def plan_stats(plan: dict[str, Any]) -> dict[str, Any]:
    """Counts of a plan: threadblocks, ops by name, switch channels (distinct buffer and group)."""
    names: dict[str, int] = {}
    tbs = 0
    for gpu in plan["gpus"]:
        tbs += len(gpu["threadblocks"])
        for tb in gpu["threadblocks"]:
            for op in tb["ops"]:
                names[op["name"]] = names.get(op["name"], 0) + 1
    switch = len({(ch["buffer_type"], tuple(ch["rank_groups"][0]["ranks"])) for gpu in plan["gpus"]
                  for ch in gpu["channels"] if ch["channel_type"] == "switch"})
    return {"gpus": len(plan["gpus"]), "threadblocks": tbs, "ops": dict(sorted(names.items())),
            "switch_channels": switch}
