"""Pictures: topologies (with schedule load, the bottleneck cut, or one root's trees) and algbw plots.

Everything draws on a plain :class:`matplotlib.figure.Figure` with the Agg canvas, so no GUI backend and
no pyplot global state are involved; :func:`save_figure` writes PNG or SVG atomically and
deterministically (no dates or random ids in the file).

Layout
------
- With ``topology.boxes``: one panel per box, gpus in rows of up to 8; switches private to a box sit
  inside it (uplinks such as per-gpu NICs above their gpu, hubs such as NVSwitch below the gpus);
  switches shared by several boxes form tiers above the boxes, each placed over the middle of what it
  connects.
- Without boxes, with switches: gpus in a row, switches in tiers above by hop distance from the gpus.
- Without switches: 2-D and 3-D dimensioned systems (tori, TPU slices) by their coordinates: dimension 0
  across, dimension 1 down, and for 3-D the layers of dimension 2 in depth, each shifted up and right (up to
  4 layers; more get one panel per layer, side by side); otherwise a circle in rank order.

Link width grows with the square root of bandwidth (GB/s, per direction; the larger direction is drawn).
On a dimensioned system links are coloured by dimension; a torus's wrap-around links (and other links
that skip nodes) are drawn as dashed arcs (rounded brackets) in the space between rows or columns, and links of
dimension 2 that join panels as arcs below their row, so no link runs hidden under a node.

Examples
--------
>>> from synth.library import load_topology
>>> figure = draw_topology(load_topology("switch:n=4"))
>>> len(figure.axes) >= 1
True
"""

from __future__ import annotations

import functools
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.cm
import matplotlib.colors
import matplotlib.ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from synth.errors import InputError
from synth.evaluate import congestion
from synth.fileio import atomic_write_bytes
from synth.schedule import REDUCE, Schedule
from synth.topology import Topology

Position = dict[str, tuple[float, float]]

GPU_COLOR = "#3b6ea5"
SWITCH_COLOR = "#7f7f7f"
LINK_COLOR = "#9aa5b1"
CUT_COLOR = "#d62728"
BOX_COLOR = "#eef2f7"
#: Above this many nodes, node labels are left out (they would overlap).
LABEL_LIMIT = 160
#: Most tree panels drawn by ``--tree``.
MAX_TREE_PANELS = 12


# ------------------------------------------------------------------------------------- layout
def tiers(topology: Topology) -> dict[str, int]:
    """Hop distance of every node from the nearest gpu (gpus 0), on the undirected view of the graph."""
    graph = topology.graph
    distance = {gpu: 0 for gpu in topology.gpus}
    frontier = list(topology.gpus)
    while frontier:
        following = []
        for node in frontier:
            for neighbor in sorted(set(graph.successors(node)) | set(graph.predecessors(node)), key=_order(topology)):
                if neighbor not in distance:
                    distance[neighbor] = distance[node] + 1
                    following.append(neighbor)
        frontier = following
    return distance


@functools.lru_cache(maxsize=16)
def _order(topology: Topology) -> Any:
    """Sort key: a node's position in the topology's node order (cached: layouts ask per node)."""
    index = {node: i for i, node in enumerate(topology.graph.nodes)}
    return index.__getitem__


def _neighbors(topology: Topology, node: str) -> list[str]:
    graph = topology.graph
    return sorted(set(graph.successors(node)) | set(graph.predecessors(node)), key=_order(topology))


def _spread(items: list[tuple[float, str]], gap: float) -> dict[str, float]:
    """Keep the order of desired x positions but push items apart to at least ``gap``, centred."""
    items = sorted(items)
    placed: list[float] = []
    for desired, _ in items:
        placed.append(desired if not placed else max(desired, placed[-1] + gap))
    if placed:
        shift = (sum(d for d, _ in items) - sum(placed)) / len(placed)
        placed = [x + shift for x in placed]
    return {name: x for (_, name), x in zip(items, placed, strict=True)}


def layout(topology: Topology) -> Position:
    """Node positions (x, y) for drawing; deterministic. See the module docstring for the rules."""
    if topology.boxes is not None:
        return _box_layout(topology)
    if not topology.switches:
        return _direct_layout(topology)
    return _tier_layout(topology)


def coordinates(topology: Topology) -> dict[str, tuple[int, ...]] | None:
    """Each gpu's coordinates on a 2-D or 3-D dimensioned system without switches (rank = x0 + n0·(x1 +
    n1·x2)), or None for any other topology (those are not laid out by coordinates).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> coordinates(load_topology("torus:dims=4x2"))["gpu5"]
    (1, 1)
    """
    dims = topology.dimensions
    if topology.switches or not dims or len(dims) not in (2, 3):
        return None
    sizes = [d.size for d in dims]
    if math.prod(sizes) != topology.num_ranks:
        return None
    result = {}
    for rank, gpu in enumerate(topology.gpus):
        coords, rest = [], rank
        for size in sizes:
            coords.append(rest % size)
            rest //= size
        result[gpu] = tuple(coords)
    return result


