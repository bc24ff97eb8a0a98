"""The server's operations on clusters — what the REST API calls: launch (plan + the cluster row
and its first launch intent, in one transaction), list, show, down / stop / start, autostop, logs
and exec through the node agents.

States it moves (through ``set_status``, compare-and-set, as the user's actor): any live status →
TERMINATING (``down``); RUNNING | SUCCEEDED | FAILED → STOPPING (``stop``); STOPPED → STARTING
(``start``). Everything after that is the reconcile loop's work; each call wakes it.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease import filesync
from gpulease.clock import Clock
from gpulease.controller import LaunchDocument, NodeRef
from gpulease.controller.acceptance_store import Offer, degraded_offers
from gpulease.controller.document import cluster_task_id
from gpulease.controller.ports import AgentConnector
from gpulease.errors import GpuleaseError, Permanent, Retryable, UserInputError
from gpulease.providers.base import Provider, SupportsSsh, SupportsStopStart
from gpulease.providers.honoured import ignored_field_warnings
from gpulease.providers.registry import runtime_catalog
from gpulease.server.budget_loop import BudgetLoop
from gpulease.server.planning import launch_targets_and_estimate
from gpulease.server.registry_logins import RegistryLogins
from gpulease.server.tasks import TakenTask, take_task
from gpulease.server.uploads import check_sources
from gpulease.server.vault import Vault
from gpulease.server.views import cluster_view
from gpulease.state import (
    Cluster,
    ClusterExists,
    ClusterStatus,
    LaunchTarget,
    NodeState,
    create_cluster,
    get_cluster_by_name,
    list_clusters,
    list_nodes,
    record_activity,
    session_scope,
    set_status,
)
from gpulease.wire import ExecResult, LogChunk, TaskState

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_C = ClusterStatus
ACTOR = "user"


class KeepGpuRule:
    """The type of :data:`KEEP_GPU_RULE`: ``autostop`` leaves the cluster's load rule as it is."""


KEEP_GPU_RULE = KeepGpuRule()


class NotFound(UserInputError):
    """No cluster of that name."""


class Conflict(UserInputError):
    """The cluster's status does not allow the request."""


class AgentUnreachable(Retryable):
    """The node's agent did not answer; try again."""


def check_name(name: str | None) -> str:
    if not name:
        raise UserInputError("name: the task has no name; give one with --name")
    if not NAME.match(name):
        raise UserInputError(
            f"name: {name!r} is not a valid cluster name (letters, digits, '.', '_', '-'; "
            "at most 63, starting with a letter or digit)"
        )
    return name


@dataclass(frozen=True, slots=True)
class _AutostopRule:
    """A new cluster's autostop: idle minutes (None: off), down, and the load rule's %."""

    minutes: int | None
    down: bool
    gpu_below: float | None


