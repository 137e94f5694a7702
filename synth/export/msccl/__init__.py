"""MSCCL XML export (``synth export msccl``) and import (``synth import msccl``).

Export lowers a schedule to the XML the MSCCL executor runs, out of place (``inplace="0"
outofplace="1"``), with ``minBytes`` and ``maxBytes`` always present and ``coll`` spelled the way the
runtime's parser wants it (``reducescatter``):

Buffers
    Every data cell and scratch slot of the schedule lives in one buffer position at a time: a rank's
    own data in the input buffer ``i``; what it receives in the output buffer ``o`` when the chunk
    belongs in its output, else in the scratch buffer ``s`` (one position per cell or scratch slot,
    never reused). A reduction reads its local operand where the cell is and writes the result where it
    belongs. Chunks a rank must show in its output without receiving them (its own allgather chunk, its
    alltoall chunk to itself, the broadcast root's data) get a ``cpy`` step first.
Local ops
    A local copy is a ``cpy`` step, a local reduction a ``re`` step (dst = dst + src in place, preceded
    by a ``cpy`` when the partial value is not yet where the result belongs), on the threadblock that
    wrote what it reads (else on that of its latest dependency on the gpu).
Threadblocks and channels
    Each transfer is a send step on the source and a recv step on the destination, on one channel. On
    every gpu and channel, send peers and recv peers are paired into threadblocks (one send peer and
    one recv peer each), preferring pairs where a received chunk is forwarded. Channels are tried from
    1 upwards (a transfer's channel is its chunk, or its pair of ranks, modulo the channel count) until
    every runtime limit holds; above 5,000 transfers 8, 16 and 32 first, then the counts between, then
    fewer, since fewer channels make a threadblock serialise unrelated messages
    (:data:`~synth.export.msccl.lower.LARGE_CHANNELS`).
Order and dependencies
    All steps follow one topological order of the transfers, so send and recv orders agree on every
    connection and no cycle of waits can form. A step waits for the steps of the same gpu that the
    transfer depends on (``depid``/``deps``, ``hasdep="1"`` on the awaited step); a dependency on
    another threadblock beyond the first becomes a ``nop`` step; dependencies on ranks that are not an
    end of the transfer are replaced by their nearest ancestors that are.
Fused steps
    A recv followed on the same threadblock by the send of the chunk it received becomes one step:
    ``rcs`` (copy), ``rrcs`` (reduce, keep the result) or ``rrs`` (reduce, result needed only by the
    send); a reduction that is not forwarded is ``rrc``.
Limits (checked before writing; a :class:`~synth.errors.LimitError` names the limit, by how much it is
exceeded and the fix): channels at most ``max_channels`` (32), threadblocks per channel per gpu at
most 32, threadblocks per gpu at most the SM count (``sms``, 108 on an A100), steps per threadblock
below ``max_steps`` (256; some builds 64), ``cnt`` below 72, offsets within the declared chunk counts; and
the executor's XML parser's: at most ``max_gpus`` (1024) gpus, and per rank fewer than ``parser_nodes``
(4096) nodes for ``<algo>``, every ``<gpu>`` and the rank's own ``<tb>`` and ``<step>`` elements (see
:class:`~synth.export.msccl.program.MscclLimits`); a program name of at most 255 characters.

Import reads MSCCL XML (safely: ``defusedxml``, no DTDs or entities) from MSCCLang/msccl-tools, TACCL,
ForestColl or synth, executes it symbolically (threadblocks in step order, ``depid``/``deps``, FIFO
connections per (sender, receiver, channel)) and records one transfer per chunk sent and one local op per
``cpy``/``re`` that must move data. Buffer positions map onto the schedule's buffers (see
:class:`~synth.export.msccl.cells.Cells`): a chunk's output position is its data cell, its input position shares that cell until
the output is written, every other position is a scratch slot of its own; values a later step still
reads are kept by local copies. Dependencies are the data hazards on those buffers in the simulated
order: a transfer waits for the write of the data it sends, and for the previous write and the reads
since of what it overwrites. Two steps that touch one buffer position, one of them writing, must be
ordered by the program itself (threadblock order, ``depid``/``deps``, a send before its receive), else
the import reports the race (see :class:`~synth.export.msccl.races.Races`).
Accepts ``reduce_scatter``, files without ``outofplace``, ``minBytes`` or ``maxBytes``, in-place buffers
(``o_chunks="0"`` / ``i_chunks="0"``) and ``nop`` steps with ``cnt="0"`` and offsets -1; refuses
``coll="custom"`` (no pre- or postcondition to verify) and an output position that is never written.
Routes: see :class:`synth.export.RouteBalancer` (switches and forwarding gpus only).

Modules, one idea each: :mod:`~synth.export.msccl.program` (the lowered program and the runtime's
limits), :mod:`~synth.export.msccl.writer` (its XML text), :mod:`~synth.export.msccl.locations` (buffer
locations per transfer), :mod:`~synth.export.msccl.threadblocks` (threadblocks and ops for one channel
layout), :mod:`~synth.export.msccl.steps` (steps, fusion and waits), :mod:`~synth.export.msccl.lower`
(the search over channel layouts), :mod:`~synth.export.msccl.export` (writing the file),
:mod:`~synth.export.msccl.routing` (the runtime's paths), :mod:`~synth.export.msccl.parse` (reading the
XML), :mod:`~synth.export.msccl.execute` (symbolic execution), :mod:`~synth.export.msccl.races` (the race
check), :mod:`~synth.export.msccl.cells` (buffers and dependencies of the imported schedule) and
:mod:`~synth.export.msccl.importer` (the import). This package re-exports their public names.
"""

from __future__ import annotations

from synth.export.msccl.execute import FORWARDING, RECEIVING, Cell
from synth.export.msccl.export import export_msccl
from synth.export.msccl.importer import import_msccl
from synth.export.msccl.lower import SEARCH_TRANSFERS, lower_msccl
from synth.export.msccl.parse import MAX_XML_BYTES, parse_xml
from synth.export.msccl.program import (
    COLL_NAME,
    DEFAULT_MAX_BYTES,
    PROTOCOLS,
    Location,
    MscclLimits,
    MscclProgram,
    iter_steps,
)
from synth.export.msccl.routing import RuntimeRouting, runtime_routing
from synth.export.msccl.writer import program_xml

__all__ = [
    "COLL_NAME", "DEFAULT_MAX_BYTES", "FORWARDING", "MAX_XML_BYTES", "PROTOCOLS", "RECEIVING", "SEARCH_TRANSFERS",
    "Cell", "Location", "MscclLimits", "MscclProgram", "RuntimeRouting", "export_msccl", "import_msccl", "iter_steps",
    "lower_msccl", "parse_xml", "program_xml", "runtime_routing",
]
