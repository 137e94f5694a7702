"""Drawings of dimensioned systems: laid out by coordinates, wrap-around links drawn as arcs that
no node hides, every link drawn, a legend that names dimensions and wrap-around links. Geometry, not pixels."""

from __future__ import annotations

import math

import pytest

from synth.draw import (
    LAYER_SHIFT,
    arc_bulge,
    coordinates,
    draw_topology,
    layout,
    link_dimension,
    link_shapes,
)
from synth.library import load_topology

#: Nodes are drawn as squares about 0.4 layout units wide (rows and columns are 1 apart or more).
NODE_HALF_WIDTH = 0.2

SYSTEMS = ["torus:dims=4x4", "torus:dims=3x5", "torus:dims=6x2", "tpu-v4", "torus:dims=3x3x3", "torus:dims=4x3x6",
           "hypercube:d=3", "hypercube:d=4"]


def _distance_to_polyline(point, points) -> float:
    best = math.inf
    for (ax, ay), (bx, by) in zip(points, points[1:], strict=False):
        dx, dy = bx - ax, by - ay
        length2 = dx * dx + dy * dy
        t = 0.0 if length2 == 0 else max(0.0, min(1.0, ((point[0] - ax) * dx + (point[1] - ay) * dy) / length2))
        best = min(best, math.dist(point, (ax + t * dx, ay + t * dy)))
    return best


@pytest.mark.parametrize("spec", SYSTEMS)
def test_every_link_is_drawn_and_none_runs_under_a_node(spec):
    topology = load_topology(spec)
    pos = layout(topology)
    shapes = link_shapes(topology, pos)
    drawn = {frozenset(key) for key, *_ in shapes}
    assert drawn == {frozenset((u, v)) for u, v in topology.graph.edges}
    assert len({(round(x, 6), round(y, 6)) for x, y in pos.values()}) == len(pos), "two nodes on one spot"
    for (u, v), points, _, _ in shapes:
        assert points[0] == pos[u] and points[-1] == pos[v]
        for node, centre in pos.items():
            if node not in (u, v):
                assert _distance_to_polyline(centre, points) > NODE_HALF_WIDTH, f"{u}-{v} runs under {node}"


@pytest.mark.parametrize("spec", ["torus:dims=4x4", "torus:dims=3x5", "tpu-v4", "torus:dims=4x3x6"])
def test_wrap_around_links_are_arcs(spec):
    topology = load_topology(spec)
    sizes = [d.size for d in topology.dimensions]
    pos = layout(topology)
    wraps = [(key, points, dim) for key, points, dim, skips in link_shapes(topology, pos) if skips]
    # a ring of n > 2 has one wrap-around link per line of that dimension
    expected = sum(math.prod(sizes) // n for n in sizes if n > 2)
    assert len(wraps) == expected
    for (u, v), points, dim in wraps:
        assert len(points) > 2
        bulge = max(_distance_to_polyline(p, [pos[u], pos[v]]) for p in points)
        assert bulge == pytest.approx(arc_bulge(topology), rel=0.05), (u, v, bulge)
        assert bulge > NODE_HALF_WIDTH
        coords = coordinates(topology)
        assert abs(coords[u][dim] - coords[v][dim]) == sizes[dim] - 1


def test_layout_follows_the_coordinates():
    torus = load_topology("torus:dims=4x3")
    pos, coords = layout(torus), coordinates(torus)
    for gpu, (x0, x1) in coords.items():
        assert pos[gpu] == (float(x0), -float(x1))
    cube = load_topology("tpu-v4")
    pos, coords = layout(cube), coordinates(cube)
    by_coords = {c: gpu for gpu, c in coords.items()}
    for (x0, x1, x2), gpu in by_coords.items():
        if x2 + 1 < 4:
            deeper = pos[by_coords[(x0, x1, x2 + 1)]]
            assert deeper[0] - pos[gpu][0] == pytest.approx(LAYER_SHIFT[0])
            assert deeper[1] - pos[gpu][1] == pytest.approx(LAYER_SHIFT[1])
        if x0 + 1 < 4:
            assert pos[by_coords[(x0 + 1, x1, x2)]][0] > pos[gpu][0]
        if x1 + 1 < 4:
            assert pos[by_coords[(x0, x1 + 1, x2)]][1] < pos[gpu][1]


def test_link_dimension():
    torus = load_topology("torus:dims=4x4")
    assert link_dimension(torus, "gpu5", "gpu6") == (0, False)
    assert link_dimension(torus, "gpu5", "gpu9") == (1, False)
    assert link_dimension(torus, "gpu4", "gpu7") == (0, True)
    assert link_dimension(load_topology("switch:n=4"), "gpu0", "sw0") is None
    assert coordinates(load_topology("ring:n=8")) is None  # one dimension: drawn as a circle


@pytest.mark.parametrize(("spec", "labels"), [
    ("torus:dims=4x4", ["dimension 0 (across)", "dimension 1 (down)", "wrap-around (dashed arc)"]),
    ("tpu-v4", ["dimension 2 (in depth)", "wrap-around (dashed arc)"]),
    ("torus:dims=4x3x6", ["dimension 2 (between panels)"]),
])
def test_legend_names_dimensions_and_wrap_around(spec, labels):
    figure = draw_topology(load_topology(spec))
    legend = figure.axes[0].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    for label in labels:
        assert label in texts, texts
