"""``synth export chakra|msccl|mscclpp`` and ``synth import chakra|msccl``: files that ASTRA-sim and MSCCL run,
and algorithms written by other tools brought back as verified schedules."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from synth.cli.common import (
    CSV_OPTION,
    JSON_OPTION,
    SIZE_HELP,
    TOPOLOGY_HELP,
    console,
    err_console,
    fmt_time,
    load_schedule,
    output_file,
    print_json,
    schedule_topology,
    shown,
    sizes_argument,
    table,
    verify_file,
    write_schedule,
)
from synth.errors import InputError
from synth.plan import DEFAULT_WINDOW, pinned
from synth.units import format_size, parse_size

if TYPE_CHECKING:
    from synth.evaluate import Evaluation
    from synth.schedule import Schedule
    from synth.topology import Topology

export_app = typer.Typer(name="export", help="Write a schedule in a format another tool runs (ASTRA-sim, MSCCL, MSCCL++).",
                         no_args_is_help=True)
import_app = typer.Typer(name="import", help="Read a Chakra ET set or MSCCL XML from another tool into a schedule.",
                         no_args_is_help=True)

#: Longest COMP duration accepted, in µs (1000 s).
MAX_COMP_US = 10**9

IMPORT_TOPOLOGY_HELP = TOPOLOGY_HELP + " An ASTRA-sim network YAML (topology/npus_count/...) works too."


def register(app: typer.Typer) -> None:
    """Add the ``export`` and ``import`` command groups to ``app``."""
    app.add_typer(export_app, name="export")
    app.add_typer(import_app, name="import")


def _import_topology(spec: str) -> tuple[Topology, str]:
    """A topology for an import, and the name the schedule records so later commands find it again."""
    from synth import limits
    from synth.astra import is_network_yaml, load_network_yaml
    from synth.library import load_topology

    topology, name = load_network_yaml(spec) if is_network_yaml(spec) else (load_topology(spec), spec)
    limits.check_ranks(topology.num_ranks, f"an import onto {topology.num_ranks} gpus", hint="use a smaller topology")
    return topology, name


@export_app.command("chakra")
def export_chakra_command(
    schedule_file: Annotated[str, typer.Argument(metavar="SCHEDULE", help="a synth.schedule JSON file")],
    output: Annotated[str, typer.Option("--output", "-o", help="folder to write (created if missing)")],
    size: Annotated[list[str] | None, typer.Option("--size", "-s", help=SIZE_HELP + "; one trace set per size")] = None,
    comp_duration_us: Annotated[int | None, typer.Option("--comp-duration-us", min=0, max=MAX_COMP_US,
                                                         help="duration of every reduction "
                                                         "COMP node in whole µs (default: the schedule's, else 0 "
                                                         "= 1 ns in ASTRA-sim)")] = None,
    topology: Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)] = None,
    name: Annotated[str | None, typer.Option("--name", help="trace file prefix (default <algorithm>_<collective>)")] = None,
    tag_base: Annotated[int, typer.Option("--tag-base", min=0, max=2**30, help="first message tag (give concurrent collectives "
                                          "distinct tags)")] = 0,
    slices: Annotated[int, typer.Option("--slices", help="messages per transfer: each chunk is cut into this many "
                                        "slices, slice j waiting for slice j of the transfer's dependencies")] = 1,
    window: Annotated[int | None, typer.Option("--window", help="slices of a transfer in flight: slice j also "
                                               "waits until slice j-window has arrived (default: no limit)")] = None,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
) -> None:
    """Write Chakra ETs plus the workload, system, network and memory configs and run_astrasim.sh."""
    from synth.export.chakra import SIGNATURE, export_chakra
    from synth.fileio import check_output_folder

    check_output_folder(output, inputs=[schedule_file, topology] if topology else [schedule_file],
                        signature=SIGNATURE, kind="`synth export chakra` output")
    schedule = load_schedule(schedule_file, "streamed")
    topo = schedule_topology(schedule, topology, schedule_file)
    verify_file(schedule, topo, schedule_file)
    sizes = sizes_argument(size, ["1MiB"])
    report = export_chakra(schedule, topo, sizes, output, comp_duration_us, name, tag_base, slices, window)
    if as_json:
        print_json(report.to_dict())
        return
    for warning in report.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {shown(warning)}")
    rows = [[format_size(s.size), f"{s.folder}/{s.prefix}.<rank>.et", s.counts.get("COMM_SEND_NODE", 0),
             s.counts.get("COMP_NODE", 0) - s.order_nodes, s.order_nodes,
             "-" if s.predicted_ns is None else f"{s.predicted_ns} ns"]
            for s in report.sets]
    sliced = f", {slices} slices per transfer" + (f", {report.window} in flight" if report.window else "") \
        if slices > 1 else ""
    console.print(table(f"wrote {shown(output)}: {schedule.algorithm} {schedule.kind} on {topo.name} for ASTRA-sim"
                        f"{sliced}",
                        ["size", "traces", "sends", "COMP nodes", "ordering nodes", "astra model predicts"], rows,
                        {2, 3, 4, 5}))
    script = Path(output) / ("run_astrasim.sh" if len(report.sets) == 1 else f"{report.sets[0].folder}/run_astrasim.sh")
    checks = "checks every rank against the prediction" if any(s.predicted_ns is not None for s in report.sets) \
        else "no prediction to check it against: see NOTE.txt"
    every = f"; {shown(Path(output) / 'run_astrasim.sh')} runs every size" if len(report.sets) > 1 else ""
    console.print(f"run it: ASTRA_SIM=/path/to/{shown(report.command.split()[0])} bash {shown(script)}   ({checks}{every})")


@export_app.command("msccl")
def export_msccl_command(
    schedule_file: Annotated[str, typer.Argument(metavar="SCHEDULE", help="a synth.schedule JSON file")],
    output: Annotated[str, typer.Option("--output", "-o", help="XML file to write")],
    topology: Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)] = None,
    max_channels: Annotated[int, typer.Option("--max-channels", min=1, max=4096, help="most channels to use (runtime limit 32)")] = 32,
    max_tbs_per_channel: Annotated[int, typer.Option("--max-tbs-per-channel", min=1, max=4096,
                                                     help="threadblocks per channel per gpu (runtime limit 32)")] = 32,
    sms: Annotated[int, typer.Option("--sms", min=1, max=100_000, help="SMs per gpu: most threadblocks per gpu (A100: 108)")] = 108,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, max=1_000_000, help="steps per threadblock must stay below this "
                                           "(256; some MSCCL builds 64)")] = 256,
    max_gpus: Annotated[int, typer.Option("--max-gpus", min=1, max=1 << 20, help="most gpus the runtime's XML parser "
                                          "takes (MAX_SUBS: 1024)")] = 1024,
    parser_nodes: Annotated[int, typer.Option("--parser-nodes", min=4, max=1 << 30, help="nodes the runtime's XML parser "
                                              "holds per rank: <algo>, every <gpu>, the rank's <tb>s and <step>s "
                                              "(MAX_NODES: 4096)")] = 4096,
    proto: Annotated[str | None, typer.Option("--proto", help="Simple, LL or LL128; default the protocol the "
                                              "schedule pins (params.plan), else Simple")] = None,
    min_bytes: Annotated[str, typer.Option("--min-bytes", help="smallest message size the algorithm is used for")] = "0",
    max_bytes: Annotated[str, typer.Option("--max-bytes", help="message sizes below this use the algorithm")] = "1TiB",
    size: Annotated[str, typer.Option("--size", "-s", help="message size for the predicted time and the routing "
                                      "loss report")] = "1GiB",
    as_json: bool = JSON_OPTION,
) -> None:
    """Lower a schedule to MSCCL XML, checking every runtime limit before writing."""
    from synth.export.msccl import MscclLimits, export_msccl

    inputs = [schedule_file, topology]
    output_file(output, inputs=inputs)
    schedule = load_schedule(schedule_file)
    topo = schedule_topology(schedule, topology, schedule_file)
    verify_file(schedule, topo, schedule_file)
    low = 0 if min_bytes.strip() == "0" else parse_size(min_bytes, "--min-bytes")
    limits = MscclLimits(max_channels, max_tbs_per_channel, sms, max_steps, max_gpus=max_gpus, parser_nodes=parser_nodes)
    report_size = parse_size(size, "--size")
    high = parse_size(max_bytes, "--max-bytes")
    if low >= high:
        raise InputError("", "--min-bytes", f"expected less than --max-bytes ({high}), got {low}")
    program = export_msccl(schedule, output, topo, proto=proto, limits=limits, min_bytes=low, max_bytes=high)
    stats = program.stats()
    routing = program.routing
    predicted: Evaluation | None = None
    own: Evaluation | None = None
    # XML carries no slice size: a runtime streams the slices a schedule pins when its buffers are sized so
    slicing = {key: value for key, value in pinned(schedule.params).items() if key in ("slice_bytes", "window")}
    if routing is not None and routing.schedule is not None:
        from synth.evaluate import PlanOptions, evaluate

        predicted = evaluate(routing.schedule, topo, report_size, options=PlanOptions(**slicing))
        # the schedule itself under the program's plan: what the program's step order costs beside it
        plan = predicted.plan
        own = evaluate(schedule, topo, report_size,
                       options=PlanOptions(protocol=str(plan.protocol), slices=plan.slices, window=plan.window))
    if as_json:
        extra: dict[str, Any] = {} if routing is None else {"routing": routing.to_dict(report_size)}
        if predicted is not None and own is not None:
            extra["predicted"] = predicted.to_dict()
            extra["schedule_predicted_time_s"] = own.time_s
        if "slice_bytes" in slicing:
            extra["nccl_buffsize"] = slicing["slice_bytes"] * slicing.get("window", DEFAULT_WINDOW)
        print_json({"output": output, **stats, **extra})
        return
    console.print(f"wrote {shown(output)}: {shown(schedule.algorithm)} {schedule.kind} for MSCCL ({shown(program.coll)}, {shown(program.proto)}), "
                  f"{stats['channels']} channel(s), {stats['threadblocks']} threadblocks (at most "
                  f"{stats['max_tbs_per_gpu']} per gpu), {stats['steps']} steps (at most {stats['max_steps_per_tb']} "
                  "per threadblock)")
    if "slice_bytes" in slicing:
        window = slicing.get("window", DEFAULT_WINDOW)
        console.print(f"plan: the schedule streams {format_size(slicing['slice_bytes'])} slices, {window} in flight: run "
                      f"it with NCCL_BUFFSIZE={slicing['slice_bytes'] * window} (the runtime's buffer is {window} "
                      "slices); the predicted time assumes it")
    if routing is None:
        return
    planned = fmt_time(float(routing.planned * report_size))
    if routing.runtime is None:
        err_console.print(f"[yellow]warning:[/yellow] the runtime's paths are unknown: reading {output} back as the "
                          f"runtime would route it (XML names only the ends of a message) failed: {routing.problem}")
        return
    runtime = fmt_time(float(routing.runtime * report_size))
    time_text = ""
    if predicted is not None and own is not None:
        cost = predicted.time_s / own.time_s - 1 if own.time_s else 0.0
        time_text = (f"; predicted time {fmt_time(predicted.time_s)} ({predicted.model} model, "
                     f"{predicted.plan.describe()}), the schedule itself {fmt_time(own.time_s)} under that plan"
                     + (f" (its steps' order in threadblocks costs {cost:+.1%})" if abs(cost) >= 0.0005 else ""))
    if routing.loss > 0:
        err_console.print(f"[yellow]routing loss:[/yellow] XML names no routes, and the runtime takes its own path "
                          f"(shortest through switches and forwarding gpus, balanced) for {routing.rerouted} of {routing.transfers} "
                          f"transfers: at {format_size(report_size)} the congestion time is {runtime} instead of the "
                          f"schedule's {planned} (+{float(routing.loss):.1%}){time_text}")
    elif routing.rerouted:
        console.print(f"routing: the runtime takes other paths for {routing.rerouted} of {routing.transfers} transfers "
                      f"at no loss: congestion time {runtime} at {format_size(report_size)}{time_text}")
    else:
        console.print(f"routing: the runtime takes the schedule's own paths: congestion time {runtime} at "
                      f"{format_size(report_size)}{time_text}")


@export_app.command("mscclpp")
def export_mscclpp_command(
    schedule_file: Annotated[str, typer.Argument(metavar="SCHEDULE", help="a synth.schedule JSON file")],
    output: Annotated[str, typer.Option("--output", "-o", help="JSON execution plan to write")],
    topology: Annotated[str | None, typer.Option("--topology", "-t", help=TOPOLOGY_HELP)] = None,
    name: Annotated[str | None, typer.Option("--name", help="the plan's name (default synth_<algorithm>_<collective>)")] = None,
    protocol: Annotated[str, typer.Option("--protocol", help="Simple (the only protocol written: no packet ops)")] = "Simple",
    threads: Annotated[int, typer.Option("--threads", min=1, max=1024, help="threads per block")] = 1024,
    max_threadblocks: Annotated[int, typer.Option("--max-threadblocks", min=1, max=100_000,
                                                  help="threadblocks per gpu at most (SMs: 132 on an H100 SXM)")] = 132,
    min_bytes: Annotated[str, typer.Option("--min-bytes", help="smallest message size the plan is used for")] = "0",
    max_bytes: Annotated[str | None, typer.Option("--max-bytes", help="largest message size the plan is used for "
                                                  "(default: no limit)")] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Write an MSCCL++ JSON execution plan; in-switch operations become NVLS switch-channel ops (glres, gstore)."""
    from synth.export.mscclpp import MSCCLPP_DESCRIBE, MscclppLimits, plan_stats, write_mscclpp_plan

    output_file(output, inputs=[schedule_file, topology])
    schedule = load_schedule(schedule_file)
    topo = schedule_topology(schedule, topology, schedule_file)
    verify_file(schedule, topo, schedule_file)
    low = 0 if min_bytes.strip() == "0" else parse_size(min_bytes, "--min-bytes")
    high = 2**64 - 1 if max_bytes is None else parse_size(max_bytes, "--max-bytes")
    if low >= high:
        raise InputError("", "--min-bytes", f"expected less than --max-bytes ({high}), got {low}")
    plan = write_mscclpp_plan(schedule, topo, output, name=name, protocol=protocol, num_threads_per_block=threads,
                              min_message_size=low, max_message_size=high,
                              limits=MscclppLimits(max_threadblocks=max_threadblocks))
    stats = plan_stats(plan)
    if as_json:
        print_json({"output": output, "name": plan["name"], "mscclpp": MSCCLPP_DESCRIBE, **stats})
        return
    ops = ", ".join(f"{count} {op}" for op, count in stats["ops"].items() if op != "nop")
    console.print(f"wrote {shown(output)}: {shown(schedule.algorithm)} {schedule.kind} as MSCCL++ plan "
                  f"{shown(plan['name'])} ({MSCCLPP_DESCRIBE}), {stats['gpus']} gpus, {stats['threadblocks']} "
                  f"threadblocks, {stats['switch_channels']} switch channel(s); ops: {shown(ops)}")


