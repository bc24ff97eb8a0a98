"""The config key ``server.telemetry`` (how often the relay pulls, how long points are kept)::

    server:
      telemetry:
        interval_s: 10                       # seconds between relay passes (default 10)
        retention: {"10s": "1h", "1m": "90d"}  # how long each resolution's points are kept

Durations are a number and a unit (``s``, ``m``, ``h``, ``d``, ``w``) or a number of seconds.
A bad value raises :class:`~gpulease.errors.UserInputError` naming the key (the server exits 2).
Moves no states.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpulease.errors import UserInputError

KEY = "server.telemetry"
#: the retention keys and the resolution (seconds) each names
RETENTION_KEYS: dict[str, int] = {"10s": 10, "1m": 60}
DEFAULT_RETENTION_S: dict[int, float] = {10: 3600.0, 60: 90 * 86400.0}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """``retention_s``: per resolution in seconds (10, 60), how long its points are kept."""

    interval_s: float = 10.0
    retention_s: Mapping[int, float] = field(default_factory=lambda: dict(DEFAULT_RETENTION_S))

    def default_resolution(self, since: float, now: float) -> int:
        """10 when ``since`` lies within the 10 s points' retention (give or take a minute, so a
        client's "the last hour" computed a moment earlier still gets them), else 60."""
        return 10 if since >= now - self.retention_s[10] - _WINDOW_SLACK_S else 60


_WINDOW_SLACK_S = 60.0


def parse_duration(value: object, where: str) -> float:
    """Seconds of ``"90d"``, ``"1h"``, ``"30s"`` or a plain number (seconds); > 0."""
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match[1]) * _UNITS[match[2]]
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise UserInputError(
            f"{where}: a duration such as 30s, 15m, 1h, 90d or seconds > 0, not {value!r}"
        )
    return seconds


def telemetry_settings(config: Mapping[str, Any]) -> TelemetrySettings:
    """``server.telemetry`` of the config file, checked."""
    server = config.get("server") or {}
    if not isinstance(server, Mapping):
        raise UserInputError("server: must be a mapping (telemetry: {interval_s: 10})")
    section = server.get("telemetry")
    section = {} if section is None else section
    if not isinstance(section, Mapping):
        raise UserInputError(f"{KEY}: must be a mapping (interval_s: 10, retention: ...)")
    unknown = sorted(set(section) - {"interval_s", "retention"})
    if unknown:
        raise UserInputError(f"{KEY}.{unknown[0]}: unknown key (known: interval_s, retention)")
    interval = section.get("interval_s", 10.0)
    if (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or not (math.isfinite(interval) and 0 < interval <= 3600)
    ):
        raise UserInputError(f"{KEY}.interval_s: seconds between 0 and 3600, not {interval!r}")
    return TelemetrySettings(float(interval), _retention(section.get("retention")))


def _retention(value: object) -> dict[int, float]:
    where = f"{KEY}.retention"
    kept = dict(DEFAULT_RETENTION_S)
    if value is None:
        return kept
    if not isinstance(value, Mapping):
        raise UserInputError(f'{where}: a mapping such as {{"10s": "1h", "1m": "90d"}}')
    for key, duration in value.items():
        if key not in RETENTION_KEYS:
            raise UserInputError(f"{where}.{key}: unknown resolution (known: 10s, 1m)")
        kept[RETENTION_KEYS[key]] = parse_duration(duration, f"{where}.{key}")
    return kept
