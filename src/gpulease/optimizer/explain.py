"""Why a plan ranks where it does: the human-readable ``reasons`` of a :class:`Plan`."""

from __future__ import annotations

import math

from gpulease.optimizer.plan import Objective, Plan
from gpulease.optimizer.spot_overhead import band_label
from gpulease.spec.models import Task


def plan_reasons(
    task: Task,
    objective: Objective,
    plan: Plan,
    first: Plan | None,
    *,
    on_demand_node_price: float,
    sizing_notes: tuple[str, ...],
) -> tuple[str, ...]:
    reasons = [_position(task, objective, plan, first), _shape(plan)]
    reasons.extend(sizing_notes)
    if task.workload is not None and task.workload.kind != "inference":
        reasons.append("hours include ~9 min (3–24 min) to provision and set up")
    reasons.append(_pricing(plan, on_demand_node_price))
    margin = _deadline_margin(task, plan)
    if margin:
        reasons.append(margin)
    if not plan.launchable:
        reasons.append(f"advice: this install cannot rent on {plan.provider} yet")
    return tuple(r for r in reasons if r)


def _position(task: Task, objective: Objective, plan: Plan, first: Plan | None) -> str:
    if first is None:
        return _why_first(task, objective, plan)
    if plan.est_cost and first.est_cost:
        extra = plan.est_cost.expected - first.est_cost.expected
        pct = 100 * extra / first.est_cost.expected if first.est_cost.expected else 0.0
        dt = (
            plan.est_hours.expected - first.est_hours.expected
            if plan.est_hours and first.est_hours
            else 0.0
        )
        speed = (
            f"{abs(dt):.1f} h {'slower' if dt > 0 else 'faster'}"
            if abs(dt) >= 0.05
            else ("same time")
        )
        money = "same cost" if abs(extra) < 0.5 else f"{_signed_money(extra)} ({pct:+.0f}%)"
        return f"{money} vs #1, {speed}"
    extra = plan.price_per_hour - first.price_per_hour
    return f"{_signed_money(extra, 2)}/h vs #1"


def _signed_money(value: float, digits: int = 0) -> str:
    return f"{'+' if value >= 0 else '-'}${abs(value):,.{digits}f}"


def _why_first(task: Task, objective: Objective, plan: Plan) -> str:
    within = []
    if task.deadline_hours and plan.est_hours:
        within.append(f"meets the {task.deadline_hours:g} h deadline")
    if task.budget_usd and plan.est_hours:
        within.append(f"within the ${task.budget_usd:,.0f} budget")
    suffix = (" that " + " and ".join(within)) if within else ""
    if task.workload is None and plan.est_hours is not None:
        given = (
            f"{plan.est_hours.expected:g} h"
            if plan.pricing != "spot"
            else "stretched by expected restarts on spot"
        )
        if objective == "fastest":
            return f"every plan takes the run time given ({given}): the cheapest of them{suffix}"
        if objective == "cheapest":
            return f"cheapest plan for the run time given ({given}){suffix}"
    if objective == "fastest":
        return f"fastest plan{suffix}"
    if objective == "price-per-tflop":
        return f"lowest price per dense TFLOP-hour{suffix}"
    if task.workload is None:
        return "lowest hourly price (no workload to estimate)"
    return f"cheapest plan{suffix}"


def _amount(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


def _shape(plan: Plan) -> str:
    nodes = f"{plan.num_nodes} × " if plan.num_nodes > 1 else ""
    host = f", {plan.cpu_arch} host" if plan.cpu_arch != "x86_64" else ""
    if plan.cpu_only:
        size = [f"{_amount(plan.vcpus)} vCPUs"] if plan.vcpus is not None else []
        size += [f"{_amount(plan.ram_gb)} GB RAM"] if plan.ram_gb is not None else []
        return f"{nodes}{plan.instance_type}: {', '.join([*size, 'CPU only'])}{host}"
    mem = f"{plan.gpu_memory_gb:g} GB" if plan.gpu_memory_gb else ""
    return (
        f"{nodes}{plan.instance_type}: {plan.gpus_per_node} × {plan.part} {mem}, "
        f"{plan.peak_tflops:,.0f} dense TFLOPS in all{host}"
    )


def _pricing(plan: Plan, on_demand_node_price: float) -> str:
    if plan.pricing == "spot":
        node_price = plan.price_per_hour / plan.num_nodes
        saving = ""
        if math.isfinite(on_demand_node_price) and on_demand_node_price > 0:
            saving = f", {100 * (1 - node_price / on_demand_node_price):.0f}% below on-demand"
        overhead = ""
        if plan.est_hours and plan.est_cost:
            overhead = "; estimate includes expected restarts"
        return (
            f"spot at ${node_price:.2f}/h per node{saving}; interruption band "
            f"{band_label(plan.interruption_band)}{overhead}"
        )
    if plan.pricing == "reserved":
        return f"reserved: ${plan.price_per_hour:.2f}/h under a commitment for the full term"
    return "on-demand: no interruptions"


def _deadline_margin(task: Task, plan: Plan) -> str:
    if not (task.deadline_hours and plan.est_hours):
        return ""
    spare = task.deadline_hours - plan.est_hours.high
    if plan.est_hours.high > task.deadline_hours:
        return (
            f"expected {plan.est_hours.expected:.1f} h, but the high estimate "
            f"{plan.est_hours.high:.1f} h passes the {task.deadline_hours:g} h deadline: "
            "little margin"
        )
    return (
        f"finishes {spare:.1f} h before the deadline even at the high estimate "
        f"({plan.est_hours.high:.1f} h)"
    )
