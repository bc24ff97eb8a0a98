"""Process-group set-up for data-parallel jobs: ``setup_distributed()`` → :class:`DistInfo`.

Owns reading the launcher's environment (torchrun's ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/
``LOCAL_WORLD_SIZE``/``GROUP_RANK``/``GROUP_WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``, or the
gpulease agent's ``GPULEASE_*`` variables), choosing the backend (NCCL on CUDA, gloo otherwise),
binding the process to its GPU and initialising ``torch.distributed`` once.

Without torchrun on a multi-node cluster (``GPULEASE_NUM_NODES`` > 1, no ``WORLD_SIZE``): with at
most one GPU per node the job runs one process per node, so the rank is ``GPULEASE_NODE_RANK`` and
the world size ``GPULEASE_NUM_NODES`` (the agent's ``MASTER_ADDR``/``MASTER_PORT`` rendezvous); with
several GPUs per node one process would leave GPUs idle, so it is a :class:`UserInputError` that
shows the torchrun line to use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from gpulease.errors import UserInputError

if TYPE_CHECKING:
    import torch

_state: dict[str, DistInfo | None] = {"info": None}


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: global and per-node ranks and sizes, its device, the backend
    (``None`` when there is no process group), and ``is_main`` (global rank 0)."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    device: torch.device
    backend: str | None
    is_main: bool


@dataclass(frozen=True)
class _Layout:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int


def setup_distributed(backend: str | None = None, timeout_s: float = 1800) -> DistInfo:
    """Initialise ``torch.distributed`` from the environment and return this process's place.

    One process (no ``WORLD_SIZE``, or 1): no process group, rank 0, ``cuda:0`` or ``cpu``.
    Otherwise ``backend`` (default NCCL when CUDA is available, else gloo) with a
    ``timeout_s`` collective timeout; on CUDA the process is bound to ``cuda:LOCAL_RANK``.
    Calling it again returns the same info without re-initialising.
    """
    if _state["info"] is not None:
        return _state["info"]
    if timeout_s <= 0:
        raise UserInputError(f"setup_distributed(timeout_s={timeout_s}): must be > 0 seconds")
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        info = _adopt_existing()
    else:
        info = _initialise(_layout(os.environ), backend, timeout_s)
    _state["info"] = info
    return info


def cleanup_distributed() -> None:
    """Destroy the process group (if any) so the next :func:`setup_distributed` starts afresh.

    Collective: every rank calls it. A barrier comes first, so no rank tears its connections down
    while a peer still uses them (with gloo that aborts the peer: "terminate called without an
    active exception").
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()
    _state["info"] = None


# -- the environment ---------------------------------------------------------------------------


def _int_env(env: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise UserInputError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < minimum:
        raise UserInputError(f"environment variable {name}={raw!r} must be >= {minimum}")
    return value


def _first(env: Mapping[str, str], names: tuple[str, ...], minimum: int) -> int | None:
    for name in names:
        value = _int_env(env, name, minimum)
        if value is not None:
            return value
    return None


def _layout(env: Mapping[str, str]) -> _Layout:
    """The ranks and sizes the launcher set (torchrun, a manual launch, or the gpulease agent)."""
    world_size = _int_env(env, "WORLD_SIZE", 1)
    if world_size is None:
        return _gpulease_layout(env)
    rank = _int_env(env, "RANK", 0)
    if rank is None:
        if world_size > 1:
            raise UserInputError(
                f"WORLD_SIZE={world_size} but RANK is not set; launch with torchrun"
            )
        rank = 0
    if rank >= world_size:
        raise UserInputError(f"environment variable RANK={rank} must be < WORLD_SIZE={world_size}")
    num_nodes = _first(env, ("GROUP_WORLD_SIZE", "NNODES", "GPULEASE_NUM_NODES"), 1) or 1
    local_world_size = _int_env(env, "LOCAL_WORLD_SIZE", 1)
    if local_world_size is None:
        local_world_size = world_size // num_nodes if world_size % num_nodes == 0 else world_size
    local_rank = _int_env(env, "LOCAL_RANK", 0)
    if local_rank is None:
        local_rank = rank % local_world_size
    if local_rank >= local_world_size:
        raise UserInputError(
            f"environment variable LOCAL_RANK={local_rank} must be < "
            f"LOCAL_WORLD_SIZE={local_world_size}"
        )
    node_rank = _first(env, ("GROUP_RANK", "NODE_RANK", "GPULEASE_NODE_RANK"), 0)
    if node_rank is None:
        node_rank = rank // local_world_size
    return _Layout(rank, local_rank, world_size, local_world_size, node_rank, num_nodes)


def _gpulease_layout(env: Mapping[str, str]) -> _Layout:
    """No torchrun: one process, or one process per node of a gpulease cluster."""
    num_nodes = _int_env(env, "GPULEASE_NUM_NODES", 1) or 1
    if num_nodes == 1:
        return _Layout(0, 0, 1, 1, 0, 1)
    gpus = _int_env(env, "GPULEASE_GPUS_PER_NODE", 0) or 0
    if gpus > 1:
        raise UserInputError(
            f"GPULEASE_NUM_NODES={num_nodes} with {gpus} GPUs per node needs one process per GPU: "
            "run the script under torchrun --nnodes $GPULEASE_NUM_NODES --nproc-per-node "
            "$GPULEASE_GPUS_PER_NODE --node-rank $GPULEASE_NODE_RANK --master-addr $MASTER_ADDR "
            "--master-port $MASTER_PORT"
        )
    node_rank = _int_env(env, "GPULEASE_NODE_RANK", 0)
    if node_rank is None:
        raise UserInputError(f"GPULEASE_NUM_NODES={num_nodes} but GPULEASE_NODE_RANK is not set")
    if node_rank >= num_nodes:
        raise UserInputError(
            f"environment variable GPULEASE_NODE_RANK={node_rank} must be < "
            f"GPULEASE_NUM_NODES={num_nodes}"
        )
    return _Layout(node_rank, 0, num_nodes, 1, node_rank, num_nodes)


# -- the process group -------------------------------------------------------------------------


def _device(local_rank: int) -> torch.device:
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise UserInputError(
            f"LOCAL_RANK={local_rank} but this node has {count} visible GPU(s); run at most "
            f"{count} processes per node (torchrun --nproc-per-node)"
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def _initialise(layout: _Layout, backend: str | None, timeout_s: float) -> DistInfo:
    import torch.distributed as dist

    device = _device(layout.local_rank)
    chosen: str | None = None
    if layout.world_size > 1:
        if not dist.is_available():
            raise UserInputError("this torch build has no torch.distributed; run one process")
        chosen = backend or ("nccl" if device.type == "cuda" else "gloo")
        if chosen == "nccl" and device.type != "cuda":
            raise UserInputError("setup_distributed(backend='nccl') needs CUDA; use gloo on CPU")
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise UserInputError(f"{name} is not set; launch with torchrun or gpulease")
        dist.init_process_group(
            backend=chosen,
            timeout=timedelta(seconds=timeout_s),
            rank=layout.rank,
            world_size=layout.world_size,
            device_id=device if chosen == "nccl" else None,
        )
    return DistInfo(
        rank=layout.rank,
        local_rank=layout.local_rank,
        world_size=layout.world_size,
        local_world_size=layout.local_world_size,
        node_rank=layout.node_rank,
        num_nodes=layout.num_nodes,
        device=device,
        backend=chosen,
        is_main=layout.rank == 0,
    )


def _adopt_existing() -> DistInfo:
    """A process group someone else initialised: describe it rather than re-initialise. Where
    the environment disagrees with the group, the group wins (one node assumed)."""
    import torch
    import torch.distributed as dist

    rank, world_size = dist.get_rank(), dist.get_world_size()
    try:
        layout: _Layout | None = _layout(os.environ)
    except UserInputError:
        layout = None
    if layout is not None and (layout.rank, layout.world_size) == (rank, world_size):
        device = _device(layout.local_rank)
    else:
        layout = _Layout(rank, rank, world_size, world_size, 0, 1)
        cuda = torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    return DistInfo(
        rank=rank,
        local_rank=layout.local_rank,
        world_size=world_size,
        local_world_size=layout.local_world_size,
        node_rank=layout.node_rank,
        num_nodes=layout.num_nodes,
        device=device,
        backend=str(dist.get_backend()),
        is_main=rank == 0,
    )
