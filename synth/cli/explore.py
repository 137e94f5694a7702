"""``synth compare``, ``synth draw`` and ``synth explain``: which algorithm wins where, what a fabric
looks like, and what a schedule does."""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from synth.cli.common import (
    CSV_OPTION,
    DEMAND_HELP,
    GROUP_HELP,
    JSON_OPTION,
    PROTOCOL_OPTION,
    QUIET_OPTION,
    SHARDS_HELP,
    SIZE_HELP,
    SLICE_BYTES_OPTION,
    SLICES_OPTION,
    TOPOLOGY_HELP,
    VERBOSE_OPTION,
    VERBOSITY,
    WINDOW_OPTION,
    check_bound_work,
    check_made_for,
    command_verbosity,
    console,
    demand_argument,
    detail,
    err_console,
    fmt_time,
    group_argument,
    load_schedule,
    note,
    output_file,
    plan_options,
    print_json,
    progress_bar,
    schedule_topology,
    shards_argument,
    shown,
    sizes_argument,
    table,
    topology_argument,
    verify_file,
)
from synth.collectives import Kind, parse_kind
from synth.errors import InputError
from synth.fileio import check_interrupted
from synth.units import format_size, parse_size

if TYPE_CHECKING:
    from synth.topology import Topology

DEFAULT_KINDS = ["allgather", "reducescatter", "allreduce", "alltoall"]
DEFAULT_SIZES = ["64KiB", "1MiB", "16MiB", "256MiB", "1GiB"]


def register(app: typer.Typer) -> None:
    """Add ``compare``, ``draw`` and ``explain`` to ``app``."""
    app.command("compare")(compare)
    app.command("draw")(draw)
    app.command("explain")(explain_command)


def _status(message: str) -> AbstractContextManager[object]:
    """A spinner on stderr when it helps (a terminal, not quiet); otherwise a no-op context."""
    import contextlib
    import sys

    if VERBOSITY["level"] == 0 or not sys.stdout.isatty() or not err_console.is_terminal:
        return contextlib.nullcontext()
    return err_console.status(message)


def _compare_demand(collective: list[str] | None, demand: str | None, topo: Topology, sharded: bool = False
                    ) -> tuple[list[Kind], Any, list[str]]:
    """``compare``'s collectives (alltoallv alone by default with ``--demand``, allgather and reducescatter
    with ``--shards``), the chunked demand (or None) and the default sizes (a bytes demand's total, else the
    usual ones)."""
    default = ["alltoallv"] if demand else ["allgather", "reducescatter"] if sharded else DEFAULT_KINDS
    kinds = [parse_kind(c, field="--collective") for c in (collective or default)]
    kinds = list(dict.fromkeys(kinds))
    chunked = demand_argument(demand, Kind.ALLTOALLV if Kind.ALLTOALLV in kinds else kinds[0], topo)
    if chunked is not None and chunked.unit == "bytes":
        return kinds, chunked, [str(round(chunked.unit_per_chunk * chunked.chunks))]
    return kinds, chunked, DEFAULT_SIZES


def _compare_shards(shards: str | None, kinds: list[Kind], topo: Topology) -> tuple[int, ...] | None:
    """``--shards`` as weights, refused (naming the option) when a chosen collective cannot take them."""
    weights = None
    for kind in kinds if shards is not None else []:
        weights = shards_argument(shards, kind, topo)
    return weights


