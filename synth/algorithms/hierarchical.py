"""Hierarchical (Blue-Connect style) collectives for multi-box systems.

Ranks are split into b boxes of g gpus; the gpu with local index i of every box forms cross-box group
i. Allreduce: reduce-scatter inside every box (ring), so local gpu i holds the box's sum of share i;
reduce-scatter of that share across the boxes of group i; allgather back across the boxes; allgather
inside every box. Reduce-scatter is the first half, allgather the second. Every phase is a ring, every
chunk moves as soon as its data is ready, so the phases of different chunks overlap where they can.

The box structure comes from, in order: the ``boxes`` option (a box index per rank, or a number of
equal contiguous boxes), ``topology.boxes``, or detection: the gpu groups left connected after
removing the links of the slowest bandwidth class(es), the first such split into at least 2 equal groups
of at least 2 gpus (for a DGX A100 pair that drops the 25 GB/s NIC links and keeps the NVSwitch boxes).
The ring inside a box follows direct gpu-gpu links when they form a cycle (DGX-1, MI250), else the
box's switch.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx

from synth.algorithms.multidim import grid_schedule
from synth.algorithms.utils import hamiltonian_cycle
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.routing import neighbors
from synth.schedule import Schedule
from synth.topology import Topology


def detect_boxes(topology: Topology) -> list[int] | None:
    """Box index per rank from the bandwidth tiers (see the module docstring), or None.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> detect_boxes(load_topology("multidim:sizes=4x2,bandwidths=400x50"))
    [0, 0, 0, 0, 1, 1, 1, 1]
    >>> detect_boxes(load_topology("switch:n=4")) is None
    True
    """
    graph = topology.graph
    tiers = sorted({float(bw) for _, _, bw in graph.edges(data="bandwidth")})
    for threshold in tiers[:-1]:
        kept = nx.Graph()
        kept.add_nodes_from(graph.nodes)
        kept.add_edges_from((u, v) for u, v, bw in graph.edges(data="bandwidth") if bw > threshold)
        box_of: dict[str, int] = {}
        groups: list[list[int]] = []
        for rank, gpu in enumerate(topology.gpus):
            if gpu in box_of:
                groups[box_of[gpu]].append(rank)
                continue
            index = len(groups)
            for node in nx.node_connected_component(kept, gpu):
                if topology.is_gpu(node):
                    box_of[node] = index
            groups.append([rank])
        sizes = {len(group) for group in groups}
        if len(groups) >= 2 and len(sizes) == 1 and sizes.pop() >= 2:
            return [box_of[gpu] for gpu in topology.gpus]
    return None


def box_structure(topology: Topology, boxes: Sequence[int] | int | None = None) -> list[list[int]]:
    """The boxes as lists of ranks (ordered by their first rank); NotApplicable with the reason when
    there are fewer than 2 boxes, boxes of different sizes, or boxes of one gpu.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> box_structure(load_topology("switch:n=4"), boxes=2)
    [[0, 1], [2, 3]]
    """
    n = topology.num_ranks
    if isinstance(boxes, int) and not isinstance(boxes, bool):
        if boxes < 1 or n % boxes:
            raise InputError("", "boxes", f"expected a number of boxes that divides the {n} ranks, got {boxes}")
        index = [r // (n // boxes) for r in range(n)]
        source = "the boxes option"
    elif boxes is not None:
        given = [] if isinstance(boxes, (bool, str)) else list(boxes)
        if isinstance(boxes, (bool, str)) or len(given) != n or not all(isinstance(b, int) and not isinstance(b, bool)
                                                                         for b in given):
            raise InputError("", "boxes", f"expected a box index for each of the {n} ranks, got {boxes!r}")
        index = given
        source = "the boxes option"
    elif topology.boxes is not None:
        index = list(topology.boxes)
        source = "the topology's boxes"
    else:
        detected = detect_boxes(topology)
        if detected is None:
            raise NotApplicable(f"topology {topology.name!r} has no box structure: no 'box' on its gpus, and no "
                                "bandwidth tier splits it into equal groups (pass boxes=...)")
        index = detected
        source = "the detected bandwidth tiers"
    groups: dict[int, list[int]] = {}
    for rank, box in enumerate(index):
        groups.setdefault(box, []).append(rank)
    result = sorted(groups.values())
    sizes = sorted({len(g) for g in result})
    if len(result) < 2:
        raise NotApplicable(f"hierarchical needs at least 2 boxes; {source} give 1")
    if len(sizes) > 1:
        raise NotApplicable(f"hierarchical needs boxes of equal size; {source} give sizes {sizes}")
    if sizes[0] < 2:
        raise NotApplicable(f"hierarchical needs at least 2 gpus per box; {source} give 1")
    return result


def _box_ring(topology: Topology, members: list[int]) -> list[int]:
    """Ring order (as local indices) inside one box: direct gpu-gpu links if they form a cycle, else
    switch-only neighbours, else the natural order."""
    inside = set(members)
    local = {rank: i for i, rank in enumerate(members)}
    graph = topology.graph
    direct = {local[r]: {local[topology.rank_of[v]] for v in graph.successors(topology.gpus[r])
                         if topology.is_gpu(v) and topology.rank_of[v] in inside
                         and graph.has_edge(v, topology.gpus[r])} for r in members}
    cycle = hamiltonian_cycle(direct, budget=20_000)
    if cycle is None:
        switched = {local[r]: {local[v] for v in neighbors(topology, r, via_gpus=False) if v in inside}
                    for r in members}
        switched = {a: {b for b in nbrs if a in switched[b]} for a, nbrs in switched.items()}
        cycle = hamiltonian_cycle(switched, budget=20_000)
    return cycle if cycle is not None else list(range(len(members)))


def hierarchical(topology: Topology, kind: Kind, *, chunks: int | None = None, root: int | None = None,
                 boxes: Sequence[int] | int | None = None) -> Schedule:
    """Blue-Connect style hierarchical allreduce, reduce-scatter or allgather.

    Parameters
    ----------
    topology : Topology
    kind : Kind
        ``allreduce``, ``reducescatter`` or ``allgather``.
    chunks : int, optional
        Total chunks C, a multiple of N (default N).
    boxes : list of int or int, optional
        Box index per rank, or a number of equal contiguous boxes (default: the topology's boxes, or
        detected from its bandwidth tiers).

    Examples
    --------
    >>> from synth.library import load_topology
    >>> s = hierarchical(load_topology("dgx-a100:boxes=2"), Kind.ALLREDUCE)
    >>> s.params["boxes"], len(s.transfers)
    (2, 480)
    """
    groups = box_structure(topology, boxes)
    g, b = len(groups[0]), len(groups)
    rank_at: dict[tuple[int, ...], int] = {(i, box): members[i] for box, members in enumerate(groups)
                                           for i in range(g)}
    box_rings = [_box_ring(topology, members) for members in groups]

    def line_order(d: int, line: tuple[int | None, ...]) -> list[int]:
        box = line[1]
        return box_rings[box] if d == 0 and box is not None else list(range(b))

    chunk_count = chunks if chunks is not None else topology.num_ranks
    params: dict[str, object] = {"chunks": chunk_count, "boxes": b, "gpus_per_box": g, "box_members": groups,
                                 "box_rings": box_rings}
    return grid_schedule(topology, kind, (g, b), rank_at, chunk_count, [[0, 1]], "hierarchical",
                         params, line_order)
