"""The topology model: gpus, switches and directed links with bandwidth (GB/s) and latency (µs).

A :class:`Topology` is immutable. Inside it is a frozen :class:`networkx.DiGraph` whose nodes carry
``type`` (``"gpu"`` or ``"switch"``) and ``forwards`` (bool), and whose edges carry ``bandwidth``
(GB/s, 10^9 bytes/s, per direction) and ``latency`` (microseconds). Ranks are the gpus, numbered
0..N-1 in the order they are listed in the file.

Forwarding: a switch always passes bytes through. A gpu does only when its node says
``"forwards": true`` (chips with routers: TPU ICI, a torus of npus, ASTRA-sim's npus); an NVLink or
xGMI gpu moves data onward only when a kernel copies it, so a path may cross it only as two transfers
(a relay). :mod:`synth.routing` routes by this rule and the verifier enforces it.

In-switch operations: a switch is passive (it forwards, and stores and computes nothing) unless its
node has ``capabilities`` (:class:`SwitchCapabilities`, version :data:`CAPABILITIES_VERSION`): a
``reduction`` (it combines what several links send it, as NVLink SHARP and InfiniBand SHARP do: the
ops, data types, aggregate throughput in GB/s of reduced output and largest group it serves) and a
``multicast`` (one packet in, copies out on several links). A passive switch writes no attribute.
Capabilities are not part of :func:`fingerprint`: they add operations, and every point-to-point
schedule valid on the passive fabric stays valid on the capable one. :mod:`synth.bounds` reads them.

The file format (JSON or YAML) is documented in docs/topology-format.md::

    {"name": "pair", "nodes": [{"id": "g0", "type": "gpu"}, {"id": "g1", "type": "gpu"}],
     "links": [{"src": "g0", "dst": "g1", "bandwidth": 25.0, "latency": 0.7}]}
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import networkx as nx
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from synth.documents import read_document
from synth.errors import InputError, invalid

T = TypeVar("T")

GPU = "gpu"
SWITCH = "switch"

#: Largest accepted link bandwidth in GB/s (1 PB/s): larger values are typos or overflow bait.
MAX_BANDWIDTH = 1e6
#: Largest accepted link latency in µs (1000 s).
MAX_LATENCY = 1e9
#: Smallest accepted link bandwidth in GB/s (1 kB/s): smaller values (1e-300, subnormals) are typos or
#: overflow bait, and would turn every time into infinity.
MIN_BANDWIDTH = 1e-6
#: Largest accepted number of nodes.
MAX_NODES = 200_000


@dataclass(frozen=True)
class Dimension:
    """One dimension of a multi-dimensional (ASTRA-sim style) system: Ring, FullyConnected or Switch."""

    kind: Literal["Ring", "FullyConnected", "Switch"]
    size: int
    bandwidth: float
    latency: float = 0.0


@dataclass(frozen=True)
class Link:
    """One directed link after merging parallel links (bandwidths added)."""

    src: str
    dst: str
    bandwidth: float
    latency: float


class _NodeModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)
    id: str
    type: Literal["gpu", "switch"]
    box: int | None = None
    forwards: bool | None = None
    capabilities: _CapabilitiesModel | None = None

    @field_validator("id")
    @classmethod
    def _nonempty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a non-empty string")
        return value


def _finite_number(value: Any, what: str, lower: float, upper: float, strict_lower: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:50] + "..."
        raise ValueError(f"expected a number ({what}), got {type(value).__name__} {shown}")
    if isinstance(value, int) and abs(value) > 10**30:
        raise ValueError(f"expected at most {upper:g} ({what}), got an integer of {len(str(abs(value)))} digits")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number ({what}), got {value!r}")
    if number < lower or (strict_lower and number == lower):
        bound = ">" if strict_lower else ">="
        raise ValueError(f"expected a number {bound} {lower:g} ({what}), got {value!r}")
    if number > upper:
        raise ValueError(f"expected at most {upper:g} ({what}), got {value!r}")
    return number


def _bandwidth_value(value: Any) -> float:
    number = _finite_number(value, "GB/s per direction", 0.0, MAX_BANDWIDTH, strict_lower=True)
    if number < MIN_BANDWIDTH:
        raise ValueError(f"expected at least {MIN_BANDWIDTH:g} GB/s (GB/s per direction), got {value!r}")
    return number


def _latency_value(value: Any) -> float:
    return _finite_number(value, "microseconds", 0.0, MAX_LATENCY, strict_lower=False)


#: Field types that check a bandwidth (GB/s per direction) and a latency (microseconds).
_Bandwidth = Annotated[Any, AfterValidator(_bandwidth_value)]
_Latency = Annotated[Any, AfterValidator(_latency_value)]


class _LinkModel(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    src: str
    dst: str
    bandwidth: _Bandwidth
    latency: _Latency = 0.0
    bidirectional: StrictBool = True

    @field_validator("src", "dst", mode="before")
    @classmethod
    def _string(cls, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected a node id string, got {value!r}")
        return value


#: Version of the switch ``capabilities`` attribute this reader understands (the ``version`` field).
CAPABILITIES_VERSION = 1
#: Reduction operations a switch may declare.
REDUCTION_OPS = ("sum", "prod", "min", "max")
#: Element data types a reducing switch may declare.
DATA_TYPES = ("f64", "f32", "f16", "bf16", "fp8e4m3", "fp8e5m2", "i64", "i32", "i8", "u64", "u32", "u8")


@dataclass(frozen=True)
class Reduction:
    """What a reducing switch combines (NVLink SHARP, InfiniBand SHARP).

    Attributes
    ----------
    ops : tuple of str
        Operations it reduces with (of :data:`REDUCTION_OPS`).
    dtypes : tuple of str
        Element types it reduces (of :data:`DATA_TYPES`).
    throughput : float or None
        Aggregate reduction throughput in GB/s of reduced output (each output byte combines the
        contributions of a group); None when only the links limit it.
    max_group : int or None
        The most contributions one reduction combines; None when any number.
    """

    ops: tuple[str, ...]
    dtypes: tuple[str, ...]
    throughput: float | None = None
    max_group: int | None = None


@dataclass(frozen=True)
class Multicast:
    """A switch that copies one incoming packet onto several outgoing links.

    Attributes
    ----------
    throughput : float or None
        Aggregate multicast throughput in GB/s of incoming packets; None when only the links limit it.
    """

    throughput: float | None = None


@dataclass(frozen=True)
class SwitchCapabilities:
    """The in-switch operations of one switch node (the ``capabilities`` node attribute).

    Examples
    --------
    >>> caps = SwitchCapabilities(Reduction(("sum",), ("f32",), throughput=100.0), Multicast())
    >>> caps.to_dict()
    {'version': 1, 'reduction': {'ops': ['sum'], 'dtypes': ['f32'], 'throughput': 100.0}, 'multicast': {}}
    """

    reduction: Reduction | None = None
    multicast: Multicast | None = None

    def to_dict(self) -> dict[str, Any]:
        """The documented file form; fields that are None are left out."""
        data: dict[str, Any] = {"version": CAPABILITIES_VERSION}
        if self.reduction is not None:
            red: dict[str, Any] = {"ops": list(self.reduction.ops), "dtypes": list(self.reduction.dtypes)}
            if self.reduction.throughput is not None:
                red["throughput"] = self.reduction.throughput
            if self.reduction.max_group is not None:
                red["max_group"] = self.reduction.max_group
            data["reduction"] = red
        if self.multicast is not None:
            data["multicast"] = {} if self.multicast.throughput is None else {"throughput": self.multicast.throughput}
        return data


def _throughput_value(value: Any) -> float | None:
    if value is None:
        return None
    number = _finite_number(value, "GB/s", 0.0, MAX_BANDWIDTH, strict_lower=True)
    if number < MIN_BANDWIDTH:
        raise ValueError(f"expected at least {MIN_BANDWIDTH:g} GB/s, got {value!r}")
    return number


_Throughput = Annotated[Any, AfterValidator(_throughput_value)]


def _distinct(values: list[str], what: str) -> list[str]:
    if not values:
        raise ValueError(f"expected at least one {what}")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"expected each {what} once, got {', '.join(repeated)} more than once")
    return values


class _ReductionModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)
    ops: list[Literal["sum", "prod", "min", "max"]]
    dtypes: list[Literal["f64", "f32", "f16", "bf16", "fp8e4m3", "fp8e5m2", "i64", "i32", "i8", "u64", "u32",
                         "u8"]]
    throughput: _Throughput = None
    max_group: int | None = None

    @field_validator("ops")
    @classmethod
    def _ops(cls, value: list[str]) -> list[str]:
        return _distinct(value, "operation")

    @field_validator("dtypes")
    @classmethod
    def _dtypes(cls, value: list[str]) -> list[str]:
        return _distinct(value, "data type")

    @field_validator("max_group")
    @classmethod
    def _group(cls, value: int | None) -> int | None:
        if value is not None and not 2 <= value <= MAX_NODES:
            raise ValueError(f"expected an integer from 2 to {MAX_NODES} (contributions one reduction combines), "
                             f"got {value}")
        return value


class _MulticastModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)
    throughput: _Throughput = None


class _CapabilitiesModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)
    version: Any
    reduction: _ReductionModel | None = None
    multicast: _MulticastModel | None = None

    @field_validator("version")
    @classmethod
    def _version(cls, value: Any) -> int:
        if isinstance(value, bool) or value != CAPABILITIES_VERSION or not isinstance(value, int):
            raise ValueError(f"expected {CAPABILITIES_VERSION} (the capabilities version this synth reads), "
                             f"got {value!r}")
        return CAPABILITIES_VERSION

    @model_validator(mode="after")
    def _something(self) -> _CapabilitiesModel:
        if self.reduction is None and self.multicast is None:
            raise ValueError("expected a reduction, a multicast or both (leave capabilities out for a passive "
                             "switch)")
        return self

    def capabilities(self) -> SwitchCapabilities:
        red = self.reduction
        return SwitchCapabilities(
            reduction=None if red is None else Reduction(tuple(red.ops), tuple(red.dtypes), red.throughput,
                                                         red.max_group),
            multicast=None if self.multicast is None else Multicast(self.multicast.throughput))


class _DimensionModel(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    kind: Literal["Ring", "FullyConnected", "Switch"]
    size: int
    bandwidth: _Bandwidth
    latency: _Latency = 0.0

    @field_validator("size")
    @classmethod
    def _size(cls, value: int) -> int:
        if value < 2:
            raise ValueError("a dimension needs at least 2 npus")
        return value


class _TopologyModel(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    name: str
    description: str = ""
    nodes: list[_NodeModel]
    links: list[_LinkModel]
    dimensions: list[_DimensionModel] | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, eq=False)
class Topology:
    """An immutable network: gpus (ranks), switches, and directed links.

    Parameters
    ----------
    name : str
        The topology's name (library name or the file's ``name``).
    graph : networkx.DiGraph
        Nodes with ``type``; edges with ``bandwidth`` (GB/s) and ``latency`` (µs). Frozen on creation.
    gpus : tuple of str
        Gpu node ids in rank order.
    description : str
        Free text.
    boxes : tuple of int or None
        Optional box (server) index per rank, used by hierarchical algorithms.
    dimensions : tuple of Dimension or None
        Optional multi-dimensional structure; rank = x0 + n0*(x1 + n1*x2 ...).
    metadata : mapping
        Free-form data kept with the file.
    capabilities : mapping of str to SwitchCapabilities
        The in-switch operations of each capable switch (absent: passive); see the module docstring.

    Examples
    --------
    >>> topo = Topology.from_dict({"name": "pair", "nodes": [{"id": "a", "type": "gpu"},
    ...     {"id": "b", "type": "gpu"}], "links": [{"src": "a", "dst": "b", "bandwidth": 10}]})
    >>> topo.num_ranks, topo.bandwidth("a", "b")
    (2, 10.0)
    """

    name: str
    graph: nx.DiGraph
    gpus: tuple[str, ...]
    description: str = ""
    boxes: tuple[int, ...] | None = None
    dimensions: tuple[Dimension, ...] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    capabilities: Mapping[str, SwitchCapabilities] = field(default_factory=dict)

    # ----------------------------------------------------------------------------------- building
    @classmethod
    def build(
        cls,
        name: str,
        gpus: Sequence[str],
        switches: Sequence[str],
        links: Sequence[tuple[str, str, float, float] | tuple[str, str, float]],
        *,
        bidirectional: bool = True,
        description: str = "",
        boxes: Sequence[int] | None = None,
        dimensions: Sequence[Dimension] | None = None,
        source: str = "",
        forwards: bool = False,
        capabilities: Mapping[str, SwitchCapabilities] | None = None,
    ) -> Topology:
        """Build a topology from python lists: ``links`` are ``(src, dst, bandwidth[, latency])``;
        ``forwards`` marks every gpu as forwarding (see the module docstring); ``capabilities`` gives
        switches their in-switch operations (:class:`SwitchCapabilities`). A topology over the rank limit
        (:mod:`synth.limits`) is refused before anything is built."""
        from synth import limits

        limits.check_ranks(len(gpus), f"a topology of {len(gpus):,} gpus", hint="use a smaller topology")
        gpu_node: dict[str, Any] = {"type": GPU, "forwards": True} if forwards else {"type": GPU}
        data: dict[str, Any] = {
            "name": name,
            "description": description,
            "nodes": [{"id": g, **gpu_node} for g in gpus] + [_switch_entry(s, (capabilities or {}).get(s))
                                                              for s in switches],
            "links": [
                {"src": link[0], "dst": link[1], "bandwidth": link[2],
                 "latency": link[3] if len(link) > 3 else 0.0, "bidirectional": bidirectional}
                for link in links
            ],
        }
        if boxes is not None:
            for node, box in zip(data["nodes"], boxes, strict=False):
                node["box"] = box
        if dimensions is not None:
            data["dimensions"] = [
                {"kind": d.kind, "size": d.size, "bandwidth": d.bandwidth, "latency": d.latency}
                for d in dimensions
            ]
        return cls.from_dict(data, source=source or name)

    @classmethod
    def from_dict(cls, data: Any, source: str = "") -> Topology:
        """Validate a parsed topology document and build the model; raises :class:`InputError`."""
        if not isinstance(data, dict):
            raise InputError(source, "", f"expected a JSON/YAML object at the top level, got {type(data).__name__}")
        try:
            model = _TopologyModel.model_validate(data)
        except ValidationError as error:
            raise invalid(error, source) from None
        if len(model.nodes) > MAX_NODES:
            raise InputError(source, "nodes", f"{len(model.nodes)} nodes exceed the limit of {MAX_NODES}")

        graph = nx.DiGraph()
        gpus: list[str] = []
        boxes: list[int | None] = []
        capabilities: dict[str, SwitchCapabilities] = {}
        for index, node in enumerate(model.nodes):
            if node.id in graph:
                raise InputError(source, f"nodes.{index}.id", f"duplicate node id {node.id!r}")
            if node.type == SWITCH and node.forwards is not None:
                raise InputError(source, f"nodes.{index}.forwards", "applies to gpus only (a switch always "
                                 "forwards)")
            if node.capabilities is not None:
                if node.type != SWITCH:
                    raise InputError(source, f"nodes.{index}.capabilities", "applies to switches only (a gpu "
                                     "reduces and copies with its own kernels)")
                capabilities[node.id] = node.capabilities.capabilities()
            graph.add_node(node.id, type=node.type, forwards=node.type == SWITCH or bool(node.forwards))
            if node.type == GPU:
                gpus.append(node.id)
                boxes.append(node.box)
        for index, link in enumerate(model.links):
            for end in ("src", "dst"):
                node_id = getattr(link, end)
                if node_id not in graph:
                    raise InputError(source, f"links.{index}.{end}", f"unknown node id {node_id!r}")
            if link.src == link.dst:
                raise InputError(source, f"links.{index}", f"self-loop on {link.src!r}")
            pairs = [(link.src, link.dst)]
            if link.bidirectional:
                pairs.append((link.dst, link.src))
            for u, v in pairs:
                if graph.has_edge(u, v):
                    edge = graph.edges[u, v]
                    edge["bandwidth"] += link.bandwidth
                    edge["latency"] = max(edge["latency"], link.latency)
                else:
                    graph.add_edge(u, v, bandwidth=link.bandwidth, latency=link.latency)
        if len(gpus) < 2:
            raise InputError(source, "nodes", f"expected at least 2 gpus, found {len(gpus)}")
        _check_gpu_connectivity(graph, gpus, source)

        box_tuple: tuple[int, ...] | None = None
        if any(b is not None for b in boxes):
            if any(b is None for b in boxes):
                raise InputError(source, "nodes", "either every gpu has a 'box' or none does")
            box_tuple = tuple(int(b) for b in boxes)  # type: ignore[arg-type]
        dims: tuple[Dimension, ...] | None = None
        if model.dimensions:
            dims = tuple(
                Dimension(kind=d.kind, size=d.size, bandwidth=d.bandwidth, latency=d.latency)
                for d in model.dimensions
            )
            if math.prod(d.size for d in dims) != len(gpus):
                raise InputError(source, "dimensions", f"product of sizes must equal the gpu count {len(gpus)}")
            problem = _dimension_mismatch(graph, gpus, dims)
            if problem:
                raise InputError(source, "dimensions", f"the links do not match the declared dimensions: {problem}")
        return cls(
            name=model.name,
            graph=nx.freeze(graph),
            gpus=tuple(gpus),
            description=model.description,
            boxes=box_tuple,
            dimensions=dims,
            metadata=dict(model.metadata or {}),
            capabilities=capabilities,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> Topology:
        """Load a topology from a ``.json``, ``.yaml`` or ``.yml`` file; raises :class:`InputError`."""
        data = read_document(path)
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The documented file form; each direction of a link is written as its own directed link."""
        nodes: list[dict[str, Any]] = []
        for rank, gpu in enumerate(self.gpus):
            entry: dict[str, Any] = {"id": gpu, "type": GPU}
            if self.boxes is not None:
                entry["box"] = self.boxes[rank]
            if self.forwards(gpu):
                entry["forwards"] = True
            nodes.append(entry)
        nodes.extend(_switch_entry(s, self.capabilities.get(s)) for s in self.switches)
        links = [
            {"src": link.src, "dst": link.dst, "bandwidth": link.bandwidth, "latency": link.latency,
             "bidirectional": False}
            for link in self.links()
        ]
        data: dict[str, Any] = {"name": self.name, "description": self.description, "nodes": nodes, "links": links}
        if self.dimensions:
            data["dimensions"] = [
                {"kind": d.kind, "size": d.size, "bandwidth": d.bandwidth, "latency": d.latency}
                for d in self.dimensions
            ]
        if self.metadata:
            data["metadata"] = dict(self.metadata)
        return data

    # --------------------------------------------------------------------------------- properties
    @property
    def num_ranks(self) -> int:
        """Number of gpus (ranks)."""
        return len(self.gpus)

    @property
    def ranks(self) -> range:
        """Rank numbers 0..N-1."""
        return range(len(self.gpus))

    @cached_property
    def switches(self) -> tuple[str, ...]:
        """Switch node ids, in file order."""
        return tuple(n for n, t in self.graph.nodes(data="type") if t == SWITCH)

    @cached_property
    def rank_of(self) -> Mapping[str, int]:
        """Map from gpu node id to rank."""
        return {gpu: rank for rank, gpu in enumerate(self.gpus)}

    @cached_property
    def memo(self) -> dict[str, Any]:
        """Derived data other modules keep per topology, by owner (:meth:`memoized`); the topology is
        immutable, so nothing in it ever goes stale, and it is freed with the topology."""
        return {}

    def memoized(self, owner: str, key: Hashable, compute: Callable[[], T], maxsize: int | None = None) -> T:
        """``compute()``, made once per ``(owner, key)`` for this topology and kept in :attr:`memo`: synth's
        one idiom for data derived from a topology (routes, cut bounds, tree plans). ``maxsize`` keeps only
        the owner's most recently used results (for large ones, such as tree plans).

        Examples
        --------
        >>> from synth.library import load_topology
        >>> topo = load_topology("ring:n=4")
        >>> calls = []
        >>> [topo.memoized("example", 1, lambda: calls.append(1) or len(calls)) for _ in range(2)], calls
        ([1, 1], [1])
        """
        table: OrderedDict[Hashable, Any] = self.memo.setdefault(owner, OrderedDict())
        if key in table:
            table.move_to_end(key)
            return table[key]  # type: ignore[no-any-return]
        value = compute()
        table[key] = value
        while maxsize is not None and len(table) > maxsize:
            table.popitem(last=False)
        return value

    def passive(self) -> Topology:
        """The same fabric with every switch passive (no capabilities); ``self`` when none has any.

        Examples
        --------
        >>> from synth.library import load_topology
        >>> bool(load_topology("dgx-h100").capabilities), load_topology("dgx-h100").passive().capabilities
        (True, {})
        """
        if not self.capabilities:
            return self
        import dataclasses

        return dataclasses.replace(self, capabilities={})

    def reduction(self, node: str) -> Reduction | None:
        """What switch ``node`` reduces in the network, or None (a gpu, or a switch that does not)."""
        caps = self.capabilities.get(node)
        return None if caps is None else caps.reduction

    def multicasts(self, node: str) -> bool:
        """True when switch ``node`` copies one packet onto several links."""
        caps = self.capabilities.get(node)
        return caps is not None and caps.multicast is not None

    def is_gpu(self, node: str) -> bool:
        """True when ``node`` is a gpu."""
        return bool(self.graph.nodes[node]["type"] == GPU)

    def forwards(self, node: str) -> bool:
        """True when bytes may pass through ``node`` within one transfer: a switch, or a gpu marked
        ``forwards`` (see the module docstring).

        Examples
        --------
        >>> topo = Topology.build("line", ["a", "b", "c"], [], [("a", "b", 10.0), ("b", "c", 10.0)])
        >>> topo.forwards("b"), Topology.build("line", ["a", "b", "c"], [], [("a", "b", 10.0), ("b", "c", 10.0)],
        ...                                    forwards=True).forwards("b")
        (False, True)
        """
        return bool(self.graph.nodes[node]["forwards"])

    @cached_property
    def non_forwarding_gpus(self) -> frozenset[str]:
        """The gpus that do not forward: a path may end at them but never cross them (every gpu node of
        the graph, the ranks and, in a process group's view, the non-members)."""
        return frozenset(n for n, data in self.graph.nodes(data=True) if data["type"] == GPU and not data["forwards"])

    def has_link(self, src: str, dst: str) -> bool:
        """True when a directed link ``src -> dst`` exists."""
        return bool(self.graph.has_edge(src, dst))

    def bandwidth(self, src: str, dst: str) -> float:
        """Bandwidth of the directed link in GB/s."""
        return float(self.graph.edges[src, dst]["bandwidth"])

    def exact_bandwidth(self, src: str, dst: str) -> Fraction:
        """Bandwidth of the directed link in GB/s as an exact decimal Fraction (``12.5`` -> 25/2)."""
        return Fraction(repr(self.bandwidth(src, dst)))

    def latency(self, src: str, dst: str) -> float:
        """Latency of the directed link in microseconds."""
        return float(self.graph.edges[src, dst]["latency"])

    def links(self) -> Iterator[Link]:
        """Directed links in a deterministic order (file order of nodes, then of edges)."""
        for src, dst, data in self.graph.edges(data=True):
            yield Link(src, dst, float(data["bandwidth"]), float(data["latency"]))

    def egress_bandwidth(self, node: str) -> float:
        """Total outgoing bandwidth of a node in GB/s."""
        return float(sum(d["bandwidth"] for _, _, d in self.graph.out_edges(node, data=True)))

    def ingress_bandwidth(self, node: str) -> float:
        """Total incoming bandwidth of a node in GB/s."""
        return float(sum(d["bandwidth"] for _, _, d in self.graph.in_edges(node, data=True)))

    def path_latency(self, path: tuple[str, ...] | list[str]) -> float:
        """Sum of link latencies along a node path, in microseconds."""
        return float(sum(self.graph.edges[u, v]["latency"] for u, v in zip(path, path[1:], strict=False)))

    def __repr__(self) -> str:
        return (f"Topology({self.name!r}, gpus={self.num_ranks}, switches={len(self.switches)}, "
                f"links={self.graph.number_of_edges()})")


