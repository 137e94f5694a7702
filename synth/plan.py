"""The execution plan: how a runtime streams a schedule's transfers at one message size.

A schedule says *which* chunk goes *where* after *what*. How long that takes depends on how a runtime
moves each chunk: NCCL and MSCCL cut a connection's data into *slices* (NCCL's steps), keep several
slices in flight per connection, and pay a protocol's costs. One rule, in this module, fixes those
choices for every command (``evaluate``, ``compare``, ``demo``, ``tune``, ``sweep``, ``catalog``,
``explain`` and the exporters), so one (schedule, size, model) gives one time everywhere.

The rule
--------
For a schedule of ``C`` chunks at a message of ``n`` bytes (chunk ``n / C`` bytes) and a protocol:

- ``slice_bytes``: the protocol's step size (data bytes per slice), unless pinned;
- ``slices`` per chunk: ``ceil(chunk / slice_bytes)``, at least 1 (every slice carries
  ``chunk / slices`` bytes);
- ``window``: slices in flight per transfer, NCCL's ``NCCL_STEPS`` = 8: slice ``j`` of a transfer
  starts once slice ``j - 1`` has left its source *and* slice ``j - window`` has arrived;
- per-hop latency: a transfer pays its path's link latencies plus the protocol's per-step latency
  once, as a delay between its bytes leaving the source and arriving (slices overlap it);
- the protocol's base latency is paid once per collective;
- link bandwidth is scaled by the protocol's efficiency (data bytes per byte on the wire).

Which protocol: an explicit choice (CLI ``--protocol``), else one the schedule pins
(``params["plan"]["protocol"]``, e.g. from an MSCCL file's ``proto``), else ``auto``: the evaluator
tries LL, LL128 and Simple and keeps the fastest, as NCCL's tuner does with its own model.

Protocol costs come from NCCL's tuning model (``src/graph/tuning.cc``, the tables of NCCL 2.7-2.12:
``baseLat`` ring LL 3.6 / LL128 10.0 / Simple 8.4 µs; ``hwLat`` ring NVLink LL 0.47 / LL128 1.9 /
Simple 3.4 µs and network 2.7 / 4.0 / 9.6 µs). synth's links already carry their hardware latency, so a
protocol's per-step latency here is its *extra* cost over LL (NVLink: LL128 1.43, Simple 2.93 µs;
between boxes: LL128 1.3, Simple 6.9 µs). Step sizes are NCCL's default buffers over its 8 steps:
Simple 4 MiB / 8 = 512 KiB; LL128 8 x 600 KiB lines of 120/128 data = 562.5 KiB; LL 512 KiB of 16-byte
lines holding 8 data bytes each, / 8 = 32 KiB. ``ideal`` is the plain α-β model of the papers: full
bandwidth, no protocol latency, 512 KiB slices.

Examples
--------
>>> plan = make_plan(chunks=16, size=2**30, protocol="Simple")
>>> plan.slices, plan.window, plan.describe()
(128, 8, 'Simple, 128 slices of 512 KiB per chunk, 8 in flight')
>>> make_plan(chunks=16, size=2**10, protocol="LL").slices
1
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

from synth.errors import InputError


class Protocol(StrEnum):
    """Wire protocols (NCCL's three, and the plain α-β model)."""

    IDEAL = "ideal"
    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


#: The protocols ``auto`` chooses among, in the order they are tried.
AUTO_PROTOCOLS: tuple[Protocol, ...] = (Protocol.LL, Protocol.LL128, Protocol.SIMPLE)
#: NCCL_STEPS: slices in flight per connection.
DEFAULT_WINDOW = 8
#: Largest accepted window and slice count per chunk (beyond these the model would only cost time).
MAX_WINDOW = 1024
MAX_SLICES = 1 << 20


@dataclass(frozen=True)
class ProtocolCosts:
    """What a protocol costs: wire efficiency, latencies (µs) and its default slice (step) size.

    Attributes
    ----------
    efficiency : Fraction
        Data bytes per byte on the wire (LL 1/2, LL128 120/128, Simple 1).
    base_latency_us : float
        Paid once per collective.
    step_latency_us : float
        Added to every transfer inside a box (or on a topology without boxes).
    network_step_latency_us : float
        Added instead to a transfer between two boxes.
    slice_bytes : int
        Data bytes per slice (one step).
    """

    efficiency: Fraction
    base_latency_us: float
    step_latency_us: float
    network_step_latency_us: float
    slice_bytes: int


PROTOCOL_COSTS: Mapping[Protocol, ProtocolCosts] = {
    Protocol.IDEAL: ProtocolCosts(Fraction(1), 0.0, 0.0, 0.0, 512 * 1024),
    Protocol.LL: ProtocolCosts(Fraction(1, 2), 3.6, 0.0, 0.0, 32 * 1024),
    Protocol.LL128: ProtocolCosts(Fraction(120, 128), 10.0, 1.43, 1.3, 576_000),
    Protocol.SIMPLE: ProtocolCosts(Fraction(1), 8.4, 2.93, 6.9, 512 * 1024),
}


def parse_protocol(text: str, field: str = "protocol") -> Protocol | None:
    """A protocol name (any case), or None for ``auto``; raises :class:`InputError` otherwise.

    Examples
    --------
    >>> parse_protocol("ll128"), parse_protocol("auto")
    (<Protocol.LL128: 'LL128'>, None)
    """
    value = str(text).strip()
    if value.lower() == "auto":
        return None
    for protocol in Protocol:
        if protocol.value.lower() == value.lower():
            return protocol
    names = ", ".join(["auto", *(p.value for p in Protocol)])
    raise InputError("", field, f"unknown protocol {text!r}; expected one of {names}")


@dataclass(frozen=True)
class Plan:
    """How every transfer of a schedule streams at one message size.

    Attributes
    ----------
    protocol : Protocol
    slice_bytes : float
        Data bytes per slice (``chunk / slices``).
    slices : int
        Slices per chunk.
    window : int
        Slices in flight per transfer.
    """

    protocol: Protocol
    slice_bytes: float
    slices: int
    window: int

    @property
    def costs(self) -> ProtocolCosts:
        """The protocol's costs."""
        return PROTOCOL_COSTS[self.protocol]

    def describe(self) -> str:
        """One line for tables and notes, e.g. ``Simple, 128 slices of 512 KiB per chunk, 8 in flight``."""
        return (f"{self.protocol.value}, {self.slices} slice{'s' if self.slices != 1 else ''} of "
                f"{_bytes(self.slice_bytes)} per chunk, {self.window} in flight")

    def short(self) -> str:
        """A compact form for table columns, e.g. ``Simple 128x512KiB w8``."""
        return f"{self.protocol.value} {self.slices}x{_bytes(self.slice_bytes).replace(' ', '')} w{self.window}"

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready fields (the ``plan`` object of ``--json`` outputs)."""
        return {"protocol": self.protocol.value, "slice_bytes": self.slice_bytes, "slices": self.slices,
                "window": self.window}


def _bytes(value: float) -> str:
    for unit, factor in (("MiB", 1024**2), ("KiB", 1024)):
        if value >= factor:
            number = value / factor
            return f"{number:g} {unit}" if number == int(number) else f"{number:.1f} {unit}"
    return f"{value:g} B" if value == int(value) else f"{value:.1f} B"


def pinned(params: Mapping[str, Any]) -> dict[str, Any]:
    """The plan fields a schedule pins in ``params["plan"]`` (protocol, slice_bytes, window), validated.

    Examples
    --------
    >>> pinned({"plan": {"protocol": "LL128"}})
    {'protocol': <Protocol.LL128: 'LL128'>}
    >>> pinned({})
    {}
    """
    raw = params.get("plan") if isinstance(params, Mapping) else None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InputError("", "params.plan", "expected an object with protocol, slice_bytes and/or window")
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "protocol":
            protocol = parse_protocol(value, "params.plan.protocol")
            if protocol is not None:
                fields["protocol"] = protocol
        elif key == "slice_bytes":
            fields["slice_bytes"] = _positive_int(value, "params.plan.slice_bytes", 1 << 40)
        elif key == "window":
            fields["window"] = _positive_int(value, "params.plan.window", MAX_WINDOW)
        else:
            raise InputError("", f"params.plan.{key}", "unknown plan field; expected protocol, slice_bytes or window")
    return fields


def _positive_int(value: Any, field: str, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise InputError("", field, f"expected a whole number in 1..{upper}, got {value!r}")
    return value


def make_plan(chunks: int, size: int, protocol: Protocol | str, slice_bytes: int | None = None,
              window: int | None = None, slices: int | None = None) -> Plan:
    """The plan for a schedule of ``chunks`` chunks at ``size`` bytes under ``protocol``.

    ``slice_bytes`` and ``window`` default to the protocol's step size and :data:`DEFAULT_WINDOW`;
    ``slices`` (slices per chunk) overrides the count the slice size gives.

    Examples
    --------
    >>> make_plan(8, 2**20, "Simple").describe()
    'Simple, 1 slice of 128 KiB per chunk, 8 in flight'
    >>> make_plan(8, 2**30, "ideal", slices=4).slices
    4
    """
    protocol = Protocol(protocol) if not isinstance(protocol, Protocol) else protocol
    costs = PROTOCOL_COSTS[protocol]
    if window is None:
        window = DEFAULT_WINDOW
    window = _positive_int(window, "window", MAX_WINDOW)
    chunk = size / chunks
    if slices is None:
        target = costs.slice_bytes if slice_bytes is None else _positive_int(slice_bytes, "slice_bytes", 1 << 40)
        slices = max(1, math.ceil(chunk / target))
    slices = _positive_int(slices, "slices", MAX_SLICES)
    return Plan(protocol, chunk / slices, slices, window)
