"""Collectives with explicit pre- and postconditions over chunks.

A schedule cuts the data into ``chunks`` (C) equal chunks. Every (rank, chunk) cell holds a *value*:
the set of ranks whose contribution it contains, written as an int bitmask (bit r = rank r's
contribution). Copy collectives move one-contribution values around; reducing collectives combine them.
The verifier and every algorithm read these same definitions.

- allgather: C a multiple of N; rank r owns chunks r*(C/N)..(r+1)*(C/N)-1 at the start (value {r});
  at the end every rank holds every chunk with its owner's value.
- reducescatter: every rank holds its own contribution {r} to every chunk; at the end rank
  ``owner(c)`` holds chunk c with every contribution exactly once.
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
        for name in ("num_ranks", "chunks", "root"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool)) and not (name == "root" and value is None):
                raise InputError("", "ranks" if name == "num_ranks" else name,
                                 f"expected a whole number, got {type(value).__name__} {value!r}")
        if self.num_ranks < 2:
            raise InputError("", "ranks", f"a collective needs at least 2 ranks, got {self.num_ranks}")
        if self.chunks < 1:
            raise InputError("", "chunks", f"expected at least 1 chunk, got {self.chunks}")
        if self.kind in OWNED and self.chunks % self.num_ranks:
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
        """C/N for owned collectives."""
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
            per = self.chunks_per_rank
            for chunk in range(rank * per, (rank + 1) * per):
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
            per = self.chunks_per_rank
            for chunk in range(rank * per, (rank + 1) * per):
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
