"""A seeded history for the audit tests, written through the real schema (SQLite): clusters,
nodes, jobs, status changes, instance ledger rows, telemetry points, and a small catalog CSV.

Every figure is round so the tests' dollars can be computed by hand; see test_audit.py."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gpulease.catalog import Catalog
from gpulease.state import make_engine, session_scope, upgrade
from gpulease.state.machines import ClusterStatus, JobStatus, NodeState
from gpulease.state.models import (
    Cluster,
    Job,
    Node,
    StatusChange,
    TelemetryPoint,
)
from tests.cost.ledger_rows import ledger_entry

H, D = 3600.0, 86400.0
NOW = 1_800_000_000.0  # 2027-01-15 08:00 UTC

HEADER = (
    "provider,region,zone,instance_type,accelerator,part,gpu_count,gpu_memory_gb,vcpus,"
    "cpu_arch,ram_gb,nvme_gb,network_gbps,fabric,price_on_demand,price_spot,"
    "price_reserved_1y,price_reserved_3y,interruption_band,certifications,as_of,source,"
    "notes"
)
OFFERS = [  # region, zone, type, accelerator, part, memory, on-demand, spot, reserved 1y
    ("us-east-1", "use1-az1", "g5.xlarge", "A10G", "A10G", 24, 1.00, 0.40, "0.60"),
    ("us-west-2", "usw2-az1", "g5.xlarge", "A10G", "A10G", 24, 0.80, 0.30, ""),
    ("eu-west-1", "euw1-az1", "g5.xlarge", "A10G", "A10G", 24, 0.70, 0.25, "0.42"),
    ("us-east-1", "use1-az1", "g4dn.xlarge", "T4", "T4", 16, 0.50, 0.20, ""),
    ("us-east-1", "use1-az1", "x.a100", "A100-80GB", "A100-SXM4-80GB", 80, 4.00, 1.60, ""),
]


def day(at: float) -> date:
    return datetime.fromtimestamp(at, tz=UTC).date()


def write_catalog(path: Path, *, age_days: int, now: float = NOW) -> Catalog:
    as_of = (day(now) - timedelta(days=age_days)).isoformat()
    lines = [HEADER]
    for region, zone, itype, acc, part, mem, od, spot, r1y in OFFERS:
        lines.append(
            f"aws,{region},{zone},{itype},{acc},{part},1,{mem},8,x86_64,32,100,10,"
            f"ethernet,{od},{spot},{r1y},,-1,,{as_of},test,"
        )
    path.write_text("\n".join(lines) + "\n")
    return Catalog.from_csv(path)


def new_engine(tmp: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp / 'state.db'}")
    upgrade(engine)
    return engine


class History:
    """Writes one cluster (with its node, ledger rows, points, changes) at a time."""

    def __init__(self, session: Session, now: float) -> None:
        self.session = session
        self.start = now - 90 * D

    def job(
        self,
        job_id: int,
        name: str,
        policy: Mapping[str, Any],
        spot: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.session.add(
            Job(
                id=job_id,
                name=name,
                owner="alice",
                status=JobStatus.RUNNING,
                status_changed_at=self.start,
                clock="system",
                attempt=1,
                cluster_id=None,
                pricing="on_demand",
                recoveries=0,
                restarts=0,
                blocked=[],
                events=[],
                cost_usd=0.0,
                run_s=0.0,
                started_at_job=self.start,
                cancel_requested=False,
                created_at=self.start,
                updated_at=self.start,
                task={
                    "version": 2,
                    "spec": {},
                    "policy": dict(policy),
                    "spot": list(spot),
                    "on_demand": [],
                },
            )
        )

    def cluster(
        self,
        cid: int,
        name: str,
        *,
        itype: str,
        accelerator: str,
        region: str,
        price: float,
        start: float,
        end: float,
        pricing: str = "on_demand",
        regions: list[str] | None = None,
        autostop: int | None = 10,
        job_id: int | None = None,
        closed: bool = True,
        status: ClusterStatus = ClusterStatus.RUNNING,
    ) -> None:
        spec = {
            "resources": {
                "accelerators": f"{accelerator}:1",
                **({"regions": regions} if regions else {}),
            }
        }
        self.session.add(
            Cluster(
                id=cid,
                name=name,
                owner="alice",
                status=status,
                status_changed_at=start,
                provider="aws",
                region=region,
                zone=None,
                instance_type=itype,
                accelerator=accelerator,
                gpus_per_node=1,
                num_nodes=1,
                pricing=pricing,
                price_per_hour=price,
                task={"version": 2, "spec": spec},
                autostop_minutes=autostop,
                autostop_down=False,
                failover_history=[],
                job_id=job_id,
                created_at=start,
                updated_at=start,
            )
        )
        self.session.add(
            Node(
                id=cid,
                cluster_id=cid,
                node_rank=0,
                instance_id=f"i-{cid}",
                provider="aws",
                state=NodeState.READY,
                status_changed_at=start,
                missed_heartbeats=0,
                created_at=start,
                updated_at=start,
            )
        )
        self.session.add(
            ledger_entry(
                started_at=start,
                ended_at=end,
                entry_key=f"instance:{cid}:{start}",
                node_id=cid,
                instance_id=f"i-{cid}",
                cluster_id=cid,
                cluster_name=name,
                job_id=job_id,
                task_name=name,
                provider="aws",
                region=region,
                instance_type=itype,
                accelerator=accelerator,
                pricing=pricing,
                price_per_hour=price,
                billing="second:60",
                closed=closed,
            )
        )
        self.change(cid, "pending", start)
        self.change(cid, "running", start)

    def change(self, cid: int, to: str, at: float) -> None:
        self.session.add(
            StatusChange(
                entity_kind="cluster",
                entity_id=cid,
                from_status=None,
                to_status=to,
                at=at,
                actor="test",
                reason="seeded",
            )
        )

    def points(
        self,
        cid: int,
        name: str,
        start: float,
        count: int,
        *,
        util: float,
        used_mb: float,
        total_mb: float,
        job_id: int | None = None,
        train: Mapping[str, float] | None = None,
        resolution_s: int = 60,
    ) -> None:
        for i in range(count):
            gpu = {
                "index": 0,
                "name": "gpu",
                "utilization_pct": util,
                "memory_used_mb": used_mb,
                "memory_total_mb": total_mb,
            }
            data: dict[str, Any] = {"gpus": [gpu], "node": None, "peers": []}
            if train is not None:
                data["train"] = {"step": i, **train}
            self.session.add(
                TelemetryPoint(
                    cluster_id=cid,
                    cluster_name=name,
                    job_id=job_id,
                    node_rank=0,
                    resolution_s=resolution_s,
                    at=start + resolution_s * i,
                    samples=6,
                    data=data,
                )
            )


def seed_findings(engine: Engine, now: float = NOW) -> None:
    """A history in which each finding appears once (the dollars are in test_audit.py)."""
    with session_scope(engine) as session:
        h = History(session, now)
        east = ["us-east-1"]
        # idle: 4 h billed at $1.00/h, the last 2 h below 10 % GPU utilisation
        t = now - 10 * D
        h.cluster(
            1,
            "idle-a",
            itype="g5.xlarge",
            accelerator="A10G",
            region="us-east-1",
            price=1.00,
            start=t,
            end=t + 4 * H,
            regions=east,
        )
        h.points(1, "idle-a", t, 120, util=80, used_mb=20_000, total_mb=24_000)
        h.points(1, "idle-a", t + 2 * H, 120, util=2, used_mb=20_000, total_mb=24_000)
        # the relay's 10 s points of the same idle hours: never counted on top of the 60 s ones
        h.points(
            1, "idle-a", t + 2 * H, 720, util=2, used_mb=20_000, total_mb=24_000, resolution_s=10
        )
        # left up: task succeeded 4 days ago, still billed at $0.50/h, no autostop
        t = now - 5 * D
        h.cluster(
            2,
            "left-b",
            itype="g4dn.xlarge",
            accelerator="T4",
            region="us-east-1",
            price=0.50,
            start=t,
            end=now,
            regions=east,
            autostop=None,
            closed=False,
            status=ClusterStatus.SUCCEEDED,
        )
        h.change(2, "succeeded", now - 4 * D)
        # input-bound job 1: 10 h at $1.00/h, waiting on data half of its steps
        t = now - 20 * D
        h.job(1, "train-c", {"use_spot": "false"})
        h.cluster(
            3,
            "train-c",
            itype="g5.xlarge",
            accelerator="A10G",
            region="us-east-1",
            price=1.00,
            start=t,
            end=t + 10 * H,
            regions=east,
            job_id=1,
        )
        h.points(
            3,
            "train-c",
            t,
            10,
            util=90,
            used_mb=20_000,
            total_mb=24_000,
            job_id=1,
            train={"mfu": 0.2, "data_wait_ratio": 0.5},
        )
        # low MFU job 2: 8 h at $1.00/h, MFU 15 %
        t = now - 30 * D
        h.job(2, "mfu-d", {"use_spot": "false"})
        h.cluster(
            4,
            "mfu-d",
            itype="g5.xlarge",
            accelerator="A10G",
            region="us-east-1",
            price=1.00,
            start=t,
            end=t + 8 * H,
            regions=east,
            job_id=2,
        )
        h.points(
            4,
            "mfu-d",
            t,
            10,
            util=90,
            used_mb=20_000,
            total_mb=24_000,
            job_id=2,
            train={"mfu": 0.15, "data_wait_ratio": 0.05},
        )
        # oversized: an 80 GB A100 at $4.00/h for 10 h, peak memory 10,000 MB
        t = now - 40 * D
        h.cluster(
            5,
            "big-e",
            itype="x.a100",
            accelerator="A100-80GB",
            region="us-east-1",
            price=4.00,
            start=t,
            end=t + 10 * H,
            regions=east,
        )
        h.points(5, "big-e", t, 10, util=90, used_mb=10_000, total_mb=81_920)
        # spot slack: job 3 ran 20 h on demand at $1.00/h; deadline 72 h, expected 20 h
        t = now - 50 * D
        h.job(
            3,
            "spot-f",
            {"use_spot": "auto", "deadline_s": 72 * H, "job_s": 20 * H, "changeover_s": 600.0},
            spot=[
                {
                    "provider": "aws",
                    "region": "us-east-1",
                    "instance_type": "g5.xlarge",
                    "num_nodes": 1,
                    "pricing": "spot",
                    "price_per_hour": 0.40,
                }
            ],
        )
        h.cluster(
            6,
            "spot-f",
            itype="g5.xlarge",
            accelerator="A10G",
            region="us-east-1",
            price=1.00,
            start=t,
            end=t + 20 * H,
            regions=east,
            job_id=3,
        )
        # cheaper region: 30 h in us-east-1 at $1.00/h; us-west-2 sells it at $0.80
        t = now - 60 * D
        h.cluster(
            7,
            "region-g",
            itype="g5.xlarge",
            accelerator="A10G",
            region="us-east-1",
            price=1.00,
            start=t,
            end=t + 30 * H,
            regions=["us-*"],
        )
        # commitment: one g5.xlarge on demand in eu-west-1 the whole period (and before)
        h.cluster(
            8,
            "steady-h",
            itype="g5.xlarge",
            accelerator="A10G",
            region="eu-west-1",
            price=0.70,
            start=now - 100 * D,
            end=now,
            regions=["eu-west-1"],
            closed=False,
        )


def seed_clean(engine: Engine, now: float = NOW) -> None:
    """A well-run history: a busy, efficient spot job on a fitting GPU, downed on time."""
    with session_scope(engine) as session:
        h = History(session, now)
        t = now - 3 * D
        h.job(1, "good", {"use_spot": "true"})
        h.cluster(
            1,
            "good",
            itype="g5.xlarge",
            accelerator="A10G",
            region="us-east-1",
            price=0.40,
            pricing="spot",
            start=t,
            end=t + 2 * H,
            regions=["us-east-1"],
            job_id=1,
            status=ClusterStatus.TERMINATED,
        )
        h.change(1, "succeeded", t + 2 * H - 120)
        h.change(1, "terminated", t + 2 * H)
        h.points(
            1,
            "good",
            t,
            120,
            util=95,
            used_mb=20_000,
            total_mb=24_000,
            job_id=1,
            train={"mfu": 0.45, "data_wait_ratio": 0.05},
        )
