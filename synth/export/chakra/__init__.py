"""Chakra ET export for ASTRA-sim (``synth export chakra``) and import (``synth import chakra``).

Export writes, into an output folder (atomically), for every message size:

- ``<name>.<rank>.et``: the schedule as per-rank traces (see :mod:`synth.trace` for the exact
  node mapping: COMM_SEND_NODE / COMM_RECV_NODE per transfer, or per slice of a transfer, with a unique
  tag, a COMP_NODE per reduction, dependencies so a rank forwards or reduces a chunk only after it has
  it), plus the ordering nodes of :func:`synth.astra.sequence_sends` that make the outcome independent
  of the order in which ASTRA-sim issues simultaneously ready nodes;
- ``workload.<rank>.et``: the workload, one COMM_COLL_NODE per rank (``comm_type``, ``comm_size``);
- ``system.json``: ``"<coll>-implementation-custom": ["<name>"]`` and ``"preferred-dataset-splits": 1``;

and once: ``remote_memory.json``, ``network.yml`` when ASTRA-sim can describe the topology (a product
of Ring / FullyConnected / Switch dimensions; bandwidth in GB = 2^30 bytes, latency in ns),
``run_astrasim.sh`` (runs ASTRA-sim and checks every rank's finish against the ``astra`` model) and
``NOTE.txt``. One size writes the set straight into the folder; several sizes write one subfolder per
size (``1MiB/``, ``1GiB/``), each with its own ``run_astrasim.sh``, and a top ``run_astrasim.sh`` that
runs them all. Sizes whose messages ASTRA-sim cannot run (under 1 ns on a link,
:func:`synth.astra.smallest_message`) are refused before anything is written.

A schedule in the trees form (:mod:`synth.trees`) is streamed: its traces are built a block of ranks at a
time from the trees (:func:`synth.trace.stream_rank_traces`), the same bytes as its expansion's, without the
``astra`` model's prediction and ordering nodes (they need every transfer at once; NOTE.txt says so).
``synth export chakra`` streams a trees-form file only past the ``max_transfers`` limit.

Import reads a per-rank trace set back into a schedule. Traces synth wrote carry the transfer id,
chunk, op, deps and path of every message as extra attributes, so they come back exactly. Traces from
elsewhere (for example Chakra's MSCCL converter) are matched send-to-recv by (tag, src, dst, size)
first in first out, in the order ASTRA-sim would issue them (found by running them through the
``astra`` simulator); chunks are inferred by following each message back to the messages it forwards
(through COMP nodes), and a recv followed by a COMP is a reduction. Routes are shortest paths through
switches only, balanced among equal ones, or through npus when there is no other way (as ASTRA-sim's
Ring forwards). COMP durations and recv-side waits are kept in ``params["et"]`` so the ``astra`` model
of the imported schedule reproduces the traces' timing. A sliced export of synth's comes back as one
transfer per slice-0 message; synth's ordering nodes (attribute ``order_after``) carry dependencies only.

Modules: :mod:`~synth.export.chakra.write` (the export), :mod:`~synth.export.chakra.read` (the import),
:mod:`~synth.export.chakra.infer` (transfers and chunks inferred from traces synth did not write).
"""

from __future__ import annotations

from synth.export.chakra.read import et_files, import_chakra, read_et_set, simulate_et_set
from synth.export.chakra.write import (
    BINARY_AWARE,
    BINARY_UNAWARE,
    CUSTOM_SLOT,
    REMOTE_MEMORY,
    SIGNATURE,
    WORKLOAD_PREFIX,
    ChakraExport,
    EtSet,
    default_name,
    export_chakra,
    note_text,
    run_script,
    system_json,
)

__all__ = [
    "BINARY_AWARE", "BINARY_UNAWARE", "CUSTOM_SLOT", "REMOTE_MEMORY", "SIGNATURE", "WORKLOAD_PREFIX", "ChakraExport",
    "EtSet", "default_name", "et_files", "export_chakra", "import_chakra", "note_text", "read_et_set", "run_script",
    "simulate_et_set", "system_json",
]
