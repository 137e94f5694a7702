"""Threadblocks for one channel assignment: pairing peers, placing ops in time order, fusing.

Each transfer is a send step on the source and a recv step on the destination, on one channel. On every
gpu and channel, send peers and recv peers are paired into threadblocks (one send peer and one recv peer
each), preferring pairs where a received chunk is forwarded. All ops follow one topological order of the
transfers, so send and recv orders agree on every connection and no cycle of waits can form. A local op
runs on the threadblock that wrote what it reads (else on that of its latest dependency on the gpu).
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.export.msccl.locations import Lowering, local_deps
from synth.export.msccl.program import MscclLimits, Threadblock
from synth.export.msccl.steps import Op, Unit, emit_steps
from synth.schedule import Schedule, Transfer

#: (gpu, channel, "send"/"recv", peer) -> index of the threadblock on the gpu
TbIndex = dict[tuple[int, int, str, int], int]


class LimitViolation(Exception):
    """A runtime limit that one layout exceeds: which, by how much, where."""

    def __init__(self, limit: str, value: int, allowed: int, where: str, at_least: bool = False) -> None:
        self.limit, self.value, self.allowed, self.where = limit, value, allowed, where
        #: ``value`` is a lower bound found before the layout was finished, not the count itself
        self.at_least = at_least
        super().__init__(f"{limit} is {'at least ' if at_least else ''}{value} on {where}, "
                         f"{value - allowed}{' or more' if at_least else ''} over the limit of {allowed}")


@dataclass(frozen=True)
class StepTimes:
    """When each op runs: a transfer's send at (2 level, id) and its recv at (2 level + 1, id) when
    ``split``, else both at (2 level, id)."""

    transfers: tuple[Transfer, ...]
    level: list[int]
    split: bool

    def send(self, tid: int) -> tuple[int, int]:
        return (2 * self.level[tid], tid)

    def recv(self, tid: int) -> tuple[int, int]:
        return (2 * self.level[tid] + (1 if self.split else 0), tid)

    def at(self, tid: int, rank: int) -> tuple[int, int]:
        """The time of transfer ``tid``'s op on ``rank`` (its recv when ``rank`` receives it)."""
        return self.recv(tid) if self.transfers[tid].dst == rank else self.send(tid)


@dataclass
class _Peers:
    """Per (gpu, channel): the peers it sends to and receives from, and how often a chunk received from a
    recv peer is forwarded to a send peer (``weight``, keyed (gpu, channel, send peer, recv peer))."""

    send: dict[tuple[int, int], set[int]]
    recv: dict[tuple[int, int], set[int]]
    weight: dict[tuple[int, int, int, int], int]
    has_local: list[bool]
    #: messages per (gpu, channel, "send"/"recv", peer)
    messages: dict[tuple[int, int, str, int], int]


def _peers(schedule: Schedule, chan: list[int]) -> _Peers:
    transfers = schedule.transfers
    peers = _Peers({}, {}, {}, [False] * schedule.collective.num_ranks, {})
    messages = peers.messages
    for t in transfers:
        if t.src == t.dst:
            peers.has_local[t.src] = True
            continue
        send_key, recv_key = (t.src, chan[t.id], "send", t.dst), (t.dst, chan[t.id], "recv", t.src)
        messages[send_key] = messages.get(send_key, 0) + 1
        messages[recv_key] = messages.get(recv_key, 0) + 1
        peers.send.setdefault((t.src, chan[t.id]), set()).add(t.dst)
        peers.recv.setdefault((t.dst, chan[t.id]), set()).add(t.src)
        for dep in t.deps:
            d = transfers[dep]
            if d.dst == t.src and d.src != d.dst and d.chunk == t.chunk and chan[dep] == chan[t.id]:
                key = (t.src, chan[t.id], t.dst, d.src)
                peers.weight[key] = peers.weight.get(key, 0) + 1
    return peers


def _pairs(peers: _Peers, g: int, ch: int, pair_rest: bool) -> list[tuple[int, int]]:
    """(send peer, recv peer) per threadblock of gpu ``g`` on channel ``ch``, forwarding pairs first."""
    sends = set(peers.send.get((g, ch), ()))
    recvs = set(peers.recv.get((g, ch), ()))
    pairs: list[tuple[int, int]] = []
    ranked = sorted(((peers.weight.get((g, ch, p, q), 0), p, q) for p in sends for q in recvs),
                    key=lambda item: (-item[0], item[1], item[2]))
    for w, p, q in ranked:
        if w and p in sends and q in recvs:
            pairs.append((p, q))
            sends.discard(p)
            recvs.discard(q)
    rest_s, rest_r = sorted(sends), sorted(recvs)
    if pair_rest:  # fewer threadblocks, but unrelated sends and recvs then wait for each other
        for k in range(max(len(rest_s), len(rest_r))):
            pairs.append((rest_s[k] if k < len(rest_s) else -1, rest_r[k] if k < len(rest_r) else -1))
    else:
        pairs.extend((p, -1) for p in rest_s)
        pairs.extend((-1, q) for q in rest_r)
    return pairs


