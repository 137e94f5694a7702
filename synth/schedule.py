"""The schedule IR and its public JSON form, ``synth.schedule/2`` (``synth.schedule/1`` is still read).

A schedule is a collective plus a tuple of transfers. One transfer moves one chunk from rank ``src``
to rank ``dst`` along ``path`` (physical node ids, every hop a link), after the transfers in ``deps``
have finished. ``op`` is ``copy`` (the target takes the source's value of the chunk) or ``reduce`` (the
target adds the source's partial value into its own).

Buffers: every rank has one *data* cell per chunk (its input before the collective, its output after;
the collective's pre- and postconditions are about these), and *scratch* slots 0, 1, 2, ... that hold
any chunk's value. ``src_scratch`` / ``dst_scratch`` name the scratch slot a transfer reads from or
writes to; None means the data cell of ``chunk``. A transfer with ``src == dst`` is a *local op*
(a copy or reduce between two buffers of one rank, such as MSCCL's ``cpy`` and ``re``): its path is the
rank's gpu alone and it crosses no link. Relays of partial sums go through scratch, so that a gpu on
the way never overwrites its own contribution.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from synth.collectives import Collective, Kind, parse_kind
from synth.errors import InputError
from synth.topology import read_document

FORMAT = "synth.schedule/2"
#: Formats read (older versions are a subset of the current one).
READ_FORMATS = ("synth.schedule/1", FORMAT)
COPY: Final = "copy"
REDUCE: Final = "reduce"


#: Largest accepted scratch slot index.
MAX_SCRATCH_SLOT = 1 << 31


@dataclass(frozen=True, slots=True)
class Transfer:
    """One chunk moved from rank ``src`` to rank ``dst`` along ``path`` after ``deps`` finish; it reads
    scratch slot ``src_scratch`` (None: the data cell of ``chunk``) and writes ``dst_scratch`` (None:
    the data cell). With ``src == dst`` it is a local op and ``path`` is the one gpu."""

    id: int
    src: int
    dst: int
    chunk: int
    op: Literal["copy", "reduce"]
    path: tuple[str, ...]
    deps: tuple[int, ...] = ()
    src_scratch: int | None = None
    dst_scratch: int | None = None

    @property
    def local(self) -> bool:
        """True for a local op (a copy or reduce between two buffers of one rank)."""
        return self.src == self.dst

    def scratch_slots(self) -> dict[str, int]:
        """The scratch slots it reads or writes, by field name (``{}`` when it moves data cells only)."""
        slots = {}
        if self.src_scratch is not None:
            slots["src_scratch"] = self.src_scratch
        if self.dst_scratch is not None:
            slots["dst_scratch"] = self.dst_scratch
        return slots


@dataclass(frozen=True)
class Schedule:
    """A chunk-level schedule for one collective on one topology.

    Transfer ids are 0..T-1 in tuple order (checked on construction), so ``transfers[i].id == i``.

    Examples
    --------
    >>> from synth.collectives import Collective, Kind
    >>> coll = Collective(Kind.BROADCAST, num_ranks=2, chunks=1, root=0)
    >>> s = Schedule(coll, "pair", ("a", "b"), "manual", {}, (Transfer(0, 0, 1, 0, "copy", ("a", "b")),))
    >>> Schedule.from_json(s.to_json()) == s
    True
    """

    collective: Collective
    topology: str
    ranks: tuple[str, ...]
    algorithm: str
    params: Mapping[str, Any] = field(default_factory=dict)
    transfers: tuple[Transfer, ...] = ()
    #: Where the topology came from, when it is a file: a path relative to the schedule file's folder.
    topology_file: str | None = None
    #: The topology's fingerprint (:func:`synth.topology.fingerprint`): a different topology is refused.
    topology_sha256: str | None = None

    def __post_init__(self) -> None:
        if len(self.ranks) != self.collective.num_ranks:
            raise InputError("", "ranks", f"{len(self.ranks)} ranks listed but the collective has "
                             f"{self.collective.num_ranks}")
        for index, transfer in enumerate(self.transfers):
            if transfer.id != index:
                raise InputError("", f"transfers.{index}.id", f"expected id {index} (ids are 0..T-1 in order), "
                                 f"got {transfer.id}")

    @property
    def kind(self) -> Kind:
        """The collective's kind."""
        return self.collective.kind

    @property
    def chunks(self) -> int:
        """Chunks per buffer (C)."""
        return self.collective.chunks

    def scratch_slots(self) -> list[int]:
        """Scratch slots each rank uses (its largest slot index + 1; 0 for none).

        Examples
        --------
        >>> from synth.collectives import Collective, Kind
        >>> coll = Collective(Kind.BROADCAST, num_ranks=2, chunks=1, root=0)
        >>> t = Transfer(0, 0, 1, 0, "copy", ("a", "b"), (), None, 2)
        >>> Schedule(coll, "pair", ("a", "b"), "manual", {}, (t,)).scratch_slots()
        [0, 3]
        """
        used = [0] * self.collective.num_ranks
        for t in self.transfers:
            if t.src_scratch is not None and t.src_scratch >= used[t.src]:
                used[t.src] = t.src_scratch + 1
            if t.dst_scratch is not None and t.dst_scratch >= used[t.dst]:
                used[t.dst] = t.dst_scratch + 1
        return used

    # ---------------------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """The documented ``synth.schedule/2`` object (scratch slots only where a transfer uses them)."""
        return {
            **header_dict(self),
            "transfers": [_transfer_dict(t) for t in self.transfers],
        }

    def to_json(self) -> str:
        """Deterministic JSON text: header fields indented, one transfer per line."""
        data = self.to_dict()
        transfers = data.pop("transfers")
        head = json.dumps(data, indent=1, sort_keys=False)
        lines = [json.dumps(t, separators=(",", ":")) for t in transfers]
        body = ",\n  ".join(lines)
        return head[:-2] + ',\n "transfers": [\n  ' + body + "\n ]\n}\n" if lines else \
            head[:-2] + ',\n "transfers": []\n}\n'

    @classmethod
    def from_dict(cls, data: Any, source: str = "") -> Schedule:
        """Validate a parsed ``synth.schedule/2`` (or ``/1``) object; raises :class:`InputError` naming the
        field."""
        if not isinstance(data, dict):
            raise InputError(source, "", "expected a JSON object at the top level")
        fmt = data.get("format")
        if fmt not in READ_FORMATS:
            raise InputError(source, "format", f"expected {FORMAT!r} (or the older {READ_FORMATS[0]!r}), got {fmt!r}")
        head = read_header(data, "transfers", source)
        collective, ranks = head.collective, head.ranks
        raw = data["transfers"]
        if not isinstance(raw, list):
            raise InputError(source, "transfers", "expected a list")
        _check_size(collective, len(raw), source)
        n = len(ranks)
        limit = collective.num_chunk_ids
        transfers: list[Transfer] = []
        for index, item in enumerate(raw):
            where = f"transfers.{index}"
            if not isinstance(item, dict):
                raise InputError(source, where, "expected an object")
            for name in ("src", "dst", "chunk", "path"):
                if name not in item:
                    raise InputError(source, f"{where}.{name}", "missing required field")
            tid = item.get("id", index)
            if not _is_int(tid) or tid != index:
                raise InputError(source, f"{where}.id", f"expected {index} (ids are 0..T-1 in order), got {tid!r}")
            src, dst, chunk = item["src"], item["dst"], item["chunk"]
            for name, value, upper in (("src", src, n), ("dst", dst, n), ("chunk", chunk, limit)):
                if not _is_int(value) or not 0 <= value < upper:
                    raise InputError(source, f"{where}.{name}", f"expected an integer in 0..{upper - 1}, got {value!r}")
            op = item.get("op", COPY)
            if op not in (COPY, REDUCE):
                raise InputError(source, f"{where}.op", f"expected 'copy' or 'reduce', got {op!r}")
            slots: list[int | None] = []
            for name in ("src_scratch", "dst_scratch"):
                slot = item.get(name)
                if slot is not None and fmt != FORMAT:
                    raise InputError(source, f"{where}.{name}", f"scratch slots need format {FORMAT!r}")
                if slot is not None and (not _is_int(slot) or not 0 <= slot < MAX_SCRATCH_SLOT):
                    raise InputError(source, f"{where}.{name}", f"expected a scratch slot in 0..{MAX_SCRATCH_SLOT - 1} "
                                     f"or null, got {slot!r}")
                slots.append(slot)
            path = item["path"]
            shortest = 1 if src == dst and fmt == FORMAT else 2
            if not isinstance(path, list) or len(path) < shortest or not all(isinstance(p, str) for p in path):
                what = "1 node id (a local op: src == dst)" if shortest == 1 else "2 node ids"
                raise InputError(source, f"{where}.path", f"expected a list of at least {what}")
            deps = item.get("deps", [])
            if not isinstance(deps, list) or not all(_is_int(d) for d in deps):
                raise InputError(source, f"{where}.deps", "expected a list of transfer ids")
            for dep in deps:
                if not 0 <= dep < len(raw):
                    raise InputError(source, f"{where}.deps", f"unknown transfer id {dep}")
            transfers.append(Transfer(index, src, dst, chunk, op, tuple(path), tuple(deps), slots[0], slots[1]))
        return cls(collective, head.topology, ranks, head.algorithm, head.params, tuple(transfers), head.topology_file,
                   head.topology_sha256)

    @classmethod
    def from_json(cls, text: str, source: str = "") -> Schedule:
        """Parse JSON text in the ``synth.schedule/2`` (or ``/1``) format."""
        from synth.topology import parse_json

        return cls.from_dict(parse_json(text, source), source)

    @classmethod
    def from_file(cls, path: str | Path) -> Schedule:
        """Load a schedule file; raises :class:`InputError` naming the file and field."""
        from synth import limits

        return cls.from_dict(read_document(path, max_bytes=int(limits.limit_value("max_schedule_bytes"))), str(path))


