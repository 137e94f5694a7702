"""Benchmark of ``forest``: the exact bound and the full optimal allgather schedule, by topology size.

Columns: the topology, its gpus, k (trees per root) and the number of trees, the time for the exact
bound (parametric max-flow search plus the choice of k), the time for the full optimal schedule from
scratch (bound, edge splitting, packing, transfers), its peak traced memory, and ForestColl's time for the
same recipe (its public pure-Python networkx code, optimal trees with switches removed) with synth's speedup
over it. With ``SYNTH_FORESTCOLL`` naming a checkout of https://github.com/liangyuRain/ForestColl (and
networkx importable), ForestColl runs in this benchmark, in a child process on one core, on the same
topology (converted link for link) and its rate is checked against synth's; the column says ``measured``.
Without it the column holds the published one-core times where there are some (17.7 s on 2 x DGX A100,
64.8 s on 2 x MI250) and says ``published``. Every schedule is verified and its congestion time checked
against the bound, outside the timed region. Run ``python -m bench --only forest`` or
``python bench/bench_forest.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import TypeVar

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table, peak_memory, timed  # noqa: E402
from synth.algorithms.forest import forest  # noqa: E402
from synth.collectives import Kind  # noqa: E402
from synth.cuts.allgather import cut_bound, lcd_trees, optimal_tree_counts  # noqa: E402
from synth.cuts.network import Network  # noqa: E402
from synth.evaluate import congestion  # noqa: E402
from synth.library import load_topology  # noqa: E402
from synth.topology import Topology  # noqa: E402
from synth.verify import verify  # noqa: E402

T = TypeVar("T")
GIGA = 10**9
PUBLISHED_SECONDS = {"dgx-a100:boxes=2": 17.7, "mi250:boxes=2": 64.8}
#: The environment variable naming a ForestColl checkout to run side by side.
FORESTCOLL_ENV = "SYNTH_FORESTCOLL"
#: Longest a ForestColl run may take (seconds) before it is recorded as not finished.
FORESTCOLL_TIMEOUT_S = 600

# Runs in the child process: reads {"checkout", "core", "gpus", "links"} from stdin and prints
# {"seconds", "algbw"} for ForestColl's optimal_pipeline_spanning_trees on that graph.
_FORESTCOLL_CHILD = """
import json, os, sys, time
job = json.load(sys.stdin)
os.sched_setaffinity(0, {job["core"]})
sys.path.insert(0, job["checkout"])
import networkx as nx
from pipeline_allgather import optimal_pipeline_spanning_trees
graph = nx.DiGraph()
for tail, head, bandwidth in job["links"]:
    graph.add_edge(tail, head, capacity=bandwidth)
