"""``synth tune``: the per-size algorithm table (winner, runner-up, % of the bandwidth bound)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer

from synth.cli.common import (
    CSV_OPTION,
    JSON_OPTION,
    PROTOCOL_OPTION,
    SIZE_HELP,
    SLICE_BYTES_OPTION,
    SLICES_OPTION,
    TOPOLOGY_HELP,
    WINDOW_OPTION,
    check_bound_work,
    console,
    fmt_time,
    output_file,
    parse_options,
    plan_options,
    print_json,
    shown,
    sizes_argument,
    table,
    topology_argument,
)
from synth.collectives import parse_kind
from synth.errors import InputError
from synth.units import format_size


def register(app: typer.Typer) -> None:
    """Add ``tune`` to ``app``."""
    app.command("tune")(tune_command)


def algorithm_options(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """Parse repeated ``ALG.key=value`` options into ``{alg: {key: value}}``.

    Examples
    --------
    >>> algorithm_options(["milp.time_limit_s=30", "tree.chunks=64"])
    {'milp': {'time_limit_s': 30}, 'tree': {'chunks': 64}}
    """
    result: dict[str, dict[str, Any]] = {}
    for item in items or []:
        name, dot, rest = item.partition(".")
        if not dot or not name or "=" not in rest:
            raise InputError("", "--option", f"expected ALGORITHM.key=value (e.g. tree.chunks=64), got {item!r}")
        result.setdefault(name, {}).update(parse_options([rest]))
    return result


def tune_command(
    topology: Annotated[str, typer.Argument(help=TOPOLOGY_HELP)],
    collective: Annotated[str, typer.Option("--collective", "-c", help="allreduce, allgather, reducescatter, ...")],
    size: Annotated[list[str] | None, typer.Option(
        "--size", "-s", help=SIZE_HELP + "; default 1K:4G:4")] = None,
    algorithm: Annotated[list[str] | None, typer.Option(
        "--algorithm", "-a", help="only these algorithms (repeatable; default every applicable one)")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-O", help="per-algorithm option ALG.key=value, e.g. tree.chunks=64 (repeatable)")] = None,
    time_limit: Annotated[float | None, typer.Option(
        "--time-limit", min=0.001, help="seconds per solver run, passed to algorithms that take time_limit_s (milp)")
    ] = None,
    skip_slow: Annotated[bool, typer.Option("--skip-slow", help="leave out slow solvers (milp) unless named")] = False,
    model: Annotated[str, typer.Option("--model", help="evaluator model")] = "flow",
    plot_path: Annotated[str | None, typer.Option("--plot", help="draw algbw vs size for every algorithm (PNG)")] = None,
    out: Annotated[str | None, typer.Option("--out", help="write the runtime table (synth.tune/1 JSON)")] = None,
    protocol: Annotated[str | None, PROTOCOL_OPTION] = None,
    slice_bytes: Annotated[str | None, SLICE_BYTES_OPTION] = None,
    slices: Annotated[int | None, SLICES_OPTION] = None,
    window: Annotated[int | None, WINDOW_OPTION] = None,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
) -> None:
    """Evaluate every applicable algorithm at every message size and print, per size, the winner, its
    time, the baseline's (nccl: what NCCL would run; always a candidate) and the speedup over it, the
    runner-up and the % of the bandwidth bound. ``--out`` writes the size-range -> algorithm
    table a runtime can load (format in `synth.tune`)."""
    from synth.compare import baseline_description
    from synth.tune import DEFAULT_SIZES, plot, tune, write_table

    if out is not None:
        output_file(out, "--out", inputs=[topology])
    if plot_path is not None:
        output_file(plot_path, "--plot", inputs=[topology, out], suffixes=(".png",))
    if out and plot_path and out == plot_path:
        raise InputError(plot_path, "--plot", "is also the --out file; name two different files")
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit <= 10**6):
        raise InputError("", "--time-limit", f"expected a number of seconds from 0.001 to 1000000, got {time_limit!r}")
    plan_choice = plan_options(protocol, slice_bytes, slices, window)
    topo = topology_argument(topology)
    check_bound_work(topo, "tune (the bounds and the tree packing)")
    kind = parse_kind(collective, field="--collective")
    sizes = sizes_argument(size, [str(s) for s in DEFAULT_SIZES])
    options = algorithm_options(option)
    with console.status("tuning...") as status:
        result = tune(topo, kind, sizes, algorithms=algorithm, options=options, time_limit_s=time_limit, model=model,
                      include_slow=not skip_slow, progress=lambda label: status.update(f"running {label}"),
                      plan=plan_choice)
    if out:
        write_table(result, out)
    if plot_path:
        plot(result, plot_path)
    if as_json:
        print_json(result.to_dict())
        return
    body = []
    for row in result.per_size:
        percent = "-" if row.percent_of_bound is None else f"{row.percent_of_bound:.1f}%"
        gain = row.speedup_vs_baseline
        body.append([format_size(row.size), row.winner_name, row.plan.short() if row.plan else "-",
                     fmt_time(row.time_s), f"{row.algbw_GBps:.2f}",
                     "-" if row.baseline_time_s is None else fmt_time(row.baseline_time_s),
                     "-" if gain is None else f"{gain:.2f}x",
                     row.runner_up or "-", "-" if row.runner_up_time_s is None else fmt_time(row.runner_up_time_s),
                     percent])
    base = next((row.baseline for row in result.per_size if row.baseline), None)
    bound = (f", {result.bound_label} {result.bound_algbw_GBps:.2f} GB/s at large sizes"
             if result.bound_algbw_GBps else "")
    console.print(table(f"synth tune: {kind} on {topo.name} ({topo.num_ranks} gpus), {len(result.candidates)} "
                        f"candidates, {result.model} model{bound}",
                        ["size", "winner", "plan", "time", "algbw GB/s", f"{base or 'baseline'} time",
                         f"vs {base or 'baseline'}", "runner-up", "runner-up time", "% of bound"],
                        body, {0, 3, 4, 5, 6, 8, 9}))
    if base:
        console.print(f"[dim]vs {base}: {base}'s time at that size over the winner's ({base} is always a candidate, "
                      f"so never below 1.00x); {shown(baseline_description(topo, base, options.get(base, {}).get('version')))}[/dim]")
    from synth.library.achievable import link_rates_note

    console.print(f"[dim]{shown(link_rates_note(topo))}[/dim]")
    reasons: dict[str, list[str]] = {}
    for skipped in result.skipped:
        reasons.setdefault(skipped.reason, []).append(skipped.algorithm)
    for reason, labels in reasons.items():
        console.print(f"[dim]skipped {shown(', '.join(labels))}: {shown(reason)}[/dim]")
    if out:
        console.print(f"wrote {shown(out)} ({len(result.ranges())} size ranges)")
    if plot_path:
        console.print(f"wrote {shown(plot_path)}")
