"""The topology library: parametric builders and the named real systems, usable by name anywhere.

A topology argument is a file path, a library name (``dgx-a100``), or a name with parameters
(``dgx-a100:boxes=2``, ``torus:dims=4x4``). ``synth topologies`` lists them all.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synth.errors import InputError
from synth.topology import Topology

#: Folder of the shipped topology files (next to the package in a source checkout).
TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"


@dataclass(frozen=True)
class Entry:
    """A library entry: a builder with its default parameters, and whether it is shipped as a file."""

    name: str
    builder: Callable[..., Topology]
    summary: str
    shipped: bool = False


LIBRARY: dict[str, Entry] = {}


def entry(name: str, summary: str, shipped: bool = False) -> Callable[[Callable[..., Topology]], Callable[..., Topology]]:
    """Decorator that registers a builder under ``name``."""

    def wrap(function: Callable[..., Topology]) -> Callable[..., Topology]:
        LIBRARY[name] = Entry(name, function, summary, shipped)
        return function

    return wrap


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if "x" in lowered and all(part.isdigit() for part in lowered.split("x")):
        return tuple(int(part) for part in lowered.split("x"))
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``name:key=value,key=value`` into the name and typed parameters."""
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
    """Load a topology from a file path or a library spec.

    Examples
    --------
    >>> load_topology("ring:n=4").num_ranks
    4
    """
    if isinstance(spec, Topology):
        return spec
    text = str(spec)
    path = Path(text)
    if path.suffix.lower() in (".json", ".yaml", ".yml") or path.exists():
        if path.exists():
            return Topology.from_file(path)
        shipped = TOPOLOGY_DIR / path.name
        if not path.is_absolute() and shipped.exists() and path.parent == Path("."):
            return Topology.from_file(shipped)
        raise InputError(text, "", "no such file")
    return build(text)


def names() -> list[str]:
    """All library names, in registration order."""
    return list(LIBRARY)


def shipped() -> list[str]:
    """Names of the named real systems shipped as files in ``topologies/``."""
    return [name for name, e in LIBRARY.items() if e.shipped]


# ------------------------------------------------------------------------- parametric builders
def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@entry("ring", "n gpus on a bidirectional ring")
def ring(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    _check(n >= 2, "n must be at least 2")
    gpus = [f"gpu{i}" for i in range(n)]
    links = [(gpus[i], gpus[(i + 1) % n], bandwidth, latency) for i in range(n if n > 2 else 1)]
    return Topology.build(f"ring-{n}", gpus, [], links, description=f"{n} gpus on a ring")


@entry("fully_connected", "n gpus, a direct link between every pair")
def fully_connected(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    _check(n >= 2, "n must be at least 2")
    gpus = [f"gpu{i}" for i in range(n)]
    links = [(gpus[i], gpus[j], bandwidth, latency) for i in range(n) for j in range(i + 1, n)]
    return Topology.build(f"fully-connected-{n}", gpus, [], links, description=f"{n} gpus fully connected")


@entry("switch", "n gpus on one switch")
def switch(n: int = 8, bandwidth: float = 50.0, latency: float = 0.5) -> Topology:
    _check(n >= 2, "n must be at least 2")
    gpus = [f"gpu{i}" for i in range(n)]
    links = [(g, "sw0", bandwidth, latency) for g in gpus]
    return Topology.build(f"switch-{n}", gpus, ["sw0"], links, description=f"{n} gpus on one switch")
