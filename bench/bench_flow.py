"""The flow simulator's cost against schedule size, its two engines side by side.

Table ``flow_simulator``: schedules of about 10^3 to 10^7 slice transfers (ring allreduce chains, forests
of packed trees on DGX A100 and MI250 systems, up to the 1,024-gpu optimal forest), each simulated under
the plan's rule with the Simple protocol (slices of 512 KiB, 8 in flight) by the reference engine
(numpy, a batch of array operations per event) and by the compiled one (numba, the default): the plan,
the number of slice transfers (transfers x slices per chunk), events (instants at which something
finished), max-min rate updates, the time both engines spend building the path classes in Python (one
pass over the transfers), both wall times, the speed-up and whether the two results are identical (time
to the last digit, events, rate updates, link-sharing work).
"""

from __future__ import annotations

import gc
import time
from functools import partial

from bench import Table, timed
from synth import load_topology, synthesize
from synth.errors import SynthError
from synth.flow import _classes, _transfers, simulate_detailed
from synth.plan import make_plan

GIB = 2**30


def _cases(quick: bool) -> list[tuple[str, str, str, str, dict, int]]:
    """(label, topology, collective, algorithm, options, message size); the quick run takes the first three."""
    cases = [
        ("ring allreduce", "ring:n=8", "allreduce", "ring", {"chunks": 8}, 2**26),
        ("forest allgather", "dgx-a100:boxes=2", "allgather", "forest", {}, GIB),
        ("ring allreduce", "ring:n=16", "allreduce", "ring", {"chunks": 32}, GIB),
        ("ring allreduce", "ring:n=64", "allreduce", "ring", {"chunks": 512}, GIB),
        ("forest allgather", "dgx-a100:boxes=8", "allgather", "forest", {}, GIB),
        ("forest allgather", "mi250:boxes=3", "allgather", "forest", {}, GIB),
        ("forest allreduce", "mi250", "allreduce", "forest", {"size": GIB}, GIB),
        ("forest allgather", "dgx-a100:boxes=128", "allgather", "forest", {}, GIB),
        ("ring allreduce", "ring:n=128", "allreduce", "ring", {"chunks": 1024}, 32 * GIB),
    ]
    return cases[:3] if quick else cases


def _first_call() -> float:
    """Seconds the first compiled simulation takes (numba's import, and its compile or cache load)."""
    topology = load_topology("ring:n=2")
    schedule = synthesize(topology, "allgather", "ring")
    started = time.perf_counter()
    simulate_detailed(schedule, topology, 2**20, make_plan(schedule.chunks, 2**20, "Simple"))
    return time.perf_counter() - started


def run(quick: bool) -> list[Table]:
    """The flow simulator table (see the module docstring)."""
    first = _first_call()
    table = Table("flow_simulator", "Flow simulator time against schedule size, reference and compiled engines",
                  ["schedule", "topology", "size", "transfers", "plan", "slice transfers", "events",
                   "rate updates", "classes s", "reference s", "compiled s", "speed-up", "identical",
                   "compiled slice transfers/s"])
    for label, spec, kind, algorithm, options, size in _cases(quick):
        topology = load_topology(spec)
        try:
            schedule = synthesize(topology, kind, algorithm, **options)
        except SynthError as refusal:
            table.add(label, spec, size, None, str(refusal)[:60], *[None] * 9)
            continue
        plan = make_plan(schedule.chunks, size, "Simple")
        count, transfers = _transfers(schedule)
        building, _ = timed(partial(_classes, transfers, count, topology, plan))
        slow, reference = timed(partial(simulate_detailed, schedule, topology, size, plan, engine="reference"))
        fast, compiled = timed(partial(simulate_detailed, schedule, topology, size, plan))
        work = len(schedule.transfers) * plan.slices
        table.add(label, spec, f"{size // 2**20:,} MiB", len(schedule.transfers), plan.short(), work,
                  compiled.events, compiled.rate_updates, building, slow, fast, slow / fast,
                  compiled == reference and compiled.time_s.hex() == reference.time_s.hex(), work / fast)
        del schedule
        gc.collect()
    table.notes = (f"One run each, wall time of the simulation alone (synthesis excluded), one core; both "
                   f"engines include building the path classes in Python (classes s, timed apart). The plan: Simple protocol, slices per chunk = chunk bytes / "
                   f"512 KiB rounded up, 8 in flight. The compiled engine's first call in this process (numba's "
                   f"import and loading or compiling the kernels, excluded above) took {first:.2f} s.")
    return [table]
