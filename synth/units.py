"""Parsing and printing of byte sizes with units (B, KB, MB, GB, KiB, MiB, GiB, TiB)."""

from __future__ import annotations

import re

from synth.errors import InputError

_UNITS: dict[str, int] = {
    "": 1, "B": 1,
    "K": 1024, "KB": 1000, "KIB": 1024,
    "M": 1024**2, "MB": 1000**2, "MIB": 1024**2,
    "G": 1024**3, "GB": 1000**3, "GIB": 1024**3,
    "T": 1024**4, "TB": 1000**4, "TIB": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, field: str = "size") -> int:
    """Parse ``"1GiB"``, ``"4 MB"``, ``"1024"`` into a whole number of bytes.

    Examples
    --------
    >>> parse_size("1KiB"), parse_size("1KB"), parse_size("2M")
    (1024, 1000, 2097152)
    """
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match or match.group(2).upper() not in _UNITS:
            raise InputError("", field, f"expected a size such as 1GiB, 64KB or 1024, got {text!r}")
        number = float(match.group(1))
        value = int(round(number * _UNITS[match.group(2).upper()]))
    if value <= 0:
        raise InputError("", field, f"expected a positive size, got {text!r}")
    return value


def format_size(size: int) -> str:
    """Print a byte count compactly, in binary units when exact (``1GiB``), else in bytes."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
