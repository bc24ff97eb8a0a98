"""Findings about what the rented hours were priced at: on-demand hours of jobs that had the
slack for spot, the same instance cheaper in another allowed region, steady on-demand usage
above a commitment's break-even, and a catalog too old to trust.

Prices come from the ledger (what was paid) and the catalog (what else was on offer); a
commitment's price is the catalog's ``price_reserved_1y`` or, where it has none, the user's
negotiated discount (config ``pricing.discounts``: provider, ``commitment: 1y``, ``off``,
optional ``regions`` patterns). Pure over :class:`AuditInputs`; moves no states.
"""

from __future__ import annotations

import fnmatch
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from gpulease.catalog import Catalog
from gpulease.cost.audit.model import AuditInputs, Finding, overlap_hours, rounded, spec_of
from gpulease.state.models import LedgerEntry


def _prices(catalog: Catalog, provider: str, instance_type: str, column: str) -> dict[str, float]:
    """The cheapest ``column`` price per region of one instance type (NaN prices left out)."""
    offers = catalog.offers
    index = np.flatnonzero((offers.provider == provider) & (offers.instance_type == instance_type))
    values = getattr(offers, column)
    out: dict[str, float] = {}
    for i in index.tolist():
        price = float(values[i])
        region = str(offers.region[i])
        if not math.isnan(price) and price < out.get(region, math.inf):
            out[region] = price
    return out


def _column(pricing: str) -> str:
    return "price_spot" if pricing == "spot" else "price_on_demand"


def spot_slack(inputs: AuditInputs) -> list[Finding]:
    """Managed jobs that ran on demand although their deadline left more slack than the spot
    policy's changeover: the saving at the job's spot target price (or the catalog's)."""
    per_job: dict[int, list[LedgerEntry]] = defaultdict(list)
    for row in inputs.ledger:
        if row.job_id is not None and row.pricing == "on_demand":
            per_job[row.job_id].append(row)
    findings = []
    for job_id, rows in per_job.items():
        job = inputs.jobs.get(job_id)
        policy = (job.task or {}).get("policy") or {} if job is not None else {}
        deadline, run = policy.get("deadline_s"), policy.get("job_s")
        if job is None or deadline is None or run is None:
            continue
        slack = float(deadline) - float(run)
        if slack <= float(policy.get("changeover_s") or 600.0):
            continue
        saving, hours = 0.0, 0.0
        for row in rows:
            spot = _spot_node_price(inputs, job.task, row)
            if spot is not None:
                saving += overlap_hours(row, inputs.period) * (row.price_per_hour - spot)
                hours += overlap_hours(row, inputs.period)
        if saving <= 0:
            continue
        action = (
            "let it run on spot (resources.use_spot: auto, job_recovery: "
            "on_demand_fallback keeps the deadline)"
        )
        findings.append(
            Finding(
                kind="spot_slack",
                title=f"job {job_id} ({job.name}): {hours:.1f} on-demand hours "
                f"with {slack / 3600:.1f} h of deadline slack",
                dollars=saving,
                action=action,
                evidence={
                    "job": job_id,
                    "on_demand_hours": rounded(hours),
                    "deadline_hours": rounded(float(deadline) / 3600),
                    "expected_run_hours": rounded(float(run) / 3600),
                    "slack_hours": rounded(slack / 3600),
                    "use_spot": policy.get("use_spot"),
                },
            )
        )
    return findings


def _spot_node_price(
    inputs: AuditInputs, task: Mapping[str, Any], row: LedgerEntry
) -> float | None:
    """Per node: the job's first spot target's price, else the catalog's spot price there."""
    for target in task.get("spot") or []:
        price = target.get("price_per_hour")
        if price is not None and target.get("instance_type") == row.instance_type:
            return float(price) / max(int(target.get("num_nodes") or 1), 1)
    if inputs.catalog is None or row.instance_type is None:
        return None
    return _prices(inputs.catalog, row.provider, row.instance_type, "price_spot").get(
        row.region or ""
    )


def _allowed(spec: Mapping[str, Any], region: str) -> bool:
    resources = spec.get("resources") or {}
    regions = resources.get("regions")
    if regions and not any(fnmatch.fnmatchcase(region, r) for r in regions):
        return False
    return region not in (resources.get("exclude_regions") or [])


