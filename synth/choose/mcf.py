"""mcf's size choice: the slice size its schedule streams fastest at one size.

:func:`synth.algorithms.mcf.mcf` gives the same schedule at every size: the maximum concurrent flow's routes
rounded to chunks. How finely the chunks are sliced is not size-free: a chunk relayed through a gpu crosses
it store-and-forward slice by slice, so a coarse slice holds the next hop back, and the thousands of flows
sharing a NIC finish unevenly. On 8 DGX A100 boxes with a top-2 MoE demand at 1 GiB per gpu the plan rule's
347 KiB slices reach 88.5% of the bound, 32 KiB slices 98.8%.

:func:`choose` simulates (flow model, :class:`~synth.choose.Search`) the plan rule's slicing first, then
each slice size of :data:`SLICES` finer than the rule's and than a chunk, from the largest, cut off at the
best so far, stopping at the first that is not faster (the time is taken to be unimodal in the slice
size) or over a simulation limit; the fastest is pinned in ``params["plan"]["slice_bytes"]`` (the plan
rule's own: nothing pinned). The floor is 32 KiB, as for forest and insw (the flow model charges no
per-slice cost, so finer slices would only look better in it), except that a chunk under 128 KiB may
also be cut in 2 or 4 (as ``--slices 4`` does), never under 4 KiB: on 8 DGX A100 boxes at 1 GiB in all a
chunk is 16 KiB, one slice under the rule (70.9% of the bound), 89.3% in four.

Examples
--------
>>> from synth.library import load_topology
>>> from synth.demand import moe
>>> topo = load_topology("dgx-a100:boxes=2")
>>> schedule = choose(topo, Kind.ALLTOALLV, 16 * 2**30, demand=moe(16, experts_per_gpu=8, seed=0).to_chunks())
>>> schedule.params["variant"], schedule.params["plan"]
('32 KiB slices', {'slice_bytes': 32768})
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from synth.algorithms.mcf import mcf
from synth.algorithms.utils import ProgressFunction
from synth.choose import Search, seconds_text
from synth.collectives import Kind
from synth.errors import InputError
from synth.plan import make_plan
from synth.schedule import Schedule
from synth.topology import Topology

__all__ = ["SLICES", "choose"]

#: The slice sizes tried (bytes), coarsest first; the last is the floor.
SLICES: tuple[int, ...] = (512 * 1024, 256 * 1024, 128 * 1024, 64 * 1024, 32 * 1024)
#: Chunks under this many bytes may also be cut in 2 and 4 slices, of at least :data:`SMALLEST_SLICE`.
SMALL_CHUNK = 128 * 1024
SMALLEST_SLICE = 4 * 1024
#: The key and label of the plan rule's own slicing.
RULE = "the plan rule's slices"


def choose(topology: Topology, kind: Kind, size: int, *, progress: ProgressFunction | None = None,
           work_limit: int | None = None, **options: Any) -> Schedule:
    """mcf's schedule (``options`` as :func:`~synth.algorithms.mcf.mcf` takes them) with the slice size fastest
    at ``size`` bytes pinned (the module docstring); ``work_limit`` caps each finer slicing's link-sharing
    work (one past it is skipped and the choice stops)."""
    if work_limit is not None and (isinstance(work_limit, bool) or not isinstance(work_limit, int) or work_limit < 0):
        raise InputError("", "work_limit", f"expected a whole number of link-sharing work units, got {work_limit!r}")
    schedule = mcf(topology, kind, **options)
    search = Search(topology, kind, size, progress, work_limit=work_limit)
    best_s = search.measure(schedule, RULE, RULE, limited=False, required=True)
    assert best_s is not None
    best: tuple[float, int | None, str] = (best_s, None, RULE)
    rule_slice = make_plan(schedule.chunks, size, "Simple").slice_bytes
    chunk_bytes = size / schedule.chunks
    labels = {slice_bytes: f"{slice_bytes // 1024} KiB slices" for slice_bytes in SLICES}
    if chunk_bytes < SMALL_CHUNK:
        labels.update({math.ceil(chunk_bytes / parts): f"{parts} slices per chunk" for parts in (2, 4)
                       if chunk_bytes / parts >= SMALLEST_SLICE})
    for slice_bytes in sorted(labels, reverse=True):
        if slice_bytes >= min(rule_slice, chunk_bytes):
            continue
        label = labels[slice_bytes]
        seconds = search.measure(schedule, label, label, slice_bytes=slice_bytes, cutoff=best[0])
        if seconds is None or not math.isfinite(seconds) or seconds >= best[0]:
            break
        best = (seconds, slice_bytes, label)
    seconds, chosen, label = best
    search.done(f"chose {label}: {seconds_text(seconds)}")
    record = {"model": "flow", "chosen_slice_bytes": chosen, "time_s": search.times}
    extra: dict[str, Any] = {"size": size, "variant": label if chosen is not None else "rule",
                             "modelled_time_s": seconds, "size_choice": record}
    if chosen is not None:
        extra["plan"] = {**schedule.params.get("plan", {}), "slice_bytes": chosen}
    return dataclasses.replace(schedule, params={**schedule.params, **extra})
