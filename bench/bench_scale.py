"""Scale benchmark: the exact allgather bound from 8 to 65,536 gpus and the full optimal schedule as far as
it is feasible.

Table ``scale``: for DGX A100 clusters of 1 to 8,192 boxes (8 to 65,536 gpus) and a few of today's
fabrics at 16,384 to 65,536 gpus, the time to build the topology, the time for the exact bound
(:func:`synth.bounds.optimal_bound`: the optimum of allgather and reduce-scatter, the fewest trees per
root, the bottleneck cut), the full optimal allgather schedule (``forest``) where it fits the
transfer limits, its transfers, and the peak resident memory of the whole run. Every row runs in a fresh
process (so caches start empty and the peak RSS is the row's own); every schedule is verified and its
congestion time checked to equal the bound, outside the timed region.

Wall times depend on what else the machine runs; the CPU-seconds columns (``time.process_time`` of the
row's process) do not. Run ``python -m bench --only scale`` or ``python bench/bench_scale.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: The 2,048-gpu schedule has 4,192,256 transfers: just over the default limit of 4,000,000.
TRANSFER_LIMIT = "10000000"
#: Largest gpu count whose full schedule is attempted (4,096 gpus would need 16.8M tree arcs, over the
#: forest plan's 8M limit: that size needs the compact schedule form).
SCHEDULE_MAX_GPUS = 2048


def measure(spec: str, schedule: bool) -> dict:
    """Build ``spec``, bound it, and (when ``schedule``) synthesize, verify and check the optimal
    allgather; runs in the current process."""
    import resource
    from fractions import Fraction

    from synth.algorithms.forest import forest
    from synth.bounds import optimal_bound
    from synth.collectives import Kind
    from synth.evaluate import congestion
    from synth.library import load_topology
    from synth.verify import verify

    row: dict = {"spec": spec}
    wall, cpu = time.perf_counter(), time.process_time()
    topo = load_topology(spec)
    row.update(gpus=topo.num_ranks, nodes=topo.graph.number_of_nodes(), build_s=time.perf_counter() - wall)
    wall, cpu = time.perf_counter(), time.process_time()
    bound = optimal_bound(topo)
    row.update(bound_s=time.perf_counter() - wall, bound_cpu_s=time.process_time() - cpu, flows=bound.flows,
               algbw=bound.algbw_GBps, cut_gpus=len(bound.cut_gpus), trees=bound.trees_per_root)
    if schedule:
        wall, cpu = time.perf_counter(), time.process_time()
        result = forest(topo, Kind.ALLGATHER)
        row.update(schedule_s=time.perf_counter() - wall, schedule_cpu_s=time.process_time() - cpu,
                   transfers=len(result.transfers))
        wall = time.perf_counter()
        verify(result, topo)
        optimum = Fraction(1, topo.num_ranks) / (bound.rate_GBps * 10**9)
        assert congestion(result, topo).seconds_per_byte == optimum, "the schedule misses the bound"
        row.update(verified=True, verify_s=time.perf_counter() - wall)
    row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def measure_in_child(spec: str, schedule: bool) -> dict:
    """:func:`measure` in a fresh interpreter (its own caches and peak RSS)."""
    env = dict(os.environ, SYNTH_MAX_TRANSFERS=TRANSFER_LIMIT, PYTHONPATH=str(ROOT))
    code = "import json, sys; from bench.bench_scale import measure; print(json.dumps(measure(sys.argv[1], sys.argv[2] == '1')))"
    done = subprocess.run([sys.executable, "-c", code, spec, "1" if schedule else "0"], capture_output=True, text=True,
                          env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{spec}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cases(quick: bool) -> list[str]:
    boxes = [1, 8, 64] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    specs = [f"dgx-a100:boxes={b}" for b in boxes]
    if not quick:
        specs += ["dgx-superpod:sus=64", "dgx-superpod:sus=256", "tpu-v5p:dims=16x16x24",
                  "dragonfly:p=8,a=16,h=8", "gb200-nvl72:racks=228"]
    return specs


def run(quick: bool) -> list[Table]:
    """The scale table (see the module docstring)."""
    table = Table("scale", "Exact allgather bound and full optimal schedule against cluster size",
                  ["topology", "gpus", "nodes", "build s", "bound s", "bound cpu s", "max-flows", "algbw GB/s",
                   "schedule s", "schedule cpu s", "transfers", "peak RSS MiB"])
    for spec in cases(quick):
        gpus_hint = 8 * int(spec.split("=")[1]) if spec.startswith("dgx-a100") else None
        schedule = gpus_hint is not None and gpus_hint <= (64 if quick else SCHEDULE_MAX_GPUS)
        row = measure_in_child(spec, schedule)
        table.add(spec, row["gpus"], row["nodes"], round(row["build_s"], 2), round(row["bound_s"], 2),
                  round(row["bound_cpu_s"], 2), row["flows"], round(row["algbw"], 2),
                  round(row["schedule_s"], 2) if schedule else None,
                  round(row["schedule_cpu_s"], 2) if schedule else None,
                  row.get("transfers"), round(row["peak_rss_mib"]))
    table.notes = (
        "Each row in a fresh process. bound = synth.bounds.optimal_bound (exact allgather and reduce-scatter "
        "optima as Fractions, the fewest trees per root, the bottleneck cut) on quotient networks: one gpu per "
        "orbit of verified automorphisms, each tested on its equitable-partition quotient (a few dozen nodes). "
        "schedule = forest allgather from scratch (bound, splitting, packing, transfers), verified and checked "
        "to meet the bound exactly outside the timed region; up to "
        f"{SCHEDULE_MAX_GPUS:,} gpus only: 4,096 gpus would need 16.8M tree arcs, over the forest plan's "
        "8M limit (the compact schedule form is future work). SYNTH_MAX_TRANSFERS is raised to "
        f"{int(TRANSFER_LIMIT):,} for the 2,048-gpu schedule (4,192,256 transfers). cpu s = process CPU time "
        "(independent of other load on the machine); peak RSS = the row's whole process.")
    return [table]


if __name__ == "__main__":
    started = time.perf_counter()
    for result in run(quick="--quick" in sys.argv):
        print(result.title)
        print(" | ".join(result.columns))
        for values in result.rows:
            print(" | ".join("-" if value is None else str(value) for value in values))
        print(result.notes)
    print(f"({time.perf_counter() - started:.1f} s)")
