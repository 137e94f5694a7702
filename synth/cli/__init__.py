"""The ``synth`` command line. Each command group lives in its own module; this one wires them up and
is the only place that turns errors into messages and exit codes (2 for anything the user can fix)."""

from __future__ import annotations

import importlib
import re
import signal
import sys
from typing import Any

import typer

from synth import __version__

app = typer.Typer(
    name="synth",
    help="Synthesize, verify, evaluate and export collective schedules for any network topology.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

#: Command modules; each defines ``register(app)``.
COMMAND_MODULES = [
    "synth.cli.basic",
    "synth.cli.algorithms",
    "synth.cli.demo",
    "synth.cli.explore",
    "synth.cli.catalog",
    "synth.cli.sweep",
    "synth.cli.export",
    "synth.cli.bound",
    "synth.cli.tune",
    "synth.cli.demand",
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"synth {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only results and errors: no progress, no notes."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print details (timings, skipped algorithms)."),
) -> None:
    """Synthesize, verify, evaluate and export collective schedules for any network topology."""
    from synth.cli.common import reset_csv_mode, set_verbosity

    set_verbosity(quiet, verbose)
    reset_csv_mode()


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)

_DOUBLE_BACKTICKS = re.compile(r"``(.+?)``", re.DOTALL)


def plain_help(text: str | None) -> str | None:
    """Help text as a terminal shows it: reStructuredText's ````literal```` becomes ``'literal'``.

    Examples
    --------
    >>> plain_help("see ``synth bound`` first")
    "see 'synth bound' first"
    """
    return None if text is None else _DOUBLE_BACKTICKS.sub(r"'\1'", text)


def command() -> Any:
    """The click command tree of ``synth`` as users see it: help texts in plain quotes, and flags (options
    that take no value) shown without a type placeholder. ``main`` runs this tree, and the CLI reference
    in the manual is generated from it."""
    root: Any = typer.main.get_command(app)
    pending = [root]
    while pending:
        node = pending.pop()
        node.help = plain_help(node.help)
        node.short_help = plain_help(getattr(node, "short_help", None))
        for param in getattr(node, "params", ()):
            if hasattr(param, "help"):
                param.help = plain_help(param.help)
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        node.get_help_option = _flag_without_type(node.get_help_option)
        pending.extend(getattr(node, "commands", {}).values())
    return root


