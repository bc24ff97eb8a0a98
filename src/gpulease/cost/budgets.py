"""The ``budgets:`` section of the config file, and the calendar periods budgets count in.

Owns :class:`Budget` (one validated entry: name, period, limit, scope, warn_at, action),
:func:`parse_budgets` (the section → budgets, or a :class:`~gpulease.errors.UserInputError`
naming the field, e.g. ``budgets[0].limit``), :func:`period_bounds` (the UTC calendar period
holding an instant: a day, an ISO week from Monday, a month) and :meth:`BudgetScope.matches`.
Moves no states.
"""

from __future__ import annotations

import calendar
import datetime as dt
import fnmatch
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpulease.errors import UserInputError

Period = Literal["day", "week", "month"]
Action = Literal["block", "stop", "down"]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


class BudgetScope(BaseModel):
    """What a budget counts: ledger rows of these providers (empty: all), whose task name matches
    the glob ``task`` (None: all) and of ``user`` (None: all)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    providers: tuple[str, ...] = ()
    task: str | None = Field(default=None, min_length=1)
    user: str | None = Field(default=None, min_length=1)

    @field_validator("providers", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def matches(self, *, provider: str, task_name: str | None, user: str | None) -> bool:
        """Whether a cluster / job / launch of these dimensions falls in the scope."""
        if self.providers and provider not in self.providers:
            return False
        if self.task is not None and not fnmatch.fnmatchcase(task_name or "", self.task):
            return False
        return self.user is None or self.user == user

    def describe(self) -> str:
        parts = []
        if self.providers:
            parts.append("providers " + ",".join(self.providers))
        if self.task is not None:
            parts.append(f"task {self.task}")
        if self.user is not None:
            parts.append(f"user {self.user}")
        return "; ".join(parts) or "everything"


class Budget(BaseModel):
    """One entry of ``budgets:``; ``limit`` in dollars per calendar ``period`` (UTC)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    period: Period
    limit: float = Field(gt=0, allow_inf_nan=False)
    scope: BudgetScope = BudgetScope()
    warn_at: float = Field(default=0.8, gt=0, le=1, allow_inf_nan=False)
    action: Action = "block"

    def status_line(self, spend: float) -> str:
        """``team-monthly (month): $412.30 / $500.00 (82 %), block``."""
        share = 100.0 * spend / self.limit
        return (f"{self.name} ({self.period}): ${spend:.2f} / ${self.limit:.2f} "
                f"({share:.0f} %), {self.action}")  # fmt: skip


def parse_budgets(section: Any) -> tuple[Budget, ...]:
    """The config's ``budgets:`` section (a list; None or missing: no budgets)."""
    if section is None:
        return ()
    if not isinstance(section, list):
        raise UserInputError("budgets: must be a list of budgets (each with name, period, limit)")
    budgets: list[Budget] = []
    for index, entry in enumerate(section):
        where = f"budgets[{index}]"
        if not isinstance(entry, Mapping):
            raise UserInputError(f"{where}: must be a mapping (name, period, limit, ...)")
        try:
            budgets.append(Budget.model_validate(dict(entry)))
        except ValidationError as exc:
            raise UserInputError(_message(where, exc)) from None
    names = [b.name for b in budgets]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise UserInputError(f"budgets[{index}].name: {name!r} is used twice")
    return tuple(budgets)


def budgets_of(config: Mapping[str, Any]) -> tuple[Budget, ...]:
    """The budgets of a loaded config file (:func:`gpulease.config.load_config`)."""
    return parse_budgets(config.get("budgets"))


def _message(where: str, exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
    what = first["msg"]
    if first["type"] == "extra_forbidden":
        what = "unknown field"
    elif first["type"] == "literal_error":
        what = f"must be one of {first['ctx']['expected']}"
    more = len(exc.errors()) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}{loc}: {what}{tail}"


def period_bounds(period: Period, at: float) -> tuple[float, float]:
    """The calendar period (UTC) holding ``at``: [start, end) in epoch seconds."""
    moment = dt.datetime.fromtimestamp(at, tz=dt.UTC)
    day = dt.datetime(moment.year, moment.month, moment.day, tzinfo=dt.UTC)
    if period == "day":
        start, end = day, day + dt.timedelta(days=1)
    elif period == "week":
        start = day - dt.timedelta(days=day.weekday())  # ISO weeks start on Monday
        end = start + dt.timedelta(days=7)
    else:
        start = day.replace(day=1)
        days = calendar.monthrange(start.year, start.month)[1]
        end = start + dt.timedelta(days=days)
    return start.timestamp(), end.timestamp()


def period_label(period: Period, at: float) -> str:
    """``2026-12-01`` (day), ``2026-W49`` (week), ``2026-12`` (month)."""
    moment = dt.datetime.fromtimestamp(at, tz=dt.UTC)
    if period == "day":
        return moment.strftime("%Y-%m-%d")
    if period == "week":
        year, week, _ = moment.isocalendar()
        return f"{year}-W{week:02d}"
    return moment.strftime("%Y-%m")
