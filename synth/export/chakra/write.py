"""Chakra export: per-rank traces, the workload and system files, and the scripts that run ASTRA-sim on them
(see :mod:`synth.export.chakra`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth.astra import AstraSystem, astra_system, check_message_size
from synth.collectives import Kind
from synth.errors import InputError, SynthError
from synth.fileio import atomic_directory
from synth.groups import fabric_gpus, fabric_of
from synth.proto import et_def
from synth.proto.et_def import CollectiveCommType
from synth.schedule import ScheduleForm
from synth.topology import Topology
from synth.trace import (
    EtNode,
    NodeType,
    encode_nodes,
    encode_rank,
    metadata_message,
    node_message,
    stream_rank_traces,
    workload_bytes,
)
from synth.units import format_size

CUSTOM_SLOT = {
    Kind.ALLREDUCE: "all-reduce-implementation-custom",
    Kind.REDUCESCATTER: "reduce-scatter-implementation-custom",
    Kind.ALLGATHER: "all-gather-implementation-custom",
    Kind.ALLTOALL: "all-to-all-implementation-custom",
}
WORKLOAD_PREFIX = "workload"
#: A process group's name in the workload's COLL nodes (Chakra's ``pg_name``) and its members' file
#: (ASTRA-sim's communicator ids must be > 0).
GROUP_NAME = "1"
COMM_GROUP_FILE = "comm_group.json"
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
    #: per rank of the traces (a process group on its whole fabric: per fabric rank, None where idle)
    predicted_finish_ns: list[int | None] | None = None
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


def process_group(topology: Topology, notes: list[str] | None = None, whole_fabric: bool = False,
                  why_not: str = "ASTRA-sim cannot describe the fabric") -> list[int] | None:
    """The fabric ranks of a process group's members (``topology`` a :func:`synth.groups.group_view`), or
    None for a collective on every gpu; for a group, what NOTE.txt says of it is appended to ``notes``
    (``whole_fabric``: the export runs on the fabric's network, else on one of the members alone, because
    ``why_not``)."""
    full = fabric_gpus(topology)
    if full == topology.gpus:
        return None
    index = {gpu: rank for rank, gpu in enumerate(full)}
    group = [index[gpu] for gpu in topology.gpus]
    if notes is not None:
        text = (f"The collective runs on a process group of {len(group)} of the fabric's {len(full)} gpus: "
                f"trace rank i is group member i, and {COMM_GROUP_FILE} maps communicator {GROUP_NAME!r} to the "
                f"members' fabric ranks {group} (the form of ASTRA-sim's --comm-group-configuration). ")
        if whole_fabric:
            text += ("ASTRA-sim runs on the whole fabric (network.yml): every fabric rank has a workload trace, "
                     f"the members' COLL nodes carrying pg_name {GROUP_NAME!r} and each non-member's an idle one "
                     "(one COMP node of no work), and run_astrasim.sh passes "
                     f"--comm-group-configuration={COMM_GROUP_FILE}.")
        else:
            text += (f"{why_not}, so run the traces on a network of the members alone, where they are every rank "
                     "(the workloads name no communicator): write YOUR_NETWORK.yml for the links between them "
                     "(docs/process-groups.md has an example).")
        notes.append(text)
    return group


def default_name(schedule: ScheduleForm) -> str:
    """The trace prefix used when none is given: ``<algorithm>_<collective>`` in safe characters."""
    raw = f"{schedule.algorithm}_{schedule.kind.value}"
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in raw) or "schedule"


def system_json(kind: Kind, prefix: str) -> str:
    """ASTRA-sim's system configuration running trace set ``prefix`` as ``kind``'s custom implementation."""
    slot = CUSTOM_SLOT.get(kind, CUSTOM_SLOT[Kind.ALLREDUCE])
    data = {"scheduling-policy": "FIFO", "preferred-dataset-splits": 1, slot: [prefix], "local-mem-bw": 50}
    return json.dumps(data, indent=2) + "\n"


def export_chakra(schedule: ScheduleForm, topology: Topology, sizes: Iterable[int], out_dir: str | Path,
                  comp_duration_us: int | None = None, name: str | None = None, tag_base: int = 0,
                  slices: int = 1, window: int | None = None) -> ChakraExport:
    """Write the ASTRA-sim run folder for ``schedule`` at every size (see the module docstring).

    ``slices`` and ``window`` lower an execution plan's slicing (:func:`synth.trace.schedule_to_et`);
    the defaults write one message per transfer. Sizes whose messages ASTRA-sim cannot run are refused
    (LimitError, nothing written).

    A schedule in the trees form is streamed: its traces are built rank by rank from the trees
    (:func:`synth.trace.stream_rank_traces`), node for node what its expansion gives, in memory bounded
    whatever its size. What needs every transfer at once is left out, and NOTE.txt says so: the ``astra``
    model's prediction (so ``run_astrasim.sh`` runs ASTRA-sim without checking its times) and its ordering
    nodes (so where sends that share a link are ready together, ASTRA-sim's issue order decides between
    them). ``synth export chakra`` streams only schedules over the ``max_transfers`` limit and expands the
    rest.

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

    schedule.require_point_to_point("Chakra export (ASTRA-sim traces)")  # before anything is written
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
    system, warnings, notes, group, whole_fabric = _network(topology, kind)
    workload_ranks = len(fabric_gpus(topology)) if whole_fabric else topology.num_ranks
    comm_type = CollectiveCommType.ALL_REDUCE if kind not in CUSTOM_SLOT else None
    dims = len(system.dims) if system is not None else 1
    if not schedule.held:  # the trees form: traces streamed rank by rank
        for size in sizes:
            check_message_size(schedule, topology, size, slices)
        notes.append(f"The schedule is in the trees form ({schedule.num_transfers():,} transfers): its traces were "
                     "written rank by rank from the trees, without the astra model's prediction and ordering nodes, "
                     "which need every transfer at once. run_astrasim.sh runs ASTRA-sim without checking its times, "
                     "and where sends that share a link are ready together, ASTRA-sim's issue order decides.")
        lowered = []
    else:
        lowered = [lower(schedule.expand(), topology, size, comp_duration_us, tag_base, True, slices, window) for size in sizes]
    sets: list[EtSet] = []
    several = len(sizes) > 1
    out = Path(out_dir)
    with atomic_directory(out, signature=SIGNATURE, kind="`synth export chakra` output") as temp:
        for index, size in enumerate(sizes):
            sub = format_size(size) if several else ""
            folder = temp / sub if sub else temp
            folder.mkdir(exist_ok=True)
            _write_workloads(folder, kind, size, dims, comm_type, group, workload_ranks)
            (folder / "system.json").write_text(system_json(kind, name), encoding="utf-8")
            if not schedule.held:
                counts = _write_streamed(schedule, size, folder, name, comp_duration_us, tag_base, slices, window)
                sets.append(EtSet(size, sub or ".", name, counts, None, 0))
                continue
            low = lowered[index]
            program = low.program
            for rank in range(program.num_ranks):
                (folder / f"{name}.{rank}.et").write_bytes(encode_rank(program, rank))
            finish = [int(t) for t in low.result.finish_ns if t is not None] if system is not None else None
            if finish is not None and len(finish) != program.num_ranks:
                raise SynthError("the traces deadlock: " + "; ".join(low.result.unmatched[:5]))
            expected = _by_workload_rank(finish, group if whole_fabric else None, workload_ranks)
            if program.dropped_deps:
                warnings.append(f"{format_size(size)}: {program.dropped_deps} dependencies between ranks that share "
                                "no end of the transfer cannot be expressed in per-rank traces and were left out")
            sets.append(EtSet(size, sub or ".", name, program.counts(), max(finish) if finish else None,
                              program.dropped_deps, expected, program.order_nodes))
        (temp / "remote_memory.json").write_text(json.dumps(REMOTE_MEMORY) + "\n", encoding="utf-8")
        if group is not None:
            (temp / COMM_GROUP_FILE).write_text(json.dumps({GROUP_NAME: group}) + "\n", encoding="utf-8")
        if system is not None:
            (temp / "network.yml").write_text(system.yaml(), encoding="utf-8")
        groups_file = COMM_GROUP_FILE if whole_fabric else None
        script, command = run_script(sets, system, several, groups=groups_file)
        (temp / "run_astrasim.sh").write_text(script, encoding="utf-8")
        (temp / "run_astrasim.sh").chmod(0o755)
        if several:  # each size's folder runs on its own too
            for item in sets:
                own, _ = run_script([item], system, several=False, up="../", groups=groups_file)
                (temp / item.folder / "run_astrasim.sh").write_text(own, encoding="utf-8")
                (temp / item.folder / "run_astrasim.sh").chmod(0o755)
        text = note_text(schedule, topology, system, warnings + notes, sets, slices, window)
        (temp / "NOTE.txt").write_text(text, encoding="utf-8")
    return ChakraExport(out, name, sets, system.yaml() if system else None, warnings + notes, command, slices, window)


