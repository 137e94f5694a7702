"""The topology library: parametric builders and the named real systems, usable by name anywhere.

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

import dataclasses
import functools
import inspect
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth.errors import InputError
from synth.graphs import smallest_first_order
from synth.topology import MAX_NODES, Dimension, Topology

#: Folder of the shipped topology files (next to the package in a source checkout).
TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"

#: Largest number of links a builder will create (each bidirectional link counts once).
MAX_BUILD_LINKS = 2_000_000

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
}

# Link figures shared by the named systems (GB/s per direction, µs per hop); the docstrings cite them.
NVLINK2_GBPS = 25.0  # one NVLink2 link (V100), per direction
NVLINK_LATENCY_US = 0.3  # TACCL's profiled NVLink α on NDv2 (a direct gpu-gpu link)
NVSWITCH_HOP_US = 0.7  # assumed per gpu<->NVSwitch hop (no public per-hop figure)
PCIE_HOP_US = 0.3  # assumed gpu<->NIC hop
IB_HOP_US = 1.0  # NIC<->IB switch hop: gpu-nic-switch-nic-gpu sums to TACCL's IB α of 2.6 µs
XGMI_GBPS = 50.0  # one xGMI (Infinity Fabric) link of an MI250 GCD, per direction
XGMI_LATENCY_US = 0.5  # assumed xGMI hop

#: DGX-1 V100 NVLink pairs joined by two links (50 GB/s) and by one link (25 GB/s).
DGX1_DOUBLE_PAIRS = ((0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7))
DGX1_SINGLE_PAIRS = ((0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7))

#: MI250 (16 GCDs) xGMI link multiplicity: row i, column j = links between GCD i and GCD j.
MI250_XGMI_LINKS = (
    (0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0),
    (4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    (0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    (0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0),
    (2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0),
    (0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0),
    (0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0),
    (0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2),
    (0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0),
)

LinkSpec = tuple[str, str, float, float]


@dataclass(frozen=True)
class Entry:
    """A library entry: a builder with its default parameters, and whether it is shipped as a file."""

    name: str
    builder: Callable[..., Topology]
    summary: str
    shipped: bool = False


LIBRARY: dict[str, Entry] = {}


def entry(name: str, summary: str, shipped: bool = False) -> Callable[[Callable[..., Topology]], Callable[..., Topology]]:
    """Decorator that registers a builder under ``name``.

    The registered (and returned) function names every topology it builds by its canonical spec,
    see :func:`spec_name`.
    """

    def wrap(function: Callable[..., Topology]) -> Callable[..., Topology]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def builder(*args: Any, **kwargs: Any) -> Topology:
            arguments = signature.bind(*args, **kwargs).arguments
            topology = function(*args, **kwargs)
            return dataclasses.replace(topology, name=spec_name(name, signature, arguments))

        LIBRARY[name] = Entry(name, builder, summary, shipped)
        return builder

    return wrap


# ------------------------------------------------------------------------------ spec strings
#: Longest library spec accepted (the longest real one is under 100 characters).
MAX_SPEC_LENGTH = 255


def _parse_scalar(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if sum(ch.isdigit() for ch in text) > 30:
        raise InputError("", "topology", f"the value {text[:20]}... has more than 30 digits")
    for cast in (int, float):
        try:
            return cast(text)  # non-finite floats are refused by the builders, naming the parameter
        except ValueError:
            continue
    return text


def _parse_value(text: str) -> Any:
    if "/" in text:
        return tuple(_parse_scalar(part.strip()) for part in text.split("/"))
    if "x" in text.lower():
        parts = [_parse_scalar(part) for part in text.lower().split("x")]
        if all(isinstance(part, int | float) and not isinstance(part, bool) for part in parts):
            return tuple(parts)
    return _parse_scalar(text)


def format_value(value: Any) -> str:
    """A parameter value in spec syntax: ``(4, 4)`` -> ``4x4``, ``("Ring", "Switch")`` -> ``Ring/Switch``.

    Examples
    --------
    >>> format_value((4, 4, 4)), format_value(12.5), format_value(True)
    ('4x4x4', '12.5', 'true')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple):
        parts = [format_value(v) for v in value]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        return ("x" if numeric and len(value) > 1 else "/").join(parts)
    return str(value)


def _normalized(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def spec_name(name: str, signature: inspect.Signature, arguments: dict[str, Any]) -> str:
    """The canonical spec of a library topology: ``name`` plus the arguments that differ from defaults.

    Examples
    --------
    >>> spec_name("torus", inspect.signature(torus), {"dims": (8, 8), "bandwidth": 50.0})
    'torus:dims=8x8'
    """
    parts = []
    for key, parameter in signature.parameters.items():
        if key in arguments and _normalized(arguments[key]) != _normalized(parameter.default):
            parts.append(f"{key}={format_value(arguments[key])}")
    return f"{name}:{','.join(parts)}" if parts else name


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``name:key=value,key=value`` into the name and typed parameters.

    Examples
    --------
    >>> parse_spec("multidim:kinds=Switch/Ring,sizes=8x4,bandwidths=400x12.5")
    ('multidim', {'kinds': ('Switch', 'Ring'), 'sizes': (8, 4), 'bandwidths': (400, 12.5)})
    """
    if len(spec) > MAX_SPEC_LENGTH:
        raise InputError("", "topology", f"a library spec of {len(spec)} characters is longer than the limit of "
                         f"{MAX_SPEC_LENGTH} (and no file has that name)")
    name, _, rest = spec.partition(":")
    params: dict[str, Any] = {}
    if rest:
        for item in rest.split(","):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise InputError("", "topology", f"expected name:key=value,... in {spec!r}")
            params[key.strip().replace("-", "_")] = _parse_value(value.strip())
    return name.strip(), params


def build(spec: str) -> Topology:
    """Build a library topology from a spec such as ``dgx-a100:boxes=2``."""
    name, params = parse_spec(spec)
    if name not in LIBRARY:
        raise InputError("", "topology", f"{spec!r} is neither a file nor a library name; "
                         f"`synth topologies` lists the names")
    builder = LIBRARY[name].builder
    accepted = inspect.signature(builder).parameters
    for key in params:
        if key not in accepted:
            raise InputError("", "topology", f"{name} has no parameter {key!r}; it takes {', '.join(accepted) or 'none'}")
    try:
        return builder(**params)
    except (TypeError, ValueError) as error:
        raise InputError("", "topology", f"{spec}: {error}") from None


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
    text = str(name)
    stem = Path(text).name
    if ":" not in text and "/" not in text and text not in LIBRARY and stem and _exists(TOPOLOGY_DIR / f"{stem}.json"):
        return Topology.from_file(TOPOLOGY_DIR / f"{stem}.json")
    if text.endswith(".json") and "/" not in text and _exists(TOPOLOGY_DIR / text):
        return Topology.from_file(TOPOLOGY_DIR / text)
    return build(text)


def names() -> list[str]:
    """All library names, in registration order."""
    return list(LIBRARY)


def shipped() -> list[str]:
    """Names of the named real systems shipped as files in ``topologies/``."""
    return [name for name, e in LIBRARY.items() if e.shipped]


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


# ------------------------------------------------------------------------------ shared helpers
def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _count(value: Any, what: str, minimum: int) -> int:
    """An integer parameter >= ``minimum``, with a clear error otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    if value > MAX_NODES:
        raise ValueError(f"{what} must be at most {MAX_NODES}, got {value}")
    return value


def _positive(value: Any, what: str) -> float:
    """A bandwidth: a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number of GB/s, got {value!r}")
    return float(value)


def _latency(value: Any, what: str) -> float:
    """A latency: a finite number >= 0 (µs)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a number of microseconds >= 0, got {value!r}")
    return float(value)


def _sizes(value: Any, what: str, lengths: Sequence[int] | None = None) -> tuple[int, ...]:
    """A tuple of dimension sizes (each >= 2), e.g. ``(4, 4, 4)`` or ``4x4x4``."""
    items = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"{what} must be sizes like 4x4 or 4x4x4, got {value!r}")
    sizes = tuple(_count(v, f"each size in {what}", 2) for v in items)
    if lengths is not None and len(sizes) not in lengths:
        expected = " or ".join(str(n) for n in lengths)
        raise ValueError(f"{what} must have {expected} sizes, got {format_value(sizes)}")
    return sizes


