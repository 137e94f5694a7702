"""Parsing and printing of byte sizes with units, and of size ranges.

Units, as nccl-tests reads them: a bare ``K``, ``M``, ``G``, ``T`` is binary (``64M`` = 64 MiB =
67,108,864 bytes), as are ``KiB``, ``MiB``, ``GiB``, ``TiB``; ``KB``, ``MB``, ``GB``, ``TB`` are decimal
(``64MB`` = 64,000,000 bytes); no unit (or ``B``) is bytes. Case does not matter.

A range ``FROM:TO[:FACTOR]`` (nccl-tests' ``-b FROM -e TO -f FACTOR``) is FROM, FROM x FACTOR, ... up to
TO inclusive, with a whole FACTOR of at least 2 (default 2): ``1K:1M:4`` is 1KiB, 4KiB, 16KiB, 64KiB, 256KiB
and 1MiB.
"""

from __future__ import annotations

import math
import re

from synth.errors import InputError, ascii_digits

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
    ascii_digits(raw, "", field)
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


def format_size(size: int, sep: str = "") -> str:
    """Print a byte count compactly, in binary units when exact (``1GiB``), else in bytes; ``sep`` goes
    between the number and the unit (``" "`` for axis labels: ``1 GiB``).

    Examples
    --------
    >>> format_size(2**30), format_size(1536), format_size(2**20, sep=" ")
    ('1GiB', '1536B', '1 MiB')
    """
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{sep}{unit}"
    return f"{size}{sep}B"


#: Size-range syntax, as the CLI's help and errors show it.
RANGE_HELP = "FROM:TO[:FACTOR], e.g. 1K:1G:4 (FROM, FROM x FACTOR, ... up to TO; FACTOR a whole number >= 2, default 2)"


def parse_sizes(text: str | int, field: str = "size") -> list[int]:
    """One size (``"64M"``) or a range ``FROM:TO[:FACTOR]`` (``"1K:1M:4"``) as a list of byte counts.

    The range is geometric, as nccl-tests' ``-b/-e/-f``: FROM, FROM x FACTOR, ... while at most TO (TO itself
    is in the list only when the steps reach it). FROM must not exceed TO; FACTOR is a whole number from 2 to
    1024 (default 2), so a range holds at most 51 sizes.

    Examples
    --------
    >>> parse_sizes("64M")
    [67108864]
    >>> [format_size(s) for s in parse_sizes("1K:1M:4")]
    ['1KiB', '4KiB', '16KiB', '64KiB', '256KiB', '1MiB']
    >>> parse_sizes("8:64")
    [8, 16, 32, 64]
    """
    if isinstance(text, int) or ":" not in str(text):
        return [parse_size(text, field)]
    parts = str(text).split(":")
    if len(parts) not in (2, 3) or not all(p.strip() for p in parts):
        raise InputError("", field, f"expected a size or a range {RANGE_HELP}, got {text!r}")
    low = parse_size(parts[0], field)
    high = parse_size(parts[1], field)
    factor_text = ascii_digits(parts[2].strip() if len(parts) == 3 else "2", "", field)
    if not factor_text.isdigit() or len(factor_text) > 4 or not 2 <= int(factor_text) <= 1024:
        raise InputError("", field, f"expected a whole factor from 2 to 1024 after the second ':' in {text!r}, "
                         f"got {factor_text!r} ({RANGE_HELP})")
    if low > high:
        raise InputError("", field, f"the range {text!r} starts above its end ({format_size(low)} > "
                         f"{format_size(high)}); expected {RANGE_HELP}")
    factor = int(factor_text)
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes
