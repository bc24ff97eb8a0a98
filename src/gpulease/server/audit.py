"""``GET /v1/audit``: the quarterly audit over the server's state DB, and the rightsizing
question the audit asks the optimizer (``cost`` may not import it; the server may).

Owns :class:`AuditService` and :func:`optimizer_rightsizer`. Read only; moves no states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Engine

from gpulease.catalog import Catalog
from gpulease.clock import Clock
from gpulease.cost.audit import (
    RightsizeAnswer,
    RightsizeAsk,
    Rightsizer,
    audit_view,
    parse_since,
    run_audit,
)
from gpulease.cost.audit.run import load_inputs
from gpulease.errors import GpuleaseError
from gpulease.optimizer import plan_all
from gpulease.spec import task_from_dict_with_warnings
from gpulease.state import session_scope


def _smaller_task(ask: RightsizeAsk, names: list[str]) -> dict[str, Any]:
    """The task's placement rules on any of ``names``, no workload (``hours`` sizes it)."""
    resources = dict(ask.spec.get("resources") or {})
    keep = ("providers", "regions", "exclude_providers", "exclude_regions", "cpu_arch")
    out: dict[str, Any] = {k: resources[k] for k in keep if resources.get(k)}
    out["accelerators"] = {name: ask.gpus_per_node for name in names}
    out["use_spot"] = ask.pricing == "spot"
    task: dict[str, Any] = {"resources": out, "num_nodes": ask.num_nodes}
    if ask.spec.get("data_policy"):
        task["data_policy"] = list(ask.spec["data_policy"])
    return task


def optimizer_rightsizer(catalog: Catalog, config: Mapping[str, Any] | None = None) -> Rightsizer:
    """Asks the optimizer for the cheapest plan on a part with at least ``min_memory_gb`` and
    less than ``below_memory_gb`` of GPU memory, under the task's own placement rules."""

    def rightsize(ask: RightsizeAsk) -> RightsizeAnswer | None:
        names = sorted({
            spec.name for spec in catalog.accelerators.values()
            if ask.min_memory_gb <= spec.memory_gb < ask.below_memory_gb
        })  # fmt: skip
        if not names or ask.gpus_per_node < 1:
            return None
        try:
            task, _ = task_from_dict_with_warnings(_smaller_task(ask, names))
            result = plan_all(task, catalog=catalog, top=50, config=config or {},
                              hours=ask.hours)  # fmt: skip
        except (GpuleaseError, ValueError):  # a task that no longer parses: no suggestion
            return None
        for plan in result.plans:
            if ask.min_memory_gb <= plan.gpu_memory_gb < ask.below_memory_gb:
                return RightsizeAnswer(
                    accelerator=plan.accelerator, provider=plan.provider, region=plan.region,
                    instance_type=plan.instance_type,
                    node_price_per_hour=plan.price_per_hour / max(plan.num_nodes, 1),
                )  # fmt: skip
        return None

    return rightsize


class AuditService:
    """The audit of ``GET /v1/audit?since=90d`` over ``engine`` at ``clock``'s now:
    ``catalog`` prices the alternatives (the server's runtime catalog), ``public`` (default:
    the bundled or refreshed catalog, without the providers' own offers) is judged for age."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock,
        catalog: Callable[[], Catalog],
        config: Mapping[str, Any] | None = None,
        public: Callable[[], Catalog] = Catalog.load,
    ) -> None:
        self.engine = engine
        self.public = public
        self.clock = clock
        self.catalog = catalog
        self.config = dict(config or {})

    def audit(self, since: str | None = None) -> dict[str, Any]:
        period = parse_since(since, self.clock.now())
        catalog = self.catalog()
        with session_scope(self.engine) as session:
            inputs = load_inputs(
                session, period, catalog=catalog, config=self.config,
                rightsizer=optimizer_rightsizer(catalog, self.config),
                public=self.public(),
            )  # fmt: skip
            findings = run_audit(inputs)
            return audit_view(inputs, findings)
