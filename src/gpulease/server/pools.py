"""The server's operations on pools — what ``/v1/pools`` calls: up (plan a node's launch targets
from the pool file's resources, write the PENDING pool), list, status (its nodes, the jobs
waiting for it, its sizing decisions) and down; and the routes themselves
(:func:`pool_routes`). A managed job's launch asks :func:`pool_targets` for the targets of the
pool it names (``resources.pool``).

States it moves: a new pool is PENDING; ``down`` moves a live pool to SHUTTING_DOWN (the pools
loop terminates every node and, once the provider confirms them gone, moves it DOWN).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpulease.controller.pool_jobs import waiting_jobs
from gpulease.controller.pool_loop import create_pool, pool_nodes
from gpulease.controller.pool_rules import PoolDocument
from gpulease.controller.pool_sizing import SizingPolicy
from gpulease.errors import UserInputError
from gpulease.providers.honoured import ignored_field_warnings
from gpulease.server.planning import launch_targets
from gpulease.server.service import ClusterService, Conflict, NotFound, check_name
from gpulease.server.tasks import take_task
from gpulease.spec import Task
from gpulease.state import (
    Cluster,
    LaunchTarget,
    Pool,
    PoolStatus,
    history,
    session_scope,
    set_status,
)

ACTOR = "user"
_P = PoolStatus
_LIVE = frozenset({_P.PENDING, _P.READY, _P.FAILED})


class PoolUpBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: dict[str, Any]
    name: str | None = None
    workdir: str | None = None
    secrets: dict[str, SecretStr] = Field(default_factory=dict)  # the task's secrets' values


def sizing_of(task: Task) -> SizingPolicy:
    """The pool file's ``pool:`` section as sizing bounds; bad input when there is none."""
    section = task.pool
    if section is None:
        raise UserInputError("pool: the file has no pool: section (min_nodes, max_nodes, "
                             "idle_timeout); a task for a pool needs one")  # fmt: skip
    return SizingPolicy(min_nodes=section.min_nodes, max_nodes=section.max_nodes,
                        idle_timeout_s=section.idle_timeout_s)  # fmt: skip


def pool_targets(session: Session, name: str) -> tuple[list[LaunchTarget], list[LaunchTarget]]:
    """(spot, on-demand) launch targets of the live pool ``name`` — a pool job's targets (its
    cost report's yardstick); bad input naming ``resources.pool`` when there is no such pool."""
    pool = session.scalars(select(Pool).where(Pool.name == name)).first()
    if pool is None or pool.status not in _LIVE:
        raise UserInputError(
            f"resources.pool: no live pool named {name!r} (start one with gpulease pool up)"
        )
    plans = PoolDocument.from_json(pool.task).plans
    return [p for p in plans if p.pricing == "spot"], [p for p in plans if p.pricing != "spot"]


