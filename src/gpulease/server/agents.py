"""The controller's agent port, over the agent's HTTP client (:mod:`gpulease.agent.client`).

Owns :class:`HttpAgents` (the :class:`~gpulease.controller.AgentConnector`: node tokens —
from the provider when it hands them out, else derived from ``server.key`` — and one cached
client per node) and :class:`HttpAgent` (one node: poll, submit, cancel, logs, exec, the
telemetry relay's ``metrics``; a poll records the task's last checkpoint sync in
:class:`~gpulease.server.ckpt_syncs.CheckpointSyncs`). On a node whose provider does not share
this machine's files (``Provider.shares_files`` false), ``submit`` first uploads the task's
workdir and file mounts (:mod:`gpulease.server.uploads`) and submits the node's paths. A task
whose image comes from a configured registry (``NodeTask.image_registry``) gets that registry's
login sent to the node's agent first (``PUT /v1/registries/<host>``,
:class:`~gpulease.server.registry_logins.RegistryLogins`): every submission — a launch, a
managed job's recovery, a service replica — goes through :meth:`HttpAgent.submit`, so each
one sends it, over the same channel as the task (the SSH tunnel on cloud nodes). A task with
secrets (``NodeTask.secret_set``) gets the values of its set — loaded from the lookup it is
given (the vault), as :class:`pydantic.SecretStr` — in the same submission's body, beside the
task; a set that cannot be loaded is :class:`SecretSetMissing` (permanent). Moves no states.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import SecretStr

from gpulease import filesync
from gpulease.agent.client import AgentClient, AgentRequestError, AgentUnavailable
from gpulease.controller import AgentReport, Liveness, NodeRef
from gpulease.errors import GpuleaseError, Permanent, Retryable
from gpulease.providers.base import Provider, SupportsNodeToken
from gpulease.server.ckpt_syncs import CheckpointSyncs
from gpulease.server.keys import derived_node_token
from gpulease.server.registry_logins import RegistryLogins
from gpulease.server.uploads import Uploader
from gpulease.state import hash_token
from gpulease.wire import ExecResult, LogChunk, NodeTask, TaskState

log = logging.getLogger("gpulease.server")


SecretLookup = Callable[[str], Mapping[str, SecretStr]]  # a secret set's id -> its values


class SecretSetMissing(Permanent):
    """A task's secret set cannot be loaded (no store, an unknown id, a key that does not open
    it): the message names the set, never a value."""


class HttpAgent:
    """``uploader``: set when the node does not share this machine's files; ``syncs``: where
    the polls record the task's last checkpoint sync (``/metrics``); ``logins``: the configured
    registry logins a task's image is pulled with; ``secrets``: where a task's secret set is
    loaded from (the vault's ``load``)."""

    def __init__(
        self,
        client: AgentClient,
        uploader: Uploader | None = None,
        syncs: CheckpointSyncs | None = None,
        logins: RegistryLogins | None = None,
        secrets: SecretLookup | None = None,
    ) -> None:
        self.client = client
        self.uploader = uploader
        self.syncs = syncs
        self.logins = logins
        self.secrets = secrets

    def poll(self, task_id: str) -> AgentReport:
        try:
            health = self.client.health()
        except AgentUnavailable:
            return AgentReport(Liveness.UNKNOWN)
        except AgentRequestError as exc:
            log.warning("agent refused a health poll: %s", exc)
            return AgentReport(Liveness.UNKNOWN)
        brief = health.get("task") or {}
        if brief.get("task_id") != task_id:
            return AgentReport(Liveness.ALIVE)
        if self.syncs is not None and brief.get("checkpoint_synced_at") is not None:
            self.syncs.record(task_id, brief["checkpoint_synced_at"])
        try:
            state = TaskState(str(brief.get("state")))
        except ValueError:
            log.warning("agent reported an unknown task state %r", brief.get("state"))
            return AgentReport(Liveness.UNKNOWN)
        return self._report(task_id, state)

    def _report(self, task_id: str, state: TaskState) -> AgentReport:
        """The report of a task in ``state``; an ended one's exit code (and, when it ended badly,
        where and why) from its status."""
        if not state.terminal:
            return AgentReport(Liveness.ALIVE, state)
        status = self.client.status(task_id)
        if state is TaskState.SUCCEEDED:
            return AgentReport(Liveness.ALIVE, state, status.get("exit_code"))
        detail = str(status.get("detail") or "") or None
        return AgentReport(
            Liveness.ALIVE,
            state,
            status.get("exit_code"),
            step=failed_step(status.get("phase"), detail),
            signal=status.get("signal"),
            detail=detail,
        )

    def submit(self, task: NodeTask) -> None:
        """Send the image's registry login (when one is configured), the task's files (when
        the node does not share them), then the task with the values of its secret set (loaded
        first: a set that cannot be loaded sends nothing)."""
        values = self._secret_values(task)
        if self.logins is not None and task.image is not None:
            login = self.logins.credential(task.image_registry)
            if login is not None:
                self.client.set_registry_login(login.registry, login.username, login.password)
        if self.uploader is not None:
            task, _reports = self.uploader.deliver(self.client, task)
        self.client.submit(task, values)

    def _secret_values(self, task: NodeTask) -> Mapping[str, SecretStr] | None:
        set_id = task.secret_set
        if set_id is None:
            return None
        if self.secrets is None:
            raise SecretSetMissing(f"task {task.task_id}: its secret set {set_id} cannot be "
                                   "loaded: this server has no secret store")  # fmt: skip
        try:
            return dict(self.secrets(set_id))
        except Retryable:
            raise
        except Exception as exc:  # our own errors say why; any other: its type only
            why = str(exc) if isinstance(exc, GpuleaseError) else type(exc).__name__
            raise SecretSetMissing(f"task {task.task_id}: its secret set {set_id} cannot be "
                                   f"loaded: {why}") from None  # fmt: skip

    def cancel(self, task_id: str) -> None:
        self.client.cancel(task_id)

    def preempt(self, task_id: str, grace_s: float) -> None:
        self.client.preempt(task_id, grace_s)

    def logs(self, task_id: str, offset: int, limit: int | None = None) -> LogChunk:
        try:
            chunk = self.client.logs(task_id, offset, limit)
        except AgentRequestError as exc:
            if exc.status == 404:  # the task is not there yet
                return LogChunk(b"", offset, offset, False, TaskState.PENDING)
            raise
        return chunk

    def exec(self, task_id: str, command: str, timeout_s: float) -> ExecResult:
        return self.client.exec(task_id, command, timeout_s)

    def metrics(self, since: float | None) -> dict[str, Any]:
        """The node's telemetry samples taken after ``since`` (the relay's pull)."""
        return self.client.metrics(since)

    def profiles(self) -> dict[str, Any]:
        """The ranks with a ``gpulease.train.profile`` on the node (server/profiles.py)."""
        return self.client.profiles()

    def profile_file(self, rank: int, name: str) -> bytes:
        return self.client.profile_file(rank, name)


class HttpAgents:
    def __init__(
        self,
        providers: Mapping[str, Provider],
        key: bytes,
        timeout: float = 2.0,
        *,
        file_limit: int = int(filesync.DEFAULT_MAX_MB * 1_000_000),
        syncs: CheckpointSyncs | None = None,
        logins: RegistryLogins | None = None,
        secrets: SecretLookup | None = None,
    ) -> None:
        """``secrets``: where a task's secret set is loaded from (None: no store; a task
        with ``secret_set`` then fails to submit, :class:`SecretSetMissing`)."""
        self.providers = providers
        self.syncs = syncs or CheckpointSyncs()
        self.logins = logins or RegistryLogins()
        self.secrets = secrets
        self._key = key
        self._timeout = timeout
        self.uploader = Uploader(file_limit)
        self._clients: dict[tuple[str, str, str], HttpAgent] = {}
        self._lock = threading.Lock()

    def token(self, provider: str, instance_id: str) -> SecretStr:
        found = self.providers.get(provider)
        if isinstance(found, SupportsNodeToken):
            return found.node_token(instance_id)
        return derived_node_token(self._key, instance_id)

    def token_hash(self, provider: str, instance_id: str) -> str | None:
        try:
            return hash_token(self.token(provider, instance_id))
        except Exception as exc:  # the node may be gone already; the hash is informative only
            log.info("no agent token for %s: %s", instance_id, type(exc).__name__)
            return None

    def agent(self, node: NodeRef) -> HttpAgent:
        key = (node.provider, node.instance_id, node.agent_url)
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                stale = [k for k in self._clients if k[:2] == key[:2]]
                for old in stale:  # the agent moved (restarted on another port)
                    self._clients.pop(old).client.close()
                token = self.token(node.provider, node.instance_id)
                client = AgentClient(node.agent_url, token, timeout=self._timeout)
                provider = self.providers.get(node.provider)
                shares = provider is not None and provider.shares_files
                uploader = None if shares else self.uploader
                found = self._clients[key] = HttpAgent(
                    client, uploader, self.syncs, self.logins, self.secrets
                )
            return found

    def forget(self, node: NodeRef) -> None:
        with self._lock:
            for key in [k for k in self._clients if k[:2] == (node.provider, node.instance_id)]:
                self._clients.pop(key).client.close()

    def close(self) -> None:
        with self._lock:
            for agent in self._clients.values():
                agent.client.close()
            self._clients.clear()


def failed_step(phase: object, detail: str | None) -> str | None:
    """Which step of a task that ended badly failed, from the agent's status: the steps before
    any phase name themselves at the start of ``detail`` (see agent/runner.py and
    agent/ckpt_sync.py), else the phase that ran last."""
    for prefix, step in _STEP_PREFIXES:
        if detail and detail.startswith(prefix):
            return step
    return str(phase) if phase in ("setup", "run") else None


_STEP_PREFIXES = (
    ("file sync", "file sync"),
    ("task environment", "task environment"),
    ("checkpoint_store", "checkpoint restore"),
)
