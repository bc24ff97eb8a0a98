"""``gpulease gpus [NAME]``: every accelerator with its cheapest offers, or every offer of one
accelerator (through :meth:`Catalog.gpu_summary` and :meth:`Catalog.query`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpulease.cli.output import console, print_json
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.catalog import Catalog, GpuSummary, Offer

SORTS = ("price", "price-per-tflop")


def gpus(
    name: Annotated[str | None, typer.Argument(help="Accelerator (e.g. H100, A100-80GB).")] = None,
    provider: Annotated[
        list[str] | None, typer.Option("--provider", "-p", help="Only this provider (repeatable).")
    ] = None,
    region: Annotated[
        list[str] | None,
        typer.Option("--region", "-r", help="Only this region or pattern, e.g. eu-* (repeatable)."),
    ] = None,
    spot: Annotated[bool, typer.Option("--spot", help="Spot prices.")] = False,
    sort: Annotated[str, typer.Option("--sort", help="price or price-per-tflop.")] = "price",
    limit: Annotated[int, typer.Option("--limit", help="Rows to show with NAME.", min=1)] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List GPUs with their cheapest offers, or every offer of one GPU."""
    from gpulease.catalog import Catalog

    if sort not in SORTS:
        raise UserInputError(f"--sort: {sort!r} is not one of {', '.join(SORTS)}")
    catalog = Catalog.load()
    if name is None:
        rows = [_summary_row(catalog, s, spot) for s in catalog.gpu_summary(provider, region)]
        rows = [r for r in rows if r["price_per_gpu"] is not None]
    else:
        offers = catalog.query(_canonical(name), provider, region, spot=spot)
        rows = [_offer_row(catalog, o, spot) for o in offers]
    key = "per_tflop" if sort == "price-per-tflop" else "price_per_gpu"
    rows.sort(key=lambda r: (r[key] is None, r[key] or 0.0, r["accelerator"]))
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


def _per_tflop(price: float | None, tflops: float) -> float | None:
    return round(price / tflops, 6) if price is not None and tflops > 0 else None


def half_precision_tflops(catalog: Catalog, part: str) -> float:
    """Dense 16-bit peak of a part: BF16, or FP16 where the part has no BF16 (V100, T4)."""
    spec = catalog.spec_for(part)
    return max(spec.peak_tflops("bf16"), spec.peak_tflops("fp16"))


def _summary_row(catalog: Catalog, summary: GpuSummary, spot: bool) -> dict[str, Any]:
    price = summary.spot_per_gpu_hour if spot else summary.on_demand_per_gpu_hour
    offer = summary.spot_offer if spot else summary.on_demand_offer
    tflops = half_precision_tflops(catalog, offer.part) if offer else 0.0
    return {
        "accelerator": summary.accelerator,
        "parts": list(summary.parts),
        "gpu_memory_gb": summary.memory_gb,
        "tflops_16bit": tflops,
        "price_per_gpu": round(price, 4) if price is not None else None,
        "on_demand_per_gpu": summary.on_demand_per_gpu_hour,
        "spot_per_gpu": summary.spot_per_gpu_hour,
        "per_tflop": _per_tflop(price, tflops),
        "cheapest_at": f"{offer.provider} {offer.region}" if offer else None,
        "instance_type": offer.instance_type if offer else None,
        "providers": list(summary.providers),
        "offers": summary.offers,
    }


def _offer_row(catalog: Catalog, offer: Offer, spot: bool) -> dict[str, Any]:
    price = offer.price_spot if spot else offer.price_on_demand
    per_gpu = price / offer.gpu_count if price is not None else None
    tflops = half_precision_tflops(catalog, offer.part)
    return {
        **asdict(offer),
        "pricing": "spot" if spot else "on_demand",
        "price_per_hour": price,
        "price_per_gpu": round(per_gpu, 4) if per_gpu is not None else None,
        "tflops_16bit": tflops,
        "per_tflop": _per_tflop(per_gpu, tflops),
        "gpus": offer.gpu_count,
    }


def _render(rows: list[dict[str, Any]], *, detailed: bool, spot: bool) -> None:
    from rich.table import Table

    table = Table(title=f"GPUs ({'spot' if spot else 'on-demand'} prices)", title_justify="left")
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
            "16-bit TFLOPS",
            "from $/GPU-h",
            "$/PFLOP-h",
            "cheapest at",
            "providers",
        ):
            table.add_column(
                col, justify="left" if col in {"GPU", "cheapest at", "providers"} else "right"
            )
        for r in rows:
            table.add_row(
                r["accelerator"],
                f"{r['gpu_memory_gb']:g}",
                f"{r['tflops_16bit']:g}",
                f"{r['price_per_gpu']:.2f}",
                _per_pflop(r["per_tflop"]),
                r["cheapest_at"] or "—",
                ", ".join(r["providers"]),
            )
    console().print(table)


def _per_pflop(per_tflop: float | None) -> str:
    return "—" if per_tflop is None else f"{per_tflop * 1000:.2f}"
