"""NVLS-Tree: NCCL's allreduce across NVLink boxes, NVLS inside every box and a tree between the boxes.

As NCCL v2.23.4-1 builds it (github.com/NVIDIA/nccl, tag ``v2.23.4-1``: ``src/device/all_reduce.h``,
``RunWorkColl<ncclFuncAllReduce, ..., NCCL_ALGO_NVLS_TREE, ...>``; the heads and trees of
``connectNvls`` in ``src/graph/connect.cc``; read for its rules only, no code is copied):

- every box has *heads*, one per NIC (NCCL's NVLS graph channels: the gpu next to each NIC); a buffer is
  cut into chunks, chunk ``c`` owned by head ``c mod H`` of every box;
- **in the box**: every gpu scatters its chunks into the NVLink switch and the owning head pulls the
  box's sum with ``multimem.ld_reduce`` (one in-switch reduce per chunk and box, output to the head);
- **between the boxes**: the heads of one index form NCCL's double binary tree over the boxes
  (``ncclGetDtree``; NCCL's channels alternate the two trees, here successive rounds of chunks do): a
  head receives its children's partial sums over the NICs, adds its box's sum and sends the total up;
  the root's total goes back down the tree;
- **in the box again**: the head stores the result with ``multimem.st`` (one in-switch multicast per
  chunk and box, to every other gpu of the box).

A child's partial sum lands in a scratch slot of its parent and the parent adds it with a local reduce
(two children never write one cell at once). The boxes must be NVLS boxes (a switch linking every gpu of
the box that reduces and multicasts, :func:`synth.algorithms.nvls.domain_switch`) with NICs (a
:class:`synth.algorithms.ring.RailLayout`); otherwise :class:`NotApplicable` says why.

Examples
--------
>>> from synth.library import load_topology
>>> from synth.verify import verify
>>> topo = load_topology("dgx-h100:boxes=2")
>>> s = nvls_tree(topo, Kind.ALLREDUCE)
>>> s.chunks, len(s.switch_ops), verify(s, topo).transfers > 0   # 16 chunks x 2 boxes x (reduce, multicast)
(16, 64, True)
"""

from __future__ import annotations

from collections.abc import Sequence

from synth.algorithms.nvls import domain_switch, switch_multicast, switch_reduce
from synth.algorithms.ring import paths_for, rail_layout
from synth.algorithms.tree import double_binary_tree
from synth.algorithms.utils import make_collective
from synth.collectives import Kind
from synth.errors import NotApplicable
from synth.schedule import COPY, REDUCE, Schedule, ScheduleBuilder
from synth.topology import Topology


def box_heads(topology: Topology, name: str) -> tuple[list[list[int]], list[int]]:
    """The boxes (ranks in local order) and the local index of each NIC's head gpu (its first gpu), as
    NCCL's NVLS and CollNet graphs take them; :class:`NotApplicable` without several boxes with NICs."""
    layout = rail_layout(topology)
    if layout is None or len(layout.boxes) < 2:
        raise NotApplicable(f"{name} on {topology.name}: needs several equal boxes with NICs (it runs across boxes)")
    return [list(box) for box in layout.boxes], [nic[0] for nic in layout.nics]


def gather_up(builder: ScheduleBuilder, topology: Topology, chunk: int, dst: int, sources: Sequence[tuple[int, list[int]]],
              ready: list[int], paths: dict[tuple[int, int], tuple[str, ...]]) -> list[int]:
    """Add every source's value of ``chunk`` (each ``(rank, deps)``) into ``dst``'s data cell after
    ``ready``: each lands in a fresh scratch slot of ``dst``, then a local reduce adds it, one after
    another. Returns the deps after which ``dst`` holds the sum."""
    gpu = topology.gpus[dst]
    after = list(ready)
    for src, deps in sources:
        slot = builder.new_scratch(dst)
        moved = builder.add(src, dst, chunk, paths[(src, dst)], COPY, deps, None, slot)
        after = [builder.add(dst, dst, chunk, (gpu,), REDUCE, [*after, moved], slot, None)]
    return after


def tree_allreduce(builder: ScheduleBuilder, topology: Topology, chunk: int, ranks: Sequence[int],
                   parents: Sequence[int | None], ready: dict[int, list[int]],
                   paths: dict[tuple[int, int], tuple[str, ...]]) -> dict[int, list[int]]:
    """Allreduce ``chunk`` over the tree ``parents`` (indices into ``ranks``), rank ``ranks[k]`` joining
    after ``ready[k]``: partial sums up to the root, the total down. Returns, per index, the deps after
    which that rank holds the total."""
    count = len(ranks)
    children: dict[int, list[int]] = {k: [] for k in range(count)}
    for k, parent in enumerate(parents):
        if parent is not None:
            children[parent].append(k)

    def depth(k: int) -> int:
        d = 0
        while parents[k] is not None:
            k, d = parents[k], d + 1  # type: ignore[assignment]
        return d

    order = sorted(range(count), key=depth)
    summed: dict[int, list[int]] = {}
    for k in reversed(order):  # leaves first
        summed[k] = gather_up(builder, topology, chunk, ranks[k], [(ranks[j], summed[j]) for j in children[k]],
                              ready[k], paths)
    done: dict[int, list[int]] = {}
    for k in order:  # root first
        parent = parents[k]
        if parent is None:
            done[k] = summed[k]
        else:
            src, dst = ranks[parent], ranks[k]
            done[k] = [builder.add(src, dst, chunk, paths[(src, dst)], COPY, [*done[parent], *summed[k]])]
    return done


def nvls_tree(topology: Topology, kind: Kind, *, chunks: int | None = None) -> Schedule:
    """NCCL's NVLS-Tree allreduce (see the module doc).

    ``chunks``: chunks per buffer (default 2H, H heads per box: every head once in each of the two trees).
    """
    if kind != Kind.ALLREDUCE:
        raise NotApplicable(f"nvls_tree does only allreduce, not {kind} (NCCL runs NVLS-Tree for allreduce only)")
    boxes, heads = box_heads(topology, "nvls_tree")
    switches = [domain_switch(topology, box, kind) for box in boxes]
    coll = make_collective(topology, kind, chunks, None, default_chunks=2 * len(heads))
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "nvls_tree",
                              {"chunks": coll.chunks, "heads": heads})
    trees = double_binary_tree(len(boxes))
    pairs = [(box[h], other[h]) for h in heads for box in boxes for other in boxes if box is not other]
    paths = paths_for(topology, pairs)
    for chunk in range(coll.chunks):
        h = heads[chunk % len(heads)]
        parents = trees[(chunk // len(heads)) % 2]
        ranks = [box[h] for box in boxes]
        ready = {k: [switch_reduce(builder, topology, switches[k], chunk, box, [box[h]])[box[h]]]
                 for k, box in enumerate(boxes)}
        done = tree_allreduce(builder, topology, chunk, ranks, parents, ready, paths)
        for k, box in enumerate(boxes):
            switch_multicast(builder, topology, switches[k], chunk, box[h], [r for r in box if r != box[h]], done[k])
    return builder.build()


__all__ = ["box_heads", "gather_up", "nvls_tree", "tree_allreduce"]
