"""``gpulease top [CLUSTER]``: a live terminal view of the running clusters' GPUs — per node and
GPU the utilisation, memory, power and temperature, and the job's throughput (what
``gpulease.train`` reports) — refreshed in place (Rich Live) from the server's
``GET /v1/telemetry/latest``. ``--once`` prints one table; ``--json`` prints one snapshot for
scripts. Also the status table's GPU column (:func:`gpu_utilisation_by_cluster`). Moves no
states.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpulease.cli.follow import client
from gpulease.cli.output import console, print_json
from gpulease.errors import GpuleaseError

if TYPE_CHECKING:
    from rich.table import Table

    from gpulease.client import Client

_COLUMNS = ("CLUSTER", "NODE", "GPU", "UTIL", "MEMORY", "POWER", "TEMP", "THROUGHPUT", "AGE")


def top(
    cluster: Annotated[str | None, typer.Argument(help="Only this cluster.")] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one table and exit.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one snapshot as JSON and exit.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.2, help="Seconds between refreshes.")
    ] = 2.0,
) -> None:
    """The GPUs of the live clusters, refreshing in place (Ctrl-C ends it)."""
    with client() as api:
        if as_json:
            print_json(snapshot(api, cluster))
            return
        if once:
            console().print(render(snapshot(api, cluster)))
            return
        _live(api, cluster, interval)


def _live(api: Client, cluster: str | None, interval: float) -> None:
    from rich.live import Live

    with Live(render(snapshot(api, cluster)), console=console(), auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(render(snapshot(api, cluster)), refresh=True)
        except KeyboardInterrupt:
            return


# ---- the snapshot -------------------------------------------------------------------------------


def snapshot(api: Client, cluster: str | None = None) -> dict[str, Any]:
    """``{"at", "clusters": [{cluster, job_id, provider, region, instance_type, spot,
    price_per_hour, gpu_utilization_pct, nodes: [{node_rank, age_s, gpu_source, gpus, host,
    train}]}]}`` — the server's newest samples, trimmed to what ``top`` shows."""
    latest = api.telemetry_latest(cluster)
    return {"at": time.time(), "clusters": [_cluster(c) for c in latest.get("clusters", [])]}


def _cluster(view: Mapping[str, Any]) -> dict[str, Any]:
    head = {k: v for k, v in view.items() if k != "nodes"}
    return {**head, "nodes": [_node(n) for n in view.get("nodes", [])]}


def _node(view: Mapping[str, Any]) -> dict[str, Any]:
    sample = view.get("sample") or {}
    return {
        "node_rank": view.get("node_rank"),
        "age_s": view.get("age_s"),
        "gpu_source": sample.get("gpu_source"),
        "gpus": list(sample.get("gpus") or []),
        "host": sample.get("node") or {},
        "train": sample.get("train"),
    }


# ---- rendering ----------------------------------------------------------------------------------


def render(snap: Mapping[str, Any]) -> Table:
    """One table row per GPU (or per node without GPUs)."""
    from rich.table import Table

    table = Table(box=None, header_style="bold", title="gpulease top", title_justify="left")
    for column in _COLUMNS:
        table.add_column(column, justify="right" if column not in ("CLUSTER", "GPU") else "left")
    clusters = snap.get("clusters", [])
    for c in clusters:
        for node in c["nodes"]:
            for row in _rows(c, node):
                table.add_row(*row)
        if not c["nodes"]:
            table.add_row(c["cluster"], "-", "no telemetry yet", *["-"] * 6)
    if not clusters:
        table.caption = "no live clusters"
    return table


def _rows(cluster: Mapping[str, Any], node: Mapping[str, Any]) -> list[tuple[str, ...]]:
    where = (str(cluster["cluster"]), str(node["node_rank"]))
    speed, age = _throughput(node.get("train")), _seconds(node.get("age_s"))
    gpus = node["gpus"]
    if not gpus:
        cpu = node["host"].get("cpu_pct")
        what = "no GPU" if cpu is None else f"no GPU (CPU {cpu:.0f}%)"
        return [(*where, what, "-", "-", "-", "-", speed, age)]
    rows: list[tuple[str, ...]] = []
    for gpu in gpus:
        rows.append((
            *where,
            f"{gpu.get('index', '?')} {gpu.get('name') or ''}".strip(),
            _pct(gpu.get("utilization_pct")),
            _memory(gpu.get("memory_used_mb"), gpu.get("memory_total_mb")),
            _power(gpu.get("power_w"), gpu.get("power_limit_w")),
            "-" if gpu.get("temperature_c") is None else f"{gpu['temperature_c']:.0f}°C",
            speed,
            age,
        ))  # fmt: skip
        speed = ""  # the job's figures once per node
    return rows


def _pct(value: float | None) -> str:
    if value is None:
        return "-"
    bar = "█" * round(value / 10)
    return f"{value:5.1f}% {bar:<10}"


def _memory(used: float | None, total: float | None) -> str:
    if used is None:
        return "-"
    if total:
        return f"{used / 1024:.1f}/{total / 1024:.1f} GB"
    return f"{used / 1024:.1f} GB"


def _power(watts: float | None, limit: float | None) -> str:
    if watts is None:
        return "-"
    return f"{watts:.0f}/{limit:.0f} W" if limit else f"{watts:.0f} W"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


def _throughput(train: Mapping[str, Any] | None) -> str:
    """``step 120 · 3,200 tok/s · MFU 41% · data 5%`` from what gpulease.train reported."""
    if not train:
        return "-"
    parts = [f"step {train['step']}"] if train.get("step") is not None else []
    if train.get("tokens_per_s") is not None:
        parts.append(f"{train['tokens_per_s']:,.0f} tok/s")
    elif train.get("samples_per_s") is not None:
        parts.append(f"{train['samples_per_s']:,.1f} samples/s")
    if train.get("mfu") is not None:
        parts.append(f"MFU {train['mfu'] * 100:.0f}%")
    if train.get("data_wait_ratio") is not None:
        parts.append(f"data {train['data_wait_ratio'] * 100:.0f}%")
    return " · ".join(parts) or "-"


# ---- the status table's GPU column -----------------------------------------------------------


def gpu_utilisation_by_cluster(api: Client) -> dict[str, float | None]:
    """Each live cluster's mean GPU utilisation (None: no GPU telemetry); {} when the server
    does not answer the telemetry read (the status table then shows "-")."""
    try:
        latest = api.telemetry_latest()
    except GpuleaseError:
        return {}
    return {c["cluster"]: c.get("gpu_utilization_pct") for c in latest.get("clusters", [])}
