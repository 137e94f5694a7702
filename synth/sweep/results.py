"""The results file: one Parquet row per (point, size), its columns and statuses, read and written
atomically under a lock."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synth.errors import InputError, SynthError

if TYPE_CHECKING:
    pass


OK = "ok"
NOT_APPLICABLE = "not-applicable"
ERROR = "error"

#: Result columns before the grid parameters, then after them, in file order.
LEADING_COLUMNS = ("point_id", "topology")
TRAILING_COLUMNS = ("num_ranks", "collective", "algorithm", "model", "size", "status", "bound_algbw_GBps",
                    "time_s", "algbw_GBps", "busbw_GBps", "percent_of_bound", "protocol", "slices",
                    "slice_bytes", "window", "congestion_time_s", "synthesis_s", "error")
RESERVED_COLUMNS = frozenset(LEADING_COLUMNS + TRAILING_COLUMNS)
#: Changes whenever the evaluator's times or the bounds rows are measured against change, so rows of an older
#: evaluator are never resumed (3: the allreduce bound gained the gossip argument among groups of gpus).
EVALUATOR_VERSION = 3
_INT_COLUMNS = ("num_ranks", "size", "slices", "window")
_FLOAT_COLUMNS = ("bound_algbw_GBps", "time_s", "algbw_GBps", "busbw_GBps", "percent_of_bound", "slice_bytes",
                  "congestion_time_s", "synthesis_s")

Row = dict[str, Any]

def error_text(error: BaseException) -> str:
    """The one-line reason an ``error`` column stores: a SynthError's message, else the exception's type and
    its first line."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, SynthError):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def read_results(path: str | Path) -> list[Row]:
    """The rows of a results file as dicts (empty when the file does not exist)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        return []
    try:
        table = pq.read_table(path)
    except Exception as error:
        raise InputError(str(path), "", f"exists but is not a readable Parquet file ({error_text(error)}); "
                         "choose another output or remove it") from None
    missing = {"point_id", "size", "status"} - set(table.column_names)
    if missing:
        raise InputError(str(path), "", f"exists but is not a synth sweep result (no {', '.join(sorted(missing))} "
                         "column); choose another output")
    import pyarrow as pa

    expected = {"point_id": pa.string(), "size": pa.int64(), "status": pa.string()}
    for name, kind in expected.items():
        if table.schema.field(name).type != kind:
            raise InputError(str(path), name, f"the column has type {table.schema.field(name).type}, not {kind}: not "
                             "a synth sweep result (or a damaged one); choose another output")
    rows = table.to_pylist()
    for index, row in enumerate(rows):
        if row["point_id"] is None or row["size"] is None or row["status"] not in (OK, NOT_APPLICABLE, ERROR):
            raise InputError(str(path), f"row {index}", "has no point_id or size, or an unknown status: a damaged "
                             "sweep result; choose another output")
    return rows


def _column_type(values: Iterable[Any]) -> Any:
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if not present:
        return pa.string()
    if all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pa.float64()
    return pa.string()


def results_table(rows: Sequence[dict[str, Any]], parameters: Sequence[str] = ()) -> Any:
    """A :class:`pyarrow.Table` of result rows with a fixed column order and types.

    Parameter columns come from ``parameters`` first, then any other non-result column found in the rows
    (rows kept from an earlier spec), each typed from its values: bool, int64, float64 or string.
    """
    import pyarrow as pa

    extra = [key for row in rows for key in row if key not in RESERVED_COLUMNS]
    param_columns = list(dict.fromkeys([*parameters, *extra]))
    columns: dict[str, Any] = {}
    fields = []
    for name in [*LEADING_COLUMNS, *param_columns, *TRAILING_COLUMNS]:
        values = [row.get(name) for row in rows]
        if name in _INT_COLUMNS:
            kind = pa.int64()
        elif name in _FLOAT_COLUMNS:
            kind = pa.float64()
        elif name in RESERVED_COLUMNS:
            kind = pa.string()
        else:
            kind = _column_type(values)
        if kind == pa.string():
            values = [None if v is None else str(v) for v in values]
        elif kind == pa.float64():
            values = [None if v is None else float(v) for v in values]
        columns[name] = values
        fields.append(pa.field(name, kind))
    return pa.table(columns, schema=pa.schema(fields))


def write_results(path: str | Path, rows: Sequence[dict[str, Any]], parameters: Sequence[str] = ()) -> None:
    """Write result rows to ``path`` as Parquet, atomically (temp file, fsync, rename)."""
    import pyarrow.parquet as pq

    from synth.fileio import atomic_write_bytes

    buffer = io.BytesIO()
    pq.write_table(results_table(rows, parameters), buffer, compression="zstd")
    atomic_write_bytes(path, buffer.getvalue(), immediate=True)  # a sweep keeps what finished, even if stopped


@contextlib.contextmanager
def output_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside the output, so two sweeps never write one file; the OS drops it when
    the process dies, even on SIGKILL. The lock file (``.NAME.lock``, empty) is created exclusively and
    removed at the end. One that exists already is used as it is, never written; it is removed at the end
    only if it is empty (what a killed sweep leaves), so a file of the user's that happens to have the name
    keeps its bytes. Anything but a regular file under that name is refused."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(str(path), "", f"folder {folder} does not exist")
    lock_path = folder / f".{path.name}.lock"
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        try:
            fd, created = os.open(lock_path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            fd, created = os.open(lock_path, flags), False
    except OSError as error:
        raise InputError(str(lock_path), "", f"cannot use the sweep's lock file: {error.strerror or error}") from None
    locked = False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(str(lock_path), "", "the sweep's lock file is not a regular file; remove it")
        created = created or info.st_size == 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InputError(str(path), "", "another sweep is writing this output right now") from None
        locked = True
        yield
    finally:
        with contextlib.suppress(OSError):
            if locked and created and os.lstat(lock_path).st_size == 0:
                lock_path.unlink()  # while the lock is still held
        os.close(fd)


