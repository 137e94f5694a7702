"""The one output layer: every file and folder synth writes goes through here.

Rules (docs/reliability.md lists them for users):

- **Check first.** :func:`check_output_file` and :func:`check_output_folder` refuse, before any work starts,
  a destination that is empty or too long a name, in a folder that does not exist or cannot be written,
  that exists as the wrong kind (a folder where a file is expected, a device, a pipe, a socket, a symbolic
  link), or that is one of the command's inputs. Commands call them on their arguments at once; the writers
  call them again just before writing.
- **Never an input.** Inputs are compared by file identity (``st_dev``, ``st_ino``, following symbolic
  links), so the output can be neither an input nor a hard link to one. Inside :func:`input_scope` (the CLI
  runs every command in one) every file a reader opens is recorded with :func:`note_input`, so an input the
  command found by itself (a sketch named in an option, the topology file a schedule records) counts too.
- **Never touch a file synth did not create.** Temporary names (``.NAME.PID-XXXXXXXX.tmp``) are created
  exclusively (``O_EXCL``, ``mkdir``, ``link``; a name in use is never reused but skipped), and cleanup
  removes only what this process created. A file that merely looks like a temporary is left alone.
- **Never a partial output.** A file is written to an unnamed temporary file in the target's folder
  (``O_TMPFILE``: the kernel removes it if the process dies, even by SIGKILL), fsynced, given a name and
  renamed over the target in one step, and the folder is fsynced. Where ``O_TMPFILE`` is not available the
  temporary file has a name (``.NAME.PID-XXXXXXXX.tmp``, created with ``O_EXCL``). The old file is never removed or truncated before
  the new one is complete.
- **Folders are replaced whole.** A folder is built as a hidden sibling, fsynced, then exchanged with the old
  one in one step (``renameat2(RENAME_EXCHANGE)``; elsewhere two renames) and the old one removed, so an
  output folder never mixes files of two runs. A folder that is not empty and does not look like an earlier
  output of the same kind is never replaced.
- **Interrupts.** Ctrl-C or SIGTERM (the CLI turns it into the same path) removes the temporary file or
  folder; signals are held off while cleaning up or committing, so a second signal changes nothing. After a
  SIGKILL the old output is intact or the new one complete; a SIGKILL in the instant between naming the
  temporary and the rename leaves that named temporary behind (no later run removes it: it could not prove
  it made it).
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
import functools
import hashlib
import os
import secrets
import shutil
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from synth.errors import InputError

#: Longest file name (one path component) accepted, in bytes (Linux NAME_MAX).
NAME_MAX = 255
#: Longest path accepted, in bytes (Linux PATH_MAX).
PATH_MAX = 4096

_TEMP_SUFFIX = ".tmp"
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


def _identity(path: PathLike) -> tuple[int, int] | None:
    """(st_dev, st_ino) of what ``path`` names, following symbolic links; None when it cannot be read."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


#: While a command runs (:func:`input_scope`): every file it has read, by (st_dev, st_ino) -> its path.
_READ: list[dict[tuple[int, int], str]] = []


@contextlib.contextmanager
def input_scope() -> Iterator[None]:
    """Remember, while the block runs, every file read through :func:`note_input`: no output written in the
    block may be one of them (a symbolic or hard link to one included). The CLI runs each command in one."""
    _READ.append({})
    try:
        yield
    finally:
        _READ.pop()


def note_input(path: PathLike) -> None:
    """Record ``path`` as an input of the running command (see :func:`input_scope`); a no-op outside one.

    The readers of topologies, schedules, sketches, specs, XML and trace files call it as they open a file.
    """
    if not _READ:
        return
    identity = _identity(path)
    if identity is not None:
        _READ[-1].setdefault(identity, os.fspath(path))


def inputs_read() -> list[str]:
    """The files the running command has read so far (see :func:`input_scope`)."""
    return list(_READ[-1].values()) if _READ else []


def _input_identities(inputs: Iterable[PathLike | None]) -> dict[tuple[int, int], str]:
    """Every input, named or read: (st_dev, st_ino) -> its path."""
    known = dict(_READ[-1]) if _READ else {}
    for item in inputs:
        if item is None:
            continue
        identity = _identity(item)
        if identity is not None:
            known.setdefault(identity, os.fspath(item))
    return known


