"""``gpulease tco``: rent against buy for a GPU count over months (:mod:`gpulease.cost.tco`),
in process. Flags override the keys of a ``--from`` file; every input has a flag."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpulease.cli.output import print_json

if TYPE_CHECKING:
    from gpulease.cost.tco import TcoResult

_Num = float | None


def _opt(help_text: str) -> Any:
    return typer.Option(help=help_text, show_default=False)


def tco(
    gpus: Annotated[str | None, _opt("GPUs to compare, NAME:COUNT (A100-80GB:8).")] = None,
    months: Annotated[_Num, _opt("Horizon in months.")] = None,
    hours_per_month: Annotated[_Num, _opt("Hours used per month (730 = always on).")] = None,
    from_file: Annotated[Path | None, typer.Option("--from", help="A tco file (YAML).")] = None,
    gpus_per_server: Annotated[int | None, _opt("GPUs per server (default 8).")] = None,
    provider: Annotated[list[str] | None, _opt("Only this provider's offers (repeatable).")] = None,
    currency: Annotated[str | None, _opt("Report currency (default USD).")] = None,
    rate: Annotated[_Num, _opt("Units of --currency per US dollar (no live FX).")] = None,
    commitment: Annotated[str | None, _opt("Commitment term: 1y (default) or 3y.")] = None,
    committed_off: Annotated[str | None, _opt("Off on-demand if no committed price: 30%.")] = None,
    on_demand_per_hour: Annotated[_Num, _opt("On-demand price per server-hour.")] = None,
    spot_per_hour: Annotated[_Num, _opt("Spot price per server-hour.")] = None,
    committed_per_hour: Annotated[_Num, _opt("Committed price per server-hour.")] = None,
    purchase_per_server: Annotated[_Num, _opt("Purchase price of one server.")] = None,
    server_watts: Annotated[_Num, _opt("Power of one server, W (GPUs' TDP + host).")] = None,
    host_watts: Annotated[_Num, _opt("Host (non-GPU) power of one server, W.")] = None,
    pue: Annotated[_Num, _opt("Data-centre PUE.")] = None,
    electricity_per_kwh: Annotated[_Num, _opt("Electricity price per kWh.")] = None,
    colocation_per_kw_month: Annotated[_Num, _opt("Colocation price per kW-month.")] = None,
    depreciation_months: Annotated[_Num, _opt("Depreciation period, months.")] = None,
    ops_fte: Annotated[_Num, _opt("Ops staff, full-time engineers.")] = None,
    ops_cost_per_fte_year: Annotated[_Num, _opt("Yearly cost of one ops engineer.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Rent (on-demand, spot, committed) against buy: totals, per GPU-hour, break-even."""
    from gpulease.cost.tco import tco as compare
    from gpulease.cost.tco_input import read_tco_file, tco_input

    values: dict[str, Any] = read_tco_file(from_file) if from_file else {}
    flags = dict(locals())
    for name in (
        "gpus", "months", "hours_per_month", "gpus_per_server", "currency", "rate",
        "commitment", "committed_off", "on_demand_per_hour", "spot_per_hour",
        "committed_per_hour", "purchase_per_server", "server_watts", "host_watts", "pue",
        "electricity_per_kwh", "colocation_per_kw_month", "depreciation_months", "ops_fte",
        "ops_cost_per_fte_year",
    ):  # fmt: skip
        if flags[name] is not None:
            values[name] = flags[name]
    if provider:
        values["providers"] = list(provider)
    result = compare(tco_input(values, "--from " + str(from_file) if from_file else "tco"))
    if as_json:
        print_json(result.to_dict())
    else:
        typer.echo(render(result))


def _m(value: float | None, currency: str) -> str:
    return "—" if value is None else f"{currency} {value:,.0f}"


def _pct(value: float | None) -> str:
    if value is None:
        return "never"
    return f"{value * 100:.0f}%" if value <= 1 else f"never (it would need {value * 100:.0f}%)"


def render(result: TcoResult) -> str:
    """The text report."""
    d, c = result.to_dict(), result.inputs.currency
    servers = f"{d['servers']} server{'s' if d['servers'] != 1 else ''}"
    months = f"{d['months']:g} month{'s' if d['months'] != 1 else ''}"
    lines = [
        f"{d['gpus']}× {d['accelerator']} ({servers} of {d['gpus_per_server']}) for {months} "
        f"at {d['hours_per_month']:g} h/month "
        f"({d['utilisation'] * 100:.0f}% utilisation); money in {c}"
        + (f" at {d['rate']:g} per USD" if c != "USD" or d["rate"] != 1 else ""),
        "",
    ]
    per = d["per_used_gpu_hour"]
    for name, option in d["rent"].items():
        price = option["per_server_hour"]
        lines.append(
            f"  rent {name.replace('_', '-'):<10} {_m(option['total'], c):>18}"
            f"   {'' if price is None else f'{price:,.2f}/server-h'}  {option['source']}"
            + ("" if per[name] is None else f"  ({per[name]:,.2f}/GPU-h used)")
        )
    owned = d["owned"]
    lines.append(
        f"  own              {_m(owned['total'], c):>18}   "
        f"depreciation {owned['depreciation']:,.0f}"
        f" + power {owned['power']:,.0f} + colocation {owned['colocation']:,.0f}"
        f" + ops {owned['ops']:,.0f}; purchase {owned['capex']:,.0f}"
        f"  ({per['owned']:,.2f}/GPU-h used)"
    )
    be = d["break_even_utilisation"]
    lines += [
        "",
        f"cheapest: {d['cheapest'].replace('_', '-')}",
        "break-even utilisation (share of a month's 730 h used):",
        f"  owning beats on-demand above {_pct(be['owned_vs_on_demand'])}",
        f"  owning beats spot above {_pct(be['owned_vs_spot'])}",
        f"  a {d['commitment']} commitment beats on-demand above "
        + (
            "— (no committed price)"
            if be["committed_vs_on_demand"] is None
            else _pct(be["committed_vs_on_demand"])
        ),
    ]
    if d["compare"]:
        lines += ["", f"against {d['compare']['label'] or 'the given figures'}:"]
        for key, row in d["compare"].items():
            if key != "label" and row["today"] is not None:
                lines.append(
                    f"  {key.replace('_', ' ')}: theirs {_m(row['theirs'], c)}, today "
                    f"{_m(row['today'], c)} ({row['ratio']:.2f}×)"
                )
    if d["published_discounts"] and be["committed_vs_on_demand"] is None:
        lines += ["", f"published {d['commitment']} discounts (reference only, not applied):"]
        for p in d["published_discounts"]:
            size = ("up to " if p["kind"] == "ceiling" else "") + f"{p['off'] * 100:g}%"
            lines.append(f"  {p['provider']}: {size}, {p['scope']} ({p['source']}, {p['date']})")
    if d["defaults_used"]:
        lines += ["", "defaults used (cost/data/tco_defaults.csv):"]
        for key, info in d["defaults_used"].items():
            lines.append(
                f"  {key} = {info['value']:g} {info['unit']}: {info['source']} ({info['date']})"
            )
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)
