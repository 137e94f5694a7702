"""The benchmarks stay runnable: every ``bench/bench_*.py`` module imports against the current package and
offers the ``run(quick)`` entry ``python -m bench`` calls (the benchmarks themselves take minutes and are
run by ``make bench``, not by the tests; their import-time names are what a refactor breaks)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(path.stem for path in (ROOT / "bench").glob("bench_*.py"))


@pytest.mark.parametrize("name", MODULES)
def test_every_benchmark_imports_and_has_its_entry(name, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module(f"bench.{name}")
    assert inspect.signature(module.run).parameters.keys() == {"quick"}
    source = inspect.getsource(module)
    for line in source.splitlines():  # names imported inside functions are resolved at run time: check them
        text = line.strip()
        if text.startswith("from synth") and " import " in text and not text.endswith("("):
            package, names = text[5:].split(" import ", 1)
            imported = importlib.import_module(package.strip())
            for item in names.split("#")[0].split(","):
                attribute = item.strip().split(" as ")[0]
                submodule = hasattr(imported, "__path__") and \
                    importlib.util.find_spec(f"{package.strip()}.{attribute}") is not None
                assert not attribute or hasattr(imported, attribute) or submodule, \
                    f"bench/{name}.py: {package.strip()} has no {attribute}"
