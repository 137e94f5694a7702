"""Core commands: topologies, show, generate, verify, evaluate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from synth.cli.common import (
    CSV_OPTION,
    DEMAND_HELP,
    GROUP_HELP,
    JSON_OPTION,
    PROTOCOL_OPTION,
    SHARDS_HELP,
    SIZE_HELP,
    SLICE_BYTES_OPTION,
    SLICES_OPTION,
    TOPOLOGY_HELP,
    WINDOW_OPTION,
    check_chunks,
    check_takes_shards,
    console,
    demand_argument,
    fmt_time,
    group_argument,
    load_schedule,
    output_file,
    parse_options,
    plan_options,
    print_json,
    schedule_topology,
    shards_argument,
    shown,
    sizes_argument,
    table,
    topology_argument,
    verify_file,
    write_schedule,
)
from synth.collectives import Kind, parse_kind
from synth.errors import InputError
from synth.units import format_size

if TYPE_CHECKING:
    from synth.topology import Topology


def register(app: typer.Typer) -> None:
    """Add the core commands to ``app``."""
    app.command("topologies")(topologies)
    app.command("show")(show)
    app.command("generate")(generate)
    app.command("verify")(verify_command)
    app.command("evaluate")(evaluate_command)


def topologies(as_json: bool = JSON_OPTION, as_csv: bool = CSV_OPTION) -> None:
    """List the topology library: builders and named systems, with their parameters."""
    import inspect

    from synth.library import LIBRARY, format_value, shipped_files

    rows = []
    for name, item in LIBRARY.items():
        params = ", ".join(f"{p.name}={format_value(p.default)}" for p in inspect.signature(item.builder).parameters.values())
        rows.append({"name": name, "kind": "builder", "parameters": params, "summary": item.summary,
                     "shipped": item.shipped})
    for file_name, spec in shipped_files():
        rows.append({"name": file_name, "kind": "file", "parameters": "",
                     "summary": f"shipped file (= {spec})" if spec else "shipped file", "shipped": True})
    if as_json:
        print_json(rows)
        return
    console.print(table("synth topology library", ["name", "parameters", "summary"],
                        [[r["name"], r["parameters"], r["summary"]] for r in rows]))
    console.print("Use a name with parameters anywhere a topology is expected, e.g. [bold]dgx-a100:boxes=2[/bold].")


def show(topology: Annotated[str, typer.Argument(help=TOPOLOGY_HELP)], as_json: bool = JSON_OPTION,
         as_csv: bool = CSV_OPTION) -> None:
    """Summarize a topology: gpus, switches, links and per-gpu ingress/egress bandwidth."""
    topo = topology_argument(topology)
    per_gpu = [{"rank": r, "gpu": g, "egress_GBps": topo.egress_bandwidth(g), "ingress_GBps": topo.ingress_bandwidth(g)}
               for r, g in enumerate(topo.gpus)]
    summary = {"name": topo.name, "description": topo.description, "gpus": topo.num_ranks,
               "switches": len(topo.switches), "directed_links": topo.graph.number_of_edges(), "per_gpu": per_gpu}
    if as_json:
        print_json(summary)
        return
    console.print(f"[bold]{shown(topo.name)}[/bold]: {shown(topo.description)}")
    console.print(f"{topo.num_ranks} gpus, {len(topo.switches)} switches, {topo.graph.number_of_edges()} directed links")
    rows = [[p["rank"], p["gpu"], f"{p['egress_GBps']:g}", f"{p['ingress_GBps']:g}"] for p in per_gpu[:64]]
    console.print(table(None, ["rank", "gpu", "egress GB/s", "ingress GB/s"], rows, {0, 2, 3}))
    if topo.num_ranks > 64:
        console.print(f"... and {topo.num_ranks - 64} more gpus (use --json for all)")


def generate(
    topology: Annotated[str, typer.Argument(help=TOPOLOGY_HELP)],
    collective: Annotated[str, typer.Option("--collective", "-c", help="allgather, reducescatter, allreduce, alltoall, alltoallv, broadcast, reduce")],
    algorithm: Annotated[str, typer.Option("--algorithm", "-a", help="an algorithm name (`synth algorithms` lists them with their options)")] = "ring",
    output: Annotated[str, typer.Option("--output", "-o", help="schedule file to write (synth.schedule/2 JSON)")] = "schedule.json",
    chunks: Annotated[int | None, typer.Option("--chunks", "-k", help="chunks C (algorithm default if omitted); alltoallv: the demand's chunks in all")] = None,
    root: Annotated[int | None, typer.Option("--root", help="root rank for broadcast and reduce")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-O", help="algorithm option key=value (repeatable)")] = None,
    demand: Annotated[str | None, typer.Option("--demand", help=DEMAND_HELP)] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="skip the verifier (not recommended)")] = False,
    compact: Annotated[bool, typer.Option("--compact", help="write the trees form (forest only): the trees and their chunks, no transfer records; for schedules past a few million transfers")] = False,
    group: Annotated[str | None, typer.Option("--group", "-g", help=GROUP_HELP)] = None,
    shards: Annotated[str | None, typer.Option("--shards", help=SHARDS_HELP)] = None,
) -> None:
    """Synthesize a schedule, verify it, and write it as synth JSON."""
    from synth.choose import synthesize
    from synth.verify import verify

    output_file(output, inputs=[topology] + ([demand] if demand else []))
    topo = group_argument(topology_argument(topology), group)
    kind = parse_kind(collective, field="--collective")
    options = parse_options(option)
    if chunks is not None:
        check_chunks(chunks, "--chunks")
    chunked = demand_argument(demand, kind, topo, chunks)
    if chunked is not None:
        options["demand"] = chunked
    elif chunks is not None:
        options["chunks"] = chunks
    if root is not None:
        options["root"] = root
    weights = shards_argument(shards, kind, topo)
    if weights is not None:
        check_takes_shards(algorithm)
        options["shards"] = weights
    if compact:
        _generate_trees(topo, topology, kind, algorithm, options, output, no_verify)
        return
    with _solver_status(algorithm, options):
        schedule = synthesize(topo, kind, algorithm, **options)
    if not no_verify:
        verify(schedule, topo)
    write_schedule(schedule, topo, topology, output, inputs=[topology])
    console.print(f"wrote {shown(output)}: {shown(algorithm)} {_kind_text(schedule)} on {shown(topo.name)}, {len(schedule.transfers)} transfers, "
                  f"{schedule.chunks} chunks" + ("" if no_verify else ", verified"))
    summary = schedule.params.get("summary") if isinstance(schedule.params, dict) else None
    if isinstance(summary, str):  # what produced the result (milp: proven optimal, improved or the greedy plan)
        console.print(f"{algorithm}: {summary}", soft_wrap=True)
    choice = schedule.params.get("size_choice") if isinstance(schedule.params, dict) else None
    if isinstance(choice, dict):  # a chooser (forest, insw) chose the variant for a size: say which, and its time
        console.print(f"{algorithm}: {_size_choice_line(schedule.params, choice)}", soft_wrap=True)


def _kind_text(schedule: Any) -> str:
    """The collective as the commands name it: ``allgather``, or ``allgather (uneven shards)``."""
    collective = schedule.collective
    return f"{collective.kind}" + (" (uneven shards)" if collective.shards is not None else "")


def _size_choice_line(params: Mapping[str, Any], choice: Mapping[str, Any]) -> str:
    """``chose k=3 with 32KiB slices, the fastest of 9 variants at 1GiB: 3.244 ms (flow model; ...)``."""
    slice_bytes = choice.get("chosen_slice_bytes")
    slices = "the plan rule's slices" if slice_bytes is None else f"{format_size(slice_bytes)} slices"
    tried = len(choice.get("time_s", {}))
    return (f"chose {params.get('variant')} with {slices}, the fastest of {tried} variants simulated at "
            f"{format_size(params['size'])}: {fmt_time(params['modelled_time_s'])} ({choice.get('model')} model; "
            f"{_paper_line(choice, params)}; every variant's time is in params.size_choice)")


def _paper_line(choice: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """What the chooser's record says is best on paper: forest's optimal trees, insw's analytic share."""
    if "analytic_share" in choice:
        return f"the in-switch bound's split puts {choice['analytic_share']} of the data in the switches"
    unit = "unit of shard weight" if "shards" in params else "root"
    return f"{choice.get('optimal_trees_per_root')} trees per {unit} are optimal on paper"


