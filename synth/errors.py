"""One exception family for everything a user can cause.

The CLI maps every :class:`SynthError` to a one-line message and exit code 2. Messages name the file,
the field and what was expected, so they can be acted on without reading code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


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


def invalid(error: ValidationError, source: str, *, expected: str | None = None, root: str = "") -> InputError:
    """The one adapter from a pydantic :class:`~pydantic.ValidationError` to an :class:`InputError`.

    It names the first problem's field (dotted path; ``root`` when the problem is the whole document)
    and says what was wrong in words. A misspelt key is reported before anything else, as it is the
    likeliest cause of a "missing" one; ``expected`` lists the known fields for that message.

    Examples
    --------
    >>> from pydantic import BaseModel, ConfigDict, ValidationError
    >>> class Point(BaseModel):
    ...     model_config = ConfigDict(extra="forbid")
    ...     x: int
    >>> try:
    ...     Point.model_validate({"y": 1})
    ... except ValidationError as error:
    ...     print(invalid(error, "p.json", expected="x"))
    p.json: y: unknown field (expected x)
    """
    problems = error.errors()
    first = next((problem for problem in problems if problem["type"] == "extra_forbidden"), problems[0])
    field = ".".join(str(part) if str(part).isprintable() else repr(part) for part in first["loc"]) or root
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = f"unknown field (expected {expected})" if expected else \
            "unknown field (check the spelling; see the README for the format)"
    elif first["type"] == "missing":
        message = "missing required field"
    return InputError(source, field, message)
