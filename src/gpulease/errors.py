"""The error hierarchy of gpulease.

Every error a user can see derives from :class:`GpuleaseError`::

    GpuleaseError
    ├── UserInputError          bad input: a spec field, a CLI argument, a config value (exit 2)
    │   └── SpecError           a task file that does not validate (names the field and line)
    ├── Permanent               retrying will not help (a missing offer, a refused request)
    │   └── CatalogError        the catalog cannot be read or refreshed
    └── Retryable               try again after ``delay`` seconds (throttling, capacity)

The CLI turns ``UserInputError`` into one message and exit code 2, never a traceback.
"""

from __future__ import annotations


class GpuleaseError(Exception):
    """Root of every gpulease error."""


class UserInputError(GpuleaseError):
    """Input from the user is wrong; the message names what and where."""


class SpecError(UserInputError):
    """A task spec failed to validate.

    ``field`` is the dotted path of the offending field (``resources.accelerators``), ``line`` the
    1-based line in the source file when known, ``source`` the file name when known.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        line: int | None = None,
        source: str | None = None,
    ) -> None:
        self.message = message
        self.field = field
        self.line = line
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.source:
            where = self.source + (f":{self.line}" if self.line else "") + ": "
        elif self.line:
            where = f"line {self.line}: "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class Permanent(GpuleaseError):
    """An error that retrying will not fix."""


class CatalogError(Permanent):
    """The catalog cannot be read, parsed or refreshed."""


class Retryable(GpuleaseError):
    """An error worth retrying after ``delay`` seconds."""

    def __init__(self, message: str, *, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay
