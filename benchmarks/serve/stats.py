"""What a load run recorded and what it adds up to (pure: no I/O, no clock).

A :class:`RequestRecord` per request (when it was due, when it was sent, how long until the answer
or the failure, the HTTP status or 0 with the error); :class:`LoadResult` adds them up: counts,
failures (anything but a 2xx answer), statuses, error kinds, latency percentiles of the 2xx
answers, the achieved rate, the generator's lag behind its schedule (worst and p99), a
per-second timeline, and the table benchmarks print.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class RequestRecord:
    """One request: seconds from the run's start; ``status`` 0 means no answer (``error``)."""

    due_s: float
    sent_s: float
    latency_s: float
    status: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of sorted ``values``, linear between ranks; None: empty."""
    if not values:
        return None
    rank = (len(values) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (rank - low)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


@dataclass(frozen=True)
class LoadResult:
    """Every request of one run (sorted by due time) and what they add up to."""

    url: str
    method: str
    records: tuple[RequestRecord, ...]
    elapsed_s: float
    scheduled_requests: float
    request_limit: int | None = None

    @property
    def requests(self) -> int:
        return len(self.records)

    @property
    def ok(self) -> int:
        return sum(1 for r in self.records if r.ok)

    @property
    def failed(self) -> int:
        return self.requests - self.ok

    @property
    def achieved_rps(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def max_lag_s(self) -> float:
        """How far behind its schedule the generator sent a request, at worst."""
        return max((r.sent_s - r.due_s for r in self.records), default=0.0)

    def lag_s(self, q: float) -> float | None:
        """The ``q``-th percentile of how late the generator sent (its own share of a tail)."""
        return percentile(sorted(r.sent_s - r.due_s for r in self.records), q)

    def latencies(self) -> list[float]:
        return sorted(r.latency_s for r in self.records if r.ok)

    def latency_s(self, q: float) -> float | None:
        return percentile(self.latencies(), q)

    def statuses(self) -> dict[str, int]:
        """Answers by status (``"200"``, ``"503"``, …) and ``"no answer"``."""
        counts = Counter(str(r.status) if r.status else "no answer" for r in self.records)
        return dict(sorted(counts.items()))

    def errors(self) -> dict[str, int]:
        """Failures without an answer, by kind (the exception's name)."""
        counts = Counter((r.error or "").split(":", 1)[0] for r in self.records if not r.status)
        return dict(counts.most_common())

    def summary(self) -> dict[str, Any]:
        lat = self.latencies()
        return {
            "url": self.url,
            "method": self.method,
            "requests": self.requests,
            "ok": self.ok,
            "failed": self.failed,
            "statuses": self.statuses(),
            "errors": self.errors(),
            "elapsed_s": round(self.elapsed_s, 4),
            "scheduled_requests": round(self.scheduled_requests, 1),
            "request_limit": self.request_limit,
            "achieved_rps": round(self.achieved_rps, 2),
            "latency_ms": {
                "p50": _ms(percentile(lat, 50)),
                "p95": _ms(percentile(lat, 95)),
                "p99": _ms(percentile(lat, 99)),
                "max": _ms(lat[-1] if lat else None),
            },
            "max_lag_ms": _ms(self.max_lag_s),
            "lag_p99_ms": _ms(self.lag_s(99)),
        }

    def timeline(self, bucket_s: float = 1.0) -> list[dict[str, Any]]:
        """Per ``bucket_s`` of due time: requests, ok, failed, p50/p95 latency of the 2xx."""
        buckets: dict[int, list[RequestRecord]] = {}
        for record in self.records:
            buckets.setdefault(int(record.due_s // bucket_s), []).append(record)
        rows = []
        for index in sorted(buckets):
            items = buckets[index]
            lat = sorted(r.latency_s for r in items if r.ok)
            ok = len(lat)
            rows.append(
                {
                    "t_s": round(index * bucket_s, 3),
                    "requests": len(items),
                    "ok": ok,
                    "failed": len(items) - ok,
                    "p50_ms": _ms(percentile(lat, 50)),
                    "p95_ms": _ms(percentile(lat, 95)),
                }
            )
        return rows

    def table(self) -> str:
        """The few lines a benchmark prints."""
        s = self.summary()
        lat = s["latency_ms"]
        failures = ", ".join(
            f"{name} ×{count}" for name, count in s["statuses"].items() if not name.startswith("2")
        )
        fmt = "{:.2f}".format
        latency = "  ".join(
            f"{q} {fmt(lat[q]) if lat[q] is not None else '–'}"
            for q in ("p50", "p95", "p99", "max")
        )
        return "\n".join(
            [
                f"{self.method} {self.url}",
                f"requests {s['requests']} (scheduled {s['scheduled_requests']:g}) in "
                f"{s['elapsed_s']:.2f} s: {s['achieved_rps']:.1f} req/s achieved",
                f"ok {s['ok']}, failed {s['failed']}" + (f" ({failures})" if failures else ""),
                f"latency ms (2xx): {latency}",
                f"generator lag behind schedule: max {s['max_lag_ms']:.2f} ms",
            ]
        )
