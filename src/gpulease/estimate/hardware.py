"""The estimate for hardware the user names: ``gpulease estimate TASK --gpus H800:8 --nodes 256``
and the SDK's ``gpulease.estimate(task, gpus="H800:8", nodes=256)``.

The hardware need not be on offer in the catalog (a user's own cluster, a quote from a provider
the catalog lacks): only the part's spec is needed. The network between nodes is the caller's
(``fabric``, ``network_gbps``), else that of the catalog's best offer of the part with that many
GPUs, else an assumption by form factor (SXM / OAM boards: InfiniBand at 400 Gbps per GPU, as
in the DGX / HGX reference designs; PCIe and consumer boards: 25 Gbps Ethernet); the notes say
which. The result carries hours and GPU-hours as low / expected / high, memory per GPU, the
sharding and expert-parallel degree assumed, and every note of the estimate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpulease.catalog import AcceleratorSpec, Catalog
from gpulease.errors import UserInputError
from gpulease.estimate.inference import estimate_inference
from gpulease.estimate.memory import min_training_gpus
from gpulease.estimate.results import HoursRange, InferenceEstimate
from gpulease.estimate.scaling import FABRIC_EFFICIENCY
from gpulease.estimate.training import estimate_training
from gpulease.spec import Task, Workload, load_task
from gpulease.spec.accelerators import parse_accelerators

FABRICS = ("infiniband", "roce", "efa", "ethernet")
DATACENTRE_GBPS_PER_GPU = 400.0
PCIE_NODE_GBPS = 25.0


@dataclass(frozen=True, slots=True)
class HardwareEstimate:
    """How a workload runs on ``nodes`` × ``gpus_per_node`` GPUs of ``part``.

    ``fits`` is False when that hardware cannot hold the model (``notes`` says what it needs);
    ``hours`` and ``gpu_hours`` are then None. ``sharding`` is "ddp" / "fsdp" / "zero3" for
    training, "tp<N>" (GPUs per replica) for serving.
    """

    accelerator: str
    part: str
    gpus_per_node: int
    nodes: int
    fabric: str
    network_gbps: float
    kind: str
    fits: bool
    hours: HoursRange | None
    gpu_hours: HoursRange | None
    memory_per_gpu_gb: float | None
    sharding: str | None
    expert_parallel: int
    mfu: float | None
    scaling_efficiency: float | None
    total_flops: float | None
    notes: tuple[str, ...]

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``gpulease estimate --json``)."""
        data = asdict(self)
        data["gpus"] = self.gpus
        return data


def resolve_gpus(
    text: str, catalog: Catalog, *, option: str = "gpus"
) -> tuple[AcceleratorSpec, int]:
    """``"H800:8"`` → (the H800's spec, 8 per node); ``option`` names the argument in errors."""
    try:
        options, _ = parse_accelerators(text)
    except ValueError as exc:
        raise UserInputError(f"{option}: {exc}") from None
    if len(options) != 1:
        raise UserInputError(f"{option}: give one accelerator as NAME:COUNT, e.g. H800:8")
    [(name, count)] = options
    if count is None:
        raise UserInputError(f"{option}: give the GPUs per node as NAME:COUNT, e.g. {name}:8")
    spec = _part(text.partition(":")[0].strip(), name, catalog)
    if spec is None:
        raise UserInputError(
            f"{option}: no spec for {name} in the catalog (known: {', '.join(catalog.names())})"
        )
    return spec, count


def _part(raw: str, name: str, catalog: Catalog) -> AcceleratorSpec | None:
    """The spec of an exact part (``H100-SXM``), else of the name's usual cloud part."""
    from gpulease.catalog._names import resolve

    for spec in catalog.accelerators.values():
        if spec.part.lower() == raw.lower():
            return spec
    parts = catalog.parts_of(name)
    if len(parts) == 1:
        return parts[0]
    found = resolve("", "", name)
    return catalog.accelerators.get(found.part) if found is not None else None


def network_for(
    spec: AcceleratorSpec,
    gpus_per_node: int,
    catalog: Catalog,
    fabric: str | None,
    network_gbps: float | None,
) -> tuple[str, float, str | None]:
    """(fabric, Gbps per node, a note on where they came from or None when both were given)."""
    if fabric is not None and network_gbps is not None:
        return fabric, network_gbps, None
    offers = [
        o
        for o in catalog.query(spec.part)
        if o.part == spec.part and o.gpu_count == gpus_per_node and not math.isnan(o.network_gbps)
    ]
    if offers:
        best = max(offers, key=lambda o: (o.network_gbps, o.instance_type))
        found_fabric, found_gbps = best.fabric, best.network_gbps
        where = f"the catalog's {best.instance_type} ({best.provider})"
    else:
        datacentre = not any(w in spec.form_factor.lower() for w in ("pcie", "consumer"))
        found_fabric = "infiniband" if datacentre else "ethernet"
        found_gbps = DATACENTRE_GBPS_PER_GPU * gpus_per_node if datacentre else PCIE_NODE_GBPS
        where = f"assumed for {spec.form_factor} nodes (no offer in the catalog)"
    fabric = fabric or found_fabric
    network_gbps = network_gbps or found_gbps
    return fabric, network_gbps, f"network {fabric} {network_gbps:g} Gbps per node: {where}"