class PoolService:
    def __init__(
        self, engine: Engine, clusters: ClusterService, *, wake: Callable[[], None] = lambda: None
    ) -> None:
        self.engine = engine
        self.clusters = clusters
        self.wake = wake

    def up(
        self,
        task_data: Mapping[str, Any],
        *,
        name: str | None = None,
        workdir: str | None = None,
        secrets: Mapping[str, SecretStr] | None = None,
    ) -> dict[str, Any]:
        taken = take_task(task_data, workdir=workdir, secrets=secrets)
        task = taken.task
        sizing = sizing_of(task)
        name = check_name(name or task.name)
        self.clusters.registry_logins.check_launch(taken.run)
        catalog = self.clusters.catalog()
        targets = launch_targets(
            task,
            catalog,
            frozenset(self.clusters.providers),
            top=10,
            degraded=self.clusters.degraded(),
        )
        self.clusters.check_files(taken.run.workdir, taken.run.file_mounts, targets)
        taken = self.clusters.seal_secrets(taken)  # the one place the values leave the request
        doc = PoolDocument(run=taken.run, plans=tuple(targets), sizing=sizing, spec=taken.spec)
        now = self.clusters.clock.now()
        with session_scope(self.engine) as session:
            old = self._by_name(session, name)
            if old is not None and old.status is not _P.DOWN:
                raise Conflict(f"pool {name!r} exists ({old.status.value}): take it down first "
                               f"(gpulease pool down {name}) or pick another --name")  # fmt: skip
            if old is not None:
                session.delete(old)
                session.flush()
            pool = create_pool(session, name=name, doc=doc, owner=self.clusters.owner,
                               actor=ACTOR, now=now)  # fmt: skip
            view = pool_view(session, pool)
        self.wake()
        ignored = ignored_field_warnings(task.resources, (t.provider for t in targets))
        return {**view, "warnings": [*taken.warnings, *ignored]}

    def list(self) -> list[dict[str, Any]]:
        with session_scope(self.engine) as session:
            pools = session.scalars(select(Pool).order_by(Pool.id))
            return [pool_view(session, p) for p in pools]

    def get(self, name: str) -> dict[str, Any]:
        with session_scope(self.engine) as session:
            return pool_view(session, self._find(session, name), with_history=True)

    def down(self, name: str) -> dict[str, Any]:
        now = self.clusters.clock.now()
        with session_scope(self.engine) as session:
            pool = self._find(session, name)
            if pool.status in _LIVE:
                set_status(session, pool, _P.SHUTTING_DOWN, actor=ACTOR, reason="pool down",
                           now=now)  # fmt: skip
            view = pool_view(session, pool)
        self.wake()
        return view

    def _by_name(self, session: Session, name: str) -> Pool | None:
        return session.scalars(select(Pool).where(Pool.name == name)).first()

    def _find(self, session: Session, name: str) -> Pool:
        pool = self._by_name(session, name)
        if pool is None:
            raise NotFound(f"no pool named {name!r}")
        return pool


def pool_view(session: Session, pool: Pool, *, with_history: bool = False) -> dict[str, Any]:
    doc = PoolDocument.from_json(pool.task)
    changes = history(session, pool)
    nodes = []
    for node in pool_nodes(session, pool.id):
        row = session.get(Cluster, node.id)
        assert row is not None
        nodes.append({
            "name": node.name, "status": node.status.value, "state": node.kind,
            "job_id": node.job_id, "where": "/".join(str(p) for p in (row.provider, row.region,
                                                                     row.zone) if p),
            "pricing": row.pricing, "price_per_hour": row.price_per_hour,
            "idle_since": node.status_changed_at if node.kind == "idle" else None,
        })  # fmt: skip
    view: dict[str, Any] = {
        "name": pool.name,
        "status": pool.status.value,
        "reason": changes[-1].reason if changes else "",
        "min_nodes": doc.sizing.min_nodes,
        "max_nodes": doc.sizing.max_nodes,
        "idle_timeout_s": doc.sizing.idle_timeout_s,
        "secrets": list(doc.run.secret_names),  # names only, never a value
        "desired_nodes": pool.desired_nodes,
        "nodes": nodes,
        "waiting_jobs": waiting_jobs(session, pool.name),
        "price_per_hour": sum((n["price_per_hour"] or 0.0 for n in nodes), 0.0),
        "decisions": list(pool.decisions),
        "last_error": pool.last_error,
        "created_at": pool.created_at,
    }
    if with_history:
        view["history"] = [{"from": c.from_status, "to": c.to_status, "at": c.at,
                            "actor": c.actor, "reason": c.reason} for c in changes]  # fmt: skip
    return view


def pool_routes(router: APIRouter, pools: PoolService) -> None:
    """``POST /v1/pools``, ``GET /v1/pools``, ``GET /v1/pools/{name}``,
    ``POST /v1/pools/{name}/down``."""

    @router.post("/pools", status_code=201)
    def pool_up(body: PoolUpBody) -> dict[str, Any]:
        return pools.up(body.task, name=body.name, workdir=body.workdir, secrets=body.secrets)

    @router.get("/pools")
    def pool_list() -> dict[str, Any]:
        return {"pools": pools.list()}

    @router.get("/pools/{name}")
    def pool_status(name: str) -> dict[str, Any]:
        return pools.get(name)

    @router.post("/pools/{name}/down")
    def pool_down(name: str) -> dict[str, Any]:
        return pools.down(name)