def link_dimension(topology: Topology, u: str, v: str) -> tuple[int, bool] | None:
    """For a link of a dimensioned system (see :func:`coordinates`): its dimension and whether it skips
    nodes of that dimension (a torus's wrap-around link, a fully connected dimension's longer links);
    None when the topology is not laid out by coordinates or the link changes more than one coordinate.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> torus = load_topology("torus:dims=4x4")
    >>> link_dimension(torus, "gpu0", "gpu1"), link_dimension(torus, "gpu0", "gpu3"), link_dimension(torus, "gpu0", "gpu12")
    ((0, False), (0, True), (1, True))
    """
    coords = _coordinates(topology)
    if coords is None or u not in coords or v not in coords:
        return None
    changed = [i for i, (a, b) in enumerate(zip(coords[u], coords[v], strict=True)) if a != b]
    if len(changed) != 1:
        return None
    dim = changed[0]
    return dim, abs(coords[u][dim] - coords[v][dim]) > 1


#: On a 3-D system of at most :data:`MAX_OBLIQUE_LAYERS` layers, each layer of dimension 2 is drawn shifted
#: by this (x, y) from the one before, as a cube seen at an angle; deeper systems get one panel per layer.
LAYER_SHIFT = (0.55, 0.5)
MAX_OBLIQUE_LAYERS = 4


def _oblique(topology: Topology) -> bool:
    dims = topology.dimensions
    return (dims is not None and _coordinates(topology) is not None and len(dims) == 3
            and dims[2].size <= MAX_OBLIQUE_LAYERS)


@functools.lru_cache(maxsize=16)
def _coordinates(topology: Topology) -> dict[str, tuple[int, ...]] | None:
    return coordinates(topology)


def _direct_layout(topology: Topology) -> Position:
    n = topology.num_ranks
    coords, dims = _coordinates(topology), topology.dimensions
    if coords is not None and dims is not None:
        if _oblique(topology):  # layers of dimension 2 stacked in depth, each shifted up and right
            layers = dims[2].size
            grid = 1.2 + LAYER_SHIFT[0] * (layers - 1)
            return {gpu: (c[0] * grid + c[2] * LAYER_SHIFT[0], -c[1] * grid + c[2] * LAYER_SHIFT[1])
                    for gpu, c in coords.items()}
        width = dims[0].size
        return {gpu: (c[0] + (c[2] if len(c) == 3 else 0) * (width + 1.0), -float(c[1])) for gpu, c in coords.items()}
    radius = max(1.5, n / (2 * math.pi) * 1.1)
    return {gpu: (radius * math.sin(2 * math.pi * rank / n), radius * math.cos(2 * math.pi * rank / n))
            for rank, gpu in enumerate(topology.gpus)}


def _place_tiers(topology: Topology, pos: Position, pending: Iterable[str], level: dict[str, int],
                 base_y: float, step: float) -> None:
    """Place switches tier by tier above ``base_y``, each over the mean x of its already placed neighbours."""
    xs = [x for x, _ in pos.values()]
    span = max(xs) - min(xs) if xs else 0.0
    by_tier: dict[int, list[str]] = defaultdict(list)
    for node in pending:
        by_tier[level[node]].append(node)
    for row, tier in enumerate(sorted(by_tier)):
        wanted = []
        for node in by_tier[tier]:
            placed = [pos[m][0] for m in _neighbors(topology, node) if m in pos]
            wanted.append((sum(placed) / len(placed) if placed else 0.0, node))
        gap = max(0.9, min(span / len(wanted), 6.0))
        for node, x in _spread(wanted, gap).items():
            pos[node] = (x, base_y + step * (row + 1))


def _bipartite_layout(topology: Topology, level: dict[str, int]) -> Position | None:
    """Edge switches wired to each other as a bipartite graph (e.g. EFLOPS BiGraph): one layer with its
    gpus below, the other layer with its gpus mirrored above, so the inter-layer links run between."""
    import networkx as nx

    edge = [s for s in topology.switches if level.get(s) == 1]
    inner = nx.Graph()
    inner.add_nodes_from(edge)
    inner.add_edges_from((u, v) for u, v in topology.graph.edges if u in inner and v in inner)
    if inner.number_of_edges() == 0 or not nx.is_bipartite(inner):
        return None
    colour = nx.bipartite.color(inner)
    home: dict[str, list[str]] = {s: [] for s in edge}
    for gpu in topology.gpus:
        attached = [m for m in _neighbors(topology, gpu) if m in home]
        if not attached:
            return None
        home[attached[0]].append(gpu)
    pos: Position = {}
    for side, (gpu_y, switch_y) in enumerate(((0.0, 1.6), (5.2, 3.6))):
        x = 0.0
        for switch in (s for s in edge if colour[s] == side):
            start = x
            for gpu in home[switch]:
                pos[gpu] = (x, gpu_y)
                x += 1.0
            pos[switch] = ((start + x - 1.0) / 2 if home[switch] else x, switch_y)
            x += 0.6 if home[switch] else 1.0
    rest = [s for s in topology.switches if s not in pos]
    _place_tiers(topology, pos, rest, level, 5.2, 1.6)
    return pos


