"""Core benchmarks: verifier and evaluator throughput, synthesis time and memory against topology size,
and schedule quality against the bandwidth bound.

Tables
------
``core_throughput``
    Schedules of about 10^4, 10^5 and 10^6 transfers (four shapes: ring chains, an all-at-once direct
    alltoall, pipelined binomial trees, ForestColl trees): time to build, verify, compute the exact
    congestion bound and run the flow simulation, and transfers per second for the verifier and the
    flow model.
``core_synthesis``
    Synthesis time and peak traced memory per algorithm against the gpu count (8 to 4096 where it runs
    inside the per-step budget; beyond the transfer limit the request is refused up front).
``core_quality``
    algbw at 1 KiB, 1 MiB and 1 GiB as a percentage of the topology's bandwidth bound, per algorithm,
    collective and topology (flow model; every schedule verified).
"""

from __future__ import annotations

import gc
from functools import partial

from bench import Table, over_budget, peak_memory, timed
from synth import load_topology, synthesize, verify
from synth.algorithms import REGISTRY
from synth.collectives import Kind
from synth.errors import LimitError, NotApplicable, SynthError
from synth.evaluate import congestion
from synth.flow import simulate

#: Algorithms with their own benchmark module (bench_forest, bench_milp) are left out of the scaling table.
OWN_MODULES = {"forest", "milp"}


def run(quick: bool) -> list[Table]:
    """All core tables (see the module docstring)."""
    return [throughput(quick), synthesis_scaling(quick), quality(quick)]


# ------------------------------------------------------------------------------------------ throughput
def _shapes() -> list[tuple[str, str, str, str, object]]:
    """(label, topology spec, collective, algorithm, chunks-for-target-transfers)."""
    return [
        # 2 (N-1) C transfers with N = 64
        ("ring allreduce (chains)", "ring:n=64", "allreduce", "ring", lambda t: {"chunks": 64 * max(1, round(t / 8064))}),
        # N (N-1) transfers, all at once
        ("direct alltoall (no deps)", "switch:n={n}", "alltoall", "direct",
         lambda t: {"n": max(2, round(t ** 0.5))}),
        # (N-1) C transfers with N = 64, every chunk its own tree
        ("binomial broadcast (trees)", "switch:n=64", "broadcast", "binomial", lambda t: {"chunks": max(1, round(t / 63))}),
        # 3120 q transfers with 208 q chunks on two DGX A100 boxes
        ("forest allgather (packed trees)", "dgx-a100:boxes=2", "allgather", "forest",
         lambda t: {"chunks": 208 * max(1, round(t / 3120))}),
    ]


def throughput(quick: bool) -> Table:
    table = Table("core_throughput", "Verifier and flow-model throughput against schedule size",
                  ["schedule", "transfers", "build s", "verify s", "verify transfers/s", "congestion s", "flow s",
                   "flow transfers/s"])
    targets = [10**4, 10**5] if quick else [10**4, 10**5, 10**6]
    for label, spec, kind, algorithm, size_for in _shapes():
        if algorithm not in REGISTRY:
            continue
        for target in targets:
            if quick and target > 10**4 and algorithm != "ring":
                continue
            if target > 10**5 and algorithm == "direct":
                continue  # 10^6 distinct paths: 1.6 GB and half a minute, no new information
            options = dict(size_for(target))
            n = options.pop("n", None)
            topology = load_topology(spec.format(n=n))
            try:
                build_s, schedule = timed(partial(synthesize, topology, kind, algorithm, **options))
            except SynthError as refusal:
                table.add(label, None, None, None, None, None, None, str(refusal)[:60])
                break
            count = len(schedule.transfers)
            verify_s, _ = timed(partial(verify, schedule, topology))
            congestion_s, _ = timed(partial(congestion, schedule, topology))
            flow_s, _ = timed(partial(simulate, schedule, topology, 2**30))
            table.add(label, count, build_s, verify_s, count / verify_s, congestion_s, flow_s, count / flow_s)
            del schedule
            gc.collect()
            if over_budget(build_s + verify_s + flow_s, quick, full_budget=60.0, quick_budget=5.0):
                break
    table.notes = ("Flow model at 1 GiB. ring:n=64; direct on switch:n=N with C=N; binomial on switch:n=64; "
                   "forest on dgx-a100:boxes=2. Wall times on one core, one run each.")
    return table


