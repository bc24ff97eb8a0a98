"""``gpulease gpus [NAME]``: every accelerator with its cheapest offers, or every offer of one
accelerator (through :meth:`Catalog.gpu_summary` and :meth:`Catalog.query`).

Only hosts of one CPU architecture are listed (``--cpu-arch``, default x86_64, as a task's
``resources.cpu_arch``), so the cheapest line is one a default task can run on; a footer counts
the offers of other architectures left out. Rows that differ only by zone show their zone."""

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
    cpu_arch: Annotated[
        str,
        typer.Option("--cpu-arch", help="Host CPU: x86_64 (default), arm64 or any."),
    ] = "x86_64",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List GPUs with their cheapest offers, or every offer of one GPU."""
    from gpulease.catalog import Catalog

    if sort not in SORTS:
        raise UserInputError(f"--sort: {sort!r} is not one of {', '.join(SORTS)}")
    arch = _cpu_arch(cpu_arch)
    catalog = Catalog.load()
    wanted = None if name is None else _canonical(name)
    if wanted is None:
        summary = catalog.gpu_summary(provider, region, cpu_arch=arch)
        rows = [_summary_row(catalog, s, spot) for s in summary]
        rows = [r for r in rows if r["price_per_gpu"] is not None]
    else:
        offers = catalog.query(wanted, provider, region, spot=spot, cpu_arch=arch)
        rows = [_offer_row(catalog, o, spot) for o in offers]
    hidden = _other_arch(catalog, arch, wanted, provider, region, spot)
    key = "per_tflop" if sort == "price-per-tflop" else "price_per_gpu"
    rows.sort(key=lambda r: (r[key] is None, r[key] or 0.0, r["accelerator"]))
    if name is not None:
        rows = rows[:limit]
    if as_json:
        print_json({
            "gpus" if name is None else "offers": rows, "catalog_as_of": str(catalog.as_of),
            "cpu_arch": arch, "offers_other_cpu_arch": hidden,
        })  # fmt: skip
        return
    _render(rows, detailed=name is not None, spot=spot)
    if hidden:
        others = "x86_64" if arch == "arm64" else "arm64"
        console().print(
            f"[dim]{sum(hidden.values())} offer(s) on other host CPUs not shown "
            f"({', '.join(f'{a}: {n}' for a, n in sorted(hidden.items()))}); "
            f"--cpu-arch {others} or any lists them[/dim]"
        )


def _cpu_arch(value: str) -> str:
    from gpulease.spec.fields import parse_cpu_arch

    try:
        return parse_cpu_arch(value)
    except ValueError as exc:
        raise UserInputError(f"--cpu-arch: {exc}") from None


def _other_arch(
    catalog: Catalog, arch: str, accelerator: str | None,
    providers: list[str] | None, regions: list[str] | None, spot: bool,
) -> dict[str, int]:  # fmt: skip
    """Offers matching the other filters whose host CPU is not ``arch``, per architecture."""
    if arch == "any":
        return {}
    if accelerator is None:  # the summary lists priced offers of every accelerator
        keep = catalog.mask(providers=providers, regions=regions, spot=spot)
    else:
        keep = catalog.mask(accelerator, providers, regions, spot=spot)
    archs = catalog.offers.cpu_arch[keep & (catalog.offers.cpu_arch != arch)].tolist()
    return {a: archs.count(a) for a in sorted(set(archs))}


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
        "cpu_arch": offer.cpu_arch if offer else None,
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
        zoned = _zone_shown(rows, spot)
        for col in (
            "provider",
            "region",
            "instance",
            "arch",
            "GPUs",
            "GB/GPU",
            "$/h",
            "$/GPU-h",
            "$/PFLOP-h",
        ):
            table.add_column(col, justify="right" if col.startswith(("$", "G")) else "left")
        for r, show_zone in zip(rows, zoned, strict=True):
            where = r["region"] + (f" ({r['zone']})" if show_zone else "")
            table.add_row(
                r["provider"],
                where,
                r["instance_type"],
                r["cpu_arch"],
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
                _cheapest_at(r),
                ", ".join(r["providers"]),
            )
    console().print(table)


def _zone_shown(rows: list[dict[str, Any]], spot: bool) -> list[bool]:
    """Whether each row shows its zone: always for spot prices (they differ by zone), else when
    another row has the same provider, region and instance type (rows that differ only by
    zone)."""
    keys = [(r["provider"], r["region"], r["instance_type"]) for r in rows]
    return [
        bool(r["zone"]) and (spot or keys.count(k) > 1) for r, k in zip(rows, keys, strict=True)
    ]


def _cheapest_at(row: dict[str, Any]) -> str:
    where = row["cheapest_at"] or "—"
    arch = row.get("cpu_arch")
    return f"{where} ({arch})" if arch and arch != "x86_64" else where


def _per_pflop(per_tflop: float | None) -> str:
    return "—" if per_tflop is None else f"{per_tflop * 1000:.2f}"
