"""CollNet: NCCL's allreduce across boxes with the reduction done in the network switches (IB SHARP).

As NCCL v2.23.4-1 builds it (github.com/NVIDIA/nccl, tag ``v2.23.4-1``: ``src/device/all_reduce.h``,
the ``NCCL_ALGO_COLLNET_DIRECT``, ``NCCL_ALGO_COLLNET_CHAIN`` and multi-node ``NCCL_ALGO_NVLS`` kernels;
``connectCollNet`` / ``connectNvls`` in ``src/graph/connect.cc``; read for its rules only, no code is
copied). Every box has *heads*, one per NIC (the gpu next to it); chunk ``c`` of the buffer belongs to
head ``c mod H`` of every box. Per chunk:

1. **in the box**, the chunk's sum over the box reaches its head, by ``shape``:

   - ``nvls``: one in-switch reduce in the box's NVLink switch, output to the head (NCCL's NVLS
     algorithm on several boxes, which NCCL runs only with CollNet support: ``nvls.out`` is the
     CollNet connection, the "NVLS+SHARP" path of the 2.2x releases);
   - ``direct`` (CollNet Direct): every other gpu sends its value straight to the head (NCCL's
     ``scatter`` to the heads), the head adds them;
   - ``chain`` (CollNet Chain): the box's gpus form a chain ending at the head, each adding its value to
     what it received and passing it on;

2. **in the network**: the heads of one index send their box sums through their NICs to the switch that
   serves that rail and reduces (a leaf with IB SHARP); the switch adds them and multicasts the total back
   to every one of those heads (one in-switch reduce op, an input and an output leg per box);
3. **in the box again**, the head hands the total to every gpu of its box: an in-switch multicast
   (``nvls``), a copy to each gpu (``direct``), or back along the chain (``chain``).

``shape="auto"``: ``nvls`` where the box's switch reduces and multicasts, ``direct`` elsewhere. Values
sent to a head or along a chain land in scratch and the receiver adds them with a local reduce.
:class:`NotApplicable`, with the reason, where the network has no switch that reduces for every rail
(CollNet needs SHARP), where the system has no boxes with NICs, or for ``nvls`` without an NVLS box.

Examples
--------
>>> from synth.library import load_topology
>>> from synth.verify import verify
>>> topo = load_topology("dgx-superpod:sus=1,nodes_per_su=4,sharp=true")
>>> s = collnet(topo, Kind.ALLREDUCE)
>>> s.params["shape"], verify(s, topo).transfers == len(s.transfers)
('nvls', True)
"""

from __future__ import annotations

from synth.algorithms.nvls import DEFAULT_DTYPE, domain_switch, leg_path, switch_multicast, switch_reduce
from synth.algorithms.nvls_tree import box_heads, gather_up
from synth.algorithms.ring import paths_for
from synth.algorithms.utils import make_collective
from synth.collectives import Kind
from synth.errors import InputError, NotApplicable
from synth.schedule import COPY, Schedule, ScheduleBuilder
from synth.topology import Topology

SHAPES = ("auto", "nvls", "direct", "chain")


def network_switch(topology: Topology, ranks: list[int], exclude: set[str]) -> str | None:
    """The switch (not in ``exclude``) that every rank of ``ranks`` reaches, and is reached from,
    through switches only, that reduces ``DEFAULT_DTYPE`` sums for a group that size and multicasts; the
    one with the fewest hops in all (ties: node order). None when there is none."""
    best: tuple[int, str] | None = None
    for switch in topology.switches:
        if switch in exclude:
            continue
        reduction = topology.reduction(switch)
        if (reduction is None or not topology.multicasts(switch) or "sum" not in reduction.ops
                or DEFAULT_DTYPE not in reduction.dtypes
                or (reduction.max_group is not None and reduction.max_group < len(ranks))):
            continue
        try:
            hops = sum(len(leg_path(topology, topology.gpus[r], switch, inward=True)) +
                       len(leg_path(topology, topology.gpus[r], switch, inward=False)) for r in ranks)
        except NotApplicable:
            continue
        if best is None or hops < best[0]:
            best = (hops, switch)
    return None if best is None else best[1]