def compare(
    topology: Annotated[str, typer.Argument(help=TOPOLOGY_HELP)],
    collective: Annotated[list[str] | None, typer.Option("--collective", "-c",
                          help="collective (repeatable); default allgather, reducescatter, allreduce, alltoall "
                               "(alltoallv with --demand)")] = None,
    size: Annotated[list[str] | None, typer.Option("--size", "-s", help=SIZE_HELP + "; alltoallv: the whole "
                                                   "demand's bytes (default: a bytes demand's total)")] = None,
    demand: Annotated[str | None, typer.Option("--demand", help=DEMAND_HELP)] = None,
    shards: Annotated[str | None, typer.Option("--shards", help=SHARDS_HELP)] = None,
    algorithm: Annotated[list[str] | None, typer.Option("--algorithm", "-a",
                         help="only these algorithms (repeatable); default every applicable one except slow "
                              "solver runs (milp)")] = None,
    model: Annotated[str, typer.Option("--model", "-m", help="evaluator model: flow or astra")] = "flow",
    plot: Annotated[str | None, typer.Option("--plot", help="also draw algbw against size to this .png/.svg")] = None,
    protocol: Annotated[str | None, PROTOCOL_OPTION] = None,
    slice_bytes: Annotated[str | None, SLICE_BYTES_OPTION] = None,
    slices: Annotated[int | None, SLICES_OPTION] = None,
    window: Annotated[int | None, WINDOW_OPTION] = None,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
    quiet: bool = QUIET_OPTION,
    verbose: bool = VERBOSE_OPTION,
    group: Annotated[str | None, typer.Option("--group", "-g", help=GROUP_HELP)] = None,
    job: Annotated[str | None, typer.Option("--job", help="a synth.job/1 file: collectives that run at once "
                                            "(kind, size, group, demand); shows each alone and together, the "
                                            "schedule set chosen, NCCL's set and the joint bound")] = None,
) -> None:
    """Run every applicable algorithm, verify each schedule, and print one table: time, algbw, busbw,
    % of the topology's lower bound on time, the speedup over the baseline (``nccl``: what NCCL would
    run at that size; always run), the plan and synthesis time, the best per (collective, size) starred.
    With ``--job``: the job's collectives run together (see docs/jobs.md)."""
    from synth.algorithms import REGISTRY
    from synth.compare import (
        BASELINE_ALGORITHMS,
        bandwidth_bound,
        baseline_description,
        baselines,
        best_rows,
        planned,
        run_all,
        speedup,
    )

    command_verbosity(quiet, verbose)
    if job is not None:
        _compare_job(topology, job, as_json, model, {
            "--collective": collective, "--size": size, "--demand": demand, "--shards": shards, "--algorithm": algorithm,
            "--group": group, "--plot": plot, "--protocol": protocol, "--slice-bytes": slice_bytes, "--slices": slices,
            "--window": window, "--csv": as_csv or None})
        return
    plan_choice = plan_options(protocol, slice_bytes, slices, window)
    topo = group_argument(topology_argument(topology), group)
    check_bound_work(topo, "compare (the bounds and the tree packing)")
    kinds, chunked, default_sizes = _compare_demand(collective, demand, topo, shards is not None)
    weights = _compare_shards(shards, kinds, topo)
    sizes = sorted(set(sizes_argument(size, default_sizes)))
    for name in algorithm or []:
        if name not in REGISTRY:
            raise InputError("", "--algorithm", f"unknown algorithm {name!r}; expected one of {', '.join(REGISTRY)}")
    if plot is not None:
        output_file(plot, "--plot", inputs=[topology], suffixes=(".png", ".svg"))
    if algorithm and BASELINE_ALGORITHMS[0] not in algorithm:
        algorithm = [*algorithm, BASELINE_ALGORITHMS[0]]  # the baseline row is always shown
    plan = planned(kinds, algorithm, include_slow=False)
    if not plan:
        raise InputError("", "--algorithm", "none of the chosen algorithms does the chosen collectives")
    with progress_bar(len(plan), f"comparing on {topo.name}") as (bar, task):
        def step(what: str) -> None:
            bar.update(task, advance=1, description=f"running {what}")
            detail(f"running {what}")
            check_interrupted()

        rows, skipped, _ = run_all(topo, kinds, sizes, algorithm, model=model, progress=step, include_slow=False,
                                   keep_going=True, plan=plan_choice, demand=chunked, shards=weights)
    best = best_rows(rows)
    base = baselines(rows)
    base_names = sorted({row.algorithm for row in base.values()})
    if as_json:
        print_json({"topology": topo.name, "model": model,
                    "bounds_GBps": {k.value: bandwidth_bound(topo, k, chunked, weights if k in (
                        Kind.ALLGATHER, Kind.REDUCESCATTER) else None) for k in kinds},
                    "baseline": [baseline_description(topo, name) for name in base_names],
                    "rows": [dict(r.to_dict(), best=(r.collective, r.size, r.algorithm) in best,
                                  baseline=base[(r.collective, r.size)].algorithm if (r.collective, r.size) in base
                                  else None, speedup_vs_baseline=speedup(r, base.get((r.collective, r.size))))
                             for r in rows],
                    "skipped": [s.__dict__ for s in skipped]})
    else:
        ordered = sorted(rows, key=lambda r: ([k.value for k in kinds].index(r.collective), r.size, -r.algbw_GBps))
        body = []
        for r in ordered:
            star = (r.collective, r.size, r.algorithm) in best
            percent = r.percent_of_bound
            gain = speedup(r, base.get((r.collective, r.size)))
            body.append([r.collective, format_size(r.size), ("* " if star else "  ") + r.label, fmt_time(r.time_s),
                         f"{r.algbw_GBps:.2f}", f"{r.busbw_GBps:.2f}", "-" if percent is None else f"{percent:.1f}%",
                         "-" if gain is None else f"{gain:.2f}x", r.plan.short(), fmt_time(r.synthesis_s)])
        console.print(table(f"{topo.name} ({topo.num_ranks} gpus), {model} model, all verified; * = best algbw",
                            ["collective", "size", "algorithm", "time", "algbw GB/s", "busbw GB/s", "% of bound",
                             f"vs {'/'.join(base_names) or 'nccl'}", "plan", "synthesis"], body, {1, 3, 4, 5, 6, 7, 9}))
        _compare_notes(topo, rows, skipped, base_names, kinds, bool(algorithm), weights is not None)
    if plot is not None:
        from synth.draw import plot_compare, save_figure

        if not rows:
            raise InputError("", "--plot", "nothing to plot: no algorithm applied")
        save_figure(plot_compare(rows, title=f"{topo.name}: algbw by message size ({model} model)"), plot)
        note(f"wrote {shown(plot)}")


