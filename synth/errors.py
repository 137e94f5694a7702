"""One exception family for everything a user can cause.

The CLI maps every :class:`SynthError` to a one-line message and exit code 2. Messages name the file,
the field and what was expected, so they can be acted on without reading code.
"""

from __future__ import annotations


class SynthError(Exception):
    """Base class of every error a user can cause (bad input, impossible request, limits)."""


class InputError(SynthError):
    """A file or argument is malformed: names the source, the field and what was expected."""

    def __init__(self, source: str, field: str, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        where = f"{source}: " if source else ""
        at = f"{field}: " if field else ""
        super().__init__(f"{where}{at}{problem}")


class NotApplicable(SynthError):
    """An algorithm does not apply to this topology or collective; the message says why."""


class InfeasibleError(SynthError):
    """A request has no solution (an infeasible sketch, an impossible tree limit, ...)."""


class LimitError(SynthError):
    """A request exceeds a resource or runtime limit; the message gives the estimate and the limit."""


class VerificationError(SynthError):
    """A schedule is wrong: the message names the transfer and the reason."""

    def __init__(self, message: str, transfer: int | None = None) -> None:
        self.transfer = transfer
        super().__init__(message)