@dataclass(frozen=True)
class Header:
    """The header fields every schedule file has, whatever its body (transfers or trees)."""

    collective: Collective
    topology: str
    ranks: tuple[str, ...]
    algorithm: str
    params: dict[str, Any]
    topology_file: str | None
    topology_sha256: str | None


def read_header(data: dict[str, Any], body: str, source: str) -> Header:
    """Validate the header of a parsed schedule object whose body is the field ``body``; raises
    :class:`InputError` naming the field."""
    for name in ("collective", "topology", "ranks", "chunks", body):
        if name not in data:
            raise InputError(source, name, "missing required field")
    kind = parse_kind(_expect(data, "collective", str, source), source)
    ranks = data["ranks"]
    if not isinstance(ranks, list) or not all(isinstance(r, str) for r in ranks):
        raise InputError(source, "ranks", "expected a list of gpu node ids (strings)")
    chunks = _expect(data, "chunks", int, source)
    root = data.get("root")
    if root is not None and not _is_int(root):
        raise InputError(source, "root", f"expected a rank number or null, got {root!r}")
    try:
        collective = Collective(kind, num_ranks=len(ranks), chunks=chunks, root=root)
    except InputError as error:
        raise InputError(source, error.field, error.problem) from None
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise InputError(source, "params", "expected an object")
    algorithm = data.get("algorithm", "unknown")
    if not isinstance(algorithm, str):
        raise InputError(source, "algorithm", "expected a string")
    topology = _expect(data, "topology", str, source)
    topology_file, topology_sha256 = _topology_source(data, source)
    return Header(collective, topology, tuple(ranks), algorithm, params, topology_file, topology_sha256)


