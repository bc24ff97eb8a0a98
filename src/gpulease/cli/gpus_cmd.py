"""``gpulease gpus [NAME]``: accelerators and their cheapest offers, or every offer of one
accelerator."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import typer

from gpulease.cli.output import console, print_json
from gpulease.errors import UserInputError

SORTS = ("price", "price-per-tflop")


def gpus(
    name: Annotated[str | None, typer.Argument(help="Accelerator (e.g. H100, A100-80GB).")] = None,
    provider: Annotated[
        list[str] | None, typer.Option("--provider", "-p", help="Only this provider (repeatable).")
    ] = None,
    region: Annotated[
        list[str] | None, typer.Option("--region", "-r", help="Only this region (repeatable).")
    ] = None,
    spot: Annotated[bool, typer.Option("--spot", help="Spot prices only.")] = False,
    sort: Annotated[str, typer.Option("--sort", help="price or price-per-tflop.")] = "price",
    limit: Annotated[int, typer.Option("--limit", help="Rows to show with NAME.", min=1)] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List GPUs with their cheapest offers, or every offer of one GPU."""
    from gpulease.catalog import Catalog

    if sort not in SORTS:
        raise UserInputError(f"--sort: {sort!r} is not one of {', '.join(SORTS)}")
    catalog = Catalog.load()
    rows = offer_rows(catalog, name=name, providers=provider, regions=region, spot=spot)
    key = "per_tflop" if sort == "price-per-tflop" else "price_per_gpu"
    if name is None:
        rows = summarise(rows)
    rows.sort(key=lambda r: (r[key] is None, r[key] or 0.0, r["accelerator"], r.get("region", "")))
    if name is not None:
        rows = rows[:limit]
    if as_json:
        print_json(
            {"gpus" if name is None else "offers": rows, "catalog_as_of": str(catalog.as_of)}
        )
        return
    _render(rows, detailed=name is not None, spot=spot)


def _canonical(name: str) -> str:
    from gpulease.spec import canonical_accelerator_name

    try:
        return canonical_accelerator_name(name)
    except ValueError as exc:
        raise UserInputError(f"NAME: {exc}") from None


def offer_rows(
    catalog: Any,
    *,
    name: str | None,
    providers: list[str] | None,
    regions: list[str] | None,
    spot: bool,
) -> list[dict[str, Any]]:
    """One dict per offer passing the filters, with per-GPU prices."""
    offers = catalog.offers
    mask = np.ones(len(offers), dtype=bool)
    if name:
        mask &= offers.accelerator == _canonical(name)
    if providers:
        mask &= np.isin(offers.provider, [p.lower() for p in providers])
    if regions:
        mask &= np.isin(offers.region, regions)
    price = offers.price_spot if spot else offers.price_on_demand
    mask &= np.isfinite(price)
    rows = []
    for i in np.flatnonzero(mask):
        spec = catalog.spec_for(str(offers.part[i]))
        count = int(offers.gpu_count[i])
        per_gpu = float(price[i]) / count
        peak = spec.peak_tflops("bf16")
        rows.append(
            {
                "accelerator": str(offers.accelerator[i]),
                "part": str(offers.part[i]),
                "provider": str(offers.provider[i]),
                "region": str(offers.region[i]),
                "zone": str(offers.zone[i]) or None,
                "instance_type": str(offers.instance_type[i]),
                "gpus": count,
                "gpu_memory_gb": float(offers.gpu_memory_gb[i]),
                "pricing": "spot" if spot else "on_demand",
                "price_per_hour": float(price[i]),
                "price_per_gpu": round(per_gpu, 4),
                "bf16_tflops": peak,
                "per_tflop": round(per_gpu / peak, 6) if peak else None,
            }
        )
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per accelerator: its cheapest offer per GPU-hour and where offers exist."""
    best: dict[str, dict[str, Any]] = {}
    providers: dict[str, set[str]] = {}
    for row in rows:
        acc = row["accelerator"]
        providers.setdefault(acc, set()).add(row["provider"])
        if acc not in best or row["price_per_gpu"] < best[acc]["price_per_gpu"]:
            best[acc] = row
    return [
        {
            "accelerator": acc,
            "gpu_memory_gb": row["gpu_memory_gb"],
            "bf16_tflops": row["bf16_tflops"],
            "price_per_gpu": row["price_per_gpu"],
            "per_tflop": row["per_tflop"],
            "cheapest_at": f"{row['provider']} {row['region']}",
            "instance_type": row["instance_type"],
            "providers": sorted(providers[acc]),
        }
        for acc, row in best.items()
    ]


def _render(rows: list[dict[str, Any]], *, detailed: bool, spot: bool) -> None:
    from rich.table import Table

    kind = "spot" if spot else "on-demand"
    table = Table(title=f"GPUs ({kind} prices)", title_justify="left")
    if detailed:
        for col in (
            "provider",
            "region",
            "instance",
            "GPUs",
            "GB/GPU",
            "$/h",
            "$/GPU-h",
            "$/PFLOP-h",
        ):
            table.add_column(col, justify="right" if col.startswith(("$", "G")) else "left")
        for r in rows:
            where = r["region"] + (f" ({r['zone']})" if spot and r["zone"] else "")
            table.add_row(
                r["provider"],
                where,
                r["instance_type"],
                str(r["gpus"]),
                f"{r['gpu_memory_gb']:g}",
                f"{r['price_per_hour']:,.2f}",
                f"{r['price_per_gpu']:.2f}",
                _per_pflop(r["per_tflop"]),
            )
    else:
        for col in (
            "GPU",
            "GB",
            "BF16 TFLOPS",
            "from $/GPU-h",
            "$/PFLOP-h",
            "cheapest at",
            "providers",
        ):
            table.add_column(col, justify="right" if col[0] in "G$Bf" and col != "GPU" else "left")
        for r in rows:
            table.add_row(
                r["accelerator"],
                f"{r['gpu_memory_gb']:g}",
                f"{r['bf16_tflops']:g}",
                f"{r['price_per_gpu']:.2f}",
                _per_pflop(r["per_tflop"]),
                r["cheapest_at"],
                ", ".join(r["providers"]),
            )
    console().print(table)


def _per_pflop(per_tflop: float | None) -> str:
    return "—" if per_tflop is None else f"{per_tflop * 1000:.2f}"
