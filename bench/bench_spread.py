"""Spread splitting against the default splitting, on the catalog's own forest entries.

For every ``forest`` entry of ``schedules/index.json`` the entry's trees per root and slices are kept
(``size_choice`` and ``params["plan"]`` of the stored file) and the same forest is built twice, with the
default switch splitting and with ``spread=True`` (:func:`synth.algorithms.forest.forest`), then each is
simulated at the catalog's size under the flow model. Columns: the entry, its trees per root and slice,
both times as % of the topology's lower bound, the change in points, and the variant the catalog stores.
Where spread builds the very same transfers (no switch to split, as on DGX-1 or a torus, or one that spread
splits the same way, as a single NIC switch often is) it is not simulated again. Every schedule is verified.

By default the entries whose simulation moves at most :data:`DEFAULT_WORK` slice transfers (transfers x
slices) are measured, to keep ``make bench`` within its budget; ``SYNTH_SPREAD_ALL=1`` measures every
entry (the 4 x DGX A100 allreduce takes minutes). Run ``python -m bench --only spread`` or
``python bench/bench_spread.py``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table  # noqa: E402
from synth.algorithms.forest import forest  # noqa: E402
from synth.compare import lower_bound  # noqa: E402
from synth.evaluate import evaluate  # noqa: E402
from synth.library import load_topology  # noqa: E402
from synth.schedule import Schedule  # noqa: E402
from synth.topology import Topology  # noqa: E402
from synth.verify import verify  # noqa: E402

CATALOG = Path(__file__).resolve().parent.parent / "schedules"
#: Entries up to this many slice transfers are measured by default (the full set with SYNTH_SPREAD_ALL=1).
DEFAULT_WORK = 500_000
#: ``--quick``: only the smallest entries.
QUICK_WORK = 31_000


def forest_entries(limit: int | None) -> list[dict[str, Any]]:
    """The catalog's forest entries, smallest simulation first, at most ``limit`` slice transfers each."""
    index = json.loads((CATALOG / "index.json").read_text())
    entries = [e for e in index["entries"] if e["algorithm"] == "forest" and e["file"]]
    entries = [e for e in entries if limit is None or e["transfers"] * e["plan"]["slices"] <= limit]
    return sorted(entries, key=lambda e: (e["transfers"] * e["plan"]["slices"], e["topology"], e["collective"]))


def _trees_per_root(stored: Schedule) -> int | None:
    """The tree limit the stored schedule was built with (None: the optimal count)."""
    choice = stored.params.get("size_choice") or {}
    chosen = choice.get("chosen_trees_per_root")
    if chosen is None or chosen == choice.get("optimal_trees_per_root"):
        return None
    return int(chosen)


def _percent(schedule: Schedule, topology: Topology, size: int, slice_bytes: int) -> float:
    verify(schedule, topology)
    bound = lower_bound(topology, schedule.kind)
    assert bound is not None
    return 100 * bound.time(size) / evaluate(schedule, topology, size, slice_bytes=slice_bytes).time_s


def run(quick: bool) -> list[Table]:
    """One table: per catalog forest entry, its % of the bound with default and with spread splitting."""
    limit = QUICK_WORK if quick else None if os.environ.get("SYNTH_SPREAD_ALL") else DEFAULT_WORK
    size = json.loads((CATALOG / "index.json").read_text())["size"]
    table = Table("spread", f"forest: default vs spread switch splitting on the catalog's entries ({size:,} B, flow)",
                  ["topology", "collective", "trees per root", "slice KiB", "default %", "spread %", "change pt",
                   "catalog variant", "seconds"])
    same = []
    for entry in forest_entries(limit):
        started = time.perf_counter()
        topology = load_topology(entry["topology"])
        stored = Schedule.from_file(CATALOG / entry["file"])
        limit_k = _trees_per_root(stored)
        slice_bytes = int(entry["plan"]["slice_bytes"])
        builds = [forest(topology, stored.kind, root=stored.collective.root, max_trees_per_root=limit_k, spread=spread)
                  for spread in (False, True)]
        if builds[0].transfers == builds[1].transfers:
            verify(builds[0], topology)
            same.append(f"{entry['topology']} {entry['collective']}")
            continue
        default, spread = (_percent(schedule, topology, size, slice_bytes) for schedule in builds)
        k = builds[0].params.get("tree_trees_per_root", builds[0].params.get("allgather_trees_per_root"))
        table.add(entry["topology"], entry["collective"], k, slice_bytes / 1024, round(default, 2), round(spread, 2),
                  round(spread - default, 2), stored.params.get("variant"), round(time.perf_counter() - started, 1))
    table.notes = ("default / spread: the entry's forest (its trees per root and slices) built with each splitting, "
                   "% of the topology's lower bound on time; change: spread minus default, in points of the bound. "
                   f"Not simulated again, spread builds the same transfers: {', '.join(same) or 'none'}. "
                   + ("Every forest entry." if limit is None else
                      f"Entries up to {limit:,} slice transfers (SYNTH_SPREAD_ALL=1 for every one)."))
    return [table]


if __name__ == "__main__":
    from bench.__main__ import main

    sys.exit(main(["--only", "spread", *sys.argv[1:]]))