# ------------------------------------------------------------------------------------ synthesis scaling
def _family(algorithm: str, gpus: int) -> str:
    """The topology of ``gpus`` gpus an algorithm is scaled on."""
    if algorithm == "multidim":
        a = 2 ** ((gpus.bit_length() - 1) // 2)
        return f"torus:dims={a}x{gpus // a}"
    return f"dgx-a100:boxes={gpus // 8}"


def _collective(algorithm: str) -> Kind:
    supported = REGISTRY[algorithm].collectives
    for kind in (Kind.ALLREDUCE, Kind.ALLTOALL, Kind.ALLGATHER, Kind.BROADCAST, Kind.REDUCE, Kind.REDUCESCATTER):
        if kind in supported:
            return kind
    raise AssertionError(algorithm)


def synthesis_scaling(quick: bool) -> Table:
    table = Table("core_synthesis", "Synthesis time and peak memory against topology size (default chunks)",
                  ["algorithm", "collective", "topology", "gpus", "transfers", "synthesis s", "peak MiB", "verify s"])
    sizes = [8, 16, 32, 64] if quick else [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    memory_cutoff = 0.5 if quick else 2.0
    # a series stops when the next step is predicted (growth so far, at least 4x per doubling) to take
    # longer than this, synthesis plus verification
    next_step_budget = 2.0 if quick else 20.0
    for algorithm in REGISTRY:
        if algorithm in OWN_MODULES:
            continue
        kind = _collective(algorithm)
        previous = None
        for gpus in sizes:
            spec = _family(algorithm, gpus)
            topology = load_topology(spec)
            try:
                seconds, schedule = timed(partial(synthesize, topology, kind, algorithm))
            except LimitError as refusal:
                table.add(algorithm, kind.value, spec, gpus, None, None, None, None)
                table.notes += f"\n{algorithm} at {gpus} gpus is refused up front: {refusal}"
                break
            except NotApplicable as reason:
                table.notes += f"\n{algorithm} does not apply to {spec}: {reason}"
                continue
            peak = peak_memory(partial(synthesize, topology, kind, algorithm)) if seconds <= memory_cutoff else None
            verify_s, _ = timed(partial(verify, schedule, topology))
            table.add(algorithm, kind.value, spec, gpus, len(schedule.transfers), seconds, peak, verify_s)
            del schedule
            gc.collect()
            step = seconds + verify_s
            growth = max(4.0, step / previous) if previous else 4.0
            if step * growth > next_step_budget or (gpus >= 1024 and step > 1.0):
                break
            previous = step
    table.notes = ("A series grows until the next step (synthesis and verification) is predicted to take over "
                   f"{next_step_budget:g} s, or a request is refused by the transfer limit. Peak memory is traced by "
                   f"tracemalloc in a second run, only when synthesis took under {memory_cutoff:g} s. ForestColl and "
                   "the MILP have their own benchmark tables." + table.notes)
    return table


# ------------------------------------------------------------------------------------------ quality
def quality(quick: bool) -> Table:
    from synth.compare import run_all

    table = Table("core_quality", "Schedule quality: algbw as % of the topology's bandwidth bound (flow model)",
                  ["topology", "collective", "algorithm", "1KiB %", "1MiB %", "1GiB %", "1GiB algbw GB/s"])
    specs = ["dgx-a100:boxes=2"] if quick else ["dgx1", "dgx-a100:boxes=2", "mi250:boxes=2", "torus:dims=4x4"]
    kinds = [Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.ALLTOALL]
    sizes = [2**10, 2**20, 2**30]
    algorithms = [a for a in REGISTRY if a != "milp"]  # the MILP's quality is in bench_milp
    for spec in specs:
        topology = load_topology(spec)
        rows, _, _ = run_all(topology, kinds, sizes, algorithms=algorithms)
        by_key: dict[tuple[str, str], dict[int, object]] = {}
        for row in rows:
            by_key.setdefault((row.collective, row.algorithm), {})[row.size] = row
        for (collective, algorithm), per_size in by_key.items():
            percents = [per_size[s].percent_of_bound if s in per_size else None for s in sizes]
            largest = per_size.get(sizes[-1])
            table.add(spec, collective, algorithm, *percents, None if largest is None else largest.algbw_GBps)
    table.notes = ("The bound is synth.bounds.algbw_bound (the exact cut bound for allgather/reduce-scatter/"
                   "allreduce, the cut bound for alltoall); latency makes small sizes far from it.")
    return table
