"""When each task's checkpoint was last synced to its store, as the agents report it.

Owns :class:`CheckpointSyncs`: the server's poll of a node's agent (:class:`~gpulease.server.
agents.HttpAgent`) reads ``checkpoint_synced_at`` from the health brief of a task with a
checkpoint store (the agent's :class:`~gpulease.agent.ckpt_sync.SyncStatus` ``last_sync_at``)
and records the newest per task id; ``/metrics`` turns it into
``gpulease_checkpoint_sync_age_seconds``. Kept in memory: after a server restart the first
poll of each running task brings it back (the agent is the source of truth). A managed job's
attempts share one task id, so a new attempt that has not synced yet still shows the previous
attempt's last sync. Moves no states.
"""

from __future__ import annotations

import threading

#: at most this many tasks remembered (the oldest syncs are forgotten first)
MAX_TASKS = 10_000


class CheckpointSyncs:
    """Newest checkpoint sync time per task id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at: dict[str, float] = {}

    def record(self, task_id: str, at: object) -> None:
        """Remember ``at`` (the agent's Unix time of a successful sync) when it is newer."""
        if isinstance(at, bool) or not isinstance(at, int | float):
            return
        with self._lock:
            if at > self._at.get(task_id, float("-inf")):
                self._at[task_id] = float(at)
            if len(self._at) > MAX_TASKS:
                oldest = min(self._at, key=self._at.__getitem__)
                del self._at[oldest]

    def last(self, task_id: str) -> float | None:
        with self._lock:
            return self._at.get(task_id)
