"""The selection layer's cost: forest's size choice at 1 GiB on the shipped systems, and a compare.

Table ``choose_forest``: for every shipped system of at most 64 gpus (``topologies/*.json``) and allgather,
reduce-scatter and allreduce, the wall time of ``synth.synthesize(topology, kind, "forest", size=1GiB)``
(the whole size choice: every candidate built and simulated), the variant chosen, how many candidates
were simulated, and the chosen schedule's modelled time as a percentage of the topology's bound. Every
chosen schedule is verified outside the timed region.

Table ``choose_compare``: ``run_all`` (the engine of ``synth compare``) of every algorithm but the slow
solvers on 2 x DGX A100 at 1 MiB, 64 MiB and 1 GiB, timed whole.

``python -m bench --only choose``; ``--quick`` keeps three small systems and leaves out the compare.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table, timed  # noqa: E402
from synth import load_topology  # noqa: E402
from synth.choose import synthesize  # noqa: E402
from synth.collectives import Kind  # noqa: E402
from synth.compare import lower_bound, run_all  # noqa: E402
from synth.verify import verify  # noqa: E402

SIZE = 2**30
KINDS = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE)
QUICK_SYSTEMS = ("dgx1", "dgx-a100", "dgx-h100")
ROOT = Path(__file__).resolve().parent.parent


def shipped_systems(most_gpus: int = 64) -> list[str]:
    """The shipped topology files' names with at most ``most_gpus`` gpus, smallest first."""
    found = []
    for path in sorted((ROOT / "topologies").glob("*.json")):
        topology = load_topology(str(path))
        if topology.num_ranks <= most_gpus:
            found.append((topology.num_ranks, path.stem))
    return [name for _, name in sorted(found)]


def run(quick: bool) -> list[Table]:
    """The two tables of the module docstring."""
    table = Table("choose_forest", "forest's size choice at 1 GiB, per shipped system (at most 64 gpus)",
                  ["system", "gpus", "collective", "choice s", "variant", "slices", "candidates", "% of bound"])
    for name in QUICK_SYSTEMS if quick else shipped_systems():
        topology = load_topology(name)
        bounds = {kind: lower_bound(topology, kind) for kind in KINDS}
        for kind in KINDS:
            seconds, schedule = timed(lambda t=topology, k=kind: synthesize(t, k, "forest", size=SIZE))
            verify(schedule, topology)
            choice = schedule.params["size_choice"]
            bound = bounds[kind]
            percent = None if bound is None else 100 * bound.time(SIZE) / schedule.params["modelled_time_s"]
            slices = choice["chosen_slice_bytes"]
            table.add(name, topology.num_ranks, kind.value, seconds, schedule.params["variant"],
                      "rule" if slices is None else f"{slices // 1024} KiB", len(choice["time_s"]), percent)
    table.notes = ("One run each on one core, the whole choice (building and simulating every candidate) "
                   "timed; synth.synthesize(topology, kind, 'forest', size=1GiB).")
    tables = [table]
    if not quick:
        compare = Table("choose_compare", "synth compare's engine on 2 x DGX A100 at 1 MiB, 64 MiB, 1 GiB",
                        ["topology", "collectives", "sizes", "rows", "skipped", "wall s"])
        topology = load_topology("dgx-a100:boxes=2")
        kinds = [Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.ALLTOALL, Kind.BROADCAST, Kind.REDUCE]
        sizes = [2**20, 2**26, 2**30]
        seconds, (rows, skipped, _) = timed(lambda: run_all(topology, kinds, sizes, include_slow=False,
                                                            keep_going=True))
        compare.add("dgx-a100:boxes=2", len(kinds), "1MiB, 64MiB, 1GiB", len(rows), len(skipped), seconds)
        compare.notes = "run_all(..., include_slow=False, keep_going=True): every algorithm but milp, verified."
        tables.append(compare)
    return tables


if __name__ == "__main__":
    for result in run("--quick" in sys.argv):
        print(result.title)
        for row in result.rows:
            print(row)
