"""``synth import msccl``: MSCCL XML from MSCCLang/msccl-tools, TACCL, ForestColl or synth into a verified
schedule (parse, execute symbolically, map buffers to the schedule's cells, route, verify)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

from synth.collectives import Collective, Kind, min_transfers, parse_kind
from synth.errors import InputError, VerificationError
from synth.export import RouteBalancer, without_cycle_collection
from synth.export.msccl.cells import Cells, renumber
from synth.export.msccl.execute import FORWARDING, RECEIVING, Content, Record, execute_program
from synth.export.msccl.parse import XmlThreadblock, parse_xml, read_text
from synth.export.msccl.program import PROTOCOLS, Location
from synth.schedule import Schedule, Transfer
from synth.topology import Topology


def _chunk_count(source: str, kind: Kind, buffers: list[dict[str, int]], tbs: list[list[XmlThreadblock]]) -> int:
    """The collective's chunk count from the declared buffers, refused when no program this size could fill it."""
    n = len(buffers)
    first = buffers[0]
    if kind == Kind.ALLGATHER:
        chunks = max(b["o"] or b["i"] * n for b in buffers)
    elif kind == Kind.REDUCESCATTER:
        chunks = max(b["i"] or b["o"] * n for b in buffers)
    else:
        chunks = max(max(b["i"], b["o"]) for b in buffers)
    if chunks <= 0:
        raise InputError(source, "gpu 0", f"no input or output chunks declared (i_chunks={first['i']}, "
                         f"o_chunks={first['o']})")
    # the declared size, before anything is expanded: a 1 KB file declaring 10^9 chunks is refused here
    from synth import limits

    limits.check_transfers(min_transfers(kind, n, chunks), f"the MSCCL program in {source} ({chunks:,} "
                           f"chunks on {n} gpus)", hint="")
    moved = sum(max(1, st.cnt) for gpu_tbs in tbs for tb in gpu_tbs for st in tb.steps)
    if n * chunks > 2 * moved + 1_000_000:
        raise InputError(source, "algo", f"declares {chunks:,} chunks on {n} gpus, but its {moved:,} step chunk "
                         "counts could not move a fraction of them")
    per = chunks // n if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL) else 0
    if per and chunks % n:
        raise InputError(source, "gpu", f"{kind} needs a chunk count that is a multiple of {n}, got {chunks}")
    return chunks


def _root(source: str, kind: Kind, tbs: list[list[XmlThreadblock]]) -> int | None:
    """The broadcast root (the one gpu that only sends) or reduce root (the one that only receives)."""
    n = len(tbs)
    senders = {g for g in range(n) if any(st.type == "s" or st.type in FORWARDING for tb in tbs[g] for st in tb.steps)}
    receivers = {g for g in range(n) if any(st.type in RECEIVING for tb in tbs[g] for st in tb.steps)}
    if kind == Kind.BROADCAST:
        roots = sorted(senders - receivers)
        if len(roots) != 1:
            raise InputError(source, "", f"cannot tell the broadcast root: gpus that only send: {roots}")
        return roots[0]
    if kind == Kind.REDUCE:
        roots = sorted(receivers - senders)
        if len(roots) != 1:
            raise InputError(source, "", f"cannot tell the reduce root: gpus that only receive: {roots}")
        return roots[0]
    return None


def _collective(source: str, algo: dict[str, str], buffers: list[dict[str, int]], tbs: list[list[XmlThreadblock]],
                topology: Topology) -> Collective:
    """The collective the XML declares, checked against the topology and the program's size."""
    n = len(buffers)
    if n != topology.num_ranks:
        raise InputError(source, "algo.ngpus", f"{n} gpus but topology {topology.name!r} has {topology.num_ranks}")
    if algo.get("coll", "") == "custom":
        raise InputError(source, "algo.coll", "a custom collective: the XML does not say what it computes (its pre- "
                         "and postconditions), so synth cannot verify it; it imports allgather, reducescatter, "
                         "allreduce, alltoall, broadcast and reduce")
    kind = parse_kind(algo.get("coll", ""), source, "algo.coll")
    chunks = _chunk_count(source, kind, buffers, tbs)
    return Collective(kind, n, chunks, _root(source, kind, tbs))