def header_dict(schedule: Any) -> dict[str, Any]:
    """The header fields of a schedule object (any form), in documented order."""
    return {
        "format": FORMAT,
        "collective": schedule.collective.kind.value,
        "root": schedule.collective.root,
        "topology": schedule.topology,
        **({"topology_file": schedule.topology_file} if schedule.topology_file is not None else {}),
        **({"topology_sha256": schedule.topology_sha256} if schedule.topology_sha256 is not None else {}),
        "ranks": list(schedule.ranks),
        "chunks": schedule.collective.chunks,
        "algorithm": schedule.algorithm,
        "params": _jsonable(schedule.params),
    }


def _topology_source(data: dict[str, Any], source: str) -> tuple[str | None, str | None]:
    """The optional ``topology_file`` and ``topology_sha256`` header fields, validated."""
    topology_file = data.get("topology_file")
    if topology_file is not None and (not isinstance(topology_file, str) or not topology_file.strip()
                                      or "\0" in topology_file or len(topology_file) > 4096):
        raise InputError(source, "topology_file", "expected a file path (a non-empty string)")
    digest = data.get("topology_sha256")
    if digest is not None and (not isinstance(digest, str) or len(digest) != 64
                               or any(ch not in "0123456789abcdef" for ch in digest)):
        raise InputError(source, "topology_sha256", "expected 64 lower-case hex digits")
    return topology_file, digest