def _threadblocks(schedule: Schedule, lowering: Lowering, chan: list[int], limits: MscclLimits,
                  pair_rest: bool) -> tuple[list[list[Threadblock]], TbIndex, _Peers]:
    """The threadblocks of every gpu, which one serves each (gpu, channel, direction, peer), and the peers."""
    n = schedule.collective.num_ranks
    peers = _peers(schedule, chan)
    tb_of: TbIndex = {}
    tbs: list[list[Threadblock]] = [[] for _ in range(n)]
    for g in range(n):
        keys = sorted({ch for (gpu, ch) in peers.send if gpu == g} | {ch for (gpu, ch) in peers.recv if gpu == g})
        for ch in keys:
            pairs = _pairs(peers, g, ch, pair_rest)
            if len(pairs) > limits.max_tbs_per_channel:
                raise LimitViolation("threadblocks per channel", len(pairs), limits.max_tbs_per_channel,
                                     f"gpu {g} channel {ch}")
            for p, q in sorted(pairs, key=lambda pq: (pq[0] if pq[0] >= 0 else n + pq[1], pq[1])):
                tbs[g].append(Threadblock(p, q, ch))
                if p >= 0:
                    tb_of[(g, ch, "send", p)] = len(tbs[g]) - 1
                if q >= 0:
                    tb_of[(g, ch, "recv", q)] = len(tbs[g]) - 1
        if (lowering.copies[g] or peers.has_local[g]) and not tbs[g]:
            tbs[g].append(Threadblock(-1, -1, 0))
        if len(tbs[g]) > limits.sms:
            raise LimitViolation("threadblocks per gpu", len(tbs[g]), limits.sms, f"gpu {g} (one threadblock per SM)")
    return tbs, tb_of, peers


def _units_floor(tbs: list[list[Threadblock]], peers: _Peers) -> tuple[int, int, int]:
    """(units, gpu, threadblock) of the threadblock sure to have the most units: each of its sends and
    recvs is in one unit, and a unit fuses at most one recv with one send that forwards it (``weight``)."""
    messages, weight = peers.messages, peers.weight
    most = (0, 0, 0)
    for g, gpu_tbs in enumerate(tbs):
        for b, tb in enumerate(gpu_tbs):
            sends = messages.get((g, tb.chan, "send", tb.send), 0) if tb.send >= 0 else 0
            recvs = messages.get((g, tb.chan, "recv", tb.recv), 0) if tb.recv >= 0 else 0
            units = max(sends, recvs, sends + recvs - weight.get((g, tb.chan, tb.send, tb.recv), 0))
            if units > most[0]:
                most = (units, g, b)
    return most


def _local_tb(schedule: Schedule, lowering: Lowering, tid: int, chan: list[int], tb_of: TbIndex,
              local_tb: dict[int, int], times: StepTimes) -> int:
    """The threadblock of local op ``tid``: the one that wrote what it reads (so reductions of data
    received from different peers run in parallel), else that of its latest dependency, else tb 0."""
    transfers = schedule.transfers
    t = transfers[tid]
    near = local_deps(schedule, tid, t.src, lowering.local_deps)
    source = [d for d in t.deps if transfers[d].dst == t.src and transfers[d].dst_scratch == t.src_scratch
              and (t.src_scratch is not None or transfers[d].chunk == t.chunk)]
    latest = max(source or near, key=lambda d: times.at(d, t.src), default=None)
    if latest is None:
        return 0
    d = transfers[latest]
    if d.src == d.dst:
        return local_tb[latest]
    if d.dst == t.src:
        return tb_of[(t.src, chan[latest], "recv", d.src)]
    return tb_of[(t.src, chan[latest], "send", d.dst)]


def _ops(schedule: Schedule, lowering: Lowering, tbs: list[list[Threadblock]], tb_of: TbIndex, chan: list[int],
         times: StepTimes) -> list[list[list[Op]]]:
    """Per gpu and threadblock, its ops in time order (the copies at the start first)."""
    transfers = schedule.transfers
    ops: list[list[list[Op]]] = [[[] for _ in gpu_tbs] for gpu_tbs in tbs]
    for g in range(schedule.collective.num_ranks):
        for copy in lowering.copies[g]:
            ops[g][0].append(Op((-1, -1), "cpy", copy=copy))
    local_tb: dict[int, int] = {}
    for tid in lowering.order:
        t = transfers[tid]
        if t.src == t.dst:
            b = local_tb[tid] = _local_tb(schedule, lowering, tid, chan, tb_of, local_tb, times)
            ops[t.src][b].append(Op(times.recv(tid), "local", tid))
            continue
        ops[t.src][tb_of[(t.src, chan[tid], "send", t.dst)]].append(Op(times.send(tid), "send", tid))
        ops[t.dst][tb_of[(t.dst, chan[tid], "recv", t.src)]].append(Op(times.recv(tid), "recv", tid))
    for gpu_ops in ops:
        for tb_ops in gpu_ops:
            tb_ops.sort(key=lambda op: op.time)
    return ops


