"""Transfers, chunks and reductions inferred from traces synth did not write: messages matched send to recv,
chunks followed back through forwards and COMP nodes (see :mod:`synth.export.chakra`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from synth.astra import ORDER_ATTR
from synth.collectives import Kind
from synth.errors import InputError, SynthError
from synth.proto.et_def import NodeType
from synth.schedule import REDUCE, Transfer
from synth.trace import EtProgram


class _UnionFind:
    def __init__(self, count: int) -> None:
        self.parent = list(range(count))

    def find(self, item: int) -> int:
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


class _MatchedTraces:
    """A foreign trace set with its messages matched: one transfer per delivered message, numbered in
    arrival order (ties: source rank, node id). ``ends[tid]`` is (src, send node id, dst, recv node id)."""

    def __init__(self, program: EtProgram, matches: list[tuple[int, int, int, int, Any]]) -> None:
        self.program = program
        self.by_id = [{node.id: node for node in nodes} for nodes in program.nodes]
        self.send_tid: dict[tuple[int, int], int] = {}
        self.recv_tid: dict[tuple[int, int], int] = {}
        self.ends: list[tuple[int, int, int, int]] = []  # src, send id, dst, recv id
        for tid, (src, send_id, dst, recv_id, _) in enumerate(sorted(matches, key=lambda m: (m[4], m[0], m[1]))):
            self.send_tid[(src, send_id)] = tid
            self.recv_tid[(dst, recv_id)] = tid
            self.ends.append((src, send_id, dst, recv_id))

    def reduction_durations(self) -> dict[int, int]:
        """COMP nodes after a recv: the recv's transfer is a reduction with that duration (the longest such
        COMP's). synth's ordering nodes, marked with the attribute ORDER_ATTR, only carry dependencies."""
        comp_of: dict[int, int] = {}
        for rank, nodes in enumerate(self.program.nodes):
            for node in nodes:
                if node.type != NodeType.COMP_NODE or ORDER_ATTR in node.extras:
                    continue
                for dep in node.deps:
                    tid = self.recv_tid.get((rank, dep))
                    if tid is not None:
                        comp_of[tid] = max(comp_of.get(tid, 0), node.duration_us)
        return comp_of

    def events_before(self, rank: int, node_id: int, through_recv: bool) -> list[int]:
        """Transfers whose node on ``rank`` is a nearest ancestor of ``node_id`` (through COMP nodes; a
        COMP after a recv counts as that recv's transfer). Sends count only when ``through_recv``."""
        by_id, send_tid, recv_tid = self.by_id[rank], self.send_tid, self.recv_tid
        found: list[int] = []
        seen: set[int] = set()
        stack = list(by_id[node_id].deps)
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            node = by_id[current]
            if node.type == NodeType.COMM_SEND_NODE:
                tid = send_tid.get((rank, current))
                if tid is not None and through_recv:
                    found.append(tid)
            elif node.type == NodeType.COMM_RECV_NODE:
                tid = recv_tid.get((rank, current))
                if tid is not None:
                    found.append(tid)
            else:
                owners = [recv_tid[(rank, d)] for d in node.deps if (rank, d) in recv_tid]
                if node.type == NodeType.COMP_NODE and owners and ORDER_ATTR not in node.extras:
                    found.extend(owners)
                else:
                    stack.extend(node.deps)
        return sorted(set(found))

    def chunk_groups(self) -> tuple[_UnionFind, set[int]]:
        """Messages joined into chunks (a message carries what the nearest messages it forwards carried),
        and the messages that forward none (where a chunk starts)."""
        groups = _UnionFind(len(self.ends))
        roots: set[int] = set()
        for tid, (src, send_id, _, _) in enumerate(self.ends):
            parents = self.events_before(src, send_id, through_recv=False)
            if not parents:
                roots.add(tid)
            for parent in parents:
                groups.union(tid, parent)
        # a recv waiting for an earlier reduction on its rank continues that reduction (same cell)
        for tid, (_, _, dst, recv_id) in enumerate(self.ends):
            for dep in self.by_id[dst][recv_id].deps:
                waited = self.by_id[dst][dep]
                if waited.type == NodeType.COMP_NODE and ORDER_ATTR not in waited.extras:
                    for owner in waited.deps:
                        if (dst, owner) in self.recv_tid:
                            groups.union(tid, self.recv_tid[(dst, owner)])
        return groups, roots

    def conflicting(self, tid: int, chunk_of: tuple[int, ...]) -> list[int]:
        """Earlier accesses to the cell ``tid`` writes, nearest first: the last write and every read since."""
        _, _, dst, recv_id = self.ends[tid]
        by_id = self.by_id[dst]
        chunk = chunk_of[tid]
        found: list[int] = []
        seen: set[int] = set()
        stack = list(by_id[recv_id].deps)
        budget = 100_000
        while stack and budget:
            budget -= 1
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            node = by_id[current]
            other = self.recv_tid.get((dst, current)) if node.type == NodeType.COMM_RECV_NODE else \
                self.send_tid.get((dst, current)) if node.type == NodeType.COMM_SEND_NODE else None
            if other is not None and chunk_of[other] == chunk:
                found.append(other)
                if node.type == NodeType.COMM_RECV_NODE:
                    continue  # the last write: earlier accesses are ordered before it
            stack.extend(node.deps)
        return found


@dataclass(frozen=True)
class _InferredTransfers:
    """What the importer inferred per matched message (indexed by transfer id): chunk, op, path, and the
    transfers its send and its recv wait for on their ranks."""

    traces: _MatchedTraces
    chunk_of: tuple[int, ...]
    ops: tuple[Literal["copy", "reduce"], ...]
    paths: tuple[tuple[str, ...], ...]
    send_side: tuple[list[int], ...]
    recv_side: tuple[list[int], ...]

    def transfers(self, strict: bool) -> tuple[Transfer, ...]:
        """The transfers: each depends on what its send waits for, plus (``strict``) everything its recv
        waits for, or else only the earlier accesses to the cell it writes."""
        transfers = []
        for tid, (src, _, dst, _) in enumerate(self.traces.ends):
            deps = set(self.send_side[tid]) | (set(self.recv_side[tid]) if strict
                                               else set(self.traces.conflicting(tid, self.chunk_of)))
            deps.discard(tid)
            transfers.append(Transfer(tid, src, dst, self.chunk_of[tid], self.ops[tid], self.paths[tid],
                                      tuple(sorted(deps))))
        return tuple(transfers)


def _foreign_et_params(comp_of: dict[int, int], ops: Sequence[str], recv_side: tuple[list[int], ...]) -> dict[str, Any]:
    """``params["et"]`` of an imported trace set: its COMP durations (one ``comp_us`` when every reduction,
    and nothing else, has the same) and recv-side waits, so the ``astra`` model reproduces its timing."""
    et: dict[str, Any] = {}
    reduce_ids = [tid for tid in range(len(ops)) if ops[tid] == REDUCE]
    values = {comp_of.get(tid) for tid in reduce_ids}
    if len(values) == 1 and None not in values and set(comp_of) <= set(reduce_ids):
        et["comp_us"] = values.pop()
    elif comp_of:
        et["comp_us_by_transfer"] = {str(tid): us for tid, us in sorted(comp_of.items())}
    recv_after = {str(tid): deps for tid, deps in enumerate(recv_side) if deps}
    if recv_after:
        et["recv_after"] = recv_after
    return et


def _assign_chunks(kind: Kind, n: int, ends: list[tuple[int, int, int, int]], groups: _UnionFind,
                   roots: set[int], source: str) -> tuple[list[int], int, int | None]:
    """Chunk ids for the inferred groups of messages, following the collective's ownership rules.

    A group is a set of messages joined by forwarding. Copies of one chunk that leave its origin
    separately (a direct allgather, a tree root with several children) form several groups: the k-th
    group from an origin to a given destination is chunk k of that origin. Likewise for reductions:
    the k-th group arriving at a rank from a given neighbour is chunk k that the rank owns.
    Returns (chunk of every message, chunks, root).
    """
    count = len(ends)
    members: dict[int, list[int]] = {}
    for tid in range(count):
        members.setdefault(groups.find(tid), []).append(tid)
    chunk_groups = _ChunkGroups(kind, n, ends, members, roots, source)
    key_of = chunk_groups.keys(sorted(members, key=lambda g: members[g][0]))
    chunk_of_key, chunks, root = chunk_groups.number(sorted(set(key_of.values())))
    chunk_of = [chunk_of_key[key_of[groups.find(tid)]] for tid in range(count)]
    return chunk_of, chunks, root


@dataclass(frozen=True)
class _ChunkGroups:
    """Groups of messages joined by forwarding (``members``: group -> its transfer ids), to be numbered
    as the chunks of a ``kind`` on ``n`` ranks."""

    kind: Kind
    n: int
    ends: list[tuple[int, int, int, int]]
    members: dict[int, list[int]]
    roots: set[int]
    source: str

    def fail(self, problem: str) -> SynthError:
        """The error for traces whose chunks cannot be inferred."""
        return InputError(self.source, "", f"cannot infer the chunks of this {self.kind}: {problem}; traces written "
                          "by synth carry them (extra attributes 'chunk' and 'transfer')")

    def origin_of(self, group: int) -> int:
        """The one rank where ``group`` starts."""
        starts = {self.ends[t][0] for t in self.members[group] if t in self.roots}
        if len(starts) != 1:
            raise self.fail(f"a chunk starts at ranks {sorted(starts)} instead of one")
        return starts.pop()

    def sink_of(self, group: int) -> tuple[int, int]:
        """The one rank where ``group`` ends, and the lowest rank sending to it there."""
        ends = self.ends
        tids = self.members[group]
        senders = {ends[t][0] for t in tids}
        sinks = {ends[t][2] for t in tids} - senders
        if len(sinks) != 1:
            raise self.fail(f"a chunk ends at ranks {sorted(sinks)} instead of one")
        sink = sinks.pop()
        return sink, min(ends[t][0] for t in tids if ends[t][2] == sink)

    def keys(self, order: list[int]) -> dict[int, tuple[int, int]]:
        """Group -> (owner, k): the k-th group (in ``order``) of its owner (origin, sink, or origin-sink
        pair, by the collective) through the same first or last hop; (0, index) for an allreduce."""
        kind, ends, members = self.kind, self.ends, self.members
        key_of: dict[int, tuple[int, int]] = {}
        seen: dict[tuple[int, int], int] = {}
        if kind in (Kind.ALLGATHER, Kind.BROADCAST):
            for group in order:
                origin = self.origin_of(group)
                first_hop = min(ends[t][2] for t in members[group] if t in self.roots)
                k = seen.get((origin, first_hop), 0)
                seen[(origin, first_hop)] = k + 1
                key_of[group] = (origin, k)
        elif kind in (Kind.REDUCESCATTER, Kind.REDUCE):
            for group in order:
                sink, last_hop = self.sink_of(group)
                k = seen.get((sink, last_hop), 0)
                seen[(sink, last_hop)] = k + 1
                key_of[group] = (sink, k)
        elif kind == Kind.ALLTOALL:
            for group in order:
                origin, (sink, _) = self.origin_of(group), self.sink_of(group)
                k = seen.get((origin, sink), 0)
                seen[(origin, sink)] = k + 1
                key_of[group] = (origin * self.n + sink, k)
        else:
            for index, group in enumerate(order):
                key_of[group] = (0, index)
        return key_of

    def number(self, keys: list[tuple[int, int]]) -> tuple[dict[tuple[int, int], int], int, int | None]:
        """Chunk id of every key (sorted), the chunk count and the root, by the collective's rules."""
        kind, n = self.kind, self.n
        root: int | None = None
        if kind == Kind.ALLREDUCE:
            return {key: index for index, key in enumerate(keys)}, len(keys), root
        if kind in (Kind.BROADCAST, Kind.REDUCE):
            ends_at = {key[0] for key in keys}
            if len(ends_at) != 1:
                what = "only sends" if kind == Kind.BROADCAST else "only receives"
                raise self.fail(f"expected one rank that {what}, found {sorted(ends_at)}")
            root = ends_at.pop()
            return {key: key[1] for key in keys}, len(keys), root
        if kind == Kind.ALLTOALL:
            per_pair: dict[int, int] = {}
            for pair, k in keys:
                per_pair[pair] = max(per_pair.get(pair, 0), k + 1)
            if len(per_pair) != n * (n - 1) or len(set(per_pair.values())) != 1:
                raise self.fail("not every ordered pair of ranks exchanges the same number of chunks")
            per = next(iter(per_pair.values()))
            chunks = n * per
            return {(pair, k): (pair // n) * chunks + (pair % n) * per + k for pair, k in keys}, chunks, root
        per_rank: dict[int, int] = {}
        for rank, k in keys:
            per_rank[rank] = max(per_rank.get(rank, 0), k + 1)
        if len(per_rank) != n or len(set(per_rank.values())) != 1:
            raise self.fail(f"ranks own different numbers of chunks ({sorted(set(per_rank.values()))})")
        per = next(iter(per_rank.values()))
        return {(rank, k): rank * per + k for rank, k in keys}, n * per, root
