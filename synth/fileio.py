"""The one output layer: every file and folder synth writes goes through here.

Rules (the README's reliability section lists them for users):

- **Check first.** :func:`check_output_file` and :func:`check_output_folder` refuse, before any work starts,
  a destination that is empty or too long a name, in a folder that does not exist or cannot be written,
  that exists as the wrong kind (a folder where a file is expected, a device, a pipe, a socket, a symbolic
  link), or that is one of the command's inputs. Commands call them on their arguments at once; the writers
  call them again just before writing.
- **Never a partial output.** A file is written to an unnamed temporary file in the target's folder
  (``O_TMPFILE``: the kernel removes it if the process dies, even by SIGKILL), fsynced, given a name and
  renamed over the target in one step, and the folder is fsynced. Where ``O_TMPFILE`` is not available the
  temporary file has a name (``.NAME.PID-XXXXXXXX.tmp``). The old file is never removed or truncated before
  the new one is complete.
- **Folders are replaced whole.** A folder is built as a hidden sibling, fsynced, then exchanged with the old
  one in one step (``renameat2(RENAME_EXCHANGE)``; elsewhere two renames) and the old one removed, so an
  output folder never mixes files of two runs. A folder that is not empty and does not look like an earlier
  output of the same kind is never replaced.
- **Interrupts.** Ctrl-C or SIGTERM (the CLI turns it into the same path) removes the temporary file or
  folder; signals are held off while cleaning up or committing, so a second signal changes nothing. After a
  SIGKILL the old output is intact or the new one complete; a named temporary left by the killed process is
  removed by the next write to the same folder (its process id is checked first).
- **Errors from the OS** become one :class:`~synth.errors.InputError` line naming the path and the cause
  (``No space left on device``, ``Permission denied``...).

Examples
--------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> atomic_write_text(folder / "out.txt", "hello")
>>> (folder / "out.txt").read_text()
'hello'
>>> try:
...     check_output_file(folder)
... except InputError as error:
...     print(error.problem)
is a folder; expected a file name
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from synth.errors import InputError

#: Longest file name (one path component) accepted, in bytes (Linux NAME_MAX).
NAME_MAX = 255
#: Longest path accepted, in bytes (Linux PATH_MAX).
PATH_MAX = 4096

_TEMP_SUFFIX = ".tmp"
_TEMP_PATTERN = re.compile(r"^\.(?P<stem>.+)\.(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_RENAME_EXCHANGE = 2

PathLike = str | os.PathLike[str]


# ------------------------------------------------------------------------------------------- checks
def _text(path: PathLike) -> str:
    return os.fspath(path)


def _os_problem(error: OSError) -> str:
    return error.strerror or str(error)


def _check_name(text: str, option: str, what: str) -> Path:
    """Refuse names no file system accepts: empty, NUL, a component or the path too long, not encodable."""
    if not text.strip():
        raise InputError("", option, f"expected a {what} name, got {text!r}")
    if "\0" in text:
        raise InputError(repr(text), option, "a file name cannot contain a NUL character")
    try:
        encoded = os.fsencode(text)
    except UnicodeError:
        raise InputError(repr(text), option, "the name is not valid in this file system's encoding") from None
    if len(encoded) > PATH_MAX:
        raise InputError(text[:60] + "...", option, f"the path is {len(encoded)} bytes, longer than the limit "
                         f"of {PATH_MAX}")
    for part in Path(text).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise InputError(text if len(text) < 80 else text[:60] + "...", option,
                             f"a name in the path is {size} bytes, longer than the file system's limit of {NAME_MAX}")
    return Path(text)


def _check_parent(target: Path, option: str) -> Path:
    folder = target.parent if str(target.parent) else Path(".")
    try:
        info = os.stat(folder)
    except FileNotFoundError:
        raise InputError(str(target), option, f"folder {folder} does not exist") from None
    except OSError as error:
        raise InputError(str(target), option, f"cannot use folder {folder}: {_os_problem(error)}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise InputError(str(target), option, f"{folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(str(target), option, f"cannot write in folder {folder}: permission denied")
    return folder


def _same_file(target: Path, inputs: Iterable[PathLike]) -> PathLike | None:
    for item in inputs:
        if item is None:
            continue
        try:
            if os.path.samefile(target, item):
                return item
        except (OSError, ValueError):
            continue
    return None


def check_output_file(path: PathLike, *, option: str = "--output", inputs: Iterable[PathLike] = (),
                      suffixes: Iterable[str] | None = None) -> Path:
    """Refuse a file destination that cannot or must not be written; return it as a Path.

    Parameters
    ----------
    path : str or PathLike
        The file to write.
    option : str
        The command-line option that named it (for the message).
    inputs : iterable of paths
        The command's input files: the output may not be any of them.
    suffixes : iterable of str, optional
        Accepted file name endings (lower case, with the dot).

    Examples
    --------
    >>> check_output_file("schedule.json").name
    'schedule.json'
    """
    text = _text(path)
    target = _check_name(text, option, "file")
    if text.endswith(("/", os.sep)) or target.name in ("", ".", ".."):
        raise InputError(text, option, "names a folder; expected a file name")
    _check_parent(target, option)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as error:
        raise InputError(text, option, f"cannot use this path: {_os_problem(error)}") from None
    if info is not None:
        _check_existing_file(target, text, option, info, inputs)
    if suffixes is not None:
        allowed = tuple(suffixes)
        if target.suffix.lower() not in allowed:
            raise InputError(text, option, f"expected a file name ending in {' or '.join(allowed)}")
    return target


def _check_existing_file(target: Path, text: str, option: str, info: os.stat_result,
                         inputs: Iterable[PathLike]) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise InputError(text, option, "is a symbolic link; synth replaces only regular files (name the file "
                         "it points to)")
    if stat.S_ISDIR(info.st_mode):
        raise InputError(text, option, "is a folder; expected a file name")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(text, option, "is not a regular file (a device, pipe or socket); synth replaces only "
                         "regular files")
    same = _same_file(target, inputs)
    if same is not None:
        raise InputError(text, option, f"is the input file {os.fspath(same)}; write the output to another file")


def check_output_folder(path: PathLike, *, option: str = "--output", inputs: Iterable[PathLike] = (),
                        signature: Iterable[str] = (), kind: str = "synth output") -> Path:
    """Refuse a folder destination that cannot or must not be replaced; return it as a Path.

    An existing folder is replaced only when it is empty or holds every file of ``signature`` (the files
    that mark an earlier output of the same ``kind``); it may not contain any of ``inputs``.

    Examples
    --------
    >>> check_output_folder("traces", signature=["run_astrasim.sh"]).name
    'traces'
    """
    text = _text(path)
    target = _check_name(text.rstrip("/") or text, option, "folder")
    if target.name in ("", ".", ".."):
        raise InputError(text, option, "expected the name of a folder to create or replace, not '.' or '..'")
    _check_parent(target, option)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as error:
        raise InputError(text, option, f"cannot use this path: {_os_problem(error)}") from None
    if stat.S_ISLNK(info.st_mode):
        raise InputError(text, option, "is a symbolic link; name the folder itself")
    if not stat.S_ISDIR(info.st_mode):
        raise InputError(text, option, "exists and is not a folder; name a new folder or an earlier "
                         f"{kind}")
    for item in inputs:
        if item is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            resolved = Path(item).resolve()
            if resolved == target.resolve() or target.resolve() in resolved.parents:
                raise InputError(text, option, f"contains the input {os.fspath(item)}; replacing the folder would "
                                 "delete it")
    try:
        entries = {entry.name for entry in os.scandir(target)}
    except OSError as error:
        raise InputError(text, option, f"cannot read this folder: {_os_problem(error)}") from None
    marks = set(signature)
    if entries and not (marks and marks <= entries):
        shown = ", ".join(sorted(marks)) or "its files"
        raise InputError(text, option, f"folder exists, is not empty and is not an earlier {kind} (no {shown}); "
                         "synth replaces an output folder whole, so name a new or empty folder")
    return target


# ------------------------------------------------------------------------------------- signals
_HELD = [0]
_PENDING: list[int] = []
_SWALLOWED = [0]


def swallowed_interrupt(hook_args: Any) -> bool:
    """For :data:`sys.unraisablehook`: True (and the interrupt is remembered, not printed) when the exception
    is a :class:`KeyboardInterrupt` that Python could not raise.

    A signal handler runs between any two bytecodes, so the :class:`KeyboardInterrupt` it raises can land in a
    ``__del__`` or a weakref callback (pyarrow's ``ParquetWriter.__del__`` is one), where Python prints
    "Exception ignored" and drops it; :func:`check_interrupted` raises it again at the next safe point.
    """
    if isinstance(getattr(hook_args, "exc_value", None), KeyboardInterrupt) or (
            getattr(hook_args, "exc_type", None) is not None and issubclass(hook_args.exc_type, KeyboardInterrupt)):
        _SWALLOWED[0] += 1
        return True
    return False


def check_interrupted() -> None:
    """Raise :class:`KeyboardInterrupt` if an interrupt was swallowed (see :func:`swallowed_interrupt`) and
    no output is being committed; loops over long work call it once per step."""
    if _SWALLOWED[0] and not _HELD[0]:
        _SWALLOWED[0] = 0
        raise KeyboardInterrupt


def defer_interrupt(signum: int) -> bool:
    """For a signal handler: True (and the signal is remembered) while an output is being committed or
    cleaned up; :func:`signals_held` raises :class:`KeyboardInterrupt` for it when that step is over.

    Python runs signal handlers in the main thread between bytecodes even when the signal reached another
    thread, so masking the signal in the main thread alone does not hold it off; this flag does.
    """
    if _HELD[0]:
        _PENDING.append(signum)
        return True
    return False


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold off SIGINT and SIGTERM while committing or cleaning up an output: a signal that arrives meanwhile
    is raised as :class:`KeyboardInterrupt` when the step is over (never in the middle of it)."""
    masked = threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_sigmask")
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if masked else None
    _HELD[0] += 1
    try:
        yield
    finally:
        _HELD[0] -= 1
        if previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if not _HELD[0] and _PENDING:
            _PENDING.clear()
            raise KeyboardInterrupt


# ------------------------------------------------------------------------------------ temp names
def _temp_name(target: Path) -> Path:
    """A hidden sibling name for ``target`` that records this process id (stale ones are recognisable)."""
    token = secrets.token_hex(4)
    stem = target.name
    name = f".{stem}.{os.getpid()}-{token}{_TEMP_SUFFIX}"
    if len(os.fsencode(name)) > NAME_MAX:
        stem = "synth-" + hashlib.sha256(os.fsencode(target.name)).hexdigest()[:16]
        name = f".{stem}.{os.getpid()}-{token}{_TEMP_SUFFIX}"
    return target.with_name(name)


def _temp_stem(target: Path) -> tuple[str, str]:
    hashed = "synth-" + hashlib.sha256(os.fsencode(target.name)).hexdigest()[:16]
    return target.name, hashed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def remove_stale_temporaries(target: PathLike) -> list[Path]:
    """Remove temporaries that a killed synth process left beside ``target``; returns what was removed.

    Only names synth makes for this target (``.NAME.PID-XXXXXXXX.tmp``) whose process is gone are removed.
    """
    path = Path(target)
    folder = path.parent if str(path.parent) else Path(".")
    stems = _temp_stem(path)
    removed: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = _TEMP_PATTERN.match(name)
        if not match or match.group("stem") not in stems or _alive(int(match.group("pid"))):
            continue
        stale = folder / name
        with signals_held():
            try:
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink()
                removed.append(stale)
            except OSError:
                pass
    return removed


def _default_mode() -> int:
    """The permissions a plain ``open()`` would give a new file (0666 minus the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view[: 1 << 24])
        view = view[written:]


_LIBC: ctypes.CDLL | None | bool = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else False
        except OSError:
            _LIBC = False
    return _LIBC if isinstance(_LIBC, ctypes.CDLL) else None


def _link_unnamed(fd: int, name: Path) -> bool:
    """Give the ``O_TMPFILE`` file ``fd`` the name ``name``; False when this system cannot."""
    libc = _libc()
    if libc is not None and hasattr(libc, "linkat"):
        if libc.linkat(fd, b"", _AT_FDCWD, os.fsencode(name), _AT_EMPTY_PATH) == 0:
            return True
    try:
        os.link(f"/proc/self/fd/{fd}", name, follow_symlinks=True)
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------- files
def atomic_write_bytes(path: PathLike, data: bytes, *, option: str = "--output",
                       inputs: Iterable[PathLike] = ()) -> None:
    """Write ``data`` to ``path`` atomically: check the destination, write a temporary, fsync, rename.

    Raises :class:`InputError` naming the path and the cause when the destination is refused or the
    operating system fails (disk full, permission denied...); the old file is then untouched.
    """
    _atomic_write(path, lambda fd: _write_all(fd, data), option, inputs)


def atomic_write_parts(path: PathLike, parts: Callable[[], Iterable[str]], *, option: str = "--output",
                       inputs: Iterable[PathLike] = ()) -> None:
    """Write the UTF-8 text that ``parts()`` yields, part after part, to ``path`` atomically (see
    :func:`atomic_write_bytes`): a large text never exists whole in memory. ``parts`` may be called twice
    (when a temporary must be written again under a name) and must yield the same text each time."""
    def write(fd: int) -> None:
        for part in parts():
            _write_all(fd, part.encode("utf-8", errors="surrogateescape"))

    _atomic_write(path, write, option, inputs)


def _atomic_write(path: PathLike, write: Callable[[int], None], option: str, inputs: Iterable[PathLike]) -> None:
    target = check_output_file(path, option=option, inputs=inputs)
    folder = target.parent if str(target.parent) else Path(".")
    remove_stale_temporaries(target)
    mode = _default_mode()
    temp: Path | None = None
    fd = -1
    try:
        try:
            fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, mode)  # type: ignore[attr-defined,unused-ignore]  # O_TMPFILE is Linux only
        except (AttributeError, OSError):
            fd = -1
        if fd >= 0:
            write(fd)
            os.fsync(fd)
            name = _temp_name(target)
            with signals_held():
                if _link_unnamed(fd, name):
                    temp = name
            if temp is None:  # linking is not allowed here: write a named temporary instead
                os.close(fd)
                fd = -1
        if temp is None:
            name = _temp_name(target)
            with signals_held():
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
                temp = name
            write(fd)
            os.fsync(fd)
        os.fchmod(fd, mode)
        os.close(fd)
        fd = -1
        with signals_held():
            os.replace(temp, target)
            temp = None
        _fsync_folder(folder)
    except BaseException as error:
        with signals_held():
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
        if isinstance(error, OSError):
            raise InputError(str(target), "", f"cannot write: {_os_problem(error)}") from None
        raise


def atomic_write_text(path: PathLike, text: str, *, option: str = "--output",
                      inputs: Iterable[PathLike] = ()) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8", errors="surrogateescape"), option=option, inputs=inputs)


# -------------------------------------------------------------------------------------- folders
def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2``); False when this system cannot."""
    libc = _libc()
    if libc is None or not hasattr(libc, "renameat2"):
        return False
    result = libc.renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EXDEV, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _fsync_tree(root: Path, mode: int) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            file = Path(folder) / name
            if file.is_symlink():
                continue
            current = stat.S_IMODE(file.stat().st_mode)
            os.chmod(file, (mode | (current & 0o111 & ~_umask())) if current & 0o111 else mode)
            fd = os.open(file, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_folder(Path(folder))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_directory(path: PathLike, *, option: str = "--output", inputs: Iterable[PathLike] = (),
                     signature: Iterable[str] = (), kind: str = "synth output", merge: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; on success it replaces ``path`` whole.

    On any error or interrupt the temporary folder is removed and ``path`` is left as it was. An existing
    ``path`` must be empty or an earlier output of the same kind (see :func:`check_output_folder`). With
    ``merge=True`` (a folder that also holds the user's own files, such as the schedule catalog) the new
    files are instead renamed into ``path`` one by one, each atomically, and other files are left alone.
    """
    if merge:
        target = check_merge_folder(path, option)
    else:
        target = check_output_folder(path, option=option, inputs=inputs, signature=signature, kind=kind)
    remove_stale_temporaries(target)
    temp = _temp_name(target)
    created = committed = False
    try:
        with signals_held():  # a signal held here is raised as the block ends, inside the try: cleaned up
            try:
                os.mkdir(temp, 0o700)
            except OSError as error:
                raise InputError(str(target), "", f"cannot create a folder here: {_os_problem(error)}") from None
            created = True
        yield temp
        _fsync_tree(temp, _default_mode())
        os.chmod(temp, 0o777 & ~_umask())
        with signals_held():
            if merge and os.path.isdir(target):
                for item in sorted(temp.iterdir()):
                    os.replace(item, target / item.name)
                _fsync_folder(target)
                shutil.rmtree(temp, ignore_errors=True)
            else:
                _commit_folder(temp, target)
            committed = True
    except BaseException as error:
        if created and not committed:
            with signals_held():
                shutil.rmtree(temp, ignore_errors=True)
        if isinstance(error, OSError):
            raise InputError(str(target), "", f"cannot write: {_os_problem(error)}") from None
        raise


def check_merge_folder(path: PathLike, option: str = "--output") -> Path:
    """Refuse a folder that files cannot be merged into (see :func:`atomic_directory` with ``merge``)."""
    target = _check_name(_text(path), option, "folder")
    if not os.path.isdir(target) or target.name in ("", ".", ".."):
        return check_output_folder(path, option=option)
    if os.path.islink(target):
        raise InputError(str(target), option, "is a symbolic link; name the folder itself")
    if not os.access(target, os.W_OK | os.X_OK):
        raise InputError(str(target), option, "cannot write in this folder: permission denied")
    _check_parent(target, option)
    return target


def _commit_folder(temp: Path, target: Path) -> None:
    """Put the finished folder ``temp`` in place of ``target`` (old contents removed); signals are held."""
    parent = target.parent if str(target.parent) else Path(".")
    if not os.path.lexists(target):
        os.rename(temp, target)
        _fsync_folder(parent)
        return
    if _exchange(temp, target):  # temp now holds the old folder
        _fsync_folder(parent)
        shutil.rmtree(temp, ignore_errors=True)
        return
    old = _temp_name(target)
    os.rename(target, old)
    try:
        os.rename(temp, target)
    except OSError:
        os.rename(old, target)
        raise
    _fsync_folder(parent)
    shutil.rmtree(old, ignore_errors=True)


def describe_os_error(error: OSError, path: PathLike | None = None) -> str:
    """One line for an OS error: the path and the cause."""
    where = os.fspath(path) if path is not None else (error.filename or "")
    return f"{where}: {_os_problem(error)}" if where else _os_problem(error)

