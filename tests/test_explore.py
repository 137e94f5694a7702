"""synth explain, synth draw, synth compare: summaries, pictures and the comparison table."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from fractions import Fraction

import defusedxml.ElementTree as SafeET
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from synth.algorithms import reads_as, synthesize
from synth.bounds import optimal_bound
from synth.cli import app
from synth.cli.common import VERBOSITY
from synth.collectives import Collective, Kind
from synth.compare import Row, best_rows, planned, run_all
from synth.draw import bottleneck_cut, draw_topology, layout, link_load, plot_compare, render, save_figure
from synth.errors import InputError, NotApplicable, VerificationError
from synth.evaluate import GIGA, PlanOptions, congestion
from synth.explain import compress, critical_path, explain, levels, trees
from synth.library import load_topology
from synth.plan import make_plan
from synth.routing import route
from synth.schedule import Schedule, ScheduleBuilder, Transfer
from synth.topology import Topology
from synth.verify import verify

runner = CliRunner()


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def boxed_topology() -> Topology:
    """Two boxes of 4 gpus on a box switch, each gpu with its own NIC, NICs on one of two rail switches."""
    gpus, switches, links, boxes = [], [], [], []
    for b in range(2):
        switches.append(f"nvs{b}")
        for i in range(4):
            gpu, nic = f"b{b}g{i}", f"b{b}nic{i}"
            gpus.append(gpu)
            boxes.append(b)
            switches.append(nic)
            links += [(gpu, f"nvs{b}", 100.0, 0.5), (gpu, nic, 25.0, 0.5), (nic, f"rail{i % 2}", 25.0, 1.0)]
    switches += ["rail0", "rail1"]
    return Topology.build("boxed", gpus, switches, links, boxes=boxes)


# ----------------------------------------------------------------------------------------- explain
def test_compress_ranges():
    assert compress([5, 0, 1, 2, 3, 9, 10]) == "0-3,5,9-10"
    assert compress([]) == ""


def test_explain_ring_allreduce_steps_and_critical_path():
    topo = load_topology("ring:n=6")
    schedule = synthesize(topo, "allreduce", "ring")
    verify(schedule, topo)
    size = 6 * 2**20
    summary = explain(schedule, topo, size=size, options=PlanOptions(protocol="ideal", slices=1))
    # 2(n-1) steps of n transfers each: reduce-scatter phase then allgather phase
    assert [s.transfers for s in summary.steps] == [6] * 10
    assert all(s.reduces == 6 for s in summary.steps[:5]) and all(s.copies == 6 for s in summary.steps[5:])
    assert summary.depth == 10
    # The critical path is one chunk's 10 hops; each costs α + chunk/bandwidth.
    path = summary.critical_path
    assert path.length == 10
    for earlier, later in zip(path.transfers, path.transfers[1:], strict=False):
        assert earlier in schedule.transfers[later].deps
    hop = schedule.transfers[0].path
    alpha = topo.path_latency(hop) * 1e-6
    beta = (size / 6) / (topo.bandwidth(*hop) * GIGA)
    assert path.latency_s == pytest.approx(10 * alpha, rel=1e-12)
    assert path.bandwidth_s == pytest.approx(10 * beta, rel=1e-12)
    # Every ring link carries the same load, so each listed link is at 100% of the busiest.
    assert summary.busiest_links and all(link.percent_of_busiest == 100.0 for link in summary.busiest_links)
    assert summary.busiest_links[0].chunks == 10
    exact = congestion(schedule, topo).seconds_per_byte * size
    assert summary.congestion_time_s == float(exact)
    assert summary.lower_bound_s == max(summary.congestion_time_s, path.time_s)
    # Per tree: each chunk is reduced into one rank (5 reduces), then spread from it (5 copies).
    assert sorted(t.root for t in summary.trees) == list(range(6))
    for tree in summary.trees:
        ops = [op for _, _, op in tree.edges]
        assert ops == ["reduce"] * 5 + ["copy"] * 5
        assert tree.edges[4][1] == tree.root == tree.edges[5][0]


def test_explain_trees_broadcast_and_allgather():
    topo = load_topology("switch:n=8")
    broadcast = synthesize(topo, "broadcast", "binomial", root=3)
    verify(broadcast, topo)
    (tree,) = trees(broadcast)
    assert tree.root == 3 and len(tree.edges) == 7 and tree.depth == 3  # binomial: log2(8) rounds
    assert {dst for _, dst, _ in tree.edges} == set(range(8)) - {3}
    ring = synthesize(topo, "allgather", "ring")
    found = trees(ring)
    assert sorted(t.root for t in found) == list(range(8))
    assert all(len(t.edges) == 7 and t.depth == 7 for t in found)
    assert reads_as(explain(broadcast, topo).algorithm) == "tree"
    assert reads_as(explain(ring, topo).algorithm) == "step" == reads_as("imported-by-hand")


def test_explain_json_round_trips():
    topo = load_topology("switch:n=4")
    schedule = synthesize(topo, "alltoall", "direct")
    data = json.loads(json.dumps(explain(schedule, topo, size=2**20).to_dict()))
    assert data["transfers"] == len(schedule.transfers) == 12
    assert sum(s["transfers"] for s in data["steps"]) == 12
    assert data["critical_path"]["transfers"] and data["lower_bound_s"] > 0


def test_levels_reject_a_cycle():
    coll = Collective(Kind.BROADCAST, 2, 1, root=0)
    cyclic = Schedule(coll, "pair", ("a", "b"), "manual", {}, (
        Transfer(0, 0, 1, 0, "copy", ("a", "b"), (1,)), Transfer(1, 1, 0, 0, "copy", ("b", "a"), (0,))))
    with pytest.raises(VerificationError, match="cycle"):
        levels(cyclic)


@st.composite
def random_topologies(draw):
    """Random connected topologies with 2-6 gpus and 0-2 switches (bidirectional links)."""
    num_gpus = draw(st.integers(2, 6))
    num_switches = draw(st.integers(0, 2))
    nodes = [f"g{i}" for i in range(num_gpus)] + [f"s{i}" for i in range(num_switches)]
    order = draw(st.permutations(nodes))
    links = []
    for index in range(1, len(order)):
        links.append((order[index], order[draw(st.integers(0, index - 1))],
                      draw(st.sampled_from([10.0, 12.5, 25.0, 50.0])), draw(st.sampled_from([0.0, 0.5, 2.0]))))
    for _ in range(draw(st.integers(0, 3))):
        a, b = draw(st.sampled_from(order)), draw(st.sampled_from(order))
        if a != b:
            links.append((a, b, draw(st.sampled_from([10.0, 25.0])), 0.5))
    return Topology.build("random", [n for n in nodes if n.startswith("g")], [n for n in nodes if n.startswith("s")],
                          links)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=random_topologies(), kind=st.sampled_from(["allgather", "allreduce", "alltoall", "broadcast"]),
       size=st.sampled_from([1024, 2**20, 2**30]))
def test_explain_properties_on_random_topologies(topo, kind, size):
    algorithm = {"allgather": "ring", "allreduce": "ring", "alltoall": "direct", "broadcast": "binomial"}[kind]
    try:
        schedule = synthesize(topo, kind, algorithm)
    except NotApplicable:
        return
    report = verify(schedule, topo)
    summary = explain(schedule, topo, size=size)
    assert summary.depth == report.depth  # both count the transfers on the longest dependency chain
    assert sum(s.transfers for s in summary.steps) == len(schedule.transfers)
    assert sum(len(t.edges) * len(t.chunks) for t in summary.trees) == len(schedule.transfers)
    level = levels(schedule)
    for t in schedule.transfers:
        assert all(level[d] < level[t.id] for d in t.deps)
    path = critical_path(schedule, topo, size)
    assert all(a in schedule.transfers[b].deps for a, b in zip(path.transfers, path.transfers[1:], strict=False))
    assert path.time_s == pytest.approx(path.latency_s + path.bandwidth_s, rel=1e-9)
    # No chain of deps is longer in time than the critical path.
    chunk = schedule.collective.chunk_bytes(size)
    single = max(topo.path_latency(t.path) * 1e-6 + chunk / (min(topo.bandwidth(u, v) for u, v in
                 zip(t.path, t.path[1:], strict=False)) * GIGA) for t in schedule.transfers)
    assert path.time_s >= single * (1 - 1e-12)
    busiest = summary.busiest_links[0]
    worst = congestion(schedule, topo).seconds_per_byte
    assert Fraction(busiest.seconds).limit_denominator(10**15) == pytest.approx(float(worst * size), rel=1e-12)


# -------------------------------------------------------------------------------------------- draw
def test_layout_places_every_node_deterministically():
    for topo in (boxed_topology(), load_topology("ring:n=5"), load_topology("switch:n=6")):
        first, second = layout(topo), layout(topo)
        assert first == second
        assert set(first) == set(topo.graph.nodes)
        assert len(set(first.values())) == len(first), "two nodes share a position"


def test_box_layout_groups_boxes_and_tiers():
    topo = boxed_topology()
    pos = layout(topo)
    box0 = [pos[f"b0g{i}"][0] for i in range(4)]
    box1 = [pos[f"b1g{i}"][0] for i in range(4)]
    assert max(box0) < min(box1), "box 0 is drawn left of box 1"
    # NICs above their gpu, the box switch below the gpus, rail switches above everything in the boxes
    assert pos["b0nic2"][0] == pos["b0g2"][0] and pos["b0nic2"][1] > pos["b0g2"][1]
    assert pos["nvs0"][1] < pos["b0g0"][1]
    assert min(pos["rail0"][1], pos["rail1"][1]) > max(pos[f"b{b}nic{i}"][1] for b in range(2) for i in range(4))


def test_draw_png_and_svg_are_real_images(tmp_path):
    topo = boxed_topology()
    figure = draw_topology(topo)
    png = tmp_path / "topo.png"
    save_figure(figure, png)
    width, height = png_size(png.read_bytes())
    assert width >= 500 and height >= 250
    svg = tmp_path / "topo.svg"
    save_figure(figure, svg)
    root = SafeET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert render(draw_topology(topo), "png") == render(draw_topology(topo), "png"), "same input, same bytes"
    assert render(draw_topology(topo), "svg") == render(draw_topology(topo), "svg")
    with pytest.raises(InputError, match="^fmt: expected png or svg"):
        render(figure, "jpg")


def test_link_load_and_schedule_drawing(tmp_path):
    topo = boxed_topology()
    schedule = synthesize(topo, "allgather", "ring")
    verify(schedule, topo)
    load = link_load(schedule, topo)
    assert max(load.values()) == 100.0 and min(load.values()) > 0
    report = congestion(schedule, topo)
    u, v, _ = report.busiest_links[0]
    assert load[(u, v) if (u, v) in load else (v, u)] == 100.0
    cut = frozenset({f"b0g{i}" for i in range(4)} | {f"b0nic{i}" for i in range(4)} | {"nvs0"})
    figure = draw_topology(topo, schedule=schedule, cut=cut)
    legend = [text.get_text() for ax in figure.axes if ax.get_legend() for text in ax.get_legend().get_texts()]
    assert any("bottleneck cut S (ringed): 4 gpus" in text and "100 GB/s leave S" in text for text in legend)
    # When S is the larger side, the smaller side is ringed and the legend says so.
    big = frozenset(topo.graph.nodes) - {"b0g0"}
    figure = draw_topology(topo, schedule=schedule, cut=big)
    legend = [text.get_text() for ax in figure.axes if ax.get_legend() for text in ax.get_legend().get_texts()]
    assert any("all but the ringed" in text and "7 gpus, 125 GB/s leave S" in text for text in legend), legend
    out = tmp_path / "load.png"
    save_figure(figure, out)
    assert png_size(out.read_bytes())[0] >= 500


def test_bottleneck_cut_is_the_bound_cut():
    topo = boxed_topology()
    cut = bottleneck_cut(topo)
    gpus_in = [g for g in topo.gpus if g in cut]
    assert 0 < len(gpus_in) < topo.num_ranks
    # Counted here from the links: 7 gpus and every switch inside S; only b0g0's links into S leave it.
    egress = sum(data["bandwidth"] for u, v, data in topo.graph.edges(data=True) if u in cut and v not in cut)
    assert egress == 125 and gpus_in == [g for g in topo.gpus if g != "b0g0"]
    assert optimal_bound(topo).cut_egress_GBps == egress


def test_draw_trees_one_panel_per_route(tmp_path):
    topo = load_topology("switch:n=3")
    ring = synthesize(topo, "allgather", "ring", chunks=6)
    titles = [ax.get_title() for ax in draw_topology(topo, schedule=ring, tree_root=1).axes]
    assert titles == ["tree 1: chunks 2-3, 2 transfers, depth 2"], "chunks on one route share a panel"
    # Two trees from root 0 (0->1->2 and 0->2->1), one chain each from roots 1 and 2.
    builder = ScheduleBuilder(Collective(Kind.ALLGATHER, 3, 6), topo.name, topo.gpus, "manual")
    ends = {(a, b): route(topo, a, b) for a in range(3) for b in range(3) if a != b}
    first = builder.add(0, 1, 0, ends[0, 1])
    builder.add(1, 2, 0, ends[1, 2], deps=[first])
    first = builder.add(0, 2, 1, ends[0, 2])
    builder.add(2, 1, 1, ends[2, 1], deps=[first])
    for chunk, (a, b, c) in {2: (1, 2, 0), 3: (1, 2, 0), 4: (2, 0, 1), 5: (2, 0, 1)}.items():
        first = builder.add(a, b, chunk, ends[a, b])
        builder.add(b, c, chunk, ends[b, c], deps=[first])
    schedule = builder.build()
    verify(schedule, topo)
    figure = draw_topology(topo, schedule=schedule, tree_root=0)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == ["tree 1: chunks 0, 2 transfers, depth 2", "tree 2: chunks 1, 2 transfers, depth 2"]
    save_figure(figure, tmp_path / "trees.png")
    with pytest.raises(InputError, match="needs a schedule"):
        draw_topology(topo, tree_root=0)
    with pytest.raises(InputError, match="root rank"):
        draw_topology(topo, schedule=schedule, tree_root=9)


def test_plot_compare_has_a_line_per_algorithm_and_the_bound(tmp_path):
    plan = make_plan(1, 2**20, "Simple")
    rows = [Row(a, "allgather", s, s / (bw * 1e9), bw, 1.0, 1.0, 0.01, plan, s / 80e9, "optimum")
            for a, bw in (("ring", 40.0), ("direct", 60.0)) for s in (2**20, 2**25, 2**30)]
    figure = plot_compare(rows, title="t")
    (ax,) = figure.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["direct", "ring", "optimum (links only)"]
    assert list(ax.get_lines()[-1].get_ydata()) == pytest.approx([80.0] * 3)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_lines()[-1].get_linestyle() == "--"
    save_figure(figure, tmp_path / "plot.svg")
    assert SafeET.parse(tmp_path / "plot.svg").getroot().tag.endswith("svg")


# ------------------------------------------------------------------------------------------ compare
def test_run_all_keep_going_records_failures(monkeypatch):
    from synth.algorithms import REGISTRY, register

    register("broken-for-test", "synth.no_such_module:fn", {Kind.ALLGATHER}, "test")
    try:
        topo = load_topology("switch:n=4")
        rows, skipped, _ = run_all(topo, [Kind.ALLGATHER], [2**20], keep_going=True)
        assert any(s.algorithm == "broken-for-test" and "ModuleNotFoundError" in s.reason for s in skipped)
        assert {r.algorithm for r in rows} >= {"ring", "direct"}
        with pytest.raises(ImportError):
            run_all(topo, [Kind.ALLGATHER], [2**20], algorithms=["broken-for-test"])
    finally:
        REGISTRY.pop("broken-for-test")


def test_planned_leaves_out_slow_solvers_unless_named():
    from synth.algorithms import REGISTRY, register

    register("milp", "synth.no_such_module:fn", {Kind.ALLGATHER}, "test") if "milp" not in REGISTRY else None
    names = [name for _, name in planned([Kind.ALLGATHER], None, include_slow=False)]
    assert "milp" not in names and "ring" in names
    assert [name for _, name in planned([Kind.ALLGATHER], ["milp"], include_slow=False)] == ["milp"]
    if REGISTRY["milp"].target == "synth.no_such_module:fn":
        REGISTRY.pop("milp")


def test_best_rows_one_per_collective_and_size():
    plan = make_plan(1, 1, "ideal")
    rows = [Row("a", "allgather", 1, 1.0, 10.0, 1.0, 1.0, 0.0, plan), Row("b", "allgather", 1, 1.0, 20.0, 1.0, 1.0, 0.0, plan),
            Row("a", "allgather", 2, 1.0, 30.0, 1.0, 1.0, 0.0, plan), Row("b", "allgather", 2, 1.0, 30.0, 1.0, 1.0, 0.0, plan)]
    assert best_rows(rows) == {("allgather", 1, "b"), ("allgather", 2, "a")}


# -------------------------------------------------------------------------------------------- CLI
@pytest.fixture(autouse=True)
def _reset_verbosity():
    yield
    VERBOSITY["level"] = 1


def test_cli_compare_json_and_plot(tmp_path):
    plot = tmp_path / "cmp.png"
    result = runner.invoke(app, ["compare", "switch:n=4", "-c", "allgather", "-c", "allreduce", "-s", "1MiB",
                                 "-s", "1GiB", "-a", "ring", "-a", "direct", "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    keys = {(r["collective"], r["size"]) for r in data["rows"]}
    assert keys == {("allgather", 2**20), ("allgather", 2**30), ("allreduce", 2**20), ("allreduce", 2**30)}
    for key in keys:
        assert sum(1 for r in data["rows"] if (r["collective"], r["size"]) == key and r["best"]) == 1
    assert {r["algorithm"] for r in data["rows"]} == {"ring", "direct", "nccl"}  # nccl: the baseline, always run
    assert png_size(plot.read_bytes())[0] >= 400


def test_cli_compare_table_marks_best():
    result = runner.invoke(app, ["compare", "switch:n=4", "-c", "allgather", "-s", "1MiB", "-a", "ring",
                                 "-a", "direct", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "* direct" in result.stdout or "* ring" in result.stdout
    assert "synthesis" in result.stdout


def test_cli_draw_and_explain(tmp_path):
    schedule_file = tmp_path / "s.json"
    result = runner.invoke(app, ["generate", "ring:n=4", "-c", "allgather", "-a", "ring", "-o", str(schedule_file)])
    assert result.exit_code == 0, result.output
    picture = tmp_path / "load.svg"
    result = runner.invoke(app, ["draw", "ring:n=4", "--schedule", str(schedule_file), "-o", str(picture), "-q"])
    assert result.exit_code == 0, result.output
    assert SafeET.parse(picture).getroot().tag.endswith("svg")
    trees_png = tmp_path / "trees.png"
    result = runner.invoke(app, ["draw", "ring:n=4", "--schedule", str(schedule_file), "--tree", "2",
                                 "-o", str(trees_png)])
    assert result.exit_code == 0, result.output
    assert png_size(trees_png.read_bytes())[0] >= 300
    result = runner.invoke(app, ["explain", str(schedule_file), "-s", "4MiB"])
    assert result.exit_code == 0, result.output
    assert "per step" in result.stdout and "busiest links" in result.stdout and "critical path: 3" in result.stdout
    result = runner.invoke(app, ["explain", str(schedule_file), "--by", "tree", "--json"])
    data = json.loads(result.stdout)
    assert len(data["trees"]) == 4 and data["depth"] == 3


def test_cli_errors_are_one_line(tmp_path):
    script = "from synth.cli import main; main()"
    cases = [
        (["draw", "ring:n=4", "-o", str(tmp_path / "x.jpg")], "expected a file name ending in .png or .svg"),
        (["draw", "ring:n=4", "--tree", "0"], "needs a schedule"),
        (["explain", str(tmp_path / "missing.json")], "no such file"),
        (["compare", "ring:n=4", "-a", "nope"], "unknown algorithm 'nope'"),
    ]
    for args, message in cases:
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=tmp_path,
                              timeout=120)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_every_shipped_topology_draws(tmp_path):
    from synth.library import shipped

    names = shipped()
    assert len(names) >= 9
    for name in names:
        out = tmp_path / f"{name}.png"
        save_figure(draw_topology(load_topology(name)), out)
        width, height = png_size(out.read_bytes())
        assert width >= 300 and height >= 200, name