class ClusterService:
    def __init__(
        self,
        engine: Engine,
        providers: Mapping[str, Provider],
        agents: AgentConnector,
        *,
        clock: Clock,
        owner: str,
        wake: Callable[[], None] = lambda: None,
        file_limit: int = int(filesync.DEFAULT_MAX_MB * 1_000_000),
    ) -> None:
        self.engine = engine
        self.file_limit = file_limit
        self.providers = providers
        self.agents = agents
        self.clock = clock
        self.owner = owner
        self.wake = wake
        self._catalog_lock = threading.Lock()
        self._catalog: Any = None
        self.budgets: BudgetLoop | None = None  # ``budgets:`` (block refuses launches)
        self.registry_logins = RegistryLogins()  # ``containers.registries`` (checked at launch)
        self.vault: Vault | None = None  # where a task's ``secrets:`` are sealed (server.main)

    # ---- launch and read --------------------------------------------------------------------

    def launch(
        self,
        task_data: Mapping[str, Any],
        *,
        name: str | None = None,
        workdir: str | None = None,
        autostop_minutes: int | None = None,
        down: bool | None = None,
        over_budget: bool = False,
        secrets: Mapping[str, SecretStr] | None = None,
    ) -> dict[str, Any]:
        """Plan and write a new cluster. ``autostop_minutes`` / ``down`` (``launch -i N
        --down``) override the task's ``resources.autostop``; its load rule is kept. A
        ``block`` budget may refuse it (:class:`~gpulease.server.budget_loop.OverBudget`)
        unless ``over_budget``. ``secrets``: the values of the task's secrets (the request's
        ``secrets`` field; :meth:`seal_secrets`)."""
        taken = take_task(task_data, workdir=workdir, secrets=secrets)
        name = check_name(name or taken.task.name)
        self.registry_logins.check_launch(taken.run)
        targets, estimate = launch_targets_and_estimate(taken.task, self.catalog(),
                                                        frozenset(self.providers),
                                                        degraded=self.degraded())  # fmt: skip
        self.check_budgets(taken.task.name, targets, estimate, over_budget)
        self.check_files(taken.run.workdir, taken.run.file_mounts, targets)
        taken = self.seal_secrets(taken)
        doc = LaunchDocument(run=taken.run, plans=tuple(targets), spec=taken.spec)
        auto = taken.task.resources.autostop
        if autostop_minutes is None and auto is not None:
            autostop_minutes = auto.idle_minutes
        rule = _AutostopRule(
            minutes=autostop_minutes,
            down=down if down is not None else (auto is not None and auto.down),
            gpu_below=auto.gpu_utilisation_below if auto is not None else None,
        )
        try:
            view = self._create(name, targets[0], doc, rule)
        except ClusterExists as exc:
            raise Conflict(f"{exc}: take it down first (gpulease down {name}) or pick another "
                           "--name") from None  # fmt: skip
        self.wake()
        ignored = ignored_field_warnings(taken.task.resources, (t.provider for t in targets))
        return {**view, "warnings": [*taken.warnings, *ignored]}

    def seal_secrets(self, taken: TakenTask) -> TakenTask:
        """The one place a launch's secret values leave the request (every launch path calls it
        once its checks passed, before the task's document is built): ``taken.secrets`` (NAME →
        SecretStr) are to be stored in the vault and the returned task's ``run.secret_set`` set
        to the id of their set. Nothing else may keep, log or store ``taken.secrets``. A task
        without secrets is returned as it is."""
        if not taken.secrets:
            return taken
        if self.vault is None:
            raise RuntimeError("this server has no vault for the task's secrets")
        set_id = self.vault.store(taken.secrets)
        return replace(taken, run=taken.run.model_copy(update={"secret_set": set_id}))

    def check_budgets(self, task_name: str | None, targets: Iterable[LaunchTarget],
                      estimate: float | None, over_budget: bool) -> None:  # fmt: skip
        """Raise :class:`~gpulease.server.budget_loop.OverBudget` when a ``block`` budget
        refuses a launch to ``targets``."""
        if self.budgets is not None:
            self.budgets.check_launch(task_name=task_name, providers={t.provider for t in targets},
                                      estimate=estimate, over_budget=over_budget)  # fmt: skip

    def check_files(
        self, workdir: str | None, file_mounts: Mapping[str, str], targets: Iterable[LaunchTarget]
    ) -> None:
        """Fail the launch up front (exit 2) when a workdir or file mount is missing or too
        big — or, when some plan's nodes do not share this machine's files, holds a link out."""
        remote = any(not self._shares_files(t.provider) for t in targets)
        check_sources(workdir, file_mounts, limit=self.file_limit, remote=remote)

    def _shares_files(self, provider: str) -> bool:
        found = self.providers.get(provider)
        return found is not None and found.shares_files

    def _create(
        self,
        name: str,
        target: LaunchTarget,
        doc: LaunchDocument,
        rule: _AutostopRule,
    ) -> dict[str, Any]:
        with session_scope(self.engine) as session:
            cluster, _intent = create_cluster(
                session,
                name=name,
                target=target,
                task=doc.to_json(),
                owner=self.owner,
                actor=ACTOR,
                now=self.clock.now(),
                autostop_minutes=rule.minutes,
                autostop_down=rule.down,
            )
            cluster.autostop_gpu_below = rule.gpu_below
            return cluster_view(session, cluster)

    def catalog(self) -> Any:
        with self._catalog_lock:
            if self._catalog is None:
                self._catalog = runtime_catalog(self.providers)
            return self._catalog

    def degraded(self) -> dict[Offer, str]:
        """Offers that delivered a node failing acceptance lately: launches rank them last."""
        with session_scope(self.engine) as session:
            return degraded_offers(session, self.clock.now())

    def list(self) -> list[dict[str, Any]]:
        with session_scope(self.engine) as session:
            return [cluster_view(session, c) for c in list_clusters(session)]

    def get(self, name: str, *, with_history: bool = False) -> dict[str, Any]:
        with session_scope(self.engine) as session:
            return cluster_view(session, self._find(session, name), with_history=with_history)

    def _find(self, session: Any, name: str) -> Cluster:
        cluster = get_cluster_by_name(session, name)
        if cluster is None:
            raise NotFound(f"no cluster named {name!r}")
        return cluster

    # ---- status changes ---------------------------------------------------------------------

    def _move(self, name: str, to: ClusterStatus, allowed: frozenset[ClusterStatus],
              done: frozenset[ClusterStatus], why: str) -> dict[str, Any]:  # fmt: skip
        for _ in range(5):  # a lost compare-and-set (the loop moved it) is retried on fresh data
            with session_scope(self.engine) as session:
                cluster = self._find(session, name)
                if cluster.status in done:
                    return cluster_view(session, cluster)
                if cluster.status not in allowed:
                    raise Conflict(f"cluster {name!r} is {cluster.status.value}: cannot {why}")
                now = self.clock.now()
                if set_status(session, cluster, to, actor=ACTOR, reason=why, now=now):
                    view = cluster_view(session, cluster)
                    break
        else:
            raise Conflict(f"cluster {name!r} keeps changing; try again")
        self.wake()
        return view

    def down(self, name: str) -> dict[str, Any]:
        live = frozenset(_C) - {_C.TERMINATING, _C.TERMINATED}
        return self._move(name, _C.TERMINATING, live,
                          frozenset({_C.TERMINATING, _C.TERMINATED}), "down")  # fmt: skip

    def stop(self, name: str) -> dict[str, Any]:
        self._require_stop_start(name)
        allowed = frozenset({_C.RUNNING, _C.SUCCEEDED, _C.FAILED})
        return self._move(name, _C.STOPPING, allowed, frozenset({_C.STOPPING, _C.STOPPED}), "stop")

    def start(self, name: str) -> dict[str, Any]:
        self._require_stop_start(name)
        done = frozenset({_C.STARTING, _C.SETTING_UP, _C.RUNNING, _C.SUCCEEDED, _C.FAILED})
        return self._move(name, _C.STARTING, frozenset({_C.STOPPED}), done, "start")

    def _require_stop_start(self, name: str) -> None:
        with session_scope(self.engine) as session:
            provider = self.providers.get(self._find(session, name).provider)
        if not isinstance(provider, SupportsStopStart):
            raise Conflict(f"cluster {name!r}: its provider cannot stop and start instances")

    def autostop(
        self,
        name: str,
        minutes: int | None,
        down: bool,
        *,
        gpu_below: float | KeepGpuRule | None = KEEP_GPU_RULE,
    ) -> dict[str, Any]:
        """Set the cluster's autostop: ``minutes`` None turns it off (the load rule too);
        ``gpu_below`` sets or (None) clears the load rule, ``KEEP_GPU_RULE`` keeps it."""
        if minutes is not None and minutes < 0:
            raise UserInputError("minutes: must be 0 or more")
        if isinstance(gpu_below, float | int) and not 0 < gpu_below <= 100:
            raise UserInputError("gpu_utilisation_below: a percentage above 0, at most 100")
        with session_scope(self.engine) as session:
            cluster = self._find(session, name)
            cluster.autostop_minutes, cluster.autostop_down = minutes, down
            if minutes is None:
                cluster.autostop_gpu_below = None
            elif not isinstance(gpu_below, KeepGpuRule):
                cluster.autostop_gpu_below = gpu_below
            record_activity(session, cluster.id, now=self.clock.now())
            view = cluster_view(session, cluster)
        self.wake()
        return view

    # ---- through the agents -----------------------------------------------------------------

    def _node(self, name: str, rank: int) -> tuple[NodeRef | None, str, ClusterStatus]:
        with session_scope(self.engine) as session:
            cluster = self._find(session, name)
            task_id = cluster_task_id(cluster.name, cluster.id, cluster.task)
            for node in reversed(list_nodes(session, cluster.id)):
                if node.node_rank == rank and node.state is NodeState.READY and node.agent_url:
                    ref = NodeRef(node.provider, node.instance_id, node.agent_url)
                    return ref, task_id, cluster.status
            if rank >= cluster.num_nodes or rank < 0:
                raise UserInputError(f"rank: the cluster has ranks 0..{cluster.num_nodes - 1}")
            return None, task_id, cluster.status

    def logs(
        self, name: str, *, offset: int = 0, rank: int = 0, limit: int | None = None,
        wait_s: float = 0.0,
    ) -> tuple[LogChunk, ClusterStatus]:  # fmt: skip
        """The task's output on node ``rank`` from byte ``offset``; waits up to ``wait_s`` for
        new bytes or a change of the cluster's status (a long poll: ``logs -f`` and ``launch``
        follow without hammering the agent)."""
        deadline = time.monotonic() + min(max(wait_s, 0.0), 30.0)
        first: ClusterStatus | None = None
        while True:
            ref, task_id, status = self._node(name, rank)
            first = first or status
            chunk = LogChunk(b"", offset, offset, False, TaskState.PENDING)
            if ref is not None:
                with contextlib.suppress(GpuleaseError):  # unreachable now: the client asks again
                    chunk = self.agents.agent(ref).logs(task_id, offset, limit)
            if chunk.data or chunk.complete or status is not first or time.monotonic() >= deadline:
                return chunk, status
            time.sleep(0.1)

    def ssh_target(self, name: str, rank: int = 0) -> dict[str, Any]:
        """How to log in to node ``rank`` over SSH (providers whose nodes are machines): host,
        port, user, and the paths of the key and known-hosts file on this server's machine."""
        ref, _task_id, status = self._node(name, rank)
        if ref is None:
            raise Conflict(f"cluster {name!r} is {status.value}: node {rank} is not up")
        provider = self.providers.get(ref.provider)
        if not isinstance(provider, SupportsSsh):
            raise Conflict(f"cluster {name!r}: {ref.provider} nodes have no SSH login")
        target = provider.ssh_target(ref.instance_id)
        from gpulease.providers.ssh import ssh_options

        return {"host": target.host, "port": target.port, "user": target.user,
                "key_file": str(target.key), "known_hosts": str(target.known_hosts),
                "destination": target.destination, "options": ssh_options(target)}  # fmt: skip

    def exec(
        self, name: str, command: str, *, rank: int = 0, timeout_s: float = 60.0
    ) -> ExecResult:
        ref, task_id, status = self._node(name, rank)
        if ref is None:
            raise Conflict(f"cluster {name!r} is {status.value}: node {rank} is not up")
        try:
            result = self.agents.agent(ref).exec(task_id, command, timeout_s)
        except Retryable as exc:
            raise AgentUnreachable(f"node {rank} did not answer: {exc}") from None
        except Permanent as exc:
            raise Conflict(f"cluster {name!r}: {exc}") from None
        with session_scope(self.engine) as session:
            cluster = self._find(session, name)
            record_activity(session, cluster.id, now=self.clock.now())
        return result
