"""ASTRA-sim against synth's ``astra`` model, rank by rank: ``make astra-check``.

Runs the real ASTRA-sim 2.x analytical binaries on ``synth export chakra`` folders and compares every rank's
``sys[i] finished, T cycles`` with what ``synth evaluate --model astra`` predicts for the same traces. Cases:
Ring, Switch and FullyConnected networks of 4 to 32 npus (congestion-aware backend) and 2-D systems
(congestion-unaware backend), every algorithm that applies to every collective, sizes 64 KiB to 64 MiB,
sliced exports (``--slices``, ``--window``), and the MSCCL programs of ``tests/data`` (scratch relays, local
reductions) imported on small networks.

The binaries are not part of synth: build them with ``shared/tools/build_astrasim.sh`` (or ASTRA-sim's own
``build/astra_analytical/build.sh``) and point at them with

- ``SYNTH_ASTRA_BIN``: ``AstraSim_Analytical_Congestion_Aware`` (1-D networks);
- ``SYNTH_ASTRA_BIN_UNAWARE``: ``AstraSim_Analytical_Congestion_Unaware`` (2-D systems; default: the file of
  that name next to ``SYNTH_ASTRA_BIN``).

Without them the module is skipped. ``python -m bench.bench_astra [--quick] [--record FILE]`` runs it alone;
``--record`` writes every measured case (ASTRA-sim's per-rank numbers) as JSON, the expectations that
``tests/test_astra.py`` holds the model to where ASTRA-sim cannot be built. Tables:

``astra_check``
    per network: cases run, ranks compared, cases where every rank matches to the ns, and the largest
    difference;
``astra_check_cases``
    per network, collective and algorithm: the sizes and slicings run, rank-exact cases, ASTRA-sim's time at
    the largest size.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import Skip, Table

KIB, MIB = 1 << 10, 1 << 20
#: 50 GB/s in ASTRA-sim's GB (2^30 bytes) and 500 ns per hop, ASTRA-sim's example links, in synth's units.
LINK = "bandwidth=53.6870912,latency=0.5"
#: a second link type: 200 GB/s (10^9) and 250 ns, so bandwidths that are not whole in 2^30 units are covered
FAST = "bandwidth=200,latency=0.25"
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
SLICINGS_FULL: tuple[tuple[int, int | None], ...] = ((4, 2), (3, None))


@dataclass(frozen=True)
class Case:
    """One run: a topology, a collective and algorithm (with options), a size and a slicing."""

    topology: str
    collective: str
    algorithm: str
    size: int
    slices: int = 1
    window: int | None = None
    options: tuple[tuple[str, Any], ...] = ()

    def label(self) -> str:
        """Short text for tables and error messages."""
        extra = "".join(f",{k}={v}" for k, v in self.options)
        sliced = f" slices={self.slices}" + (f" window={self.window}" if self.window else "") if self.slices > 1 else ""
        return f"{self.topology} {self.collective} {self.algorithm}{extra} {self.size}B{sliced}"


def networks(quick: bool) -> list[str]:
    """Topology specs: 1-D Ring/Switch/FullyConnected of 4-32 npus, then 2-D systems."""
    one_d = [f"{kind}:n={n},{LINK}" for kind, sizes in (("ring", (4, 8, 12, 32)), ("switch", (4, 8, 12, 16, 32)),
                                                           ("fully-connected", (4, 8, 16, 32)))
             for n in sizes]
    one_d += [f"switch:n=8,{FAST}", f"ring:n=6,{FAST}"]
    two_d = ["multidim:kinds=Ring/Switch,sizes=4x2,bandwidths=53.6870912x26.8435456,latencies=0.5x1.0",
             "multidim:kinds=FullyConnected/Ring,sizes=4x4,bandwidths=53.6870912,latencies=0.5",
             "multidim:kinds=Switch/Switch,sizes=8x4,bandwidths=200x53.6870912,latencies=0.25x0.5",
             "multidim:kinds=Ring/FullyConnected,sizes=4x8,bandwidths=53.6870912,latencies=0.5"]
    if quick:
        return [f"ring:n=8,{LINK}", f"switch:n=8,{LINK}", f"fully-connected:n=8,{LINK}", two_d[0]]
    return one_d + two_d


#: algorithms skipped above this many npus (their synthesis alone takes minutes there)
SLOW = {"milp": 8, "mcf": 16}


def cases(quick: bool) -> list[Case]:
    """Every case of the check, in order."""
    from synth.algorithms import available
    from synth.collectives import Kind

    sizes = (64 * KIB, MIB) if quick else (64 * KIB, MIB, 16 * MIB, 64 * MIB)
    found = []
    for spec in networks(quick):
        n = _npus(spec)
        for kind in Kind:
            for algorithm in available(kind):
                if n > SLOW.get(algorithm.name, n):
                    continue
                options: tuple[tuple[str, Any], ...] = (("root", 1),) if kind in (Kind.BROADCAST, Kind.REDUCE) else ()
                for size in sizes:
                    found.append(Case(spec, kind.value, algorithm.name, size, options=options))
                if not quick and n == 8 and "multidim" not in spec:
                    for slices, window in SLICINGS_FULL:
                        found.append(Case(spec, kind.value, algorithm.name, MIB, slices, window, options))
    for name, spec in MSCCL_PROGRAMS:
        collective = "alltoall" if name.startswith("alltoall") else "allreduce"
        for size in sizes:
            found.append(Case(spec, collective, f"msccl:{name}", size))
        if not quick:
            for slices, window in SLICINGS_FULL:
                found.append(Case(spec, collective, f"msccl:{name}", MIB, slices, window))
    return found


#: MSCCL programs written by hand for the importer's tests (scratch relays, local reductions), imported and
#: run as ``algorithm="msccl:<file>"``
MSCCL_PROGRAMS = (("allpairs_allreduce_4r.xml", f"switch:n=4,{LINK}"),
                  ("chain_allreduce_4r_rrcs.xml", f"fully-connected:n=4,{LINK}"),
                  ("ring_allreduce_3r_outofplace.xml", f"ring:n=3,{LINK}"),
                  ("alltoall_relay_3r_line.xml", f"switch:n=3,{LINK}"))
DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def schedule_of(case: Case) -> Any:
    """The case's schedule: synthesized, or imported from ``tests/data`` for ``msccl:<file>``."""
    from synth import load_topology, synthesize
    from synth.export.msccl import import_msccl

    topology = load_topology(case.topology)
    if case.algorithm.startswith("msccl:"):
        return import_msccl(DATA / case.algorithm.split(":", 1)[1], topology, topology_name=case.topology)
    return synthesize(topology, case.collective, case.algorithm, **dict(case.options))


