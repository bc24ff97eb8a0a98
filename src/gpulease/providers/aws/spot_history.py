"""EC2 spot price history for the cost ledger: what the ``aws`` provider answers through
:class:`~gpulease.providers.base.SupportsPriceHistory`.

Owns :class:`SpotHistory`, a per-``(region, zone, instance type)`` cache of the prices
``DescribeSpotPriceHistory`` returned (Linux/UNIX), each point kept with the time the server
*learned* it. A key is fetched at most once per :data:`REFRESH_EVERY_S` (the first fetch looks
back :data:`FIRST_LOOKBACK_S`, later ones from the previous fetch); after a failed fetch the
next try waits a jittered, capped backoff (:func:`gpulease.backoff.backoff_delay`) and the
answer is what the cache already holds. Moves no states.

:func:`changes_in` turns the points into the changes of a window ``(after, until]``: a point
known before the window passed its instant is a change at its instant (the history's
``Timestamp``); one learned only after the ledger row had passed its instant (the common case:
rows advance every few seconds, the history is read every few minutes) is a change at the time
it was learned, so every row sees each price once, split where the server first knew it.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpulease.backoff import backoff_delay

REFRESH_EVERY_S = 300.0  # one DescribeSpotPriceHistory per (region, zone, type) per 5 minutes
FIRST_LOOKBACK_S = 86_400.0  # the first fetch of a key: the last day (the price in force then)
BACKOFF_BASE_S = 30.0
BACKOFF_CAP_S = 1800.0
MAX_POINTS = 500  # per key: the oldest are dropped beyond it
PRODUCT = "Linux/UNIX"

Key = tuple[str, str, str]  # (region, zone name, instance type)


@dataclass(frozen=True, slots=True, order=True)
class PricePoint:
    """One history entry: the price in force from ``at`` (epoch seconds), learned at
    ``learned_at`` (the server's clock)."""

    at: float
    price: float
    learned_at: float


def parse_history(entries: Iterable[Mapping[str, Any]], *, learned_at: float) -> list[PricePoint]:
    """The Linux/UNIX points of a ``SpotPriceHistory`` list, oldest first; entries without a
    price or a time, or with an unparsable one, are skipped."""
    points: list[PricePoint] = []
    for entry in entries:
        if not str(entry.get("ProductDescription") or PRODUCT).startswith(PRODUCT):
            continue
        try:
            price = float(entry["SpotPrice"])
            stamp = entry["Timestamp"]
            at = stamp.timestamp() if isinstance(stamp, datetime) else float(stamp)
        except (KeyError, TypeError, ValueError):
            continue
        if price >= 0:
            points.append(PricePoint(at, price, learned_at))
    return sorted(points)


def changes_in(
    points: Iterable[PricePoint], *, after: float, until: float
) -> list[tuple[float, float]]:
    """``(at, price)`` changes in ``(after, until]``, oldest first: at a point's instant when
    that is in the window, or at its ``learned_at`` when it was learned inside the window after
    its instant had passed; the price at each is the one in force then among the points known
    by ``until`` (a late point older than a known one changes nothing)."""
    known = [p for p in points if p.learned_at <= until]
    instants: set[float] = set()
    for point in known:
        if after < point.at <= until:
            instants.add(point.at)
        elif point.at <= after < point.learned_at:
            instants.add(point.learned_at)
    changes: list[tuple[float, float]] = []
    for instant in sorted(instants):
        price = _latest(p for p in known if p.at <= instant)
        if price is not None:
            changes.append((instant, price))
    return changes


def price_at(points: Iterable[PricePoint], at: float) -> float | None:
    """The price in force at ``at`` among points learned by then (None: none known)."""
    return _latest(p for p in points if p.at <= at and p.learned_at <= at)


def _latest(points: Iterable[PricePoint]) -> float | None:
    found = max(points, key=lambda p: (p.at, p.learned_at), default=None)
    return None if found is None else found.price


Fetch = Callable[[Key, float], Sequence[Mapping[str, Any]]]  # (key, since) → SpotPriceHistory


@dataclass
class _Entry:
    points: list[PricePoint] = field(default_factory=list)
    fetched_at: float | None = None
    next_at: float = 0.0
    failures: int = 0


class SpotHistory:
    """The cache; ``fetch(key, since)`` makes the API call (the provider's counted method)."""

    def __init__(self, fetch: Fetch, *, rng: random.Random | None = None) -> None:
        self._fetch = fetch
        self._rng = rng or random.Random()
        self._keys: dict[Key, _Entry] = {}
        self._lock = threading.Lock()

    def points(self, key: Key, now: float) -> list[PricePoint]:
        """The key's points, refreshed first when due; a failed refresh keeps the old ones
        (the error is swallowed here: prices are data, asked again after the backoff)."""
        with self._lock:
            entry = self._keys.setdefault(key, _Entry())
            due = now >= entry.next_at
        if due:
            self._refresh(key, entry, now)
        with self._lock:
            return list(entry.points)

    def _refresh(self, key: Key, entry: _Entry, now: float) -> None:
        since = now - FIRST_LOOKBACK_S if entry.fetched_at is None else entry.fetched_at
        try:
            raw = self._fetch(key, since)
        except Exception:  # counted by the wrapper; the cache answers meanwhile
            with self._lock:
                entry.failures += 1
                delay = backoff_delay(
                    entry.failures, base=BACKOFF_BASE_S, cap=BACKOFF_CAP_S, rng=self._rng
                )
                entry.next_at = now + max(delay, 1.0)
            return
        fresh = parse_history(raw, learned_at=now)
        with self._lock:
            known = {(p.at, p.price) for p in entry.points}
            entry.points = sorted(
                [*entry.points, *(p for p in fresh if (p.at, p.price) not in known)]
            )[-MAX_POINTS:]
            entry.fetched_at = now
            entry.failures = 0
            entry.next_at = now + REFRESH_EVERY_S
