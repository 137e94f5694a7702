"""The notebooks in notebooks/ run top to bottom; each checks its own results with assert statements, and
they are stored executed (so a code-hosting page shows their tables and plots): the stored outputs must be
what running them prints now. Text outputs must match exactly; pictures loosely (the same number per cell,
each a PNG of about the same size).

After changing a notebook or the code it shows, store fresh outputs with ``python -m tests.test_notebooks``.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

#: Largest stored notebook file, outputs (pictures included) and all.
MAX_NOTEBOOK_BYTES = 600_000
#: Pictures may differ this much in width or height (pixels) from the stored ones (fonts, library versions).
IMAGE_SLACK = 0.1


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def execute(path: Path, folder: Path) -> Any:
    """Run a notebook top to bottom in ``folder``; returns the executed notebook (nbformat)."""
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", record_timing=False,
                                     resources={"metadata": {"path": str(folder)}})
    client.execute()
    return notebook


def _png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", raw[16:24])


def outputs(notebook: Any) -> list[list[tuple[str, str]]]:
    """Per code cell, what it showed: ("stream:NAME", text), ("text", text/plain), ("png", "WxH")."""
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        shown: list[tuple[str, str]] = []
        for output in cell.outputs:
            if output.output_type == "stream":  # one stream, however the kernel happened to flush it
                kind = f"stream:{output.name}"
                if shown and shown[-1][0] == kind:
                    shown[-1] = (kind, shown[-1][1] + output.text)
                else:
                    shown.append((kind, output.text))
            elif output.output_type == "error":
                shown.append(("error", f"{output.ename}: {output.evalue}"))
            else:
                data = output.get("data", {})
                if "text/plain" in data:
                    shown.append(("text", data["text/plain"]))
                if "image/png" in data:
                    width, height = _png_size(data["image/png"])
                    shown.append(("png", f"{width}x{height}"))
        cells.append(shown)
    return cells


def _same(stored: list[list[tuple[str, str]]], fresh: list[list[tuple[str, str]]], name: str) -> None:
    assert len(stored) == len(fresh), f"{name}: a different number of code cells"
    for index, (before, now) in enumerate(zip(stored, fresh, strict=True)):
        where = f"{name}, code cell {index + 1}"
        assert [kind for kind, _ in before] == [kind for kind, _ in now], f"{where}: different outputs; " \
            "store fresh ones with `python -m tests.test_notebooks`"
        for (kind, old), (_, new) in zip(before, now, strict=True):
            if kind == "png":
                (w0, h0), (w1, h1) = (tuple(map(int, v.split("x"))) for v in (old, new))
                assert abs(w0 - w1) <= IMAGE_SLACK * w0 and abs(h0 - h1) <= IMAGE_SLACK * h0, f"{where}: {old} -> {new}"
            else:
                assert old == new, f"{where}: the stored output is not current (run `python -m tests.test_notebooks`):" \
                    f"\n--- stored\n{old}\n--- now\n{new}"


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_notebook_is_stored_small_and_executed(path):
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES
    data = json.loads(path.read_text(encoding="utf-8"))
    code = [cell for cell in data["cells"] if cell["cell_type"] == "code"]
    assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1)), f"{path.name}: run it in order"
    assert not any(o.get("output_type") == "error" for cell in code for o in cell["outputs"])
    first_picture = next(i for i, cell in enumerate(code) if any("image/png" in o.get("data", {}) for o in cell["outputs"]))
    assert first_picture <= 2, f"{path.name}: show a picture on the first screen (within the first three code cells)"


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_notebook_runs_and_its_stored_outputs_are_current(path, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is in the dev extra")
    pytest.importorskip("nbclient", reason="nbclient is in the dev extra")
    pytest.importorskip("ipykernel", reason="ipykernel is in the dev extra")
    notebook = execute(path, tmp_path)
    fresh = outputs(notebook)
    assert not any(kind == "error" for cell in fresh for kind, _ in cell), fresh
    assert any(kind == "png" for cell in fresh for kind, _ in cell), f"{path.name} should draw at least one picture"
    _same(outputs(nbformat.read(path, as_version=4)), fresh, path.name)


def test_a_stale_output_is_caught():
    stored = [[("stream:stdout", "a\n"), ("png", "600x400")]]
    _same(stored, [[("stream:stdout", "a\n"), ("png", "610x395")]], "x")
    with pytest.raises(AssertionError, match="not current"):
        _same(stored, [[("stream:stdout", "b\n"), ("png", "600x400")]], "x")
    with pytest.raises(AssertionError):
        _same(stored, [[("stream:stdout", "a\n"), ("png", "900x400")]], "x")


def store_outputs(paths: list[Path]) -> None:
    """Execute each notebook and store it with its outputs (what ``python -m tests.test_notebooks`` does)."""
    import tempfile

    import nbformat

    for path in paths:
        with tempfile.TemporaryDirectory() as folder:
            notebook = execute(path, Path(folder))
        nbformat.write(notebook, path)
        print(f"stored {path.name}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    import sys

    store_outputs([Path(a) for a in sys.argv[1:]] or notebook_paths())