class _Buffers:
    """The declared buffers of every gpu: resolves (buffer, offset) to a location, mapping in-place
    buffers (``o_chunks="0"`` / ``i_chunks="0"``) onto the other one.

    Every gpu's equal locations are one shared tuple (a program of millions of steps names a few
    thousand distinct ones)."""

    def __init__(self, source: str, collective: Collective, counts: list[dict[str, int]]) -> None:
        self.source, self.collective, self.counts = source, collective, counts
        kind = collective.kind
        self.per = collective.chunks // collective.num_ranks \
            if kind in (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLTOALL) else 0
        self._shift_o = kind == Kind.REDUCESCATTER  # in-place output: an offset into the input
        self._shift_i = kind == Kind.ALLGATHER  # in-place input: an offset into the output
        self._locations: dict[str, dict[int, Location]] = {"i": {}, "o": {}, "s": {}}

    def resolve(self, g: int, buf: str, off: int, where: str) -> Location:
        counts = self.counts[g]
        if buf not in ("i", "o", "s"):
            raise InputError(self.source, where, f"unknown buffer {buf!r} (expected i, o or s)")
        if buf == "o" and counts["o"] == 0 and counts["i"]:
            buf, off = "i", off + (g * self.per if self._shift_o else 0)
        elif buf == "i" and counts["i"] == 0 and counts["o"]:
            buf, off = "o", off + (g * self.per if self._shift_i else 0)
        if not 0 <= off < counts[buf]:
            raise InputError(self.source, where, f"offset {off} is outside buffer {buf} of {counts[buf]} chunks")
        shared = self._locations[buf]
        location = shared.get(off)
        if location is None:
            location = shared[off] = (buf, off)
        return location

    def inputs_and_homes(self) -> tuple[list[dict[Location, int]], list[dict[Location, int]]]:
        """Per gpu, where each chunk starts (the input buffer) and where it must end (the output buffer)."""
        collective, kind, per = self.collective, self.collective.kind, self.per
        chunks, n = collective.chunks, collective.num_ranks
        inputs: list[dict[Location, int]] = [{} for _ in range(n)]
        homes: list[dict[Location, int]] = [{} for _ in range(n)]
        for g in range(n):
            for c, _ in collective.initial(g):
                offset = c - g * per if kind == Kind.ALLGATHER else c - g * chunks if kind == Kind.ALLTOALL else c
                inputs[g][self.resolve(g, "i", offset, f"gpu {g} (input of chunk {c})")] = c
            for c, _ in collective.final(g):
                if kind == Kind.REDUCESCATTER:
                    offset = c - g * per
                elif kind == Kind.ALLTOALL:
                    offset = collective.origin(c) * per + c % chunks % per
                else:
                    offset = c
                homes[g][self.resolve(g, "o", offset, f"gpu {g} (output of chunk {c})")] = c
        return inputs, homes


def _check_outputs(source: str, collective: Collective, homes: list[dict[Location, int]], cells: Cells,
                   content: Content) -> None:
    """Every output position must end holding its chunk's data cell."""
    home_of = [{c: location for location, c in gpu_homes.items()} for gpu_homes in homes]
    for g in range(collective.num_ranks):
        for c, _ in collective.final(g):
            location = home_of[g][c]
            if cells.cell.get((g, location)) != ("d", c):
                held = content.get((g, location))
                what = "is never written" if held is None else f"ends holding chunk {held}"
                raise InputError(source, f"gpu {g}", f"buffer {location[0]}[{location[1]}] must end holding chunk {c} "
                                 f"(the {collective.kind}'s output) but it {what}")


