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
- broadcast(root): the root's C chunks reach every rank.
- reduce(root): every rank's contribution to each of the C chunks is reduced at the root.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from synth.errors import InputError


class Kind(StrEnum):
    """The collective operations synth knows."""

    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    ALLREDUCE = "allreduce"
    ALLTOALL = "alltoall"
    BROADCAST = "broadcast"
    REDUCE = "reduce"


#: Spellings accepted on input for each collective (MSCCL and NCCL use several).
ALIASES: dict[str, Kind] = {
    "allgather": Kind.ALLGATHER, "all_gather": Kind.ALLGATHER, "all-gather": Kind.ALLGATHER, "ag": Kind.ALLGATHER,
    "reducescatter": Kind.REDUCESCATTER, "reduce_scatter": Kind.REDUCESCATTER,
    "reduce-scatter": Kind.REDUCESCATTER, "rs": Kind.REDUCESCATTER,
    "allreduce": Kind.ALLREDUCE, "all_reduce": Kind.ALLREDUCE, "all-reduce": Kind.ALLREDUCE, "ar": Kind.ALLREDUCE,
    "alltoall": Kind.ALLTOALL, "all_to_all": Kind.ALLTOALL, "all-to-all": Kind.ALLTOALL, "a2a": Kind.ALLTOALL,
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

    def __post_init__(self) -> None:
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

    @property
    def reducing(self) -> bool:
        """True for collectives that combine contributions (reducescatter, allreduce, reduce)."""
        return self.kind in REDUCING

    @property
    def num_chunk_ids(self) -> int:
        """Number of distinct global chunk ids: N*C for alltoall, else C."""
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
        """The rank that owns ``chunk`` (allgather, reducescatter) or where it must end (alltoall)."""
        if self.kind == Kind.ALLTOALL:
            return (chunk % self.chunks) // self.chunks_per_rank
        return chunk // self.chunks_per_rank

    def origin(self, chunk: int) -> int:
        """For alltoall, the rank a global chunk id starts at."""
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
        alltoall; 1 broadcast and reduce."""
        p = self.num_ranks
        if self.kind == Kind.ALLREDUCE:
            return 2 * (p - 1) / p
        if self.kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL):
            return (p - 1) / p
        return 1.0
