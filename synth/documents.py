"""Documents read from files: JSON and YAML, with size, encoding, depth and syntax checks.

Every file synth reads (topologies, schedules, sketches, sweep specs, demands, jobs) goes through
:func:`read_document`, which refuses, naming the file and where: a file that is not a regular file or is
over the ``max_input_bytes`` limit (``max_yaml_bytes`` for YAML), text that is not UTF-8, a syntax error
(with its line), a duplicate key, nesting deeper than :data:`MAX_DEPTH`, an integer of more than
:data:`MAX_INTEGER_DIGITS` digits, YAML aliases that expand past :data:`MAX_ALIAS_EXPANSION` values, and
strings with lone surrogates or control characters where text is expected.

Examples
--------
>>> parse_json('{"a": [1, 2]}', "inline")
{'a': [1, 2]}
>>> parse_json('{"a": 1, "a": 2}', "inline")
Traceback (most recent call last):
...
synth.errors.InputError: inline: duplicate key 'a' (a key may appear once in an object)
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from synth.errors import InputError

#: Deepest nesting of lists and objects accepted in any document (a real topology or schedule needs 4).
MAX_DEPTH = 64
#: Most decimal digits accepted in one integer of a document (2^64 has 20).
MAX_INTEGER_DIGITS = 30
#: Most values YAML aliases may add to a document beyond its distinct values.
MAX_ALIAS_EXPANSION = 1_000_000


def read_document(path: str | Path, max_bytes: int | None = None) -> Any:
    """Read a JSON or YAML document with size, encoding and syntax checks; raises :class:`InputError`.

    ``max_bytes`` defaults to the ``max_input_bytes`` limit (see :mod:`synth.limits`). Every document is
    checked as in :func:`parse_json` and :func:`parse_yaml`.
    """
    from synth import limits

    path = Path(path)
    source = str(path)
    try:
        info = path.stat()
    except OSError as error:
        if error.errno == 2:
            raise InputError(source, "", "no such file") from None
        raise InputError(source, "", f"cannot read file: {error.strerror or error}") from None
    import stat

    if not stat.S_ISREG(info.st_mode):
        raise InputError(source, "", "not a regular file")
    size = info.st_size
    limit = int(limits.limit_value("max_input_bytes")) if max_bytes is None else max_bytes
    yaml_file = path.suffix.lower() in (".yaml", ".yml")
    if yaml_file:
        limit = min(limit, int(limits.limit_value("max_yaml_bytes")))
    if size > limit:
        variable = "SYNTH_MAX_YAML_BYTES; use JSON for larger files" if yaml_file and size <= (
            max_bytes or limits.limit_value("max_input_bytes")) else "SYNTH_MAX_INPUT_BYTES"
        raise InputError(source, "", f"file is {size} bytes, more than the limit of {limit} ({variable})")
    limits.check_memory(size * limits.BYTES_PER_INPUT_BYTE, f"reading {source} ({size:,} bytes)",
                        hint="use a smaller file (or the trees form for a large forest schedule)")
    from synth.fileio import note_input

    note_input(path)  # an output may never be this file (synth.fileio.input_scope)
    try:
        with path.open("rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as error:
        raise InputError(source, "", f"cannot read file: {error.strerror or error}") from None
    if len(raw) > limit:
        raise InputError(source, "", f"file is more than the limit of {limit} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(source, "", f"not valid UTF-8 at byte {error.start}") from None
    if yaml_file:
        return parse_yaml(text, source)
    return parse_json(text, source)


def parse_json(text: str, source: str) -> Any:
    """Parse JSON text, refusing what no synth document contains: NaN/Infinity literals, numbers that
    overflow, integers of more than :data:`MAX_INTEGER_DIGITS` digits, duplicate keys, nesting deeper
    than :data:`MAX_DEPTH`, and unpaired surrogates (``"\\ud800"``, not Unicode text).

    Examples
    --------
    >>> parse_json('{"a": [1, 2.5]}', "x")
    {'a': [1, 2.5]}
    >>> try:
    ...     parse_json('{"a": 1, "a": 2}', "x.json")
    ... except InputError as error:
    ...     print(error)
    x.json: duplicate key 'a' (a key may appear once in an object)
    """

    def _reject_constant(name: str) -> None:
        raise InputError(source, "", f"{name} is not allowed in JSON input")

    try:
        data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        raise InputError(source, "", f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise InputError(source, "", "JSON nesting is too deep") from None
    except _DuplicateKey as error:
        raise InputError(source, "", f"duplicate key {error.key!r} (a key may appear once in an object)") from None
    except ValueError as error:  # Python's own limit on integer digits
        if "digits" in str(error):
            raise InputError(source, "", f"an integer has more than {MAX_INTEGER_DIGITS} digits") from None
        raise InputError(source, "", f"invalid JSON: {error}") from None
    check_document(data, source, shared=False, surrogates="\\u" in text, kind="JSON")
    return data


class _DuplicateKey(Exception):
    def __init__(self, key: Any) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[Any] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return result


def check_document(data: Any, source: str, shared: bool = True, surrogates: bool = True, kind: str = "YAML") -> None:
    """Refuse a parsed document with nesting deeper than :data:`MAX_DEPTH`, a number that is not finite,
    an integer of more than :data:`MAX_INTEGER_DIGITS` digits, an unpaired surrogate in a string, or (YAML
    aliases, ``shared``) aliases that add more than :data:`MAX_ALIAS_EXPANSION` values when expanded.

    The field is named as a dotted path (``links.0.bandwidth``). Cost: linear in the distinct values.
    """
    big = 10**MAX_INTEGER_DIGITS
    memo: dict[int, tuple[int, int]] = {}  # id -> (depth, expanded size), for shared (aliased) containers
    # iterative post-order walk: (value, path, depth, children-done)
    stack: list[tuple[Any, tuple[Any, ...], int, bool]] = [(data, (), 1, False)]
    sizes: list[int] = []
    depths: list[int] = []
    expanded = 0  # values that aliases add beyond the distinct ones
    while stack:
        value, path, depth, done = stack.pop()
        if isinstance(value, dict | list):
            key = id(value)
            if done:
                count = len(value)
                child_sizes = sizes[len(sizes) - count:] if count else []
                child_depths = depths[len(depths) - count:] if count else []
                del sizes[len(sizes) - count:]
                del depths[len(depths) - count:]
                size = 1 + sum(child_sizes)
                deepest = 1 + max(child_depths, default=0)
                if shared:
                    memo[key] = (deepest, size)
                sizes.append(size)
                depths.append(deepest)
                continue
            if depth > MAX_DEPTH:
                raise InputError(source, _dotted(path), f"{kind} nesting is too deep (more than {MAX_DEPTH} levels)")
            if shared and key in memo:
                sub_depth, size = memo[key]
                expanded += size
                if expanded > MAX_ALIAS_EXPANSION:
                    raise InputError(source, _dotted(path), f"YAML aliases expand the document by more than "
                                     f"{MAX_ALIAS_EXPANSION:,} values (an alias bomb?)")
                if depth + sub_depth - 1 > MAX_DEPTH:
                    raise InputError(source, _dotted(path), f"{kind} nesting is too deep (more than {MAX_DEPTH} "
                                     "levels)")
                sizes.append(size)
                depths.append(sub_depth)
                continue
            if isinstance(value, list) and value and _flat_and_clean(value, big, surrogates):
                # a list of plain integers or of strings (deps, paths): checked in bulk, C-level scans
                if shared:
                    memo[key] = (1, 1 + len(value))
                sizes.append(1 + len(value))
                depths.append(1)
                continue
            stack.append((value, path, depth, True))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for name, item in items:
                if isinstance(name, str) and surrogates:
                    _check_text(name, source, path)
                stack.append((item, (*path, name), depth + 1, False))
            continue
        if isinstance(value, float):
            if value != value or value in (math.inf, -math.inf):
                raise InputError(source, _dotted(path), f"expected a finite number, got {value!r} (out of range)")
        elif isinstance(value, int) and not isinstance(value, bool):
            if not -big < value < big:
                raise InputError(source, _dotted(path), f"an integer of more than {MAX_INTEGER_DIGITS} digits is "
                                 "not accepted")
        elif isinstance(value, str) and surrogates:
            _check_text(value, source, path)
        sizes.append(1)
        depths.append(0)


def _flat_and_clean(values: list[Any], big: int, surrogates: bool) -> bool:
    """True when ``values`` are all plain integers within ``big`` or all strings without unpaired surrogates
    (nothing for :func:`check_document` to refuse in them); False sends them through the item-by-item walk,
    which names the bad one."""
    first = type(values[0])
    if first is int:
        return all(type(v) is int for v in values) and -big < min(values) and max(values) < big
    if first is str:
        if not all(type(v) is str for v in values):
            return False
        if not surrogates:
            return True
        try:
            "".join(values).encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    return False


def _check_text(text: str, source: str, path: tuple[Any, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InputError(source, _dotted(path), f"the text holds an unpaired surrogate {text[error.start]!a}, which "
                         "is not Unicode text") from None


def _dotted(path: tuple[Any, ...]) -> str:
    if len(path) > 8:
        return _dotted(path[:6]) + "..."
    return ".".join(repr(part) if isinstance(part, str) and not part.isprintable() else str(part) for part in path)


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text safely (no python tags), refusing duplicate keys, integers of more than
    :data:`MAX_INTEGER_DIGITS` digits (hex and octal too) and everything :func:`check_document` refuses.

    Examples
    --------
    >>> parse_yaml("a: [1, 0x10]", "x")
    {'a': [1, 16]}
    """
    import yaml

    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506  (a SafeLoader subclass)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = " ".join(str(getattr(error, "problem", None) or error).split())  # one line, always
        if "nesting depth" in problem:  # PyYAML >= 6.0.3 has a depth limit of its own
            raise InputError(source, "", f"YAML nesting is too deep{where}") from None
        raise InputError(source, "", f"invalid YAML{where}: {problem}") from None
    except RecursionError:
        raise InputError(source, "", "YAML nesting is too deep") from None
    check_document(data, source, shared=True)
    return data


@functools.cache
def _strict_loader() -> Any:
    """A YAML SafeLoader (the C one when available) that refuses duplicate keys and huge integers."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[valid-type,misc]
        pass

    def mapping(loader: Any, node: Any, deep: bool = False) -> Any:
        loader.flatten_mapping(node)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: the constructor below reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (a key may appear once "
                                                        "in a mapping)", key_node.start_mark)
        return loader.construct_mapping(node, deep=deep)

    def integer(loader: Any, node: Any) -> Any:
        body = str(node.value).lstrip("+-").replace("_", "")
        if body[:2].lower() in ("0x", "0o", "0b"):
            body = body[2:]
        digits = sum(ch.isalnum() for ch in body)
        if digits > MAX_INTEGER_DIGITS:
            raise yaml.constructor.ConstructorError(None, None, f"an integer of {digits} digits is not accepted (at "
                                                    f"most {MAX_INTEGER_DIGITS})", node.start_mark)
        return yaml.SafeLoader.construct_yaml_int(loader, node)

    StrictLoader.add_constructor("tag:yaml.org,2002:map", mapping)
    StrictLoader.add_constructor("tag:yaml.org,2002:int", integer)
    return StrictLoader
