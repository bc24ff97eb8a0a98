"""The state DB's bench results: :class:`BenchRun`, one row per node per ``gpulease bench
CLUSTER`` run (migration 0012) — where the node was (cluster, rank, instance, provider, region,
instance type, accelerator), when, whether the quick subset ran, the report's worst verdict and
the whole report as JSON (:class:`gpulease.bench.report.BenchReport`'s ``to_json``). Rows are
only ever added; they are the history that judges the next node of the same instance type and
that ``plan --observed`` summarises. Declared on the same :class:`~gpulease.state.models.Base`
(``models`` re-exports it). Moves no states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Boolean, Index, Integer, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from gpulease.state.models import Base


class BenchRun(Base):
    """One node's bench report. ``cluster`` is the cluster's name at the time (the row outlives
    the cluster); ``verdict`` the report's worst (``pass`` / ``warn`` / ``fail`` / ...)."""

    __tablename__ = "bench_runs"
    __table_args__ = (
        Index(None, "provider", "instance_type", "started_at"),
        Index(None, "started_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster: Mapped[str] = mapped_column(String(255))
    node_rank: Mapped[int] = mapped_column(Integer)
    instance_id: Mapped[str] = mapped_column(String(128))
    provider: Mapped[str] = mapped_column(String(64))
    region: Mapped[str | None] = mapped_column(String(64))
    instance_type: Mapped[str | None] = mapped_column(String(128))
    accelerator: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[float]
    quick: Mapped[bool] = mapped_column(Boolean)
    verdict: Mapped[str] = mapped_column(String(16))
    report: Mapped[dict[str, Any]]

    def view(self) -> dict[str, Any]:
        """The row as the API answers it (``GET /v1/bench``)."""
        return {"id": self.id, "cluster": self.cluster, "rank": self.node_rank,
                "instance_id": self.instance_id, "provider": self.provider,
                "region": self.region, "instance_type": self.instance_type,
                "accelerator": self.accelerator, "started_at": self.started_at,
                "quick": self.quick, "verdict": self.verdict,
                "report": self.report}  # fmt: skip


def list_bench_runs(
    session: Session,
    *,
    provider: str | None = None,
    instance_type: str | None = None,
    cluster: str | None = None,
    quick: bool | None = None,
    limit: int | None = None,
) -> Sequence[BenchRun]:
    """The stored runs, newest first, narrowed by what is given."""
    query = select(BenchRun).order_by(BenchRun.started_at.desc(), BenchRun.id.desc())
    if provider is not None:
        query = query.where(BenchRun.provider == provider)
    if instance_type is not None:
        query = query.where(BenchRun.instance_type == instance_type)
    if cluster is not None:
        query = query.where(BenchRun.cluster == cluster)
    if quick is not None:
        query = query.where(BenchRun.quick == quick)
    if limit is not None:
        query = query.limit(limit)
    return session.scalars(query).all()
