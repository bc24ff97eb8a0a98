"""The job's own figures: the agent's read of ``GPULEASE_TRAIN_STATS_FILE``.

``gpulease.train`` (:mod:`gpulease.train.stats`) rewrites that file atomically every few
seconds; at each telemetry pass :class:`TrainStatsReader` reads it into the sample's ``train``
(exactly :data:`TRAIN_KEYS`). Absent, stale (``updated_at`` older than :data:`STALE_AFTER_S`,
5 min, or 10 × the job's report interval when that is longer: a step may take minutes) or bad
(not JSON, wrong types) reads as None; a bad file is logged once per distinct problem and
ignored. No states.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("gpulease.agent.telemetry")

STALE_AFTER_S = 300.0
MAX_BYTES = 64 * 1024  # a report is a few hundred bytes; anything bigger is not one
TRAIN_KEYS = ("step", "step_time_s", "samples_per_s", "tokens_per_s", "mfu", "data_wait_ratio",
              "checkpoint_step", "checkpoint_at", "updated_at")  # fmt: skip
_INTS = ("step", "checkpoint_step")
_RATIOS = ("mfu", "data_wait_ratio")


class BadStats(ValueError):
    """The file is not a train report."""


def parse_train_stats(text: str) -> dict[str, Any]:
    """The report in ``text`` as the sample's ``train`` (the known keys, validated); raises
    :class:`BadStats` naming the first field that is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadStats(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadStats("not a JSON object")
    out: dict[str, Any] = {}
    for key in TRAIN_KEYS:
        value = data.get(key)
        if key in ("step", "updated_at") and value is None:
            raise BadStats(f"{key}: missing")
        out[key] = _checked(key, value)
    return out


def _checked(key: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadStats(f"{key}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise BadStats(f"{key}: expected a finite number >= 0")
    if key in _INTS:
        if value != int(value):
            raise BadStats(f"{key}: expected an integer")
        return int(value)
    if key in _RATIOS and value > 1:
        raise BadStats(f"{key}: expected a share between 0 and 1")
    return float(value)


class TrainStatsReader:
    """Reads the stats file of the task ``path_of()`` names (None: no task) for a pass at
    ``now``."""

    def __init__(self, path_of: Callable[[], Path | None]) -> None:
        self.path_of = path_of
        self._last_problem: str | None = None

    def read(self, now: float) -> dict[str, Any] | None:
        path = self.path_of()
        if path is None:
            return None
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._bad(path, exc.strerror or str(exc))
            return None
        if len(raw) > MAX_BYTES:
            self._bad(path, f"larger than {MAX_BYTES} bytes")
            return None
        try:
            text = raw.decode("utf-8")
            stats = parse_train_stats(text)
            interval = json.loads(text).get("interval_s")
        except (BadStats, UnicodeDecodeError) as exc:
            self._bad(path, str(exc))
            return None
        self._last_problem = None
        return None if _stale(stats["updated_at"], interval, now) else stats

    def _bad(self, path: Path, problem: str) -> None:
        """Log ``problem`` once (until it changes); the pass gets no train figures."""
        if problem != self._last_problem:
            log.warning("ignoring the train stats file %s: %s", path, problem)
            self._last_problem = problem


def _stale(updated_at: float, interval_s: Any, now: float) -> bool:
    limit = STALE_AFTER_S
    if isinstance(interval_s, int | float) and not isinstance(interval_s, bool) and interval_s > 0:
        limit = max(limit, 10 * float(interval_s))
    return now - updated_at > limit