def _generate_trees(topo: Topology, spec: str, kind: Kind, algorithm: str, options: dict[str, Any], output: str,
                    no_verify: bool) -> None:
    """``generate --compact``: forest's trees form, verified on the trees and written without transfers."""
    from synth.algorithms.forest import forest_trees
    from synth.verify_trees import verify_trees

    if algorithm != "forest":
        raise InputError("", "--compact", f"only forest writes the trees form, not {algorithm!r}")
    if "size" in options:
        raise InputError("", "--option", "size is not an option of the trees form (choosing for a size runs the "
                         "flow model on the transfers); give max_trees_per_root instead")
    form = forest_trees(topo, kind, **options)
    report = None if no_verify else verify_trees(form, topo)
    write_schedule(form, topo, spec, output, inputs=[spec])
    trees = sum(len(phase.trees) for phase in form.phases)
    console.print(f"wrote {shown(output)}: forest {kind} on {shown(topo.name)} in the trees form, {trees} trees, "
                  f"{form.num_transfers()} transfers when expanded, {form.chunks} chunks"
                  + ("" if report is None else ", verified"))


def _solver_status(algorithm: str, options: dict[str, object]) -> Any:
    """A status line on stderr (a terminal only, not with --quiet) fed by an algorithm's ``progress``
    callback, when it takes one and none was given."""
    import contextlib
    import sys

    from synth.algorithms import REGISTRY
    from synth.choose import chooser_options
    from synth.cli.common import VERBOSITY, err_console

    entry = REGISTRY.get(algorithm)
    if (entry is None or "progress" in options or VERBOSITY["level"] == 0 or not sys.stderr.isatty()
            or (not entry.takes("progress")
                and "progress" not in chooser_options(algorithm))):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def show() -> Any:
        with err_console.status(f"{algorithm}: starting") as status:
            def update(event: Any) -> None:
                bound = f", bound {event.bound_epochs}" if getattr(event, "bound_epochs", None) is not None else ""
                best = f"best {event.best_epochs} epochs{bound}, " if getattr(event, "best_epochs", None) else ""
                status.update(f"{algorithm} {event.collective}: {event.phase}: {best}{event.message} "
                              f"({event.elapsed_s:.1f} s)")

            options["progress"] = update
            try:
                yield
            finally:
                options.pop("progress", None)

    return show()


