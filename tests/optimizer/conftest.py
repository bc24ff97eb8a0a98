"""Fixtures for optimizer tests: a small hand-written catalog and a task builder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpulease.catalog import Catalog
from gpulease.optimizer import PlanResult, plan_all
from gpulease.spec import Task, task_from_dict

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def small_catalog() -> Catalog:
    return Catalog.from_csv(FIXTURES / "offers.csv")


def make_task(**fields: Any) -> Task:
    return task_from_dict(fields)


PRETRAIN = {"kind": "train", "model": {"params": "1.3B"}, "tokens": "26B", "precision": "bf16"}
#: Every accelerator of the fixture catalog at any count: how a task without a workload asks
#: for GPUs (without ``accelerators`` and a workload a task means CPU only, and the fixture
#: catalog sells no CPU-only offer).
ANY_GPU: dict[str, Any] = {
    "accelerators": {
        "A100": "auto",
        "A100-80GB": "auto",
        "A10": "auto",
        "H100": "auto",
        "T4": "auto",
    }
}


def run_plan(
    catalog: Catalog,
    top: int = 20,
    objective: str = "cheapest",
    config: dict[str, Any] | None = None,
    hours: float | None = None,
    **fields: Any,
) -> PlanResult:
    return plan_all(
        make_task(**fields),
        catalog=catalog,
        top=top,
        objective=objective,
        config=config or {},
        hours=hours,
    )
