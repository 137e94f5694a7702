"""What every library builder shares: parameters checked by name, size limits, box-qualified node ids,
the product of dimensions, rail scale-out, and the link figures the named systems cite.

A bad parameter raises :class:`~synth.errors.InputError` naming the Python parameter (``n must be at
least 2, got 1``); :func:`synth.library.build` adds the spec it came from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from synth.errors import InputError
from synth.library.spec import format_value
from synth.topology import MAX_NODES, Dimension

#: Largest number of links a builder will create (each bidirectional link counts once).
MAX_BUILD_LINKS = 2_000_000

# Link figures shared by systems of several vendors (GB/s per direction, µs per hop); the docstrings cite them.
PCIE_HOP_US = 0.3  # assumed gpu<->NIC hop
IB_HOP_US = 1.0  # NIC<->IB switch hop: gpu-nic-switch-nic-gpu sums to TACCL's IB α of 2.6 µs
NDR_GBPS = 50.0  # one 400 Gb/s NDR InfiniBand / 400 GbE port, per direction
SWITCH_HOP_US = 0.5  # assumed per hop through a scale-out switch tier (leaf, spine, core, router)

LinkSpec = tuple[str, str, float, float]


def require(condition: bool, message: str) -> None:
    """Raise an InputError with ``message`` (which names the parameter) unless ``condition`` holds."""
    if not condition:
        raise InputError("", "", message)


def integer_at_least(value: Any, what: str, minimum: int) -> int:
    """An integer parameter >= ``minimum``, with a clear error otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError("", "", f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise InputError("", "", f"{what} must be at least {minimum}, got {value}")
    if value > MAX_NODES:
        raise InputError("", "", f"{what} must be at most {MAX_NODES}, got {value}")
    return value


def bandwidth_value(value: Any, what: str) -> float:
    """A bandwidth: a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InputError("", "", f"{what} must be a positive number of GB/s, got {value!r}")
    return float(value)


def latency_value(value: Any, what: str) -> float:
    """A latency: a finite number >= 0 (µs)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InputError("", "", f"{what} must be a number of microseconds >= 0, got {value!r}")
    return float(value)


def dimension_sizes(value: Any, what: str, lengths: Sequence[int] | None = None) -> tuple[int, ...]:
    """A tuple of dimension sizes (each >= 2), e.g. ``(4, 4, 4)`` or ``4x4x4``."""
    items = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(items, list | tuple) or not items:
        raise InputError("", "", f"{what} must be sizes like 4x4 or 4x4x4, got {value!r}")
    sizes = tuple(integer_at_least(v, f"each size in {what}", 2) for v in items)
    if lengths is not None and len(sizes) not in lengths:
        expected = " or ".join(str(n) for n in lengths)
        raise InputError("", "", f"{what} must have {expected} sizes, got {format_value(sizes)}")
    return sizes


def within_build_limits(nodes: int, links: int, gpus: int | None = None) -> None:
    """Refuse, before building, a topology over the node or link limit, or (``gpus`` given) over the rank
    limit of :mod:`synth.limits`."""
    if gpus is not None:
        from synth import limits

        limits.check_ranks(gpus, f"a topology of {gpus:,} gpus", hint="use a smaller topology")
    if nodes > MAX_NODES:
        raise InputError("", "", f"this would build {nodes} nodes, more than the limit of {MAX_NODES}")
    if links > MAX_BUILD_LINKS:
        raise InputError("", "", f"this would build {links} links, more than the limit of {MAX_BUILD_LINKS}")


def boxed(boxes: int, box: int, node: str) -> str:
    """Node id inside a box: ``b1.gpu3`` on multi-box systems, plain ``gpu3`` on a single box."""
    return f"b{box}.{node}" if boxes > 1 else node


def dimension_product(
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
    within_build_limits(total + switch_count, estimated, gpus=total)
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


def per_dimension(value: Any, count: int, what: str, convert: Callable[[Any, str], float]) -> tuple[float, ...]:
    items = value if isinstance(value, list | tuple) else (value,) * count
    if len(items) != count:
        raise InputError("", "", f"{what} must give one value per dimension ({count}), got {format_value(items)}")
    return tuple(convert(v, f"each of {what}") for v in items)


def rail_scale_out(box_gpus: Sequence[Sequence[str]], nic_of: Callable[[int, int], str],
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


def box_count(boxes: Any) -> int:
    return integer_at_least(boxes, "boxes", 1)