def _compare_job(spec: str, path: str, as_json: bool, model: str, given: dict[str, Any]) -> None:
    """``compare --job``: each collective's chosen schedule alone and together, NCCL's set, the joint bound;
    ``given``: the options a job file replaces, refused when set."""
    from synth.choose.job import choose_job, objective_value
    from synth.jobs import load_job

    for option, value in given.items():
        if value is not None:
            raise InputError("", option, "the job file gives each collective's kind, size, group, demand and "
                             "algorithms; drop the option or the --job")
    if model != "flow":
        raise InputError("", "--model", "a job runs in the flow model (the collectives share its links); "
                         f"expected flow, got {model!r}")
    topo = topology_argument(spec)
    job = load_job(path, topo)
    check_bound_work(topo, "compare --job (the bounds and the tree packing)")
    with progress_bar(None, f"running the job on {topo.name}") as (bar, task):
        def step(what: str) -> None:
            bar.update(task, description=f"running {what}")
            detail(f"running {what}")
            check_interrupted()

        result = choose_job(topo, job, progress=step)
    if as_json:
        print_json({"topology": topo.name, "model": "flow", "job": shown(path), **result.to_dict()})
        return
    body = []
    for index, m in enumerate(result.members):
        c = m.collective
        group = "every gpu" if c.members is None else f"{len(c.members)}: {c.members[0]}.."
        nccl = "-" if result.nccl_finish_s is None else fmt_time(result.nccl_finish_s[index])
        body.append([c.name, c.kind.value, format_size(c.size), group, m.chosen.algorithm, fmt_time(m.chosen.alone_s),
                     fmt_time(m.finish_s), f"{m.slowdown:.2f}x", nccl, fmt_time(result.bound.alone_s[index])])
    console.print(table(f"{topo.name}: {len(job.collectives)} collectives started together, flow model, all verified",
                        ["name", "collective", "size", "group", "algorithm", "alone", "together", "slowdown",
                         "nccl together", "own bound"], body, {2, 5, 6, 7, 8, 9}))
    objective = result.objective_s()
    bound = result.bound_s()
    percent = 100 * bound / objective if objective > 0 else 100.0
    what = "makespan" if job.objective == "makespan" else "weighted sum of finish times"
    # the job's results: on stdout, kept by --quiet
    console.print(f"{what}: {fmt_time(objective)}; joint bound {fmt_time(bound)} ({percent:.1f}% of bound"
                  + (f", {result.bound.binding}" if job.objective == "makespan" else "") + ")")
    if result.nccl_finish_s is not None:
        base = objective_value(job, result.nccl_finish_s)
        console.print(f"nccl for every collective, together: {fmt_time(base)}"
                      + (f" ({base / objective:.2f}x the chosen set's time)" if objective > 0 else ""))
    note(f"[dim]alone one after another: {fmt_time(result.serial_s)}; the slowest alone: "
         f"{fmt_time(result.alone_makespan_s)}; the set chosen by a local search over {len(result.tried)} sets "
         "simulated together (a heuristic: the joint bound says how far it can be from the best)[/dim]")
    from synth.library.achievable import link_rates_note

    note(f"[dim]{shown(link_rates_note(topo))}[/dim]")
    note("[dim]slowdown: the collective's finish in the job over its time alone (links shared max-min per "
         "connection: a schedule with more transfers in flight takes a larger share); own bound: its lower bound "
         "alone on its group[/dim]")
    for name, algorithm, why in result.skipped:
        note(f"[dim]skipped {name} {algorithm}: {why}[/dim]")


