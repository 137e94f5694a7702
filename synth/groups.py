"""Process groups: a collective on a subset of the gpus, running on the whole fabric.

A group is a tuple of member gpus in rank order (rank i of the collective is gpu ``members[i]``). It is
given as gpu ids (``b0.gpu0,b0.gpu2,b1.gpu5``) or as a layout over the topology's gpus in rank order, the way
training frameworks split them:

- ``tp=K``: consecutive groups of K gpus (``0..K-1``, ``K..2K-1``, ...), as tensor parallelism does;
- ``dp=K``: K gpus strided by N/K (``0, N/K, 2N/K, ...``), as data parallelism across the tp groups does;
- either with ``:I`` picks the I-th such group (default 0): ``tp=8:1`` is gpus 8..15.

One group is one collective; several groups at once (every tp group together) share the fabric and are a
separate feature (:mod:`synth.jobs`).

The collective runs on :func:`group_view`: the same fabric (every link and switch, the non-member gpus
kept in the graph) whose rank list is the members. A path may cross a non-member gpu only where that gpu
forwards, exactly as for a member (:mod:`synth.routing`); a non-member is never a transfer's end, so it is
never a relay and never holds data of the collective.

Examples
--------
>>> from synth.library import load_topology
>>> topo = load_topology("dgx-h100:boxes=4")
>>> parse_group(topo, "tp=8:1")[:2], parse_group(topo, "dp=4")
(('b1.gpu0', 'b1.gpu1'), ('b0.gpu0', 'b1.gpu0', 'b2.gpu0', 'b3.gpu0'))
>>> group_view(topo, parse_group(topo, "dp=4")).num_ranks
4
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from synth.errors import InputError, NotApplicable
from synth.topology import Topology

#: The layouts ``--group`` accepts, and what each means.
LAYOUTS = {"tp": "consecutive groups of K gpus", "dp": "K gpus strided by N/K"}


def parse_group(topology: Topology, text: str, source: str = "", field: str = "--group") -> tuple[str, ...]:
    """The member gpus a ``--group`` value names (gpu ids, or a ``tp=K[:I]`` / ``dp=K[:I]`` layout);
    an :class:`InputError` naming ``field`` for an unknown or repeated gpu, a layout that does not divide
    the gpu count, an index out of range, or a group of fewer than 2 gpus."""
    text = str(text).strip()
    if "=" in text:
        return _layout(topology, text, source, field)
    members = [name.strip() for name in text.split(",") if name.strip()]
    return check_group(topology, members, source, field)


def check_group(topology: Topology, members: Sequence[str], source: str = "", field: str = "--group") -> tuple[str, ...]:
    """``members`` as a group of ``topology``: at least 2 distinct gpus of it; an :class:`InputError`
    naming ``field`` otherwise."""
    rank_of = topology.rank_of
    seen: set[str] = set()
    for gpu in members:
        if gpu not in rank_of:
            raise InputError(source, field, f"unknown gpu {gpu!r}: topology {topology.name!r} has gpus "
                             f"{topology.gpus[0]}..{topology.gpus[-1]}")
        if gpu in seen:
            raise InputError(source, field, f"gpu {gpu!r} is named twice")
        seen.add(gpu)
    if len(members) < 2:
        raise InputError(source, field, f"a group needs at least 2 gpus, got {len(members)}")
    return tuple(members)


def _layout(topology: Topology, text: str, source: str, field: str) -> tuple[str, ...]:
    name, _, rest = text.partition("=")
    name = name.strip().lower()
    size_text, _, index_text = rest.partition(":")
    if name not in LAYOUTS:
        raise InputError(source, field, f"unknown layout {name!r}; expected tp=K or dp=K (optionally :I)")
    try:
        size, index = int(size_text), int(index_text or 0)
    except ValueError:
        raise InputError(source, field, f"expected {name}=K[:I] with whole numbers, got {text!r}") from None
    n = topology.num_ranks
    if size < 2:
        raise InputError(source, field, f"a group needs at least 2 gpus, got {name}={size}")
    if n % size:
        raise InputError(source, field, f"{name}={size} does not divide the {n} gpus of {topology.name!r}")
    count = n // size
    if not 0 <= index < count:
        raise InputError(source, field, f"{name}={size} makes {count} groups; index {index} is not in 0..{count - 1}")
    ranks = range(index * size, (index + 1) * size) if name == "tp" else range(index, n, count)
    return tuple(topology.gpus[r] for r in ranks)


def layout_groups(topology: Topology, name: str, size: int) -> list[tuple[str, ...]]:
    """Every group of layout ``name`` (tp or dp) with ``size`` gpus each, in index order."""
    return [parse_group(topology, f"{name}={size}:{i}") for i in range(topology.num_ranks // size)]


def group_view(topology: Topology, members: Sequence[str] | None) -> Topology:
    """The fabric with ``members`` as its ranks (``topology`` itself for None or every gpu in order).

    Every node and link stays; the boxes follow the members; the dimensions are dropped (a group is no
    longer a full grid). The view's fingerprint differs from the fabric's: schedules record the fabric's.
    """
    if members is None or tuple(members) == topology.gpus:
        return topology
    members = check_group(topology, list(members))
    rank_of = topology.rank_of
    boxes = None if topology.boxes is None else tuple(topology.boxes[rank_of[g]] for g in members)
    view = dataclasses.replace(topology, gpus=tuple(members), boxes=boxes, dimensions=None,
                               metadata={**topology.metadata, "group_of": list(topology.gpus)})
    _check_connected(view)
    return view


def _check_connected(view: Topology) -> None:
    """Refuse a group whose members cannot reach each other without a non-member relaying (a kernel copy
    on a gpu outside the group, which the group's collective never runs on)."""
    from synth.routing import relay_chain

    for other in range(1, view.num_ranks):
        for src, dst in ((0, other), (other, 0)):
            try:
                relay_chain(view, src, dst)
            except NotApplicable:
                raise NotApplicable(f"group member {view.gpus[dst]} cannot be reached from {view.gpus[src]} on "
                                    f"{view.name} without relaying through a gpu outside the group") from None


def fabric_gpus(topology: Topology) -> tuple[str, ...]:
    """Every gpu of the fabric, members or not (the full rank list of the topology a view came from)."""
    full = topology.metadata.get("group_of")
    return tuple(full) if isinstance(full, list) else topology.gpus


def fabric_of(topology: Topology) -> Topology:
    """The fabric a view came from, every gpu a rank in fabric order (``topology`` itself when it is no
    view). The fabric's dimensions are not kept in a view, so the result has none.

    Examples
    --------
    >>> from synth.library import load_topology
    >>> fabric = load_topology("switch:n=8")
    >>> fabric_of(group_view(fabric, parse_group(fabric, "dp=4"))).gpus == fabric.gpus
    True
    """
    full = fabric_gpus(topology)
    if full == topology.gpus:
        return topology
    metadata = {key: value for key, value in topology.metadata.items() if key != "group_of"}
    return dataclasses.replace(topology, gpus=full, boxes=None, dimensions=None, metadata=metadata)
