"""The library's registry: every builder registered under its name, and :func:`build` from a spec."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synth.errors import InputError
from synth.library.spec import parse_spec, spec_name
from synth.topology import Topology


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


def build(spec: str) -> Topology:
    """Build a library topology from a spec such as ``dgx-a100:boxes=2``."""
    name, params = parse_spec(spec)
    if name not in LIBRARY:
        raise InputError("", "topology", f"{spec!r} is neither a file nor a library name (the library has "
                         f"{', '.join(LIBRARY)})")
    builder = LIBRARY[name].builder
    accepted = inspect.signature(builder).parameters
    for key in params:
        if key not in accepted:
            raise InputError("", "topology", f"{name} has no parameter {key!r}; it takes {', '.join(accepted) or 'none'}")
    try:
        return builder(**params)
    except (TypeError, ValueError, InputError) as error:
        raise InputError("", "topology", f"{spec}: {error}") from None


def names() -> list[str]:
    """All library names, in registration order."""
    return list(LIBRARY)


def shipped() -> list[str]:
    """Names of the named real systems shipped as files in ``topologies/``."""
    return [name for name, e in LIBRARY.items() if e.shipped]
