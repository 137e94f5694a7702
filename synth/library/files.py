"""Topologies by file path, library spec or shipped-file name; the shipped files and how they are written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from synth.errors import InputError
from synth.graphs import smallest_first_order
from synth.library.achievable import achievable, split_suffix
from synth.library.registry import LIBRARY, build
from synth.topology import Topology

#: Folder of the shipped topology files (next to the package in a source checkout).
TOPOLOGY_DIR = Path(__file__).resolve().parents[2] / "topologies"

#: Shipped files: file stem in ``topologies/`` -> the library spec it is written from.
SHIPPED_FILES: dict[str, str] = {
    "dgx1": "dgx1",
    "ndv2-2box": "ndv2:boxes=2",
    "dgx2": "dgx2",
    "dgx-a100": "dgx-a100",
    "dgx-a100-2box": "dgx-a100:boxes=2",
    "dgx-a100-4box": "dgx-a100:boxes=4",
    "dgx-h100": "dgx-h100",
    "dgx-h100-2box": "dgx-h100:boxes=2",
    "mi250": "mi250",
    "mi250-2box": "mi250:boxes=2",
    "tpu-v4-4x4x4": "tpu-v4",
    "bigraph-32": "bigraph",
    "mi300x": "mi300x",
    "mi300x-2box": "mi300x:boxes=2",
    "gb200-nvl72": "gb200-nvl72",
}


def load_topology(spec: str | Path) -> Topology:
    """Load a topology from a file path, a library spec, or the name of a shipped file.

    Examples
    --------
    >>> load_topology("ring:n=4").num_ranks
    4
    >>> load_topology("dgx1.json").name  # a shipped file, found in topologies/
    'dgx1'
    """
    if isinstance(spec, Topology):
        return spec
    base, network = split_suffix(str(spec))
    if network is not None:
        return achievable(load_topology(base), network=network)
    text = str(spec)
    if not text.strip() or "\0" in text:
        raise InputError(repr(text), "topology", "expected a topology file or library name")
    path = Path(text)
    exists = _exists(path)
    if path.suffix.lower() in (".json", ".yaml", ".yml") or exists:
        if exists:  # a file always wins over a library spec of the same name
            return Topology.from_file(path)
        shipped_path = TOPOLOGY_DIR / path.name
        if not path.is_absolute() and path.parent == Path(".") and _exists(shipped_path):
            return Topology.from_file(shipped_path)
        raise InputError(text, "", "no such file")
    if ":" not in text and text not in LIBRARY and "/" not in text and text.strip():
        shipped_path = TOPOLOGY_DIR / f"{text}.json"
        if _exists(shipped_path) and shipped_path.is_file():
            return Topology.from_file(shipped_path)
    return build(text)


def _exists(path: Path) -> bool:
    """``path.exists()`` that says False instead of raising for names the OS refuses (too long...)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def library_topology(name: str) -> Topology:
    """The library topology (or shipped file) called ``name``, never a file of that name in the working
    folder: how a schedule's recorded topology name is looked up.

    Examples
    --------
    >>> library_topology("ring:n=4").num_ranks
    4
    """
    base, network = split_suffix(str(name))
    if network is not None:
        return achievable(library_topology(base), network=network)
    text = str(name)
    stem = Path(text).name
    if ":" not in text and "/" not in text and text not in LIBRARY and stem and _exists(TOPOLOGY_DIR / f"{stem}.json"):
        return Topology.from_file(TOPOLOGY_DIR / f"{stem}.json")
    if text.endswith(".json") and "/" not in text and _exists(TOPOLOGY_DIR / text):
        return Topology.from_file(TOPOLOGY_DIR / text)
    return build(text)


def shipped_files(folder: Path | None = None) -> list[tuple[str, str]]:
    """Topology files in ``topologies/`` (or ``folder``) as ``(file name, library spec or "")``, sorted."""
    folder = TOPOLOGY_DIR if folder is None else folder
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".json", ".yaml", ".yml") and p.is_file())
    return [(p.name, SHIPPED_FILES.get(p.stem, "") if p.suffix == ".json" else "") for p in files]