def _check_size(collective: Collective, transfers: int, source: str) -> None:
    """Refuse, before building anything, a schedule over the transfer limit, or one whose declared size
    implies far more work than its transfers could do (a 1 KB file claiming 10^12 chunks). Checking a
    schedule costs about ranks x chunk ids plus its transfers; every correct schedule has at least
    :func:`synth.limits.min_transfers` >= ranks x chunk ids / 2 transfers, so a declared size beyond twice
    the transfers (plus a margin for small wrong schedules, which the verifier explains) cannot be right."""
    from synth import limits

    limits.check_transfers(transfers, f"the schedule in {source or 'the input'}", hint="")
    cells = collective.num_ranks * collective.chunks
    if cells > 2 * transfers + 1_000_000:
        least = limits.min_transfers(collective.kind, collective.num_ranks, collective.chunks)
        raise InputError(source, "chunks", f"{collective.chunks:,} chunks on {collective.num_ranks} ranks need at "
                         f"least {least:,} transfers for a {collective.kind}, the schedule has {transfers:,}")


def _transfer_dict(t: Transfer) -> dict[str, Any]:
    return {"id": t.id, "src": t.src, "dst": t.dst, "chunk": t.chunk, "op": t.op, "path": list(t.path),
            "deps": list(t.deps), **t.scratch_slots()}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _expect(data: dict[str, Any], name: str, kind: type, source: str) -> Any:
    value = data[name]
    if kind is int and not _is_int(value) or not isinstance(value, kind):
        raise InputError(source, name, f"expected {kind.__name__}, got {value!r}")
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)


class ScheduleBuilder:
    """Accumulates transfers with automatic ids; algorithms use it to build schedules.

    Examples
    --------
    >>> from synth.collectives import Collective, Kind
    >>> b = ScheduleBuilder(Collective(Kind.BROADCAST, 2, 1, root=0), "pair", ("a", "b"), "manual")
    >>> b.add(0, 1, 0, ("a", "b"))
    0
    >>> len(b.build().transfers)
    1
    """

    def __init__(self, collective: Collective, topology: str, ranks: Iterable[str], algorithm: str,
                 params: Mapping[str, Any] | None = None) -> None:
        self.collective = collective
        self.topology = topology
        self.ranks = tuple(ranks)
        self.algorithm = algorithm
        self.params = dict(params or {})
        self.transfers: list[Transfer] = []
        self.scratch_used = [0] * collective.num_ranks
        from synth import limits

        self._cap = int(limits.limit_value("max_transfers"))

    def add(self, src: int, dst: int, chunk: int, path: Iterable[str], op: Literal["copy", "reduce"] = COPY,
            deps: Iterable[int] = (), src_scratch: int | None = None, dst_scratch: int | None = None) -> int:
        """Append a transfer and return its id; deps are de-duplicated and sorted."""
        tid = len(self.transfers)
        if tid >= self._cap:  # the cap holds on what is built, not only on the estimate made before building
            from synth import limits

            limits.check_transfers(tid + 1, f"{self.algorithm} {self.collective.kind} on {len(self.ranks)} gpus "
                                   f"with {self.collective.chunks} chunks")
        self.transfers.append(Transfer(tid, src, dst, chunk, op, tuple(path), tuple(sorted(set(deps))),
                                       src_scratch, dst_scratch))
        return tid

    def new_scratch(self, rank: int) -> int:
        """A scratch slot of ``rank`` that no transfer has used yet."""
        slot = self.scratch_used[rank]
        self.scratch_used[rank] = slot + 1
        return slot

    def build(self) -> Schedule:
        """The finished, immutable schedule."""
        return Schedule(self.collective, self.topology, self.ranks, self.algorithm, self.params,
                        tuple(self.transfers))
