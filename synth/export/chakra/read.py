"""Chakra import: a per-rank trace set read back into a schedule, exactly for traces synth wrote (see
:mod:`synth.export.chakra`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from synth.astra import astra_network, astra_system, network_for, physical_network, simulate
from synth.collectives import Collective, Kind, check_demand, check_shards, parse_kind
from synth.errors import InputError, VerificationError
from synth.export import RouteBalancer, valid_path
from synth.export.chakra.infer import _assign_chunks, _foreign_et_params, _InferredTransfers, _MatchedTraces
from synth.export.chakra.write import WORKLOAD_PREFIX
from synth.proto.et_def import NodeType
from synth.schedule import COPY, REDUCE, Schedule, Transfer
from synth.topology import Topology
from synth.trace import FORMAT, EtNode, EtProgram, decode_et_file

#: Memory per byte of a trace set while it is decoded and imported (a decoded node object is about ten
#: times its encoding).
BYTES_PER_ET_BYTE = 16


# ------------------------------------------------------------------------------------------ import
def et_files(prefix: str | Path) -> tuple[Path, str, list[Path]]:
    """The files ``<prefix>.0.et .. <prefix>.<N-1>.et`` of a trace set; ``prefix`` may also be a folder
    holding exactly one set (workload traces aside)."""
    path = Path(prefix)
    if path.is_dir():
        stems = sorted({p.name[:-len(".0.et")] for p in path.glob("*.0.et")} - {WORKLOAD_PREFIX})
        if len(stems) != 1:
            found = ", ".join(stems) or "none"
            raise InputError(str(path), "", f"expected one trace set <prefix>.<rank>.et in the folder, found {found}; "
                             "give DIR/<prefix>")
        path = path / stems[0]
    folder, stem = path.parent, path.name
    if stem.endswith(".et"):
        stem = stem.rsplit(".", 2)[0]
    files: list[Path] = []
    while (candidate := folder / f"{stem}.{len(files)}.et").is_file():
        files.append(candidate)
    if not files:
        raise InputError(str(path), "", f"no trace files {stem}.0.et, {stem}.1.et, ... in {folder}")
    return folder, stem, files


def read_et_set(prefix: str | Path) -> tuple[EtProgram, dict[str, Any], list[str]]:
    """Decode a trace set into an :class:`EtProgram`; returns it, rank 0's metadata and the file names."""
    _, _, files = et_files(prefix)
    from synth import limits

    total_bytes = sum(path.stat().st_size for path in files)
    limits.check_memory(total_bytes * BYTES_PER_ET_BYTE, f"reading the trace set {prefix} ({len(files)} files, "
                        f"{total_bytes:,} bytes)", hint="import a smaller trace set")
    nodes: list[list[EtNode]] = []
    metadata: dict[str, Any] = {}
    comm_nodes = 0
    for rank, path in enumerate(files):
        decoded = decode_et_file(path)
        comm_nodes += len(decoded.nodes)
        # every transfer is at most a send and a receive: more nodes than twice the transfer limit cannot import
        limits.check_transfers(comm_nodes // 2, f"the trace set {prefix} (at least {comm_nodes:,} nodes after "
                               f"{rank + 1} of {len(files)} files)", hint="import a smaller trace set")
        if rank == 0:
            metadata = decoded.metadata
        for node in decoded.nodes:
            if node.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                if not 0 <= node.peer < len(files) or node.peer == rank:
                    field_name = "comm_dst" if node.type == NodeType.COMM_SEND_NODE else "comm_src"
                    raise InputError(str(path), f"node {node.id}.{field_name}",
                                     f"expected another rank in 0..{len(files) - 1}, got {node.peer}")
            elif node.type == NodeType.COMM_COLL_NODE:
                raise InputError(str(path), f"node {node.id}", "a COMM_COLL_NODE: this is a workload trace, not a "
                                 "collective's implementation")
        nodes.append(decoded.nodes)
    return EtProgram(len(files), nodes), metadata, [str(p) for p in files]


