"""The server's operations on managed jobs — what ``/v1/jobs`` calls: launch (plan the spot and
on-demand targets — a pool job's are its pool's —, resolve checkpoint sync and the job's policy,
write the PENDING job), queue, show (with the cost report and history), cancel, and logs of the
current attempt.

States it moves: a new job is PENDING; ``cancel`` sets ``cancel_requested`` (the jobs loop moves
the job to CANCELLING and, once the provider confirms its nodes gone, CANCELLED).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import SecretStr
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gpulease import config
from gpulease.controller.job_document import JobDocument, JobPolicy
from gpulease.controller.job_loop import JobReconciler, job_task_id
from gpulease.errors import UserInputError
from gpulease.providers.honoured import ignored_field_warnings
from gpulease.server.planning import NoLaunchablePlan, expected_hours, launch_targets
from gpulease.server.pools import pool_targets
from gpulease.server.service import ClusterService, NotFound, check_name
from gpulease.server.tasks import take_task
from gpulease.spec import Task
from gpulease.state import (
    Job,
    JobStatus,
    LaunchTarget,
    create_job,
    get_job,
    history,
    job_clusters,
    list_jobs,
    session_scope,
)
from gpulease.state.ledger import (
    job_spend,
)
from gpulease.wire import CheckpointSync, LogChunk, TaskState

ACTOR = "user"
# Providers whose nodes see this server's home: local and sim run here; a Slurm cluster's
# compute nodes share the login node's home in the usual setup (else give checkpoint.store).
SHARED_HOME_PROVIDERS = frozenset({"local", "sim", "slurm"})
DEFAULT_SYNC_S = 300.0
_FINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class JobService:
    def __init__(
        self,
        engine: Engine,
        clusters: ClusterService,
        loop: JobReconciler,
        *,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.engine = engine
        self.clusters = clusters
        self.loop = loop
        self.wake = wake

    # ---- launch -----------------------------------------------------------------------------

    def launch(
        self,
        task_data: Mapping[str, Any],
        *,
        name: str | None = None,
        workdir: str | None = None,
        over_budget: bool = False,
        secrets: Mapping[str, SecretStr] | None = None,
    ) -> dict[str, Any]:
        taken = take_task(task_data, workdir=workdir, secrets=secrets)
        task = taken.task
        name = check_name(name or task.name or "job")
        self.clusters.registry_logins.check_launch(taken.run)
        pool = task.resources.pool
        spot, on_demand = self._pool_targets(pool) if pool else self._targets(task)
        # a job has no single plan estimate: a block budget refuses it only at its limit
        self.clusters.check_budgets(task.name, (*spot, *on_demand), None, over_budget)
        self.clusters.check_files(taken.run.workdir, taken.run.file_mounts, (*spot, *on_demand))
        taken = self.clusters.seal_secrets(taken)  # the one place the values leave the request
        with session_scope(self.engine) as session:
            clock_name = self.loop.clock_name(frozenset(t.provider for t in (*spot, *on_demand)))
            now_job = self.loop.job_clock(clock_name).now()
            job = create_job(
                session, name=name, task={}, owner=self.clusters.owner, actor=ACTOR,
                now=self.clusters.clock.now(), clock=clock_name, started_at_job=now_job,
            )  # fmt: skip
            task_id = job_task_id(name, job.id)
            doc = JobDocument(
                run=taken.run, task_id=task_id, spec=taken.spec, spot=tuple(spot),
                on_demand=tuple(on_demand),
                policy=self._policy(task), checkpoint=_checkpoint(task, task_id, spot + on_demand),
                pool=pool,
            )  # fmt: skip
            job.task = doc.to_json()
            view = job_view(session, job)
        self.wake()
        ignored = ignored_field_warnings(task.resources, (t.provider for t in (*spot, *on_demand)))
        return {**view, "warnings": [*taken.warnings, *ignored, *_job_ignores(task)]}

    def _targets(self, task: Task) -> tuple[list[LaunchTarget], list[LaunchTarget]]:
        catalog = self.clusters.catalog()
        launchable = frozenset(self.clusters.providers)
        spot: list[LaunchTarget] = []
        on_demand: list[LaunchTarget] = []
        errors: list[str] = []
        for pricing, found in (("spot", spot), ("on_demand", on_demand)):
            if pricing == "spot" and task.resources.use_spot is False:
                continue
            variant = task.model_copy(
                update={
                    "resources": task.resources.model_copy(update={"use_spot": pricing == "spot"})
                }
            )
            try:
                found += [t for t in launch_targets(variant, catalog, launchable, top=30,
                                                 degraded=self.clusters.degraded())
                          if t.pricing == pricing]  # fmt: skip
            except NoLaunchablePlan as exc:
                errors.append(str(exc))
        if not spot and not on_demand:
            raise NoLaunchablePlan("; ".join(errors) or "no launchable plan")
        if task.resources.use_spot is True and not spot:
            raise NoLaunchablePlan(f"use_spot: true but no spot offer: {'; '.join(errors)}")
        return spot, on_demand

    def _pool_targets(self, pool: str) -> tuple[list[LaunchTarget], list[LaunchTarget]]:
        """A pool job's targets: its pool's (it runs on the pool's nodes, never on its own)."""
        with session_scope(self.engine) as session:
            return pool_targets(session, pool)

    def _policy(self, task: Task) -> JobPolicy:
        recovery = task.job_recovery
        resources = task.resources
        use_spot = "auto" if resources.use_spot == "auto" else str(resources.use_spot).lower()
        hours = None
        if use_spot == "auto" and task.deadline_hours is not None:
            hours = expected_hours(
                task, self.clusters.catalog(), frozenset(self.clusters.providers)
            )
        nodes = task.num_nodes or 1
        return JobPolicy(
            use_spot=use_spot,
            strategy=recovery.strategy if recovery else "next_region",
            max_restarts_on_errors=recovery.max_restarts_on_errors if recovery else 0,
            zone_cooldown_s=(recovery.zone_cooldown_hours if recovery else 0.5) * 3600.0,
            deadline_s=task.deadline_hours * 3600.0 if task.deadline_hours else None,
            budget_usd=task.budget_usd,
            job_s=hours * 3600.0 if hours else None,
            max_spot_price=resources.max_spot_price * nodes if resources.max_spot_price else None,
            spot_price_ratio=resources.spot_price_ratio,
        )

    # ---- read -------------------------------------------------------------------------------

    def list(self, *, all_jobs: bool = True) -> list[dict[str, Any]]:
        with session_scope(self.engine) as session:
            return [job_view(session, j) for j in list_jobs(session, include_done=all_jobs)]

    def get(self, job_id: int, *, with_history: bool = False) -> dict[str, Any]:
        with session_scope(self.engine) as session:
            return job_view(session, self._find(session, job_id), with_history=with_history)

    def _find(self, session: Session, job_id: int) -> Job:
        job = get_job(session, job_id)
        if job is None:
            raise NotFound(f"no managed job with id {job_id}")
        return job

    # ---- cancel and logs --------------------------------------------------------------------

    def cancel(self, job_id: int) -> dict[str, Any]:
        with session_scope(self.engine) as session:
            job = self._find(session, job_id)
            if job.status not in _FINAL:
                job.cancel_requested = True
            view = job_view(session, job)
        self.wake()
        return view

    def logs(
        self, job_id: int, *, attempt: int | None = None, offset: int = 0, wait_s: float = 0.0
    ) -> tuple[LogChunk, dict[str, Any]]:
        """The output of attempt ``attempt`` (default: the current one) from byte ``offset``."""
        with session_scope(self.engine) as session:
            job = self._find(session, job_id)
            clusters = job_clusters(session, job.id)
            wanted = attempt if attempt is not None else job.attempt
            names = [c.name for c in clusters if c.name.endswith(f"-{job.id}-{wanted}")]
            if not names and wanted == job.attempt:  # a pool node (docs/pools.md) holding it
                names = [c.name for c in clusters if c.id == job.cluster_id]
            view = job_view(session, job)
        if not names:
            return LogChunk(b"", offset, offset, False, TaskState.PENDING), view
        chunk, _status = self.clusters.logs(names[0], offset=offset, wait_s=wait_s)
        return chunk, view


def _checkpoint(task: Task, task_id: str, targets: list[LaunchTarget]) -> CheckpointSync | None:
    """The job's checkpoint sync: the task's ``checkpoint`` section, with a store under the
    server's home when every target's nodes see that home (local, sim, slurm) and none was
    given."""
    section = task.checkpoint
    store = section.store if section else None
    if store is None and {t.provider for t in targets} <= SHARED_HOME_PROVIDERS:
        store = f"local://{config.home() / 'checkpoints' / task_id}"
    if store is None:
        return None
    if not re.match(r"^(local://|s3://|/)", store):
        raise UserInputError(
            f"checkpoint.store: {store!r} is not local://PATH, an absolute path or s3://BUCKET/..."
        )
    sync_hours = section.sync_interval_hours if section else None
    return CheckpointSync(
        dir=section.dir if section else None,
        store=store,
        sync_s=sync_hours * 3600.0 if sync_hours else DEFAULT_SYNC_S,
    )


def job_view(session: Session, job: Job, *, with_history: bool = False) -> dict[str, Any]:
    doc = JobDocument.from_json(job.task) if job.task else None
    clusters = job_clusters(session, job.id)
    current = next((c for c in clusters if c.id == job.cluster_id), None)
    changes = history(session, job)
    view: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "status": job.status.value,
        "reason": changes[-1].reason if changes else "",
        "attempt": job.attempt,
        "cluster": current.name if current else None,
        "cluster_status": current.status.value if current else None,
        "where": _where(current),
        "pricing": job.pricing,
        "recoveries": job.recoveries,
        "restarts": job.restarts,
        "failure": job.failure,
        "cancel_requested": job.cancel_requested,
        "clock": job.clock,
        "task_id": doc.task_id if doc else None,
        "checkpoint_store": doc.checkpoint.store if doc and doc.checkpoint else None,
        "secrets": list(doc.run.secret_names) if doc else [],  # names only, never a value
        "cost": _cost_report(job, doc, job_spend(session, job.id)),
        "blocked": list(job.blocked),
        "events": list(job.events),
        "attempts": [
            {
                "name": c.name,
                "status": c.status.value,
                "pricing": c.pricing,
                "where": _where(c),
                "failure": c.failure,
                "task_failure": c.task_failure if c.failure == "task" else None,
            }
            for c in clusters
        ],
        "created_at": job.created_at,
        "status_changed_at": job.status_changed_at,
    }
    if with_history:
        view["history"] = [
            {
                "from": c.from_status,
                "to": c.to_status,
                "at": c.at,
                "actor": c.actor,
                "reason": c.reason,
            }
            for c in changes
        ]
    return view


