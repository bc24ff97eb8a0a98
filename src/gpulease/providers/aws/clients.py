"""One boto3 EC2 client per region (built lazily; boto3 imported only here), each call run
through :func:`gpulease.providers.aws.errors.call` (classified errors, bounded retries).

Credentials come from boto3's usual chain; ``AWS_ENDPOINT_URL`` is honoured by boto3 itself
(that is how tests point at a moto server). botocore's own retries are off: one retry policy.
Nothing here logs a request or a credential. Also owns the persisted set of regions used.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpulease.atomic import write_json_atomic
from gpulease.providers.aws.errors import call


class Ec2Clients:
    def __init__(self, *, attempts: int = 5, retry_base: float = 0.5, retry_cap: float = 8.0):
        self.attempts = attempts
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def client(self, region: str) -> Any:
        with self._lock:
            found = self._clients.get(region)
            if found is None:
                import boto3
                from botocore.config import Config

                session = boto3.session.Session()
                config = Config(retries={"max_attempts": 1, "mode": "standard"})
                found = self._clients[region] = session.client(
                    "ec2", region_name=region, config=config
                )
            return found

    def run(
        self, region: str, action: str, zone: str | None = None,
        expected: frozenset[str] = frozenset(), **kwargs: Any,
    ) -> Any:  # fmt: skip
        """EC2 ``action`` (snake_case method name) in ``region`` with ``kwargs``; a ClientError
        whose code is in ``expected`` raises ``ExpectedError``."""
        method = getattr(self.client(region), action)
        return call(
            lambda: method(**kwargs), action=action, region=region, zone=zone,
            attempts=self.attempts, base=self.retry_base, cap=self.retry_cap, expected=expected,
        )  # fmt: skip

    def instances(self, region: str, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every instance DescribeInstances returns for ``filters`` (all pages)."""
        found: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"NextToken": token} if token else {}
            page = self.run(region, "describe_instances", Filters=filters, **extra)
            for reservation in page.get("Reservations", []):
                found.extend(reservation.get("Instances", []))
            token = page.get("NextToken")
            if not token:
                return found


class RegionSet:
    """Regions this provider launched in, persisted (``regions.json``) so a restarted server
    still lists their instances."""

    def __init__(self, path: Path, configured: Iterable[str], default: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._regions = dict.fromkeys([*configured, default, *self._load()])

    def _load(self) -> list[str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [str(r) for r in data] if isinstance(data, list) else []

    def all(self) -> list[str]:
        with self._lock:
            return list(self._regions)

    def add(self, region: str) -> None:
        with self._lock:
            if region in self._regions:
                return
            self._regions[region] = None
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_json_atomic(self.path, list(self._regions))