def collnet(topology: Topology, kind: Kind, *, shape: str = "auto", chunks: int | None = None) -> Schedule:
    """NCCL's CollNet allreduce through SHARP switches (see the module doc).

    ``shape``: ``auto``, ``nvls``, ``direct`` or ``chain`` (the in-box part). ``chunks``: chunks per
    buffer (default 2H, H heads per box).
    """
    if shape not in SHAPES:
        raise InputError("", "shape", f"expected one of {', '.join(SHAPES)}, got {shape!r}")
    if kind != Kind.ALLREDUCE:
        raise NotApplicable(f"collnet does only allreduce here, not {kind}")
    boxes, heads = box_heads(topology, "collnet")
    box_switches: list[str | None] = []
    why = ""
    for box in boxes:
        try:
            box_switches.append(domain_switch(topology, box, kind))
        except NotApplicable as error:
            box_switches.append(None)
            why = str(error)
    if shape == "auto":
        shape = "nvls" if all(box_switches) else "direct"
    if shape == "nvls" and not all(box_switches):
        raise NotApplicable(f"collnet shape=nvls on {topology.name}: the boxes have no NVLS switch ({why})")
    exclude = {s for s in box_switches if s is not None}
    rails = {}
    for h in heads:
        switch = network_switch(topology, [box[h] for box in boxes], exclude)
        if switch is None:
            raise NotApplicable(f"collnet on {topology.name}: no network switch reduces and multicasts for the "
                                f"gpus at local index {h} of every box (CollNet needs switches with IB SHARP)")
        rails[h] = switch
    coll = make_collective(topology, kind, chunks, None, default_chunks=2 * len(heads))
    builder = ScheduleBuilder(coll, topology.name, topology.gpus, "collnet",
                              {"chunks": coll.chunks, "shape": shape, "heads": heads, "network": rails})
    size = len(boxes[0])
    pairs = [(a, b) for box in boxes for a in box for b in box if a != b]
    paths = paths_for(topology, pairs) if shape != "nvls" else {}
    for chunk in range(coll.chunks):
        h = heads[chunk % len(heads)]
        partial: dict[int, list[int]] = {}
        chains: dict[int, list[int]] = {}
        for k, box in enumerate(boxes):
            head = box[h]
            if shape == "nvls":
                partial[k] = [switch_reduce(builder, topology, box_switches[k], chunk, box, [head])[head]]  # type: ignore[arg-type]
            elif shape == "direct":
                partial[k] = gather_up(builder, topology, chunk, head, [(r, []) for r in box if r != head], [], paths)
            else:
                chain = [box[(h + 1 + i) % size] for i in range(size)]  # ends at the head
                chains[k] = chain
                after: list[int] = []
                for previous, rank in zip(chain, chain[1:], strict=False):
                    after = gather_up(builder, topology, chunk, rank, [(previous, after)], [], paths)
                partial[k] = after
        outputs = switch_reduce(builder, topology, rails[h], chunk, [box[h] for box in boxes],
                                [box[h] for box in boxes], {box[h]: partial[k] for k, box in enumerate(boxes)})
        for k, box in enumerate(boxes):
            head = box[h]
            total = [outputs[head]]
            if shape == "nvls":
                switch_multicast(builder, topology, box_switches[k], chunk, head, [r for r in box if r != head],  # type: ignore[arg-type]
                                 total)
            elif shape == "direct":
                for rank in box:
                    if rank != head:
                        builder.add(head, rank, chunk, paths[(head, rank)], COPY, total)
            else:
                after = total
                chain = chains[k]
                for rank, following in zip(reversed(chain), list(reversed(chain))[1:], strict=False):
                    after = [builder.add(rank, following, chunk, paths[(rank, following)], COPY, after)]
    return builder.build()


__all__ = ["SHAPES", "collnet", "network_switch"]