def _npus(spec: str) -> int:
    match = re.search(r"(?:^|[:,])n=(\d+)", spec)
    if match:
        return int(match.group(1))
    sizes = re.search(r"sizes=([\dx]+)", spec)
    product = 1
    for part in sizes.group(1).split("x") if sizes else ():
        product *= int(part)
    return product


def binaries() -> tuple[Path | None, Path | None]:
    """(congestion-aware, congestion-unaware) binaries from the environment, or None where absent."""
    aware = os.environ.get("SYNTH_ASTRA_BIN")
    unaware = os.environ.get("SYNTH_ASTRA_BIN_UNAWARE")
    if aware and not unaware:
        sibling = Path(aware).with_name("AstraSim_Analytical_Congestion_Unaware")
        unaware = str(sibling) if sibling.is_file() else None

    def usable(path: str | None) -> Path | None:
        return Path(path) if path and Path(path).is_file() and os.access(path, os.X_OK) else None

    return usable(aware), usable(unaware)


def run_astrasim(binary: Path, folder: Path, ranks: int) -> tuple[list[int | None], str]:
    """Run ASTRA-sim in an exported folder; (finish ns per rank, None where a rank never finished; problem)."""
    command = [str(binary), "--workload-configuration=workload", "--system-configuration=system.json",
               "--network-configuration=network.yml", "--remote-memory-configuration=remote_memory.json"]
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        return [None] * ranks, "timed out after 600 s"
    finish: list[int | None] = [None] * ranks
    for rank, cycles in FINISHED.findall(done.stdout + done.stderr):
        if int(rank) < ranks:
            finish[int(rank)] = int(cycles)
    problem = "" if done.returncode == 0 else f"exit code {done.returncode}"
    return finish, problem


@dataclass
class Outcome:
    """One case's result."""

    case: Case
    measured: list[int | None]
    predicted: list[int]
    problem: str = ""
    #: :func:`schedule_fingerprint` of the schedule that was run
    fingerprint: str = ""

    @property
    def exact(self) -> bool:
        """Every rank finished when the model says, to the ns."""
        return not self.problem and self.measured == self.predicted

    def largest_difference(self) -> int | None:
        """Largest |ASTRA-sim - model| over the ranks (None when a rank did not finish)."""
        if any(m is None for m in self.measured):
            return None
        return max(abs(int(m) - p) for m, p in zip(self.measured, self.predicted, strict=True))