def import_chakra(prefix: str | Path, topology: Topology, collective: Kind | str | None = None,
                  topology_name: str | None = None, use_extras: bool = True) -> Schedule:
    """Read a per-rank trace set into a schedule on ``topology`` (see the module docstring).

    Parameters
    ----------
    prefix : path
        ``DIR/<prefix>`` of the files ``<prefix>.<rank>.et`` (or a folder holding one set).
    topology : Topology
        Where the ranks run; its gpu count must equal the number of trace files.
    collective : Kind or str, optional
        The collective, when the traces' metadata does not name it.
    topology_name : str, optional
        The ``topology`` field of the schedule (default: the topology's name).
    use_extras : bool
        Use synth's own extra attributes when present (False forces inference, for testing).
    """
    program, metadata, files = read_et_set(prefix)
    source = str(prefix)
    if program.num_ranks != topology.num_ranks:
        raise InputError(source, "", f"{program.num_ranks} trace files but topology {topology.name!r} has "
                         f"{topology.num_ranks} gpus")
    if collective is None:
        named = metadata.get("collective")
        if not isinstance(named, str):
            raise InputError(source, "collective", "the traces do not name their collective; give `collective`")
        collective = named
    kind = collective if isinstance(collective, Kind) else parse_kind(collective, source)
    name = topology_name or topology.name
    sends = [(rank, node) for rank in range(program.num_ranks) for node in program.nodes[rank]
             if node.type == NodeType.COMM_SEND_NODE]
    if not sends:
        raise InputError(source, "", "the traces contain no COMM_SEND_NODE")
    ours = use_extras and metadata.get("format") == FORMAT and all(
        isinstance(node.extras.get("transfer"), int) and isinstance(node.extras.get("chunk"), int)
        for _, node in sends)
    if ours:
        return _import_own(program, metadata, kind, topology, name, source)
    return _import_foreign(program, metadata, kind, topology, name, source)


def _demand(metadata: dict[str, Any], kind: Kind, source: str) -> tuple[tuple[int, ...], ...] | None:
    """An alltoallv's chunk-count matrix from rank 0's ``metadata.demand`` (JSON), None for other kinds."""
    if kind != Kind.ALLTOALLV:
        return None
    text = metadata.get("demand")
    if not isinstance(text, str):
        raise InputError(source, "metadata.demand", "an alltoallv trace set needs its demand (the N x N matrix of "
                         "chunk counts) in rank 0's metadata")
    try:
        matrix = json.loads(text)
    except ValueError as exc:
        raise InputError(source, "metadata.demand", f"expected a JSON matrix: {exc}") from None
    return check_demand(matrix, source, "metadata.demand")


def _shards(metadata: dict[str, Any], kind: Kind, num_ranks: int, source: str) -> tuple[int, ...] | None:
    """Uneven shards' chunk counts from ``metadata.shards`` (JSON), None where the traces have none."""
    text = metadata.get("shards")
    if text is None:
        return None
    if kind not in (Kind.ALLGATHER, Kind.REDUCESCATTER):
        raise InputError(source, "metadata.shards", f"uneven shards are for allgather and reducescatter, not {kind}")
    try:
        counts = json.loads(text) if isinstance(text, str) else text
    except ValueError as exc:
        raise InputError(source, "metadata.shards", f"expected a JSON list: {exc}") from None
    return check_shards(counts, num_ranks, source, "metadata.shards")


def _own_collective(program: EtProgram, metadata: dict[str, Any], kind: Kind, source: str) -> Collective:
    """The collective synth's own metadata describes (chunks, root, an alltoallv's demand, uneven shards)."""
    chunks = metadata.get("chunks")
    if isinstance(chunks, bool) or not isinstance(chunks, int):
        raise InputError(source, "metadata.chunks", f"expected an integer, got {chunks!r}")
    root = metadata.get("root") if kind in (Kind.BROADCAST, Kind.REDUCE) else None
    return Collective(kind, program.num_ranks, chunks, root, _demand(metadata, kind, source),
                      _shards(metadata, kind, program.num_ranks, source))