def _tier_layout(topology: Topology) -> Position:
    level = tiers(topology)
    mirrored = _bipartite_layout(topology, level)
    if mirrored is not None:
        return mirrored
    n = topology.num_ranks
    per_row = n if n <= 48 else math.ceil(math.sqrt(n * 4))
    pos: Position = {}
    for rank, gpu in enumerate(topology.gpus):
        pos[gpu] = (float(rank % per_row) - (min(n, per_row) - 1) / 2, -float(rank // per_row))
    _place_tiers(topology, pos, topology.switches, level, 0.0, max(1.5, per_row / 12))
    return pos


def _box_layout(topology: Topology) -> Position:
    assert topology.boxes is not None
    level = tiers(topology)
    box_of_gpu = {gpu: box for gpu, box in zip(topology.gpus, topology.boxes, strict=True)}
    boxes_of: dict[str, frozenset[int]] = {gpu: frozenset({box}) for gpu, box in box_of_gpu.items()}
    for switch in sorted(topology.switches, key=lambda s: (level.get(s, 0), _order(topology)(s))):
        lower = [m for m in _neighbors(topology, switch) if level.get(m, 0) < level.get(switch, 0)]
        boxes_of[switch] = frozenset().union(*(boxes_of[m] for m in lower if m in boxes_of)) if lower else frozenset()

    members: dict[int, list[str]] = defaultdict(list)
    for gpu in topology.gpus:
        members[box_of_gpu[gpu]].append(gpu)
    local: dict[int, list[str]] = defaultdict(list)
    shared: list[str] = []
    for switch in topology.switches:
        owner = boxes_of.get(switch, frozenset())
        (local[next(iter(owner))].append(switch) if len(owner) == 1 else shared.append(switch))

    pos: Position = {}
    x0, y0 = 0.0, 0.0
    top = 0.0
    row_bottom = 0.0
    # Many boxes wrap into rows of boxes so the picture stays readable.
    per_row = len(members) if len(members) <= 4 else math.ceil(math.sqrt(len(members)))
    for order, box in enumerate(sorted(members)):
        if order and order % per_row == 0:
            x0, y0 = 0.0, row_bottom - 2.8
        gpus = members[box]
        direct = any(topology.is_gpu(m) for g in gpus for m in topology.graph.successors(g))
        # Gpus wired to each other read best in two rows (the DGX-1 cube-mesh drawing); else one row of 8.
        cols = math.ceil(len(gpus) / 2) if direct and 4 <= len(gpus) <= 16 else min(len(gpus), 8)
        for index, gpu in enumerate(gpus):
            pos[gpu] = (x0 + index % cols, y0 - float(index // cols) * 1.6)
        bottom = y0 - float((len(gpus) - 1) // cols) * 1.6
        uplinks: list[str] = []
        hubs: list[str] = []
        for switch in local[box]:
            reaches_out = any(not boxes_of.get(m, frozenset()) <= {box} for m in _neighbors(topology, switch))
            (uplinks if reaches_out else hubs).append(switch)
        # Uplinks (NICs) sit above the gpu(s) they serve; hubs (NVSwitch-like) below the gpus.
        wanted = []
        for switch in uplinks:
            below = [pos[m][0] for m in _neighbors(topology, switch) if m in pos]
            wanted.append((sum(below) / len(below) if below else x0, switch))
        for switch, x in _spread(wanted, 0.9).items():
            rows = [pos[m][1] for m in _neighbors(topology, switch) if m in pos and topology.is_gpu(m)]
            pos[switch] = (x, (max(rows) if rows else y0) + 0.8)
        hub_x = _spread([(x0 + (cols - 1) / 2, s) for s in hubs], max(1.0, (cols - 1) / max(len(hubs), 1)))
        for switch in hubs:
            pos[switch] = (hub_x[switch], bottom - 1.0 - 0.6 * (level[switch] - 1))
        if order < per_row:
            top = max(top, max((pos[s][1] for s in uplinks), default=0.0))
        row_bottom = min([row_bottom, bottom] + [pos[s][1] for s in hubs])
        x0 += cols + 1.2
    _place_tiers(topology, pos, shared, level, top, 1.6)
    return pos


# ------------------------------------------------------------------------------------ drawing
def _pairs(topology: Topology) -> dict[tuple[str, str], float]:
    """Undirected links with the larger direction's bandwidth, in deterministic order."""
    order = _order(topology)
    result: dict[tuple[str, str], float] = {}
    for link in topology.links():
        key = (link.src, link.dst) if order(link.src) < order(link.dst) else (link.dst, link.src)
        result[key] = max(result.get(key, 0.0), link.bandwidth)
    return result


def _curve(a: tuple[float, float], b: tuple[float, float], bend: float) -> list[tuple[float, float]]:
    """A quadratic Bézier from a to b bent sideways by ``bend`` times its length."""
    if bend == 0:
        return [a, b]
    mx, my = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2
    dx, dy = b[0] - a[0], b[1] - a[1]
    cx, cy = mx - dy * bend, my + dx * bend
    points = []
    for i in range(13):
        t = i / 12
        points.append(((1 - t) ** 2 * a[0] + 2 * (1 - t) * t * cx + t * t * b[0],
                       (1 - t) ** 2 * a[1] + 2 * (1 - t) * t * cy + t * t * b[1]))
    return points


#: How far (in layout units, rows and columns are 1 apart) an arc of a dimensioned system bulges.
ARC_BULGE = 0.42


def arc_bulge(topology: Topology) -> float:
    """How far an arc of a dimensioned system bulges: :data:`ARC_BULGE`, or on a cube drawn at an angle half
    the height between two layers' rows, so the arc runs between them."""
    return min(ARC_BULGE, LAYER_SHIFT[1] / 2) if _oblique(topology) else ARC_BULGE


def _stadium(a: tuple[float, float], b: tuple[float, float], bulge: float) -> list[tuple[float, float]]:
    """An arc from a to b shaped like a rounded bracket: a quarter circle of radius ``|bulge|`` out to the
    side (left of a->b for a positive bulge), a straight run, a quarter circle back; it leaves its ends at
    right angles, so it clears the nodes next to them however long it is."""
    length = math.dist(a, b)
    radius = min(abs(bulge), length / 2)
    ux, uy = (b[0] - a[0]) / length, (b[1] - a[1]) / length
    nx, ny = (-uy, ux) if bulge > 0 else (uy, -ux)
    points = []
    for end, along in ((a, 1.0), (b, -1.0)):
        centre = (end[0] + along * radius * ux, end[1] + along * radius * uy)
        quarter = [(centre[0] - along * radius * math.cos(k * math.pi / 16) * ux + radius * math.sin(k * math.pi / 16) * nx,
                    centre[1] - along * radius * math.cos(k * math.pi / 16) * uy + radius * math.sin(k * math.pi / 16) * ny)
                   for k in range(9)]
        points += quarter if along > 0 else quarter[::-1]
    return points


def _bend(topology: Topology, pos: Position, u: str, v: str) -> float:
    """How far a link is bent sideways (times its length; see :func:`_curve`), so it never runs under the
    nodes between its ends: on a dimensioned system, links that skip nodes (wrap-around) bulge up (rows) or
    right (columns) and links of dimension 2 bulge down, by :data:`ARC_BULGE`; elsewhere gpu-to-gpu links in
    the same row bend a little (on a cube drawn at an angle, wrap-arounds bulge down and left instead)."""
    kind = link_dimension(topology, u, v)
    if kind is not None:
        dim, skips = kind
        length = math.dist(pos[u], pos[v])
        if length == 0 or (not skips and (dim < 2 or _oblique(topology))):
            return 0.0
        # the control point sits 2 x bulge from the chord (a quadratic Bézier peaks halfway to it)
        sign = -1.0 if dim == 2 and not skips else 1.0
        if dim < 2 and _oblique(topology):  # deeper layers sit up and right: bulge down and left, clear of them
            sign = -sign
        if dim == 1:  # a column, drawn top to bottom: positive bends right of the downward direction
            sign = -sign if pos[v][1] > pos[u][1] else sign
        elif pos[v][0] < pos[u][0]:
            sign = -sign
        return sign * 2 * arc_bulge(topology) / length
    if topology.is_gpu(u) and topology.is_gpu(v) and abs(pos[u][1] - pos[v][1]) < 1e-9 and abs(pos[u][0] - pos[v][0]) > 1.5:
        return 0.18
    return 0.0


def _width(bandwidth: float, widest: float) -> float:
    return 0.4 + 4.0 * math.sqrt(bandwidth / widest)


def _frame(ax: Any, pos: Position, topology: Topology) -> None:
    """Box panels behind the gpus, and the axis limits."""
    if topology.boxes is not None:
        groups: dict[int, list[str]] = defaultdict(list)
        for gpu, box in zip(topology.gpus, topology.boxes, strict=True):
            groups[box].append(gpu)
        level = tiers(topology)
        for box, gpus in sorted(groups.items()):
            xs = [pos[g][0] for g in gpus]
            ys = [pos[g][1] for g in gpus]
            members = set(gpus)
            inside = [s for s in topology.switches if s in pos and level.get(s, 0) == 1
                      and {m for m in _neighbors(topology, s) if topology.is_gpu(m)} <= members]
            ys += [pos[s][1] for s in inside]
            ax.add_patch(FancyBboxPatch((min(xs) - 0.5, min(ys) - 0.45), max(xs) - min(xs) + 1.0,
                                        max(ys) - min(ys) + 0.9, boxstyle="round,pad=0.05,rounding_size=0.2",
                                        facecolor=BOX_COLOR, edgecolor="#c5cfdb", linewidth=0.8, zorder=0))
            ax.text(min(xs) - 0.45, max(ys) + 0.5, f"box {box}", fontsize=7, color="#556", va="bottom")
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 1.0, max(xs) + 1.0)
    ax.set_ylim(min(ys) - 1.0, max(ys) + 1.0)
    ax.set_aspect("equal", adjustable="box")
    ax.axis("off")


def _draw_nodes(ax: Any, topology: Topology, pos: Position, highlight: Mapping[str, str] | None = None,
                labels: bool = True) -> None:
    n_nodes = len(pos)
    scale = 1.0 if n_nodes <= 64 else max(0.25, 64 / n_nodes)
    gpus = list(topology.gpus)
    switches = [s for s in topology.switches if s in pos]
    ax.scatter([pos[g][0] for g in gpus], [pos[g][1] for g in gpus], s=260 * scale, marker="s",
               color=GPU_COLOR, edgecolors="white", linewidths=0.8, zorder=4)
    if switches:
        ax.scatter([pos[s][0] for s in switches], [pos[s][1] for s in switches], s=200 * scale, marker="D",
                   color=SWITCH_COLOR, edgecolors="white", linewidths=0.8, zorder=4)
    for node, color in (highlight or {}).items():
        ax.scatter([pos[node][0]], [pos[node][1]], s=520 * scale, marker="o", facecolors="none",
                   edgecolors=color, linewidths=2.0, zorder=5)
    if labels and n_nodes <= LABEL_LIMIT:
        size = 7 if n_nodes <= 64 else 5
        for rank, gpu in enumerate(gpus):
            ax.text(pos[gpu][0], pos[gpu][1], str(rank), color="white", fontsize=size, ha="center",
                    va="center", zorder=6, fontweight="bold")
        if len(switches) <= 48:
            for switch in switches:
                ax.text(pos[switch][0], pos[switch][1] - 0.32, switch, color="#333", fontsize=size - 1,
                        ha="center", va="top", zorder=6)


#: Link colours by dimension on a dimensioned system (when no schedule load colours them).
DIMENSION_COLORS = ("#4c72b0", "#55a868", "#c44e52")


def link_shapes(topology: Topology, pos: Position | None = None) -> list[tuple[tuple[str, str], list[tuple[float, float]], int | None, bool]]:
    """Every undirected link as drawn: ``((u, v), points, dimension, skips)``; ``points`` is the polyline
    (two points when straight), ``dimension``/``skips`` as :func:`link_dimension` says (None, False off a
    dimensioned system). The pictures draw exactly these; tests check their geometry.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> shapes = link_shapes(load_topology("torus:dims=4x4"))
    >>> sum(1 for _, _, _, skips in shapes if skips), sum(1 for _, points, _, _ in shapes if len(points) > 2)
    (8, 8)
    """
    pos = pos if pos is not None else layout(topology)
    result = []
    for u, v in _pairs(topology):
        kind = link_dimension(topology, u, v)
        bend = _bend(topology, pos, u, v)
        points = (_stadium(pos[u], pos[v], bend * math.dist(pos[u], pos[v]) / 2) if kind and bend
                  else _curve(pos[u], pos[v], bend))
        result.append(((u, v), points, kind[0] if kind else None, bool(kind and kind[1])))
    return result


def _draw_links(ax: Any, topology: Topology, pos: Position, colors: Mapping[tuple[str, str], Any] | None = None,
                faded: bool = False) -> float:
    """Draw every link; returns the widest bandwidth (for the legend)."""
    pairs = _pairs(topology)
    widest = max(pairs.values())
    segments, widths, colours, styles = [], [], [], []
    for key, points, dim, skips in link_shapes(topology, pos):
        segments.append(points)
        widths.append(_width(pairs[key], widest) * (0.7 if skips or dim == 2 else 1.0))
        colour = (colors or {}).get(key, LINK_COLOR if dim is None or colors else DIMENSION_COLORS[dim])
        colours.append("#d9dee4" if faded else colour)
        styles.append((0, (4, 2)) if skips else "solid")
    ax.add_collection(LineCollection(segments, linewidths=widths, colors=colours, linestyles=styles, zorder=1,
                                     capstyle="round"))
    return widest


def _width_legend(ax: Any, topology: Topology, widest: float, extra: Sequence[Any] = ()) -> None:
    values = sorted(set(_pairs(topology).values()))
    if len(values) > 4:
        values = [values[0], values[len(values) // 3], values[2 * len(values) // 3], values[-1]]
    handles = [Line2D([], [], color=LINK_COLOR, linewidth=_width(v, widest), label=f"{v:g} GB/s") for v in values]
    coords = _coordinates(topology)
    if coords is not None:
        names = ("across", "down", "in depth" if _oblique(topology) else "between panels")
        handles += [Line2D([], [], color=DIMENSION_COLORS[d], linewidth=2.0, label=f"dimension {d} ({names[d]})")
                    for d in range(len(topology.dimensions or ()))]
        if any(skips for _, _, _, skips in link_shapes(topology)):
            handles.append(Line2D([], [], color="#555", linewidth=1.4, linestyle=(0, (4, 2)),
                                  label="wrap-around (dashed arc)"))
    handles += [Line2D([], [], marker="s", linestyle="", color=GPU_COLOR, label="gpu (rank)")]
    if topology.switches:
        handles.append(Line2D([], [], marker="D", linestyle="", color=SWITCH_COLOR, label="switch"))
    handles += list(extra)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False,
              title="links per direction", title_fontsize=7)


def _new_figure(pos: Position, panels: int = 1, columns: int = 1) -> Figure:
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    span_x = max(xs) - min(xs) + 2
    span_y = max(ys) - min(ys) + 2
    width = min(36.0, max(5.0, span_x * 0.55)) * columns
    rows = math.ceil(panels / columns)
    height = min(30.0, max(3.5, span_y * 0.55 + 0.8)) * rows
    if width > 60:
        height, width = height * 60 / width, 60.0
    figure = Figure(figsize=(width + 3.2, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def bottleneck_cut(topology: Topology) -> frozenset[str]:
    """The node set S (gpus and switches) of the allgather bound's bottleneck cut,
    :func:`synth.bounds.optimal_bound`."""
    from synth.bounds import optimal_bound  # the max-flow machinery, loaded only when a cut is drawn

    bound = optimal_bound(topology)
    return frozenset(bound.cut_gpus) | frozenset(bound.cut_switches)


def link_load(schedule: Schedule, topology: Topology) -> dict[tuple[str, str], float]:
    """Per undirected link, its load as a percentage of the busiest link's (bytes per bandwidth; the
    busier direction counts)."""
    report = congestion(schedule, topology)
    order = _order(topology)
    load: dict[tuple[str, str], float] = {}
    for (u, v), chunks in report.chunks_per_link.items():
        key = (u, v) if order(u) < order(v) else (v, u)
        load[key] = max(load.get(key, 0.0), chunks / topology.bandwidth(u, v))
    busiest = max(load.values(), default=0.0)
    return {key: 100.0 * value / busiest for key, value in load.items()} if busiest else {}


def draw_topology(topology: Topology, *, schedule: Schedule | None = None, tree_root: int | None = None,
                  cut: frozenset[str] | None | str = "auto", title: str | None = None) -> Figure:
    """Draw a topology; with ``schedule`` colour links by load; with ``tree_root`` too, draw that root's trees.

    Parameters
    ----------
    topology : Topology
        The network.
    schedule : Schedule, optional
        Colour each link by its load as a percentage of the busiest link's.
    tree_root : int, optional
        With ``schedule``: one panel per distinct tree of the chunks rooted at this rank.
    cut : frozenset of str, None or "auto"
        Node set S of the bottleneck cut to mark; ``"auto"`` asks :func:`bottleneck_cut` when a schedule
        is given; None marks nothing.
    title : str, optional
        Figure title; a summary by default.
    """
    if schedule is not None and len(schedule.ranks) != topology.num_ranks:
        raise InputError("", "schedule", f"the schedule has {len(schedule.ranks)} ranks but topology "
                         f"{topology.name!r} has {topology.num_ranks} gpus")
    if tree_root is not None:
        if schedule is None:
            raise InputError("", "tree_root", "drawing trees needs a schedule (`schedule`)")
        return draw_trees(topology, schedule, tree_root, title=title)
    pos = layout(topology)
    figure = _new_figure(pos)
    ax = figure.add_subplot()
    _frame(ax, pos, topology)
    colours: dict[tuple[str, str], Any] = {}
    extra: list[Any] = []
    heading = title or (f"{topology.name}: {topology.num_ranks} gpus, {len(topology.switches)} switches, "
                        f"{topology.graph.number_of_edges()} directed links")
    highlight: dict[str, str] = {}
    if schedule is not None:
        load = link_load(schedule, topology)
        colormap = matplotlib.colormaps["plasma_r"]
        for key in _pairs(topology):
            colours[key] = colormap(0.1 + 0.9 * load[key] / 100.0) if key in load else "#e3e7ec"
        mappable = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(0, 100), cmap=colormap)
        figure.colorbar(mappable, ax=ax, shrink=0.35, label="% of the busiest link's load", location="bottom",
                        pad=0.02, aspect=40)
        busiest = [key for key, value in load.items() if value >= 99.999]
        heading = title or (f"{schedule.algorithm} {schedule.kind} on {topology.name}: link load "
                            f"({len(busiest)} link(s) at 100%, unused links pale)")
        if cut == "auto":
            cut = bottleneck_cut(topology)
    widest = _draw_links(ax, topology, pos, colours)
    if isinstance(cut, frozenset) and cut:
        crossing = [(u, v) for u, v in topology.graph.edges if u in cut and v not in cut]
        ax.add_collection(LineCollection([_curve(pos[u], pos[v], _bend(topology, pos, u, v)) for u, v in crossing],
                                         colors=CUT_COLOR, linewidths=1.6, linestyles="--", zorder=3))
        egress = sum(topology.bandwidth(u, v) for u, v in crossing)
        inside = sum(1 for node in cut if topology.is_gpu(node))
        if 2 * len(cut) <= len(pos):
            highlight = {node: CUT_COLOR for node in cut}
            label = f"bottleneck cut S (ringed): {inside} gpus,\n{egress:g} GB/s leave S"
        else:  # ring the smaller side: everything outside S
            highlight = {node: CUT_COLOR for node in pos if node not in cut}
            label = (f"bottleneck cut S = all but the ringed\nnodes: {inside} gpus, {egress:g} GB/s leave S")
        extra.append(Line2D([], [], color=CUT_COLOR, linestyle="--", marker="o", markerfacecolor="none",
                            label=label))
    elif schedule is not None and cut is None:
        extra.append(Line2D([], [], color="none", label="bottleneck cut: not available"))
    _draw_nodes(ax, topology, pos, highlight)
    _width_legend(ax, topology, widest, extra)
    ax.set_title(heading, fontsize=10, wrap=True)
    return figure


def _tree_routes(schedule: Schedule, root: int) -> list[tuple[tuple[int, ...], list[tuple[tuple[str, ...], str, int]]]]:
    """Distinct routes of the chunks rooted at ``root``: (chunks, [(path, op, level within the tree)])."""
    from synth.explain import chunk_root, levels

    level = levels(schedule)
    by_chunk: dict[int, list[Any]] = defaultdict(list)
    for t in schedule.transfers:
        by_chunk[t.chunk].append(t)
    routes: dict[tuple[Any, ...], list[int]] = {}
    for chunk in sorted(by_chunk):
        moves = sorted(by_chunk[chunk], key=lambda t: (level[t.id], t.id))
        if chunk_root(schedule, chunk, moves) != root:
            continue
        first = level[moves[0].id]
        key = tuple((t.path, t.op, level[t.id] - first) for t in moves)
        routes.setdefault(key, []).append(chunk)
    return [(tuple(chunks), list(key)) for key, chunks in routes.items()]


def draw_trees(topology: Topology, schedule: Schedule, root: int, title: str | None = None) -> Figure:
    """One panel per distinct tree carrying chunks rooted at rank ``root`` (up to 12 panels)."""
    if not 0 <= root < topology.num_ranks:
        raise InputError("", "root", f"expected a root rank in 0..{topology.num_ranks - 1}, got {root}")
    routes = _tree_routes(schedule, root)
    if not routes:
        raise InputError("", "root", f"no chunk of this {schedule.kind} schedule is rooted at rank {root}")
    shown = routes[:MAX_TREE_PANELS]
    pos = layout(topology)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    wide = (max(xs) - min(xs) + 2) > 2.5 * (max(ys) - min(ys) + 2)
    columns = 1 if wide else min(len(shown), 3 if len(shown) > 4 else len(shown))
    figure = _new_figure(pos, len(shown), columns)
    colormap = matplotlib.colormaps["viridis"]
    for index, (chunks, moves) in enumerate(shown):
        ax = figure.add_subplot(math.ceil(len(shown) / columns), columns, index + 1)
        _frame(ax, pos, topology)
        _draw_links(ax, topology, pos, faded=True)
        deepest = max(lvl for _, _, lvl in moves) or 1
        for path, op, lvl in moves:
            colour = colormap(0.85 * lvl / deepest)
            for u, v in zip(path, path[1:], strict=False):
                ax.add_patch(FancyArrowPatch(pos[u], pos[v], arrowstyle="-|>", mutation_scale=9, color=colour,
                                             linewidth=1.6, linestyle="--" if op == REDUCE else "-",
                                             connectionstyle=f"arc3,rad={_bend(topology, pos, u, v)}",
                                             shrinkA=6, shrinkB=6, zorder=3))
        _draw_nodes(ax, topology, pos, {topology.gpus[root]: "#f2a900"})
        from synth.explain import compress

        ax.set_title(f"tree {index + 1}: chunks {compress(chunks)}, {len(moves)} transfers, "
                     f"depth {deepest + 1 if moves else 0}", fontsize=8)
    more = f" (first {MAX_TREE_PANELS} of {len(routes)})" if len(routes) > MAX_TREE_PANELS else ""
    figure.suptitle(title or (f"{schedule.algorithm} {schedule.kind} on {topology.name}: trees of root {root}{more}\n"
                              "colour = step within the tree (dark first), dashed = reduce"), fontsize=9, wrap=True)
    return figure


# ------------------------------------------------------------------------------ compare plots
def plot_compare(rows: Sequence[Any], title: str | None = None) -> Figure:
    """algbw against message size, log axes, one line per algorithm, one panel per collective, the
    topology's bound (the largest algbw its lower bound on time allows at each size) dashed. ``rows`` are :class:`synth.compare.Row` (or dicts with the same keys)."""
    def get(row: Any, name: str) -> Any:
        return row[name] if isinstance(row, Mapping) else getattr(row, name)

    collectives = list(dict.fromkeys(get(r, "collective") for r in rows))
    if not collectives:
        raise InputError("", "rows", "nothing to plot: no algorithm applied")
    algorithms = sorted({get(r, "algorithm") for r in rows})
    palette = matplotlib.colormaps["tab10"]
    colour = {name: palette(i % 10) for i, name in enumerate(algorithms)}
    columns = 2 if len(collectives) == 4 else min(len(collectives), 3)
    panel_rows = math.ceil(len(collectives) / columns)
    figure = Figure(figsize=(4.6 * columns + 1.5, 3.6 * panel_rows), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    from synth.units import format_size

    for index, collective in enumerate(collectives):
        ax = figure.add_subplot(panel_rows, columns, index + 1)
        mine = [r for r in rows if get(r, "collective") == collective]
        for algorithm in algorithms:
            points = sorted((get(r, "size"), get(r, "algbw_GBps")) for r in mine if get(r, "algorithm") == algorithm)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3.5, linewidth=1.5,
                        color=colour[algorithm], label=algorithm)
        bound = sorted({(get(r, "size"), get(r, "bound_algbw_GBps")) for r in mine if get(r, "bound_algbw_GBps")})
        if bound:
            label = next((get(r, "bound_label") for r in mine if isinstance(r, Mapping) and "bound_label" in r
                          or hasattr(r, "bound_label")), "bound")
            ax.plot([b[0] for b in bound], [b[1] for b in bound], color="black", linestyle="--", linewidth=1.0,
                    label=label if label.startswith("in-switch") else f"{label} (links only)")
        sizes = sorted({get(r, "size") for r in mine})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes if len(sizes) <= 8 else sizes[:: math.ceil(len(sizes) / 8)])
        ax.set_xticklabels([format_size(int(s), sep=" ") for s in ax.get_xticks()], fontsize=7, rotation=30)
        readable = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:.3g}")
        ax.yaxis.set_major_formatter(readable)
        ax.yaxis.set_minor_formatter(readable)
        ax.tick_params(axis="y", which="both", labelsize=7)
        ax.set_title(collective, fontsize=9)
        ax.set_xlabel("message size", fontsize=8)
        ax.set_ylabel("algbw (GB/s)", fontsize=8)
        ax.grid(True, which="both", linewidth=0.3, alpha=0.6)
        ax.legend(fontsize=6, loc="best")
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


# ------------------------------------------------------------------------------------- saving
def render(figure: Figure, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes, with no date or random ids (same figure, same bytes)."""
    fmt = fmt.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise InputError("", "fmt", f"expected png or svg, got {fmt!r}")
    buffer = io.BytesIO()
    metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    with matplotlib.rc_context({"svg.hashsalt": "synth", "svg.fonttype": "path"}):
        figure.savefig(buffer, format=fmt, metadata=metadata, dpi=100)
    return buffer.getvalue()


def save_figure(figure: Figure, output: str | Path) -> Path:
    """Write the figure atomically to ``output`` (.png or .svg, by suffix)."""
    path = Path(output)
    atomic_write_bytes(path, render(figure, path.suffix or ".png"))
    return path