def _transfers(records: list[Record], order: list[int], topology: Topology, source: str) -> tuple[Transfer, ...]:
    """The records in ``order`` as transfers, renumbered, each routed (:class:`RouteBalancer`); ``records``
    is emptied on the way."""
    number = {rid: k for k, rid in enumerate(order)}
    balancer = RouteBalancer(topology, source)
    transfers = []
    for k, rid in enumerate(order):
        r = records[rid]
        records[rid] = None  # type: ignore[call-overload]  # each record is dropped once it is a transfer
        assert r.src_cell is not None and r.dst_cell is not None
        path = (topology.gpus[r.src],) if r.src == r.dst else balancer.route(r.src, r.dst)
        transfers.append(Transfer(k, r.src, r.dst, r.chunk, r.op, path,  # type: ignore[arg-type]
                                  tuple(sorted(number[d] for d in r.deps)),
                                  None if r.src_cell[0] == "d" else r.src_cell[1],
                                  None if r.dst_cell[0] == "d" else r.dst_cell[1]))
    return tuple(transfers)


@without_cycle_collection
def import_msccl(path: str | Path, topology: Topology, topology_name: str | None = None,
                 text: str | BinaryIO | None = None) -> Schedule:
    """Read MSCCL XML into a verified schedule on ``topology`` (see :mod:`synth.export.msccl`).

    ``text``, when given, is the XML itself (a string, or a binary file open for reading that is parsed
    as it is read, without :data:`~synth.export.msccl.parse.MAX_XML_BYTES`' limit); ``path`` then only
    names it in messages.

    Raises :class:`InputError` naming the element and attribute for malformed files, deadlocks, data
    the program cannot hold, pairs of ranks with no path through switches and forwarding gpus, custom
    collectives, or a result that is not the declared collective.

    Examples
    --------
    A two-gpu allreduce that gathers the peer's data in scratch and reduces it locally (``re``):

    >>> from synth.library import load_topology
    >>> tb = '<tb id="0" send="{p}" recv="{p}" chan="0">'
    >>> steps = ('<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1"/>'
    ...          '<step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="s" dstoff="0" cnt="1"/>'
    ...          '<step s="2" type="re" srcbuf="s" srcoff="0" dstbuf="i" dstoff="0" cnt="1"/></tb>')
    >>> gpus = "".join(f'<gpu id="{g}" i_chunks="1" o_chunks="0" s_chunks="1">' + tb.format(p=1 - g) + steps
    ...                + "</gpu>" for g in (0, 1))
    >>> xml = f'<algo name="pair" ngpus="2" coll="allreduce" nchunksperloop="1" inplace="1">{gpus}</algo>'
    >>> s = import_msccl("pair.xml", load_topology("switch:n=2"), text=xml)
    >>> [(t.src, t.dst, t.op, t.src_scratch, t.dst_scratch) for t in s.transfers]
    [(0, 1, 'copy', None, 0), (1, 0, 'copy', None, 0), (1, 1, 'reduce', 0, None), (0, 0, 'reduce', 0, None)]
    """
    source = str(path)
    if text is None:
        text = read_text(path, source)
    algo, buffers, tbs = parse_xml(text, source)
    collective = _collective(source, algo, buffers, tbs, topology)
    declared = _Buffers(source, collective, buffers)
    inputs, homes = declared.inputs_and_homes()
    records, log, content = execute_program(source, tbs, declared.resolve, inputs)
    del tbs  # the parsed steps, no longer needed: a large program's memory peaks below
    cells = Cells(records, log, homes, inputs)
    cells.run()
    _check_outputs(source, collective, homes, cells, content)
    order = renumber(records, log, source)
    del cells, log, content
    transfers = _transfers(records, order, topology, source)
    params: dict[str, Any] = {"imported_from": "msccl", "name": algo.get("name", ""), "proto": algo.get("proto", ""),
              "nchannels": algo.get("nchannels", "")}
    if params["proto"] in PROTOCOLS:  # the runtime runs the program with the protocol the XML names
        params["plan"] = {"protocol": params["proto"]}
    schedule = Schedule(collective, topology_name or topology.name, topology.gpus, "msccl-import", params, transfers)
    from synth.verify import verify

    try:
        verify(schedule, topology)
    except VerificationError as error:
        raise InputError(source, "", f"the program is not a correct {collective.kind} in synth's model: {error}") from None
    return schedule
