"""The local provider's "cloud": one JSON file per instance under ``<root>/instances/``, written
atomically (:mod:`gpulease.atomic`), and a lock file that serialises writers across
processes (two servers, or a server and the CLI, on one machine).

A record holds what a cloud would: the tags, the node's rank, its fake GPUs, the state the
provider last drove it to (PENDING → RUNNING → STOPPING → STOPPED, … → TERMINATING →
TERMINATED), and the agent's session id and port. What is *really* running is read from the
process table each time (see :mod:`gpulease.providers._procs`); the record is never taken as
proof that processes live or died.
"""

from __future__ import annotations

import fcntl
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpulease.atomic import write_json_atomic
from gpulease.providers.base import InstanceState


@dataclass
class NodeRecord:
    id: str
    request_id: str
    node_rank: int
    num_nodes: int
    tags: dict[str, str]
    gpus: list[int]
    state: InstanceState = InstanceState.PENDING
    sid: int | None = None  # the agent's pid = its session id; None before the first spawn
    port: int | None = None
    healthy: bool = False  # the agent answered health since it was last started
    instance_type: str = "local"
    accelerator: str | None = None
    created_at: float = 0.0
    state_at: float = 0.0
    kill_after: float | None = None  # SIGKILL what survives after this time (stop/terminate)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeRecord:
        data = dict(data)
        data["state"] = InstanceState(data["state"])
        return cls(**data)


class Registry:
    def __init__(self, root: Path) -> None:
        # made on first use: a provider built only to ask for its offers writes nothing
        self.dir = root / "instances"
        self._lock_path = root / ".lock"
        self._thread_lock = threading.RLock()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive across threads and processes (``flock`` on a lock file)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._thread_lock, open(self._lock_path, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def path(self, instance_id: str) -> Path:
        return self.dir / f"{instance_id}.json"

    def get(self, instance_id: str) -> NodeRecord | None:
        try:
            return NodeRecord.from_json(json.loads(self.path(instance_id).read_text("utf-8")))
        except FileNotFoundError:
            return None

    def all(self) -> list[NodeRecord]:
        records = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                records.append(NodeRecord.from_json(json.loads(path.read_text("utf-8"))))
            except FileNotFoundError:
                continue  # deleted meanwhile
        return records

    def save(self, record: NodeRecord) -> None:
        write_json_atomic(self.path(record.id), record.to_json(), indent=1, mode=0o600)

    def delete(self, instance_id: str) -> None:
        self.path(instance_id).unlink(missing_ok=True)
