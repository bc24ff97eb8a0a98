"""The period and the grouping of a cost report. The period: ``--since 30d`` (the last 30
days up to now) or ``--month 2026-11`` (that UTC calendar month), as ``[start, end)`` in UTC
epoch seconds. The grouping: ``--by`` one of :data:`GROUPS` (default ``day``). Bad values raise
:class:`~gpulease.errors.UserInputError` naming the option. Pure; moves no states.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from gpulease.errors import UserInputError

DEFAULT_SINCE = "30d"
GROUPS = ("day", "cluster", "job", "task", "provider", "region", "gpu", "pricing", "user")
DEFAULT_BY = "day"
_SINCE_RE = re.compile(r"^\s*(\d{1,6})\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_MONTH_RE = re.compile(r"^\s*(\d{4})-(\d{2})\s*$")
_MAX_SINCE_S = 20 * 366 * 86400  # twenty years: anything longer is a typo


@dataclass(frozen=True, slots=True)
class Period:
    """``[start, end)`` in UTC seconds and how it was asked for (``label``: ``since 30d`` or
    ``month 2026-11``)."""

    start: float
    end: float
    label: str

    def to_json(self) -> dict[str, object]:
        return {
            "start": self.start,
            "end": self.end,
            "start_iso": _iso(self.start),
            "end_iso": _iso(self.end),
            "label": self.label,
        }


def parse_since(value: str) -> float:
    """``30d`` → seconds (``s``, ``m``, ``h``, ``d``, ``w``; a whole positive number)."""
    match = _SINCE_RE.match(value) if isinstance(value, str) else None
    if not match:
        raise UserInputError(f"--since: expected a duration such as 30d, 12h or 2w, got {value!r}")
    seconds = int(match.group(1)) * _UNIT_S[match.group(2).lower()]
    if seconds <= 0:
        raise UserInputError(f"--since: the duration must be more than zero, got {value!r}")
    if seconds > _MAX_SINCE_S:
        raise UserInputError(f"--since: at most 20 years, got {value!r}")
    return float(seconds)


def month_bounds(value: str) -> tuple[float, float]:
    """``2026-11`` → the month's ``[start, end)`` in UTC seconds."""
    match = _MONTH_RE.match(value) if isinstance(value, str) else None
    if not match:
        raise UserInputError(f"--month: expected a month such as 2026-11, got {value!r}")
    year, month = int(match.group(1)), int(match.group(2))
    if not 1970 <= year <= 9998 or not 1 <= month <= 12:
        raise UserInputError(f"--month: no such month {value!r} (years 1970-9998, months 01-12)")
    start = datetime(year, month, 1, tzinfo=UTC)
    days = calendar.monthrange(year, month)[1]
    return start.timestamp(), start.timestamp() + days * 86400.0


def month_of(at: float) -> tuple[str, float, float]:
    """The UTC month holding ``at``: its name (``2026-11``) and ``[start, end)``."""
    when = datetime.fromtimestamp(at, tz=UTC)
    name = f"{when.year:04d}-{when.month:02d}"
    start, end = month_bounds(name)
    return name, start, end


def resolve(since: str | None, month: str | None, now: float) -> Period:
    """The period asked for: ``month`` or ``since`` (not both), default the last 30 days."""
    if since is not None and month is not None:
        raise UserInputError("--since and --month: give one of them, not both")
    if month is not None:
        start, end = month_bounds(month)
        return Period(start, end, f"month {month.strip()}")
    text = DEFAULT_SINCE if since is None else since
    return Period(now - parse_since(text), now, f"since {text.strip()}")


def check_by(by: str | None) -> str:
    """``by`` checked (default ``day``); a bad one names ``--by`` and the choices."""
    if by is None:
        return DEFAULT_BY
    if by not in GROUPS:
        raise UserInputError(f"--by: expected one of {', '.join(GROUPS)}, got {by!r}")
    return by


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).isoformat().replace("+00:00", "Z")