@import_app.command("chakra")
def import_chakra_command(
    prefix: Annotated[str, typer.Argument(metavar="DIR/PREFIX", help="trace set <prefix>.<rank>.et (or its folder)")],
    topology: Annotated[str, typer.Option("--topology", "-t", help=IMPORT_TOPOLOGY_HELP)],
    output: Annotated[str, typer.Option("--output", "-o", help="schedule file to write")] = "schedule.json",
    collective: Annotated[str | None, typer.Option("--collective", "-c", help="the collective, when the traces do "
                                                   "not name it")] = None,
    as_json: bool = JSON_OPTION,
) -> None:
    """Read a per-rank Chakra ET set into a verified schedule."""
    from synth.export.chakra import import_chakra

    inputs = [topology, *_trace_files(prefix)]
    output_file(output, inputs=inputs)
    topo, spec = _import_topology(topology)
    schedule = import_chakra(prefix, topo, collective, topology_name=spec)
    report = verify_file(schedule, topo, prefix)
    write_schedule(schedule, topo, topology, output, inputs=inputs)
    _imported(output, schedule, topo, report.depth, as_json)


@import_app.command("msccl")
def import_msccl_command(
    xml_file: Annotated[str, typer.Argument(metavar="FILE.xml", help="MSCCL XML (MSCCLang, TACCL, ForestColl, synth)")],
    topology: Annotated[str, typer.Option("--topology", "-t", help=IMPORT_TOPOLOGY_HELP)],
    output: Annotated[str, typer.Option("--output", "-o", help="schedule file to write")] = "schedule.json",
    as_json: bool = JSON_OPTION,
) -> None:
    """Read MSCCL XML into a verified schedule (routes: shortest paths through switches only)."""
    from synth.export.msccl import import_msccl

    if not Path(xml_file).is_file():
        raise InputError(xml_file, "", "no such file")
    inputs = [xml_file, topology]
    output_file(output, inputs=inputs)
    topo, spec = _import_topology(topology)
    schedule = import_msccl(xml_file, topo, topology_name=spec)
    report = verify_file(schedule, topo, xml_file)
    write_schedule(schedule, topo, topology, output, inputs=inputs)
    _imported(output, schedule, topo, report.depth, as_json)


def _imported(output: str, schedule: Schedule, topo: Topology, depth: int, as_json: bool) -> None:
    if as_json:
        print_json({"output": output, "collective": schedule.kind.value, "chunks": schedule.chunks,
                    "transfers": len(schedule.transfers), "depth": depth, "topology": schedule.topology})
        return
    console.print(f"wrote {shown(output)}: {schedule.kind} with {schedule.chunks} chunks, {len(schedule.transfers)} "
                  f"transfers on {shown(topo.name)}, verified (dependency depth {depth})")


def _trace_files(prefix: str) -> list[str]:
    """The rank files of a Chakra trace set (inputs an output may not overwrite)."""
    folder, name = (Path(prefix), "") if Path(prefix).is_dir() else (Path(prefix).parent, Path(prefix).name)
    try:
        return [str(p) for p in folder.glob(f"{name}*.et")][:100_000] if folder.is_dir() else []
    except (OSError, ValueError):
        return []