def _import_own(program: EtProgram, metadata: dict[str, Any], kind: Kind, topology: Topology, name: str,
                source: str) -> Schedule:
    collective = _own_collective(program, metadata, kind, source)
    send_by_tid: dict[int, tuple[int, EtNode]] = {}
    recv_by_tid: dict[int, tuple[int, EtNode]] = {}
    comp_by_tid: dict[int, int] = {}
    local = _local_ops(program, metadata, source)
    for rank, nodes in enumerate(program.nodes):
        for node in nodes:
            tid = node.extras.get("transfer")
            if node.extras.get("slice", 0) != 0:
                continue  # slices 1.. of a sliced export repeat slice 0's transfer
            if node.type == NodeType.COMP_NODE and isinstance(tid, int):
                comp_by_tid[tid] = node.duration_us
            if not isinstance(tid, int) or node.type not in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                continue
            table = send_by_tid if node.type == NodeType.COMM_SEND_NODE else recv_by_tid
            if tid in table:
                raise InputError(source, f"rank {rank} node {node.id}.transfer", f"transfer {tid} appears twice")
            table[tid] = (rank, node)
    count = len(send_by_tid) + len(local)
    if sorted([*send_by_tid, *local]) != list(range(count)) or sorted(recv_by_tid) != sorted(send_by_tid):
        raise InputError(source, "transfer", f"expected transfer ids 0..{count - 1}, each on exactly one send and "
                         "one recv or on one local op")
    balancer = RouteBalancer(topology, source)
    transfers = []
    for tid in range(count):
        if tid in local:
            rank, chunk, op, deps, slots = local[tid]
            if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < count for d in deps):
                raise InputError(source, f"transfer {tid}.deps", "expected a list of transfer ids")
            transfers.append(Transfer(tid, rank, rank, chunk, op, (topology.gpus[rank],), tuple(deps), *slots))
            continue
        src, send = send_by_tid[tid]
        dst, recv = recv_by_tid[tid]
        if send.peer != dst or recv.peer != src or send.tag != recv.tag or send.size != recv.size:
            raise InputError(source, f"transfer {tid}", "its send and recv do not match (peer, tag or size)")
        op = send.extras.get("op", COPY)
        if op not in (COPY, REDUCE):
            raise InputError(source, f"transfer {tid}.op", f"expected 'copy' or 'reduce', got {op!r}")
        deps = send.extras.get("deps", [])
        if not isinstance(deps, list) or not all(isinstance(d, int) and 0 <= d < count for d in deps):
            raise InputError(source, f"transfer {tid}.deps", "expected a list of transfer ids")
        given: list[str] | None = send.extras.get("path")
        route = tuple(given) if given is not None and valid_path(topology, given, src, dst) \
            else balancer.route(src, dst)
        slots = [send.extras.get(name) for name in ("src_scratch", "dst_scratch")]
        for name, slot in zip(("src_scratch", "dst_scratch"), slots, strict=True):
            if slot is not None and (isinstance(slot, bool) or not isinstance(slot, int) or slot < 0):
                raise InputError(source, f"transfer {tid}.{name}", f"expected a scratch slot >= 0, got {slot!r}")
        transfers.append(Transfer(tid, src, dst, send.extras["chunk"], op, route, tuple(deps), *slots))
    try:
        params = json.loads(metadata.get("params", "{}"))
    except (TypeError, ValueError):
        params = {}
    if not isinstance(params, dict):
        params = {}
    et = dict(params.get("et", {})) if isinstance(params.get("et"), dict) else {}
    durations = {tid: us for tid, us in comp_by_tid.items()}
    reduces = [t.id for t in transfers if t.op == REDUCE]
    uniform = {durations.get(tid) for tid in reduces}
    et.pop("comp_us_by_transfer", None)
    if len(uniform) == 1 and None not in uniform and all(tid in reduces for tid in durations):
        et["comp_us"] = uniform.pop()
    elif durations:
        et["comp_us"] = 0
        et["comp_us_by_transfer"] = {str(tid): us for tid, us in sorted(durations.items())}
    if et:
        params["et"] = et
    ranks = metadata.get("ranks")
    if not (isinstance(ranks, list) and sorted(ranks) == sorted(topology.gpus)):
        ranks = list(topology.gpus)
    if list(ranks) != list(topology.gpus):
        ranks = list(topology.gpus)
    algorithm = metadata.get("algorithm")
    if not isinstance(algorithm, str):
        algorithm = "chakra"
    return Schedule(collective, name, tuple(ranks), algorithm, params, tuple(transfers))