def _where(cluster: Any) -> str | None:
    if cluster is None:
        return None
    parts = (cluster.provider, cluster.region, cluster.zone)
    return "/".join(str(p) for p in parts if p)


def _cost_report(job: Job, doc: JobDocument | None, spent: float) -> dict[str, Any]:
    """Spend (``spent``: the cost ledger's sum for the job) against running the same hours on
    the cheapest on-demand offer."""
    od_price = doc.on_demand_price if doc else None
    run_h = job.run_s / 3600.0
    od_cost = od_price * run_h if od_price is not None else None
    saving = None
    if od_cost:
        saving = round(100.0 * (1.0 - spent / od_cost), 1)
    policy = doc.policy if doc else None
    return {
        "spent_usd": round(spent, 4),
        "run_hours": round(run_h, 4),
        "on_demand_price_per_hour": od_price,
        "on_demand_equivalent_usd": round(od_cost, 4) if od_cost is not None else None,
        "saving_pct": saving,
        "budget_usd": policy.budget_usd if policy else None,
        "deadline_hours": policy.deadline_s / 3600.0 if policy and policy.deadline_s else None,
    }


def _job_ignores(task: Task) -> list[str]:
    """Task fields a managed job does not use, one line each."""
    if task.resources.autostop is None:
        return []
    return [
        "resources.autostop: ignored by managed jobs (a job ends its attempt clusters itself "
        "when it ends; autostop is for clusters from gpulease launch)"
    ]