def check(case: Case, aware: Path | None, unaware: Path | None) -> Outcome | None:
    """Export the case, run ASTRA-sim on it and compare; None when the algorithm does not apply or no binary."""
    from synth import load_topology, verify
    from synth.astra import astra_system, schedule_fingerprint
    from synth.errors import LimitError, SynthError
    from synth.export.chakra import export_chakra

    topology = load_topology(case.topology)
    system, _ = astra_system(topology)
    binary = aware if system is not None and system.congestion_aware else unaware
    if binary is None:
        return None
    try:
        schedule = schedule_of(case)
    except SynthError:  # does not apply, or over a limit of the algorithm (e.g. forest's tree count)
        return None
    verify(schedule, topology)
    with tempfile.TemporaryDirectory(prefix="synth-astra-") as folder:
        try:
            report = export_chakra(schedule, topology, [case.size], folder, slices=case.slices, window=case.window)
        except LimitError as refused:  # e.g. messages under 1 ns on a link, on which ASTRA-sim aborts
            print(f"  {case.label()}: not run, the export refuses it: {refused}", file=sys.stderr, flush=True)
            return None
        predicted = report.sets[0].predicted_finish_ns or []
        measured, problem = run_astrasim(binary, Path(folder), topology.num_ranks)
    return Outcome(case, measured, predicted, problem, schedule_fingerprint(schedule))


def run_cases(quick: bool, record: Path | None = None, progress: bool = True) -> list[Outcome]:
    """Run every case with the binaries from the environment (Skip when there are none)."""
    aware, unaware = binaries()
    if aware is None and unaware is None:
        raise Skip("no ASTRA-sim binary: set SYNTH_ASTRA_BIN to AstraSim_Analytical_Congestion_Aware "
                   "(built with shared/tools/build_astrasim.sh)")
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    for case in cases(quick):
        outcome = check(case, aware, unaware)
        if outcome is None:
            continue
        outcomes.append(outcome)
        if progress:
            mark = "ok" if outcome.exact else f"DIFFERS ({outcome.problem or outcome.largest_difference()})"
            print(f"  [{time.perf_counter() - started:6.0f}s] {case.label()}: {mark}", file=sys.stderr, flush=True)
        if record is not None and (len(outcomes) % 50 == 0):
            write_record(record, outcomes)  # progress survives an interruption
    if record is not None:
        write_record(record, outcomes)
    return outcomes


def write_record(path: Path, outcomes: list[Outcome]) -> None:
    """ASTRA-sim's measured numbers of every case, one case per line (the tests' expectations)."""
    from synth.fileio import atomic_write_text

    lines = [json.dumps({"topology": o.case.topology, "collective": o.case.collective, "algorithm": o.case.algorithm,
                         "options": dict(o.case.options), "size": o.case.size, "slices": o.case.slices,
                         "window": o.case.window, "schedule_sha256": o.fingerprint,
                         "astra_sim_finish_ns": o.measured}, separators=(",", ":"))
             for o in outcomes]
    atomic_write_text(str(path), '{"measured_with": "ASTRA-sim 2.x analytical backends, make astra-check",\n'
                                 ' "cases": [\n' + ",\n".join(lines) + "\n]}\n")


def tiny_messages(quick: bool) -> Table:
    """D2 on the real binary: per link type, a ring allgather whose messages have the smallest size synth
    exports (:func:`synth.astra.smallest_message`) runs and matches the model; the same traces with one
    byte less per message abort ASTRA-sim."""
    from synth import load_topology, synthesize
    from synth.astra import astra_system, smallest_message
    from synth.export.chakra import export_chakra
    from synth.trace import encode_rank, schedule_to_et

    aware, _ = binaries()
    table = Table("astra_tiny", "Tiny messages: the smallest size synth exports runs, one byte less aborts",
                  ["network", "smallest message B", "ASTRA-sim at smallest", "exit status one byte less"])
    if aware is None:
        return table
    specs = [f"ring:n=4,{LINK}"] if quick else [f"ring:n=4,{LINK}", f"switch:n=8,{FAST}",
                                                 f"fully-connected:n=4,{LINK}", "switch:n=4,bandwidth=900,latency=0"]
    for spec in specs:
        topology = load_topology(spec)
        system, _ = astra_system(topology)
        assert system is not None
        smallest = smallest_message(system)
        schedule = synthesize(topology, "allgather", "ring")
        with tempfile.TemporaryDirectory(prefix="synth-astra-") as folder:
            report = export_chakra(schedule, topology, [smallest * schedule.chunks], folder)
            measured, problem = run_astrasim(aware, Path(folder), topology.num_ranks)
            exact = not problem and measured == report.sets[0].predicted_finish_ns
            below = schedule_to_et(schedule, (smallest - 1) * schedule.chunks)
            for rank in range(below.num_ranks):  # the same folder, traces one byte short (synth refuses them)
                (Path(folder) / f"{report.name}.{rank}.et").write_bytes(encode_rank(below, rank))
            command = [str(aware), "--workload-configuration=workload", "--system-configuration=system.json",
                       "--network-configuration=network.yml", "--remote-memory-configuration=remote_memory.json"]
            code = subprocess.run(command, cwd=folder, capture_output=True, timeout=600, check=False).returncode
            code = 128 - code if code < 0 else code  # killed by a signal: as a shell reports it
        table.add(network_label(spec), smallest,
                  "rank-exact" if exact else f"DIFFERS {problem}", code)
    table.notes = "exit status 134 is SIGABRT from the assertion `current_event_list.get_event_time() > current_time`."
    return table


