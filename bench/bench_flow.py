"""The flow simulator's cost against schedule size, under the execution plan every command uses.

Table ``flow_simulator``: schedules of about 10^3 to 10^6 transfers (ring allreduce chains, forests of
packed trees on DGX A100 and MI250 systems, up to the 1,024-gpu optimal forest), each simulated at 1 GiB
under the plan's rule with the Simple protocol (slices of 512 KiB, 8 in flight): the plan, the number of
slice transfers (transfers x slices per chunk), events (instants at which something finished), max-min
rate updates, and wall time.
"""

from __future__ import annotations

import gc
from functools import partial

from bench import Table, timed
from synth import load_topology, synthesize
from synth.errors import SynthError
from synth.flow import simulate_detailed
from synth.plan import make_plan

SIZE = 2**30


def _cases(quick: bool) -> list[tuple[str, str, str, str, dict]]:
    cases = [
        ("ring allreduce", "ring:n=16", "allreduce", "ring", {"chunks": 32}),
        ("forest allgather", "dgx-a100:boxes=2", "allgather", "forest", {}),
        ("ring allreduce", "ring:n=64", "allreduce", "ring", {"chunks": 512}),
        ("forest allgather", "dgx-a100:boxes=8", "allgather", "forest", {}),
        ("forest allgather", "mi250:boxes=3", "allgather", "forest", {}),
        ("forest allgather", "dgx-a100:boxes=128", "allgather", "forest", {}),
    ]
    return cases[:3] if quick else cases


def run(quick: bool) -> list[Table]:
    """The flow simulator table (see the module docstring)."""
    table = Table("flow_simulator", "Flow simulator time against schedule size, at 1 GiB under the plan",
                  ["schedule", "topology", "transfers", "plan", "slice transfers", "events", "rate updates",
                   "simulate s", "slice transfers/s"])
    for label, spec, kind, algorithm, options in _cases(quick):
        topology = load_topology(spec)
        try:
            schedule = synthesize(topology, kind, algorithm, **options)
        except SynthError as refusal:
            table.add(label, spec, None, str(refusal)[:60], None, None, None, None, None)
            continue
        plan = make_plan(schedule.chunks, SIZE, "Simple")
        seconds, result = timed(partial(simulate_detailed, schedule, topology, SIZE, plan))
        work = len(schedule.transfers) * plan.slices
        table.add(label, spec, len(schedule.transfers), plan.short(), work, result.events, result.rate_updates,
                  seconds, work / seconds)
        del schedule
        gc.collect()
    table.notes = ("One run each, wall time of the simulation alone (synthesis excluded), one core. The plan: "
                   "Simple protocol, slices per chunk = chunk bytes / 512 KiB rounded up, 8 in flight.")
    return [table]
