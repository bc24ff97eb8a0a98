"""Rent against buy: ``gpulease tco`` and the SDK's :func:`tco`. Owns no state; runs in process.

Rented (per server-hour, from the catalog's cheapest offers with exactly ``gpus_per_server``
GPUs of the accelerator, unless given): on-demand and spot bill the hours used; a commitment
bills every hour of whole terms (12 or 36 months) whether used or not, at the catalog's
reserved price, else the user's ``pricing.discounts``, else ``committed_off`` off on-demand.

Owned over the horizon: straight-line depreciation of the purchase (the share of
``depreciation_months`` the horizon covers), power (server watts × hours used × PUE × price
per kWh; server watts = the parts' TDP × GPUs + host watts), colocation (provisioned kW ×
price per kW-month, every month) and ops staff (FTE × yearly cost). Break-even utilisation:
the share of a month's 730 hours above which owning costs less than renting at that price
(fixed monthly cost ÷ (rent − power) per hour).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpulease.catalog import Catalog
from gpulease.catalog.commitments import (
    Discount,
    PublishedDiscount,
    discounts_from_config,
    published_discounts,
    reserved_prices,
)
from gpulease.cost.tco_input import HOURS_PER_MONTH, Default, TcoInput, defaults, tco_input
from gpulease.errors import UserInputError

__all__ = ["HOURS_PER_MONTH", "RentOption", "TcoInput", "TcoResult", "tco", "tco_input"]


@dataclass(frozen=True, slots=True)
class RentOption:
    """One way to rent: the per-server price and where it comes from, and the horizon's cost."""

    pricing: str  # on_demand | spot | committed
    per_server_hour: float | None  # in the report's currency; None: no price
    source: str  # "catalog: aws us-east-1 p4de.24xlarge", "input", "config pricing.discounts"
    billed_hours: float  # per server over the horizon
    total: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pricing": self.pricing,
            "per_server_hour": self.per_server_hour,
            "source": self.source,
            "billed_hours": self.billed_hours,
            "total": self.total,
        }


@dataclass(frozen=True, slots=True)
class TcoResult:
    """The comparison; money in ``inputs.currency``."""

    inputs: TcoInput
    rent: dict[str, RentOption]
    owned: dict[str, float]  # capex, depreciation, power, colocation, ops, total
    server_watts: float
    break_even: dict[str, float | None]  # utilisation 0..1 (None: owning never wins)
    used_gpu_hours: float
    sources: dict[str, Default] = field(default_factory=dict)  # defaults used
    list_capex: float | None = None  # the servers at the sourced default price, if one
    published: tuple[PublishedDiscount, ...] = ()  # the term's published discounts (reference)
    notes: tuple[str, ...] = ()

    def cheapest(self) -> str:
        """The cheapest of the priced rent options and ``owned``."""
        totals = {k: o.total for k, o in self.rent.items() if o.total is not None}
        totals["owned"] = self.owned["total"]
        return min(totals, key=lambda k: totals[k])

    def to_dict(self) -> dict[str, Any]:
        i = self.inputs
        return {
            "accelerator": i.accelerator,
            "gpus": i.gpus,
            "servers": i.servers,
            "gpus_per_server": i.gpus_per_server,
            "months": i.months,
            "hours_per_month": i.hours_per_month,
            "utilisation": i.hours_per_month / HOURS_PER_MONTH,
            "currency": i.currency,
            "rate": i.rate,
            "commitment": i.commitment,
            "rent": {k: o.to_dict() for k, o in self.rent.items()},
            "owned": dict(self.owned),
            "server_watts": self.server_watts,
            "break_even_utilisation": dict(self.break_even),
            "used_gpu_hours": self.used_gpu_hours,
            "cheapest": self.cheapest(),
            "per_used_gpu_hour": {
                **{k: _per(o.total, self.used_gpu_hours) for k, o in self.rent.items()},
                "owned": _per(self.owned["total"], self.used_gpu_hours),
            },
            "defaults_used": {
                k: {"value": d.value, "unit": d.unit, "source": d.source, "date": d.source_date}
                for k, d in self.sources.items()
            },
            "compare": _compare_dict(self),
            "published_discounts": [
                {
                    "provider": p.provider,
                    "commitment": p.commitment,
                    "off": p.off,
                    "kind": p.kind,
                    "scope": p.scope,
                    "source": p.source_url,
                    "date": p.source_date,
                }
                for p in self.published
            ],
            "notes": list(self.notes),
        }


def _per(total: float | None, hours: float) -> float | None:
    return None if total is None or hours <= 0 else total / hours


