"""One error hierarchy. Every error oomkit raises on purpose is an OomkitError; cli.main prints it
as one line and exits with its code. Exit codes are documented in the README."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the thing checked failed (a launch did not get ready, a check did not pass)
EXIT_INPUT = 2  # unusable input or usage error
EXIT_INTERRUPTED = 130


class OomkitError(Exception):
    """Base class. `hint` tells the user what to do next."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message.replace("\n", " ").strip()
        return f"{text} ({self.hint})" if self.hint else text


class InputError(OomkitError):
    """A file or argument cannot be used: missing, empty, binary, wrong schema."""


class UsageError(OomkitError):
    """Options that contradict each other or name something unknown."""


class RunFailed(OomkitError):
    """An operation ran and failed (server not ready, engine died)."""

    exit_code = EXIT_FAILED


class MissingDependency(OomkitError):
    """An optional extra is needed for this command."""


WRONG_SHAPE = (
    TypeError,
    KeyError,
    AttributeError,
    ValueError,
    IndexError,
    OverflowError,
    ZeroDivisionError,
    RecursionError,
)
"""What reading a field of an unexpected shape raises (a string where a list belongs, a missing key,
10**400 where a float is needed): files oomkit wrote itself can still be edited, torn or from
another version, and such a field is unusable input, not a traceback."""