def _local_ops(program: EtProgram, metadata: dict[str, Any], source: str) \
        -> dict[int, tuple[int, int, Any, list[Any], list[int | None]]]:
    """Local ops of a trace set synth wrote: reductions are COMP nodes marked ``local``, copies are
    listed in the metadata (``local_copies``). transfer id -> (rank, chunk, op, deps, scratch slots)."""
    found: dict[int, tuple[int, int, Any, list[Any], list[int | None]]] = {}
    items: list[tuple[int, dict[str, Any], str]] = []
    for rank, nodes in enumerate(program.nodes):
        items.extend((rank, node.extras, node.extras.get("op", REDUCE)) for node in nodes  # slice 0 of a sliced set
                     if node.type == NodeType.COMP_NODE and node.extras.get("local") and not node.extras.get("slice"))
    try:
        copies = json.loads(metadata.get("local_copies", "[]"))
    except (TypeError, ValueError):
        raise InputError(source, "metadata.local_copies", "expected a JSON list") from None
    if not isinstance(copies, list) or not all(isinstance(item, dict) for item in copies):
        raise InputError(source, "metadata.local_copies", "expected a JSON list of objects")
    items.extend((item.get("rank"), item, COPY) for item in copies)
    for rank, item, op in items:
        tid, chunk, deps = item.get("transfer"), item.get("chunk"), item.get("deps", [])
        slots = [item.get("src_scratch"), item.get("dst_scratch")]
        if not (isinstance(tid, int) and isinstance(chunk, int) and isinstance(rank, int)
                and 0 <= rank < program.num_ranks and isinstance(deps, list)
                and all(slot is None or (isinstance(slot, int) and slot >= 0) for slot in slots)):
            raise InputError(source, f"local op {tid!r}", "expected transfer, rank, chunk, deps and scratch slots")
        if tid in found:
            raise InputError(source, f"transfer {tid}", "appears twice")
        found[tid] = (rank, chunk, op, deps, slots)
    return found




def _import_foreign(program: EtProgram, metadata: dict[str, Any], kind: Kind, topology: Topology, name: str,
                    source: str) -> Schedule:
    """A trace set synth did not write (or whose extras are ignored), inferred from its data flow (see
    the module docstring): match messages, group them into chunks, route them, then verify."""
    n = program.num_ranks
    system, _ = astra_system(topology)
    network = astra_network(system) if system is not None and system.npus == n else physical_network(topology, {})
    result = simulate(program, network)
    if any(t is None for t in result.finish_ns):
        raise InputError(source, "", "the traces deadlock (ASTRA-sim would never finish them): "
                         + "; ".join(result.unmatched[:5]))
    traces = _MatchedTraces(program, result.matches)
    comp_of = traces.reduction_durations()
    groups, roots = traces.chunk_groups()
    chunk_of, chunks, root = _assign_chunks(kind, n, traces.ends, groups, roots, source)
    collective = Collective(kind, n, chunks, root)
    ops: list[Literal["copy", "reduce"]] = [REDUCE if collective.reducing and tid in comp_of else COPY for tid in range(len(traces.ends))]
    balancer = RouteBalancer(topology, source)
    inferred = _InferredTransfers(
        traces, tuple(chunk_of), tuple(ops), tuple(balancer.route(src, dst) for src, _, dst, _ in traces.ends),
        tuple(traces.events_before(src, send_id, True) for src, send_id, _, _ in traces.ends),
        tuple(traces.events_before(dst, recv_id, True) for _, _, dst, recv_id in traces.ends))
    params: dict[str, Any] = {"imported_from": "chakra", "files": len(program.nodes)}
    et = _foreign_et_params(comp_of, ops, inferred.recv_side)
    if et:
        params["et"] = et

    def build(strict: bool) -> Schedule:
        return Schedule(collective, name, topology.gpus, "chakra-import", dict(params), inferred.transfers(strict))

    from synth.verify import verify

    schedule = build(strict=False)
    try:
        verify(schedule, topology)
    except VerificationError:
        schedule = build(strict=True)
        try:
            verify(schedule, topology)
        except VerificationError as error:
            raise InputError(source, "", f"the traces do not implement a correct {kind} as far as synth can tell "
                             f"(chunks inferred from data flow): {error}") from None
    return schedule


def simulate_et_set(prefix: str | Path, topology: Topology) -> int:
    """ASTRA-sim's predicted time (ns) of a trace set as written, on ``topology``'s network."""
    program, _, _ = read_et_set(prefix)
    if program.num_ranks != topology.num_ranks:
        raise InputError(str(prefix), "", f"{program.num_ranks} trace files but {topology.num_ranks} gpus")
    return simulate(program, network_for(topology)).time_ns