def _network(topology: Topology, kind: Kind) -> tuple[AstraSystem | None, list[str], list[str], list[int] | None, bool]:
    """The ASTRA-sim system the traces run on, the export's warnings and notes, the process group's fabric
    ranks (None: every gpu) and whether the group runs on its whole fabric (where ASTRA-sim can describe
    it and the members are in ascending fabric order: ASTRA-sim picks each member's trace by that order
    but maps the traces' peers in the order given, astra-sim 518bd51 CommunicatorGroup.cc)."""
    group = process_group(topology)
    ascending = group is None or group == sorted(group)
    fabric = fabric_of(topology)
    fabric_system = astra_system(fabric)[0] if group is not None and ascending else None
    whole_fabric = fabric_system is not None and fabric_system.npus == fabric.num_ranks
    system, warnings, notes = _system_and_notes(fabric if whole_fabric else topology, kind)
    group = process_group(topology, notes, whole_fabric=whole_fabric, why_not=(
        "ASTRA-sim cannot describe the fabric" if ascending else "the members are not in ascending fabric rank "
        "order, which ASTRA-sim numbers a communicator's traces in (while it maps their peers in the order given)"))
    return system, warnings, notes, group, whole_fabric


def _by_workload_rank(finish: list[int] | None, group: list[int] | None, ranks: int) -> list[int | None] | None:
    """The predicted finish per workload rank: per trace rank, or, for a group on its whole fabric, per
    fabric rank with None for the idle non-members."""
    if finish is None or group is None:
        return None if finish is None else list(finish)
    by_rank: list[int | None] = [None] * ranks
    for position, rank in enumerate(group):
        by_rank[rank] = finish[position]
    return by_rank


