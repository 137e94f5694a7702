"""Chakra ET export for ASTRA-sim (``synth export chakra``) and import (``synth import chakra``).

Export writes, into an output folder (atomically), for every message size:

- ``<name>.<rank>.et``: the schedule as per-rank traces (see :mod:`synth.trace` for the exact
  node mapping: COMM_SEND_NODE / COMM_RECV_NODE per transfer, or per slice of a transfer, with a unique
  tag, a COMP_NODE per reduction, dependencies so a rank forwards or reduces a chunk only after it has
  it), plus the ordering nodes of :func:`synth.astra.sequence_sends` that make the outcome independent
  of the order in which ASTRA-sim issues simultaneously ready nodes;
- ``workload.<rank>.et``: the workload, one COMM_COLL_NODE per rank (``comm_type``, ``comm_size``);
- ``system.json``: ``"<coll>-implementation-custom": ["<name>"]`` and ``"preferred-dataset-splits": 1``;

and once: ``remote_memory.json``, ``network.yml`` when ASTRA-sim can describe the topology (a product
of Ring / FullyConnected / Switch dimensions; bandwidth in GB = 2^30 bytes, latency in ns),
``run_astrasim.sh`` (runs ASTRA-sim and checks every rank's finish against the ``astra`` model) and
``NOTE.txt``. One size writes the set straight into the folder; several sizes write one subfolder per
size (``1MiB/``, ``1GiB/``), each with its own ``run_astrasim.sh``, and a top ``run_astrasim.sh`` that
runs them all. Sizes whose messages ASTRA-sim cannot run (under 1 ns on a link,
:func:`synth.astra.smallest_message`) are refused before anything is written.

Import reads a per-rank trace set back into a schedule. Traces synth wrote carry the transfer id,
chunk, op, deps and path of every message as extra attributes, so they come back exactly. Traces from
elsewhere (for example Chakra's MSCCL converter) are matched send-to-recv by (tag, src, dst, size)
first in first out, in the order ASTRA-sim would issue them (found by running them through the
``astra`` simulator); chunks are inferred by following each message back to the messages it forwards
(through COMP nodes), and a recv followed by a COMP is a reduction. Routes are shortest paths through
switches only, balanced among equal ones, or through npus when there is no other way (as ASTRA-sim's
Ring forwards). COMP durations and recv-side waits are kept in ``params["et"]`` so the ``astra`` model
of the imported schedule reproduces the traces' timing. A sliced export of synth's comes back as one
transfer per slice-0 message; synth's ordering nodes (attribute ``order_after``) carry dependencies only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from synth.astra import (
    ORDER_ATTR,
    AstraSystem,
    astra_network,
    astra_system,
    network_for,
    physical_network,
    simulate,
)
from synth.collectives import Collective, Kind, parse_kind
from synth.errors import InputError, SynthError, VerificationError
from synth.export import RouteBalancer, valid_path
from synth.fileio import atomic_directory
from synth.proto.et_def import CollectiveCommType, NodeType
from synth.schedule import COPY, REDUCE, Schedule, Transfer
from synth.topology import Topology
from synth.trace import (
    FORMAT,
    EtNode,
    EtProgram,
    decode_et_file,
    encode_rank,
    workload_bytes,
)
from synth.units import format_size

#: ASTRA-sim's system-JSON key for a custom implementation of each collective.
CUSTOM_SLOT = {
    Kind.ALLREDUCE: "all-reduce-implementation-custom",
    Kind.REDUCESCATTER: "reduce-scatter-implementation-custom",
    Kind.ALLGATHER: "all-gather-implementation-custom",
    Kind.ALLTOALL: "all-to-all-implementation-custom",
}
WORKLOAD_PREFIX = "workload"
#: Files every export folder holds: a folder with them is an earlier export, which a new export replaces whole.
SIGNATURE = ("run_astrasim.sh", "NOTE.txt")
REMOTE_MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}
BINARY_AWARE = "AstraSim_Analytical_Congestion_Aware"
BINARY_UNAWARE = "AstraSim_Analytical_Congestion_Unaware"


@dataclass
class EtSet:
    """One written trace set (one message size)."""

    size: int
    folder: str
    prefix: str
    counts: dict[str, int]
    predicted_ns: int | None
    dropped_deps: int
    #: predicted ``sys[i] finished`` of every rank (None when ASTRA-sim cannot describe the topology)
    predicted_finish_ns: list[int] | None = None
    #: ordering COMP nodes among the COMP nodes (see :func:`synth.astra.sequence_sends`)
    order_nodes: int = 0


@dataclass
class ChakraExport:
    """What :func:`export_chakra` wrote."""

    folder: Path
    name: str
    sets: list[EtSet]
    network: str | None
    warnings: list[str] = field(default_factory=list)
    command: str = ""
    slices: int = 1
    window: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {"folder": str(self.folder), "name": self.name, "network": self.network, "warnings": self.warnings,
                "command": self.command, "slices": self.slices, "window": self.window,
                "sets": [{"size": s.size, "folder": s.folder, "prefix": s.prefix, "nodes": s.counts,
                          "order_nodes": s.order_nodes, "predicted_ns": s.predicted_ns,
                          "predicted_finish_ns": s.predicted_finish_ns, "dropped_deps": s.dropped_deps}
                         for s in self.sets]}


def default_name(schedule: Schedule) -> str:
    """The trace prefix used when none is given: ``<algorithm>_<collective>`` in safe characters."""
    raw = f"{schedule.algorithm}_{schedule.kind.value}"
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in raw) or "schedule"


def system_json(kind: Kind, prefix: str) -> str:
    """ASTRA-sim's system configuration running trace set ``prefix`` as ``kind``'s custom implementation."""
    slot = CUSTOM_SLOT.get(kind, CUSTOM_SLOT[Kind.ALLREDUCE])
    data = {"scheduling-policy": "FIFO", "preferred-dataset-splits": 1, slot: [prefix], "local-mem-bw": 50}
    return json.dumps(data, indent=2) + "\n"


def export_chakra(schedule: Schedule, topology: Topology, sizes: Iterable[int], out_dir: str | Path,
                  comp_duration_us: int | None = None, name: str | None = None, tag_base: int = 0,
                  slices: int = 1, window: int | None = None) -> ChakraExport:
    """Write the ASTRA-sim run folder for ``schedule`` at every size (see the module docstring).

    ``slices`` and ``window`` lower an execution plan's slicing (:func:`synth.trace.schedule_to_et`);
    the defaults write one message per transfer. Sizes whose messages ASTRA-sim cannot run are refused
    (LimitError, nothing written).

    Examples
    --------
    >>> import tempfile
    >>> from synth.library import load_topology
    >>> from synth.algorithms import synthesize
    >>> topo = load_topology("switch:n=4")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     report = export_chakra(synthesize(topo, "allgather", "ring"), topo, [2**20], folder)
    ...     sorted(p.name for p in Path(folder).iterdir())[:3]
    ['NOTE.txt', 'network.yml', 'remote_memory.json']
    """
    from synth.astra import lower

    sizes = list(dict.fromkeys(sizes))
    if not sizes:
        raise InputError("", "sizes", "give at least one message size")
    if len(schedule.ranks) != topology.num_ranks:
        raise InputError("", "topology", f"the schedule has {len(schedule.ranks)} ranks but topology "
                         f"{topology.name!r} has {topology.num_ranks} gpus")
    name = name or default_name(schedule)
    if not name or any(not (ch.isalnum() or ch in "-_.") for ch in name) or name == WORKLOAD_PREFIX:
        raise InputError("", "name", f"expected letters, digits, '-', '_' or '.' (and not {WORKLOAD_PREFIX!r}), "
                         f"got {name!r}")
    if window is not None and window >= slices:
        window = None  # every slice of a transfer is in flight at once anyway
    kind = schedule.kind
    system, reason = astra_system(topology)
    warnings: list[str] = []
    notes: list[str] = []
    if system is None:
        warnings.append(f"ASTRA-sim cannot describe this topology: {reason}. The traces are written; run them "
                        "on a network configuration of your own.")
    elif system.npus != topology.num_ranks:
        system = None
        warnings.append("the topology's dimensions do not match its gpu count; no network.yml is written")
    elif not system.congestion_aware:
        notes.append("This system has several dimensions: ASTRA-sim's congestion-aware backend takes one, so "
                     f"run_astrasim.sh uses {BINARY_UNAWARE} (no link contention; each message is charged in the "
                     "first dimension where its ends differ).")
    if kind not in CUSTOM_SLOT:
        notes.append(f"ASTRA-sim has no custom-implementation slot for {kind}: the traces run through the "
                     "all-reduce slot (the workload calls ALL_REDUCE), which only sets their timing.")
    comm_type = CollectiveCommType.ALL_REDUCE if kind not in CUSTOM_SLOT else None
    dims = len(system.dims) if system is not None else 1
    lowered = [lower(schedule, topology, size, comp_duration_us, tag_base, True, slices, window) for size in sizes]
    sets: list[EtSet] = []
    several = len(sizes) > 1
    out = Path(out_dir)
    with atomic_directory(out, signature=SIGNATURE, kind="`synth export chakra` output") as temp:
        for size, low in zip(sizes, lowered, strict=True):
            sub = format_size(size) if several else ""
            folder = temp / sub if sub else temp
            folder.mkdir(exist_ok=True)
            program = low.program
            for rank in range(program.num_ranks):
                (folder / f"{name}.{rank}.et").write_bytes(encode_rank(program, rank))
                (folder / f"{WORKLOAD_PREFIX}.{rank}.et").write_bytes(
                    workload_bytes(kind, size, rank, dims, comm_type))
            (folder / "system.json").write_text(system_json(kind, name), encoding="utf-8")
            finish = [int(t) for t in low.result.finish_ns if t is not None] if system is not None else None
            if finish is not None and len(finish) != program.num_ranks:
                raise SynthError("the traces deadlock: " + "; ".join(low.result.unmatched[:5]))
            if program.dropped_deps:
                warnings.append(f"{format_size(size)}: {program.dropped_deps} dependencies between ranks that share "
                                "no end of the transfer cannot be expressed in per-rank traces and were left out")
            sets.append(EtSet(size, sub or ".", name, program.counts(), max(finish) if finish else None,
                              program.dropped_deps, finish, program.order_nodes))
        (temp / "remote_memory.json").write_text(json.dumps(REMOTE_MEMORY) + "\n", encoding="utf-8")
        if system is not None:
            (temp / "network.yml").write_text(system.yaml(), encoding="utf-8")
        script, command = run_script(sets, system, several)
        (temp / "run_astrasim.sh").write_text(script, encoding="utf-8")
        (temp / "run_astrasim.sh").chmod(0o755)
        if several:  # each size's folder runs on its own too
            for item in sets:
                own, _ = run_script([item], system, several=False, up="../")
                (temp / item.folder / "run_astrasim.sh").write_text(own, encoding="utf-8")
                (temp / item.folder / "run_astrasim.sh").chmod(0o755)
        text = note_text(schedule, topology, system, warnings + notes, sets, slices, window)
        (temp / "NOTE.txt").write_text(text, encoding="utf-8")
    return ChakraExport(out, name, sets, system.yaml() if system else None, warnings + notes, command, slices, window)


RUN_FUNCTION = r"""run() {  # folder, size, predicted finish per rank, where the shared configs are
  local out got
  out=$(cd "$1" && "$BIN" --workload-configuration=WORKLOAD --system-configuration=system.json \
        --network-configuration="$4NETWORK" --remote-memory-configuration="$4remote_memory.json" 2>&1) || true
  printf '%s\n' "$out" | grep -E 'finished,|rror|ssert' || true
  [ -n "$3" ] || return 0
  got=$(printf '%s\n' "$out" | sed -n 's/.*sys\[\([0-9]*\)\] finished, \([0-9]*\) cycles.*/\1 \2/p' \
        | sort -n | cut -d' ' -f2 | tr '\n' ' ')
  if [ "$got" = "$3 " ]; then echo "$2: every rank finished when synth predicted"
  else echo "$2: ASTRA-sim reported [${got% }], synth predicted [$3]"; status=1; fi
}"""


def run_script(sets: list[EtSet], system: AstraSystem | None, several: bool, up: str = "") -> tuple[str, str]:
    """``run_astrasim.sh`` and the command line it runs (for the first set).

    The script runs every set, prints ASTRA-sim's ``sys[i] finished`` lines and says whether every rank
    finished when synth's ``astra`` model predicts; it exits 1 when one did not. ``up`` prefixes the
    shared configuration files (``../`` for a size's own script inside a folder of several sizes).
    """
    binary = BINARY_UNAWARE if system is not None and not system.congestion_aware else BINARY_AWARE
    network = "network.yml" if system is not None else "YOUR_NETWORK.yml"
    lines = [
        "#!/usr/bin/env bash",
        "# Run the exported schedule in ASTRA-sim 2.x's analytical backend.",
        "# ASTRA_SIM: the simulator binary (built by astra-sim's build/astra_analytical/build.sh as",
        f"#   build/astra_analytical/build/bin/{binary}); default: {binary} on PATH.",
        "# Every rank prints 'sys[i] finished, T cycles' (1 cycle = 1 ns); this script compares them with",
        "# synth's prediction and exits 1 when they differ.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f'BIN="${{ASTRA_SIM:-{binary}}}"',
        "status=0",
        RUN_FUNCTION.replace("WORKLOAD", WORKLOAD_PREFIX).replace("NETWORK", network),
    ]
    if system is None:
        lines.append("# ASTRA-sim cannot describe this topology (see NOTE.txt): write YOUR_NETWORK.yml first.")
    first = ""
    for item in sets:
        prefix = "../" if several else up
        predicted = " ".join(str(t) for t in item.predicted_finish_ns) if item.predicted_finish_ns else ""
        lines.append(f'run {item.folder if several else "."} {format_size(item.size)} "{predicted}" "{prefix}"')
        command = (f"{binary} --workload-configuration={WORKLOAD_PREFIX} --system-configuration=system.json "
                   f"--network-configuration={prefix}{network} --remote-memory-configuration={prefix}remote_memory.json")
        first = first or command
    lines.append("exit $status")
    return "\n".join(lines) + "\n", first


def note_text(schedule: Schedule, topology: Topology, system: AstraSystem | None, messages: list[str],
              sets: list[EtSet], slices: int = 1, window: int | None = None) -> str:
    """NOTE.txt: what was exported and anything the user must know before running it."""
    lines = [f"{schedule.algorithm} {schedule.kind} on {topology.name} ({topology.num_ranks} ranks, "
             f"{schedule.chunks} chunks, {len(schedule.transfers)} transfers), exported by synth."]
    if slices > 1:
        lines.append(f"Each transfer is {slices} messages (slices)"
                     + (f", at most {window} in flight" if window is not None else "") + ".")
    lines.append("")
    for item in sets:
        predicted = f"; synth's astra model predicts {item.predicted_ns} ns" if item.predicted_ns is not None else ""
        lines.append(f"{format_size(item.size)}: {item.folder}/{item.prefix}.<rank>.et{predicted}")
        if item.order_nodes:
            lines.append(f"  {item.order_nodes} ordering nodes (COMP, 0 us, named order_after_*) fix the order of "
                         "sends that share a link")
    if system is not None:
        lines += ["", "network.yml:", system.yaml().rstrip()]
    if messages:
        lines += ["", *messages]
    return "\n".join(lines) + "\n"


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
    nodes: list[list[EtNode]] = []
    metadata: dict[str, Any] = {}
    for rank, path in enumerate(files):
        decoded = decode_et_file(path)
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


def _import_own(program: EtProgram, metadata: dict[str, Any], kind: Kind, topology: Topology, name: str,
                source: str) -> Schedule:
    chunks = metadata.get("chunks")
    if isinstance(chunks, bool) or not isinstance(chunks, int):
        raise InputError(source, "metadata.chunks", f"expected an integer, got {chunks!r}")
    root = metadata.get("root") if kind in (Kind.BROADCAST, Kind.REDUCE) else None
    collective = Collective(kind, program.num_ranks, chunks, root)
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


def simulate_et_set(prefix: str | Path, topology: Topology) -> int:
    """ASTRA-sim's predicted time (ns) of a trace set as written, on ``topology``'s network."""
    program, _, _ = read_et_set(prefix)
    if program.num_ranks != topology.num_ranks:
        raise InputError(str(prefix), "", f"{program.num_ranks} trace files but {topology.num_ranks} gpus")
    return simulate(program, network_for(topology)).time_ns
