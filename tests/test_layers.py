"""The layer contract: which synth modules may import which, over every import (lazy ones inside functions too).

``make lint`` runs this file, so a new import against the arrows fails CI. Layers, lowest first (a layer may
import its own modules and the layers it lists in :data:`MAY_IMPORT`, nothing else):

- ``basics``: what every layer shares and nothing in synth it needs: errors, limits, units, the one
  topological order, files written atomically and documents read with limits;
- ``model``: the machine model and what is asked of it: collectives, the topology and its library, demands;
- ``routing``: what follows from the model: routes and relays, process groups, cuts and the bounds, jobs'
  joint bound;
- ``schedule``: the schedule IR that algorithms build and everything downstream reads;
- ``simulation``: the execution plan and the flow simulator (algorithms use it as their yardstick);
- ``algorithms`` and ``judges`` (evaluator, verifier, trace lowering, ASTRA-sim model, explanations):
  independent of each other: a judge never imports an algorithm, an algorithm never imports a judge;
- ``selection``: choosing an algorithm's variant for a size by simulating its candidates (above the algorithms,
  which only construct schedules; the exporters never choose);
- ``exporters``: files for other tools, which may consult the judges (verify, congestion);
- ``faces``: the CLI and the commands' engines (compare, tune, sweep, catalog, draw) and the package API.

docs/architecture.md lists every module under its layer; :func:`test_architecture_doc_matches_contract`
keeps the two in step. Wrong arrows that are still in the code are listed in :data:`EXCEPTIONS`, each with
why it is there; an exception that is no longer used fails too, so fixing one means deleting its line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "synth"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: Layer -> modules; a package name covers its submodules unless a longer name is listed elsewhere.
LAYERS: dict[str, tuple[str, ...]] = {
    "basics": ("synth.errors", "synth.limits", "synth.units", "synth.graphs", "synth.fileio", "synth.documents"),
    "model": ("synth.collectives", "synth.topology", "synth.library", "synth.demand"),
    "routing": ("synth.routing", "synth.groups", "synth.cuts", "synth.bounds", "synth.jobs"),
    "schedule": ("synth.schedule", "synth.trees", "synth.rank_deps"),
    "simulation": ("synth.plan", "synth.flow", "synth.flow_reference", "synth.flow_kernels", "synth.evaluate", "synth.trace",
                   "synth.astra", "synth.proto"),
    "algorithms": ("synth.algorithms",),
    "judges": ("synth.verify", "synth.verify_trees", "synth.explain"),
    "selection": ("synth.choose",),
    "exporters": ("synth.export",),
    "faces": ("synth", "synth.cli", "synth.compare", "synth.tune", "synth.sweep", "synth.catalog", "synth.draw"),
}

#: The three bottom layers, which every layer above may import.
BOTTOM = frozenset({"basics", "model", "routing"})

#: The allowed arrows: layer -> the layers its modules may import (besides its own).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "basics": frozenset(),
    "model": frozenset({"basics"}),
    "routing": frozenset({"basics", "model"}),
    "schedule": BOTTOM,
    "simulation": BOTTOM | {"schedule"},
    "algorithms": BOTTOM | {"schedule", "simulation"},
    "judges": BOTTOM | {"schedule", "simulation"},
    "selection": BOTTOM | {"schedule", "simulation", "algorithms", "judges"},
    "exporters": BOTTOM | {"schedule", "simulation", "judges"},
    "faces": frozenset(LAYERS) - {"faces"},
}

#: Wrong arrows still in the code, (importer, imported module) -> why it is not fixed yet.
EXCEPTIONS: dict[tuple[str, str], str] = {}

_ORDER = list(LAYERS)


def module_name(path: Path) -> str:
    """``synth/cli/basic.py`` -> ``synth.cli.basic``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of the synth package by dotted name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str | None:
    """The layer whose longest listed prefix matches ``module`` (None when no layer lists it)."""
    best: tuple[int, str] | None = None
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return None if best is None else best[1]


