"""Alltoallv demands: the ``synth.demand/1`` document, its rounding to chunks, and MoE-like generators.

A demand says how much each rank sends to each other rank: an N x N matrix, row = sender, column =
receiver, diagonal 0 (a rank sends nothing to itself). The document::

    {"format": "synth.demand/1", "ranks": 4, "unit": "bytes", "matrix": [[0, 1048576, 0, 4096], ...]}

``unit`` is ``"bytes"`` (whole numbers of bytes), ``"weights"`` (relative amounts, any finite numbers >= 0;
the message size chosen at evaluation scales them) or ``"chunks"`` (whole chunk counts, used as they are).
Every entry must be a number (no bool, NaN or infinity), >= 0, and not all of them 0.

Rounding to chunks
------------------
A schedule moves equal-sized chunks, so a demand becomes a matrix of chunk counts C[s][d] (what
:meth:`synth.collectives.Collective.alltoallv` takes) by :meth:`Demand.to_chunks`:

- ``chunks=K`` (the total): every pair's quota is q = K·w/W (w its amount, W the total); it gets
  floor(q) chunks, at least 1 when w > 0 (so no pair's data is dropped), and the chunks still missing
  from K go one each to the largest remainders q - floor(q) (ties: the smaller (src, dst)). The total is
  K, or more when the at-least-one rule adds chunks.
- ``resolution=r`` (the amount per chunk, bytes for a bytes demand): each pair gets round(w / r) chunks,
  at least 1 when w > 0.
- neither: ``chunks`` = :data:`DEFAULT_CHUNKS_PER_PAIR` x the number of pairs with w > 0.

A chunk then stands for W / C units (the total is kept exactly); each pair's error is
|C[s][d]·W/C - w| / w, and :class:`Chunked` reports the largest and the total moved off its pair.

Examples
--------
>>> demand = Demand(3, "bytes", ((0, 300, 100), (0, 0, 0), (50, 50, 0)))
>>> chunked = demand.to_chunks(chunks=10)
>>> chunked.matrix, chunked.chunks, chunked.unit_per_chunk
(((0, 6, 2), (0, 0, 0), (1, 1, 0)), 10, 50.0)
>>> chunked.max_pair_error
0.0
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from synth.collectives import check_demand
from synth.errors import InputError

FORMAT = "synth.demand/1"
UNITS = ("bytes", "weights", "chunks")
#: Default resolution of :meth:`Demand.to_chunks`: chunks per pair that sends anything, on average.
DEFAULT_CHUNKS_PER_PAIR = 16

Unit = Literal["bytes", "weights", "chunks"]


@dataclass(frozen=True)
class Chunked:
    """A demand rounded to chunks.

    Attributes
    ----------
    matrix : tuple of tuples of int
        Chunk counts per (src, dst).
    chunks : int
        Their total.
    unit_per_chunk : float
        The demand's units (bytes, weight) one chunk stands for: total / chunks.
    max_pair_error : float
        Largest relative error of one pair's amount, |chunks·unit_per_chunk - amount| / amount.
    moved_fraction : float
        The fraction of the total that rounding moved from one pair to another (half the sum of
        |chunks·unit_per_chunk - amount| over the total).
    unit : str
        The demand's unit (bytes, weights, chunks).
    """

    matrix: tuple[tuple[int, ...], ...]
    chunks: int
    unit_per_chunk: float
    max_pair_error: float
    moved_fraction: float
    unit: str = "chunks"

    def to_dict(self) -> dict[str, Any]:
        """The rounding report as a plain dict (no matrix)."""
        return {"chunks": self.chunks, "unit": self.unit, "unit_per_chunk": self.unit_per_chunk,
                "max_pair_error": self.max_pair_error, "moved_fraction": self.moved_fraction}


@dataclass(frozen=True)
class Demand:
    """An alltoallv demand: ``matrix[s][d]`` units from rank s to rank d (see the module notes)."""

    ranks: int
    unit: Unit
    matrix: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        check_matrix(self.matrix, self.unit, self.ranks)

    @property
    def total(self) -> float:
        """The sum of the matrix."""
        return float(sum(map(sum, self.matrix)))

    def to_dict(self) -> dict[str, Any]:
        """The documented ``synth.demand/1`` object."""
        return {"format": FORMAT, "ranks": self.ranks, "unit": self.unit, "matrix": [list(row) for row in self.matrix]}

    def to_json(self) -> str:
        """JSON text, one matrix row per line."""
        rows = ",\n  ".join(json.dumps(list(row)) for row in self.matrix)
        return (f'{{"format": "{FORMAT}", "ranks": {self.ranks}, "unit": "{self.unit}",\n'
                f' "matrix": [\n  {rows}\n ]\n}}\n')

    def write(self, path: str | Path) -> None:
        """Write the document to ``path`` (atomically)."""
        from synth.fileio import atomic_write_text

        atomic_write_text(path, self.to_json())

    @classmethod
    def from_dict(cls, data: Any, source: str = "") -> Demand:
        """Validate a parsed ``synth.demand/1`` object; an :class:`InputError` names the file and field."""
        if not isinstance(data, dict):
            raise InputError(source, "", "expected a JSON object with format, ranks, unit and matrix")
        if data.get("format") != FORMAT:
            raise InputError(source, "format", f"expected {FORMAT!r}, got {data.get('format')!r}")
        unknown = sorted(set(data) - {"format", "ranks", "unit", "matrix", "comment", "generator"})
        if unknown:
            raise InputError(source, unknown[0], "unknown field; expected format, ranks, unit, matrix (comment, "
                             "generator)")
        for name in ("ranks", "unit", "matrix"):
            if name not in data:
                raise InputError(source, name, "missing required field")
        ranks = data["ranks"]
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
            raise InputError(source, "ranks", f"expected a whole number >= 2, got {ranks!r}")
        unit = data["unit"]
        if unit not in UNITS:
            raise InputError(source, "unit", f"expected one of {', '.join(UNITS)}, got {unit!r}")
        matrix = check_matrix(data["matrix"], unit, ranks, source)
        return cls(ranks, unit, matrix)

    @classmethod
    def from_file(cls, path: str | Path) -> Demand:
        """Read a demand file (JSON or YAML, with the size and syntax checks of
        :func:`synth.documents.read_document`)."""
        from synth.documents import read_document

        return cls.from_dict(read_document(path), str(path))

    def to_chunks(self, chunks: int | None = None, resolution: float | None = None) -> Chunked:
        """The demand in chunk counts (see the module notes for the rule and the error reported)."""
        if self.unit == "chunks" and chunks is None and resolution is None:
            exact = tuple(tuple(int(v) for v in row) for row in self.matrix)
            return Chunked(exact, sum(map(sum, exact)), 1.0, 0.0, 0.0, "chunks")
        if chunks is not None and resolution is not None:
            raise InputError("", "chunks", "give a total chunk count or a resolution, not both")
        flat = [float(v) for row in self.matrix for v in row]
        total = sum(flat)
        if resolution is not None:
            if isinstance(resolution, bool) or not isinstance(resolution, int | float) or not (
                    math.isfinite(resolution) and resolution > 0):
                raise InputError("", "resolution", f"expected an amount per chunk > 0, got {resolution!r}")
            counts = [max(1, round(w / resolution)) if w > 0 else 0 for w in flat]
        else:
            if chunks is None:
                chunks = DEFAULT_CHUNKS_PER_PAIR * sum(1 for w in flat if w > 0)
            if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
                raise InputError("", "chunks", f"expected a whole number of chunks >= 1, got {chunks!r}")
            counts = largest_remainder(flat, chunks)
        n = self.ranks
        matrix = check_demand([counts[s * n:(s + 1) * n] for s in range(n)])
        count = sum(counts)
        per = total / count
        errors = [abs(c * per - w) for c, w in zip(counts, flat, strict=True)]
        worst = max((e / w for e, w in zip(errors, flat, strict=True) if w > 0), default=0.0)
        return Chunked(matrix, count, per, worst, sum(errors) / 2 / total, self.unit)


def largest_remainder(amounts: list[float], chunks: int) -> list[int]:
    """``chunks`` split in proportion to ``amounts`` by the largest-remainder rule, every amount > 0
    getting at least one (see the module notes).

    >>> largest_remainder([0.0, 1.0, 1.0, 1.0], 4), largest_remainder([100.0, 1.0], 4)
    ([0, 2, 1, 1], [3, 1])
    """
    total = sum(amounts)
    quotas = [chunks * w / total for w in amounts]
    counts = [max(1, math.floor(q)) if w > 0 else 0 for q, w in zip(quotas, amounts, strict=True)]
    missing = chunks - sum(counts)
    if missing > 0:
        order = sorted(range(len(amounts)), key=lambda i: (-(quotas[i] - counts[i]), i))
        for i in order[:missing]:
            counts[i] += 1
    return counts


def check_matrix(matrix: Any, unit: str, ranks: int, source: str = "") -> tuple[tuple[float, ...], ...]:
    """The matrix of a demand validated: ``ranks`` rows of ``ranks`` numbers (whole for bytes and chunks),
    each finite and >= 0, a zero diagonal, not all zero; errors name ``source`` and ``matrix.S.D``."""
    if not isinstance(matrix, list | tuple):
        raise InputError(source, "matrix", f"expected a list of {ranks} rows, got {type(matrix).__name__}")
    if len(matrix) != ranks:
        raise InputError(source, "matrix", f"expected {ranks} rows (ranks is {ranks}), got {len(matrix)}")
    whole = unit in ("bytes", "chunks")
    rows = []
    for s, row in enumerate(matrix):
        if not isinstance(row, list | tuple) or len(row) != ranks:
            got = f"{len(row)} entries" if isinstance(row, list | tuple) else type(row).__name__
            raise InputError(source, f"matrix.{s}", f"expected a row of {ranks} numbers (a square matrix), got {got}")
        for d, value in enumerate(row):
            where = f"matrix.{s}.{d}"
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(source, where, f"expected a number, got {type(value).__name__} {value!r}")
            if not math.isfinite(value):
                raise InputError(source, where, f"expected a finite number, got {value!r}")
            if value < 0:
                raise InputError(source, where, f"expected a number >= 0, got {value!r}")
            if whole and not float(value).is_integer():
                raise InputError(source, where, f"expected a whole number of {unit}, got {value!r}")
        if row[s] != 0:
            raise InputError(source, f"matrix.{s}.{s}", f"a rank sends nothing to itself; expected 0, got {row[s]!r}")
        rows.append(tuple(int(v) if whole else v for v in row))
    if not any(v for row in rows for v in row):
        raise InputError(source, "matrix", "every entry is 0: the demand moves nothing")
    return tuple(rows)


# ----------------------------------------------------------------------------------- generators
def moe(num_ranks: int, *, experts_per_gpu: int = 2, top_k: int = 2, zipf: float = 1.0, tokens: int = 4096,
        seed: int = 0) -> Demand:
    """A mixture-of-experts dispatch: token counts each rank sends to each other rank (unit ``weights``).

    Parameters
    ----------
    num_ranks : int
        Gpus (N >= 2).
    experts_per_gpu : int
        Experts hosted per gpu; expert e lives on gpu e // experts_per_gpu (E = N x experts_per_gpu experts).
    top_k : int
        Distinct experts each token is routed to (1 <= top_k <= E).
    zipf : float
        Skew of expert popularity: the expert of popularity rank i (a seeded random order) is chosen with
        weight 1 / i^zipf; 0 is uniform routing.
    tokens : int
        Tokens per gpu.
    seed : int
        The random seed: the same arguments give the same demand.

    Each token picks ``top_k`` distinct experts by weighted sampling without replacement (the Gumbel
    top-k trick); the demand from s to d is the number of (token, expert) choices of gpu s's tokens that
    land on gpu d's experts. Tokens routed to a local expert stay on the gpu (the diagonal is 0).

    Examples
    --------
    >>> d = moe(4, tokens=64, seed=1)
    >>> d.unit, d.ranks, d == moe(4, tokens=64, seed=1), all(d.matrix[r][r] == 0 for r in range(4))
    ('weights', 4, True, True)
    """
    import numpy as np

    for name, value, least in (("num_ranks", num_ranks, 2), ("experts_per_gpu", experts_per_gpu, 1),
                               ("top_k", top_k, 1), ("tokens", tokens, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InputError("", name, f"expected a whole number >= {least}, got {value!r}")
    experts = num_ranks * experts_per_gpu
    if top_k > experts:
        raise InputError("", "top_k", f"expected at most {experts} (the experts), got {top_k}")
    if isinstance(zipf, bool) or not isinstance(zipf, int | float) or not (math.isfinite(zipf) and zipf >= 0):
        raise InputError("", "zipf", f"expected a finite number >= 0, got {zipf!r}")
    rng = np.random.default_rng(seed)
    popularity = np.empty(experts)
    popularity[rng.permutation(experts)] = 1.0 / np.arange(1, experts + 1, dtype=float) ** float(zipf)
    logits = np.log(popularity / popularity.sum())
    host = np.arange(experts) // experts_per_gpu
    matrix = np.zeros((num_ranks, num_ranks), dtype=np.int64)
    for src in range(num_ranks):
        keys = logits + rng.gumbel(size=(tokens, experts))
        chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
        matrix[src] += np.bincount(host[chosen].ravel(), minlength=num_ranks)
    np.fill_diagonal(matrix, 0)
    if not matrix.any():  # every token stayed home (one gpu hosting the only chosen experts): impossible for N >= 2
        raise InputError("", "tokens", "the generated demand moves nothing")  # pragma: no cover
    return Demand(num_ranks, "weights", tuple(tuple(int(v) for v in row) for row in matrix))


def uniform(num_ranks: int, amount: float = 1.0) -> Demand:
    """The same weight from every rank to every other rank (alltoall without the diagonal)."""
    return Demand(num_ranks, "weights",
                  tuple(tuple(0.0 if s == d else float(amount) for d in range(num_ranks)) for s in range(num_ranks)))


def as_chunk_matrix(demand: Any, num_ranks: int, source: str = "", field: str = "demand"
                    ) -> tuple[tuple[int, ...], ...]:
    """The chunk-count matrix of what an algorithm's ``demand`` option may be: a :class:`Demand` (rounded
    by the default rule), a :class:`Chunked`, a matrix of whole chunk counts, or None (1 chunk per pair,
    alltoall without the diagonal); it must have ``num_ranks`` rows."""
    if demand is None:
        matrix = tuple(tuple(0 if s == d else 1 for d in range(num_ranks)) for s in range(num_ranks))
    elif isinstance(demand, Demand):
        matrix = demand.to_chunks().matrix
    elif isinstance(demand, Chunked):
        matrix = demand.matrix
    else:
        matrix = check_demand(demand, source, field)
    if len(matrix) != num_ranks:
        raise InputError(source, field, f"expected a {num_ranks} x {num_ranks} demand (the topology has {num_ranks} "
                         f"gpus), got {len(matrix)} x {len(matrix)}")
    return matrix