def _compare_dict(result: TcoResult) -> dict[str, Any] | None:
    c = result.inputs.compare
    if c is None:
        return None
    today = result.rent["on_demand"].total
    out: dict[str, Any] = {"label": c.label}
    if c.rented_on_demand is not None:
        ratio = None if today is None else today / c.rented_on_demand
        out["rented_on_demand"] = {"theirs": c.rented_on_demand, "today": today, "ratio": ratio}
    if c.hardware is not None:
        listed = result.list_capex
        out["hardware"] = {"theirs": c.hardware, "today": listed,
                           "ratio": None if listed is None else listed / c.hardware}  # fmt: skip
    return out


# -- inputs with defaults -------------------------------------------------------------------------


class _Resolver:
    """Input values in the report's currency, recording which defaults were used."""

    def __init__(self, inputs: TcoInput) -> None:
        self.inputs = inputs
        self.used: dict[str, Default] = {}

    def get(self, name: str, *, money: bool, key: str | None = None) -> float:
        given = getattr(self.inputs, name)
        if given is not None:
            return float(given)
        table = defaults()
        default = table.get(key or name)
        if default is None:
            flag = "--" + name.replace("_", "-")
            raise UserInputError(
                f"{flag}: no sourced default for {self.inputs.accelerator}; give {flag}"
            )
        self.used[default.key] = default
        return default.value * (self.inputs.rate if money else 1.0)


def _server_watts(inputs: TcoInput, catalog: Catalog, r: _Resolver) -> float:
    if inputs.server_watts is not None:
        return inputs.server_watts
    specs = [s for s in catalog.accelerators.values() if s.name == inputs.accelerator]
    tdps = [s.tdp_w for s in specs if s.tdp_w]
    if not tdps:
        raise UserInputError(
            f"--server-watts: the catalog has no TDP for {inputs.accelerator}; give --server-watts"
        )
    host = r.get("host_watts", money=False) * (
        1.0 if inputs.host_watts is not None else inputs.gpus_per_server / 8
    )
    return max(tdps) * inputs.gpus_per_server + host


# -- rented ---------------------------------------------------------------------------------------


def _cheapest(
    catalog: Catalog, inputs: TcoInput, prices: np.ndarray
) -> tuple[float, str, int] | None:
    o = catalog.offers
    keep = catalog.mask(inputs.accelerator, inputs.providers or None, None, False, None)
    keep &= (o.gpu_count == inputs.gpus_per_server) & np.isfinite(prices)
    index = np.flatnonzero(keep)
    if index.size == 0:
        return None
    order = np.lexsort((o.instance_type[index], o.region[index], o.provider[index], prices[index]))
    i = int(index[order[0]])
    where = f"catalog: {o.provider[i]} {o.region[i]} {o.instance_type[i]}"
    return float(prices[i]), where, i


def _rent(
    pricing: str, given: float | None, found: tuple[float, str, int] | None, hours: float,
    *, n: int, rate: float,
) -> RentOption:  # fmt: skip
    if given is not None:
        price, source = given, "input"
    elif found is not None:
        price, source = found[0] * rate, found[1]
    else:
        return RentOption(pricing, None, "no price in the catalog", hours, None)
    return RentOption(pricing, price, source, hours, price * hours * n)


def _committed(
    inputs: TcoInput, catalog: Catalog, discounts: tuple[Discount, ...], on_demand: RentOption
) -> RentOption:
    term = 12 if inputs.commitment == "1y" else 36
    billed = math.ceil(inputs.months / term - 1e-9) * term * HOURS_PER_MONTH
    n = inputs.servers
    if inputs.committed_per_hour is not None:
        return _rent("committed", inputs.committed_per_hour, None, billed, n=n, rate=inputs.rate)
    prices, user = reserved_prices(catalog.offers, inputs.commitment, discounts)
    found = _cheapest(catalog, inputs, prices)
    if found is not None:
        if user[found[2]]:
            found = (found[0], f"{found[1]} at your negotiated discount (config pricing)", found[2])
        return _rent("committed", None, found, billed, n=n, rate=inputs.rate)
    if inputs.committed_off is not None and on_demand.per_server_hour is not None:
        price = on_demand.per_server_hour * (1 - inputs.committed_off)
        source = f"on-demand less --committed-off {inputs.committed_off:.0%}"
        return RentOption("committed", price, source, billed, price * billed * n)
    return RentOption(
        "committed", None,
        f"no {inputs.commitment} committed price: give --committed-off, --committed-per-hour "
        "or config pricing.discounts",
        billed, None,
    )  # fmt: skip


# -- the comparison -------------------------------------------------------------------------------


