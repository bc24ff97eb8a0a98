"""``gpu.count``, ``gpu.memory``, ``gpu.topology``: the GPUs NVML sees against what the offer
sold (``options.expected``) and the part's datasheet. Fewer GPUs than sold, or less memory per
GPU, fails outright (a ratio of 7/8 is not "nearly fine"); the topology figure is the slowest
GPU's GPU-to-GPU bandwidth — its active NVLink links × the link's speed, else its PCIe link at
most — against the datasheet's ``intra_node_gbps``, and a node sold with NVLink whose links are
all down fails. NVML only (no torch): on a node without an NVIDIA driver all three skip.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpulease.bench.checks.device import nvml
from gpulease.bench.report import Check

if TYPE_CHECKING:
    from gpulease.bench.checks import CheckContext
    from gpulease.bench.options import BenchOptions

MEMORY_PASS = 0.95  # NVML's total is a little under the sold size on some parts (ECC, reserve)
NVLINK_GBPS = {1: 40.0, 2: 50.0, 3: 50.0, 4: 50.0, 5: 100.0}  # per link, both directions
PCIE_LANE_GBPS = {1: 0.5, 2: 1.0, 3: 2.0, 4: 4.0, 5: 8.0, 6: 16.0}  # per lane, both directions


def none_found(why: str, options: BenchOptions) -> list[Check]:
    """No GPU here: skipped — but ``gpu.count`` fails when the offer sold some."""
    sold = options.expected.gpu_count
    checks = [Check.skipped(n, why) for n in ("gpu.count", "gpu.memory", "gpu.topology")]
    if sold:
        checks[0] = Check.measured("gpu.count", 0.0, reference=sold, reference_source="offer",
                                   detail=f"{why}; the offer sold {sold}")  # fmt: skip
    return checks


def gpu_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    lib, why = nvml()
    if lib is None:
        return none_found(why, options)
    try:
        handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(lib.nvmlDeviceGetCount())]
        if not handles:
            return none_found("NVML finds no GPU on this node", options)
        memory_gb = [lib.nvmlDeviceGetMemoryInfo(h).total / 1e9 for h in handles]
        links = [gpu_link(lib, h) for h in handles]
    finally:
        lib.nvmlShutdown()
    return [count_check(len(handles), options, ctx), memory_check(memory_gb, options, ctx),
            topology_check(links, options, ctx)]  # fmt: skip


def _sold(check: Check, ok: bool, what: str) -> Check:
    """``check`` passing when ``ok``, else failing (no warn band for what was sold)."""
    if check.ratio is None:
        return check
    return replace(check, verdict="pass" if ok else "fail", detail=f"{check.detail}; {what}")


def count_check(count: int, options: BenchOptions, ctx: CheckContext) -> Check:
    sold = options.expected.gpu_count
    check = Check.measured(
        "gpu.count",
        float(count),
        reference=sold,
        reference_source="offer",
        detail=f"NVML: {count} × {ctx.gpu_name or 'GPU'}",
        extra={"torch_sees": ctx.gpu_count if ctx.device == "cuda" else None},
    )
    return _sold(check, sold is not None and count >= sold, f"the offer sold {sold}")


def memory_check(memory_gb: list[float], options: BenchOptions, ctx: CheckContext) -> Check:
    sold = options.expected.gpu_memory_gb
    source = "offer"
    if sold is None and ctx.spec is not None:
        sold, source = ctx.spec.memory_gb, "datasheet"
    least = min(memory_gb)
    check = Check.measured(
        "gpu.memory",
        least,
        reference=sold,
        reference_source=source,
        detail="NVML total memory of the smallest GPU",
        extra={"per_gpu_gb": [round(m, 2) for m in memory_gb]},
    )
    ok = sold is not None and least >= MEMORY_PASS * sold
    return _sold(check, ok, f"at least {MEMORY_PASS:.0%} of {sold} GB passes")


def gpu_link(lib: Any, handle: Any) -> dict[str, Any]:
    """One GPU's links: active NVLink links and their GB/s, its PCIe link at most."""
    active, gbps = 0, 0.0
    for link in range(int(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            if lib.nvmlDeviceGetNvLinkState(handle, link) != 1:
                continue
            version = int(lib.nvmlDeviceGetNvLinkVersion(handle, link))
        except Exception:  # NotSupported: no NVLink, or past the part's links
            continue
        active += 1
        gbps += NVLINK_GBPS.get(version, 50.0)
    try:
        gen = int(lib.nvmlDeviceGetMaxPcieLinkGeneration(handle))
        width = int(lib.nvmlDeviceGetMaxPcieLinkWidth(handle))
        pcie = PCIE_LANE_GBPS.get(gen, 0.0) * width
    except Exception:
        gen, width, pcie = 0, 0, 0.0
    return {"nvlink_links": active, "nvlink_gbps": gbps, "pcie": f"gen{gen} x{width}",
            "pcie_gbps": pcie}  # fmt: skip


def topology_check(links: list[dict[str, Any]], options: BenchOptions,
                   ctx: CheckContext) -> Check:  # fmt: skip
    per_gpu = [max(link["nvlink_gbps"], link["pcie_gbps"]) for link in links]
    worst = min(per_gpu)
    nvlinks = min(link["nvlink_links"] for link in links)
    kind = "nvlink" if nvlinks else "pcie"
    detail = (f"{nvlinks} NVLink links active on the GPU with fewest" if nvlinks
              else f"no NVLink; PCIe {links[0]['pcie']} at most")  # fmt: skip
    extra = {"interconnect": kind, "links": links}
    if len(links) < 2:
        return Check.measured("gpu.topology", worst, detail=f"{detail}; one GPU: no GPU-to-GPU "
                              "link to judge", extra=extra)  # fmt: skip
    sheet = ctx.spec.intra_node_gbps if ctx.spec is not None else None
    check = Check.measured(
        "gpu.topology",
        worst,
        reference=sheet or None,
        reference_source="datasheet",
        detail=detail,
        extra=extra,
    )
    sold = options.expected.interconnect or (ctx.spec.interconnect if ctx.spec else None)
    if sold == "nvlink" and kind != "nvlink":
        return replace(check, verdict="fail", detail=f"{detail}; sold with NVLink")
    return check
