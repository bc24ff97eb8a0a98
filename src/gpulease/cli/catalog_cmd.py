"""``gpulease catalog show|update|import|reset``: the offer catalog, its age, and refreshing it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from gpulease.cli.output import console, print_json
from gpulease.errors import UserInputError

app = typer.Typer(help="Show, refresh or import the GPU offer catalog.", no_args_is_help=True)

STALE_AFTER_DAYS = 30
FORMATS = ("skypilot",)


@app.command("show")
def show(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    bundled: Annotated[
        bool, typer.Option("--bundled", help="The bundled snapshot, ignoring any refreshed cache.")
    ] = False,
) -> None:
    """Where the catalog comes from, how old it is, and what it holds."""
    from gpulease.catalog import Catalog

    catalog = Catalog.load(bundled_only=bundled)
    offers = catalog.offers
    age = catalog.age_days()
    per_provider = Counter(str(p) for p in offers.provider)
    data = {
        "source": catalog.source,
        "as_of": str(catalog.as_of),
        "age_days": age,
        "stale": age > STALE_AFTER_DAYS,
        "offers": len(offers),
        "providers": dict(sorted(per_provider.items())),
        "accelerators": sorted({str(a) for a in offers.accelerator}),
        "sources": dict(sorted(Counter(str(s) for s in offers.source).items())),
    }
    if as_json:
        print_json(data)
        return
    out = console()
    out.print(
        f"catalog: {catalog.source}  ({len(offers)} offers, as of {catalog.as_of}, {age} days old)"
    )
    for provider, count in sorted(per_provider.items()):
        out.print(f"  {provider:<12} {count:>6} offers")
    out.print(f"accelerators: {', '.join(data['accelerators'])}")  # type: ignore[arg-type]
    for row_source, count in sorted(Counter(str(s) for s in offers.source).items()):
        out.print(f"  source {row_source}: {count} offers", soft_wrap=True)
    if age > STALE_AFTER_DAYS:
        console(stderr=True).print(
            f"[yellow]warning:[/] the catalog is {age} days old (older than {STALE_AFTER_DAYS}); "
            "prices may have moved: run `gpulease catalog update`"
        )


@app.command("update")
def update(
    provider: Annotated[
        list[str] | None,
        typer.Option("--provider", "-p", help="Refresh only this provider (repeatable)."),
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option(
            "--from", help="A local folder of gpuhunt-format CSV files instead of the internet."
        ),
    ] = None,
    region: Annotated[
        list[str] | None,
        typer.Option(
            "--region",
            "-r",
            help="With --provider aws: query this AWS region (repeatable; default: the "
            "catalog's AWS regions with the most offers, at most 5).",
        ),
    ] = None,
) -> None:
    """Refresh offers from gpuhunt (needs the `gpuhunt` extra and the internet, or --from DIR).

    `--provider aws` alone reads live spot prices and instance facts from the AWS API (boto3,
    the `aws` extra, your AWS credentials) and merges them into the cache."""
    if provider and {p.lower() for p in provider} == {"aws"} and source is None:
        _update_aws(region or None)
        return
    if region:
        raise UserInputError("--region: only with --provider aws (live AWS prices), without --from")
    from gpulease.catalog import update_from_gpuhunt

    path = update_from_gpuhunt(provider or None, source_dir=source)
    _report(path)


def _update_aws(regions: list[str] | None) -> None:
    from gpulease.catalog._aws_live import update_from_aws

    result = update_from_aws(regions)
    err = console(stderr=True)
    for warning in result.warnings:
        err.print(f"[yellow]warning:[/] {warning}", soft_wrap=True)
    for note in result.notes:
        err.print(f"note: {note}", soft_wrap=True)
    console().print(
        f"aws-api: {result.rows} AWS offers from {', '.join(result.regions)}", soft_wrap=True
    )
    _report(result.path)


@app.command("import")
def import_(
    directory: Annotated[Path, typer.Argument(help="Folder of catalog files.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="skypilot")] = "skypilot",
) -> None:
    """Import offers from another tool's catalog files (SkyPilot: DIR/<cloud>/vms.csv)."""
    from gpulease.catalog import import_skypilot

    if fmt not in FORMATS:
        raise UserInputError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if not directory.is_dir():
        raise UserInputError(f"DIRECTORY: {directory} is not a folder")
    _report(import_skypilot(directory))


@app.command("reset")
def reset() -> None:
    """Forget refreshed and imported offers; use the bundled snapshot again."""
    from gpulease.catalog import clear_cache

    clear_cache()
    console().print("catalog cache cleared: using the bundled snapshot")


def _report(path: Path) -> None:
    from gpulease.catalog import Catalog

    catalog = Catalog.load()
    console().print(
        f"catalog updated: {len(catalog.offers)} offers, as of {catalog.as_of}, cached at {path}"
    )
