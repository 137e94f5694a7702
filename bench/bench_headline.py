"""The README's headline table: the tuned allreduce against ``nccl`` (what NCCL runs: its current release,
:data:`synth.algorithms.nccl.DEFAULT_VERSION`, with NVLS and NVLS-Tree where the fabric has NVLink SHARP) per size.

For each system (2 x DGX A100, 2 x DGX H100, 2 x MI250, 2 x NDv2 and a 4x4 TPU v4 slice) and each size,
:func:`synth.tune.tune` tries every registered algorithm but the slow solver (``milp``), the size-sensitive
ones (``nccl``, ``tree``, ``forest``) made for that size, and ranks them by the flow model's time. The
columns: the tuned choice (``forest(k=1)``: forest with one tree per root), its time, nccl's time at the
same size under the same evaluator (its protocol pinned as NCCL's tuning model chooses it), the margin
(nccl's time over the tuned time; nccl is a candidate, so the margin is never below 1.00) and the % of
the topology's lower bound on time. Every schedule is verified. Run ``python -m bench --only headline``
(writes ``bench/results/headline.json``) or ``python bench/bench_headline.py``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table  # noqa: E402
from synth.algorithms.nccl import DEFAULT_VERSION, RELEASES  # noqa: E402
from synth.collectives import Kind  # noqa: E402
from synth.library import load_topology  # noqa: E402
from synth.tune import tune  # noqa: E402

SYSTEMS = ["dgx-a100:boxes=2", "dgx-h100:boxes=2", "mi250:boxes=2", "ndv2:boxes=2", "tpu-v4:dims=2x2x4"]
#: 64 MiB and 1 GiB are left out by default to keep ``make bench`` within its budget on 2 cores: forest's
#: per-size choice (several tree counts simulated per size) on the 32-gpu MI250 alone ran over 12 minutes
#: at 64 MiB on the loaded 2-core machine; ask for them with ``SYNTH_HEADLINE_LARGE=1``.
SIZES = [2**10, 2**16, 2**20]
LARGE_SIZES = [2**26, 2**30]
QUICK_SIZES = [2**10, 2**20]


def run(quick: bool) -> list[Table]:
    """One table: per system and size, the tuned allreduce, nccl's time and the margin."""
    sizes = QUICK_SIZES if quick else SIZES + (LARGE_SIZES if os.environ.get("SYNTH_HEADLINE_LARGE") else [])
    table = Table("headline", f"Tuned allreduce vs nccl (NCCL {RELEASES[DEFAULT_VERSION]}'s choice), flow model",
                  ["system", "gpus", "size B", "tuned choice", "tuned us", "nccl us", "margin x", "% of bound"])
    seconds = []
    for spec in SYSTEMS:
        topology = load_topology(spec)
        started = time.perf_counter()
        result = tune(topology, Kind.ALLREDUCE, sizes, include_slow=False)
        seconds.append(f"{spec} {time.perf_counter() - started:.0f} s")
        for row in result.per_size:
            assert row.baseline == "nccl" and row.baseline_time_s is not None
            table.add(spec, topology.num_ranks, row.size, row.winner_name, row.time_s * 1e6,
                      row.baseline_time_s * 1e6, row.speedup_vs_baseline, row.percent_of_bound)
    table.notes = ("margin: nccl's time over the tuned choice's at the same size (nccl is one of the candidates, "
                   "so never below 1); % of bound: the lower bound on time (for the fabric as described: "
                   "links, and in-switch reduction where the topology declares it) over the tuned time. "
                   f"Tuning time per system (all candidates, all sizes): {', '.join(seconds)}.")
    return [table]


if __name__ == "__main__":
    from bench.__main__ import main

    sys.exit(main(["--only", "headline"]))