def verify_command(
    schedule_file: Annotated[str, typer.Argument(metavar="SCHEDULE", help="a synth.schedule JSON file")],
    topology: Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Check a schedule exactly: paths, ordering, races, double reductions, postconditions."""
    stored = load_schedule(schedule_file, "stored")
    topo = schedule_topology(stored, topology, schedule_file)
    report = verify_file(stored, topo, schedule_file)  # the trees form is proved on its trees
    if as_json:
        print_json({"ok": True, **report.to_dict()})
        return
    console.print(f"OK: {shown(schedule_file)} is a correct {stored.kind} on {shown(topo.name)} ({report.describe()})")


def evaluate_command(
    schedule_file: Annotated[str, typer.Argument(metavar="SCHEDULE", help="a synth.schedule JSON file")],
    size: Annotated[list[str] | None, typer.Option("--size", "-s", help=SIZE_HELP)] = None,
    topology: Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)] = None,
    model: Annotated[str, typer.Option("--model", "-m", help="flow (max-min fair α-β) or astra (ASTRA-sim analytical)")] = "flow",
    protocol: Annotated[str | None, PROTOCOL_OPTION] = None,
    slice_bytes: Annotated[str | None, SLICE_BYTES_OPTION] = None,
    slices: Annotated[int | None, SLICES_OPTION] = None,
    window: Annotated[int | None, WINDOW_OPTION] = None,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
) -> None:
    """Evaluate a schedule: time, algbw, busbw, the congestion bound, % of the topology's bound and the plan it
    ran under, per size."""
    from synth.collectives import Kind
    from synth.compare import lower_bound
    from synth.evaluate import congestion, evaluate_sizes

    options = plan_options(protocol, slice_bytes, slices, window)
    schedule = load_schedule(schedule_file, "stored")  # the trees form streams through the flow model
    topo = schedule_topology(schedule, topology, schedule_file)
    verify_file(schedule, topo, schedule_file)
    sizes = sizes_argument(size, ["1MiB", "1GiB"])
    results = evaluate_sizes(schedule, topo, sizes, model=model, options=options)
    collective = getattr(schedule, "collective", None)
    bound = lower_bound(topo, Kind(schedule.kind), getattr(collective, "demand", None),
                        getattr(collective, "shards", None))
    if as_json:
        print_json([{**r.to_dict(), "bound_time_s": None if bound is None else bound.time(r.size),
                     "bound_label": None if bound is None else bound.label,
                     "percent_of_bound": None if bound is None or not 0 < r.time_s < float("inf")
                     else 100.0 * bound.time(r.size) / r.time_s} for r in results])
        return
    report = congestion(schedule, topo)
    rows = [[format_size(r.size), fmt_time(r.time_s), f"{r.algbw_GBps:.2f}", f"{r.busbw_GBps:.2f}",
             fmt_time(r.congestion_time_s), _percent_of(bound, r.size, r.time_s), r.plan.describe()] for r in results]
    console.print(table(f"{schedule.algorithm} {_kind_text(schedule)} on {topo.name} ({model} model)",
                        ["size", "time", "algbw GB/s", "busbw GB/s", "congestion bound", "% of bound", "plan"], rows,
                        {1, 2, 3, 4, 5}))
    busiest = ", ".join(f"{shown(u)}->{shown(v)}" for u, v, _ in report.busiest_links[:3])
    console.print(f"busiest links: {busiest}")
    from synth.library.achievable import link_rates_note

    console.print(f"[dim]{shown(link_rates_note(topo))}[/dim]")
    if bound is not None:
        console.print(f"[dim]% of bound: the topology's proven lower bound on time at that size ({bound.label}: "
                      "links, and in-switch reduction where switches declare it) over the time; 100% = as fast "
                      "as the fabric allows.[/dim]")


def _percent_of(bound: Any, size: int, time_s: float) -> str:
    """``bound``'s time at ``size`` as a percentage of ``time_s``, as the tables print it; ``-`` if unknown."""
    if bound is None or time_s <= 0 or time_s == float("inf"):
        return "-"
    return f"{100.0 * bound.time(size) / time_s:.1f}%"