def tco(
    inputs: TcoInput | None = None,
    *,
    catalog: Catalog | None = None,
    config: Mapping[str, Any] | None = None,
    **values: Any,
) -> TcoResult:
    """Rent against buy for ``inputs`` (or the same as keywords, validated as the CLI's flags:
    ``tco(gpus="A100-80GB:8", months=36, hours_per_month=500)``) over ``catalog`` (default: the
    current catalog) with the user's discounts of ``config`` (default: the config file)."""
    if inputs is None:
        inputs = tco_input(values, "tco")
    elif values:
        raise TypeError("tco: pass a TcoInput or keyword inputs, not both")
    if config is None:
        from gpulease.config import load_config

        config = load_config()
    catalog = catalog or Catalog.load()
    discounts = discounts_from_config(config)
    r = _Resolver(inputs)
    n, used = inputs.servers, inputs.hours_per_month * inputs.months
    o = catalog.offers
    found_od = _cheapest(catalog, inputs, o.price_on_demand)
    found_spot = _cheapest(catalog, inputs, o.price_spot)
    od = _rent("on_demand", inputs.on_demand_per_hour, found_od, used, n=n, rate=inputs.rate)
    spot = _rent("spot", inputs.spot_per_hour, found_spot, used, n=n, rate=inputs.rate)
    rent = {"on_demand": od, "spot": spot, "committed": _committed(inputs, catalog, discounts, od)}
    watts = _server_watts(inputs, catalog, r)
    key = f"server_price.{inputs.accelerator}"
    purchase = r.get("purchase_per_server", money=True, key=key) * (
        1.0 if inputs.purchase_per_server is not None else inputs.gpus_per_server / 8
    )
    depreciation = r.get("depreciation_months", money=False)
    pue = r.get("pue", money=False)
    kwh_price = r.get("electricity_per_kwh", money=True)
    colo_kw = r.get("colocation_per_kw_month", money=True)
    ops = r.get("ops_fte", money=False) * r.get("ops_cost_per_fte_year", money=True)
    kw = n * watts / 1000
    capex = n * purchase
    owned = {
        "capex": capex,
        "depreciation": capex * min(inputs.months, depreciation) / depreciation,
        "power": kw * used * pue * kwh_price,
        "colocation": kw * colo_kw * inputs.months,
        "ops": ops * inputs.months / 12,
    }
    owned["total"] = sum(v for k, v in owned.items() if k != "capex")
    fixed_month = capex / depreciation + kw * colo_kw + ops / 12
    power_hour = kw * pue * kwh_price
    return TcoResult(
        inputs=inputs,
        rent=rent,
        owned=owned,
        server_watts=watts,
        break_even=_break_even(rent, fixed_month, power_hour, n),
        used_gpu_hours=used * inputs.gpus,
        sources=r.used,
        list_capex=_list_capex(inputs),
        published=tuple(
            p
            for p in published_discounts()
            if p.commitment == inputs.commitment
            and (not inputs.providers or p.provider in inputs.providers)
        ),
        notes=tuple(_notes(inputs, depreciation, rent["committed"])),
    )


def _break_even(
    rent: dict[str, RentOption], fixed_month: float, power_hour: float, n: int
) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in ("on_demand", "spot"):
        price = rent[name].per_server_hour
        margin = None if price is None else price * n - power_hour
        out[f"owned_vs_{name}"] = (
            fixed_month / margin / HOURS_PER_MONTH if margin and margin > 0 else None
        )
    od, committed = rent["on_demand"].per_server_hour, rent["committed"].per_server_hour
    out["committed_vs_on_demand"] = committed / od if od and committed is not None else None
    return out


def _list_capex(inputs: TcoInput) -> float | None:
    default = defaults().get(f"server_price.{inputs.accelerator}")
    if default is None:
        return None
    return default.value * inputs.rate * inputs.gpus_per_server / 8 * inputs.servers


def _notes(inputs: TcoInput, depreciation: float, committed: RentOption) -> list[str]:
    notes = []
    term_months = committed.billed_hours / HOURS_PER_MONTH
    if term_months > inputs.months + 1e-9:
        notes.append(
            f"a {inputs.commitment} commitment bills whole terms: {term_months:g} months "
            f"for a {inputs.months:g}-month horizon"
        )
    if inputs.months < depreciation:
        notes.append(
            f"owned counts {inputs.months:g} of {depreciation:g} months' depreciation; the "
            "hardware keeps the rest of its value (no resale assumed past the period)"
        )
    if inputs.gpus % inputs.gpus_per_server:
        notes.append(
            f"{inputs.gpus} GPUs need {inputs.servers} servers of {inputs.gpus_per_server}: "
            "rent and purchase are per whole server"
        )
    return notes
