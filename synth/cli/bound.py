"""``synth bound``: the exact optimal allgather time of a topology and the cut that limits it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from synth.cli.common import (
    CSV_OPTION,
    DEMAND_HELP,
    GROUP_HELP,
    JSON_OPTION,
    SHARDS_HELP,
    TOPOLOGY_HELP,
    check_bound_work,
    console,
    demand_argument,
    fmt_time,
    group_argument,
    print_json,
    shards_argument,
    shown,
    table,
    topology_argument,
)
from synth.collectives import Kind, parse_kind

if TYPE_CHECKING:
    from synth.bounds import TimeBound
    from synth.topology import Topology

#: Names listed per group before the rest are summarized (``--json`` lists everything).
SHOWN = 16
#: Up to this many gpus ``bound`` also proves the allreduce lower bound (2(N-1) max-flows: about 3 s at
#: 2,048 gpus, minutes at 16,384).
ALLREDUCE_BOUND_MAX_GPUS = 2048


def register(app: typer.Typer) -> None:
    """Add ``bound`` to ``app``."""
    app.command("bound")(bound)


def _names(items: tuple[str, ...] | list[str]) -> str:
    if not items:
        return "(none)"
    shown = ", ".join(items[:SHOWN])
    return shown + (f", ... ({len(items) - SHOWN} more)" if len(items) > SHOWN else "")


def bound(
    topology: Annotated[str, typer.Argument(help=TOPOLOGY_HELP)],
    max_trees_per_root: Annotated[int | None, typer.Option(
        "--max-trees-per-root", "-K", min=1,
        help="also report the best rate with at most K trees per root and its gap to the optimum")] = None,
    collective: Annotated[str, typer.Option(
        "--collective", "-c", help="allgather (default: the exact tree bound, AG/RS/AR), alltoall "
                                   "(the max concurrent flow LP optimum beside the best cut bound) or alltoallv "
                                   "(the same for --demand)")] = "allgather",
    demand: Annotated[str | None, typer.Option("--demand", help=DEMAND_HELP)] = None,
    shards: Annotated[str | None, typer.Option("--shards", help=SHARDS_HELP + " (-c allgather or reducescatter)")] = None,
    chunks: Annotated[int | None, typer.Option("--chunks", "-k", min=1,
                                               help="alltoallv: round the demand to this many chunks in all")] = None,
    no_switch_reduction: Annotated[bool, typer.Option(
        "--no-switch-reduction",
        help="treat every switch as passive (no in-switch reduction or multicast: NVLS, SHARP), as if the "
             "topology declared no switch capabilities")] = False,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
    group: Annotated[str | None, typer.Option("--group", "-g", help=GROUP_HELP)] = None,
) -> None:
    """Exact optimal allgather time per byte, optimal algbw for AG/RS/AR (AR as RS then AG, beside the
    proven allreduce ceiling that ``compare`` rates against), the (U, k) trees it needs, and
    the bottleneck cut: the gpus and switches whose egress links limit everyone ("why is my fabric slow").
    With ``--collective alltoall``: the optimal alltoall algbw (an LP) and the best cut bound beside it;
    ``--collective alltoallv --demand FILE``: the same for that demand (algbw with n = the whole demand);
    ``--shards`` (allgather or reducescatter): the exact optimum with those uneven shards and its cut.
    The bounds are for the fabric as described, switch capabilities included (the allreduce bound rises
    where switches reduce); ``--no-switch-reduction`` gives the passive-switch figures."""
    from synth.algorithms.forest.plan import unbalanced_switches
    from synth.bounds import algbw_bound, limited_trees, optimal_bound
    from synth.library.achievable import line_rate

    given = group_argument(topology_argument(topology), group)
    topo = line_rate(given)  # a bound the hardware cannot beat
    if topo is not given and not as_json:
        console.print(f"[dim]bounds at the links' line rates: {shown(given.name)}'s achievable rates model what a "
                      "runtime reaches, not what the links allow[/dim]")
    topo = topo.passive() if no_switch_reduction else topo
    kind = parse_kind(collective, field="--collective")
    chunked = demand_argument(demand, kind, topo, chunks)
    if _other_bound(topo, kind, shards_argument(shards, kind, topo), chunked, demand, as_json):
        return
    check_bound_work(topo, "the exact bound", quotient=True)
    result = optimal_bound(topo)
    broadcast = algbw_bound(topo, Kind.BROADCAST)
    limited = limited_trees(topo, max_trees_per_root) if max_trees_per_root else None
    allreduce_bound = _allreduce_bound(topo)
    allreduce = None if allreduce_bound is None else allreduce_bound.bandwidth_algbw_GBps()
    if as_json:
        data = result.to_dict()
        data["allreduce_bound_algbw_GBps"] = allreduce
        data["allreduce_bound_argument"] = None if allreduce_bound is None else _binding(allreduce_bound)
        data["switch_capabilities"] = {name: caps.to_dict() for name, caps in topo.capabilities.items()}
        data["broadcast_algbw_GBps_root0"] = broadcast
        data["group"] = list(topo.gpus) if group is not None else None  # the members, in rank order
        data["unbalanced_switches"] = [{"switch": name, "ingress_GBps": str(inward), "egress_GBps": str(outward)}
                                       for name, inward, outward in unbalanced_switches(topo)]
        if limited is not None:
            data["limited"] = {"max_trees_per_root": limited.max_trees_per_root,
                               "trees_per_root": limited.trees_per_root, "rate_per_gpu_GBps": str(limited.rate_GBps),
                               "allgather_algbw_GBps": limited.algbw_GBps, "gap_percent": limited.gap_percent}
        print_json(data)
        return

    n = result.num_ranks
    spb = result.seconds_per_byte
    console.print(f"[bold]{shown(topo.name)}[/bold]: {n} gpus, {len(topo.switches)} switches "
                  f"(exact, {result.flows} max-flows, {result.seconds:.3f} s)")
    rows = [
        ["allgather time per byte of output", f"{spb} s/B", f"{float(spb) * 1e12:.6g} ps/B"],
        ["allgather algbw", f"{result.algbw_GBps:.2f} GB/s", f"= {n} x {result.rate_GBps} GB/s per gpu"],
        ["reducescatter algbw", f"{result.reducescatter_algbw_GBps:.2f} GB/s", "reversed links"],
        ["allreduce algbw", f"{result.allreduce_algbw_GBps:.2f} GB/s", "reducescatter then allgather"],
        ["allreduce bound", f"{allreduce:.2f} GB/s" if allreduce else "-", _allreduce_note(result.allreduce_algbw_GBps,
                                                                                           allreduce)],
        ["broadcast algbw (root 0)", f"{broadcast:.2f} GB/s" if broadcast else "-", "min cut from the root"],
        ["trees (k per root)", f"k = {result.trees_per_root}", f"{n * result.trees_per_root} trees in all"],
        ["link load (U)", f"U = {result.trees_per_unit}",
         f"trees per {result.tree_unit_GBps} GB/s of link (1/x* = U/(k g))"],
    ]
    if limited is not None:
        rows.append([f"with at most {limited.max_trees_per_root} trees per root",
                     f"{limited.algbw_GBps:.2f} GB/s",
                     f"k = {limited.trees_per_root}, {limited.gap_percent:.2f}% below the optimum"])
    console.print(table("optimum", ["quantity", "value", "note"], rows))
    _print_switches(topo, no_switch_reduction)
    if allreduce_bound is not None:
        console.print(f"allreduce bound argument: {_binding(allreduce_bound)}")

    inside = len(result.cut_gpus)
    console.print(f"[bold]bottleneck cut S[/bold]: {inside} of {n} gpus and {len(result.cut_switches)} switches. "
                  f"The {inside} shards owned inside S must all reach the {n - inside} gpu(s) outside through "
                  f"{result.cut_egress_GBps} GB/s of links: {result.rate_GBps} GB/s per shard.")
    outside = [g for g in topo.gpus if g not in set(result.cut_gpus)]
    console.print(f"  gpus in S:       {shown(_names(result.cut_gpus))}")
    console.print(f"  gpus outside S:  {shown(_names(outside))}")
    console.print(f"  switches in S:   {shown(_names(result.cut_switches))}")
    link_rows = [[u, v, f"{b:g}"] for u, v, b in result.cut_links[:SHOWN]]
    title = f"links leaving S ({len(result.cut_links)})"
    console.print(table(title, ["from (in S)", "to (outside)", "GB/s"], link_rows, {2}))
    if len(result.cut_links) > SHOWN:
        console.print(f"  ... and {len(result.cut_links) - SHOWN} more (use --json)")
    console.print("Every byte the gpus in S own must cross these links at least once; adding bandwidth "
                  "anywhere else cannot speed up allgather.")
    for name, inward, outward in unbalanced_switches(topo)[:8]:
        console.print(f"[yellow]note[/yellow]: switch {shown(name)} receives {inward} GB/s but sends {outward} GB/s; "
                      "point-to-point trees cannot copy, so this bound may not be reachable")


def _other_bound(topo: Topology, kind: Kind, weights: tuple[int, ...] | None, chunked: Any, demand: str | None,
                 as_json: bool) -> bool:
    """Print the bound of uneven shards, alltoallv or alltoall when asked for; False for the tree bound."""
    if weights is not None:
        check_bound_work(topo, "the exact bound")
        _sharded(topo, kind, weights, as_json)
    elif kind == Kind.ALLTOALLV:
        check_bound_work(topo, "the alltoallv bound")
        _alltoallv(topo, chunked, demand, as_json)
    elif kind == Kind.ALLTOALL:
        check_bound_work(topo, "the alltoall bound")
        _alltoall(topo, as_json)
    else:
        return False
    return True


def _sharded(topo: Topology, kind: Kind, weights: tuple[int, ...], as_json: bool) -> None:
    """``synth bound TOPO -c allgather --shards ...``: the exact optimum with uneven shards and its cut."""
    from synth.bounds import shard_bound

    result = shard_bound(topo, kind, weights)
    if as_json:
        print_json(result.to_dict())
        return
    total = sum(weights)
    rows = [[f"{kind} time per byte of the whole buffer", f"{result.seconds_per_byte} s/B",
             f"{float(result.seconds_per_byte) * 1e12:.6g} ps/B"],
            [f"{kind} algbw", f"{result.algbw_GBps:.2f} GB/s", f"shards {', '.join(map(str, weights))} (of {total})"],
            ["bottleneck cut", _names(list(result.cut_gpus)),
             f"{result.cut_weight}/{total} of the data behind {result.cut_egress_GBps} GB/s"]]
    console.print(f"[bold]{shown(topo.name)}[/bold]: {topo.num_ranks} gpus, uneven shards (exact)")
    console.print(table(None, ["quantity", "value", "detail"], rows))
    side = "leave" if kind == Kind.ALLGATHER else "enter (on the reversed links)"
    console.print(f"[dim]every byte owned by the cut's gpus must {side} it; `synth generate -a forest --shards` reaches it.[/dim]")


def _allreduce_bound(topo: Topology) -> TimeBound | None:
    """The proven allreduce bound (:func:`synth.bounds.time_bound` on the fabric as described; what
    ``compare`` rates allreduce against), or None above :data:`ALLREDUCE_BOUND_MAX_GPUS` gpus."""
    from synth.bounds import time_bound

    if topo.num_ranks > ALLREDUCE_BOUND_MAX_GPUS:
        return None
    return time_bound(topo, Kind.ALLREDUCE)


def _binding(bound: TimeBound) -> str:
    """The argument of the bound's largest bandwidth term."""
    return max(bound.terms, key=lambda term: term.seconds_per_byte).argument


