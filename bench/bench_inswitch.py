"""What switches that reduce and multicast are worth: the best schedule with and without in-switch operations.

Table ``inswitch``: for each library system whose switches reduce and multicast (DGX H100, H200, B200,
GB200 NVL72, and two DGX H100 boxes) and allgather, reduce-scatter and allreduce at 1 MiB, 64 MiB and
1 GiB: the fastest schedule that moves data gpu to gpu only (every registered algorithm but the slow
solvers whose schedules have no switch ops) and the fastest that uses switch ops, each with its
algorithm and modelled algbw (the flow model under the plan rule, the time ``synth evaluate`` prints), the
``nccl`` row (what NCCL would run, its version named), and the lower bound for the fabric as described
(in-switch for allreduce). Every schedule is verified (``run_all`` does it).

``python -m bench --only inswitch``; ``--quick`` keeps DGX H100 alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Table  # noqa: E402
from synth import load_topology  # noqa: E402
from synth.collectives import Kind  # noqa: E402
from synth.compare import lower_bound, run_all  # noqa: E402

SIZES = (2**20, 2**26, 2**30)
KINDS = (Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE)
SYSTEMS = ("dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72", "dgx-h100:boxes=2")
#: Point-to-point algorithms whose size choice is too slow for a table of this breadth on NVL72.
SKIP_ON_LARGE = ("forest",)


def _size(size: int) -> str:
    return f"{size // 2**30} GiB" if size >= 2**30 else f"{size // 2**20} MiB"


def run(quick: bool) -> list[Table]:
    """The table of the module docstring."""
    table = Table("inswitch", "best schedule without and with in-switch operations (flow model algbw, GB/s)",
                  ["system", "collective", "size", "without", "algbw", "with", "algbw ", "gain", "nccl", "nccl algbw",
                   "bound"])
    for name in SYSTEMS[:1] if quick else SYSTEMS:
        topology = load_topology(name)
        from synth.algorithms import available

        names = [a.name for a in available() if not a.slow
                 and not (topology.num_ranks > 64 and a.name in SKIP_ON_LARGE)]
        rows, _, schedules = run_all(topology, KINDS, SIZES, algorithms=names, include_slow=False, keep_going=True)
        for kind in KINDS:
            bound = lower_bound(topology, kind)
            for size in SIZES:
                here = [r for r in rows if r.collective == kind.value and r.size == size]
                plain = [r for r in here if not schedules[(r.algorithm, kind, size)].switch_ops]
                switched = [r for r in here if schedules[(r.algorithm, kind, size)].switch_ops]
                best_plain = min(plain, key=lambda r: r.time_s, default=None)
                best_switch = min(switched, key=lambda r: r.time_s, default=None)
                nccl = next((r for r in here if r.algorithm == "nccl"), None)
                version = None
                if nccl is not None:
                    choice = schedules[("nccl", kind, size)].params.get("choice", {})
                    version = f"{choice.get('version', '2.16')} {choice.get('algorithm', '')}".strip()
                gain = (None if best_plain is None or best_switch is None
                        else best_plain.time_s / best_switch.time_s)
                table.add(name, kind.value, _size(size),
                          None if best_plain is None else best_plain.algorithm,
                          None if best_plain is None else best_plain.algbw_GBps,
                          None if best_switch is None else best_switch.algorithm,
                          None if best_switch is None else best_switch.algbw_GBps,
                          gain, version, None if nccl is None else nccl.algbw_GBps,
                          None if bound is None else size / bound.time(size) / 1e9)
    table.notes = ("run_all of every registered algorithm but the slow solvers (forest left out on systems of more "
                   "than 64 gpus), verified, evaluated with the flow model and the plan rule; 'gain' is the time "
                   "without in-switch operations over the time with; 'bound' is the algbw of the lower bound for "
                   "the fabric as described (in-switch for allreduce).")
    return [table]


if __name__ == "__main__":
    for result in run("--quick" in sys.argv):
        print(result)
