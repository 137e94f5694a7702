"""The notebooks in notebooks/ run top to bottom; each checks its own results with assert statements.

A notebook that needs a piece still being written (an algorithm, synth.bounds, an exporter) is skipped
with a reason naming what is missing.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

#: What each notebook needs beyond the core: "module" or "algorithm:name".
NEEDS: dict[str, list[str]] = {
    "01_quickstart.ipynb": [],
    "02_optimal_trees.ipynb": ["synth.bounds", "algorithm:forest", "algorithm:tree"],
    "03_alltoall_and_latency.ipynb": ["algorithm:mcf", "algorithm:milp", "algorithm:bruck", "algorithm:forest"],
    "04_design_space.ipynb": ["synth.bounds"],
    "05_to_astrasim_and_msccl.ipynb": ["synth.export.msccl", "synth.export.chakra"],
}
#: Largest stored notebook file: outputs are stored cleared.
MAX_NOTEBOOK_BYTES = 40_000


def missing(need: str) -> str | None:
    """Why ``need`` is not available, or None when it is."""
    if need.startswith("algorithm:"):
        from synth.algorithms import REGISTRY

        name = need.split(":", 1)[1]
        if name not in REGISTRY:
            return f"algorithm {name!r} is not registered yet"
        try:
            REGISTRY[name].load()
        except (ImportError, AttributeError) as error:
            return f"algorithm {name!r} does not load yet ({error})"
        return None
    try:
        importlib.import_module(need)
    except ImportError as error:
        return f"module {need} is not available yet ({error})"
    return None


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_every_planned_notebook_is_known():
    names = {p.name for p in notebook_paths()}
    assert "01_quickstart.ipynb" in names
    assert names <= set(NEEDS), f"add the new notebook's needs to NEEDS: {names - set(NEEDS)}"


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_notebook_is_stored_small_and_cleared(path):
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES
    data = json.loads(path.read_text(encoding="utf-8"))
    for cell in data["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{path.name}: clear the outputs"


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is in the dev extra")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is in the dev extra")
    pytest.importorskip("ipykernel", reason="ipykernel is in the dev extra")
    reasons = [why for need in NEEDS.get(path.name, []) if (why := missing(need))]
    if reasons:
        pytest.skip(f"{path.name} needs: " + "; ".join(reasons))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
              if output.get("output_type") == "error"]
    assert not errors
    images = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
              if "image/png" in output.get("data", {})]
    assert images, f"{path.name} should draw at least one picture"
