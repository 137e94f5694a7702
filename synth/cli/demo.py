"""``synth demo``: the main job on an embedded default topology."""

from __future__ import annotations

from typing import Annotated

import typer

from synth.cli.common import (
    CSV_OPTION,
    JSON_OPTION,
    SIZE_HELP,
    check_bound_work,
    console,
    err_console,
    fmt_time,
    note,
    print_json,
    shown,
    sizes_argument,
    table,
)
from synth.collectives import Kind
from synth.errors import InputError
from synth.units import format_size

DEFAULT_TOPOLOGY = "dgx-a100:boxes=2"
DEMO_KINDS = [Kind.ALLGATHER, Kind.REDUCESCATTER, Kind.ALLREDUCE, Kind.ALLTOALL]


def register(app: typer.Typer) -> None:
    """Add ``demo`` to ``app``."""
    app.command("demo")(demo)


def demo(
    topology: Annotated[str, typer.Option("--topology", "-t", help="topology to run on")] = DEFAULT_TOPOLOGY,
    size: Annotated[list[str] | None, typer.Option("--size", "-s", help=SIZE_HELP)] = None,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
) -> None:
    """Run every available algorithm for allgather, reduce-scatter, allreduce and alltoall on a 2-box
    DGX A100, verify each schedule, and print time, algbw, busbw, the congestion bound and the speedup
    over nccl (what NCCL would run at that size) per size."""
    from synth.compare import baseline_description, baselines, planned, run_all, speedup
    from synth.library import load_topology

    try:
        topo = load_topology(topology)
    except InputError:
        if topology != DEFAULT_TOPOLOGY:
            raise
        topo = load_topology("switch:n=16")
    from synth import limits

    limits.check_ranks(topo.num_ranks, f"a topology of {topo.num_ranks} gpus", hint="use a smaller topology")
    check_bound_work(topo, "demo (the bounds and the tree packing)")
    sizes = sizes_argument(size, ["1MiB", "64MiB", "1GiB"])
    total = len(planned(DEMO_KINDS))
    done = [0]
    with console.status("synthesizing and verifying...") as status:
        def progress(what: str) -> None:
            done[0] += 1
            status.update(f"running {what} ({done[0]}/{total})")
            if not err_console.is_terminal:  # no spinner on a pipe or a file: one line per step instead
                note(f"demo: running {shown(what)} ({done[0]}/{total})")

        # an algorithm that refuses (a solver model over its limit at some size, say) is listed as skipped with
        # its reason below instead of ending the demo
        rows, skipped, _ = run_all(topo, DEMO_KINDS, sizes, keep_going=True, progress=progress)
    base = baselines(rows)
    names = sorted({row.algorithm for row in base.values()})
    if as_json:
        print_json({"topology": topo.name, "baseline": [baseline_description(topo, name) for name in names],
                    "rows": [dict(r.to_dict(), speedup_vs_baseline=speedup(r, base.get((r.collective, r.size))))
                             for r in rows],
                    "skipped": [s.__dict__ for s in skipped]})
        return
    body = []
    for r in rows:
        percent = r.percent_of_bound
        gain = speedup(r, base.get((r.collective, r.size)))
        body.append([r.label, r.collective, format_size(r.size), fmt_time(r.time_s), f"{r.algbw_GBps:.2f}",
                     f"{r.busbw_GBps:.2f}", fmt_time(r.congestion_time_s),
                     "-" if percent is None else f"{percent:.1f}%", "-" if gain is None else f"{gain:.2f}x",
                     r.plan.short()])
    console.print(table(f"synth demo: {topo.name} ({topo.num_ranks} gpus, {len(topo.switches)} switches), "
                        "every schedule verified, flow model",
                        ["algorithm", "collective", "size", "time", "algbw GB/s", "busbw GB/s",
                         "congestion bound", "% of bound", f"vs {'/'.join(names) or 'nccl'}", "plan"], body,
                        {2, 3, 4, 5, 6, 7, 8}))
    console.print("[dim]% of bound: the topology's lower bound on time at that size (links, and in-switch reduction where switches declare it) over the time; "
                  "plan: protocol, slices per chunk x slice size, slices in flight (`synth evaluate --help`)[/dim]")
    from synth.library.achievable import link_rates_note

    console.print(f"[dim]{link_rates_note(topo)}[/dim]")
    for name in names:
        console.print(f"[dim]vs {name}: {name}'s time at that size over the row's (above 1: faster); "
                      f"{baseline_description(topo, name)}[/dim]")
    for s in skipped:
        console.print(f"[dim]skipped {s.algorithm} {s.collective}: {s.reason}[/dim]")
