"""The topology library: parametric builders and the named real systems, usable by name anywhere.

Modules: :mod:`~synth.library.spec` (spec strings), :mod:`~synth.library.registry` (entries, ``build``),
:mod:`~synth.library.files` (loading by name or path, the shipped files), :mod:`~synth.library.building`
(checked parameters and parts every builder shares), then the builders: :mod:`~synth.library.parametric`,
:mod:`~synth.library.nvidia`, :mod:`~synth.library.amd`, :mod:`~synth.library.google`,
:mod:`~synth.library.fabrics` (imported in that order, which is the order ``synth topologies`` lists).

A topology argument is a file path, a library name (``dgx-a100``), a name with parameters
(``dgx-a100:boxes=2``, ``torus:dims=4x4``), or the bare name of a file shipped in ``topologies/``
(``dgx-a100-2box`` or ``dgx-a100-2box.json``). ``synth topologies`` lists them all.

Spec syntax: ``name:key=value,key=value``. Values are booleans (``true``/``false``), numbers, lists of
numbers joined by ``x`` (``dims=4x4x4``, ``bandwidths=450x50``), or lists of words joined by ``/``
(``kinds=Switch/Switch``). Entry names use dashes, parameter names underscores.

Every topology built here is named by its canonical spec: the entry name plus the parameters that
differ from their defaults (``dgx-a100:boxes=2``, ``ring:n=4``, ``dgx1``). So a schedule, which records
its topology's name, can always be checked against the topology it was made for.

Units: bandwidth in GB/s (10^9 bytes/s) per direction, latency in microseconds per link (hop).

Examples
--------
>>> load_topology("dgx-a100:boxes=2").num_ranks
16
>>> load_topology("torus:dims=4x4x4").name
'torus:dims=4x4x4'
"""

from __future__ import annotations

# isort: off
# The builder modules register their entries on import, in this order (the order `synth topologies` lists).
from synth.library import parametric, nvidia, amd, google, fabrics  # noqa: F401
# isort: on
from synth.library.amd import MI250_XGMI_LINKS, mi250, mi300x
from synth.library.fabrics import bigraph, dragonfly
from synth.library.files import (
    SHIPPED_FILES,
    TOPOLOGY_DIR,
    library_topology,
    load_topology,
    shipped_files,
    topology_json,
    write_shipped,
)
from synth.library.google import tpu_v4, tpu_v5p
from synth.library.nvidia import (
    DGX1_DOUBLE_PAIRS,
    DGX1_SINGLE_PAIRS,
    dgx1,
    dgx2,
    dgx_a100,
    dgx_b200,
    dgx_h100,
    dgx_h200,
    dgx_superpod,
    gb200_nvl72,
    ndv2,
)
from synth.library.parametric import (
    fully_connected,
    hypercube,
    leaf_spine,
    multidim,
    ring,
    switch,
    torus,
)
from synth.library.registry import LIBRARY, Entry, build, entry, names, shipped
from synth.library.spec import format_value, parse_spec, spec_name

__all__ = [
    "DGX1_DOUBLE_PAIRS", "DGX1_SINGLE_PAIRS", "LIBRARY", "MI250_XGMI_LINKS", "SHIPPED_FILES", "TOPOLOGY_DIR",
    "Entry", "bigraph", "build", "dgx1", "dgx2", "dgx_a100", "dgx_b200", "dgx_h100", "dgx_h200",
    "dgx_superpod", "dragonfly", "entry",
    "format_value", "fully_connected", "gb200_nvl72", "hypercube", "leaf_spine", "library_topology",
    "load_topology", "mi250", "mi300x", "multidim", "names", "ndv2", "parse_spec", "ring", "shipped",
    "shipped_files", "spec_name", "switch", "topology_json", "torus", "tpu_v4", "tpu_v5p", "write_shipped",
]
