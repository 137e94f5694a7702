"""Collectives with explicit pre- and postconditions over chunks.

A schedule cuts the data into ``chunks`` (C) equal chunks. Every (rank, chunk) cell holds a *value*:
the set of ranks whose contribution it contains, written as an int bitmask (bit r = rank r's
contribution). Copy collectives move one-contribution values around; reducing collectives combine them.
The verifier and every algorithm read these same definitions.

- allgather: C a multiple of N; rank r owns chunks r*(C/N)..(r+1)*(C/N)-1 at the start (value {r});
  at the end every rank holds every chunk with its owner's value.
- reducescatter: every rank holds its own contribution {r} to every chunk; at the end rank
  ``owner(c)`` holds chunk c with every contribution exactly once.
- allgatherv and reduce-scatterv (allgather and reducescatter with ``shards``, uneven shards): rank r owns
  ``shards[r]`` consecutive chunk ids (rank 0's first; a rank may own none), C = their sum; otherwise as
  allgather and reducescatter. A message of ``size`` bytes is the whole gathered buffer, so a chunk is
  size/C bytes and rank r's shard size x shards[r] / C.
- allreduce: as reducescatter, but at the end every rank holds every chunk fully reduced.
- alltoall: rank r's input is C chunks (C a multiple of N); global chunk id ``r*C + c`` starts at r and
  must end at rank ``c // (C/N)``.
- alltoallv(demand): an N x N matrix D of chunk counts (diagonal 0): rank s sends D[s][d] equal chunks to
  rank d. C = the sum of D; chunk ids are given out pair by pair in (src, dst) order, so rank s starts
  with the ids of row s (value {s}) and rank d must end with every chunk sent to it, with its origin's
  value. A message of ``size`` bytes is the whole demand (every pair summed), so a chunk is size/C bytes
  and busbw is algbw/N (the mean bytes a rank sends per second). Without a demand, 1 chunk per pair.
- broadcast(root): the root's C chunks reach every rank.
- reduce(root): every rank's contribution to each of the C chunks is reduced at the root.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from synth.errors import InputError


class Kind(StrEnum):
    """The collective operations synth knows."""

    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    ALLREDUCE = "allreduce"
    ALLTOALL = "alltoall"
    ALLTOALLV = "alltoallv"
    BROADCAST = "broadcast"
    REDUCE = "reduce"


#: Spellings accepted on input for each collective (MSCCL and NCCL use several).
ALIASES: dict[str, Kind] = {
    "allgather": Kind.ALLGATHER, "all_gather": Kind.ALLGATHER, "all-gather": Kind.ALLGATHER, "ag": Kind.ALLGATHER,
    "reducescatter": Kind.REDUCESCATTER, "reduce_scatter": Kind.REDUCESCATTER,
    "reduce-scatter": Kind.REDUCESCATTER, "rs": Kind.REDUCESCATTER,
    "allreduce": Kind.ALLREDUCE, "all_reduce": Kind.ALLREDUCE, "all-reduce": Kind.ALLREDUCE, "ar": Kind.ALLREDUCE,
    "alltoall": Kind.ALLTOALL, "all_to_all": Kind.ALLTOALL, "all-to-all": Kind.ALLTOALL, "a2a": Kind.ALLTOALL,
    "alltoallv": Kind.ALLTOALLV, "all_to_allv": Kind.ALLTOALLV, "all-to-allv": Kind.ALLTOALLV, "a2av": Kind.ALLTOALLV,
    "broadcast": Kind.BROADCAST, "bcast": Kind.BROADCAST,
    "reduce": Kind.REDUCE,
}

ROOTED = frozenset({Kind.BROADCAST, Kind.REDUCE})
REDUCING = frozenset({Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.REDUCE})
OWNED = frozenset({Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL})


def parse_kind(text: str, source: str = "", field: str = "collective") -> Kind:
    """Parse a collective name, accepting common spellings (``reduce_scatter``, ``all-gather``...)."""
    kind = ALIASES.get(str(text).strip().lower())
    if kind is None:
        names = ", ".join(k.value for k in Kind)
        raise InputError(source, field, f"unknown collective {text!r}; expected one of {names}")
    return kind


@dataclass(frozen=True)
class Collective:
    """A collective instance: kind, rank count, chunk count and root.

    Preconditions (checked on construction): ``num_ranks >= 2``; ``chunks >= 1``; for allgather,
    reducescatter and alltoall ``chunks`` is a multiple of ``num_ranks``; ``root`` is given exactly for
    broadcast and reduce and lies in range.

    Examples
    --------
    >>> coll = Collective(Kind.ALLGATHER, num_ranks=4, chunks=8)
    >>> coll.owner(5), sorted(coll.initial(2))
    (2, [(4, 4), (5, 4)])
    """

    kind: Kind
    num_ranks: int
    chunks: int
    root: int | None = None
    #: alltoallv only: the N x N matrix of chunk counts (rank s sends ``demand[s][d]`` chunks to rank d).
    demand: tuple[tuple[int, ...], ...] | None = None
    #: allgather and reducescatter only: the chunks each rank owns (uneven shards); None: C/N each.
    shards: tuple[int, ...] | None = None

    @classmethod
    def uneven(cls, kind: Kind, shards: Sequence[int]) -> Collective:
        """allgatherv or reduce-scatterv: rank r owns ``shards[r]`` chunks (chunks = their sum); equal
        shards give the plain collective (``shards`` None).

        >>> coll = Collective.uneven(Kind.ALLGATHER, [1, 3, 0])
        >>> coll.chunks, [coll.owner(c) for c in range(4)], list(coll.owned(1))
        (4, [0, 1, 1, 1], [1, 2, 3])
        >>> Collective.uneven(Kind.ALLGATHER, [2, 2]).shards is None
        True
        """
        counts = check_shards(shards, len(shards) if isinstance(shards, Sequence) else 0)
        even = len(set(counts)) == 1
        return cls(kind, len(counts), sum(counts), shards=None if even else counts)

    @classmethod
    def alltoallv(cls, demand: Sequence[Sequence[int]]) -> Collective:
        """The alltoallv collective of a chunk-count matrix (chunks = its sum).

        >>> coll = Collective.alltoallv([[0, 2], [1, 0]])
        >>> coll.chunks, list(coll.pair_chunks(0, 1)), coll.owner(2), coll.origin(2)
        (3, [0, 1], 0, 1)
        """
        matrix = check_demand(demand)
        return cls(Kind.ALLTOALLV, len(matrix), sum(map(sum, matrix)), demand=matrix)

    @classmethod
    def uniform_alltoallv(cls, num_ranks: int, per_pair: int = 1) -> Collective:
        """alltoallv with ``per_pair`` chunks from every rank to every other rank."""
        return cls.alltoallv([[0 if s == d else per_pair for d in range(num_ranks)] for s in range(num_ranks)])

    def __post_init__(self) -> None:
        if self.kind == Kind.ALLTOALLV or self.demand is not None:
            self._check_demand()
        if self.shards is not None:
            self._check_shards()
        for name in ("num_ranks", "chunks", "root"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool)) and not (name == "root" and value is None):
                raise InputError("", "ranks" if name == "num_ranks" else name,
                                 f"expected a whole number, got {type(value).__name__} {value!r}")
        if self.num_ranks < 2:
            raise InputError("", "ranks", f"a collective needs at least 2 ranks, got {self.num_ranks}")
        if self.chunks < 1:
            raise InputError("", "chunks", f"expected at least 1 chunk, got {self.chunks}")
        if self.kind in OWNED and self.shards is None and self.chunks % self.num_ranks:
            raise InputError("", "chunks", f"{self.kind} needs chunks to be a multiple of the rank count "
                             f"{self.num_ranks}, got {self.chunks}")
        if self.kind in ROOTED:
            if self.root is None or not 0 <= self.root < self.num_ranks:
                raise InputError("", "root", f"{self.kind} needs a root rank in 0..{self.num_ranks - 1}, "
                                 f"got {self.root}")
        elif self.root is not None:
            raise InputError("", "root", f"{self.kind} takes no root, got {self.root}")

    def _check_demand(self) -> None:
        if self.kind != Kind.ALLTOALLV:
            raise InputError("", "demand", f"{self.kind} takes no demand (only alltoallv does)")
        if self.demand is None:
            raise InputError("", "demand", "alltoallv needs a demand (an N x N matrix of chunk counts)")
        matrix = check_demand(self.demand)
        if matrix != self.demand:
            raise InputError("", "demand", "expected a tuple of tuples of ints (use Collective.alltoallv)")
        if len(matrix) != self.num_ranks:
            raise InputError("", "demand", f"expected a {self.num_ranks} x {self.num_ranks} matrix (one row per "
                             f"rank), got {len(matrix)} rows")
        total = sum(map(sum, matrix))
        if self.chunks != total:
            raise InputError("", "chunks", f"alltoallv chunks must be the demand's total {total}, got {self.chunks}")

    def _check_shards(self) -> None:
        if self.kind not in (Kind.ALLGATHER, Kind.REDUCESCATTER):
            raise InputError("", "shards", f"{self.kind} takes no shards (only allgather and reducescatter do)")
        counts = check_shards(self.shards, self.num_ranks)
        if counts != self.shards:
            raise InputError("", "shards", "expected a tuple of ints (use Collective.uneven)")
        if self.chunks != sum(counts):
            raise InputError("", "chunks", f"uneven shards need chunks to be the shards' total {sum(counts)}, "
                             f"got {self.chunks}")

    @cached_property
    def _shard_starts(self) -> list[int]:
        """The first chunk id each rank owns, and the total at the end (owned collectives)."""
        if self.shards is None:
            per = self.chunks // self.num_ranks
            return [rank * per for rank in range(self.num_ranks + 1)]
        starts = [0]
        for count in self.shards:
            starts.append(starts[-1] + count)
        return starts

    def owned(self, rank: int) -> range:
        """allgather and reducescatter: the chunk ids ``rank`` owns (its shard)."""
        starts = self._shard_starts
        return range(starts[rank], starts[rank + 1])

    @cached_property
    def _starts(self) -> list[int]:
        """alltoallv: the first chunk id of pair (s, d) at index s*N + d, and the total at the end."""
        starts = [0]
        for row in self.demand or ():
            for count in row:
                starts.append(starts[-1] + count)
        return starts

    def pair_chunks(self, src: int, dst: int) -> range:
        """alltoallv: the chunk ids rank ``src`` sends to rank ``dst`` (consecutive, in (src, dst) order)."""
        index = src * self.num_ranks + dst
        return range(self._starts[index], self._starts[index + 1])

    def _pair_of(self, chunk: int) -> tuple[int, int]:
        index = bisect.bisect_right(self._starts, chunk) - 1
        return divmod(index, self.num_ranks)

    @property
    def reducing(self) -> bool:
        """True for collectives that combine contributions (reducescatter, allreduce, reduce)."""
        return self.kind in REDUCING

    @property
    def num_chunk_ids(self) -> int:
        """Number of distinct global chunk ids: N*C for alltoall, else C (alltoallv: the demand's total)."""
        return self.num_ranks * self.chunks if self.kind == Kind.ALLTOALL else self.chunks

    @property
    def chunks_per_rank(self) -> int:
        """C/N for owned collectives with even shards (with uneven ones, see :meth:`owned`)."""
        if self.shards is not None:
            raise ValueError("uneven shards have no one count of chunks per rank; use owned(rank)")
        return self.chunks // self.num_ranks

    @property
    def full_mask(self) -> int:
        """The value of a fully reduced chunk: every rank's bit set."""
        return (1 << self.num_ranks) - 1

    def owner(self, chunk: int) -> int:
        """The rank that owns ``chunk`` (allgather, reducescatter) or where it must end (alltoall, alltoallv)."""
        if self.kind == Kind.ALLTOALLV:
            return self._pair_of(chunk)[1]
        if self.kind == Kind.ALLTOALL:
            return (chunk % self.chunks) // self.chunks_per_rank
        if self.shards is not None:
            return bisect.bisect_right(self._shard_starts, chunk) - 1
        return chunk // self.chunks_per_rank

    def origin(self, chunk: int) -> int:
        """For alltoall and alltoallv, the rank a global chunk id starts at."""
        if self.kind == Kind.ALLTOALLV:
            return self._pair_of(chunk)[0]
        return chunk // self.chunks

    def initial(self, rank: int) -> Iterator[tuple[int, int]]:
        """The (chunk, value) cells a rank holds before the collective starts."""
        bit = 1 << rank
        if self.kind == Kind.ALLGATHER:
            for chunk in self.owned(rank):
                yield chunk, bit
        elif self.kind == Kind.ALLTOALL:
            for chunk in range(rank * self.chunks, (rank + 1) * self.chunks):
                yield chunk, bit
        elif self.kind == Kind.ALLTOALLV:
            n = self.num_ranks
            for chunk in range(self._starts[rank * n], self._starts[(rank + 1) * n]):
                yield chunk, bit
        elif self.kind == Kind.BROADCAST:
            if rank == self.root:
                for chunk in range(self.chunks):
                    yield chunk, bit
        else:  # reducescatter, allreduce, reduce: every rank holds its contribution to every chunk
            for chunk in range(self.chunks):
                yield chunk, bit

    def final(self, rank: int) -> Iterator[tuple[int, int]]:
        """The (chunk, value) cells a rank must hold when the collective ends."""
        if self.kind == Kind.ALLGATHER:
            for chunk in range(self.chunks):
                yield chunk, 1 << self.owner(chunk)
        elif self.kind == Kind.ALLTOALL:
            per = self.chunks_per_rank
            for origin in range(self.num_ranks):
                for local in range(rank * per, (rank + 1) * per):
                    yield origin * self.chunks + local, 1 << origin
        elif self.kind == Kind.ALLTOALLV:
            for origin in range(self.num_ranks):
                for chunk in self.pair_chunks(origin, rank):
                    yield chunk, 1 << origin
        elif self.kind == Kind.BROADCAST:
            for chunk in range(self.chunks):
                yield chunk, 1 << self.root  # type: ignore[operator]
        elif self.kind == Kind.REDUCESCATTER:
            for chunk in self.owned(rank):
                yield chunk, self.full_mask
        elif self.kind == Kind.ALLREDUCE:
            for chunk in range(self.chunks):
                yield chunk, self.full_mask
        elif self.kind == Kind.REDUCE:
            if rank == self.root:
                for chunk in range(self.chunks):
                    yield chunk, self.full_mask

    def chunk_bytes(self, size: int) -> float:
        """Bytes in one chunk for a message of ``size`` bytes as nccl-tests counts it."""
        return size / self.chunks

    def busbw_factor(self) -> float:
        """nccl-tests bus bandwidth factor: 2(p-1)/p allreduce; (p-1)/p allgather, reducescatter,
        alltoall; 1 broadcast and reduce; 1/p alltoallv (whose size is the whole demand)."""
        p = self.num_ranks
        if self.kind == Kind.ALLTOALLV:
            return 1 / p
        if self.kind == Kind.ALLREDUCE:
            return 2 * (p - 1) / p
        if self.kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL):
            return (p - 1) / p
        return 1.0