def _fusable(schedule: Schedule, lowering: Lowering, g: int, op: Op, nxt: Op, times: StepTimes) -> bool:
    """Whether recv ``op`` and the send ``nxt`` after it on one threadblock of gpu ``g`` become one step:
    ``nxt`` sends the chunk ``op`` received onward, and nothing else waits for the recv alone."""
    transfers = schedule.transfers
    t, u = transfers[op.tid], transfers[nxt.tid]
    others = [d for d in local_deps(schedule, u.id, g, lowering.local_deps) if d != t.id]
    # fusing makes whatever waits for the recv wait for the send too: only when nothing else does
    return (u.chunk == t.chunk and t.id in u.deps and lowering.src_loc[u.id] == lowering.dst_loc[t.id]
            and all(times.at(d, g) < op.time for d in others)
            and lowering.dependents.get((t.id, g), set()) <= {u.id})


def _fuse(schedule: Schedule, lowering: Lowering, ops: list[list[list[Op]]], times: StepTimes) -> list[list[list[Unit]]]:
    """Per gpu and threadblock, its units: a recv is fused with the next op on its threadblock when that
    sends the same chunk onward."""
    units: list[list[list[Unit]]] = []
    for g, gpu_ops in enumerate(ops):
        gpu_units = []
        for tb_ops in gpu_ops:
            merged: list[Unit] = []
            k = 0
            while k < len(tb_ops):
                op = tb_ops[k]
                if (op.kind == "recv" and k + 1 < len(tb_ops) and tb_ops[k + 1].kind == "send"
                        and _fusable(schedule, lowering, g, op, tb_ops[k + 1], times)):
                    merged.append((op, tb_ops[k + 1]))
                    k += 2
                    continue
                merged.append((op,))
                k += 1
            gpu_units.append(merged)
        units.append(gpu_units)
    return units


def _false_waits(units: list[list[list[Unit]]], ancestors: list[int]) -> int:
    """A step starts only after the previous steps of its threadblock (back to its last send) complete;
    the number of waits for transfers that are not among the sender's dependencies."""
    false_waits = 0
    for gpu_units in units:
        for tb_units in gpu_units:
            before: list[int] = []
            for unit in tb_units:
                sends = [op.tid for op in unit if op.kind == "send"]
                if sends:
                    mask = ancestors[sends[0]]
                    false_waits += sum(1 for a in before if not mask >> a & 1)
                    before = sends
                else:
                    before = before + [op.tid for op in unit if op.kind in ("recv", "local")]
    return false_waits


def build(schedule: Schedule, lowering: Lowering, chan: list[int], split: bool, limits: MscclLimits,
          pair_rest: bool = False, ancestors: list[int] | None = None,
          exact: bool = False) -> tuple[list[list[Threadblock]], int]:
    """Threadblocks and steps for one channel assignment, and the false waits (0 without ``ancestors``).

    Every op has a time (:class:`StepTimes`); each threadblock runs its ops in time order, which keeps
    send and recv orders equal on every connection. Raises :class:`LimitViolation` when a limit fails.
    Unless ``exact``, a layout whose threadblocks are sure to exceed the steps limit (every unit is at
    least one step) fails before its steps are emitted, with a lower bound (``at_least``) as the value.
    """
    times = StepTimes(schedule.transfers, lowering.level, split)
    tbs, tb_of, peers = _threadblocks(schedule, lowering, chan, limits, pair_rest)
    if not exact:
        floor = _units_floor(tbs, peers)
        if floor[0] >= limits.max_steps:
            raise LimitViolation("steps per threadblock", floor[0], limits.max_steps - 1,
                                 f"gpu {floor[1]} threadblock {floor[2]}", at_least=True)
    units = _fuse(schedule, lowering, _ops(schedule, lowering, tbs, tb_of, chan, times), times)
    if not exact:
        most = max(((len(tb_units), g, b) for g, gpu_units in enumerate(units) for b, tb_units in enumerate(gpu_units)),
                   default=(0, 0, 0))
        if most[0] >= limits.max_steps:
            raise LimitViolation("steps per threadblock", most[0], limits.max_steps - 1,
                                 f"gpu {most[1]} threadblock {most[2]}", at_least=True)
    false_waits = _false_waits(units, ancestors) if ancestors is not None else 0
    emit_steps(schedule, lowering, tbs, units)
    longest = max(((len(tb.steps), g, b) for g, gpu_tbs in enumerate(tbs) for b, tb in enumerate(gpu_tbs)),
                  default=(0, 0, 0))
    if longest[0] >= limits.max_steps:
        raise LimitViolation("steps per threadblock", longest[0], limits.max_steps - 1,
                             f"gpu {longest[1]} threadblock {longest[2]}")
    return tbs, false_waits
