"""What ``serve status`` shows of a service: its endpoint, replicas (where, spot or not, $ per
hour, state), the load balancer's measures (QPS, p50/p95 latency, in flight, load), the cost
(the cost ledger's spend of its replica clusters, and that ÷ the requests served as $ per 1k
requests) and the history of its scaling decisions. Reads only; moves no states.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from gpulease.controller.service_document import ServiceDocument
from gpulease.controller.service_observe import replica_index
from gpulease.server.endpoints import Endpoints
from gpulease.state import Cluster, ClusterStatus, Service, history
from gpulease.state.models import LedgerEntry

_C = ClusterStatus
_BILLED = frozenset({_C.PROVISIONING, _C.SETTING_UP, _C.RUNNING, _C.STARTING, _C.STOPPING})


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000.0, 3) if seconds is not None else None


class ServiceViews:
    def __init__(self, engine: Engine, endpoints: Endpoints) -> None:
        self.engine = engine
        self.endpoints = endpoints

    def view(self, session: Session, row: Service, *, with_history: bool = False) -> dict[str, Any]:
        doc = ServiceDocument.from_json(row.task)
        stmt = select(Cluster).where(Cluster.service_id == row.id).order_by(Cluster.id)
        clusters = list(session.scalars(stmt))
        changes = history(session, row)
        replicas = [self._replica(row, c) for c in clusters]
        stats = self._load(row, doc, replicas)
        spent = self._spent(session, [c.id for c in clusters])
        requests = stats.get("requests") or 0
        view: dict[str, Any] = {
            "id": row.id,
            "name": row.name,
            "status": row.status.value,
            "reason": changes[-1].reason if changes else "",
            "version": row.version,
            "endpoint": self.endpoints.url(row.endpoint_port),
            "endpoint_port": row.endpoint_port,
            "desired_replicas": row.desired_replicas,
            "min_replicas": doc.settings.min_replicas,
            "max_replicas": doc.settings.max_replicas,
            "autoscale": doc.policy is not None,
            "secrets": list(doc.run.secret_names),  # names only, never a value
            "replicas": [r for r in replicas if r["status"] != "terminated"],
            "replica_history": len(replicas),
            "load": stats,
            "cost": {
                "spent_usd": round(spent, 6),
                "per_hour_usd": round(
                    sum(r["price_per_hour"] or 0.0 for r in replicas if r["billed"]), 6
                ),
                "per_1k_requests_usd": round(1000.0 * spent / requests, 6) if requests else None,
            },
            "decisions": list(row.decisions),
            "last_error": row.last_error,
            "created_at": row.created_at,
            "status_changed_at": row.status_changed_at,
        }
        if with_history:
            view["history"] = [
                {"from": c.from_status, "to": c.to_status, "at": c.at, "actor": c.actor,
                 "reason": c.reason}
                for c in changes
            ]  # fmt: skip
        return view

    def _replica(self, row: Service, cluster: Cluster) -> dict[str, Any]:
        behind = self.endpoints.replica_state(row.id, cluster.id)
        state = behind or _state_of(cluster.status)
        if cluster.status in (_C.TERMINATING, _C.TERMINATED):
            state = cluster.status.value
        where = "/".join(str(p) for p in (cluster.provider, cluster.region, cluster.zone) if p)
        return {
            "index": replica_index(cluster.name),
            "id": cluster.id,
            "cluster": cluster.name,
            "version": cluster.replica_version,
            "status": cluster.status.value,
            "state": state,
            "where": where,
            "instance_type": cluster.instance_type,
            "accelerator": cluster.accelerator,
            "spot": cluster.pricing == "spot",
            "pricing": cluster.pricing,
            "price_per_hour": cluster.price_per_hour,
            "billed": cluster.status in _BILLED,
        }

    def _load(self, row: Service, doc: ServiceDocument, replicas: list[dict[str, Any]]
              ) -> dict[str, Any]:  # fmt: skip
        stats = self.endpoints.stats(row.id)
        if stats is None:
            return {"qps": 0.0, "in_flight": 0, "queued": 0, "latency_p50_ms": None,
                    "latency_p95_ms": None, "requests": 0, "failed": 0, "load": None}  # fmt: skip
        ready = sum(1 for r in replicas if r["state"] == "ready")
        target = float((doc.policy or {}).get("target_per_replica") or 0.0)
        load = stats.in_flight / (target * ready) if target and ready else None
        return {
            "qps": round(stats.qps, 3),
            "in_flight": stats.in_flight,
            "queued": stats.queued,
            "latency_p50_ms": _ms(stats.latency_p50_s),
            "latency_p95_ms": _ms(stats.latency_p95_s),
            "requests": stats.requests,
            "failed": stats.failed,
            "load": round(load, 4) if load is not None else None,
            "per_replica": [
                {
                    "id": r.id,
                    "in_flight": r.in_flight,
                    "requests": r.requests,
                    "failed": r.failed,
                    "qps": round(r.qps, 3),
                    "latency_p50_ms": _ms(r.latency_p50_s),
                    "latency_p95_ms": _ms(r.latency_p95_s),
                }
                for r in stats.replicas
            ],
        }

    def _spent(self, session: Session, cluster_ids: list[int]) -> float:
        if not cluster_ids:
            return 0.0
        stmt = select(func.coalesce(func.sum(LedgerEntry.cost_usd), 0.0)).where(
            LedgerEntry.cluster_id.in_(cluster_ids)
        )
        return float(session.scalar(stmt) or 0.0)


def _state_of(status: ClusterStatus) -> str:
    if status in (_C.PENDING, _C.PROVISIONING):
        return "provisioning"
    if status in (_C.SETTING_UP, _C.STARTING, _C.RUNNING):
        return "starting"
    return str(status)
