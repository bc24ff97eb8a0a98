"""A mixture of experts planned by the optimizer: its memory is that of every expert (671B
parameters), its time that of the active ones (37B)."""

from __future__ import annotations

import re
from typing import Any

from gpulease.catalog import Catalog
from tests.optimizer.conftest import run_plan

MOE = {"params": "671B", "active_params": "37B", "experts": 256, "experts_per_token": 8,
       "layers": 61, "hidden": 7168}  # fmt: skip
DENSE_37B = {"params": "37B", "layers": 61, "hidden": 7168}
STATE_GPUS = 16 * 671e9 / (0.9 * 80e9)  # H100s whose usable memory holds 16 bytes × 671B


def _workload(model: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "train", "model": model, "tokens": "100B", "seq_len": 4096,
            "precision": "bf16"}  # fmt: skip


def test_a_671b_moe_needs_the_memory_of_671b_parameters(small_catalog: Catalog) -> None:
    fields = {"resources": {"accelerators": "H100:8"}, "num_nodes": 4}
    # 4 nodes of 8 × H100 hold a dense 37B model ...
    dense = run_plan(small_catalog, workload=_workload(DENSE_37B), **fields)
    assert dense.plans and all(plan.num_nodes == 4 for plan in dense.plans)
    # ... but not a 671B MoE with the same 37B active: every expert has its optimizer state
    moe = run_plan(small_catalog, workload=_workload(MOE), **fields)
    assert not moe.plans
    reasons = " | ".join(rejection.reason for rejection in moe.rejected)
    needed = re.search(r"needs ≥ (\d+) × H100-SXM", reasons)
    assert needed, reasons
    assert int(needed.group(1)) >= STATE_GPUS


def test_the_moe_plans_enough_nodes_and_says_why(small_catalog: Catalog) -> None:
    result = run_plan(
        small_catalog, workload=_workload(MOE), resources={"accelerators": "H100:8"}, top=5
    )
    assert result.plans
    for plan in result.plans:
        assert plan.num_nodes * plan.gpus_per_node >= STATE_GPUS
        assert any("memory for all 671B parameters, FLOPs for the 37B active" in r
                   for r in plan.reasons)  # fmt: skip