def _compare_notes(topo: Topology, rows: list[Any], skipped: list[Any], base_names: list[str], kinds: list[Kind],
                   chosen: bool, sharded: bool) -> None:
    """The notes under ``compare``'s table: the baselines, the bound, what was skipped or not run."""
    from synth.compare import baseline_description, planned

    for name in base_names:
        note(f"[dim]vs {name}: {name}'s time at the same size over the row's time (above 1: faster than the "
             f"baseline); {shown(baseline_description(topo, name))}[/dim]")
    if sharded:
        note("[dim]uneven shards: nccl is PyTorch's all_gather / reduce_scatter of unequal tensors (one broadcast "
             "or reduce per rank in one NCCL group); nccl(padded) pads every shard to the largest and runs NCCL's "
             "even collective (as FSDP and Megatron do); the faster of the two is the baseline[/dim]")
    note(f"[dim]% of bound: the topology's lower bound on time at that size over the schedule's time "
         f"({', '.join(sorted({f'{r.collective}: {r.bound_label}' for r in rows}))}); plan: protocol, "
         f"slices per chunk x slice size, slices in flight (see `synth evaluate --help`)[/dim]")
    from synth.library.achievable import link_rates_note

    note(f"[dim]{shown(link_rates_note(topo))}[/dim]")
    for s in skipped:
        note(f"[dim]skipped {s.algorithm} {s.collective}: {s.reason}[/dim]")
    slow = sorted({name for _, name in planned(kinds, None)} - {name for _, name in planned(kinds, None, False)})
    if slow and not chosen:
        note(f"[dim]not run (slow solver; ask with --algorithm): {', '.join(slow)}[/dim]")


def draw(
    topology: Annotated[str, typer.Argument(help=TOPOLOGY_HELP)],
    output: Annotated[str | None, typer.Option("--output", "-o", help="picture to write: .png or .svg "
                                               "(default: the topology's name, e.g. dgx-a100-boxes-2.png)")] = None,
    schedule_file: Annotated[str | None, typer.Option("--schedule", help="colour links by this schedule's load "
                                                      "(% of the busiest link) and mark the bottleneck cut")] = None,
    root: Annotated[int | None, typer.Option("--tree", help="with --schedule: draw the trees of this root rank")] = None,
    no_cut: Annotated[bool, typer.Option("--no-cut", help="do not compute or mark the bottleneck cut")] = False,
    quiet: bool = QUIET_OPTION,
    verbose: bool = VERBOSE_OPTION,
) -> None:
    """Draw a topology: gpus, switches, links as wide as their bandwidth, boxes and switch tiers laid out;
    optionally a schedule's link load and the bottleneck cut, or the trees of one root."""
    command_verbosity(quiet, verbose)
    if output is not None:  # before loading anything: a bad place fails at once
        output_file(output, inputs=[topology, schedule_file], suffixes=(".png", ".svg"))
    topo = topology_argument(topology)
    target = output if output is not None else (
        (re.sub(r"[^A-Za-z0-9_.-]+", "-", topo.name).strip("-")[:200] or "topology") + ".png")
    output_file(target, inputs=[topology, schedule_file], suffixes=(".png", ".svg"))
    from synth.draw import draw_topology, save_figure
    if not no_cut:
        check_bound_work(topo, "the bottleneck cut", hint="use --no-cut, or a smaller topology")
    schedule = None
    if schedule_file is not None:
        schedule = load_schedule(schedule_file)
        check_made_for(schedule, topo, schedule_file, repr(topology))
        verify_file(schedule, topo, schedule_file)
    elif root is not None:
        raise InputError("", "--tree", "drawing trees needs a schedule: add --schedule FILE")
    with _status("computing the bottleneck cut and drawing..."):
        figure = draw_topology(topo, schedule=schedule, tree_root=root, cut=None if no_cut else "auto")
        save_figure(figure, target)
    note(f"wrote {shown(target)}")