def _write_workloads(folder: Path, kind: Kind, size: int, dims: int, comm_type: CollectiveCommType | None,
                     group: list[int] | None, ranks: int) -> None:
    """The workload traces: one COLL node per rank; on a process group run on its whole fabric (``ranks``
    the fabric's gpus), the members' carry the group's name and every other rank's is idle (ASTRA-sim
    refuses a trace without nodes). On a network of the members alone they are every rank, the default
    communicator, and carry no name."""
    members = set(group) if group is not None and ranks > len(group) else None
    for rank in range(ranks):
        target = folder / f"{WORKLOAD_PREFIX}.{rank}.et"
        if members is not None and rank not in members:
            idle = node_message(EtNode(0, "idle", NodeType.COMP_NODE, duration_us=0), rank)
            meta = metadata_message({"producer": "synth", "rank": rank})
            target.write_bytes(et_def.encode_records([meta.SerializeToString(), idle.SerializeToString()]))
        else:
            target.write_bytes(workload_bytes(kind, size, rank, dims, comm_type, None if members is None else GROUP_NAME))


def _system_and_notes(topology: Topology, kind: Kind) -> tuple[AstraSystem | None, list[str], list[str]]:
    """The ASTRA-sim system of ``topology`` (None where it cannot be described), and the warnings and notes
    the export states about it."""
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
    return system, warnings, notes


def _write_streamed(form: ScheduleForm, size: int, folder: Path, name: str, comp_duration_us: int | None,
                    tag_base: int, slices: int, window: int | None) -> dict[str, int]:
    """Write ``form``'s traces at ``size`` into ``folder`` rank by rank; return the node counts by type."""
    metadata, ranks = stream_rank_traces(form, size, comp_duration_us, tag_base, True, slices, window)
    counts: dict[str, int] = {}
    for rank, nodes in ranks:
        (folder / f"{name}.{rank}.et").write_bytes(encode_nodes(metadata, nodes, rank))
        for node in nodes:
            counts[node.type.name] = counts.get(node.type.name, 0) + 1
    return dict(sorted(counts.items()))