def _flag_without_type(make_help_option: Any) -> Any:
    """click builds ``--help`` when it prints help; this shows it like the other flags."""

    def help_option(ctx: Any) -> Any:
        option = make_help_option(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    return help_option


def main() -> None:
    """Console entry point: run the app, map user errors to one line on stderr and exit code 2.

    Ctrl-C and SIGTERM take the same path (exit code 130, no partial output); a second signal while
    cleaning up is ignored. Standard streams that are closed, narrow or broken never cause a traceback.
    """
    from synth.cli.common import Interrupted, one_line
    from synth.errors import SynthError
    from synth.fileio import input_scope, output_transaction

    _prepare_streams()
    interrupted, restore = _watch_signals()
    try:
        # no output may be a file the command read, and a command that fails writes nothing (synth.fileio)
        with input_scope(), output_transaction():
            code = command().main(prog_name="synth", standalone_mode=False)  # click returns (not raises) a typer.Exit code in this mode
            if code == 130 and interrupted:  # typer turns an uncaught Ctrl-C into exit code 130 before we see it
                raise KeyboardInterrupt
            if isinstance(code, int) and code:
                raise typer.Exit(code)
    except SynthError as error:
        _fail(f"error: {one_line(_as_flags(error))}", 2)
    except Interrupted as kept:  # the command kept part of its work and says what
        _fail(f"interrupted while running `{one_line(_doing())}`: {one_line(str(kept))}", 130)
    except KeyboardInterrupt:
        _fail(f"interrupted while running `{one_line(_doing())}`: no partial output was written", 130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        _fail("aborted", 1)
    except BrokenPipeError:
        _stdout_gone()
        sys.exit(1)
    except RecursionError:
        _fail("error: the input is nested too deeply to process", 2)
    except OverflowError:  # a number past a float or a C long that no check at the boundary caught
        _fail("error: a number in the input is too large to compute with (past a float or a 64-bit integer)", 2)
    except MemoryError:
        _fail("error: out of memory; use a smaller input, or lower the limits in synth.limits", 2)
    except OSError as error:  # an operating-system failure outside the output layer: one line, the path and cause
        where = f"{error.filename}: " if error.filename else ""
        _fail(f"error: {one_line(where + (error.strerror or str(error)))}", 2)
    except Exception as error:  # click usage errors and the like
        import click

        # typer >= 0.20 raises its own vendored copy of click's exceptions (typer._click), not click's
        if isinstance(error, click.ClickException) or type(error).__module__.startswith("typer._click"):
            _usage_error(error)
        raise
    finally:
        restore()


def _usage_error(error: Any) -> None:
    """A click usage error as the other errors are: one line ``error: ...`` first (bounded), then the
    usage and where to find help; exit code 2 (1 for a click error that is not about usage)."""
    from synth.cli.common import one_line
    from synth.errors import bounded

    code = 2 if getattr(error, "exit_code", 1) == 2 else 1
    try:
        message = error.format_message()
    except Exception:  # a message is never lost to the formatting
        message = str(error)
    lines = [f"error: {one_line(bounded(message))}"]
    context = getattr(error, "ctx", None)
    if context is not None and code == 2:
        try:
            lines.append(one_line(bounded(context.get_usage(), LINE_CHARS)))
            lines.append(f"Try '{one_line(context.command_path)} {context.help_option_names[0]}' for help.")
        except Exception:
            pass
    try:
        typer.echo("\n".join(lines), err=True)
    except (OSError, ValueError):
        pass
    sys.exit(code)


def _option_flags() -> dict[str, str]:
    """The options of the command this process runs: Python parameter name -> its long flag."""
    command: Any = typer.main.get_command(app)  # flags are the same in the plain tree of `command()`
    for arg in sys.argv[1:]:
        subcommands = getattr(command, "commands", None)
        if not subcommands:
            break
        if not arg.startswith("-"):
            if arg not in subcommands:
                break
            command = subcommands[arg]
    flags = {}
    for param in getattr(command, "params", ()):
        long = [opt for opt in param.opts if opt.startswith("--")]
        if param.param_type_name == "option" and param.name and long:
            flags[param.name] = long[0]
    return flags


def _as_flags(error: Exception) -> str:
    """The message of ``error`` as a command-line user reads it. Library code names Python parameters (the
    field of an :class:`InputError` without a source file, and names in backticks in the text); here each
    becomes the flag that sets it in the running command, e.g. ``max_channels`` -> ``--max-channels``."""
    import re

    from synth.errors import InputError

    try:
        flags = _option_flags()
    except Exception:  # a message is never lost to the translation
        return str(error)
    text = str(error)
    if isinstance(error, InputError) and not error.source and error.field in flags:
        text = str(InputError("", flags[error.field], error.problem))
    return re.sub(r"`([A-Za-z_]\w*)`", lambda m: f"`{flags[m[1]]}`" if m[1] in flags else m[0], text)


def _doing() -> str:
    from synth.errors import excerpt

    return " ".join(["synth", *(excerpt(arg) for arg in sys.argv[1:])])


#: Most characters of the one line a failure prints (after escaping; see synth.errors.bounded).
LINE_CHARS = 2000


def _fail(message: str, code: int) -> None:
    from synth.errors import bounded

    try:
        typer.echo(bounded(message, LINE_CHARS), err=True)
    except (OSError, ValueError):
        pass
    sys.exit(code)


def _prepare_streams() -> None:
    """Make stdout/stderr safe to print to: closed descriptors are pointed at /dev/null (so no output file
    can take their number), and characters the encoding lacks are escaped instead of raising."""
    import os

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                opened = os.open(os.devnull, os.O_RDWR)
            except OSError:
                continue
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None:
            try:
                setattr(sys, name, open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False))  # noqa: SIM115
            except OSError:
                continue
            continue
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass


def _stdout_gone() -> None:
    """The reader of stdout went away: send further output (and the flush at exit) to /dev/null."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _watch_signals() -> tuple[list[int], Any]:
    """Turn the first SIGINT or SIGTERM into KeyboardInterrupt (the one clean path: temporaries removed, the
    old output kept); ignore any signal after it, so cleaning up is never cut short. Returns the list of
    signals seen and a function that restores the previous handlers."""
    seen: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        from synth.fileio import defer_interrupt

        seen.append(signum)
        if len(seen) == 1 and not defer_interrupt(signum):
            raise KeyboardInterrupt

    from synth.fileio import swallowed_interrupt

    unraisable_before = sys.unraisablehook

    def unraisable(hook_args: Any) -> None:
        if not swallowed_interrupt(hook_args):
            unraisable_before(hook_args)

    sys.unraisablehook = unraisable
    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            current = signal.getsignal(signum)
            if current is signal.SIG_IGN:  # e.g. a background job: leave it ignored
                continue
            signal.signal(signum, handler)
            previous[signum] = current
        except (ValueError, OSError):  # not the main thread
            continue

    def restore() -> None:
        sys.unraisablehook = unraisable_before
        for signum, handler_before in previous.items():
            try:
                signal.signal(signum, handler_before)
            except (ValueError, OSError, TypeError):
                pass

    return seen, restore