def _workload(task_or_workload: Task | Workload | str | Path) -> Workload:
    if isinstance(task_or_workload, Workload):
        return task_or_workload
    task = task_or_workload
    if isinstance(task, str | Path):
        task = load_task(task)
    if task.workload is None:
        raise UserInputError("the task has no `workload:`, so there is nothing to estimate")
    return task.workload


def estimate_hardware(
    task_or_workload: Task | Workload | str | Path,
    gpus: str,
    nodes: int = 1,
    *,
    fabric: str | None = None,
    network_gbps: float | None = None,
    catalog: Catalog | None = None,
) -> HardwareEstimate:
    """Estimate a task (or workload, or task file) on ``nodes`` nodes of ``gpus`` ("H800:8":
    accelerator and GPUs per node). Bad arguments raise :class:`UserInputError` naming them."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise UserInputError(f"nodes: expected a whole number ≥ 1, got {nodes!r}")
    if fabric is not None and fabric.lower() not in FABRIC_EFFICIENCY:
        raise UserInputError(f"fabric: {fabric!r} is not one of {', '.join(FABRICS)}")
    if network_gbps is not None and not network_gbps > 0:
        raise UserInputError(f"network_gbps: expected a positive number, got {network_gbps!r}")
    workload = _workload(task_or_workload)
    catalog = catalog or Catalog.load()
    spec, per_node = resolve_gpus(gpus, catalog)
    return estimate_on(
        workload,
        spec,
        gpus_per_node=per_node,
        nodes=nodes,
        network=network_for(spec, per_node, catalog, fabric and fabric.lower(), network_gbps),
    )


def estimate_on(
    workload: Workload,
    spec: AcceleratorSpec,
    *,
    gpus_per_node: int,
    nodes: int,
    network: tuple[str, float, str | None],
) -> HardwareEstimate:
    """The estimate on one configuration, with its notes (``network`` from :func:`network_for`)."""
    fabric, gbps, network_note = network
    base: dict[str, Any] = {
        "accelerator": spec.name,
        "part": spec.part,
        "gpus_per_node": gpus_per_node,
        "nodes": nodes,
        "fabric": fabric,
        "network_gbps": gbps,
        "kind": workload.kind,
    }
    extra = (network_note,) if network_note and nodes > 1 else ()
    if workload.kind == "inference":
        served = estimate_inference(workload, spec, gpus_per_node=gpus_per_node)
        return _serving(base, served, gpus_per_node * nodes, extra)
    trained = estimate_training(
        workload, spec, gpus_per_node=gpus_per_node, num_nodes=nodes, fabric=fabric,
        network_gbps=gbps,
    )  # fmt: skip
    if trained is None:
        return _no_fit(base, _why_not(workload, spec, gpus_per_node, nodes), extra)
    return HardwareEstimate(
        **base,
        fits=True,
        hours=trained.hours,
        gpu_hours=trained.hours.scale(trained.gpus),
        memory_per_gpu_gb=trained.memory_per_gpu_gb,
        sharding=trained.sharding,
        expert_parallel=trained.expert_parallel,
        mfu=trained.mfu,
        scaling_efficiency=trained.scaling_efficiency,
        total_flops=trained.total_flops,
        notes=trained.notes + extra,
    )


def _why_not(workload: Workload, spec: AcceleratorSpec, gpus_per_node: int, nodes: int) -> str:
    given = f"{nodes} × {gpus_per_node} given"
    if spec.peak_tflops(workload.precision) <= 0:
        return f"{spec.part} has no usable {workload.precision} throughput"
    need = min_training_gpus(workload, spec)
    if need is None:
        return f"the model state does not fit {spec.part} ({spec.memory_gb:g} GB) at any count"
    return f"the model needs ≥ {need[0]} × {spec.part} ({need[1]}) for memory; {given}"


def _no_fit(base: dict[str, Any], why: str, extra: tuple[str, ...]) -> HardwareEstimate:
    return HardwareEstimate(
        **base, fits=False, hours=None, gpu_hours=None, memory_per_gpu_gb=None, sharding=None,
        expert_parallel=1, mfu=None, scaling_efficiency=None, total_flops=None,
        notes=(f"does not fit: {why}", *extra),
    )  # fmt: skip


def _serving(
    base: dict[str, Any], served: InferenceEstimate | None, gpus: int, extra: tuple[str, ...]
) -> HardwareEstimate:
    if served is None:
        return _no_fit(base, f"weights + KV cache do not fit {base['gpus_per_node']} GPUs", extra)
    needed = served.replicas * served.gpus_per_replica
    notes = served.notes + extra
    if needed > gpus:
        notes = (f"the request rate needs {needed} GPUs; {gpus} given", *notes)
    if served.target_miss is not None:
        notes = (f"misses the latency target: {served.target_miss}", *notes)
    fits = needed <= gpus and served.target_miss is None
    return HardwareEstimate(
        **base, fits=fits, hours=served.hours, gpu_hours=served.hours.scale(gpus),
        memory_per_gpu_gb=served.memory_per_gpu_gb, sharding=f"tp{served.gpus_per_replica}",
        expert_parallel=1, mfu=None, scaling_efficiency=None, total_flops=None, notes=notes,
    )  # fmt: skip
