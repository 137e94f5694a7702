"""Benchmark of ``mcf`` (optimal alltoall by LP) and ``milp`` (latency-aware time-indexed schedules).

Tables
------
``mcf_alltoall``
    Every shipped system (and multi-box variants up to 64 gpus): the alltoall LP optimum beside the
    best cut bound, the algbw the rounded chunk schedule reaches (congestion only, exact), the rounding
    loss, the chunk count, and the solve times. The published MILP reached the 2 x NDv2 optimum
    (3.125 GB/s) in about 20 minutes.
``milp_small``
    Simulated time (flow model) of ``milp`` against ``ring`` and ``forest`` at 1 KB, 64 KB and 1 MB on
    DGX-1 and 2 x NDv2, with the speed-up, the proven gap of the epoch model and what produced each
    result (``optimal`` by the bound or by CP-SAT, ``improved`` by CP-SAT, or the ``greedy`` plan), the
    model CP-SAT solved and its variable count.
``milp_ndv2_1gb``
    2 x NDv2 allgather of 1 GB (10^9 bytes): algbw and synthesis time beside the published figures
    (TACCL 18.6 GB/s in 7 s, TE-CCL 22.86 GB/s in 43 s, both with Gurobi) and the 25.0 GB/s bound, with
    what produced each result.
``milp_cpsat``
    Where CP-SAT does the work: DGX-1 and 2 x NDv2 cases run with ``cpsat="always"`` and the default budget,
    the greedy plan's epochs and simulated time beside the result's, and what produced it.

Every schedule is verified outside the timed region. Run ``python -m bench --only milp``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table, over_budget, timed  # noqa: E402
from synth.algorithms import REGISTRY, synthesize  # noqa: E402
from synth.algorithms.mcf import mcf  # noqa: E402
from synth.choose.milp import choose as milp  # noqa: E402
from synth.collectives import Kind  # noqa: E402
from synth.cuts.alltoall import alltoall_cut_bound, solve_alltoall_lp  # noqa: E402
from synth.evaluate import GIGA, congestion, evaluate  # noqa: E402
from synth.library import load_topology  # noqa: E402
from synth.verify import verify  # noqa: E402

QUICK_MCF = ["dgx1", "ndv2:boxes=2", "dgx-a100:boxes=2", "mi250"]
FULL_MCF = ["dgx1", "ndv2:boxes=2", "dgx2", "dgx-a100", "dgx-a100:boxes=2", "dgx-a100:boxes=4", "dgx-h100",
            "dgx-h100:boxes=2", "mi250", "mi250:boxes=2", "bigraph", "ndv2:boxes=8", "dgx-a100:boxes=8",
            "mi250:boxes=4", "tpu-v4"]
SIZES = {"1 KB": 1024, "64 KB": 65536, "1 MB": 1 << 20}
MILP_LIMIT_S = 5.0
#: The budget of the CP-SAT table: milp's default (the goal: CP-SAT improves on or proves the greedy plan
#: within 60 s of wall time).
CPSAT_LIMIT_S = 10.0
#: A TACCL-style sketch for 2 x NDv2: gpu i talks to gpu i of the other box, NVLink only inside a box.
NDV2_SKETCH = {"name": "ndv2-same-index", "relays": list(range(8)), "pairing": "same-index", "intra_box": "direct"}
#: The same with TACCL's rotational symmetry: box 1 does what box 0 does.
NDV2_SYMMETRIC = {**NDV2_SKETCH, "name": "ndv2-same-index-symmetric", "symmetry": "rotate-boxes"}


def produced(params: dict) -> str:
    """What produced a milp result, in a few words: ``optimal (bound)``, ``optimal (cp-sat)``,
    ``improved``, ``greedy``."""
    return f"{params['result']} ({params['proved_by']})" if params.get("proved_by") else params["result"]


def mcf_table(quick: bool) -> Table:
    table = Table("mcf_alltoall", "mcf: optimal alltoall (max concurrent flow LP, GLOP) vs the cut bound",
                  ["topology", "gpus", "LP algbw GB/s", "cut bound GB/s", "cut above LP %", "schedule algbw GB/s",
                   "rounding loss %", "chunks", "LP s", "mcf s"],
                  notes="LP = the bandwidth-optimal alltoall (gpus may relay). The cut bound is exact over every "
                        "gpu subset up to 12 gpus, otherwise over candidate sets (singletons, boxes, unions of "
                        "boxes, dimension slices, halves, LP-saturated cuts). Schedule algbw is exact from the "
                        "congestion of the verified chunk schedule.")
    for spec in QUICK_MCF if quick else FULL_MCF:
        topology = load_topology(spec)
        lp_seconds, flow = timed(lambda t=topology: solve_alltoall_lp(t))
        cut = alltoall_cut_bound(topology, flow)
        seconds, schedule = timed(lambda t=topology: mcf(t, Kind.ALLTOALL))
        verify(schedule, topology)
        reached = float(1 / (congestion(schedule, topology).seconds_per_byte * GIGA))
        above = float(cut.algbw_GBps) / flow.algbw_GBps - 1
        table.add(spec, topology.num_ranks, flow.algbw_GBps, float(cut.algbw_GBps),
                  100 * above if above > 1e-9 else 0.0, reached,
                  100 * schedule.params["rounding_loss"], schedule.chunks, lp_seconds, seconds)
        if over_budget(seconds, quick):
            break
    return table


def small_table(quick: bool) -> Table:
    has_forest = "forest" in REGISTRY
    table = Table("milp_small", "milp vs ring and forest at small sizes (flow model, every schedule verified)",
                  ["topology", "collective", "size", "milp us", "ring us", "forest us", "x ring", "x forest",
                   "epochs", "bound epochs", "gap %", "result", "model variables", "synth s"],
                  notes=f"milp with time_limit_s={MILP_LIMIT_S:g} (CP-SAT deterministic seconds), default sketch. "
                        "x ring / x forest = their time over milp's (above 1: milp is faster). gap = proven gap "
                        "of the epoch model (0: optimal in epochs). result: what produced the schedule "
                        "(optimal by the combinatorial bound or by CP-SAT, improved by CP-SAT, or the greedy "
                        "plan); model variables: of the model CP-SAT solved, or would have.")
    specs = ["dgx1"] if quick else ["dgx1", "ndv2:boxes=2"]
    kinds = [Kind.ALLGATHER] if quick else [Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE]
    sizes = {"1 KB": 1024, "64 KB": 65536} if quick else SIZES
    for spec in specs:
        topology = load_topology(spec)
        ring_schedules = {kind: synthesize(topology, kind, "ring") for kind in kinds}
        forest_schedules = {kind: synthesize(topology, kind, "forest") for kind in kinds} if has_forest else {}
        for kind in kinds:
            for label, size in sizes.items():
                seconds, schedule = timed(lambda t=topology, k=kind, s=size: milp(
                    t, k, size=s, time_limit_s=MILP_LIMIT_S, progress=None))
                verify(schedule, topology)
                ours = evaluate(schedule, topology, size).time_s
                ring = evaluate(ring_schedules[kind], topology, size).time_s
                forest = evaluate(forest_schedules[kind], topology, size).time_s if has_forest else None
                params = schedule.params
                table.add(spec, kind.value, label, ours * 1e6, ring * 1e6, forest * 1e6 if forest else None,
                          ring / ours, forest / ours if forest else None, params["epochs"],
                          params["lower_bound_epochs"], 100 * params["gap"], produced(params), params["variables"],
                          seconds)
    return table


def ndv2_table(quick: bool) -> Table:
    size = 10**9
    table = Table("milp_ndv2_1gb", "2 x NDv2 allgather of 1 GB: milp beside the published MILP synthesizers",
                  ["synthesizer", "chunks", "sketch", "algbw GB/s", "% of bound", "synth s", "epochs",
                   "bound epochs", "result"],
                  notes="Published (Gurobi, same capacity model): TACCL 18.6 GB/s in 7 s, TE-CCL 22.86 GB/s in 43 s; "
                        "bound 25.0 GB/s (8 gpus behind one 12.5 GB/s NIC). Ours: flow-model simulation of the "
                        "verified schedule; synthesis wall time on this machine. result: what produced it (see "
                        "milp_small); optimal means no schedule has fewer epochs in milp's epoch model, not that "
                        "the flow-model time is optimal.")
    topology = load_topology("ndv2:boxes=2")
    table.add("TACCL (published)", None, "yes", 18.6, 100 * 18.6 / 25.0, 7.0, None, None, None)
    table.add("TE-CCL (published)", None, "no", 22.86, 100 * 22.86 / 25.0, 43.0, None, None, None)
    runs = [(None, None)] if quick else [(None, None), (32, NDV2_SKETCH), (64, NDV2_SKETCH), (64, NDV2_SYMMETRIC)]
    for chunks, sketch in runs:
        seconds, schedule = timed(lambda c=chunks, s=sketch: milp(
            topology, Kind.ALLGATHER, size=size, chunks=c, sketch=s, time_limit_s=MILP_LIMIT_S, progress=None))
        verify(schedule, topology)
        algbw = evaluate(schedule, topology, size).algbw_GBps
        table.add("milp (this)", schedule.chunks, sketch["name"] if sketch else "none (defaults)", algbw,
                  100 * algbw / 25.0, seconds,
                  schedule.params["epochs"], schedule.params["lower_bound_epochs"], produced(schedule.params))
    return table


def cpsat_table(quick: bool) -> Table:
    table = Table("milp_cpsat", f"milp with CP-SAT always run ({CPSAT_LIMIT_S:g} s budget): what it proves or improves",
                  ["topology", "collective", "size", "sketch", "greedy epochs", "epochs", "bound epochs",
                   "greedy us", "result us", "result", "model", "variables", "synth s"],
                  notes="cpsat=always: CP-SAT runs even when the greedy plan meets the lower bound (it may still "
                        "find plans whose items arrive earlier). us: simulated (flow model) time of one phase's "
                        "plan, the greedy plan's and the result's; the result is the fastest in simulation of the "
                        "greedy plan and every CP-SAT solution. Budget in CP-SAT deterministic seconds; synth s "
                        "is wall time on this machine (2 shared cores).")
    cases = [("dgx1", Kind.ALLTOALL, 1 << 20, None), ("dgx1", Kind.REDUCESCATTER, 65536, None),
             ("ndv2:boxes=2", Kind.ALLGATHER, 65536, NDV2_SYMMETRIC)]
    if not quick:
        cases += [("dgx1", Kind.ALLGATHER, 65536, None), ("ndv2:boxes=2", Kind.ALLGATHER, 10**9, NDV2_SYMMETRIC)]
    for spec, kind, size, sketch in cases:
        topology = load_topology(spec)
        chunks = 64 if size == 10**9 else None
        budget = 2.0 if quick else CPSAT_LIMIT_S
        seconds, schedule = timed(lambda t=topology, k=kind, s=size, c=chunks, sk=sketch, b=budget: milp(
            t, k, size=s, chunks=c, sketch=sk, cpsat="always", time_limit_s=b))
        verify(schedule, topology)
        params = schedule.params
        table.add(spec, kind.value, size, sketch["name"] if sketch else "none", params["greedy_epochs"],
                  params["epochs"], params["lower_bound_epochs"], params.get("greedy_us"), params.get("simulated_us"),
                  produced(params), params["model"], params["variables"], seconds)
    return table


def run(quick: bool) -> list[Table]:
    """The four tables (see the module docstring)."""
    return [mcf_table(quick), small_table(quick), ndv2_table(quick), cpsat_table(quick)]


if __name__ == "__main__":
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console()
    for result in run("--quick" in sys.argv):
        shown = RichTable(title=result.title)
        for column in result.columns:
            shown.add_column(column)
        for row in result.rows:
            shown.add_row(*["-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
        console.print(shown)
        console.print(result.notes)