started = time.perf_counter()
(runtime, k), _ = optimal_pipeline_spanning_trees(graph, compute_nodes=job["gpus"])
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "algbw": len(job["gpus"]) * k / runtime}))
"""


def forestcoll_seconds(topo: Topology, checkout: str) -> tuple[float, float] | None:
    """ForestColl's time (seconds) and allgather algbw (GB/s) for ``topo``, run from ``checkout`` in a child
    process pinned to one core; None when it does not finish within :data:`FORESTCOLL_TIMEOUT_S`."""
    cores = sorted(os.sched_getaffinity(0))
    job = {"checkout": checkout, "core": cores[-1], "gpus": list(topo.gpus),
           "links": [[u, v, bandwidth] for u, v, bandwidth in topo.graph.edges(data="bandwidth")]}
    try:
        done = subprocess.run([sys.executable, "-c", _FORESTCOLL_CHILD], input=json.dumps(job), capture_output=True,
                              text=True, timeout=FORESTCOLL_TIMEOUT_S, check=True)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as failure:
        raise RuntimeError(f"ForestColl failed on {topo.name}: {failure.stderr[-2000:]}") from failure
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["seconds"]), float(result["algbw"])


def on_one_core(function: Callable[[], T]) -> Callable[[], T]:
    """``function`` run with this process on one core (the last allowed, as ForestColl's child), the
    affinity restored after."""
    def call() -> T:
        cores = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {max(cores)})
        try:
            return function()
        finally:
            os.sched_setaffinity(0, cores)
    return call


def rail_spine(boxes: int = 128, rails: int = 8) -> Topology:
    """``boxes`` DGX A100 boxes (8 gpus on an NVSwitch at 300 GB/s, a 25 GB/s NIC per gpu), NIC i of
    every box on rail switch i, every rail on one spine at full bisection (boxes * 8 / rails * 25 GB/s)."""
    gpus: list[str] = []
    switches: list[str] = []
    links: list[tuple[str, str, float]] = []
    for box in range(boxes):
        nvs = f"b{box}.nvs"
        switches.append(nvs)
        for i in range(8):
            gpu, nic = f"b{box}.gpu{i}", f"b{box}.nic{i}"
            gpus.append(gpu)
            switches.append(nic)
            links += [(gpu, nvs, 300.0), (gpu, nic, 25.0), (nic, f"rail{i % rails}", 25.0)]
    switches += [f"rail{r}" for r in range(rails)] + ["spine"]
    links += [(f"rail{r}", "spine", boxes * 8 / rails * 25.0) for r in range(rails)]
    return Topology.build(f"dgx-a100-{boxes}box-rail-spine", gpus, switches, links,
                          boxes=[r // 8 for r in range(len(gpus))],
                          description=f"{boxes} DGX A100 boxes, {rails} rail switches and a spine")


def bound_only(topo: Topology) -> tuple[int, Fraction]:
    """The exact allgather rate and the fewest trees per root that reach it."""
    net = Network.from_topology(topo)
    weights = [1] * topo.num_ranks
    optimum = cut_bound(net, weights)
    trees = next(optimal_tree_counts(net, weights, optimum, lcd_trees(net, optimum.rate)))[0]
    return trees, optimum.rate


#: Past this many gpus ForestColl is not run: its pure-Python run would take the benchmark past its
#: time budget (each run is cut off at :data:`FORESTCOLL_TIMEOUT_S` anyway).
FORESTCOLL_MAX_GPUS = 127


def full_schedule(topo: Topology):
    topo.memo.clear()  # everything from scratch: routes, the bound, the plan
    return forest(topo, Kind.ALLGATHER)


def run(quick: bool) -> list[Table]:
    """Measure the bound and the full schedule on the named systems and growing DGX A100 clusters."""
    cases: list[tuple[str, Topology | str, bool]] = [
        ("dgx-a100:boxes=1", "dgx-a100:boxes=1", True),
        ("dgx-a100:boxes=2", "dgx-a100:boxes=2", True),
        ("mi250:boxes=1", "mi250:boxes=1", True),
        ("mi250:boxes=2", "mi250:boxes=2", True),
        ("ndv2:boxes=2", "ndv2:boxes=2", True),
        ("mi300x:boxes=2", "mi300x:boxes=2", True),
    ]
    if not quick:
        cases += [
            ("dgx-a100:boxes=4", "dgx-a100:boxes=4", True),
            ("tpu-v4", "tpu-v4", True),
            ("dgx-a100:boxes=16", "dgx-a100:boxes=16", True),
            ("dgx-a100:boxes=64", "dgx-a100:boxes=64", True),
            ("dgx-a100:boxes=128", "dgx-a100:boxes=128", False),
            ("128 DGX A100, 8 rails + spine", rail_spine(128, 8), True),
            ("gb200-nvl72", "gb200-nvl72", True),
            ("gb200-nvl72:racks=2", "gb200-nvl72:racks=2", True),
            ("mi300x:boxes=16", "mi300x:boxes=16", True),
            ("dgx-superpod:sus=1", "dgx-superpod:sus=1", True),
            ("dgx-superpod (4 SUs)", "dgx-superpod", False),
            ("tpu-v5p:dims=4x4x8", "tpu-v5p:dims=4x4x8", True),
            ("dragonfly", "dragonfly", True),
            ("dragonfly:p=4,a=8,h=4", "dragonfly:p=4,a=8,h=4", False),
        ]
    checkout = os.environ.get(FORESTCOLL_ENV)
    result = Table("forest", "forest: exact allgather bound and full optimal schedule",
                   ["topology", "gpus", "k", "trees", "algbw GB/s", "bound s", "schedule s", "peak MiB",
                    "ForestColl s", "ForestColl", "speedup"])
    skipped_schedules = []
    for label, spec, with_schedule in cases:
        topo = load_topology(spec) if isinstance(spec, str) else spec
        bound_seconds, (trees, rate) = timed(lambda topo=topo: bound_only(topo))
        algbw = float(topo.num_ranks * rate)
        schedule_seconds = peak = speedup = None
        theirs, source = PUBLISHED_SECONDS.get(label), "published" if label in PUBLISHED_SECONDS else None
        if with_schedule:
            schedule_seconds, schedule = timed(on_one_core(lambda topo=topo: full_schedule(topo)))
            verify(schedule, topo)
            assert congestion(schedule, topo).seconds_per_byte == 1 / (topo.num_ranks * rate * GIGA)
            peak = round(peak_memory(lambda topo=topo: full_schedule(topo)), 2)
            schedule_seconds = round(schedule_seconds, 3)
            if checkout and topo.num_ranks <= FORESTCOLL_MAX_GPUS:
                measured = forestcoll_seconds(topo, checkout)
                theirs, source = (None, "over 10 min") if measured is None else (round(measured[0], 3), "measured")
                if measured is not None and abs(measured[1] - algbw) > 1e-6 * algbw:
                    raise AssertionError(f"ForestColl's algbw on {label} is {measured[1]} GB/s, synth's {algbw}")
            if theirs is not None:
                speedup = round(theirs / max(schedule_seconds, 1e-3), 1)
        else:
            skipped_schedules.append(label)
        result.add(label, topo.num_ranks, trees, topo.num_ranks * trees, round(algbw, 2), round(bound_seconds, 3),
                   schedule_seconds, peak, theirs, source, speedup)
    result.notes = ("bound = parametric max-flow search for the exact optimum plus the fewest trees per root; "
                    "schedule = everything from scratch (bound, edge splitting, packing, transfers), verified and "
                    "checked to meet the bound exactly outside the timed region, on one core; ForestColl = its public "
                    "pure-Python networkx implementation of the same recipe (optimal trees, switches removed), one "
                    "core: measured in this run from a checkout (SYNTH_FORESTCOLL, its rate checked equal to "
                    "synth's) or the published figure; speedup = ForestColl s / schedule s.")
    result.notes += (" From 64 gpus on, symmetry is exploited: the bound tests one gpu per orbit of verified "
                     "automorphisms on its quotient network, and the schedule packs one root per orbit of a group "
                     "of box translations or rank rotations that copies its trees.")
    if skipped_schedules:
        result.notes += " Bound only (the dgx-a100 schedules of 1,024 and 2,048 gpus are in the scale table): " + ", ".join(skipped_schedules) + "."
    return [result]


if __name__ == "__main__":
    from bench.__main__ import main

    sys.exit(main(["--only", "forest", *sys.argv[1:]]))
