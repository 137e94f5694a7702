"""One exception family for everything a user can cause.

The CLI maps every :class:`SynthError` to a one-line message and exit code 2. Messages name the file,
the field and what was expected, so they can be acted on without reading code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


#: Most characters of user text (a node id, a path, a value) that a message quotes: longer text is cut to an
#: excerpt that says its full length (:func:`excerpt`).
EXCERPT_CHARS = 200
#: Most characters of a whole message; a longer one keeps its start and end and says how much was cut.
MESSAGE_CHARS = 1000


def excerpt(text: object, limit: int = EXCERPT_CHARS) -> str:
    """``text`` as a message may quote it: whole when at most ``limit`` characters, else its start, its end
    and its full length.

    Examples
    --------
    >>> excerpt("gpu0")
    'gpu0'
    >>> excerpt("x" * 5_000_000, 10)
    'xxxxxxx...xxx (5,000,000 characters)'
    """
    text = str(text)
    if len(text) <= limit:
        return text
    head = max(1, limit * 3 // 4)
    tail = max(1, limit - head)
    return f"{text[:head]}...{text[-tail:]} ({len(text):,} characters)"


def bounded(message: str, limit: int = MESSAGE_CHARS) -> str:
    """``message`` cut to about ``limit`` characters (start and end kept, the cut said), so a message that
    quotes a huge input (a 5 MB node id, a 100,000-node path) stays one short line.

    Examples
    --------
    >>> len(bounded("y" * 10**6)) < 1100
    True
    """
    if len(message) <= limit:
        return message
    head = limit * 4 // 5
    tail = limit - head
    return f"{message[:head]} [... {len(message) - limit:,} characters cut ...] {message[-tail:]}"


def ascii_digits(text: str, source: str, field: str) -> str:
    """``text``, where a number is expected, unless it holds a digit that is not ASCII: a superscript
    ``'²'``, a circled ``'①'``, an Arabic-Indic ``'٣'`` or a full-width ``'３'`` (``int()`` refuses some of
    them and silently reads others), refused with an :class:`InputError` naming ``field``.

    Examples
    --------
    >>> ascii_digits("64", "", "chunks")
    '64'
    >>> try:
    ...     ascii_digits("²", "", "chunks")
    ... except InputError as error:
    ...     print(error)
    chunks: expected a number in ASCII digits 0-9, got '²' ('²' is not one)
    """
    for char in text:
        if not char.isascii() and (char.isdigit() or char.isnumeric()):
            raise InputError(source, field, f"expected a number in ASCII digits 0-9, got {excerpt(text)!r} "
                             f"({char!r} is not one)")
    return text


class SynthError(Exception):
    """Base class of every error a user can cause (bad input, impossible request, limits). Its message is
    bounded (:func:`bounded`): however much input it quotes, it stays one short line."""

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str):
            args = (bounded(args[0]), *args[1:])
        super().__init__(*args)


class InputError(SynthError):
    """A file or argument is malformed: names the source, the field and what was expected."""

    def __init__(self, source: str, field: str, problem: str) -> None:
        self.source = excerpt(source)
        self.field = excerpt(field)
        self.problem = bounded(problem, MESSAGE_CHARS - 2 * EXCERPT_CHARS)
        where = f"{self.source}: " if source else ""
        at = f"{self.field}: " if field else ""
        super().__init__(f"{where}{at}{self.problem}")


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
        super().__init__(bounded(message))


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
            "unknown field (check the spelling; see docs/topology-format.md for the format)"
    elif first["type"] == "missing":
        message = "missing required field"
    return InputError(source, field, message)
