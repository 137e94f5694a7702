"""The ``synth`` command line. Each command group lives in its own module; this one wires them up and
is the only place that turns errors into messages and exit codes (2 for anything the user can fix)."""

from __future__ import annotations

import importlib
import sys

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
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"synth {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Synthesize, verify, evaluate and export collective schedules for any network topology."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def main() -> None:
    """Console entry point: run the app, map user errors to one line on stderr and exit code 2."""
    from synth.errors import SynthError

    try:
        app(standalone_mode=False)
    except SynthError as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted: no partial output was written", err=True)
        sys.exit(130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except Exception as error:  # click usage errors and the like
        import click

        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(2 if isinstance(error, click.UsageError) else 1)
        raise
