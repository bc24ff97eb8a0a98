"""The spot interruption notice, read by the agent on its own VM (EC2 instance metadata).

:class:`ImdsPoller` is a daemon thread that asks IMDSv2 (``PUT /latest/api/token``, then
``GET /latest/meta-data/spot/instance-action`` with that token) every ``interval`` seconds.
A 200 with an ``action`` is the two-minute warning: the running task is preempted exactly as
the server's ``POST /v1/tasks/<id>/preempt`` does (:meth:`Agent.preempt_current` → the runner's
``request_stop("preempt", grace)``: preemption file, SIGTERM, SIGKILL after the grace), with a
grace that ends :data:`MARGIN_S` before the announced time. 404 means no notice; an IMDS that
does not answer is logged once and asked again. Moves no states itself.

Enabled by ``serve --imds`` or the environment variable ``GPULEASE_AGENT_IMDS_URL`` (the base
URL; default ``http://169.254.169.254``); ``GPULEASE_AGENT_IMDS_INTERVAL`` overrides 5 s.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime

log = logging.getLogger("gpulease.agent")

DEFAULT_URL = "http://169.254.169.254"
URL_ENV = "GPULEASE_AGENT_IMDS_URL"
INTERVAL_ENV = "GPULEASE_AGENT_IMDS_INTERVAL"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
TOKEN_PATH = "/latest/api/token"
DEFAULT_GRACE_S = 90.0
MARGIN_S = 15.0


def grace_for(action: dict[str, object], now: float) -> float:
    """Seconds the job may take to stop: until :data:`MARGIN_S` before the announced time."""
    try:
        at = datetime.fromisoformat(str(action["time"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError):
        return DEFAULT_GRACE_S
    return max(0.0, min(DEFAULT_GRACE_S, at - now - MARGIN_S))


class ImdsPoller(threading.Thread):
    def __init__(
        self,
        on_notice: Callable[[float], object],
        *,
        base_url: str | None = None,
        interval: float | None = None,
        timeout: float = 2.0,
    ) -> None:
        super().__init__(name="imds", daemon=True)
        self.base_url = (base_url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        self.interval = interval or float(os.environ.get(INTERVAL_ENV) or 5.0)
        self.timeout = timeout
        self.on_notice = on_notice
        self.stopped = threading.Event()
        self._warned = False

    def run(self) -> None:
        while not self.stopped.is_set():
            self.poll_once()
            self.stopped.wait(self.interval)

    def poll_once(self) -> dict[str, object] | None:
        """One look; the action (and the task preempted) when there is one."""
        try:
            action = self._action()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            if not self._warned:
                log.warning("instance metadata at %s did not answer: %s", self.base_url, exc)
                self._warned = True
            return None
        if action is not None:
            grace = grace_for(action, time.time())
            log.warning("spot interruption notice %s: preempting (grace %.0f s)", action, grace)
            self.on_notice(grace)
        return action

    def _action(self) -> dict[str, object] | None:
        put = urllib.request.Request(
            self.base_url + TOKEN_PATH,
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
        )
        with urllib.request.urlopen(put, timeout=self.timeout) as response:
            token = response.read().decode()
        get = urllib.request.Request(
            self.base_url + ACTION_PATH, headers={"X-aws-ec2-metadata-token": token}
        )
        try:
            with urllib.request.urlopen(get, timeout=self.timeout) as response:
                body = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # no interruption scheduled
                return None
            raise
        return body if isinstance(body, dict) and body.get("action") else None