def _same_file(target: Path, inputs: Iterable[PathLike | None]) -> str | None:
    """The input that ``target`` is (the same inode: the file itself, a hard link or a symbolic link to it)."""
    identity = _identity(target)
    if identity is None:
        return None
    return _input_identities(inputs).get(identity)


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
        how = "is the input file" if os.path.abspath(same) == os.path.abspath(target) else \
            "is a link to (the same file as) the input file"
        raise InputError(text, option, f"{how} {same}; write the output to another file")


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
    try:
        entries = {entry.name for entry in os.scandir(target)}
    except OSError as error:
        raise InputError(text, option, f"cannot read this folder: {_os_problem(error)}") from None
    marks = set(signature)
    if entries and not (marks and marks <= entries):
        shown = ", ".join(sorted(marks)) or "its files"
        raise InputError(text, option, f"folder exists, is not empty and is not an earlier {kind} (no {shown}); "
                         "synth replaces an output folder whole, so name a new or empty folder")
    _check_folder_holds_no_input(target, text, option, inputs)
    return target


def _check_folder_holds_no_input(target: Path, text: str, option: str, inputs: Iterable[PathLike | None]) -> None:
    """Refuse a folder to be replaced that holds an input (by path, or a hard link to one by inode)."""
    known = _input_identities(inputs)
    with contextlib.suppress(OSError, ValueError):
        folder = target.resolve()
        for path in known.values():
            resolved = Path(path).resolve()
            if resolved == folder or folder in resolved.parents:
                raise InputError(text, option, f"contains the input {path}; replacing the folder would delete it")
    seen = 0
    for root, folders, files in os.walk(target):
        for name in files + folders:
            seen += 1
            if seen > 100_000:
                return
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(root, name))
                if (info.st_dev, info.st_ino) in known:
                    raise InputError(text, option, f"holds {os.path.join(root, name)}, the same file as the input "
                                     f"{known[(info.st_dev, info.st_ino)]}; replacing the folder would delete it")


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


#: Tries at a fresh temporary name before giving up (a clash needs 32 random bits to repeat).
_NAME_TRIES = 16


