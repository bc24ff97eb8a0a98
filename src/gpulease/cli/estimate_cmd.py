"""``gpulease estimate TASK.yaml --gpus H800:8 --nodes 256``: hours, GPU-hours and memory per GPU
of a task on hardware the user names, on offer in the catalog or not (in process, no server).

Exit codes: 0 with an estimate, 1 when that hardware cannot run the workload (the reason is
printed, and ``fits: false`` in JSON), 2 for bad input (the message names the option).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulease.cli.output import console, hours, print_json
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.estimate.hardware import HardwareEstimate


def estimate(
    task_file: Annotated[Path, typer.Argument(help="Task YAML with a `workload:`.")],
    gpus: Annotated[
        str, typer.Option("--gpus", "-g", help="Accelerator and GPUs per node, e.g. H800:8.")
    ],
    nodes: Annotated[int, typer.Option("--nodes", "-n", help="Nodes.", min=1)] = 1,
    fabric: Annotated[
        str | None,
        typer.Option("--fabric", help="Network between nodes: infiniband, roce, efa, ethernet."),
    ] = None,
    network_gbps: Annotated[
        float | None, typer.Option("--network-gbps", help="Network bandwidth per node, Gbps.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Estimate a task on hardware you name: hours, GPU-hours, memory per GPU, sharding."""
    from gpulease.catalog import Catalog
    from gpulease.estimate.hardware import FABRICS, estimate_on, network_for, resolve_gpus
    from gpulease.estimate.scaling import FABRIC_EFFICIENCY
    from gpulease.spec import load_task

    if fabric is not None and fabric.lower() not in FABRIC_EFFICIENCY:
        raise UserInputError(f"--fabric: {fabric!r} is not one of {', '.join(FABRICS)}")
    if network_gbps is not None and not network_gbps > 0:
        raise UserInputError(f"--network-gbps: expected a positive number, got {network_gbps:g}")
    catalog = Catalog.load()
    spec, per_node = resolve_gpus(gpus, catalog, option="--gpus")
    task = load_task(task_file)
    if task.workload is None:
        raise UserInputError(f"{task_file}: the task has no `workload:`, nothing to estimate")
    network = network_for(spec, per_node, catalog, fabric and fabric.lower(), network_gbps)
    result = estimate_on(task.workload, spec, gpus_per_node=per_node, nodes=nodes, network=network)
    if as_json:
        print_json(result.to_dict())
    else:
        render(result, title=task.name or task_file.name)
    if not result.fits:
        raise typer.Exit(1)


def _range(value: tuple[float, float, float], fmt: str) -> str:
    low, expected, high = value
    return f"{expected:{fmt}}  ({low:{fmt}} – {high:{fmt}})"


def render(result: HardwareEstimate, *, title: str) -> None:
    from rich.table import Table

    out = console()
    table = Table(title=f"{title} on {result.nodes} × {result.gpus_per_node} {result.accelerator}",
                  title_justify="left", show_header=False)  # fmt: skip
    table.add_column("what")
    table.add_column("estimate")
    table.add_row("hardware", f"{result.gpus:,} × {result.part} ({result.nodes} node(s))")
    if result.nodes > 1:
        table.add_row("network", f"{result.fabric} {result.network_gbps:g} Gbps per node")
    if result.hours is not None and result.gpu_hours is not None:
        h, g = result.hours, result.gpu_hours
        table.add_row("hours", f"{hours(h.expected)}  ({hours(h.low)} – {hours(h.high)})")
        table.add_row("GPU-hours", _range((g.low, g.expected, g.high), ",.0f"))
    if result.total_flops is not None:
        table.add_row("work", f"{result.total_flops:.3g} FLOPs")
    if result.memory_per_gpu_gb is not None:
        table.add_row("memory per GPU", f"{result.memory_per_gpu_gb:.1f} GB")
    if result.sharding is not None:
        sharding = result.sharding
        if result.expert_parallel > 1:
            sharding += f", experts over {result.expert_parallel} GPUs"
        table.add_row("sharding", sharding)
    if result.mfu is not None and result.scaling_efficiency is not None:
        table.add_row("MFU / scaling", f"{result.mfu:.0%} / {result.scaling_efficiency:.0%}")
    out.print(table)
    for note in result.notes:
        out.print(f"  {note}", markup=False)