def _print_switches(topo: Topology, passive: bool) -> None:
    """One line on what the switches do, which the bounds take into account."""
    reducing = [s for s in topo.switches if topo.reduction(s) is not None]
    copying = [s for s in topo.switches if topo.multicasts(s)]
    if passive:
        console.print("switches: passive (--no-switch-reduction: no in-switch reduction or multicast)")
    elif not reducing and not copying:
        console.print("switches: passive (the topology declares no switch capabilities)")
    else:
        console.print(f"switches: {len(reducing)} reduce ({shown(_names(reducing))}), {len(copying)} multicast; "
                      "the allreduce bound counts in-switch reduction (--no-switch-reduction for passive "
                      "switches); allgather and reduce-scatter cut bounds hold unchanged")


def _allreduce_note(series_GBps: float, bound_GBps: float | None) -> str:  # noqa: N803
    if bound_GBps is None:
        return f"not computed above {ALLREDUCE_BOUND_MAX_GPUS:,} gpus"
    if bound_GBps <= series_GBps * (1 + 1e-9):
        return "proven ceiling: reducescatter then allgather reaches it"
    return (f"proven, not known to be tight; reducescatter then allgather reaches at most "
            f"{series_GBps / bound_GBps:.1%} of it")


def _alltoall(topo: Topology, as_json: bool) -> None:
    """``synth bound TOPO -c alltoall``: the LP optimum and the best cut bound beside it."""
    from synth.bounds import alltoall_bound

    result = alltoall_bound(topo)
    if as_json:
        print_json(result.to_dict())
        return
    cut = result.cut
    n = result.num_ranks
    kind = "every gpu subset" if cut.exhaustive else f"{cut.candidates} candidate gpu sets"
    console.print(f"[bold]{shown(topo.name)}[/bold]: {n} gpus, {len(topo.switches)} switches "
                  f"(alltoall, {result.solve_s:.3f} s)")
    rows = [
        ["optimal alltoall algbw (LP)", f"{result.lp_algbw_GBps:.4f} GB/s",
         "max concurrent flow, every ordered pair n/N bytes, gpus may relay"],
        ["best cut bound", f"{float(cut.algbw_GBps):.4f} GB/s",
         f"= {n} x {cut.egress_GBps} / ({len(cut.gpus)} x {n - len(cut.gpus)}) exactly, over {kind}"],
        ["cut bound above the LP", f"{100 * result.gap:.2f}%",
         "0 when the bottleneck is a cut" if abs(result.gap) < 1e-9 else "the cut bound is not tight here"],
    ]
    console.print(table("alltoall", ["quantity", "value", "note"], rows))
    console.print(f"  gpus in the cut:  {shown(_names([topo.gpus[r] for r in cut.gpus]))}")


