"""Each relayed node's newest raw sample, in memory (what ``GET /v1/telemetry/latest`` and the
relayed ``/metrics`` series show).

Owns :class:`LatestSamples`: written by the relay thread, read by API threads (a lock guards
both). Keyed by (cluster id, node rank); the relay forgets the nodes that are no longer live.
Lost on restart (the next pass fills it again). Moves no states.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class NodeLatest:
    """One node's newest sample; ``interval_s``: how often its agent samples (when it says)."""

    cluster_id: int
    node_rank: int
    sample: Mapping[str, Any]
    interval_s: float | None = None

    @property
    def at(self) -> float:
        return float(self.sample.get("at") or 0.0)


class LatestSamples:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[tuple[int, int], NodeLatest] = {}

    def put(
        self,
        cluster_id: int,
        node_rank: int,
        sample: Mapping[str, Any],
        interval_s: float | None = None,
    ) -> None:
        latest = NodeLatest(cluster_id, node_rank, sample, interval_s)
        with self._lock:
            self._nodes[(cluster_id, node_rank)] = latest

    def get(self, key: tuple[int, int]) -> NodeLatest | None:
        with self._lock:
            return self._nodes.get(key)

    def keep_only(self, keys: Iterable[tuple[int, int]]) -> None:
        """Forget every node not in ``keys``."""
        wanted = set(keys)
        with self._lock:
            for key in [k for k in self._nodes if k not in wanted]:
                del self._nodes[key]

    def of_cluster(self, cluster_id: int) -> list[NodeLatest]:
        with self._lock:
            found = [n for (cid, _), n in self._nodes.items() if cid == cluster_id]
        return sorted(found, key=lambda n: n.node_rank)

    def all(self) -> list[NodeLatest]:
        with self._lock:
            return sorted(self._nodes.values(), key=lambda n: (n.cluster_id, n.node_rank))