def min_transfers(kind: Kind, num_ranks: int, chunks: int) -> int:
    """A lower bound on the transfers of any schedule for the collective (one transfer moves one chunk
    to one rank): every rank but one must receive (or, for reduce, send) each chunk it needs at least once.

    Examples
    --------
    >>> min_transfers(Kind.ALLGATHER, 8, 8), min_transfers(Kind.ALLREDUCE, 8, 8)
    (56, 112)
    """
    n = num_ranks
    if kind == Kind.ALLTOALLV:  # chunks is the demand's total; each chunk moves at least once
        return chunks
    if kind == Kind.ALLREDUCE:
        return 2 * (n - 1) * chunks
    if kind in (Kind.ALLGATHER, Kind.BROADCAST, Kind.REDUCE):
        return (n - 1) * chunks
    # reducescatter: every chunk needs N-1 contributions moved; alltoall: (N-1)/N of N*C chunks move
    return (n - 1) * chunks


def check_demand(demand: object, source: str = "", field: str = "demand") -> tuple[tuple[int, ...], ...]:
    """A chunk-count matrix validated (square, at least 2 x 2, whole numbers >= 0, zero diagonal, not all
    zero) and returned as a tuple of tuples; an :class:`InputError` naming ``field`` otherwise."""
    if not isinstance(demand, Sequence) or isinstance(demand, str):
        raise InputError(source, field, f"expected a matrix (a list of rows), got {type(demand).__name__}")
    n = len(demand)
    if n < 2:
        raise InputError(source, field, f"a collective needs at least 2 ranks, got a {n}-row matrix")
    rows = []
    for s, row in enumerate(demand):
        if not isinstance(row, Sequence) or isinstance(row, str) or len(row) != n:
            got = f"{len(row)} entries" if isinstance(row, Sequence) else type(row).__name__
            raise InputError(source, f"{field}.{s}", f"expected a row of {n} chunk counts (a square matrix), got {got}")
        for d, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(source, f"{field}.{s}.{d}", f"expected a whole number of chunks >= 0, got {value!r}")
        if row[s]:
            raise InputError(source, f"{field}.{s}.{s}", f"a rank sends nothing to itself; expected 0, got {row[s]}")
        rows.append(tuple(int(v) for v in row))
    if not any(map(any, rows)):
        raise InputError(source, field, "every entry is 0: the demand moves nothing")
    return tuple(rows)