RUN_FUNCTION = r"""run() {  # folder, size, predicted finish per rank, where the shared configs are
  local out got
  out=$(cd "$1" && "$BIN" --workload-configuration=WORKLOAD --system-configuration=system.json \
        --network-configuration="$4NETWORK" --remote-memory-configuration="$4remote_memory.json"GROUPS 2>&1) || true
  printf '%s\n' "$out" | grep -E 'finished,|rror|ssert' || true
  got=$(printf '%s\n' "$out" | sed -n 's/.*sys\[\([0-9]*\)\] finished, \([0-9]*\) cycles.*/\1 \2/p' \
        | sort -n | cut -d' ' -f2 | tr '\n' ' ')
  if [ -z "$got" ]; then
    echo "$2: ASTRA-sim printed no 'sys[i] finished' line; its output ends:" >&2
    printf '%s\n' "$out" | tail -n 5 >&2; status=1; return 0
  fi
  [ -n "$3" ] || return 0
  local -a want have
  read -r -a want <<< "$3"
  read -r -a have <<< "$got"
  local same=1 i
  [ "${#want[@]}" -eq "${#have[@]}" ] || same=0
  for i in "${!want[@]}"; do  # '*': an idle rank outside the process group, any time
    [ "${want[$i]}" = "*" ] || [ "${want[$i]}" = "${have[$i]:-}" ] || same=0
  done
  if [ "$same" = 1 ]; then echo "$2: every rank finished when synth predicted"
  else echo "$2: ASTRA-sim reported [${got% }], synth predicted [$3]"; status=1; fi
}"""


def run_script(sets: list[EtSet], system: AstraSystem | None, several: bool, up: str = "",
               groups: str | None = None) -> tuple[str, str]:
    """``run_astrasim.sh`` and the command line it runs (for the first set); ``groups``: the communicator
    groups file passed as ``--comm-group-configuration`` (a process group on its whole fabric).

    The script runs every set, prints ASTRA-sim's ``sys[i] finished`` lines and says whether every rank
    finished when synth's ``astra`` model predicts; it exits 1 when one did not or when ASTRA-sim printed no
    finish line, and 127 (saying so) when the binary is not found. ``up`` prefixes the
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
        "# synth's prediction and exits 1 when they differ or none is printed, 127 without the binary.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f'BIN="${{ASTRA_SIM:-{binary}}}"',
        'if ! command -v "$BIN" >/dev/null 2>&1; then',
        '  echo "run_astrasim.sh: the ASTRA-sim binary \'$BIN\' was not found: set ASTRA_SIM to its path or put it on PATH" >&2',
        "  exit 127",
        "fi",
        "status=0",
        RUN_FUNCTION.replace("WORKLOAD", WORKLOAD_PREFIX).replace("NETWORK", network).replace(
            "GROUPS", "" if groups is None else f' --comm-group-configuration="$4{groups}"'),
    ]
    if system is None:
        lines.append("# ASTRA-sim cannot describe this topology (see NOTE.txt): write YOUR_NETWORK.yml first.")
    first = ""
    for item in sets:
        prefix = "../" if several else up
        predicted = (" ".join("*" if t is None else str(t) for t in item.predicted_finish_ns)
                     if item.predicted_finish_ns else "")
        lines.append(f'run {item.folder if several else "."} {format_size(item.size)} "{predicted}" "{prefix}"')
        command = (f"{binary} --workload-configuration={WORKLOAD_PREFIX} --system-configuration=system.json "
                   f"--network-configuration={prefix}{network} --remote-memory-configuration={prefix}remote_memory.json"
                   + ("" if groups is None else f" --comm-group-configuration={prefix}{groups}"))
        first = first or command
    lines.append("exit $status")
    return "\n".join(lines) + "\n", first


def note_text(schedule: ScheduleForm, topology: Topology, system: AstraSystem | None, messages: list[str],
              sets: list[EtSet], slices: int = 1, window: int | None = None) -> str:
    """NOTE.txt: what was exported and anything the user must know before running it."""
    count = schedule.num_transfers()
    lines = [f"{schedule.algorithm} {schedule.kind} on {topology.name} ({topology.num_ranks} ranks, "
             f"{schedule.chunks} chunks, {count} transfers), exported by synth."]
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
