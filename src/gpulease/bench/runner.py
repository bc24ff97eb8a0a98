"""``run_bench(options) -> BenchReport``: find what this node has, pick the datasheet it should
meet, run the families of ``options.families()`` in order and gather their checks with the
versions that measured them and the run's wall time. A bench never raises for one bad check: a
family that cannot import what it needs reports its checks as ``skip``, one that breaks as
``fail``, each with the error in its detail.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import socket
import sys
import time
from collections.abc import Callable

from gpulease.bench.checks import FAMILY_CHECKS, CheckContext, CheckFunction
from gpulease.bench.checks.cluster import ClusterGroup
from gpulease.bench.checks.device import Found, detect, nvml
from gpulease.bench.options import BenchOptions
from gpulease.bench.references import spec_for
from gpulease.bench.report import BenchReport, Check, unit_of


def context_for(options: BenchOptions, found: Found,
                timer: Callable[[], float] = time.perf_counter) -> CheckContext:  # fmt: skip
    """The checks' shared context for this node."""
    expected = options.expected
    spec, chosen = (None, "a CPU node")
    if found.gpu_count or expected.accelerator:
        spec, chosen = spec_for(expected.accelerator, found.gpu_name, expected.interconnect)
    cluster = None
    if options.rendezvous is not None:
        cluster = ClusterGroup(options.rendezvous, cuda=found.device == "cuda")
    return CheckContext(found.device, found.gpu_count, found.gpu_name, spec, found.why, timer,
                        cluster, notes={"reference": chosen})  # fmt: skip


def run_family(family: str, options: BenchOptions, ctx: CheckContext) -> list[Check]:
    """The checks of one family; what it raises becomes its checks' skip or fail."""
    module_name, function, names = FAMILY_CHECKS[family]
    try:
        module = importlib.import_module(f"gpulease.bench.checks.{module_name}")
        check: CheckFunction = getattr(module, function)
        return check(options, ctx)
    except ImportError as exc:
        why = f"needs {exc.name or exc}: not installed here"
        return [Check.skipped(name, why) for name in names]
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}"
        return [Check(name, None, unit_of(name), verdict="fail", detail=detail) for name in names]


def versions() -> dict[str, str]:
    """What measured: python, platform, numpy, torch and nvidia-ml-py (when installed),
    gpulease, CUDA (when torch ran on it) and the NVIDIA driver (when there is one)."""
    found = {"python": platform.python_version(), "platform": sys.platform}
    for package in ("numpy", "torch", "nvidia-ml-py", "gpulease"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.version, "cuda", None):
        found["cuda"] = str(torch.version.cuda)
    lib, _why = nvml()
    if lib is not None:
        try:
            driver = lib.nvmlSystemGetDriverVersion()
            found["nvidia_driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        finally:
            lib.nvmlShutdown()
    return found


def run_bench(options: BenchOptions, *, timer: Callable[[], float] = time.perf_counter,
              wall: Callable[[], float] = time.time) -> BenchReport:  # fmt: skip
    """Run the bench on this node (see the module docstring)."""
    started, start = wall(), timer()
    found = detect()
    ctx = context_for(options, found, timer)
    checks: list[Check] = []
    try:
        for family in options.families():
            checks.extend(run_family(family, options, ctx))
    finally:
        if ctx.cluster is not None:
            ctx.cluster.close()
    spec = ctx.spec
    return BenchReport(
        node=options.node or socket.gethostname(),
        started_at=started,
        wall_s=timer() - start,
        quick=options.quick,
        device=found.device,
        accelerator=spec.name if spec is not None else options.expected.accelerator,
        gpu_count=found.gpu_count,
        checks=tuple(checks),
        instance_type=options.expected.instance_type,
        versions=versions(),
    )
