"""Threadblocks for one channel assignment: pairing peers, placing ops in time order, fusing.

Each transfer is a send step on the source and a recv step on the destination, on one channel. On every
gpu and channel, send peers and recv peers are paired into threadblocks (one send peer and one recv peer
each), preferring pairs where a received chunk is forwarded. All ops follow one topological order of the
transfers, so send and recv orders agree on every connection and no cycle of waits can form. A local op
runs on the threadblock that wrote what it reads (else on that of its latest dependency on the gpu).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synth.export.msccl.locations import Lowering, local_deps
from synth.export.msccl.program import MscclLimits, Threadblock, parser_nodes
from synth.export.msccl.steps import Op, Unit, emit_steps
from synth.schedule import Schedule, Transfer

#: (gpu, channel, "send"/"recv", peer) -> index of the threadblock on the gpu
TbIndex = dict[tuple[int, int, str, int], int]


#: The limit a layout exceeds when a rank's XML parser would keep too many nodes (see :class:`MscclLimits`).
PARSER_NODES = "XML nodes the runtime's parser keeps for one rank"


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


@dataclass(frozen=True)
class Columns:
    """The schedule's transfers as arrays, for counting per channel layout without a Python loop: each
    transfer's source, destination and chunk, and the (transfer, dependency) pairs where the transfer forwards
    the chunk that dependency brought to its source (the forwarding pairs whose threadblock may fuse)."""

    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    forward: np.ndarray  # transfers that forward a received chunk
    received: np.ndarray  # the dependency that brought it, pairwise with ``forward``

    @classmethod
    def of(cls, schedule: Schedule) -> Columns:
        transfers = schedule.transfers
        forward, received = [], []
        for t in transfers:
            if t.src == t.dst:
                continue
            for dep in t.deps:
                d = transfers[dep]
                if d.dst == t.src and d.src != d.dst and d.chunk == t.chunk:
                    forward.append(t.id)
                    received.append(dep)
        count = len(transfers)
        return cls(np.fromiter((t.src for t in transfers), np.int64, count),
                   np.fromiter((t.dst for t in transfers), np.int64, count),
                   np.fromiter((t.chunk for t in transfers), np.int64, count),
                   np.array(forward, np.int64), np.array(received, np.int64))


def _counts(*columns: np.ndarray) -> list[tuple[tuple[int, ...], int]]:
    """The distinct rows of ``columns`` (non-negative integer arrays of one length), sorted, and how often
    each occurs."""
    if not len(columns[0]):
        return []
    radices = [int(column.max()) + 1 for column in columns]
    if np.prod(radices, dtype=float) >= 2.0 ** 62:
        rows, counts = np.unique(np.stack(columns, axis=1), axis=0, return_counts=True)
        return list(zip(map(tuple, rows.tolist()), counts.tolist(), strict=True))
    key = columns[0].astype(np.int64)
    for column, radix in zip(columns[1:], radices[1:], strict=True):
        key = key * radix + column
    keys, counts = np.unique(key, return_counts=True)
    digits = []
    for radix in reversed(radices[1:]):
        keys, digit = np.divmod(keys, radix)
        digits.append(digit.tolist())
    digits.append(keys.tolist())
    return list(zip(zip(*reversed(digits), strict=True), counts.tolist(), strict=True))


def _peers(schedule: Schedule, columns: Columns, chan: np.ndarray) -> _Peers:
    src, dst = columns.src, columns.dst
    remote = src != dst
    peers = _Peers({}, {}, {}, [False] * schedule.collective.num_ranks, {})
    for g in np.unique(src[~remote]).tolist():
        peers.has_local[g] = True
    messages = peers.messages
    s, d, c = src[remote], dst[remote], chan[remote]
    for (g, ch, peer), count in _counts(s, c, d):
        messages[(g, ch, "send", peer)] = count
        peers.send.setdefault((g, ch), set()).add(peer)
    for (g, ch, peer), count in _counts(d, c, s):
        messages[(g, ch, "recv", peer)] = count
        peers.recv.setdefault((g, ch), set()).add(peer)
    forward, received = columns.forward, columns.received
    same = chan[forward] == chan[received]
    forward, received = forward[same], received[same]
    for (g, ch, to, came_from), count in _counts(src[forward], chan[forward], dst[forward], src[received]):
        peers.weight[(g, ch, to, came_from)] = count
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


def _threadblocks(schedule: Schedule, lowering: Lowering, peers: _Peers, limits: MscclLimits,
                  pair_rest: bool) -> tuple[list[list[Threadblock]], TbIndex]:
    """The threadblocks of every gpu and which one serves each (gpu, channel, direction, peer)."""
    n = schedule.collective.num_ranks
    tb_of: TbIndex = {}
    tbs: list[list[Threadblock]] = [[] for _ in range(n)]
    channels_of: list[set[int]] = [set() for _ in range(n)]
    for gpu, ch in (*peers.send, *peers.recv):
        channels_of[gpu].add(ch)
    for g in range(n):
        for ch in sorted(channels_of[g]):
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
    return tbs, tb_of


def _units_floors(tbs: list[list[Threadblock]], peers: _Peers) -> list[tuple[int, int]]:
    """Per gpu, (units, threadblock) of its threadblock sure to have the most units: each of its sends and
    recvs is in one unit, and a unit fuses at most one recv with one send that forwards it (``weight``)."""
    messages, weight = peers.messages, peers.weight
    floors = []
    for g, gpu_tbs in enumerate(tbs):
        most = (0, 0)
        for b, tb in enumerate(gpu_tbs):
            sends = messages.get((g, tb.chan, "send", tb.send), 0) if tb.send >= 0 else 0
            recvs = messages.get((g, tb.chan, "recv", tb.recv), 0) if tb.recv >= 0 else 0
            units = max(sends, recvs, sends + recvs - weight.get((g, tb.chan, tb.send, tb.recv), 0))
            if units > most[0]:
                most = (units, b)
        floors.append(most)
    return floors


def _local_tb(schedule: Schedule, lowering: Lowering, tid: int, chan: list[int], tb_of: TbIndex,
              local_tb: dict[int, int], times: StepTimes) -> int:
    """The threadblock of local op ``tid``: the one that wrote what it reads (so reductions of data
    received from different peers run in parallel), else that of its latest dependency, else tb 0."""
    transfers = schedule.transfers
    t = transfers[tid]
    rank = t.ends()[0]
    near = local_deps(schedule, tid, rank, lowering)
    source = [d for d in t.deps if transfers[d].dst == rank and transfers[d].dst_scratch == t.src_scratch
              and (t.src_scratch is not None or transfers[d].chunk == t.chunk)]
    latest = max(source or near, key=lambda d: times.at(d, rank), default=None)
    if latest is None:
        return 0
    d_src, d_dst = transfers[latest].ends()
    if d_src == d_dst:
        return local_tb[latest]
    if d_dst == rank:
        return tb_of[(rank, chan[latest], "recv", d_src)]
    return tb_of[(rank, chan[latest], "send", d_dst)]


def _gpu_ops(schedule: Schedule, lowering: Lowering, g: int, gpu_tbs: list[Threadblock], tb_of: TbIndex,
             chan: list[int], times: StepTimes) -> list[list[Op]]:
    """Per threadblock of gpu ``g``, its ops in time order (the copies at the start first)."""
    transfers = schedule.transfers
    ops: list[list[Op]] = [[] for _ in gpu_tbs]
    for copy in lowering.copies[g]:
        ops[0].append(Op((-1, -1), "cpy", copy=copy))
    local_tb: dict[int, int] = {}
    for tid in lowering.touching[g]:  # in the order, so a local op's local deps have their threadblocks
        src, dst = transfers[tid].ends()
        if src == dst:
            b = local_tb[tid] = _local_tb(schedule, lowering, tid, chan, tb_of, local_tb, times)
            ops[b].append(Op(times.recv(tid), "local", tid))
        elif src == g:
            ops[tb_of[(g, chan[tid], "send", dst)]].append(Op(times.send(tid), "send", tid))
        else:
            ops[tb_of[(g, chan[tid], "recv", src)]].append(Op(times.recv(tid), "recv", tid))
    for tb_ops in ops:
        tb_ops.sort(key=lambda op: op.time)
    return ops


def _fusable(schedule: Schedule, lowering: Lowering, g: int, op: Op, nxt: Op, times: StepTimes) -> bool:
    """Whether recv ``op`` and the send ``nxt`` after it on one threadblock of gpu ``g`` become one step:
    ``nxt`` sends the chunk ``op`` received onward, and nothing else waits for the recv alone."""
    transfers = schedule.transfers
    t, u = transfers[op.tid], transfers[nxt.tid]
    others = [d for d in local_deps(schedule, u.id, g, lowering) if d != t.id]
    # fusing makes whatever waits for the recv wait for the send too: only when nothing else does
    return (u.chunk == t.chunk and t.id in u.deps and lowering.src_loc[u.id] == lowering.dst_loc[t.id]
            and all(times.at(d, g) < op.time for d in others)
            and lowering.dependent.get((t.id, g), u.id) == u.id)


def _fuse(schedule: Schedule, lowering: Lowering, g: int, gpu_ops: list[list[Op]],
          times: StepTimes) -> list[list[Unit]]:
    """Per threadblock of gpu ``g``, its units: a recv is fused with the next op on its threadblock when
    that sends the same chunk onward."""
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
    return gpu_units


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


def build(schedule: Schedule, lowering: Lowering, chan: list[int] | np.ndarray, split: bool, limits: MscclLimits,
          pair_rest: bool = False, ancestors: list[int] | None = None, exact: bool = False,
          columns: Columns | None = None) -> tuple[list[list[Threadblock]], int]:
    """Threadblocks and steps for one channel assignment, and the false waits (0 without ``ancestors``).

    Every op has a time (:class:`StepTimes`); each threadblock runs its ops in time order, which keeps
    send and recv orders equal on every connection. Raises :class:`LimitViolation` when a limit fails.
    Unless ``exact``, a layout fails as soon as one gpu exceeds the steps limit, with that gpu's count as
    a lower bound (``at_least``): first when its threadblocks are sure to exceed it (every unit is at least
    one step), before any steps are emitted; then gpu by gpu, the gpus sure of the most units first.
    ``columns`` (:meth:`Columns.of` the schedule) saves working them out again for every layout tried.
    """
    times = StepTimes(schedule.transfers, lowering.level, split)
    peers = _peers(schedule, columns or Columns.of(schedule), np.asarray(chan, dtype=np.int64))
    tbs, tb_of = _threadblocks(schedule, lowering, peers, limits, pair_rest)
    floors = _units_floors(tbs, peers)
    gpus = sorted(range(len(tbs)), key=lambda g: (-floors[g][0], g))
    if not exact and gpus and floors[gpus[0]][0] >= limits.max_steps:
        g = gpus[0]
        raise LimitViolation("steps per threadblock", floors[g][0], limits.max_steps - 1,
                             f"gpu {g} threadblock {floors[g][1]}", at_least=True)
    chan = chan.tolist() if isinstance(chan, np.ndarray) else chan
    every_units: list[list[list[Unit]]] = [[] for _ in tbs]
    longest = (0, 0, 0)
    most_nodes = (0, 0)
    for g in gpus:
        units = _fuse(schedule, lowering, g, _gpu_ops(schedule, lowering, g, tbs[g], tb_of, chan, times), times)
        most = max(((len(tb_units), b) for b, tb_units in enumerate(units)), default=(0, 0))
        if not exact and most[0] >= limits.max_steps:
            raise LimitViolation("steps per threadblock", most[0], limits.max_steps - 1,
                                 f"gpu {g} threadblock {most[1]}", at_least=True)
        emit_steps(schedule, lowering, g, tbs[g], units)
        steps = max(((len(tb.steps), g, b) for b, tb in enumerate(tbs[g])), default=(0, 0, 0))
        if not exact and steps[0] >= limits.max_steps:
            raise LimitViolation("steps per threadblock", steps[0], limits.max_steps - 1,
                                 f"gpu {g} threadblock {steps[2]}", at_least=True)
        longest = max(longest, steps)
        nodes = parser_nodes(schedule.collective.num_ranks, tbs[g])
        if nodes >= limits.parser_nodes:
            if not exact:
                raise LimitViolation(PARSER_NODES, nodes, limits.parser_nodes - 1, f"gpu {g}")
            most_nodes = max(most_nodes, (nodes, g))
        if ancestors is not None:
            every_units[g] = units
    if longest[0] >= limits.max_steps:
        raise LimitViolation("steps per threadblock", longest[0], limits.max_steps - 1,
                             f"gpu {longest[1]} threadblock {longest[2]}")
    if most_nodes[0]:
        raise LimitViolation(PARSER_NODES, most_nodes[0], limits.parser_nodes - 1, f"gpu {most_nodes[1]}")
    return tbs, _false_waits(every_units, ancestors) if ancestors is not None else 0
