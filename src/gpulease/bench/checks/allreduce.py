"""``allreduce.node``, ``allreduce.cluster`` (bus bandwidth, GB/s) and ``net.latency`` (ms).

Bus bandwidth is NCCL's: algbw × 2(n−1)/n, algbw = bytes reduced ÷ time, n the number of ranks
— the figure a link's speed bounds whatever n is. ``allreduce.node`` reduces one buffer per GPU
of this node in this process (``torch.cuda.nccl``), against half the datasheet's bidirectional
GPU-to-GPU figure (one direction's worth); it skips with fewer than two GPUs.
``allreduce.cluster`` reduces across the nodes of ``options.rendezvous`` (one rank per node: NCCL
on GPU 0 of each, gloo on CPU nodes) and ``net.latency`` is the median round trip of a one-number
all-reduce over gloo; both skip without a rendezvous or with one node, and have no fixed
reference (peers and history judge them). Every node of a cluster must run the same families.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpulease.bench.checks import failed, gpus_unusable
from gpulease.bench.checks.timing import median_s
from gpulease.bench.report import Check

if TYPE_CHECKING:
    from gpulease.bench.checks import CheckContext
    from gpulease.bench.checks.cluster import ClusterGroup
    from gpulease.bench.options import BenchOptions

NODE_MB = {True: 256, False: 1024}
CLUSTER_MB = {"cpu": {True: 8, False: 64}, "cuda": {True: 256, False: 1024}}
PINGS = {True: 20, False: 100}


def bus_gbps(nbytes: int, seconds: float, ranks: int) -> float:
    """NCCL's bus bandwidth of an all-reduce of ``nbytes`` per rank over ``ranks`` ranks."""
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


def allreduce_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    try:
        node = node_allreduce(options, ctx)
    except Exception as exc:  # this node's GPUs failing must not keep the others waiting
        node = failed("allreduce.node", exc)
    group = _group(ctx)
    if isinstance(group, str):
        return [node, Check.skipped("allreduce.cluster", group)]
    return [node, cluster_allreduce(options, ctx, group)]


def net_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    group = _group(ctx)
    return [Check.skipped("net.latency", group) if isinstance(group, str) else
            latency(options, ctx, group)]  # fmt: skip


def _group(ctx: CheckContext) -> ClusterGroup | str:
    """The cluster's process group, or why the cross-node checks cannot run."""
    if ctx.cluster is None:
        return "a single node (no --rendezvous)"
    if ctx.cluster.rendezvous.world < 2:
        return "a cluster of one node"
    return ctx.cluster


def node_allreduce(options: BenchOptions, ctx: CheckContext) -> Check:
    if ctx.device != "cuda":
        return gpus_unusable("allreduce.node", ctx) or Check.skipped(
            "allreduce.node", ctx.no_cuda or "no GPU"
        )
    if ctx.gpu_count < 2:
        return Check.skipped("allreduce.node", "one GPU: nothing to reduce across")
    import torch
    from torch.cuda import nccl

    n = ctx.gpu_count
    size = NODE_MB[options.quick] * 1_000_000
    buffers = [torch.ones(size // 4, dtype=torch.float32, device=f"cuda:{i}") for i in range(n)]
    if not nccl.is_available(buffers):  # type: ignore[no-untyped-call]
        return Check.skipped("allreduce.node", "torch was built without NCCL")

    def reduce() -> None:
        nccl.all_reduce(buffers)  # type: ignore[no-untyped-call]
        for i in range(n):
            torch.cuda.synchronize(i)

    repeats = 5 if options.quick else 11
    seconds = median_s(reduce, ctx.timer, repeats=repeats, warmup=2)
    sheet = ctx.spec.intra_node_gbps / 2 if ctx.spec is not None else None
    return Check.measured(
        "allreduce.node",
        bus_gbps(size, seconds, n),
        reference=sheet or None,
        reference_source="datasheet",
        detail=f"NCCL all-reduce of {size // 1_000_000} MB fp32 over {n} GPUs, "
        f"median of {repeats}; reference: half the datasheet's "
        "bidirectional GPU-to-GPU GB/s",
        extra={"bytes": size, "ranks": n},
    )


def cluster_allreduce(options: BenchOptions, ctx: CheckContext, group: ClusterGroup) -> Check:
    dist = group.open()
    import torch

    where = "cuda" if group.cuda else "cpu"
    size = CLUSTER_MB[where][options.quick] * 1_000_000
    tensor = torch.ones(size // 4, dtype=torch.float32, device=where)

    def reduce() -> None:
        dist.all_reduce(tensor)
        if where == "cuda":
            torch.cuda.synchronize()

    dist.barrier()
    repeats = 5 if options.quick else 11
    seconds = median_s(reduce, ctx.timer, repeats=repeats, warmup=1)
    world = group.rendezvous.world
    backend = "NCCL" if where == "cuda" else "gloo"
    return Check.measured("allreduce.cluster", bus_gbps(size, seconds, world),
                          detail=f"{backend} all-reduce of {size // 1_000_000} MB fp32 over "
                          f"{world} nodes, median of {repeats}",
                          extra={"bytes": size, "ranks": world, "backend": backend})  # fmt: skip


def latency(options: BenchOptions, ctx: CheckContext, group: ClusterGroup) -> Check:
    dist = group.open()
    import torch

    one = torch.zeros(1, dtype=torch.float32)
    pings = PINGS[options.quick]
    dist.barrier()
    times: list[float] = []
    for i in range(pings + 3):
        start = ctx.timer()
        dist.all_reduce(one)
        if i >= 3:  # the first few set the connection up
            times.append(ctx.timer() - start)
    ms = statistics.median(times) * 1000.0
    world = group.rendezvous.world
    return Check.measured("net.latency", ms, detail=f"median of {pings} one-number gloo "
                          f"all-reduces over {world} nodes (a round trip)",
                          extra={"pings": pings, "ranks": world})  # fmt: skip