#: Most units uneven shards may have in lowest terms (their sum over their gcd).
MAX_SHARD_WEIGHT = 1 << 16
#: Most chunks uneven shards may name in all (each is a chunk id of the schedule).
MAX_SHARD_CHUNKS = 1 << 24


def check_shards(shards: object, num_ranks: int, source: str = "", field: str = "shards") -> tuple[int, ...]:
    """``shards`` as a tuple of chunk counts, one per rank (whole numbers, at least 0, not all 0, at most
    :data:`MAX_SHARD_CHUNKS` in all), or an :class:`InputError` naming ``field``."""
    if num_ranks < 2:
        raise InputError(source, field, f"a collective needs at least 2 ranks, got {num_ranks}")
    counts = _checked_counts(shards, num_ranks, source, field)
    total = sum(counts)
    if total > MAX_SHARD_CHUNKS:
        raise InputError(source, field, f"the shards name {total:,} chunks, over the {MAX_SHARD_CHUNKS:,} allowed; "
                         "give them as small relative weights")
    return counts


def shard_weights(shards: object, num_ranks: int, source: str = "", field: str = "shards") -> tuple[int, ...] | None:
    """Uneven shards as the smallest whole weights in the same proportions (divided by their gcd), or None
    when every shard is the same size (the plain collective). ``shards`` is one size per rank: chunks,
    bytes or relative weights, at least 0 and not all 0.

    >>> shard_weights([2, 6, 4, 0], 4), shard_weights([3, 3], 2)
    ((1, 3, 2, 0), None)
    """
    if isinstance(shards, str):
        shards = _shard_list(shards, source, field)
    counts = _checked_counts(shards, num_ranks, source, field)
    if len(set(counts)) == 1:
        return None
    divisor = math.gcd(*counts)
    weights = tuple(count // divisor for count in counts)
    if sum(weights) > MAX_SHARD_WEIGHT:
        raise InputError(source, field, f"the shards in lowest terms are {sum(weights):,} units in all, over the "
                         f"{MAX_SHARD_WEIGHT:,} allowed (each unit is at least one chunk, forest packs trees per "
                         "unit); round them to fewer distinct sizes")
    return check_shards(weights, num_ranks, source, field)


def uneven_weights(kind: Kind, shards: object, num_ranks: int, source: str = "",
                   field: str = "shards") -> tuple[int, ...] | None:
    """:func:`shard_weights` of ``shards`` for ``kind`` (None without shards, or when they are even); uneven
    shards for any collective but allgather and reducescatter are refused, naming ``field``.

    >>> uneven_weights(Kind.ALLGATHER, [2, 4], 2), uneven_weights(Kind.ALLGATHER, None, 2)
    ((1, 2), None)
    """
    if shards is None:
        return None
    if kind not in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        raise InputError(source, field, f"uneven shards are for allgather and reducescatter, not {kind}")
    return shard_weights(shards, num_ranks, source, field)


def _shard_list(text: str, source: str, field: str) -> list[int]:
    """``"1,2,0,4"`` or ``"1MiB,512KiB"`` as a list of ints (bytes where a unit is given), or an
    :class:`InputError` naming the entry."""
    from synth.units import parse_size

    values = []
    for index, part in enumerate(text.split(",")):
        item = part.strip()
        try:
            values.append(int(item))
        except ValueError:
            try:
                values.append(parse_size(item, f"{field}[{index}]"))
            except InputError:
                raise InputError(source, f"{field}[{index}]", f"expected a whole number or a size such as 1MiB, "
                                 f"got {item!r}") from None
    return values


def _checked_counts(shards: object, num_ranks: int, source: str, field: str) -> tuple[int, ...]:
    """One whole number at least 0 per rank, not all 0 (any size: :func:`check_shards` caps the total)."""
    if not isinstance(shards, Sequence) or isinstance(shards, str):
        raise InputError(source, field, f"expected a list of shard sizes, one per rank, got {type(shards).__name__}")
    if len(shards) != num_ranks:
        raise InputError(source, field, f"expected {num_ranks} shard sizes (one per rank), got {len(shards)}")
    for rank, count in enumerate(shards):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InputError(source, f"{field}[{rank}]", f"expected a whole number at least 0, got {count!r}")
    if not any(shards):
        raise InputError(source, field, "every shard is empty: the collective moves nothing")
    return tuple(shards)
