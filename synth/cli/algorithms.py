"""``synth algorithms``: every registered algorithm, the collectives it does, its options and what it is."""

from __future__ import annotations

import collections.abc
import inspect
import typing
from typing import TYPE_CHECKING, Annotated, Any

import typer

from synth.cli.common import CSV_OPTION, JSON_OPTION, console, print_json, table
from synth.collectives import Kind, parse_kind

if TYPE_CHECKING:  # synth.algorithms loads the model (networkx): only when the command runs
    from synth.algorithms import Algorithm

#: Parameters every algorithm function takes positionally; the rest are its options (``-O key=value``).
_POSITIONAL = ("topology", "kind")


def register(app: typer.Typer) -> None:
    """Add ``algorithms`` to ``app``."""
    app.command("algorithms")(algorithms)


def algorithm_options(entry: Algorithm) -> list[tuple[str, Any]]:
    """(name, default) of every option the algorithm's function takes from the command line, in signature
    order, then those its size choice takes (:func:`synth.choose.chooser_options`: forest's ``size``); the
    default is None where the algorithm picks the value itself (such as ``chunks``). Callback parameters
    (``progress``) are Python-only and left out.

    Examples
    --------
    >>> from synth.algorithms import REGISTRY
    >>> algorithm_options(REGISTRY["direct"])
    [('chunks', None), ('root', None), ('demand', None), ('shards', None)]
    """
    from synth.choose import chooser_options

    function = entry.load()
    hints = typing.get_type_hints(function)
    own = [(p.name, None if p.default is inspect.Parameter.empty else p.default)
           for p in inspect.signature(function).parameters.values()
           if p.name not in _POSITIONAL and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
           and not _is_callback(hints.get(p.name))]
    names = {name for name, _ in own}
    return own + [(name, default) for name, default in chooser_options(entry.name).items()
                  if name not in names and name != "progress"]


def _is_callback(hint: Any) -> bool:
    """True for ``Callable[...]`` and ``Callable[...] | None``."""
    return typing.get_origin(hint) is collections.abc.Callable or any(
        typing.get_origin(arg) is collections.abc.Callable for arg in typing.get_args(hint))


def _option_text(name: str, default: Any) -> str:
    return name if default is None else f"{name}={default}"


def _collectives(entry: Algorithm) -> list[str]:
    return [kind.value for kind in Kind if kind in entry.collectives]


def algorithms(
    collective: Annotated[str | None, typer.Option(
        "--collective", "-c", help="only the algorithms that do this collective")] = None,
    as_json: bool = JSON_OPTION,
    as_csv: bool = CSV_OPTION,
) -> None:
    """The algorithms ``synth generate -a NAME`` accepts: the collectives each does, its options
    (``-O key=value``; a bare name means the algorithm picks the value) and what it is."""
    from synth.algorithms import REGISTRY

    kind = None if collective is None else parse_kind(collective, field="--collective")
    entries = [entry for entry in REGISTRY.values() if kind is None or kind in entry.collectives]
    if as_json:
        print_json([{"name": entry.name, "collectives": _collectives(entry),
                     "options": {name: default for name, default in algorithm_options(entry)},
                     "description": entry.summary} for entry in entries])
        return
    rows = [[entry.name, ", ".join(_collectives(entry)),
             ", ".join(_option_text(name, default) for name, default in algorithm_options(entry)), entry.summary]
            for entry in entries]
    title = "algorithms" if kind is None else f"algorithms for {kind.value}"
    console.print(table(title, ["algorithm", "collectives", "options (-O key=value)", "description"], rows))