def _create_exclusive(target: Path, create: Callable[[Path], Any]) -> tuple[Path, Any]:
    """Create a new temporary beside ``target`` with ``create(name)``, which must fail with
    :class:`FileExistsError` when ``name`` exists (``O_EXCL``, ``mkdir``, ``link``): an existing file is never
    reused or replaced, whatever its name. Returns the name and what ``create`` returned."""
    for _ in range(_NAME_TRIES):
        name = _temp_name(target)
        try:
            return name, create(name)
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "cannot find an unused temporary name", str(target))


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


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library (for ``linkat``), or None where it cannot be loaded or is not Linux's."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _link_unnamed(fd: int, name: Path) -> bool:
    """Give the ``O_TMPFILE`` file ``fd`` the name ``name``; False when this system cannot. Raises
    :class:`FileExistsError` when ``name`` exists (it is left alone)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "linkat"):
        if libc.linkat(fd, b"", _AT_FDCWD, os.fsencode(name), _AT_EMPTY_PATH) == 0:
            return True
        if ctypes.get_errno() == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(name))
    try:
        os.link(f"/proc/self/fd/{fd}", name, follow_symlinks=True)
        return True
    except FileExistsError:
        raise
    except OSError:
        return False


# ---------------------------------------------------------------------------------------- files
def atomic_write_bytes(path: PathLike, data: bytes, *, option: str = "--output",
                       inputs: Iterable[PathLike] = (), immediate: bool = False) -> None:
    """Write ``data`` to ``path`` atomically: check the destination, write a temporary, fsync, rename.

    Raises :class:`InputError` naming the path and the cause when the destination is refused or the
    operating system fails (disk full, permission denied...); the old file is then untouched. Inside an
    :func:`output_transaction` the file is put in place when the block ends, unless ``immediate``.
    """
    _atomic_write(path, lambda fd: _write_all(fd, data), option, inputs, immediate)


def atomic_write_parts(path: PathLike, parts: Callable[[], Iterable[str]], *, option: str = "--output",
                       inputs: Iterable[PathLike] = ()) -> None:
    """Write the UTF-8 text that ``parts()`` yields, part after part, to ``path`` atomically (see
    :func:`atomic_write_bytes`): a large text never exists whole in memory. ``parts`` may be called twice
    (when a temporary must be written again under a name) and must yield the same text each time."""
    def write(fd: int) -> None:
        for part in parts():
            _write_all(fd, part.encode("utf-8", errors="surrogateescape"))

    _atomic_write(path, write, option, inputs)


def _atomic_write(path: PathLike, write: Callable[[int], None], option: str, inputs: Iterable[PathLike],
                  immediate: bool = False) -> None:
    target = check_output_file(path, option=option, inputs=inputs)
    staged = _StagedFile(target, option, list(inputs))
    try:
        staged.write(write, keep_unnamed=bool(_TRANSACTIONS) and not immediate)
        if _TRANSACTIONS and not immediate:
            _TRANSACTIONS[-1].append(staged)
            return
        with signals_held():
            staged.commit()
    except BaseException as error:
        with signals_held():
            staged.discard()
        if isinstance(error, OSError):
            raise InputError(str(target), "", f"cannot write: {_os_problem(error)}") from None
        raise


class _StagedFile:
    """A complete new file for ``target``: an unnamed ``O_TMPFILE`` file (``fd``) or a named temporary."""

    def __init__(self, target: Path, option: str, inputs: list[PathLike]) -> None:
        self.target, self.option, self.inputs = target, option, inputs
        self.folder = target.parent if str(target.parent) else Path(".")
        self.fd = -1
        self.temp: Path | None = None

    def write(self, write: Callable[[int], None], keep_unnamed: bool) -> None:
        """Write and fsync the new content; name it now unless ``keep_unnamed`` (and this system can)."""
        mode = _default_mode()
        try:
            self.fd = os.open(self.folder, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, mode)  # type: ignore[attr-defined,unused-ignore]  # O_TMPFILE is Linux only
        except (AttributeError, OSError):
            self.fd = -1
        if self.fd >= 0:
            write(self.fd)
            os.fchmod(self.fd, mode)
            os.fsync(self.fd)
            if keep_unnamed:  # named when committed
                return
            with signals_held():
                name, linked = _create_exclusive(self.target, lambda name: _link_unnamed(self.fd, name))
                if linked:
                    self.temp = name
                    return
            os.close(self.fd)  # linking is not allowed here: write a named temporary instead
            self.fd = -1
        with signals_held():
            self.temp, self.fd = _create_exclusive(self.target, lambda name: os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode))
        write(self.fd)
        os.fchmod(self.fd, mode)
        os.fsync(self.fd)

    def check(self) -> None:
        """Check the destination again (it may have changed while the command ran)."""
        check_output_file(self.target, option=self.option, inputs=self.inputs)

    def commit(self) -> None:
        """Rename the new file over the target (signals held by the caller)."""
        if self.temp is None:
            name, linked = _create_exclusive(self.target, lambda name: _link_unnamed(self.fd, name))
            if linked:
                self.temp = name
            else:  # this system cannot name an unnamed file: copy it into a named temporary
                self.temp, fd = _create_exclusive(self.target, lambda name: os.open(
                    name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _default_mode()))
                try:
                    _copy_fd(self.fd, fd)
                finally:
                    os.close(fd)
        os.close(self.fd)
        self.fd = -1
        os.replace(self.temp, self.target)
        self.temp = None
        _fsync_folder(self.folder)

    def discard(self) -> None:
        """Remove the new file (signals held by the caller): only what this process created."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        if self.temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.temp)
            self.temp = None


def read_back(path: PathLike) -> BinaryIO:
    """Open for reading the file this command has just written to ``path``: the staged new content while an
    :func:`output_transaction` holds it back, else the file itself. (A command that checks its own output,
    as ``export msccl`` reads its XML back, sees what it wrote before it is put in place.)"""
    wanted = os.path.abspath(path)
    for staged in reversed([item for block in _TRANSACTIONS for item in block]):
        if isinstance(staged, _StagedFile) and os.path.abspath(staged.target) == wanted:
            if staged.temp is not None:
                return open(staged.temp, "rb")  # noqa: SIM115 (the caller closes it)
            return open(f"/proc/self/fd/{staged.fd}", "rb")  # noqa: SIM115 (a new offset on the unnamed file)
    return open(path, "rb")  # noqa: SIM115


def _copy_fd(source: int, destination: int) -> None:
    """Copy the whole of file ``source`` into ``destination`` and fsync it."""
    offset = 0
    while True:
        block = os.pread(source, 1 << 24, offset)
        if not block:
            break
        _write_all(destination, block)
        offset += len(block)
    os.fsync(destination)


