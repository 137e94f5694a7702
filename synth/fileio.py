"""Atomic output: write to a temporary file beside the target, then rename, so no partial file is left."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from synth.errors import InputError


def _default_mode() -> int:
    """The permissions a plain ``open()`` would give a new file (0666 minus the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, rename)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(str(target), "", f"folder {folder} does not exist")
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, _default_mode())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a temporary folder; on success its files are moved into ``path`` (created if missing),
    on any error or interrupt the temporary folder is removed and ``path`` is left as it was."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(str(target), "", f"folder {parent} does not exist")
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent))
    try:
        yield temp
        target.mkdir(exist_ok=True)
        for item in sorted(temp.rglob("*")):
            if item.is_file():
                os.chmod(item, _default_mode())
        for item in sorted(temp.iterdir()):
            os.replace(item, target / item.name)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
