"""The system ASTRA-sim is told about: its dimensions, units, and the network YAML it reads and writes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from synth.errors import InputError
from synth.topology import Topology

GIB = 1 << 30
KINDS = ("Ring", "FullyConnected", "Switch")


# ------------------------------------------------------------------------------ system description
@dataclass(frozen=True)
class AstraDim:
    """One dimension as ASTRA-sim's network YAML states it: bandwidth in GB/s with GB = 2^30 bytes,
    latency in ns per hop."""

    kind: str
    npus: int
    bandwidth: float
    latency: float

    @property
    def bytes_per_ns(self) -> float:
        """Link bandwidth in bytes per ns, computed as ASTRA-sim computes it."""
        return self.bandwidth * GIB / 1_000_000_000

    def hops(self, src: int, dst: int) -> int:
        """Hops between two local ids of this dimension (shorter direction on a Ring)."""
        if self.kind == "Ring":
            clockwise = (dst - src) % self.npus
            return min(clockwise, self.npus - clockwise)
        return 1 if self.kind == "FullyConnected" else 2


@dataclass(frozen=True)
class AstraSystem:
    """An ASTRA-sim analytical network: a product of Ring/FullyConnected/Switch dimensions."""

    dims: tuple[AstraDim, ...]

    @property
    def npus(self) -> int:
        """Total npus (ranks)."""
        return math.prod(d.npus for d in self.dims)

    @property
    def congestion_aware(self) -> bool:
        """True when ASTRA-sim's congestion-aware backend can run it (one dimension)."""
        return len(self.dims) == 1

    def yaml(self) -> str:
        """The network configuration YAML ASTRA-sim reads."""
        def row(values: list[str]) -> str:
            return "[ " + ", ".join(values) + " ]"
        return (f"topology: {row([d.kind for d in self.dims])}\n"
                f"npus_count: {row([str(d.npus) for d in self.dims])}\n"
                f"bandwidth: {row([_number(d.bandwidth) for d in self.dims])}  # GB/s, GB = 2^30 bytes\n"
                f"latency: {row([_number(d.latency) for d in self.dims])}  # ns per hop\n")

    def address(self, npu: int) -> list[int]:
        """Per-dimension coordinates of an npu: rank = x0 + n0*(x1 + n1*x2 ...)."""
        coords = []
        for d in self.dims:
            coords.append(npu % d.npus)
            npu //= d.npus
        return coords