class _StagedFolder:
    """A complete new folder (``temp``) for ``target``, replacing it whole when committed."""

    def __init__(self, temp: Path, target: Path, check: Callable[[], Any]) -> None:
        self.temp, self.target, self.check = temp, target, check

    def commit(self) -> None:
        _commit_folder(self.temp, self.target)

    def discard(self) -> None:
        shutil.rmtree(self.temp, ignore_errors=True)


#: Open :func:`output_transaction` blocks, innermost last: the outputs each has staged.
_TRANSACTIONS: list[list[_StagedFile | _StagedFolder]] = []


@contextlib.contextmanager
def output_transaction() -> Iterator[None]:
    """All or nothing: files and folders written in the block are completed into temporaries and put in
    place only when the block ends without an error, each checked again first; on an error or an interrupt
    they are removed and every file is as it was. The CLI runs every command in one, so a command that
    fails after writing one output (or half of several) changes nothing. A write with ``immediate=True``
    (the sweep's periodic saves, which must survive an interrupt) is put in place at once."""
    staged: list[_StagedFile | _StagedFolder] = []
    _TRANSACTIONS.append(staged)
    try:
        yield
    except BaseException:
        _TRANSACTIONS.pop()
        with signals_held():
            for item in staged:
                item.discard()
        raise
    _TRANSACTIONS.pop()
    try:
        for item in staged:
            item.check()
        with signals_held():
            while staged:
                staged[0].commit()
                staged.pop(0)
    except BaseException as error:
        with signals_held():
            for item in staged:
                item.discard()
        if isinstance(error, OSError):
            raise InputError(error.filename or "", "", f"cannot write: {_os_problem(error)}") from None
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
    inputs = list(inputs)
    if merge:
        target = check_merge_folder(path, option)
    else:
        target = check_output_folder(path, option=option, inputs=inputs, signature=signature, kind=kind)
    temp: Path | None = None
    committed = False
    try:
        with signals_held():  # a signal held here is raised as the block ends, inside the try: cleaned up
            try:
                temp, _ = _create_exclusive(target, lambda name: os.mkdir(name, 0o700))
            except OSError as error:
                raise InputError(str(target), "", f"cannot create a folder here: {_os_problem(error)}") from None
        yield temp
        _fsync_tree(temp, _default_mode())
        os.chmod(temp, 0o777 & ~_umask())
        if merge and os.path.isdir(target):
            _check_merge_items(temp, target, option, inputs)
        else:  # the work may have taken minutes: the place is checked again, with every input read since
            def check() -> Path:
                return check_output_folder(path, option=option, inputs=inputs, signature=signature, kind=kind)

            check()
            if _TRANSACTIONS:  # put in place when the command's transaction ends
                _TRANSACTIONS[-1].append(_StagedFolder(temp, target, check))
                committed = True
                return
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
        if temp is not None and not committed:
            with signals_held():
                shutil.rmtree(temp, ignore_errors=True)
        if isinstance(error, OSError):
            raise InputError(str(target), "", f"cannot write: {_os_problem(error)}") from None
        raise


def _check_merge_items(temp: Path, target: Path, option: str, inputs: Iterable[PathLike]) -> None:
    """Refuse, before any file is merged, a name in ``target`` that exists as anything but a regular file
    (a folder, device, pipe, socket or symbolic link) or that is an input."""
    known = _input_identities(inputs)
    for item in sorted(temp.iterdir()):
        destination = target / item.name
        try:
            info = os.lstat(destination)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise InputError(str(destination), option, "exists and is not a regular file (a folder, device, pipe, "
                             "socket or symbolic link); synth replaces only regular files")
        if (info.st_dev, info.st_ino) in known:
            raise InputError(str(destination), option, f"is the same file as the input {known[(info.st_dev, info.st_ino)]}; "
                             "write the output to another folder")


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
    holder, _ = _create_exclusive(target, lambda name: os.mkdir(name, 0o700))  # a new, empty folder of ours
    old = holder / "old"
    os.rename(target, old)
    try:
        os.rename(temp, target)
    except OSError:
        os.rename(old, target)
        os.rmdir(holder)
        raise
    _fsync_folder(parent)
    shutil.rmtree(holder, ignore_errors=True)


def describe_os_error(error: OSError, path: PathLike | None = None) -> str:
    """One line for an OS error: the path and the cause."""
    where = os.fspath(path) if path is not None else (error.filename or "")
    return f"{where}: {_os_problem(error)}" if where else _os_problem(error)