def cheaper_region(inputs: AuditInputs) -> list[Finding]:
    """Per cluster: the same instance type at the same pricing cheaper in another region the
    task allows (``resources.regions`` / ``exclude_regions``; a task with a ``data_policy`` and
    no region list is skipped: the audit cannot tell which regions its data may go to)."""
    if inputs.catalog is None:
        return []
    groups: dict[tuple[int, str, str, str, str], list[LedgerEntry]] = defaultdict(list)
    for row in inputs.ledger:
        if row.cluster_id is not None and row.instance_type and row.region:
            key = (row.cluster_id, row.provider, row.region, row.instance_type, row.pricing)
            groups[key].append(row)
    findings = []
    for (cid, provider, region, itype, pricing), rows in groups.items():
        cluster = inputs.clusters.get(cid)
        spec = spec_of(cluster.task) if cluster is not None else {}
        if spec.get("data_policy") and not (spec.get("resources") or {}).get("regions"):
            inputs.notes.append(
                f"cheaper region: {rows[0].cluster_name} skipped (data_policy "
                "without a region list)"
            )
            continue
        offers = _prices(inputs.catalog, provider, itype, _column(pricing))
        others = {r: p for r, p in offers.items() if r != region and _allowed(spec, r)}
        if not others:
            continue
        best = min(others, key=lambda r: (others[r], r))
        hours = sum(overlap_hours(r, inputs.period) for r in rows)
        saving = sum(
            overlap_hours(r, inputs.period) * (r.price_per_hour - others[best]) for r in rows
        )
        if saving <= 0:
            continue
        name = rows[0].cluster_name or f"#{cid}"
        findings.append(
            Finding(
                kind="cheaper_region",
                title=f"{name}: {itype} ({pricing}) is cheaper in {best} than in {region}",
                dollars=saving,
                action=f"launch it in {best} (resources.regions: [{best}])",
                evidence={
                    "cluster": name,
                    "cluster_id": cid,
                    "instance_type": itype,
                    "pricing": pricing,
                    "region": region,
                    "hours": rounded(hours),
                    "cheaper_region": best,
                    "cheaper_price_per_hour": others[best],
                },
            )
        )
    return findings


def _user_discount(config: Mapping[str, Any], provider: str, region: str) -> float | None:
    """The user's 1-year discount off on-demand for ``provider`` in ``region``, if configured."""
    pricing = config.get("pricing")
    entries = pricing.get("discounts") if isinstance(pricing, Mapping) else None
    for entry in entries if isinstance(entries, Sequence) else []:
        if not isinstance(entry, Mapping) or entry.get("provider") != provider:
            continue
        if str(entry.get("commitment", "")) != "1y":
            continue
        patterns = entry.get("regions") or ["*"]
        if any(fnmatch.fnmatchcase(region, p) for p in patterns):
            off = entry.get("off")
            text = str(off).strip()
            value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
            if 0 < value < 1:
                return value
    return None


def _reserved(
    inputs: AuditInputs, provider: str, region: str, itype: str, on_demand: float
) -> tuple[float, str] | None:
    off = _user_discount(inputs.config, provider, region)
    if off is not None:
        return on_demand * (1 - off), f"config pricing.discounts ({off:.0%} off)"
    if inputs.catalog is not None:
        price = _prices(inputs.catalog, provider, itype, "price_reserved_1y").get(region)
        if price is not None:
            return price, "catalog price_reserved_1y"
    return None


def commitment(inputs: AuditInputs) -> list[Finding]:
    """Steady on-demand use of one instance type in one region above a 1-year commitment's
    break-even: committing ``c`` instances (the mean in use, rounded down; 1 when the mean is
    below one but above break-even) saves ``min(hours, c × period) × on-demand − c × period ×
    reserved``."""
    groups: dict[tuple[str, str, str], list[LedgerEntry]] = defaultdict(list)
    for row in inputs.ledger:
        if row.pricing == "on_demand" and row.instance_type and row.region:
            groups[(row.provider, row.region, row.instance_type)].append(row)
    findings, period_h = [], inputs.period.hours
    skipped = []
    for (provider, region, itype), rows in groups.items():
        hours = sum(overlap_hours(r, inputs.period) for r in rows)
        if hours <= 0:
            continue
        on_demand = sum(overlap_hours(r, inputs.period) * r.price_per_hour for r in rows) / hours
        reserved = _reserved(inputs, provider, region, itype, on_demand)
        if reserved is None:
            skipped.append(f"{provider} {region} {itype}")
            continue
        price, source = reserved
        mean, break_even = hours / period_h, price / on_demand
        count = math.floor(mean) if mean >= 1 else (1 if mean >= break_even else 0)
        saving = min(hours, count * period_h) * on_demand - count * period_h * price
        if count == 0 or saving <= 0:
            continue
        findings.append(
            Finding(
                kind="commitment",
                title=f"{itype} in {provider} {region}: {mean:.0%} of the period in use on demand, "
                f"break-even {break_even:.0%}",
                dollars=saving,
                action=f"commit {count} × {itype} for 1 year in {region}",
                evidence={
                    "provider": provider,
                    "region": region,
                    "instance_type": itype,
                    "on_demand_hours": rounded(hours),
                    "mean_in_use": rounded(mean),
                    "on_demand_price_per_hour": rounded(on_demand),
                    "reserved_price_per_hour": rounded(price),
                    "reserved_source": source,
                    "break_even_utilisation": rounded(break_even),
                    "commit": count,
                },
            )
        )
    if skipped:
        inputs.notes.append(
            "commitments: no reserved price in the catalog and no "
            f"pricing.discounts in the config for {', '.join(sorted(skipped))}"
        )
    return findings


def stale_catalog(inputs: AuditInputs) -> list[Finding]:
    """The catalog's newest price older than the threshold: every saving above may be off."""
    catalog = inputs.public or inputs.catalog
    if catalog is None:
        return []
    today = datetime.fromtimestamp(inputs.period.end, tz=UTC).date()
    age = catalog.age_days(today)
    if age <= inputs.thresholds.catalog_max_age_days:
        return []
    return [
        Finding(
            kind="stale_catalog",
            title=f"the catalog is {age} days old",
            dollars=0.0,
            action="gpulease catalog update (the savings above use its prices)",
            evidence={
                "as_of": catalog.as_of.isoformat(),
                "age_days": age,
                "source": catalog.source,
            },
        )
    ]
