"""Library spec strings: ``name:key=value,...`` parsed into typed parameters, and values written back.

Values are booleans (``true``/``false``), numbers, lists of numbers joined by ``x`` (``dims=4x4x4``), or
lists of words joined by ``/`` (``kinds=Switch/Switch``). A topology built from the library is named by its
canonical spec (:func:`spec_name`): the entry name plus the parameters that differ from their defaults.
"""

from __future__ import annotations

import inspect
from typing import Any

from synth.errors import InputError, ascii_digits

#: Longest library spec accepted (the longest real one is under 100 characters).
MAX_SPEC_LENGTH = 255


def _parse_scalar(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    ascii_digits(text, "", "topology")
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
    >>> from synth.library import torus
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