def _switch_entry(switch: str, capabilities: SwitchCapabilities | None) -> dict[str, Any]:
    """A switch's node in the file form; a passive switch has no ``capabilities``."""
    entry: dict[str, Any] = {"id": switch, "type": SWITCH}
    if capabilities is not None:
        entry["capabilities"] = capabilities.to_dict()
    return entry


def _dimension_mismatch(graph: nx.DiGraph, gpus: list[str], dims: tuple[Dimension, ...]) -> str:
    """Why the links are not exactly the product the dimensions declare ("" when they are).

    Rank = x0 + n0*(x1 + ...). A Ring dimension links each gpu to its neighbours in its group (one link
    when the size is 2), a FullyConnected one every pair of its group, both ways, at the dimension's
    bandwidth and latency; a Switch dimension has one switch per group linked both ways to every member
    and to nothing else. Nothing else may be linked: ASTRA-sim exports describe the system by its
    dimensions alone, so a file whose dimensions disagree with its links would be simulated wrongly.
    """
    rank = {gpu: index for index, gpu in enumerate(gpus)}
    strides = [math.prod(d.size for d in dims[:index]) for index in range(len(dims))]

    def close(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)

    expected: dict[tuple[int, int], tuple[int, Dimension]] = {}
    for index, dim in enumerate(dims):
        if dim.kind == "Switch":
            continue
        stride, p = strides[index], dim.size
        for r in range(len(gpus)):
            x = (r // stride) % p
            base = r - x * stride
            partners = [(x + 1) % p, (x - 1) % p] if dim.kind == "Ring" else range(p)
            for y in partners:
                if y != x:
                    expected[(r, base + y * stride)] = (index, dim)
    seen_pairs = 0
    for u, v, data in graph.edges(data=True):
        if u in rank and v in rank:
            key = (rank[u], rank[v])
            if key not in expected:
                return f"link {u!r} -> {v!r} belongs to no dimension"
            index, dim = expected[key]
            if not close(data["bandwidth"], dim.bandwidth) or not close(data["latency"], dim.latency):
                return (f"link {u!r} -> {v!r} has {data['bandwidth']:g} GB/s and {data['latency']:g} µs, but dimension "
                        f"{index} ({dim.kind}) declares {dim.bandwidth:g} GB/s and {dim.latency:g} µs")
            seen_pairs += 1
    if seen_pairs != len(expected):
        missing = next((key for key in expected if not graph.has_edge(gpus[key[0]], gpus[key[1]])), None)
        if missing is not None:
            index, dim = expected[missing]
            return f"dimension {index} ({dim.kind}) needs a link {gpus[missing[0]]!r} -> {gpus[missing[1]]!r}"
    switch_dims = [index for index, dim in enumerate(dims) if dim.kind == "Switch"]
    covered: set[tuple[int, int]] = set()
    for node, kind in graph.nodes(data="type"):
        if kind != SWITCH:
            continue
        outs = set(graph.successors(node))
        ins = set(graph.predecessors(node))
        if outs != ins or not outs or any(m not in rank for m in outs):
            return f"switch {node!r} is not linked both ways to gpus only, so no Switch dimension describes it"
        members = sorted(rank[m] for m in outs)
        match = None
        for index in switch_dims:
            stride, p = strides[index], dims[index].size
            base = members[0] - ((members[0] // stride) % p) * stride
            if members == [base + y * stride for y in range(p)]:
                match = index
                group = (index, base)
                break
        if match is None:
            return f"switch {node!r} joins gpus that are not one group of a Switch dimension"
        dim = dims[match]
        for member in outs:
            for a, b in ((member, node), (node, member)):
                data = graph.edges[a, b]
                if not close(data["bandwidth"], dim.bandwidth) or not close(data["latency"], dim.latency):
                    return (f"link {a!r} -> {b!r} has {data['bandwidth']:g} GB/s and {data['latency']:g} µs, but "
                            f"dimension {match} (Switch) declares {dim.bandwidth:g} GB/s and {dim.latency:g} µs")
        if group in covered:
            return f"switch {node!r} duplicates another switch of dimension {match}"
        covered.add(group)
    wanted = sum(len(gpus) // dims[index].size for index in switch_dims)
    if len(covered) != wanted:
        return f"the Switch dimensions need {wanted} switches, one per group; {len(covered)} found"
    return ""


def fingerprint(topology: Topology) -> str:
    """SHA-256 of the topology's structure: gpus in rank order, switches, every directed link with its
    bandwidth and latency, boxes, forwarding gpus and dimensions (not its name, description, metadata or switch
    capabilities: every point-to-point schedule valid without them is valid with them). A schedule records it,
    so a different topology with the same gpu count is refused instead of silently used.

    Examples
    --------
    >>> a = Topology.build("a", ["x", "y"], [], [("x", "y", 10.0)])
    >>> b = Topology.build("b", ["x", "y"], [], [("x", "y", 10.0)])
    >>> fingerprint(a) == fingerprint(b), fingerprint(a) == fingerprint(Topology.build("a", ["x", "y"], [], [("x", "y", 20.0)]))
    (True, False)
    """
    import hashlib

    canonical = {
        "gpus": list(topology.gpus),
        "switches": sorted(topology.switches),
        "links": sorted([link.src, link.dst, repr(link.bandwidth), repr(link.latency)] for link in topology.links()),
        "boxes": list(topology.boxes) if topology.boxes is not None else None,
        "forwarding": sorted(g for g in topology.gpus if topology.forwards(g)),
        "dimensions": [[d.kind, d.size, repr(float(d.bandwidth)), repr(float(d.latency))] for d in topology.dimensions]
        if topology.dimensions else None,
    }
    text = json.dumps(canonical, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _check_gpu_connectivity(graph: nx.DiGraph, gpus: list[str], source: str) -> None:
    first = gpus[0]
    forward = nx.descendants(graph, first) | {first}
    backward = nx.ancestors(graph, first) | {first}
    for gpu in gpus[1:]:
        if gpu not in forward:
            raise InputError(source, "links", f"gpu {gpu!r} cannot be reached from gpu {first!r}")
        if gpu not in backward:
            raise InputError(source, "links", f"gpu {gpu!r} cannot reach gpu {first!r}")
