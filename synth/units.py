"""Parsing and printing of byte sizes with units (B, KB, MB, GB, KiB, MiB, GiB, TiB)."""

from __future__ import annotations

import math
import re

from synth.errors import InputError

_UNITS: dict[str, int] = {
    "": 1, "B": 1,
    "K": 1024, "KB": 1000, "KIB": 1024,
    "M": 1024**2, "MB": 1000**2, "MIB": 1024**2,
    "G": 1024**3, "GB": 1000**3, "GIB": 1024**3,
    "T": 1024**4, "TB": 1000**4, "TIB": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
#: Longest size text accepted (a real size needs a dozen characters; 5,000 digits is an attack).
MAX_SIZE_TEXT = 40


def parse_size(text: str | int, field: str = "size") -> int:
    """Parse ``"1GiB"``, ``"4 MB"``, ``"1024"`` into a whole number of bytes.

    Sizes are positive and at most the ``max_message_bytes`` limit (1 PiB, see :mod:`synth.limits`);
    ``1e400``, ``1e308TiB`` and 5,000-digit numbers are refused before any arithmetic.

    Examples
    --------
    >>> parse_size("1KiB"), parse_size("1KB"), parse_size("2M")
    (1024, 1000, 2097152)
    """
    from synth import limits

    maximum = int(limits.limit_value("max_message_bytes"))
    if isinstance(text, bool):
        raise InputError("", field, f"expected a size such as 1GiB, 64KB or 1024, got {text!r}")
    if isinstance(text, int):
        value = text
        if not 0 < value <= maximum:
            shown = f"{value}" if abs(value) < 10**30 else "a number of more than 30 digits"
            raise InputError("", field, f"expected a size from 1 byte to {format_size(maximum)}, got {shown}")
        return value
    raw = str(text)
    if len(raw) > MAX_SIZE_TEXT:
        raise InputError("", field, f"expected a size such as 1GiB, 64KB or 1024, got a text of {len(raw)} characters")
    match = _SIZE.match(raw)
    if not match or match.group(2).upper() not in _UNITS:
        raise InputError("", field, f"expected a size such as 1GiB, 64KB or 1024, got {text!r}")
    number = float(match.group(1))
    factor = _UNITS[match.group(2).upper()]
    if not math.isfinite(number) or number * factor > maximum:
        raise InputError("", field, f"expected a size of at most {format_size(maximum)} (max_message_bytes), got {text!r}")
    value = int(round(number * factor))
    if value <= 0:
        raise InputError("", field, f"expected a positive size, got {text!r}")
    return value


def format_size(size: int) -> str:
    """Print a byte count compactly, in binary units when exact (``1GiB``), else in bytes."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
