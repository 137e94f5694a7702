"""Scale benchmark: the exact allgather bound from 8 to 65,536 gpus and the full optimal schedule as far as
it is feasible.

Table ``scale``: for DGX A100 clusters of 1 to 8,192 boxes (8 to 65,536 gpus) and a few of today's
fabrics at 16,384 to 65,536 gpus, the time to build the topology, the time for the exact bound
(:func:`synth.bounds.optimal_bound`: the optimum of allgather and reduce-scatter, the fewest trees per
root, the bottleneck cut), the full optimal allgather schedule (``forest``) where it fits the limits,
in the form it is built in (``transfers``: every transfer; ``trees``: the compact trees form of
:mod:`synth.trees`, built by ``forest_trees``), the transfers it has (or expands to), the size of its
file, and the peak resident memory of the whole run. Every row runs in a fresh process (so caches start
empty and the peak RSS is the row's own); every schedule is verified (the trees form by
:func:`synth.verify_trees.verify_trees`, on the trees) and its congestion time checked to equal the
bound, outside the timed region.

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
#: Largest gpu count whose schedule is built as transfers (4,096 gpus would make 16.8M of them, about 11 GB).
SCHEDULE_MAX_GPUS = 2048
#: Smallest gpu count whose schedule is also built in the trees form (beside its transfers, to compare).
TREES_MIN_GPUS = 1024
#: Largest gpu count whose schedule is built in the trees form (16.8M tree arcs at 4,096 gpus, under the
#: default ``max_tree_arcs`` limit of 20M; 8,192 gpus would have 67M).
TREES_MAX_GPUS = 4096


def measure(spec: str, form: str | None) -> dict:
    """Build ``spec``, bound it, and (when ``form`` is ``"transfers"`` or ``"trees"``) synthesize, verify
    and check the optimal allgather in that form; runs in the current process."""
    import resource
    from fractions import Fraction

    from synth.algorithms.forest import forest, forest_trees
    from synth.bounds import optimal_bound
    from synth.collectives import Kind
    from synth.evaluate import congestion
    from synth.library import load_topology
    from synth.verify import verify
    from synth.verify_trees import verify_trees

    row: dict = {"spec": spec}
    wall, cpu = time.perf_counter(), time.process_time()
    topo = load_topology(spec)
    row.update(gpus=topo.num_ranks, nodes=topo.graph.number_of_nodes(), build_s=time.perf_counter() - wall)
    wall, cpu = time.perf_counter(), time.process_time()
    bound = optimal_bound(topo)
    row.update(bound_s=time.perf_counter() - wall, bound_cpu_s=time.process_time() - cpu, flows=bound.flows,
               algbw=bound.algbw_GBps, cut_gpus=len(bound.cut_gpus), trees=bound.trees_per_root)
    optimum = Fraction(1, topo.num_ranks) / (bound.rate_GBps * 10**9)
    if form == "transfers":
        wall, cpu = time.perf_counter(), time.process_time()
        result = forest(topo, Kind.ALLGATHER)
        row.update(schedule_s=time.perf_counter() - wall, schedule_cpu_s=time.process_time() - cpu,
                   transfers=len(result.transfers))
        wall = time.perf_counter()
        verify(result, topo)
        assert congestion(result, topo).seconds_per_byte == optimum, "the schedule misses the bound"
        row.update(verified=True, verify_s=time.perf_counter() - wall, file_mib=len(result.to_json()) / 2**20)
    elif form == "trees":
        wall, cpu = time.perf_counter(), time.process_time()
        trees = forest_trees(topo, Kind.ALLGATHER)
        row.update(schedule_s=time.perf_counter() - wall, schedule_cpu_s=time.process_time() - cpu,
                   transfers=trees.num_transfers())
        wall = time.perf_counter()
        verify_trees(trees, topo)
        assert congestion(trees, topo).seconds_per_byte == optimum, "the schedule misses the bound"
        row.update(verified=True, verify_s=time.perf_counter() - wall, file_mib=len(trees.to_json()) / 2**20)
    row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def measure_in_child(spec: str, form: str | None) -> dict:
    """:func:`measure` in a fresh interpreter (its own caches and peak RSS)."""
    env = dict(os.environ, SYNTH_MAX_TRANSFERS=TRANSFER_LIMIT, PYTHONPATH=str(ROOT))
    code = ("import json, sys; from bench.bench_scale import measure; "
            "print(json.dumps(measure(sys.argv[1], sys.argv[2] or None)))")
    done = subprocess.run([sys.executable, "-c", code, spec, form or ""], capture_output=True, text=True,
                          env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{spec}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cases(quick: bool) -> list[tuple[str, str | None]]:
    """(topology, schedule form or None) per row."""
    boxes = [1, 8, 64] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    rows: list[tuple[str, str | None]] = []
    for count in boxes:
        spec, gpus = f"dgx-a100:boxes={count}", 8 * count
        if gpus <= (64 if quick else SCHEDULE_MAX_GPUS):
            rows.append((spec, "transfers"))
        if (64 if quick else TREES_MIN_GPUS) <= gpus <= (64 if quick else TREES_MAX_GPUS):
            rows.append((spec, "trees"))
        if gpus > (64 if quick else TREES_MAX_GPUS):
            rows.append((spec, None))
    if not quick:
        rows += [(spec, None) for spec in ("dgx-superpod:sus=64", "dgx-superpod:sus=256", "tpu-v5p:dims=16x16x24",
                                           "dragonfly:p=8,a=16,h=8", "gb200-nvl72:racks=228")]
    return rows


def run(quick: bool) -> list[Table]:
    """The scale table (see the module docstring)."""
    table = Table("scale", "Exact allgather bound and full optimal schedule against cluster size",
                  ["topology", "gpus", "nodes", "build s", "bound s", "bound cpu s", "max-flows", "algbw GB/s",
                   "form", "schedule s", "schedule cpu s", "transfers", "file MiB", "peak RSS MiB"])
    for spec, form in cases(quick):
        row = measure_in_child(spec, form)
        table.add(spec, row["gpus"], row["nodes"], round(row["build_s"], 2), round(row["bound_s"], 2),
                  round(row["bound_cpu_s"], 2), row["flows"], round(row["algbw"], 2), form,
                  round(row["schedule_s"], 2) if form else None,
                  round(row["schedule_cpu_s"], 2) if form else None,
                  row.get("transfers"), round(row["file_mib"], 1) if form else None, round(row["peak_rss_mib"]))
    table.notes = (
        "Each row in a fresh process. bound = synth.bounds.optimal_bound (exact allgather and reduce-scatter "
        "optima as Fractions, the fewest trees per root, the bottleneck cut) on quotient networks: one gpu per "
        "orbit of verified automorphisms, each tested on its equitable-partition quotient (a few dozen nodes). "
        "schedule = forest allgather from scratch (bound, splitting, packing, then the transfers or the trees "
        "form), verified and checked to meet the bound exactly outside the timed region; as transfers up to "
        f"{SCHEDULE_MAX_GPUS:,} gpus, in the trees form (synth.trees: the trees and their chunks, transfers "
        f"counted, not built) from {TREES_MIN_GPUS:,} to {TREES_MAX_GPUS:,} gpus; 8,192 gpus would have 67M "
        "tree arcs, over the max_tree_arcs limit of 20M. SYNTH_MAX_TRANSFERS is raised to "
        f"{int(TRANSFER_LIMIT):,} for the 2,048-gpu schedule (4,192,256 transfers). file MiB = the schedule "
        "file's JSON. cpu s = process CPU time (independent of other load on the machine); peak RSS = the row's "
        "whole process.")
    return [table]


if __name__ == "__main__":
    from bench.__main__ import main

    sys.exit(main(["--only", "scale", *sys.argv[1:]]))
