"""The ``synth`` command line. Each command group lives in its own module; this one wires them up and
is the only place that turns errors into messages and exit codes (2 for anything the user can fix)."""

from __future__ import annotations

import importlib
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
    "synth.cli.demo",
    "synth.cli.explore",
    "synth.cli.catalog",
    "synth.cli.sweep",
    "synth.cli.export",
    "synth.cli.bound",
    "synth.cli.tune",
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
    from synth.cli.common import set_verbosity

    set_verbosity(quiet, verbose)


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def main() -> None:
    """Console entry point: run the app, map user errors to one line on stderr and exit code 2."""
    from synth.errors import SynthError

    ctrl_c, previous = _watch_ctrl_c()
    try:
        code = app(standalone_mode=False)  # click returns (not raises) a typer.Exit code in this mode
        if code == 130 and ctrl_c:  # typer turns an uncaught Ctrl-C into exit code 130 before we see it
            raise KeyboardInterrupt
        if isinstance(code, int) and code:
            sys.exit(code)
    except SynthError as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        doing = " ".join(["synth", *sys.argv[1:]])
        typer.echo(f"interrupted while running `{doing}`: no partial output was written", err=True)
        sys.exit(130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except Exception as error:  # click usage errors and the like
        import click

        # typer >= 0.20 raises its own vendored copy of click's exceptions (typer._click), not click's
        if isinstance(error, click.ClickException) or type(error).__module__.startswith("typer._click"):
            error.show()  # type: ignore[attr-defined]
            sys.exit(2 if getattr(error, "exit_code", 1) == 2 else 1)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _watch_ctrl_c() -> tuple[list[bool], Any]:
    """Note Ctrl-C (then raise KeyboardInterrupt as usual); returns the note and the handler to restore."""
    fired: list[bool] = []

    def handler(signum: int, frame: Any) -> None:
        fired.append(True)
        raise KeyboardInterrupt

    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.SIG_IGN:  # e.g. a background job: leave it ignored
            return fired, None
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        return fired, None
    return fired, previous