def _number(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") and "e" not in text else text


def gbps_to_astra(bandwidth_gbps: float) -> float:
    """GB/s (10^9 B/s) -> ASTRA-sim's GB/s (2^30 B/s), exactly rounded: 53.6870912 -> 50.0."""
    return float(Fraction(repr(float(bandwidth_gbps))) * 10**9 / GIB)


def us_to_ns(latency_us: float) -> float:
    """µs -> ns, exactly rounded: 0.5 -> 500.0."""
    return float(Fraction(repr(float(latency_us))) * 1000)


def astra_system(topology: Topology) -> tuple[AstraSystem | None, str]:
    """The ASTRA-sim network equivalent to ``topology``, or None and the reason it has none.

    Uses ``topology.dimensions`` when set; otherwise recognizes a uniform ring (in rank order),
    fully-connected network or single switch.
    """
    if topology.dimensions:
        dims = []
        for d in topology.dimensions:
            dim_kind = "FullyConnected" if d.kind == "Ring" and d.size == 2 else d.kind
            dims.append(AstraDim(dim_kind, d.size, gbps_to_astra(d.bandwidth), us_to_ns(d.latency)))
        return AstraSystem(tuple(dims)), ""
    shape = _recognize(topology)
    if shape is None:
        return None, (f"topology {topology.name!r} is not a product of Ring/FullyConnected/Switch dimensions "
                      "(it sets no 'dimensions' and is not a uniform ring, fully-connected network or single "
                      "switch), so ASTRA-sim's analytical network cannot describe it")
    kind, bandwidth, latency = shape
    return AstraSystem((AstraDim(kind, topology.num_ranks, gbps_to_astra(bandwidth), us_to_ns(latency)),)), ""


def _recognize(topology: Topology) -> tuple[str, float, float] | None:
    links = list(topology.links())
    if not links:
        return None
    bandwidths = {link.bandwidth for link in links}
    latencies = {link.latency for link in links}
    if len(bandwidths) != 1 or len(latencies) != 1:
        return None
    bandwidth, latency = bandwidths.pop(), latencies.pop()
    n = topology.num_ranks
    pairs = {(link.src, link.dst) for link in links}
    gpus = topology.gpus
    if len(topology.switches) == 1:
        hub = topology.switches[0]
        wanted = {(g, hub) for g in gpus} | {(hub, g) for g in gpus}
        return ("Switch", bandwidth, latency) if pairs == wanted else None
    if topology.switches:
        return None
    if pairs == {(a, b) for a in gpus for b in gpus if a != b}:
        return "FullyConnected", bandwidth, latency
    if n >= 3 and pairs == {(gpus[i], gpus[(i + s) % n]) for i in range(n) for s in (1, -1)}:
        return "Ring", bandwidth, latency
    return None


def load_network_yaml(path: str) -> tuple[Topology, str]:
    """An ASTRA-sim network YAML as a synth topology plus the library spec that rebuilds it.

    Bandwidth converts from ASTRA-sim's GB/s (2^30) to synth's (10^9), latency from ns to µs.
    """
    from synth.documents import read_document
    from synth.library import build

    data = read_document(path)
    if not isinstance(data, dict):
        raise InputError(path, "", "expected a YAML mapping with topology, npus_count, bandwidth, latency")
    rows: dict[str, list[Any]] = {}
    for key in ("topology", "npus_count", "bandwidth", "latency"):
        value = data.get(key)
        if not isinstance(value, list) or not value:
            raise InputError(path, key, "expected a non-empty list, one entry per dimension")
        rows[key] = value
    count = len(rows["topology"])
    for key, value in rows.items():
        if len(value) != count:
            raise InputError(path, key, f"expected {count} entries (one per dimension), got {len(value)}")
    kinds, sizes, bandwidths, latencies = [], [], [], []
    for index in range(count):
        kind = rows["topology"][index]
        if kind not in KINDS:
            raise InputError(path, f"topology.{index}", f"expected Ring, FullyConnected or Switch, got {kind!r}")
        npus = rows["npus_count"][index]
        if isinstance(npus, bool) or not isinstance(npus, int) or npus < 2:
            raise InputError(path, f"npus_count.{index}", f"expected an integer >= 2, got {npus!r}")
        bandwidth, latency = rows["bandwidth"][index], rows["latency"][index]
        for key, value in (("bandwidth", bandwidth), ("latency", latency)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise InputError(path, f"{key}.{index}", f"expected a number >= 0, got {value!r}")
        if bandwidth <= 0:
            raise InputError(path, f"bandwidth.{index}", "expected a positive bandwidth")
        kinds.append(kind)
        sizes.append(npus)
        bandwidths.append(float(Fraction(repr(float(bandwidth))) * GIB / 10**9))
        latencies.append(float(Fraction(repr(float(latency))) / 1000))
    if count == 1:
        name = {"Ring": "ring", "FullyConnected": "fully-connected", "Switch": "switch"}[kinds[0]]
        spec = f"{name}:n={sizes[0]},bandwidth={bandwidths[0]!r},latency={latencies[0]!r}"
    else:
        spec = (f"multidim:kinds={'/'.join(kinds)},sizes={'x'.join(map(str, sizes))},"
                f"bandwidths={'x'.join(map(repr, bandwidths))},latencies={'x'.join(map(repr, latencies))}")
    from synth.library import multidim
    from synth.topology import MAX_NODES

    if math.prod(sizes) > MAX_NODES:  # refuse before building millions of nodes
        raise InputError(path, "npus_count", f"{math.prod(sizes)} npus exceed the limit of {MAX_NODES}")
    try:
        if count == 1:
            topology = build(spec)
        else:
            topology = multidim(kinds=tuple(kinds), sizes=tuple(sizes), bandwidths=tuple(bandwidths),
                                latencies=tuple(latencies))
    except (InputError, ValueError) as error:
        raise InputError(path, "", str(error)) from None
    return topology, spec


def is_network_yaml(path: str) -> bool:
    """True when ``path`` is a YAML file whose top level is an ASTRA-sim network configuration: a mapping
    with ``topology`` and ``npus_count`` lists and no synth topology fields (``nodes``, ``links``). A synth
    topology that merely mentions ``npus_count`` (in its metadata, say) is not one."""
    import contextlib
    from pathlib import Path

    from synth.documents import read_document
    from synth.errors import SynthError

    candidate = Path(path)
    with contextlib.suppress(OSError, ValueError):
        if candidate.suffix.lower() not in (".yml", ".yaml") or not candidate.is_file():
            return False
    try:
        data = read_document(candidate)
    except (SynthError, OSError, ValueError):
        return False  # the topology loader reports what is wrong with it
    return (isinstance(data, dict) and isinstance(data.get("topology"), list) and "npus_count" in data
            and "nodes" not in data and "links" not in data)