def imports_of(source: str, package: str, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported synth module, line) for every import in a module's ``source`` at any depth (functions,
    branches); ``package`` is the package relative imports start from.

    ``from synth.x import y`` counts as importing ``synth.x.y`` when that is a module, else ``synth.x``.
    """
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "synth")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "synth":
                continue
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                found.append((candidate if candidate in modules else source, node.lineno))
    return found


def wrong_arrows() -> tuple[list[str], set[tuple[str, str]]]:
    """Violations (as messages) and the exceptions that were used."""
    modules = all_modules()
    problems: list[str] = []
    used: set[tuple[str, str]] = set()
    for name, path in modules.items():
        source_layer = layer_of(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target, line in imports_of(path.read_text(encoding="utf-8"), package, modules):
            target_layer = layer_of(target)
            if source_layer is None or target_layer is None or target_layer == source_layer:
                continue
            if target_layer in MAY_IMPORT[source_layer]:
                continue
            if (name, target) in EXCEPTIONS:
                used.add((name, target))
                continue
            problems.append(f"{path.relative_to(ROOT)}:{line}: {name} ({source_layer}) imports {target} "
                            f"({target_layer}); {source_layer} may import only "
                            f"{', '.join(sorted(MAY_IMPORT[source_layer])) or 'its own layer'}")
    return problems, used


def test_every_module_has_a_layer() -> None:
    missing = [name for name in all_modules() if layer_of(name) is None]
    assert not missing, f"modules in no layer of tests/test_layers.py LAYERS: {missing}"


def test_contract_is_acyclic_and_ordered() -> None:
    # every allowed arrow points to a lower layer, so the layers can never import each other in a cycle
    for layer, allowed in MAY_IMPORT.items():
        assert all(_ORDER.index(other) < _ORDER.index(layer) for other in allowed), layer
    assert "algorithms" not in MAY_IMPORT["judges"] and "judges" not in MAY_IMPORT["algorithms"]


def test_no_wrong_arrows() -> None:
    problems, _ = wrong_arrows()
    assert not problems, "imports against the layer contract (tests/test_layers.py):\n" + "\n".join(problems)


def test_exceptions_are_still_needed() -> None:
    _, used = wrong_arrows()
    stale = sorted(set(EXCEPTIONS) - used)
    assert not stale, f"fixed arrows still listed in EXCEPTIONS (delete them): {stale}"


def test_checker_sees_lazy_and_relative_imports() -> None:
    source = ("from synth.errors import InputError\n"
              "def f():\n    from synth.algorithms import synthesize\n    import synth.evaluate\n"
              "    if True:\n        from . import flow\n        from .cli import common\n")
    found = {target for target, _ in imports_of(source, "synth", all_modules())}
    assert found == {"synth.errors", "synth.algorithms", "synth.evaluate", "synth.flow", "synth.cli.common"}
    assert layer_of("synth.cuts.allgather") == "routing" and layer_of("synth.algorithms.forest.packing") == "algorithms"
    assert layer_of("synth") == "faces"
    assert layer_of("synth.cli.basic") == "faces" and layer_of("synthetic") is None


def test_architecture_doc_matches_contract() -> None:
    """docs/architecture.md: a ``## <layer>`` heading per layer, in order, and every module on a line
    ``- `synth.x`: ...`` under its own layer's heading."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    headings = re.findall(r"^## (?:\d+\. )?`?(\w+)`?", text, flags=re.M)
    assert headings[: len(_ORDER)] == _ORDER, f"layer headings {headings} != {_ORDER}"
    listed: dict[str, str] = {}
    layer = None
    for line in text.splitlines():
        heading = re.match(r"^## (?:\d+\. )?`?(\w+)`?", line)
        if heading:
            layer = heading.group(1)
            continue
        entry = re.match(r"^- `(synth(?:\.\w+)*)`", line)
        if entry and layer in LAYERS:
            assert entry.group(1) not in listed, f"{entry.group(1)} listed twice"
            listed[entry.group(1)] = layer
    modules = all_modules()
    assert sorted(set(modules) - set(listed)) == [], "modules missing from docs/architecture.md"
    assert sorted(set(listed) - set(modules)) == [], "docs/architecture.md lists modules that do not exist"
    wrong = {name: (where, layer_of(name)) for name, where in listed.items() if where != layer_of(name)}
    assert not wrong, f"docs/architecture.md puts modules under other layers than the contract: {wrong}"


#: Functions may be this long (body lines, docstring excluded) unless their docstring says why they are longer.
LONGEST_FUNCTION = 80
LONG_REASON = "Longer than the house limit"


def test_long_functions_say_why():
    """No function body over ~80 lines without a reason in its docstring (the marker :data:`LONG_REASON`)."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "proto" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            docstring = ast.get_docstring(node) or ""
            body = node.body[1:] if docstring and len(node.body) > 1 else node.body
            lines = (node.end_lineno or node.lineno) - body[0].lineno + 1
            if lines > LONGEST_FUNCTION and LONG_REASON not in docstring.replace("\n", " "):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not offenders, "functions over the house limit without a reason in their docstring:\n" + "\n".join(offenders)


def test_the_command_line_imports_no_numerical_library_before_a_command_runs() -> None:
    """`synth --help` and every command's start stay fast: the CLI module loads typer and rich only; numpy,
    networkx, scipy, OR-Tools, pandas, Dask, matplotlib, protobuf and numba load when a command needs them."""
    import subprocess
    import sys

    heavy = ("numpy", "networkx", "scipy", "ortools", "pandas", "dask", "matplotlib", "google.protobuf", "numba")
    probe = f"import sys, synth.cli; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "", f"importing synth.cli loads {loaded}"


#: The modules that define the schedule's two forms; everything else uses the protocol both offer.
FORM_MODULES = ("synth/schedule.py", "synth/trees.py")


def test_consumers_never_ask_which_form_a_schedule_is_in() -> None:
    """No ``isinstance(x, Schedule)`` or ``isinstance(x, TreeSchedule)`` outside the two form modules:
    consumers take :class:`synth.schedule.ScheduleForm` and call what both forms offer (``held``,
    ``expand``, ``iter_transfers``, ``link_chunks``, ...); judges pick the method per form by dispatch."""
    forms = {"Schedule", "TreeSchedule"}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        if relative in FORM_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                    and len(node.args) == 2):
                continue
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            names = {kind.id if isinstance(kind, ast.Name) else kind.attr if isinstance(kind, ast.Attribute) else ""
                     for kind in kinds}
            if names & forms:
                offenders.append(f"{relative}:{node.lineno}")
    assert not offenders, "isinstance on the schedule's form outside its modules:\n" + "\n".join(offenders)
