"""Alltoallv on a skewed mixture-of-experts dispatch: ``mcf`` against NCCL's grouped send/receive and the bound.

Table ``alltoallv``: on DGX A100 clusters of 2 and 8 boxes (16 and 64 gpus) and 2 DGX H100 boxes, the demand
of ``synth.demand.moe(N, experts_per_gpu=8, top_k=2, zipf=1.0, seed=0)`` rounded by the default rule
(16 chunks per pair), at 1 GiB in all and 1 GiB per gpu (the size of an alltoallv is the whole demand):
mcf's synthesis time, the time of ``mcf`` and ``nccl`` (direct's schedule) under the flow model with the
plan rule and with 4 slices per chunk, then mcf with its size choice (:mod:`synth.choose.mcf`: the slice
size fastest at that size; its synthesis time includes the choice) against nccl under the plan rule, mcf's
share of the bound (the max concurrent flow LP for the demand) and its speed-up over nccl. Every schedule is
verified.

``python -m bench --only alltoallv``; ``--quick`` keeps the 16-gpu systems.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table  # noqa: E402
from synth import Kind, load_topology, synthesize, verify  # noqa: E402
from synth.bounds import time_bound  # noqa: E402
from synth.choose import synthesize as choose  # noqa: E402
from synth.demand import moe  # noqa: E402
from synth.evaluate import evaluate  # noqa: E402

SYSTEMS = (("dgx-a100:boxes=2", 16), ("dgx-h100:boxes=2", 16), ("dgx-a100:boxes=8", 64))


def run(quick: bool) -> list[Table]:
    """The table of the module docstring."""
    table = Table("alltoallv", "alltoallv, MoE dispatch (zipf 1.0, top-2 of 8 experts per gpu): mcf against nccl",
                  ["system", "chunks", "mcf synthesis s", "size", "slices", "mcf ms", "nccl ms", "bound ms",
                   "mcf % of bound", "speed-up"])
    for spec, n in SYSTEMS[:2] if quick else SYSTEMS:
        topology = load_topology(spec)
        demand = moe(n, experts_per_gpu=8, top_k=2, zipf=1.0, seed=0).to_chunks()
        started = time.perf_counter()
        schedule = synthesize(topology, Kind.ALLTOALLV, "mcf", demand=demand)
        elapsed = time.perf_counter() - started
        verify(schedule, topology)
        bound = time_bound(topology, Kind.ALLTOALLV, demand=demand)
        for size in (1 << 30, n << 30):
            nccl = synthesize(topology, Kind.ALLTOALLV, "nccl", demand=demand, size=size)
            verify(nccl, topology)
            for slices in (None, 4):
                plan = {} if slices is None else {"slices": slices}
                mine = evaluate(schedule, topology, size, **plan).time_s
                theirs = evaluate(nccl, topology, size, **plan).time_s
                table.add(spec, demand.chunks, round(elapsed, 2), f"{size >> 30} GiB", slices or "rule",
                          mine * 1e3, theirs * 1e3, bound.time(size) * 1e3, 100 * bound.time(size) / mine,
                          theirs / mine)
            started = time.perf_counter()
            chosen = choose(topology, Kind.ALLTOALLV, "mcf", demand=demand, size=size)
            choice_s = time.perf_counter() - started
            verify(chosen, topology)
            mine = evaluate(chosen, topology, size).time_s
            theirs = evaluate(nccl, topology, size).time_s
            table.add(spec, demand.chunks, round(choice_s, 2), f"{size >> 30} GiB", f"chosen: {chosen.params['variant']}",
                      mine * 1e3, theirs * 1e3, bound.time(size) * 1e3, 100 * bound.time(size) / mine, theirs / mine)
    table.notes = ("flow model; 'rule' is the plan rule (a chunk of 273 KiB at 1 GiB on 16 gpus is one slice); "
                   "synthesis on 2 shared cores, numba and the LP solver warm after the first system.")
    return [table]


if __name__ == "__main__":
    for result in run("--quick" in sys.argv):
        print(result)
