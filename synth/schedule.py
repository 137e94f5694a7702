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

In-switch operations (``synth.schedule/3``): a schedule may list ``switch_ops``, each a reduction or a
multicast that one switch performs on one chunk (:class:`SwitchOp`). Its *legs* are transfers: an input
leg (``to_switch`` = the op's id, ``dst`` None) carries a rank's value of the chunk from its gpu to the
switch; an output leg (``from_switch`` = the op's id, ``src`` None) carries the op's result from the switch
to a rank, which takes it with the leg's ``op`` (copy, or reduce into its own value). A reduce op combines
what its inputs bring (NVLS ``multimem.ld_reduce``, a SHARP aggregation); a multicast op copies its one
input to every output (``multimem.st``). Every output leg lists every input leg of its op among its
``deps`` (the switch has its result only when the last input has arrived), so the order of a schedule is
its deps alone, with or without switch ops. A schedule without switch ops is written as
``synth.schedule/2``, byte for byte as before; every ``/1`` and ``/2`` file reads unchanged.

Alltoallv (``synth.schedule/3``): the header's ``demand`` is the N x N matrix of chunk counts (rank s sends
``demand[s][d]`` chunks to rank d, ids pair by pair in (src, dst) order; ``chunks`` is its total), read
only in ``/3`` and ``/4`` and required there for an alltoallv; an alltoallv schedule is written as ``/3``.

Uneven shards (``synth.schedule/4``: allgatherv and reduce-scatterv): the header's ``shards`` lists the
chunks each rank owns (rank 0's ids first; ``chunks`` is their total). ``/4`` is ``/3`` with that field, read
only there, and the format every schedule with shards is written in; every other schedule is written as
before.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, Protocol, Self

from synth.collectives import Collective, Kind, check_demand, check_shards, min_transfers, parse_kind
from synth.documents import read_document
from synth.errors import InputError, excerpt

FORMAT = "synth.schedule/2"
#: The format of a schedule with in-switch operations (``switch_ops``); ``/2`` files are ``/3`` files without.
SWITCH_FORMAT = "synth.schedule/3"
#: The format of a schedule with uneven shards (``shards``); ``/3`` files are ``/4`` files without.
SHARDS_FORMAT = "synth.schedule/4"
#: Formats read (older versions are a subset of the current one).
READ_FORMATS = ("synth.schedule/1", FORMAT, SWITCH_FORMAT, SHARDS_FORMAT)
#: Formats that may carry switch ops and an alltoallv demand.
_SWITCH_FORMATS = (SWITCH_FORMAT, SHARDS_FORMAT)


def format_of(collective: Collective, switch_ops: bool = False) -> str:
    """The format a schedule is written in: ``/4`` with uneven shards, ``/3`` with switch ops or an
    alltoallv demand, else ``/2``."""
    if collective.shards is not None:
        return SHARDS_FORMAT
    return SWITCH_FORMAT if switch_ops or collective.demand is not None else FORMAT
COPY: Final = "copy"
REDUCE: Final = "reduce"
#: Kinds of in-switch operation.
SWITCH_REDUCE: Final = "reduce"
SWITCH_MULTICAST: Final = "multicast"
#: Reduction operations and data types a switch op may name (the switch's ``capabilities`` say which it serves).
SWITCH_OPS_NAMES = ("sum", "prod", "min", "max")
SWITCH_DTYPES = ("f64", "f32", "f16", "bf16", "fp8e4m3", "fp8e5m2", "i64", "i32", "i8", "u64", "u32", "u8")


#: Largest accepted scratch slot index.
MAX_SCRATCH_SLOT = 1 << 31


@dataclass(frozen=True, slots=True)
class Transfer:
    """One chunk moved from rank ``src`` to rank ``dst`` along ``path`` after ``deps`` finish; it reads
    scratch slot ``src_scratch`` (None: the data cell of ``chunk``) and writes ``dst_scratch`` (None:
    the data cell). With ``src == dst`` it is a local op and ``path`` is the one gpu."""

    id: int
    src: int | None
    dst: int | None
    chunk: int
    op: Literal["copy", "reduce"]
    path: tuple[str, ...]
    deps: tuple[int, ...] = ()
    src_scratch: int | None = None
    dst_scratch: int | None = None
    #: The switch op this transfer feeds (an input leg: ``dst`` is None), or None.
    to_switch: int | None = None
    #: The switch op whose result this transfer carries (an output leg: ``src`` is None), or None.
    from_switch: int | None = None

    @property
    def local(self) -> bool:
        """True for a local op (a copy or reduce between two buffers of one rank)."""
        return self.src == self.dst

    @property
    def leg(self) -> bool:
        """True for a leg of a switch op (it starts or ends at a switch, not at a rank)."""
        return self.to_switch is not None or self.from_switch is not None

    @property
    def switch_op(self) -> int | None:
        """The switch op this transfer is a leg of (``to_switch`` or ``from_switch``), or None."""
        return self.to_switch if self.to_switch is not None else self.from_switch

    def ends(self) -> tuple[int, int]:
        """``(src, dst)`` of a transfer between ranks; :class:`ValueError` for a leg of a switch op (a
        consumer that cannot express switch ops refuses them first: :meth:`Schedule.require_point_to_point`)."""
        if self.src is None or self.dst is None:
            raise ValueError(f"transfer {self.id} is a leg of switch op {self.switch_op}, not a transfer between ranks")
        return self.src, self.dst

    def scratch_slots(self) -> dict[str, int]:
        """The scratch slots it reads or writes, by field name (``{}`` when it moves data cells only)."""
        slots = {}
        if self.src_scratch is not None:
            slots["src_scratch"] = self.src_scratch
        if self.dst_scratch is not None:
            slots["dst_scratch"] = self.dst_scratch
        return slots


@dataclass(frozen=True, slots=True)
class SwitchOp:
    """One in-switch operation on one chunk: ``kind`` ``"reduce"`` (combine the inputs' values with
    ``op``, elements of type ``dtype``) or ``"multicast"`` (copy the one input to every output), performed by
    switch node ``switch``. Its inputs and outputs are the transfers whose ``to_switch`` / ``from_switch``
    is ``id``.

    Examples
    --------
    >>> SwitchOp(0, "nvs", "reduce", 3).to_dict()
    {'id': 0, 'switch': 'nvs', 'kind': 'reduce', 'chunk': 3, 'op': 'sum', 'dtype': 'f32'}
    >>> SwitchOp(1, "nvs", "multicast", 3).to_dict()
    {'id': 1, 'switch': 'nvs', 'kind': 'multicast', 'chunk': 3}
    """

    id: int
    switch: str
    kind: Literal["reduce", "multicast"]
    chunk: int
    op: str = "sum"
    dtype: str = "f32"

    def to_dict(self) -> dict[str, Any]:
        """The documented file form (``op`` and ``dtype`` only for a reduce)."""
        data: dict[str, Any] = {"id": self.id, "switch": self.switch, "kind": self.kind, "chunk": self.chunk}
        if self.kind == SWITCH_REDUCE:
            data["op"] = self.op
            data["dtype"] = self.dtype
        return data


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
    #: In-switch operations (ids 0..K-1 in order); their legs are transfers.
    switch_ops: tuple[SwitchOp, ...] = ()

    def __post_init__(self) -> None:
        if len(self.ranks) != self.collective.num_ranks:
            raise InputError("", "ranks", f"{len(self.ranks)} ranks listed but the collective has "
                             f"{self.collective.num_ranks}")
        for index, transfer in enumerate(self.transfers):
            if transfer.id != index:
                raise InputError("", f"transfers.{index}.id", f"expected id {index} (ids are 0..T-1 in order), "
                                 f"got {transfer.id}")
        for index, switch_op in enumerate(self.switch_ops):
            if switch_op.id != index:
                raise InputError("", f"switch_ops.{index}.id", f"expected id {index} (ids are 0..K-1 in order), "
                                 f"got {switch_op.id}")

    @property
    def format(self) -> str:
        """The schedule's format (:func:`format_of`)."""
        return format_of(self.collective, bool(self.switch_ops))

    def legs(self) -> tuple[list[list[int]], list[list[int]]]:
        """The ids of each switch op's input legs and output legs, in transfer order.

        Examples
        --------
        >>> from synth.collectives import Collective, Kind
        >>> coll = Collective(Kind.ALLREDUCE, num_ranks=2, chunks=1)
        >>> b = ScheduleBuilder(coll, "box", ("g0", "g1"), "manual")
        >>> k = b.add_switch_op("nvs", "reduce", 0)
        >>> _ = b.add_to_switch(0, k, ("g0", "nvs")), b.add_to_switch(1, k, ("g1", "nvs"))
        >>> _ = b.add_from_switch(k, 0, ("nvs", "g0")), b.add_from_switch(k, 1, ("nvs", "g1"))
        >>> b.build().legs()
        ([[0, 1]], [[2, 3]])
        """
        inputs: list[list[int]] = [[] for _ in self.switch_ops]
        outputs: list[list[int]] = [[] for _ in self.switch_ops]
        for t in self.transfers:
            if t.to_switch is not None:
                inputs[t.to_switch].append(t.id)
            elif t.from_switch is not None:
                outputs[t.from_switch].append(t.id)
        return inputs, outputs

    #: Transfers held in memory (False: the trees form, whose transfers are made one at a time as they are read).
    held: ClassVar[bool] = True

    def num_transfers(self) -> int:
        """How many transfers the schedule has."""
        return len(self.transfers)

    def iter_transfers(self) -> Iterator[Transfer]:
        """The transfers in id order."""
        return iter(self.transfers)

    def expand(self) -> Schedule:
        """The schedule with every transfer: this one."""
        return self

    def with_topology_source(self, topology_file: str | None, topology_sha256: str | None) -> Schedule:
        """This schedule, recording where its topology came from (a file path, its fingerprint)."""
        return dataclasses.replace(self, topology_file=topology_file, topology_sha256=topology_sha256)

    def link_chunks(self) -> dict[tuple[str, str], int]:
        """Chunks crossing each directed link (``(u, v)`` -> count), over every transfer's path."""
        counts: dict[tuple[str, str], int] = {}
        for t in self.transfers:
            path = t.path
            for hop in zip(path, path[1:], strict=False):
                counts[hop] = counts.get(hop, 0) + 1
        return counts

    def check_storable(self, what: str) -> None:
        """Refuse (:class:`~synth.errors.LimitError`) a schedule that would be refused when read back from a
        file: over the transfer limit. ``what`` names the file for the message."""
        from synth import limits

        limits.check_transfers(len(self.transfers), f"the schedule for {what}", hint="it would be refused when read back")

    def require_point_to_point(self, what: str) -> None:
        """Refuse (:class:`~synth.errors.NotApplicable`) a schedule with switch ops, for a consumer that
        cannot express them; ``what`` names the consumer."""
        if self.switch_ops:
            from synth.errors import NotApplicable

            first = self.switch_ops[0]
            raise NotApplicable(
                f"{what} cannot express in-switch operations; schedule {self.algorithm!r} has "
                f"{len(self.switch_ops):,} (the first: switch op 0, a {first.kind} of chunk {first.chunk} on "
                f"switch {first.switch}). Use a schedule whose algorithm moves data between ranks only (ring, "
                f"tree, forest, ...), or a target that has them (synth export mscclpp)")

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
            if t.src_scratch is not None and t.src is not None and t.src_scratch >= used[t.src]:
                used[t.src] = t.src_scratch + 1
            if t.dst_scratch is not None and t.dst is not None and t.dst_scratch >= used[t.dst]:
                used[t.dst] = t.dst_scratch + 1
        return used

    # ---------------------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """The documented ``synth.schedule/2`` object (scratch slots only where a transfer uses them), or
        ``synth.schedule/3`` with ``switch_ops`` when it has in-switch operations."""
        head = header_dict(self)
        if not self.switch_ops:
            return {**head, "transfers": [_transfer_dict(t) for t in self.transfers]}
        head["format"] = format_of(self.collective, True)
        return {**head, "switch_ops": [op.to_dict() for op in self.switch_ops],
                "transfers": [_transfer_dict(t) for t in self.transfers]}

    def to_json(self) -> str:
        """Deterministic JSON text: header fields indented, one transfer per line."""
        data = self.to_dict()
        transfers = data.pop("transfers")
        switch_ops = data.pop("switch_ops", None)
        head = compact_header(data)
        if switch_ops is not None:
            ops = ",\n  ".join(json.dumps(op, separators=(",", ":")) for op in switch_ops)
            head = head[:-2] + ',\n "switch_ops": [\n  ' + ops + "\n ]\n}"
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
            raise InputError(source, "format", f"expected {FORMAT!r}, {SWITCH_FORMAT!r} (with switch ops), "
                             f"{SHARDS_FORMAT!r} (with shards) or the older {READ_FORMATS[0]!r}, "
                             f"got {excerpt(repr(fmt))}")
        head = read_header(data, "transfers", source, fmt)
        collective, ranks = head.collective, head.ranks
        raw = data["transfers"]
        if not isinstance(raw, list):
            raise InputError(source, "transfers", "expected a list")
        _check_size(collective, len(raw), source)
        n = len(ranks)
        limit = collective.num_chunk_ids
        switch_ops = _read_switch_ops(data, fmt, limit, source)
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
            to_switch, from_switch = _read_leg(item, where, fmt, len(switch_ops), source)
            src, dst, chunk = item["src"], item["dst"], item["chunk"]
            for name, value, upper in (("src", src, n), ("dst", dst, n), ("chunk", chunk, limit)):
                if value is None and (name == "src" and from_switch is not None or name == "dst" and to_switch is not None):
                    continue
                if not _is_int(value) or not 0 <= value < upper:
                    leg = {"src": " (null only on an output leg: from_switch)",
                           "dst": " (null only on an input leg: to_switch)"}.get(name, "") if value is None else ""
                    raise InputError(source, f"{where}.{name}", f"expected an integer in 0..{upper - 1}{leg}, got "
                                     f"{value!r}")
            if to_switch is not None and dst is not None or from_switch is not None and src is not None:
                name = "dst" if to_switch is not None else "src"
                raise InputError(source, f"{where}.{name}", f"expected null: a leg of a switch op has the switch at "
                                 f"that end, got {item[name]!r}")
            op = item.get("op", COPY)
            if op not in (COPY, REDUCE):
                raise InputError(source, f"{where}.op", f"expected 'copy' or 'reduce', got {op!r}")
            slots: list[int | None] = []
            for name in ("src_scratch", "dst_scratch"):
                slot = item.get(name)
                if slot is not None and fmt == READ_FORMATS[0]:
                    raise InputError(source, f"{where}.{name}", f"scratch slots need format {FORMAT!r}")
                if slot is not None and (not _is_int(slot) or not 0 <= slot < MAX_SCRATCH_SLOT):
                    raise InputError(source, f"{where}.{name}", f"expected a scratch slot in 0..{MAX_SCRATCH_SLOT - 1} "
                                     f"or null, got {slot!r}")
                slots.append(slot)
            if slots[1] is not None and to_switch is not None or slots[0] is not None and from_switch is not None:
                name = "dst_scratch" if to_switch is not None else "src_scratch"
                raise InputError(source, f"{where}.{name}", "expected null: that end of a switch op's leg is the switch")
            path = item["path"]
            shortest = 1 if src == dst and fmt != READ_FORMATS[0] else 2
            if not isinstance(path, list) or len(path) < shortest or not all(isinstance(p, str) for p in path):
                what = "1 node id (a local op: src == dst)" if shortest == 1 else "2 node ids"
                raise InputError(source, f"{where}.path", f"expected a list of at least {what}")
            deps = item.get("deps", [])
            if not isinstance(deps, list) or not all(_is_int(d) for d in deps):
                raise InputError(source, f"{where}.deps", "expected a list of transfer ids")
            for dep in deps:
                if not 0 <= dep < len(raw):
                    raise InputError(source, f"{where}.deps", f"unknown transfer id {dep}")
            transfers.append(Transfer(index, src, dst, chunk, op, tuple(path), tuple(deps), slots[0], slots[1],
                                      to_switch, from_switch))
        return cls(collective, head.topology, ranks, head.algorithm, head.params, tuple(transfers), head.topology_file,
                   head.topology_sha256, switch_ops)

    @classmethod
    def from_json(cls, text: str, source: str = "") -> Schedule:
        """Parse JSON text in the ``synth.schedule/2`` (or ``/1``) format."""
        from synth.documents import parse_json

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


def read_header(data: dict[str, Any], body: str, source: str, fmt: str | None = None) -> Header:
    """Validate the header of a parsed schedule object whose body is the field ``body``; raises
    :class:`InputError` naming the field. An alltoallv header has ``demand`` (the matrix of chunk
    counts), which needs format ``synth.schedule/3`` (``fmt``)."""
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
    demand = data.get("demand")
    if demand is not None and fmt not in _SWITCH_FORMATS:
        raise InputError(source, "demand", f"an alltoallv demand needs format {SWITCH_FORMAT!r}, got {fmt!r}")
    shards = data.get("shards")
    if shards is not None and fmt != SHARDS_FORMAT:
        raise InputError(source, "shards", f"uneven shards need format {SHARDS_FORMAT!r}, got {fmt!r}")
    if (demand is None) == (kind == Kind.ALLTOALLV):
        raise InputError(source, "demand", "alltoallv needs a demand (the matrix of chunk counts)" if demand is None
                         else f"{kind} takes no demand (only alltoallv does)")
    try:
        collective = Collective(kind, num_ranks=len(ranks), chunks=chunks, root=root,
                                demand=None if demand is None else check_demand(demand, source),
                                shards=None if shards is None else check_shards(shards, len(ranks), source))
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
    demand = schedule.collective.demand
    shards = schedule.collective.shards
    return {
        "format": format_of(schedule.collective),
        "collective": schedule.collective.kind.value,
        "root": schedule.collective.root,
        "topology": schedule.topology,
        **({"topology_file": schedule.topology_file} if schedule.topology_file is not None else {}),
        **({"topology_sha256": schedule.topology_sha256} if schedule.topology_sha256 is not None else {}),
        "ranks": list(schedule.ranks),
        "chunks": schedule.collective.chunks,
        **({"demand": [list(row) for row in demand]} if demand is not None else {}),
        **({"shards": list(shards)} if shards is not None else {}),
        "algorithm": schedule.algorithm,
        "params": _jsonable(schedule.params),
    }


def compact_header(data: dict[str, Any]) -> str:
    """The header object as indented JSON, an alltoallv demand one matrix row per line and uneven shards on
    one line."""
    demand, shards = data.get("demand"), data.get("shards")
    if demand is not None:
        data = {**data, "demand": "@demand@"}
    if shards is not None:
        data = {**data, "shards": "@shards@"}
    head = json.dumps(data, indent=1, sort_keys=False)
    if demand is not None:
        head = head.replace('"@demand@"', "[\n  " + ",\n  ".join(json.dumps(row) for row in demand) + "\n ]", 1)
    if shards is not None:
        head = head.replace('"@shards@"', json.dumps(shards), 1)
    return head


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
    :func:`synth.collectives.min_transfers` >= ranks x chunk ids / 2 transfers, so a declared size beyond twice
    the transfers (plus a margin for small wrong schedules, which the verifier explains) cannot be right."""
    from synth import limits

    limits.check_transfers(transfers, f"the schedule in {source or 'the input'}", hint="")
    cells = collective.num_ranks * collective.chunks if collective.demand is None else collective.chunks
    if cells > 2 * transfers + 1_000_000:
        least = min_transfers(collective.kind, collective.num_ranks, collective.chunks)
        raise InputError(source, "chunks", f"{collective.chunks:,} chunks on {collective.num_ranks} ranks need at "
                         f"least {least:,} transfers for a {collective.kind}, the schedule has {transfers:,}")


def _transfer_dict(t: Transfer) -> dict[str, Any]:
    data = {"id": t.id, "src": t.src, "dst": t.dst, "chunk": t.chunk, "op": t.op, "path": list(t.path),
            "deps": list(t.deps), **t.scratch_slots()}
    if t.to_switch is not None:
        data["to_switch"] = t.to_switch
    if t.from_switch is not None:
        data["from_switch"] = t.from_switch
    return data


def _read_switch_ops(data: dict[str, Any], fmt: str, chunk_ids: int, source: str) -> tuple[SwitchOp, ...]:
    """The ``switch_ops`` list of a ``synth.schedule/3`` object, validated field by field."""
    raw = data.get("switch_ops")
    if raw is None:
        return ()
    if fmt not in _SWITCH_FORMATS:
        raise InputError(source, "switch_ops", f"in-switch operations need format {SWITCH_FORMAT!r}, got {fmt!r}")
    if not isinstance(raw, list):
        raise InputError(source, "switch_ops", "expected a list")
    from synth import limits

    limits.check_transfers(len(raw), f"the switch ops in {source or 'the input'}", hint="")
    ops: list[SwitchOp] = []
    for index, item in enumerate(raw):
        where = f"switch_ops.{index}"
        if not isinstance(item, dict):
            raise InputError(source, where, "expected an object")
        unknown = sorted(set(item) - {"id", "switch", "kind", "chunk", "op", "dtype"})
        if unknown:
            raise InputError(source, f"{where}.{unknown[0]}", "unknown field (expected id, switch, kind, chunk, op, "
                             "dtype)")
        for name in ("switch", "kind", "chunk"):
            if name not in item:
                raise InputError(source, f"{where}.{name}", "missing required field")
        oid = item.get("id", index)
        if not _is_int(oid) or oid != index:
            raise InputError(source, f"{where}.id", f"expected {index} (ids are 0..K-1 in order), got {oid!r}")
        switch, kind, chunk = item["switch"], item["kind"], item["chunk"]
        if not isinstance(switch, str) or not switch:
            raise InputError(source, f"{where}.switch", f"expected a switch node id (a string), got {switch!r}")
        if kind not in (SWITCH_REDUCE, SWITCH_MULTICAST):
            raise InputError(source, f"{where}.kind", f"expected 'reduce' or 'multicast', got {kind!r}")
        if not _is_int(chunk) or not 0 <= chunk < chunk_ids:
            raise InputError(source, f"{where}.chunk", f"expected an integer in 0..{chunk_ids - 1}, got {chunk!r}")
        op, dtype = item.get("op", "sum"), item.get("dtype", "f32")
        if kind == SWITCH_MULTICAST and ("op" in item or "dtype" in item):
            name = "op" if "op" in item else "dtype"
            raise InputError(source, f"{where}.{name}", "a multicast combines nothing: leave op and dtype out")
        if op not in SWITCH_OPS_NAMES:
            raise InputError(source, f"{where}.op", f"expected one of {', '.join(SWITCH_OPS_NAMES)}, got {op!r}")
        if dtype not in SWITCH_DTYPES:
            raise InputError(source, f"{where}.dtype", f"expected one of {', '.join(SWITCH_DTYPES)}, got {dtype!r}")
        ops.append(SwitchOp(index, switch, kind, chunk, op, dtype))
    return tuple(ops)


def _read_leg(item: dict[str, Any], where: str, fmt: str, count: int, source: str) -> tuple[int | None, int | None]:
    """A transfer's ``to_switch`` and ``from_switch`` (at most one of them), validated."""
    legs = []
    for name in ("to_switch", "from_switch"):
        value = item.get(name)
        if value is not None:
            if fmt not in _SWITCH_FORMATS:
                raise InputError(source, f"{where}.{name}", f"legs of switch ops need format {SWITCH_FORMAT!r}")
            if not _is_int(value) or not 0 <= value < count:
                span = f"a switch op id in 0..{count - 1}" if count else "no switch op id (switch_ops is empty)"
                raise InputError(source, f"{where}.{name}", f"expected {span}, got {value!r}")
        legs.append(value)
    if legs[0] is not None and legs[1] is not None:
        raise InputError(source, f"{where}.from_switch", "a transfer is an input leg (to_switch) or an output leg "
                         "(from_switch) of a switch op, not both")
    return legs[0], legs[1]


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


class ScheduleForm(Protocol):
    """What both forms of a schedule offer, so that a consumer never asks which form it holds: the
    transfers form (:class:`Schedule`) and the trees form (:class:`synth.trees.TreeSchedule`).

    The judges (:func:`synth.verify_trees.verify_any`, :func:`synth.evaluate.congestion`) take either form and pick
    the method for it; ``held`` says whether the transfers are in memory (False: the trees form makes them
    one at a time, for consumers that stream), and :meth:`expand` gives the transfers form of either.
    """

    @property
    def collective(self) -> Collective: ...
    @property
    def topology(self) -> str: ...
    @property
    def ranks(self) -> tuple[str, ...]: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def topology_file(self) -> str | None: ...
    @property
    def topology_sha256(self) -> str | None: ...
    @property
    def switch_ops(self) -> tuple[SwitchOp, ...]: ...
    @property
    def held(self) -> bool: ...
    @property
    def kind(self) -> Kind: ...
    @property
    def chunks(self) -> int: ...
    def num_transfers(self) -> int: ...
    def iter_transfers(self) -> Iterator[Transfer]: ...
    def expand(self) -> Schedule: ...
    def with_topology_source(self, topology_file: str | None, topology_sha256: str | None) -> Self: ...
    def link_chunks(self) -> dict[tuple[str, str], int]: ...
    def check_storable(self, what: str) -> None: ...
    def require_point_to_point(self, what: str) -> None: ...
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self) -> str: ...


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
        self.switch_ops: list[SwitchOp] = []
        self._inputs: list[list[int]] = []
        self._closed: list[bool] = []
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

    def add_chain(self, chunk: int, legs: Sequence[tuple[int, int, tuple[str, ...]]],
                  deps: tuple[int, ...] = ()) -> int:
        """Append copies of ``chunk`` along ``legs`` ((src, dst, path) each, a relay chain), each after the
        one before it (the first after ``deps``, sorted and distinct); return the last id."""
        transfers = self.transfers
        first = len(transfers)
        if first + len(legs) > self._cap:
            from synth import limits

            limits.check_transfers(first + len(legs), f"{self.algorithm} {self.collective.kind} on "
                                   f"{len(self.ranks)} gpus with {self.collective.chunks} chunks")
        previous = deps
        for offset, (src, dst, path) in enumerate(legs):
            transfers.append(Transfer(first + offset, src, dst, chunk, COPY, path, previous))
            previous = (first + offset,)
        return len(transfers) - 1

    def add_switch_op(self, switch: str, kind: Literal["reduce", "multicast"], chunk: int, op: str = "sum",
                      dtype: str = "f32") -> int:
        """Declare an in-switch operation and return its id; add its legs with :meth:`add_to_switch` (all
        inputs first) and :meth:`add_from_switch`."""
        index = len(self.switch_ops)
        self.switch_ops.append(SwitchOp(index, switch, kind, chunk, op, dtype))
        self._inputs.append([])
        self._closed.append(False)
        return index

    def add_to_switch(self, src: int, switch_op: int, path: Iterable[str], deps: Iterable[int] = (),
                      src_scratch: int | None = None) -> int:
        """Append an input leg: rank ``src``'s value of the op's chunk, carried to the op's switch."""
        if self._closed[switch_op]:
            raise ValueError(f"switch op {switch_op} already has outputs; add every input first")
        tid = self.add(src, None, self.switch_ops[switch_op].chunk, path, COPY, deps, src_scratch, None)  # type: ignore[arg-type]
        self.transfers[tid] = dataclasses.replace(self.transfers[tid], to_switch=switch_op)
        self._inputs[switch_op].append(tid)
        return tid

    def add_from_switch(self, switch_op: int, dst: int, path: Iterable[str], op: Literal["copy", "reduce"] = COPY,
                        deps: Iterable[int] = (), dst_scratch: int | None = None) -> int:
        """Append an output leg: the op's result carried to rank ``dst``; it depends on every input leg."""
        self._closed[switch_op] = True
        tid = self.add(None, dst, self.switch_ops[switch_op].chunk, path, op,  # type: ignore[arg-type]
                       (*deps, *self._inputs[switch_op]), None, dst_scratch)
        self.transfers[tid] = dataclasses.replace(self.transfers[tid], from_switch=switch_op)
        return tid

    def new_scratch(self, rank: int) -> int:
        """A scratch slot of ``rank`` that no transfer has used yet."""
        slot = self.scratch_used[rank]
        self.scratch_used[rank] = slot + 1
        return slot

    def build(self) -> Schedule:
        """The finished, immutable schedule."""
        return Schedule(self.collective, self.topology, self.ranks, self.algorithm, self.params,
                        tuple(self.transfers), switch_ops=tuple(self.switch_ops))