def _limit(nodes: int, links: int) -> None:
    if nodes > MAX_NODES:
        raise ValueError(f"this would build {nodes} nodes, more than the limit of {MAX_NODES}")
    if links > MAX_BUILD_LINKS:
        raise ValueError(f"this would build {links} links, more than the limit of {MAX_BUILD_LINKS}")


def _boxed(boxes: int, box: int, node: str) -> str:
    """Node id inside a box: ``b1.gpu3`` on multi-box systems, plain ``gpu3`` on a single box."""
    return f"b{box}.{node}" if boxes > 1 else node


_KIND_ALIASES = {"ring": "Ring", "fullyconnected": "FullyConnected", "fc": "FullyConnected", "switch": "Switch"}


def _product(
    kinds: Sequence[str], sizes: Sequence[int], bandwidths: Sequence[float], latencies: Sequence[float], gpu: str,
) -> tuple[list[str], list[str], list[LinkSpec], list[Dimension]]:
    """Gpus, switches, links and dimensions of a product of Ring/FullyConnected/Switch dimensions.

    Rank = x0 + n0*(x1 + n1*x2 ...). Each dimension d joins the p_d ranks that differ only in x_d (a
    group): a Ring links neighbours (one link when p_d = 2), a FullyConnected links every pair, and a
    Switch gets its own switch node ``dim{d}.sw{g}`` per group, every member linked to it.
    """
    total = math.prod(sizes)
    estimated = 0
    for kind, p in zip(kinds, sizes, strict=True):
        per_group = {"Ring": p if p > 2 else 1, "FullyConnected": p * (p - 1) // 2, "Switch": p}[kind]
        estimated += per_group * (total // p)
    switch_count = sum(total // p for kind, p in zip(kinds, sizes, strict=True) if kind == "Switch")
    _limit(total + switch_count, estimated)
    gpus = [f"{gpu}{r}" for r in range(total)]
    switches: list[str] = []
    links: list[LinkSpec] = []
    stride = 1
    for d, (kind, p, bw, lat) in enumerate(zip(kinds, sizes, bandwidths, latencies, strict=True)):
        bases = [r for r in range(total) if (r // stride) % p == 0]
        for g, base in enumerate(bases):
            members = [gpus[base + i * stride] for i in range(p)]
            if kind == "Ring":
                links.extend((members[i], members[(i + 1) % p], bw, lat) for i in range(p if p > 2 else 1))
            elif kind == "FullyConnected":
                links.extend((members[i], members[j], bw, lat) for i in range(p) for j in range(i + 1, p))
            else:
                hub = f"dim{d}.sw{g}"
                switches.append(hub)
                links.extend((m, hub, bw, lat) for m in members)
        stride *= p
    dims = [Dimension(kind, p, bw, lat)  # type: ignore[arg-type]
            for kind, p, bw, lat in zip(kinds, sizes, bandwidths, latencies, strict=True)]
    return gpus, switches, links, dims


def _per_dimension(value: Any, count: int, what: str, convert: Callable[[Any, str], float]) -> tuple[float, ...]:
    items = value if isinstance(value, list | tuple) else (value,) * count
    if len(items) != count:
        raise ValueError(f"{what} must give one value per dimension ({count}), got {format_value(items)}")
    return tuple(convert(v, f"each of {what}") for v in items)


# ------------------------------------------------------------------------- parametric builders
@entry("ring", "n gpus on a bidirectional ring (ASTRA-sim Ring)")
def ring(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """``n`` gpus on a bidirectional ring: gpu i linked to gpu i+1 mod n.

    Gpus forward (``forwards``): ASTRA-sim's Ring routes a message through the npus between its ends.

    Examples
    --------
    >>> ring(n=4).graph.number_of_edges()  # 4 links, both directions
    8
    """
    n = _count(n, "n", 2)
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    gpus, switches, links, dims = _product(["Ring"], [n], [bandwidth], [latency], "gpu")
    return Topology.build("ring", gpus, switches, links, dimensions=dims, forwards=True,
                          description=f"{n} gpus on a bidirectional ring, {bandwidth} GB/s and {latency} us per link")


@entry("fully-connected", "n gpus, a direct link between every pair (ASTRA-sim FullyConnected)")
def fully_connected(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """``n`` gpus with a direct link between every pair.

    Gpus forward, as npus do in ASTRA-sim's network backend (every pair has its own link, so only
    multi-hop flows such as ``mcf``'s use it).

    Examples
    --------
    >>> fully_connected(n=4).graph.number_of_edges()  # 6 pairs, both directions
    12
    """
    n = _count(n, "n", 2)
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    gpus, switches, links, dims = _product(["FullyConnected"], [n], [bandwidth], [latency], "gpu")
    return Topology.build("fully-connected", gpus, switches, links, dimensions=dims, forwards=True,
                          description=f"{n} gpus fully connected, {bandwidth} GB/s and {latency} us per link")


@entry("switch", "n gpus on one switch (ASTRA-sim Switch)")
def switch(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """``n`` gpus each linked to one switch node ``sw0`` (``bandwidth`` per gpu link).

    Gpus do not forward: every pair meets at the switch, so no path ever needs to cross a gpu.

    Examples
    --------
    >>> switch(n=4).switches
    ('sw0',)
    """
    n = _count(n, "n", 2)
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    gpus = [f"gpu{i}" for i in range(n)]
    links = [(g, "sw0", bandwidth, latency) for g in gpus]
    return Topology.build("switch", gpus, ["sw0"], links, dimensions=[Dimension("Switch", n, bandwidth, latency)],
                          description=f"{n} gpus on one switch, {bandwidth} GB/s and {latency} us per gpu link")


@entry("torus", "2D/3D torus with wrap-around links (a product of Ring dimensions)")
def torus(dims: tuple[int, ...] = (4, 4), bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """A torus of ``dims`` (e.g. ``4x4`` or ``4x4x4``), wrap-around in every dimension.

    Rank = x + nx*(y + ny*z); gpu ``gpu{rank}`` links to its ±1 neighbours in every dimension (a
    dimension of size 2 has a single link). ``dimensions`` records one Ring per axis. Gpus forward:
    torus chips carry their own routers (as TPU ICI and ASTRA-sim's Ring dimensions do).

    Examples
    --------
    >>> t = torus(dims=(4, 4))
    >>> t.num_ranks, t.graph.out_degree("gpu0")
    (16, 4)
    """
    sizes = _sizes(dims, "dims")
    _check(len(sizes) >= 2, f"dims must have at least 2 sizes (use ring for one), got {format_value(sizes)}")
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    k = len(sizes)
    gpus, switches, links, dimensions = _product(["Ring"] * k, sizes, [bandwidth] * k, [latency] * k, "gpu")
    shape = "x".join(map(str, sizes))
    return Topology.build("torus", gpus, switches, links, dimensions=dimensions, forwards=True,
                          description=f"{shape} torus with wrap-around, {bandwidth} GB/s and {latency} us per link")


@entry("hypercube", "2^d gpus, gpu i linked to every i XOR 2^k")
def hypercube(d: int = 3, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    """A ``d``-dimensional hypercube: 2^d gpus, gpu i linked to gpu i XOR 2^k for each k < d.

    Gpus forward: a hypercube is a direct network of router chips (ASTRA-sim models it as d dimensions
    of 2 npus, routed through the npus).

    Examples
    --------
    >>> h = hypercube(d=3)
    >>> h.num_ranks, h.graph.out_degree("gpu0")
    (8, 3)
    """
    d = _count(d, "d", 1)
    _check(2**d <= MAX_NODES, f"d must be at most {int(math.log2(MAX_NODES))}, got {d}")
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    gpus, switches, links, dims = _product(["FullyConnected"] * d, [2] * d, [bandwidth] * d, [latency] * d, "gpu")
    return Topology.build("hypercube", gpus, switches, links, dimensions=dims, forwards=True,
                          description=f"{d}-dimensional hypercube of {2**d} gpus, {bandwidth} GB/s per link")


@entry("leaf-spine", "2-tier fat-tree: gpus on leaf switches, every leaf linked to every spine")
def leaf_spine(
    leaves: int = 4,
    gpus_per_leaf: int = 4,
    spines: int = 2,
    bandwidth: float = 25.0,
    uplink_bandwidth: float | None = None,
    latency: float = 0.5,
) -> Topology:
    """A 2-tier leaf-spine (folded Clos, fat-tree) network.

    Gpu ``gpu{r}`` (r = leaf*gpus_per_leaf + i) links to ``leaf{leaf}`` at ``bandwidth``; every leaf
    links to every ``spine{s}`` at ``uplink_bandwidth``, which defaults to non-blocking
    (gpus_per_leaf * bandwidth / spines); a smaller value oversubscribes the uplinks.

    Examples
    --------
    >>> t = leaf_spine(leaves=2, gpus_per_leaf=2, spines=2)
    >>> t.num_ranks, t.bandwidth("leaf0", "spine1")
    (4, 25.0)
    """
    leaves = _count(leaves, "leaves", 1)
    gpus_per_leaf = _count(gpus_per_leaf, "gpus_per_leaf", 1)
    spines = _count(spines, "spines", 1)
    _check(leaves * gpus_per_leaf >= 2, "leaves * gpus_per_leaf must be at least 2")
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    uplink = gpus_per_leaf * bandwidth / spines if uplink_bandwidth is None else _positive(uplink_bandwidth,
                                                                                           "uplink_bandwidth")
    _limit(leaves * gpus_per_leaf + leaves + spines, leaves * gpus_per_leaf + leaves * spines)
    gpus = [f"gpu{r}" for r in range(leaves * gpus_per_leaf)]
    leaf_ids = [f"leaf{i}" for i in range(leaves)]
    spine_ids = [f"spine{s}" for s in range(spines)]
    links: list[LinkSpec] = [(gpus[r], leaf_ids[r // gpus_per_leaf], bandwidth, latency) for r in range(len(gpus))]
    links += [(leaf, spine, uplink, latency) for leaf in leaf_ids for spine in spine_ids]
    return Topology.build(
        "leaf-spine", gpus, leaf_ids + spine_ids, links,
        description=f"leaf-spine: {leaves} leaves x {gpus_per_leaf} gpus ({bandwidth} GB/s each), "
                    f"{spines} spines, {uplink:g} GB/s per leaf-spine link")


@entry("multidim", "ASTRA-sim style product of Ring/FullyConnected/Switch dimensions")
def multidim(
    kinds: tuple[str, ...] = ("Switch", "Switch"),
    sizes: tuple[int, ...] = (8, 2),
    bandwidths: tuple[float, ...] = (400.0, 50.0),
    latencies: tuple[float, ...] = (0.93625, 2.6),
) -> Topology:
    """A multi-dimensional system as ASTRA-sim describes it: dimension d is a Ring, FullyConnected or
    Switch of ``sizes[d]`` npus with its own per-link bandwidth (GB/s) and latency (µs per hop).

    Rank = x0 + n0*(x1 + n1*x2 ...). Each Switch dimension gets one switch node per group
    (``dim{d}.sw{g}``). The default is the ASTRA-sim HGX-H100 example (Switch of 8 at 400 GB/s and
    936.25 ns) with a scale-out Switch over 2 boxes. Spec form:
    ``multidim:kinds=Switch/Ring,sizes=8x4,bandwidths=400x25,latencies=0.9x1.3``; a single bandwidth
    or latency applies to every dimension. Gpus forward: this builder models ASTRA-sim's network, whose
    npus pass messages on (its Ring dimension routes through the npus between the ends).

    Examples
    --------
    >>> t = multidim(kinds=("Ring", "Switch"), sizes=(4, 2), bandwidths=(50, 25), latencies=0.5)
    >>> t.num_ranks, t.switches, [d.kind for d in t.dimensions]
    (8, ('dim1.sw0', 'dim1.sw1', 'dim1.sw2', 'dim1.sw3'), ['Ring', 'Switch'])
    """
    size_tuple = _sizes(sizes, "sizes")
    count = len(size_tuple)
    kind_items = kinds if isinstance(kinds, list | tuple) else (kinds,) * count
    if len(kind_items) != count:
        raise ValueError(f"kinds must give one kind per dimension ({count}), got {format_value(kind_items)}")
    kind_tuple = []
    for kind in kind_items:
        canonical = _KIND_ALIASES.get(str(kind).lower().replace("-", "").replace("_", ""))
        if canonical is None:
            raise ValueError(f"each kind must be Ring, FullyConnected or Switch, got {kind!r}")
        kind_tuple.append(canonical)
    bandwidth_tuple = _per_dimension(bandwidths, count, "bandwidths", _positive)
    latency_tuple = _per_dimension(latencies, count, "latencies", _latency)
    gpus, switches, links, dims = _product(kind_tuple, size_tuple, bandwidth_tuple, latency_tuple, "gpu")
    shape = " x ".join(f"{k}({p}, {b:g} GB/s)" for k, p, b in zip(kind_tuple, size_tuple, bandwidth_tuple, strict=True))
    return Topology.build("multidim", gpus, switches, links, dimensions=dims, forwards=True,
                          description=f"multi-dimensional system: {shape}")


# ------------------------------------------------------------------------------ named systems
def _dgx1_box(boxes: int, box: int) -> tuple[list[str], list[LinkSpec]]:
    gpus = [_boxed(boxes, box, f"gpu{i}") for i in range(8)]
    links: list[LinkSpec] = [(gpus[a], gpus[b], 2 * NVLINK2_GBPS, NVLINK_LATENCY_US) for a, b in DGX1_DOUBLE_PAIRS]
    links += [(gpus[a], gpus[b], NVLINK2_GBPS, NVLINK_LATENCY_US) for a, b in DGX1_SINGLE_PAIRS]
    links.sort(key=lambda link: (gpus.index(link[0]), gpus.index(link[1])))
    return gpus, links


def _box_count(boxes: Any) -> int:
    return _count(boxes, "boxes", 1)


@entry("dgx1", "NVIDIA DGX-1 (V100): 8 gpus, hybrid cube-mesh NVLink2", shipped=True)
def dgx1() -> Topology:
    """NVIDIA DGX-1 with V100: 8 gpus and their NVLink2 hybrid cube-mesh, no switches.

    Sources: 6 NVLink2 ports per gpu at 25 GB/s per direction (NVIDIA DGX-1 V100 system architecture);
    the 8 pairs joined by two links get 50 GB/s, the 8 single-link pairs 25 GB/s, the other 12 pairs
    none (PCIe is left out). Latency 0.3 µs per link: TACCL's profiled NVLink α on NDv2. Gpus do not
    forward (NVLink moves data only when a kernel copies it), so those 12 pairs communicate by relay.

    Examples
    --------
    >>> dgx1().graph.number_of_edges()  # 16 gpu pairs, both directions
    32
    """
    gpus, links = _dgx1_box(1, 0)
    return Topology.build("dgx1", gpus, [], links,
                          description="NVIDIA DGX-1 V100: 8 gpus, NVLink2 hybrid cube-mesh, 25 GB/s per link "
                                      "(50 GB/s on double links)")


@entry("ndv2", "Azure NDv2: DGX-1 boxes, one 12.5 GB/s IB NIC per box, one IB switch", shipped=True)
def ndv2(boxes: int = 2) -> Topology:
    """Azure NDv2: ``boxes`` DGX-1 V100 boxes joined by InfiniBand.

    Each box is a DGX-1 (see :func:`dgx1`) plus one 100 Gb/s IB NIC (12.5 GB/s), a switch node
    ``b{k}.nic`` that every gpu of the box reaches over PCIe (12.5 GB/s, 0.3 µs assumed); all NICs
    link to one IB switch ``ib`` at 12.5 GB/s and 1.0 µs, so gpu-to-gpu across boxes pays TACCL's
    profiled IB α of 2.6 µs. The 2-box allgather bound of this model is 25 GB/s (the box cut). With
    ``boxes=1`` it is a DGX-1 without the NIC.

    Examples
    --------
    >>> t = ndv2(boxes=2)
    >>> t.num_ranks, t.boxes[8], t.bandwidth("b0.nic", "ib")
    (16, 1, 12.5)
    """
    boxes = _box_count(boxes)
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        box_gpus, box_links = _dgx1_box(boxes, box)
        gpus += box_gpus
        links += box_links
        if boxes > 1:
            nic = f"b{box}.nic"
            switches.append(nic)
            links += [(g, nic, 12.5, PCIE_HOP_US) for g in box_gpus]
            links.append((nic, "ib", 12.5, IB_HOP_US))
    if boxes > 1:
        switches.append("ib")
    return Topology.build(
        "ndv2", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"Azure NDv2, {boxes} DGX-1 V100 box(es): NVLink2 cube-mesh per box"
                    + (", one 12.5 GB/s IB NIC per box, all NICs on one IB switch" if boxes > 1 else ""))


def _switch_box_system(
    boxes: int, gpus_per_box: int, gpu_bandwidth: float, nic_bandwidth: float, rail_of: Callable[[int], str],
) -> tuple[list[str], list[str], list[LinkSpec]]:
    """Boxes of gpus on one NVSwitch node each; with several boxes, gpu i has its own NIC ``b{k}.nic{i}``
    (``nic_bandwidth`` both ways) linked to the IB switch ``rail_of(i)``."""
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        nvs = _boxed(boxes, box, "nvs")
        box_gpus = [_boxed(boxes, box, f"gpu{i}") for i in range(gpus_per_box)]
        gpus += box_gpus
        switches.append(nvs)
        links += [(g, nvs, gpu_bandwidth, NVSWITCH_HOP_US) for g in box_gpus]
        if boxes > 1:
            for i, g in enumerate(box_gpus):
                nic = f"b{box}.nic{i}"
                switches.append(nic)
                links.append((g, nic, nic_bandwidth, PCIE_HOP_US))
                links.append((nic, rail_of(i), nic_bandwidth, IB_HOP_US))
    if boxes > 1:
        switches += sorted({rail_of(i) for i in range(gpus_per_box)}, key=lambda s: (len(s), s))
    return gpus, switches, links


@entry("dgx2", "NVIDIA DGX-2: 16 V100 on an NVSwitch fabric (150 GB/s per gpu); boxes share one IB switch",
       shipped=True)
def dgx2(boxes: int = 1) -> Topology:
    """NVIDIA DGX-2: 16 V100 gpus per box on 12 NVSwitches, modelled as one switch node ``nvs``.

    Sources: 6 NVLink2 per gpu into the switch fabric = 150 GB/s per gpu (NVIDIA DGX-2 documentation);
    0.7 µs per gpu-NVSwitch hop (assumed). With several boxes: 8 x 100 Gb/s IB NICs per box
    (12.5 GB/s each), NIC j shared by gpus 2j and 2j+1 over PCIe (12.5 GB/s per gpu, 0.3 µs assumed),
    every NIC on one IB switch ``ib`` (12.5 GB/s, 1.0 µs; 2.6 µs gpu to gpu as in TACCL's IB profile).

    Examples
    --------
    >>> dgx2().egress_bandwidth("gpu0")
    150.0
    """
    boxes = _box_count(boxes)
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        nvs = _boxed(boxes, box, "nvs")
        box_gpus = [_boxed(boxes, box, f"gpu{i}") for i in range(16)]
        gpus += box_gpus
        switches.append(nvs)
        links += [(g, nvs, 6 * NVLINK2_GBPS, NVSWITCH_HOP_US) for g in box_gpus]
        if boxes > 1:
            for j in range(8):
                nic = f"b{box}.nic{j}"
                switches.append(nic)
                links += [(box_gpus[2 * j + s], nic, 12.5, PCIE_HOP_US) for s in (0, 1)]
                links.append((nic, "ib", 12.5, IB_HOP_US))
    if boxes > 1:
        switches.append("ib")
    return Topology.build(
        "dgx2", gpus, switches, links, boxes=[r // 16 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"NVIDIA DGX-2, {boxes} box(es): 16 V100 per box on one NVSwitch node, 150 GB/s per gpu"
                    + ("; 8 x 12.5 GB/s IB NICs per box on one IB switch" if boxes > 1 else ""))


@entry("dgx-a100", "NVIDIA DGX A100: 8 A100 on NVSwitch (300 GB/s); per-gpu 25 GB/s NICs on 2 rail planes",
       shipped=True)
def dgx_a100(boxes: int = 1, nic_bandwidth: float = 25.0) -> Topology:
    """NVIDIA DGX A100 (Azure NDv4 alike): 8 A100 per box on an NVSwitch fabric (one node ``nvs``).

    Sources: 12 NVLink3 per gpu = 300 GB/s per gpu to the switch (NVIDIA DGX A100 documentation),
    0.7 µs per gpu-NVSwitch hop (assumed). With several boxes: one 200 Gb/s HDR NIC per gpu (25 GB/s),
    gpu i to its own NIC switch node ``b{k}.nic{i}`` (25 GB/s, 0.3 µs assumed); even-numbered NICs on
    IB switch plane ``rail0``, odd-numbered on ``rail1`` (25 GB/s, 1.0 µs; 2.6 µs gpu to gpu, TACCL's
    IB α). The optimal allgather algbw of this model is 342.86 GB/s on 1 box (300*8/7), 346.67 on 2
    boxes (a gpu cut: 16*325/15) and 266.67 on 4 (a box cut: 32*200/24). ``nic_bandwidth`` (GB/s) sets
    the gpu-NIC and NIC-rail links, for what-if sweeps over NIC generations. Gpus do not forward: a
    message to another box on the other rail plane relays through a gpu (as NCCL's PXN does).

    Examples
    --------
    >>> t = dgx_a100(boxes=2)
    >>> t.num_ranks, len(t.switches), t.bandwidth("b1.gpu3", "b1.nic3"), t.has_link("b1.nic3", "rail1")
    (16, 20, 25.0, True)
    """
    boxes = _box_count(boxes)
    nic_bandwidth = _positive(nic_bandwidth, "nic_bandwidth")
    gpus, switches, links = _switch_box_system(boxes, 8, 300.0, nic_bandwidth, lambda i: f"rail{i % 2}")
    return Topology.build(
        "dgx-a100", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"NVIDIA DGX A100, {boxes} box(es): 8 A100 per box on one NVSwitch node, 300 GB/s per gpu"
                    + (f"; one {nic_bandwidth:g} GB/s HDR NIC per gpu, even NICs on IB plane rail0, odd on rail1"
                       if boxes > 1 else ""))


@entry("dgx-h100", "NVIDIA DGX H100: 8 H100 on NVSwitch (450 GB/s); 50 GB/s NIC per gpu, rail-optimized",
       shipped=True)
def dgx_h100(boxes: int = 1) -> Topology:
    """NVIDIA DGX H100: 8 H100 per box on NVSwitch gen3 (one node ``nvs``), rail-optimized scale-out.

    Sources: 18 NVLink4 per gpu = 450 GB/s per gpu (NVIDIA DGX H100 documentation), 0.7 µs per
    gpu-NVSwitch hop (assumed). With several boxes: one 400 Gb/s NIC per gpu (50 GB/s), gpu i to its
    own NIC ``b{k}.nic{i}`` (50 GB/s, 0.3 µs assumed), NIC i of every box on rail switch ``rail{i}``
    (50 GB/s, 1.0 µs; 2.6 µs gpu to gpu, TACCL's IB α). Gpus do not forward: a message to gpu j of
    another box from gpu i != j relays through a gpu (as NCCL's PXN does).

    Examples
    --------
    >>> t = dgx_h100(boxes=2)
    >>> t.num_ranks, t.has_link("b0.nic5", "rail5"), t.bandwidth("b0.gpu0", "b0.nvs")
    (16, True, 450.0)
    """
    boxes = _box_count(boxes)
    gpus, switches, links = _switch_box_system(boxes, 8, 450.0, 50.0, lambda i: f"rail{i}")
    return Topology.build(
        "dgx-h100", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"NVIDIA DGX H100, {boxes} box(es): 8 H100 per box on one NVSwitch node, 450 GB/s per gpu"
                    + ("; one 50 GB/s NIC per gpu, NIC i of every box on rail switch i" if boxes > 1 else ""))


@entry("mi250", "AMD MI250 box: 16 GCDs on xGMI (50 GB/s links, 4/2/1 per pair); boxes on one IB switch",
       shipped=True)
def mi250(boxes: int = 1) -> Topology:
    """AMD MI250 boxes: 16 GCDs each, joined by xGMI (Infinity Fabric) links of 50 GB/s.

    Sources: the per-pair link multiplicity :data:`MI250_XGMI_LINKS` (4, 2 or 1 links; 7 link units
    per GCD) as used in multi-box MI250 studies; 0.5 µs per xGMI link (assumed). With several boxes
    every GCD links at 16 GB/s to one shared IB switch ``ib`` (1.3 µs per hop, so 2.6 µs GCD to GCD as
    TACCL's IB α). The optimal allgather algbw of this model is 342.86 GB/s on 1 box and 354.13 on
    2 boxes (the bottleneck is a pair of GCDs joined by 4 links: 32*332/30). GCDs do not forward
    (xGMI moves data only when a kernel copies it): pairs without a link communicate by relay.

    Examples
    --------
    >>> t = mi250()
    >>> t.bandwidth("gcd0", "gcd1"), t.egress_bandwidth("gcd0")
    (200.0, 350.0)
    """
    boxes = _box_count(boxes)
    gcds: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        ids = [_boxed(boxes, box, f"gcd{i}") for i in range(16)]
        gcds += ids
        for i in range(16):
            for j in range(i + 1, 16):
                if MI250_XGMI_LINKS[i][j]:
                    links.append((ids[i], ids[j], MI250_XGMI_LINKS[i][j] * XGMI_GBPS, XGMI_LATENCY_US))
        if boxes > 1:
            links += [(g, "ib", 16.0, 1.3) for g in ids]
    return Topology.build(
        "mi250", gcds, ["ib"] if boxes > 1 else [], links,
        boxes=[r // 16 for r in range(len(gcds))] if boxes > 1 else None,
        description=f"AMD MI250, {boxes} box(es) of 16 GCDs on xGMI (50 GB/s per link, 4/2/1 links per pair)"
                    + ("; every GCD 16 GB/s to one IB switch" if boxes > 1 else ""))


@entry("tpu-v4", "Google TPU v4 slice: 3D torus of chips, ~45 GB/s per ICI link", shipped=True)
def tpu_v4(dims: tuple[int, ...] = (4, 4, 4), bandwidth: float = 45.0, latency: float = 1.0) -> Topology:
    """A Google TPU v4 slice: chips ``tpu{rank}`` on a 3D torus with wrap-around (rank = x + X*(y + Y*z)).

    Sources: 4x4x4 cubes joined by optical circuit switches into AxBxC tori (Google's TPU v4 paper);
    roughly 45-50 GB/s per ICI link per direction, derived from published pod figures (not a
    datasheet), so 45 GB/s here; 1.0 µs per hop is an assumption. Chips forward: each TPU v4 chip
    routes ICI traffic between its links.

    Examples
    --------
    >>> t = tpu_v4()
    >>> t.num_ranks, t.graph.out_degree("tpu0")
    (64, 6)
    """
    sizes = _sizes(dims, "dims", lengths=(3,))
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    gpus, switches, links, dimensions = _product(["Ring"] * 3, sizes, [bandwidth] * 3, [latency] * 3, "tpu")
    shape = "x".join(map(str, sizes))
    return Topology.build("tpu-v4", gpus, switches, links, dimensions=dimensions, forwards=True,
                          description=f"Google TPU v4 {shape} slice: 3D torus, {bandwidth} GB/s per ICI link")


@entry("bigraph", "EFLOPS BiGraph: two switch layers, complete bipartite, hosts on every switch", shipped=True)
def bigraph(upper: int = 4, lower: int = 4, hosts_per_switch: int = 4, bandwidth: float = 12.5,
            latency: float = 1.0) -> Topology:
    """Alibaba EFLOPS BiGraph (HPCA 2020): upper-layer switches ``up{i}`` each linked to every
    lower-layer switch ``low{j}`` (no links inside a layer), ``hosts_per_switch`` hosts on every switch.

    Hosts are ``gpu{r}``, numbered switch by switch (upper layer first). Switch hops between hosts:
    same switch 1, opposite layer 2, same layer 3. The default is the common 32-host size (4+4 switches,
    4 hosts each). 12.5 GB/s (100 Gb/s) and 1.0 µs per link are assumptions (parameters).

    Examples
    --------
    >>> t = bigraph()
    >>> t.num_ranks, len(t.switches), t.has_link("up0", "low3"), t.has_link("up0", "up1")
    (32, 8, True, False)
    """
    upper = _count(upper, "upper", 1)
    lower = _count(lower, "lower", 1)
    hosts_per_switch = _count(hosts_per_switch, "hosts_per_switch", 1)
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    switch_ids = [f"up{i}" for i in range(upper)] + [f"low{j}" for j in range(lower)]
    _limit(len(switch_ids) * (hosts_per_switch + 1), len(switch_ids) * hosts_per_switch + upper * lower)
    hosts = [f"gpu{r}" for r in range(len(switch_ids) * hosts_per_switch)]
    links: list[LinkSpec] = [(h, switch_ids[r // hosts_per_switch], bandwidth, latency) for r, h in enumerate(hosts)]
    links += [(f"up{i}", f"low{j}", bandwidth, latency) for i in range(upper) for j in range(lower)]
    return Topology.build(
        "bigraph", hosts, switch_ids, links,
        description=f"EFLOPS BiGraph: {upper}+{lower} switches (complete bipartite), {hosts_per_switch} hosts "
                    f"per switch, {bandwidth} GB/s per link")


# ------------------------------------------------------------------------------ today's large systems
NVLINK5_GBPS = 50.0  # one NVLink 5 link, per direction (100 GB/s both ways; 18 per Blackwell gpu = 1.8 TB/s)
NDR_GBPS = 50.0  # one 400 Gb/s NDR InfiniBand / 400 GbE port, per direction
MI300X_XGMI_GBPS = 64.0  # one MI300X Infinity Fabric link, per direction (128 GB/s both ways)
TPU_V5P_ICI_GBPS = 100.0  # one TPU v5p ICI link, per direction (1,200 GB/s both ways over 6 links per chip)
SWITCH_HOP_US = 0.5  # assumed per hop through a scale-out switch tier (leaf, spine, core, router)


def _rail_scale_out(box_gpus: Sequence[Sequence[str]], nic_of: Callable[[int, int], str],
                    rail_of: Callable[[int], str], nic_bandwidth: float) -> tuple[list[str], list[LinkSpec]]:
    """One NIC switch node per gpu (``nic_of(box, i)``), gpu i of every box on rail switch ``rail_of(i)``.
    Returns the NICs then the rails (switch ids), and the links."""
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box, gpus in enumerate(box_gpus):
        for i, gpu in enumerate(gpus):
            nic = nic_of(box, i)
            switches.append(nic)
            links.append((gpu, nic, nic_bandwidth, PCIE_HOP_US))
            links.append((nic, rail_of(i), nic_bandwidth, IB_HOP_US))
    rails = sorted({rail_of(i) for gpus in box_gpus for i in range(len(gpus))}, key=lambda s: (len(s), s))
    return switches + rails, links


@entry("gb200-nvl72", "NVIDIA GB200 NVL72: 72 Blackwell gpus, one NVLink 5 link to each of 18 NVLink switch chips; "
       "racks on 400 Gb/s rails")
def gb200_nvl72(racks: int = 1, rails: int = 4, nic_bandwidth: float = NDR_GBPS) -> Topology:
    """NVIDIA GB200 NVL72 racks: 72 Blackwell gpus each with one NVLink 5 link to each of the rack's 18
    NVLink switch chips (``r{k}.nvs{j}``), 50 GB/s per link and direction (900 GB/s per gpu).

    Sources: NVIDIA DGX SuperPOD GB200 reference architecture, "Network fabrics": 18 compute trays and
    9 NVLink switch trays of 2 switch chips per rack; each B200 has 18 NVLink 5 links, one to each of
    the 18 chips, 1.8 TB/s per gpu (both directions). With several racks (``b{k}.`` prefixes, racks are
    the boxes) each gpu has a 400 Gb/s ConnectX-7 NIC (50 GB/s; four per 4-gpu compute tray, MLCommons
    GB200-NVL72 system descriptions) on a rail-optimized compute fabric. Assumptions (parameters): gpu
    i's NIC ``b{k}.nic{i}`` sits on
    rail switch ``rail{i % rails}`` (``rails=4``: one rail per gpu position in a compute tray), a rail
    switch stands for its whole non-blocking fat-tree, 0.7 µs per NVLink switch hop and the NIC hops of
    :func:`dgx_a100`. The allgather optimum of one rack is 72 * 900 / 71 = 912.68 GB/s (the cut around
    71 gpus: one gpu's 18 links). Gpus do not forward (the NVLink and scale-out switches route).

    Examples
    --------
    >>> t = gb200_nvl72()
    >>> t.num_ranks, len(t.switches), t.egress_bandwidth("gpu0")
    (72, 18, 900.0)
    """
    racks = _count(racks, "racks", 1)
    rails = _count(rails, "rails", 1)
    nic_bandwidth = _positive(nic_bandwidth, "nic_bandwidth")
    _limit(racks * (72 * 2 + 18) + rails, racks * 72 * 20)
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    per_rack: list[list[str]] = []
    for rack in range(racks):
        rack_gpus = [_boxed(racks, rack, f"gpu{i}") for i in range(72)]
        chips = [_boxed(racks, rack, f"nvs{j}") for j in range(18)]
        gpus += rack_gpus
        switches += chips
        links += [(g, chip, NVLINK5_GBPS, NVSWITCH_HOP_US) for g in rack_gpus for chip in chips]
        per_rack.append(rack_gpus)
    if racks > 1:
        extra, scale_out = _rail_scale_out(per_rack, lambda rack, i: f"b{rack}.nic{i}", lambda i: f"rail{i % rails}",
                                           nic_bandwidth)
        switches += extra
        links += scale_out
    return Topology.build(
        "gb200-nvl72", gpus, switches, links, boxes=[r // 72 for r in range(len(gpus))] if racks > 1 else None,
        description=f"NVIDIA GB200 NVL72, {racks} rack(s): 72 gpus per rack, one 50 GB/s NVLink 5 link from every "
                    "gpu to each of 18 NVLink switch chips"
                    + (f"; one {nic_bandwidth:g} GB/s NIC per gpu on {rails} rails" if racks > 1 else ""))


@entry("mi300x", "AMD MI300X boxes: 8 gpus fully connected by xGMI (64 GB/s links); 400 Gb/s NIC per gpu, "
       "rail-optimized", shipped=True)
def mi300x(boxes: int = 1, nic_bandwidth: float = NDR_GBPS) -> Topology:
    """AMD Instinct MI300X platforms: 8 gpus per box, every pair joined by one Infinity Fabric (xGMI) link.

    Sources: AMD ROCm documentation, "MI300 series microarchitecture", node-level architecture: each
    MI300X uses seven Infinity Fabric links to form a fully connected 8-gpu system; AMD's MI300X data
    sheet gives 128 GB/s peak bidirectional bandwidth per link, so 64 GB/s per direction here (448 GB/s
    out of each gpu). Scale-out as on Azure's ND MI300X v5 (8 x 400 Gb/s NDR InfiniBand per VM): one
    50 GB/s NIC per gpu, gpu i's NIC ``b{k}.nic{i}`` on rail switch ``rail{i}`` (a rail switch stands for
    its non-blocking fabric; an assumption, as are 0.5 µs per xGMI hop and the NIC hops of
    :func:`dgx_a100`). The allgather optimum of one box is 8 * 448 / 7 = 512 GB/s. Gpus do not forward
    (an xGMI link carries data only when a kernel copies it).

    Examples
    --------
    >>> t = mi300x(boxes=2)
    >>> t.num_ranks, t.bandwidth("b0.gpu0", "b0.gpu7"), t.has_link("b1.nic3", "rail3")
    (16, 64.0, True)
    """
    boxes = _box_count(boxes)
    nic_bandwidth = _positive(nic_bandwidth, "nic_bandwidth")
    _limit(boxes * 17 + 8, boxes * 44)
    gpus: list[str] = []
    links: list[LinkSpec] = []
    per_box: list[list[str]] = []
    for box in range(boxes):
        ids = [_boxed(boxes, box, f"gpu{i}") for i in range(8)]
        gpus += ids
        per_box.append(ids)
        links += [(ids[i], ids[j], MI300X_XGMI_GBPS, XGMI_LATENCY_US) for i in range(8) for j in range(i + 1, 8)]
    switches: list[str] = []
    if boxes > 1:
        switches, scale_out = _rail_scale_out(per_box, lambda box, i: f"b{box}.nic{i}", lambda i: f"rail{i}",
                                              nic_bandwidth)
        links += scale_out
    return Topology.build(
        "mi300x", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))] if boxes > 1 else None,
        description=f"AMD MI300X, {boxes} box(es) of 8 gpus fully connected by 64 GB/s xGMI links"
                    + (f"; one {nic_bandwidth:g} GB/s NIC per gpu, NIC i of every box on rail i" if boxes > 1 else ""))


@entry("dgx-superpod", "DGX H100 SuperPOD-style rail-optimized fat-tree: scalable units of 32 boxes, leaf per "
       "rail, spines per pod, cores; oversubscription parameter")
def dgx_superpod(sus: int = 4, nodes_per_su: int = 32, sus_per_pod: int = 4, spines: int = 2, cores: int = 2,
                 oversubscription: float = 1.0, nic_bandwidth: float = NDR_GBPS) -> Topology:
    """A DGX H100 SuperPOD-style cluster: DGX H100 boxes on a rail-optimized, multi-tier fat-tree.

    Boxes are :func:`dgx_h100` boxes (8 gpus at 450 GB/s on one NVSwitch node, one NIC per gpu at
    ``nic_bandwidth``). A scalable unit (SU) holds ``nodes_per_su`` boxes and one leaf switch per rail
    (``su{s}.leaf{r}``): NIC r of every box of the SU links to it. SUs are grouped ``sus_per_pod`` to a
    pod; every rail-r leaf of a pod links to each of the pod's ``spines`` rail-r spine switches
    (``pod{p}.spine{r}.{j}``) with its uplink bandwidth, ``nodes_per_su * nic_bandwidth /
    oversubscription`` split evenly. With more than one pod, every rail-r spine links to each of
    ``cores`` rail-r core switches (``core{r}.{j}``) with as much bandwidth as it receives from its
    leaves, split evenly (a non-blocking top tier). Switch nodes stand for parallel cables (bandwidths
    add up).

    Sources: NVIDIA DGX SuperPOD reference architecture with DGX H100 (RA-11333-001): SUs of 32 DGX
    H100, a rail-optimized NDR 400 Gb/s compute fabric (8 leaf switches per SU, one per rail), 4 SUs
    (1,024 gpus) in the reference design with 16 spines, and larger SuperPODs adding a core tier
    (the DGX SuperPOD B200 RA tabulates leaf/spine/core counts up to 64 SUs). Assumptions (parameters):
    2 spines per rail and pod, 2 cores per rail, pods of 4 SUs, the oversubscription at the leaf
    uplinks, and 0.5 µs per switch tier. Box cuts decide the allgather optimum at any
    oversubscription below ``nodes_per_su`` (an SU still receives more per gpu than a box):
    ``N * 400 / (N - 8)`` GB/s, 403.15 for the default 1,024 gpus; at 40:1 on 8 SUs an SU's 320 GB/s
    of uplinks decide it: 2048 * 320 / 1792 = 365.71 GB/s. Gpus do not forward.

    Examples
    --------
    >>> t = dgx_superpod(sus=2, nodes_per_su=2, sus_per_pod=1)
    >>> t.num_ranks, t.has_link("b3.nic5", "su1.leaf5"), t.bandwidth("su0.leaf5", "pod0.spine5.1")
    (32, True, 50.0)
    """
    sus = _count(sus, "sus", 1)
    nodes_per_su = _count(nodes_per_su, "nodes_per_su", 1)
    sus_per_pod = _count(sus_per_pod, "sus_per_pod", 1)
    spines = _count(spines, "spines", 1)
    cores = _count(cores, "cores", 1)
    nic_bandwidth = _positive(nic_bandwidth, "nic_bandwidth")
    if isinstance(oversubscription, bool) or not isinstance(oversubscription, int | float) or \
            not math.isfinite(oversubscription) or oversubscription < 1:
        raise ValueError(f"oversubscription must be a number >= 1 (1 is non-blocking), got {oversubscription!r}")
    pods = -(-sus // sus_per_pod)
    _check(sus <= sus_per_pod or sus % sus_per_pod == 0,
           f"sus ({sus}) must be at most sus_per_pod ({sus_per_pod}) or a multiple of it")
    boxes = sus * nodes_per_su
    _check(boxes * 8 >= 2, "the cluster needs at least 2 gpus")
    _limit(boxes * 17 + sus * 8 + pods * 8 * spines + 8 * cores,
           boxes * 24 + sus * 8 * spines + (pods * 8 * spines * cores if pods > 1 else 0))
    uplink = round(nodes_per_su * nic_bandwidth / oversubscription / spines, 6)
    core_link = round(uplink * min(sus, sus_per_pod) / cores, 6)
    gpus: list[str] = []
    switches: list[str] = []
    links: list[LinkSpec] = []
    for box in range(boxes):
        nvs = f"b{box}.nvs"
        switches.append(nvs)
        box_gpus = [f"b{box}.gpu{i}" for i in range(8)]
        gpus += box_gpus
        links += [(g, nvs, 450.0, NVSWITCH_HOP_US) for g in box_gpus]
        su = box // nodes_per_su
        for i, g in enumerate(box_gpus):
            nic = f"b{box}.nic{i}"
            switches.append(nic)
            links += [(g, nic, nic_bandwidth, PCIE_HOP_US), (nic, f"su{su}.leaf{i}", nic_bandwidth, SWITCH_HOP_US)]
    for su in range(sus):
        switches += [f"su{su}.leaf{r}" for r in range(8)]
        pod = su // sus_per_pod
        links += [(f"su{su}.leaf{r}", f"pod{pod}.spine{r}.{j}", uplink, SWITCH_HOP_US)
                  for r in range(8) for j in range(spines)]
    for pod in range(pods):
        switches += [f"pod{pod}.spine{r}.{j}" for r in range(8) for j in range(spines)]
    if pods > 1:
        switches += [f"core{r}.{j}" for r in range(8) for j in range(cores)]
        links += [(f"pod{pod}.spine{r}.{j}", f"core{r}.{c}", core_link, SWITCH_HOP_US)
                  for pod in range(pods) for r in range(8) for j in range(spines) for c in range(cores)]
    tiers = "leaf/spine/core" if pods > 1 else "leaf/spine"
    return Topology.build(
        "dgx-superpod", gpus, switches, links, boxes=[r // 8 for r in range(len(gpus))],
        description=f"DGX H100 SuperPOD-style cluster: {sus} SU(s) x {nodes_per_su} DGX H100, rail-optimized "
                    f"{tiers} fat-tree, {nic_bandwidth:g} GB/s per NIC, {oversubscription:g}:1 at the leaves")


@entry("tpu-v5p", "Google TPU v5p slice: 3D torus of chips, 100 GB/s per ICI link and direction")
def tpu_v5p(dims: tuple[int, ...] = (4, 4, 4), bandwidth: float = TPU_V5P_ICI_GBPS, latency: float = 1.0) -> Topology:
    """A Google TPU v5p slice: chips ``tpu{rank}`` on a 3D torus with wrap-around (rank = x + X*(y + Y*z)).

    Sources: Google Cloud TPU v5p documentation: 8,960 chips per pod, slices up to 16x16x24 (6,144
    chips), 3D torus interconnect, 1,200 GB/s bidirectional ICI bandwidth per chip, that is 100 GB/s per
    direction on each of its 6 links. Full cubes (every size a multiple of 4) are tori; smaller shapes
    have no wrap-around links in the product, but are modelled with them here (an assumption, as is
    1.0 µs per hop). Chips forward (``forwards``): ICI routes through the chips between the ends. The allgather optimum of a slice of N chips is set by the cut around all chips but
    one: N * 600 / (N - 1) GB/s (609.52 for 4x4x4).

    Examples
    --------
    >>> t = tpu_v5p(dims=(4, 4, 8))
    >>> t.num_ranks, t.graph.out_degree("tpu0"), t.bandwidth("tpu0", "tpu1")
    (128, 6, 100.0)
    """
    sizes = _sizes(dims, "dims", lengths=(3,))
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    gpus, switches, links, dimensions = _product(["Ring"] * 3, sizes, [bandwidth] * 3, [latency] * 3, "tpu")
    shape = "x".join(map(str, sizes))
    return Topology.build("tpu-v5p", gpus, switches, links, dimensions=dimensions, forwards=True,
                          description=f"Google TPU v5p {shape} slice: 3D torus, {bandwidth} GB/s per ICI link")


@entry("dragonfly", "dragonfly (Kim et al. 2008): groups of fully connected routers, terminals on each router, "
       "relative global links")
def dragonfly(p: int = 2, a: int = 4, h: int = 2, groups: int | None = None, bandwidth: float = 25.0,
              global_bandwidth: float | None = None, latency: float = SWITCH_HOP_US) -> Topology:
    """A dragonfly network: ``groups`` groups of ``a`` routers, ``p`` terminals (gpus) on every router.

    Routers of a group are fully connected (local links); every router has ``h`` global ports. Global
    port k of group G (k = router * h + port, 0 <= k < a*h) goes to group G + 1 + (k mod (groups - 1)),
    arriving on the port with the opposite offset (the "relative" arrangement, so moving every group to
    the next is a symmetry). ``groups`` defaults to the largest, a*h + 1 (one global link per pair of
    groups); a smaller value must make groups - 1 divide a*h (parallel global links). Terminal t of
    router r of group G is ``gpu{(G*a + r)*p + t}`` on router ``g{G}.r{r}``; boxes are groups.

    Sources: J. Kim, W. J. Dally, S. Scott, D. Abts, "Technology-Driven, Highly-Scalable Dragonfly
    Topology", ISCA 2008 (groups, a/p/h, balance a = 2p = 2h, g <= a*h + 1). Assumptions (parameters):
    25 GB/s per link (200 Gb/s ports, as HPE Slingshot's), global links as fast as local ones, 0.5 µs per
    hop. The default (p=2, a=4, h=2: 9 groups, 72 gpus) is the smallest balanced one. Gpus do not
    forward: the routers do.

    Examples
    --------
    >>> t = dragonfly()
    >>> t.num_ranks, len(t.switches), t.has_link("g0.r0", "g1.r3"), t.has_link("g0.r1", "g3.r2")
    (72, 36, True, True)
    """
    p, a, h = _count(p, "p", 1), _count(a, "a", 1), _count(h, "h", 1)
    groups = a * h + 1 if groups is None else _count(groups, "groups", 2)
    _check((a * h) % (groups - 1) == 0, f"groups - 1 ({groups - 1}) must divide a*h ({a * h})")
    bandwidth, latency = _positive(bandwidth, "bandwidth"), _latency(latency, "latency")
    global_bandwidth = bandwidth if global_bandwidth is None else _positive(global_bandwidth, "global_bandwidth")
    _check(groups * a * p >= 2, "the network needs at least 2 gpus")
    _limit(groups * a * (p + 1), groups * a * (p + a + h))
    gpus = [f"gpu{r}" for r in range(groups * a * p)]
    routers = [f"g{g}.r{r}" for g in range(groups) for r in range(a)]
    links: list[LinkSpec] = [(gpus[index], routers[index // p], bandwidth, latency) for index in range(len(gpus))]
    for g in range(groups):
        links += [(f"g{g}.r{i}", f"g{g}.r{j}", bandwidth, latency) for i in range(a) for j in range(i + 1, a)]
    span = groups - 1
    global_links: list[LinkSpec] = []
    for g in range(groups):
        for k in range(a * h):
            offset = k % span + 1
            other = (g + offset) % groups
            k_other = (k // span) * span + (span - offset)
            if (g, k) < (other, k_other):
                global_links.append((f"g{g}.r{k // h}", f"g{other}.r{k_other // h}", global_bandwidth, latency))
    return Topology.build(
        "dragonfly", gpus, routers, links + global_links, boxes=[r // (a * p) for r in range(len(gpus))],
        description=f"dragonfly: {groups} groups x {a} routers x {p} gpus, {h} global links per router, "
                    f"{bandwidth:g} GB/s local, {global_bandwidth:g} GB/s global")