def _alltoallv(topo: Topology, chunked: Any, path: str | None, as_json: bool) -> None:
    """``synth bound TOPO -c alltoallv --demand FILE``: the LP optimum for the demand, its time at the
    demand's size (a bytes demand) and the cut that comes closest to limiting it."""
    from synth.bounds import alltoall_bound
    from synth.demand import as_chunk_matrix

    matrix = as_chunk_matrix(chunked, topo.num_ranks)
    result = alltoall_bound(topo, matrix)
    total = sum(map(sum, matrix))
    size = chunked.unit_per_chunk * total if chunked is not None and chunked.unit == "bytes" else None
    cut = result.cut
    inside = set(cut.gpus)
    crossing = sum(matrix[s][d] for s in cut.gpus for d in range(topo.num_ranks) if d not in inside)
    if as_json:
        data = result.to_dict()
        data.update(demand_file=path, chunks=total, cut_crossing_chunks=crossing,
                    rounding=None if chunked is None else chunked.to_dict(),
                    size_bytes=size, time_s=None if size is None else size / (result.lp_algbw_GBps * 1e9))
        print_json(data)
        return
    kind = "every gpu subset" if cut.exhaustive else f"{cut.candidates} candidate gpu sets"
    console.print(f"[bold]{shown(topo.name)}[/bold]: {result.num_ranks} gpus, {len(topo.switches)} switches "
                  f"(alltoallv, {total:,} chunks, {result.solve_s:.3f} s)")
    rows = [
        ["optimal alltoallv algbw (LP)", f"{result.lp_algbw_GBps:.4f} GB/s",
         "max concurrent flow, each pair its share of the demand, gpus may relay; n = the whole demand"],
        ["best cut bound", f"{float(cut.algbw_GBps):.4f} GB/s",
         f"= {total} x {cut.egress_GBps} / {crossing} exactly, over {kind}"],
        ["cut bound above the LP", f"{100 * result.gap:.2f}%",
         "0 when the bottleneck is a cut" if abs(result.gap) < 1e-9 else "the cut bound is not tight here"],
    ]
    if size is not None:
        rows.append(["optimal time for the demand", fmt_time(size / (result.lp_algbw_GBps * 1e9)),
                     f"{size:,.0f} bytes in all"])
    console.print(table("alltoallv", ["quantity", "value", "note"], rows))
    console.print(f"[bold]bottleneck cut S[/bold]: {len(cut.gpus)} of {result.num_ranks} gpus. {crossing:,} of the "
                  f"{total:,} chunks ({100 * crossing / total:.1f}%) go from S to the gpus outside, through "
                  f"{cut.egress_GBps} GB/s of links leaving S.")
    console.print(f"  gpus in the cut:  {shown(_names([topo.gpus[r] for r in cut.gpus]))}")
