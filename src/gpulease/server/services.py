"""The server's operations on services — what ``/v1/services`` calls: ``serve up`` (parse the task
with its ``service:`` section, plan one replica like a task — spot and on-demand targets — write
the PENDING ``services`` row and open its endpoint on a free port of this host, kept), list,
show (:mod:`gpulease.server.service_views`), its recent load
(:mod:`gpulease.server.service_load`), ``serve update`` (a new document, version + 1: the
loop rolls the replicas), ``serve down`` and the logs of one replica.

States it moves (as the user's actor): a new service is PENDING; ``down``: any live status →
SHUTTING_DOWN (the services loop drains and terminates the replicas, then DOWN); ``update``
from FAILED → STARTING. Every call wakes the loop.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpulease.controller.service_document import ServiceDocument, ServiceSettings
from gpulease.controller.service_observe import replica_index
from gpulease.errors import UserInputError
from gpulease.providers.honoured import ignored_field_warnings
from gpulease.serve.autoscale import AutoscalePolicy
from gpulease.server.endpoints import Endpoints
from gpulease.server.planning import NoLaunchablePlan, launch_targets
from gpulease.server.service import ClusterService, Conflict, NotFound, check_name
from gpulease.server.service_load import LoadHistory
from gpulease.server.service_views import ServiceViews
from gpulease.server.tasks import TakenTask, take_task
from gpulease.spec import Task
from gpulease.state import (
    Cluster,
    LaunchTarget,
    Service,
    ServiceStatus,
    session_scope,
    set_status,
)
from gpulease.state.status import record_created
from gpulease.wire import LogChunk, TaskState

ACTOR = "user"
_S = ServiceStatus
_LIVE = frozenset(_S) - {_S.SHUTTING_DOWN, _S.DOWN}


class ServiceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: dict[str, Any]
    name: str | None = None
    workdir: str | None = None
    secrets: dict[str, SecretStr] = Field(default_factory=dict)  # the task's secrets' values


class ServiceOps:
    def __init__(
        self,
        engine: Engine,
        clusters: ClusterService,
        endpoints: Endpoints,
        *,
        wake: Callable[[], None] = lambda: None,
        load_history: LoadHistory | None = None,
    ) -> None:
        self.engine = engine
        self.clusters = clusters
        self.endpoints = endpoints
        self.wake = wake
        self.load_history = load_history
        self.views = ServiceViews(engine, endpoints)

    # ---- serve up / update ------------------------------------------------------------------

    def up(
        self,
        task_data: Mapping[str, Any],
        *,
        name: str | None = None,
        workdir: str | None = None,
        secrets: Mapping[str, SecretStr] | None = None,
    ) -> dict[str, Any]:
        taken = take_task(task_data, workdir=workdir, secrets=secrets)
        name = check_name(name or taken.task.name)
        self.clusters.registry_logins.check_launch(taken.run)
        doc = self._document(taken)
        now = self.clusters.clock.now()
        with session_scope(self.engine) as session:
            _free_name(session, name)
            row = Service(
                name=name, owner=self.clusters.owner, status=_S.PENDING, status_changed_at=now,
                task=doc.to_json(), version=1, endpoint_port=None,
                desired_replicas=doc.settings.min_replicas, autoscale={},
                decisions=[{"at": now, "from": 0, "to": doc.settings.min_replicas,
                            "reason": "serve up: replicas.min"}],
                created_at=now, updated_at=now,
            )  # fmt: skip
            record_created(session, row, actor=ACTOR, reason="serve up")
            service_id = row.id
        port = self.endpoints.open(service_id, None)
        with session_scope(self.engine) as session:
            found = session.get(Service, service_id)
            assert found is not None
            found.endpoint_port = port
        self.wake()
        return {**self.get(name), "warnings": self._warnings(taken, doc)}

    def update(
        self,
        name: str,
        task_data: Mapping[str, Any],
        *,
        workdir: str | None = None,
        secrets: Mapping[str, SecretStr] | None = None,
    ) -> dict[str, Any]:
        taken = take_task(task_data, workdir=workdir, secrets=secrets)
        self.clusters.registry_logins.check_launch(taken.run)
        doc = self._document(taken)
        for _ in range(5):  # a lost compare-and-set (the loop moved it) is retried on fresh data
            with session_scope(self.engine) as session:
                row = self._find(session, name)
                if row.status not in _LIVE:
                    raise Conflict(f"service {name!r} is {row.status.value}: cannot update")
                if row.status is _S.FAILED and not set_status(
                    session, row, _S.STARTING, actor=ACTOR, reason="serve update",
                    now=self.clusters.clock.now(),
                ):  # fmt: skip
                    continue
                row.task, row.version = doc.to_json(), row.version + 1
                if doc.policy is None:
                    row.desired_replicas = doc.settings.min_replicas
                else:
                    row.desired_replicas = doc.settings.clamp(row.desired_replicas)
                break
        else:
            raise Conflict(f"service {name!r} keeps changing; try again")
        self.wake()
        return {**self.get(name), "warnings": self._warnings(taken, doc)}

    def _document(self, taken: TakenTask) -> ServiceDocument:
        task = taken.task
        service = task.service
        if service is None:
            raise UserInputError(
                "service: the task has no service: section (a service needs at least "
                "service: {port: ..., readiness_probe: ...}; see docs/serving.md)"
            )
        spot, on_demand = self._targets(task, service.spot.spot_share > 0)
        self.clusters.check_files(taken.run.workdir, taken.run.file_mounts, (*spot, *on_demand))
        policy = asdict(AutoscalePolicy.from_spec(service)) if service.autoscale else None
        settings = ServiceSettings.from_service_spec(service.model_dump())  # seconds as floats
        taken = self.clusters.seal_secrets(taken)  # the one place the values leave the request
        return ServiceDocument(
            run=taken.run, settings=settings, spec=taken.spec,
            service=service.model_dump(mode="json", by_alias=True), policy=policy,
            spot=tuple(spot), on_demand=tuple(on_demand),
        )  # fmt: skip

    def _targets(
        self, task: Task, want_spot: bool
    ) -> tuple[list[LaunchTarget], list[LaunchTarget]]:
        catalog = self.clusters.catalog()
        launchable = frozenset(self.clusters.providers)
        found: dict[str, list[LaunchTarget]] = {"spot": [], "on_demand": []}
        errors: list[str] = []
        for pricing in ("spot", "on_demand"):
            if pricing == "spot" and (not want_spot or _spot_refused(task)):
                continue
            res = task.resources.model_copy(update={"use_spot": pricing == "spot"})
            variant = task.model_copy(update={"resources": res})
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    plans = launch_targets(
                        variant, catalog, launchable, top=30, degraded=self.clusters.degraded()
                    )
            except NoLaunchablePlan as exc:
                errors.append(str(exc))
                continue
            found[pricing] = [t for t in plans if t.pricing == pricing]
        if not found["spot"] and not found["on_demand"]:
            raise NoLaunchablePlan("; ".join(errors) or "no launchable plan for a replica")
        return found["spot"], found["on_demand"]

    def _warnings(self, taken: TakenTask, doc: ServiceDocument) -> list[str]:
        ignored = ignored_field_warnings(taken.task.resources, doc.providers)
        return [*taken.warnings, *ignored]

    # ---- read, down, logs -------------------------------------------------------------------

    def list(self) -> list[dict[str, Any]]:
        with session_scope(self.engine) as session:
            rows = list(session.scalars(select(Service).order_by(Service.id)))
            return [self.views.view(session, r) for r in rows]

    def get(self, name: str) -> dict[str, Any]:
        with session_scope(self.engine) as session:
            return self.views.view(session, self._find(session, name), with_history=True)

    def load(self, name: str, since: float | None = None) -> dict[str, Any]:
        """The service's recent load points (:mod:`gpulease.server.service_load`)."""
        with session_scope(self.engine) as session:
            service_id = self._find(session, name).id
        history = self.load_history
        points = history.points(service_id, since) if history is not None else []
        step = history.step_s if history is not None else None
        return {"name": name, "step_s": step, "points": points}

    def _find(self, session: Session, name: str) -> Service:
        row = session.scalar(select(Service).where(Service.name == name))
        if row is None:
            raise NotFound(f"no service named {name!r}")
        return row

    def down(self, name: str) -> dict[str, Any]:
        for _ in range(5):
            with session_scope(self.engine) as session:
                row = self._find(session, name)
                if row.status in (_S.SHUTTING_DOWN, _S.DOWN):
                    break
                if set_status(session, row, _S.SHUTTING_DOWN, actor=ACTOR, reason="serve down",
                              now=self.clusters.clock.now()):  # fmt: skip
                    break
        else:
            raise Conflict(f"service {name!r} keeps changing; try again")
        self.wake()
        return self.get(name)

    def logs(
        self, name: str, *, replica: int | None = None, offset: int = 0, wait_s: float = 0.0
    ) -> tuple[LogChunk, str, int | None]:
        """The output of replica ``replica`` (default: the newest live one)."""
        with session_scope(self.engine) as session:
            row = self._find(session, name)
            stmt = select(Cluster).where(Cluster.service_id == row.id).order_by(Cluster.id)
            clusters = list(session.scalars(stmt))
            if replica is None:
                live = [c for c in clusters if c.status.value not in ("terminating", "terminated")]
                chosen = (live or clusters)[-1:]
            else:
                chosen = [c for c in clusters if replica_index(c.name) == replica]
                if not chosen:
                    known = ", ".join(str(replica_index(c.name)) for c in clusters) or "none yet"
                    raise UserInputError(f"--replica: service {name!r} has no replica {replica} "
                                         f"(replicas: {known})")  # fmt: skip
            status = row.status.value
            target = (chosen[0].name, replica_index(chosen[0].name)) if chosen else None
        if target is None:
            return LogChunk(b"", offset, offset, False, TaskState.PENDING), status, None
        chunk, _cluster_status = self.clusters.logs(target[0], offset=offset, wait_s=wait_s)
        return chunk, status, target[1]