def network_label(spec: str) -> str:
    """A topology spec as the network ASTRA-sim runs: kind, npus, and link (its GB = 2^30 bytes)."""
    from synth import load_topology
    from synth.astra import astra_system

    system, _ = astra_system(load_topology(spec))
    if system is None:
        return spec
    links = [f"{round(d.bandwidth, 2):g} GB/s, {d.latency:g} ns" for d in system.dims]
    if len(set(links)) == 1:
        return " x ".join(f"{d.kind} {d.npus}" for d in system.dims) + f" ({links[0]})"
    return " x ".join(f"{d.kind} {d.npus} ({link})" for d, link in zip(system.dims, links, strict=True))


def tables(outcomes: list[Outcome]) -> list[Table]:
    """The summary per network and the per-algorithm table."""
    summary = Table("astra_check", "ASTRA-sim vs synth's astra model, every rank to the ns",
                    ["network", "backend", "cases", "ranks compared", "rank-exact cases", "largest diff ns"])
    by_network: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_network.setdefault(outcome.case.topology, []).append(outcome)
    for spec, group in by_network.items():
        diffs = [o.largest_difference() for o in group]
        worst = None if any(d is None for d in diffs) else max(d for d in diffs if d is not None)
        summary.add(network_label(spec), "aware" if "multidim" not in spec else "unaware", len(group),
                    sum(len(o.predicted) for o in group), sum(o.exact for o in group), worst)
    summary.notes = ("Each case: synth generate, synth export chakra (one size), ASTRA-sim run in the folder, "
                     "every rank's 'sys[i] finished, T cycles' compared with the model's prediction for that rank.")
    detail = Table("astra_check_cases", "ASTRA-sim vs the astra model per algorithm",
                   ["network", "collective", "algorithm", "runs", "rank-exact", "ASTRA-sim ns (largest size)"])
    groups: dict[tuple[str, str, str], list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault((outcome.case.topology, outcome.case.collective, outcome.case.algorithm), []).append(outcome)
    for (spec, collective, algorithm), group in groups.items():
        plain = [o for o in group if o.case.slices == 1]
        largest = max(plain or group, key=lambda o: o.case.size)
        finished = [m for m in largest.measured if m is not None]
        detail.add(network_label(spec), collective, algorithm, len(group), sum(o.exact for o in group),
                   max(finished) if finished else None)
    return [summary, detail]


def run(quick: bool) -> list[Table]:
    """Bench protocol: the check with the binaries from the environment (skipped without them)."""
    return [*tables(run_cases(quick)), tiny_messages(quick)]


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.bench_astra``: print the tables; exit 1 when a case differs."""
    parser = argparse.ArgumentParser(prog="python -m bench.bench_astra", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8-npu networks and one 2-D system, two sizes")
    parser.add_argument("--record", type=Path, help="write ASTRA-sim's measured numbers of every case as JSON")
    parser.add_argument("--markdown", action="store_true", help="also print the tables as Markdown")
    args = parser.parse_args(argv)
    try:
        outcomes = run_cases(args.quick, args.record)
    except Skip as reason:
        print(f"astra-check cannot run: {reason}", file=sys.stderr)
        return 2
    from rich.console import Console

    from bench.__main__ import to_markdown, to_rich

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    for table in [*tables(outcomes), tiny_messages(args.quick)]:
        console.print(to_rich(table))
        if args.markdown:
            print(to_markdown(table))
    wrong = [o for o in outcomes if not o.exact]
    for outcome in wrong[:20]:
        print(f"DIFFERS: {outcome.case.label()}: ASTRA-sim {outcome.measured} model {outcome.predicted} "
              f"{outcome.problem}", file=sys.stderr)
    print(f"{len(outcomes) - len(wrong)} of {len(outcomes)} cases rank-exact", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