def explain_command(
    schedule_file: Annotated[str, typer.Argument(metavar="SCHEDULE", help="a synth.schedule JSON file")],
    topology: Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)] = None,
    size: Annotated[str, typer.Option("--size", "-s", help="message size for the time estimates")] = "1GiB",
    by: Annotated[str, typer.Option("--by", help="step (dependency level), tree (per chunk route) or auto")] = "auto",
    limit: Annotated[int, typer.Option("--limit", help="most steps or trees to list")] = 20,
    top: Annotated[int, typer.Option("--top", help="busiest links to list")] = 5,
    protocol: Annotated[str | None, PROTOCOL_OPTION] = None,
    slice_bytes: Annotated[str | None, SLICE_BYTES_OPTION] = None,
    slices: Annotated[int | None, SLICES_OPTION] = None,
    window: Annotated[int | None, WINDOW_OPTION] = None,
    as_json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
    verbose: bool = VERBOSE_OPTION,
) -> None:
    """Summarize a schedule: per step or per tree what moves where, the busiest links, and the critical
    path (longest dependency chain) with its α-β time, beside the congestion bound."""
    from synth.algorithms import reads_as
    from synth.explain import compress, describe_transfer, explain

    command_verbosity(quiet, verbose)
    if by not in ("auto", "step", "tree"):
        raise InputError("", "--by", f"expected step, tree or auto, got {by!r}")
    if not 1 <= limit <= 10**6 or not 1 <= top <= 10**6:
        raise InputError("", "--limit" if not 1 <= limit <= 10**6 else "--top", "expected a number from 1 to 1000000")
    nbytes = parse_size(size, "--size")
    plan_choice = plan_options(protocol, slice_bytes, slices, window)
    schedule = load_schedule(schedule_file)
    topo = schedule_topology(schedule, topology, schedule_file)
    verify_file(schedule, topo, schedule_file)
    summary = explain(schedule, topo, size=nbytes, top=top, options=plan_choice)
    if as_json:
        print_json(summary.to_dict())
        return
    view = reads_as(summary.algorithm) if by == "auto" else by
    console.print(f"[bold]{shown(summary.algorithm)} {summary.collective}[/bold] on {shown(topo.name)}: {summary.ranks} ranks, "
                  f"{summary.chunks} chunks, {summary.transfers} transfers, {_plural(summary.depth, 'step')} deep (verified)")
    if view == "step":
        rows = []
        for s in summary.steps[:limit]:
            moves = ", ".join(m.describe() for m in s.moves[:8]) + (f", ... +{len(s.moves) - 8}" if len(s.moves) > 8 else "")
            kinds = f"{s.copies} copy" + (f", {s.reduces} reduce" if s.reduces else "")
            rows.append([s.level, s.transfers, kinds, moves])
        console.print(table("per step (a->b copy, a=>b reduce, c = chunks)", ["step", "transfers", "ops", "moves"],
                            rows, {0, 1}))
        if len(summary.steps) > limit:
            console.print(f"... {len(summary.steps) - limit} more steps (--limit, or --json for all)")
    else:
        rows = [[i, t.root, compress(t.chunks), len(t.edges), t.depth, t.describe()]
                for i, t in enumerate(summary.trees[:limit])]
        console.print(table("per tree (chunks that take the same route are merged)",
                            ["tree", "root", "chunks", "transfers", "depth", "edges (in order)"], rows, {0, 1, 3, 4}))
        if len(summary.trees) > limit:
            console.print(f"... {len(summary.trees) - limit} more trees (--limit, or --json for all)")
    links = [[f"{link.src} -> {link.dst}", link.chunks, f"{link.bandwidth_GBps:g}", fmt_time(link.seconds),
              f"{link.percent_of_busiest:.1f}%"] for link in summary.busiest_links]
    console.print(table(f"busiest links at {format_size(nbytes)}", ["link", "chunks", "GB/s", "busy time",
                                                                     "% of busiest"], links, {1, 2, 3, 4}))
    path = summary.critical_path
    chain = [schedule.transfers[i] for i in path.transfers]
    steps = " ".join(describe_transfer(schedule, t) for t in chain[:12])
    more = f" ... +{len(chain) - 12}" if len(chain) > 12 else ""
    slices_text = f", chunks in {_plural(summary.plan.slices, 'slice')}" if summary.plan else ""
    console.print(f"critical path: {_plural(path.length, 'dependent transfer')}, {fmt_time(path.time_s)} at {format_size(nbytes)} "
                  f"(α {fmt_time(path.latency_s)} + β {fmt_time(path.bandwidth_s)}, no contention{slices_text}): "
                  f"{steps}{more}")
    console.print(f"congestion bound {fmt_time(summary.congestion_time_s)}; no run of this schedule with these slices "
                  f"beats {fmt_time(summary.lower_bound_s)} (algbw at most {nbytes / summary.lower_bound_s / 1e9:.2f} GB/s)"
                  if summary.lower_bound_s > 0 else "empty schedule")
    if summary.time_s is not None and summary.plan is not None:
        console.print(f"flow model: {fmt_time(summary.time_s)} (algbw {nbytes / summary.time_s / 1e9:.2f} GB/s) "
                      f"under the plan {summary.plan.describe()}")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")