def _free_name(session: Session, name: str) -> None:
    """A DOWN service gives its name up; a live one keeps it."""
    old = session.scalar(select(Service).where(Service.name == name))
    if old is None:
        return
    if old.status is not _S.DOWN:
        raise Conflict(f"service {name!r} exists ({old.status.value}): take it down first "
                       f"(gpulease serve down {name}) or pick another --name")  # fmt: skip
    session.delete(old)
    session.flush()


def service_routes(router: APIRouter, ops: ServiceOps) -> None:
    @router.post("/services", status_code=201)
    def serve_up(body: ServiceBody) -> dict[str, Any]:
        return ops.up(body.task, name=body.name, workdir=body.workdir, secrets=body.secrets)

    @router.get("/services")
    def serve_list() -> dict[str, Any]:
        return {"services": ops.list()}

    @router.get("/services/{name}")
    def serve_status(name: str) -> dict[str, Any]:
        return ops.get(name)

    @router.get("/services/{name}/load")
    def serve_load(name: str, since: float | None = None) -> dict[str, Any]:
        return ops.load(name, since)

    @router.post("/services/{name}/update")
    def serve_update(name: str, body: ServiceBody) -> dict[str, Any]:
        return ops.update(name, body.task, workdir=body.workdir, secrets=body.secrets)

    @router.delete("/services/{name}")
    def serve_down(name: str) -> dict[str, Any]:
        return ops.down(name)

    @router.get("/services/{name}/logs")
    def serve_logs(
        name: str, replica: int | None = None, offset: int = 0, wait_s: float = 0.0
    ) -> Response:
        chunk, status, index = ops.logs(name, replica=replica, offset=max(offset, 0),
                                        wait_s=wait_s)  # fmt: skip
        headers = {
            "X-Gpulease-Next-Offset": str(chunk.next_offset),
            "X-Gpulease-Log-Complete": "true" if chunk.complete else "false",
            "X-Gpulease-Task-State": chunk.state.value,
            "X-Gpulease-Service-Status": status,
            "X-Gpulease-Replica": str(index) if index is not None else "",
        }
        return Response(chunk.data, media_type="application/octet-stream", headers=headers)


def _spot_refused(task: Task) -> bool:
    """Whether the task itself says ``use_spot: false``. A service's ``spot:`` mix asks for spot
    replicas; only a ``use_spot: false`` the user wrote (not the field's default) refuses them."""
    res = task.resources
    return "use_spot" in res.model_fields_set and res.use_spot is False