# ------------------------------------------------------------------------------ file writing
def _link_order(topology: Topology) -> list[tuple[str, str, bool]]:
    """The links to write, as ``(src, dst, bidirectional)``, ordered so that loading them rebuilds the
    graph exactly, down to each node's neighbour order (which fixes edge iteration order, and with it
    every downstream result).

    Loading inserts each link's directions in file order, so a link must come after every link that
    precedes it in its ends' successor and predecessor orders: a topological sort. Merging both
    directions into one bidirectional link can make the constraints cyclic; then every direction is
    written on its own, which always has an order (the one the graph was built in).
    """
    graph = topology.graph
    edges = list(graph.edges)
    for merge in (True, False):
        unit_of: dict[tuple[str, str], int] = {}
        units: list[tuple[str, str, bool]] = []
        for u, v in edges:
            if (u, v) in unit_of:
                continue
            both = merge and graph.has_edge(v, u) and graph.edges[u, v] == graph.edges[v, u]
            unit_of[(u, v)] = len(units)
            if both:
                unit_of[(v, u)] = len(units)
            units.append((u, v, both))
        after: list[set[int]] = [set() for _ in units]
        for node in graph.nodes:
            for chain in ([unit_of[(node, w)] for w in graph.successors(node)],
                          [unit_of[(w, node)] for w in graph.predecessors(node)]):
                for first, second in zip(chain, chain[1:], strict=False):
                    if first != second:
                        after[first].add(second)
        order = smallest_first_order(range(len(units)), after)
        if len(order) == len(units):
            return [units[i] for i in order]
    raise AssertionError("directed links always have a build order")  # pragma: no cover


def topology_json(topology: Topology) -> str:
    """The topology in synth's documented file format, one node or link per line.

    A pair of directed links with equal bandwidth and latency is written once (``bidirectional``
    defaults to true) where the graph allows; other directed links get ``"bidirectional": false``.
    Loading the text rebuilds the same graph, edge order included.

    Examples
    --------
    >>> print(topology_json(load_topology("ring:n=2")))  # doctest: +NORMALIZE_WHITESPACE
    {
      "name": "ring:n=2",
      "description": "2 gpus on a bidirectional ring, 50.0 GB/s and 0.5 us per link",
      "nodes": [
        {"id": "gpu0", "type": "gpu", "forwards": true},
        {"id": "gpu1", "type": "gpu", "forwards": true}
      ],
      "links": [
        {"src": "gpu0", "dst": "gpu1", "bandwidth": 50.0, "latency": 0.5}
      ],
      "dimensions": [
        {"kind": "Ring", "size": 2, "bandwidth": 50.0, "latency": 0.5}
      ]
    }
    """
    data = topology.to_dict()
    links: list[dict[str, Any]] = []
    for src, dst, both in _link_order(topology):
        item: dict[str, Any] = {"src": src, "dst": dst, "bandwidth": topology.bandwidth(src, dst),
                                "latency": topology.latency(src, dst)}
        if not both:
            item["bidirectional"] = False
        links.append(item)
    data["links"] = links

    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    lines = ["{"]
    keys = list(data)
    for index, key in enumerate(keys):
        comma = "," if index < len(keys) - 1 else ""
        value = data[key]
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"  {dump(key)}: [")
            lines.extend(f"    {dump(v)}{',' if i < len(value) - 1 else ''}" for i, v in enumerate(value))
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {dump(key)}: {dump(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_shipped(folder: str | Path) -> list[Path]:
    """Write every file of :data:`SHIPPED_FILES` into ``folder`` (atomically); returns the paths.

    The files in ``topologies/`` are exactly this output (a test checks it byte for byte); regenerate
    them with ``python -c "from synth.library import *; write_shipped(TOPOLOGY_DIR)"``.
    """
    from synth.fileio import atomic_write_text

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, spec in SHIPPED_FILES.items():
        path = folder / f"{stem}.json"
        atomic_write_text(path, topology_json(build(spec)))
        written.append(path)
    return written
