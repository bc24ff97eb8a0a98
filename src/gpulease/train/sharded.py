"""Sharded checkpoints of :class:`~gpulease.train.CheckpointManager` with DCP.

This module owns everything DCP (``torch.distributed.checkpoint``): deciding whether state is
sharded (FSDP, DTensor, ShardedTensor), pairing optimizers with their modules, the host-memory
snapshot of sharded state, writing one step from every rank and committing it (rank 0, manifest
last), and loading a DCP step into the current — possibly differently sharded — objects.
:mod:`gpulease.train.manager` calls it (lazily); importing it imports torch.

Layout of ``DIR/step-<N>/`` (one directory shared by all ranks): DCP's ``.metadata`` and
``__<rank>_<i>.distcp`` files (modules, optimizers and other sharded state), ``__rng__.<rank>.pt``
per rank, rank 0's ``<name>.pt`` for replicated objects, ``__extra__.pt``, ``__dcp__.json``
(``{"format": "dcp", "version", "world_size", "objects": {name: kind}, "replicated": [...]}``)
and ``manifest.json``, written last by rank 0 once every rank reported its files durable.

Collectives run on a dedicated gloo group, in the background thread of an async save (never
concurrently with another save of this manager) or on the main thread for restore, so they never
interleave with the training loop's collectives on the default group.
"""

from __future__ import annotations

import contextlib
import copy
import json
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._shard.sharded_tensor.api import ShardedTensor  # pre-DTensor sharding
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.tensor import DTensor

from gpulease.errors import Permanent, UserInputError
from gpulease.storage import LocalStore, write_atomic
from gpulease.storage.manifest import fsync_dir
from gpulease.train import crypto
from gpulease.train.manager import DCP_INFO_FILE as INFO_FILE
from gpulease.train.manager import EXTRA_FILE
from gpulease.train.snapshot import to_host

DCP_METADATA = ".metadata"
FORMAT = "dcp"
MODULE, OPTIMIZER, STATEFUL = "module", "optimizer", "stateful"  # how an object goes through DCP

# dcp.save/load warn on every single-process call; that is the intended use with world size 1.
warnings.filterwarnings(
    "ignore", message="torch.distributed is disabled, unavailable or uninitialized"
)


def rng_file(rank: int) -> str:
    """The name of rank ``rank``'s RNG-state file in a sharded checkpoint."""
    return f"__rng__.{rank}.pt"


# -- what is sharded ----------------------------------------------------------------------------


def holds_sharded(value: Any) -> bool:
    """True when ``value`` (a state dict, possibly nested) holds a DTensor or ShardedTensor."""
    if isinstance(value, DTensor | ShardedTensor):
        return True
    if isinstance(value, Mapping):
        return any(holds_sharded(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(holds_sharded(v) for v in value)
    return False


def _module_is_sharded(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    if any(isinstance(m, FSDPModule | FullyShardedDataParallel) for m in module.modules()):
        return True
    tensors = [*module.parameters(), *module.buffers()]
    return any(isinstance(t, DTensor) for t in tensors)


def uses_sharded_state(objects: Mapping[str, Any]) -> bool:
    """True when a module is FSDP-wrapped or holds DTensors, or any state dict is sharded."""
    for obj in objects.values():
        if isinstance(obj, nn.Module):
            if _module_is_sharded(obj):
                return True
        elif isinstance(obj, torch.optim.Optimizer):
            if any(isinstance(p, DTensor) for g in obj.param_groups for p in g["params"]):
                return True
        elif holds_sharded(obj.state_dict()):
            return True
    return False


def pair_optimizers(objects: Mapping[str, Any]) -> dict[str, str]:
    """Map each optimizer's name to the first module (in argument order) holding all its params.

    DCP's state-dict API keys optimizer state by parameter name, so it needs the module; an
    optimizer whose parameters no single passed module holds raises ``UserInputError``.
    """
    modules = {
        name: {id(p) for p in obj.parameters()}
        for name, obj in objects.items()
        if isinstance(obj, nn.Module)
    }
    pairs: dict[str, str] = {}
    for name, obj in objects.items():
        if not isinstance(obj, torch.optim.Optimizer):
            continue
        params = {id(p) for group in obj.param_groups for p in group["params"]}
        owner = next((m for m, ids in modules.items() if params <= ids), None)
        if owner is None:
            raise UserInputError(
                f"sharded checkpoint: optimizer {name!r} needs its model among the objects "
                "(no module passed holds all of its parameters)"
            )
        pairs[name] = owner
    return pairs


def _kind(obj: Any) -> str:
    if isinstance(obj, nn.Module):
        return MODULE
    if isinstance(obj, torch.optim.Optimizer):
        return OPTIMIZER
    return STATEFUL


def _state_of(name: str, objects: Mapping[str, Any], pairs: Mapping[str, str]) -> Any:
    """The current state dict of ``objects[name]`` as DCP saves and loads it."""
    obj = objects[name]
    kind = _kind(obj)
    if kind == MODULE:
        return get_model_state_dict(obj)
    if kind == OPTIMIZER:
        return get_optimizer_state_dict(objects[pairs[name]], obj)
    return obj.state_dict()


# -- host snapshot --------------------------------------------------------------------------------


def host_copy(value: Any) -> Any:
    """:func:`~gpulease.train.snapshot.to_host`, also copying ShardedTensors' local shards.

    A DTensor is a tensor: ``to_host`` clones its local shard to CPU and keeps its mesh and
    placements.
    """
    if isinstance(value, ShardedTensor):
        on_cpu = value.cpu()  # copies when any shard is elsewhere, else returns value itself
        return on_cpu if on_cpu is not value else copy.deepcopy(value)
    if isinstance(value, Mapping):
        return {k: host_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [host_copy(v) for v in value]
    return to_host(value)


@dataclass
class Job:
    """One rank's part of a sharded save, copied to host memory before ``save`` returns."""

    step: int
    rank: int
    world: int
    rng: dict[str, Any]
    dcp_state: dict[str, Any] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    replicated: dict[str, Any] = field(default_factory=dict)  # rank 0 only
    extra: Any = None  # rank 0 only


def snapshot(
    step: int, objects: Mapping[str, Any], *, rank: int, world: int, rng: Any, extra: Any
) -> Job:
    """Copy every object's state to host memory: DCP state on all ranks, the rest on rank 0."""
    pairs = pair_optimizers(objects)
    job = Job(step=step, rank=rank, world=world, rng=rng, extra=extra if rank == 0 else None)
    for name, obj in objects.items():
        state = _state_of(name, objects, pairs)
        if _kind(obj) == STATEFUL and not holds_sharded(state):
            if rank == 0:
                job.replicated[name] = to_host(state)
            continue
        job.kinds[name] = _kind(obj)
        job.dcp_state[name] = host_copy(state)
    return job


# -- writing ------------------------------------------------------------------------------------


@dataclass
class Target:
    """Where and how a :class:`Job` is written (supplied by the manager)."""

    store: LocalStore
    encode: Callable[[str, Any], bytes]  # torch.save (+ encryption) of one file
    key: bytes | None
    commit: Callable[[int, list[str]], None]  # rank 0: manifest last, upload, prune


def new_group() -> Any:
    """A dedicated gloo group for checkpoint collectives (all ranks must call this together)."""
    return dist.new_group(backend="gloo")


def _agree(group: Any, ok: bool) -> bool:
    """All-reduce ``ok``: True only when every rank is ok. Also a barrier."""
    if group is None:
        return ok
    flag = torch.tensor([0 if ok else 1], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return int(flag.item()) == 0


def _failure(job: Job, error: Exception | None) -> Exception:
    if error is not None:
        return error
    return Permanent(f"sharded checkpoint step {job.step}: another rank failed to write its part")


def write(job: Job, target: Target, group: Any) -> None:
    """Write ``job`` (every rank, same order of collectives); rank 0 commits when all succeeded.

    Rank 0 first empties ``step-<N>/``; then each rank writes its RNG file (rank 0 also the
    replicated files, ``extra`` and ``__dcp__.json``) and its DCP shard; an all-reduce of every
    rank's success gates the manifest. Any failure raises on every rank.
    """
    error = _attempt(_reset, target.store, job.step) if job.rank == 0 else None
    if not _agree(group, error is None):
        raise _failure(job, error)
    directory = target.store.path(job.step)
    names: list[str] = []
    try:
        names += _write_own_files(job, target, directory)
    except Exception as exc:
        error = exc
    try:  # always take part in DCP's collectives, even after a local failure
        names += _write_dcp(job, target, directory, group)
    except Exception as exc:
        error = error or exc
    if _agree(group, error is None) and job.rank == 0:
        names += [rng_file(r) for r in range(1, job.world)]
        error = _attempt(target.commit, job.step, names)
    if not _agree(group, error is None):
        raise _failure(job, error)


def _attempt(fn: Callable[..., object], *args: Any) -> Exception | None:
    try:
        fn(*args)
    except Exception as exc:
        return exc
    return None


def _reset(store: LocalStore, step: int) -> None:
    store.delete(step)  # manifest first: a half-deleted step is incomplete
    store.path(step).mkdir(parents=True)
    fsync_dir(store.root)


def _write_own_files(job: Job, target: Target, directory: Path) -> list[str]:
    files: dict[str, Any] = {rng_file(job.rank): job.rng}
    if job.rank == 0:
        files.update({f"{name}.pt": state for name, state in job.replicated.items()})
        files[EXTRA_FILE] = job.extra
    for name, value in files.items():
        write_atomic(directory / name, target.encode(name, value))
    if job.rank != 0:
        return []
    info = {
        "format": FORMAT,
        "version": 1,
        "world_size": job.world,
        "objects": job.kinds,
        "replicated": sorted(job.replicated),
    }
    write_atomic(directory / INFO_FILE, json.dumps(info, indent=1).encode())
    return [*files, INFO_FILE]


def _write_dcp(job: Job, target: Target, directory: Path, group: Any) -> list[str]:
    """``dcp.save`` into the step directory, or (with a key) a private temp dir, then encrypt."""
    if not job.dcp_state:
        return []
    if target.key is None:
        return _dcp_save(job.dcp_state, directory, group)
    with tempfile.TemporaryDirectory(prefix="gpulease-dcp-") as tmp:  # mode 0700, local disk
        names = _dcp_save(job.dcp_state, Path(tmp), group)
        for item in sorted(Path(tmp).iterdir()):
            if item.is_file():
                data = crypto.encrypt(target.key, item.name, item.read_bytes())
                write_atomic(directory / item.name, data)
    return names


def _dcp_save(state: dict[str, Any], path: Path, group: Any) -> list[str]:
    """Save with DCP's FileSystemWriter (fsyncs its files); return the files it wrote."""
    writer = FileSystemWriter(path, sync_files=True)
    metadata = dcp_save(state, storage_writer=writer, process_group=group, no_dist=group is None)
    shards = {str(info.relative_path) for info in metadata.storage_data.values()}
    return [DCP_METADATA, *sorted(shards)]


# -- restoring ----------------------------------------------------------------------------------


def broadcast_step(pick: Callable[[], int | None], rank: int, group: Any) -> int | None:
    """Rank 0 runs ``pick`` and broadcasts its answer (or its failure) so ranks never disagree."""
    payload: list[Any] = [None]
    error: Exception | None = None
    if rank == 0:
        try:
            payload = [("ok", pick())]
        except Exception as exc:
            error = exc
            payload = [("error", f"{type(exc).__name__}: {exc}")]
    dist.broadcast_object_list(payload, src=0, group=group)
    status, value = payload[0]
    if error is not None:
        raise error
    if status == "error":
        raise Permanent(f"rank 0 could not choose a checkpoint to restore: {value}")
    return cast("int | None", value)


def read_info(directory: Path) -> dict[str, Any]:
    """The ``__dcp__.json`` of a sharded checkpoint."""
    path = directory / INFO_FILE
    try:
        info = json.loads(path.read_bytes())
    except (OSError, ValueError):
        info = None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise Permanent(f"checkpoint {directory}: {INFO_FILE} is not a {FORMAT} description")
    return info


def load(
    directory: Path,
    objects: Mapping[str, Any],
    info: Mapping[str, Any],
    *,
    decode: Callable[[str], Any],
    key: bytes | None,
    group: Any,
) -> None:
    """Load a sharded checkpoint into ``objects``; DCP reshards to the current sharding.

    Collective when ``group`` is given (every rank calls it); with ``group=None`` this process
    reads everything it needs itself (single process, or replicated objects under DDP).
    """
    saved: Mapping[str, str] = info.get("objects", {})
    replicated = set(info.get("replicated", []))
    for name, obj in objects.items():
        if name in saved and saved[name] != _kind(obj):
            raise UserInputError(
                f"checkpoint {directory}: {name} was saved as {saved[name]} state, "
                f"not {_kind(obj)} state"
            )
        if name not in saved and name not in replicated:
            raise UserInputError(f"checkpoint {directory} has no {name}")
    states = {n: decode(f"{n}.pt") for n in objects if n not in saved}
    in_dcp = [n for n in objects if n in saved]
    if in_dcp:
        _load_dcp(directory, objects, in_dcp, key, group)
    for name, state in states.items():
        objects[name].load_state_dict(state)


def _load_dcp(
    directory: Path, objects: Mapping[str, Any], names: list[str], key: bytes | None, group: Any
) -> None:
    pairs = pair_optimizers({n: objects[n] for n in objects if _kind(objects[n]) != STATEFUL})
    state = {name: _state_of(name, objects, pairs) for name in names}
    with _readable(directory, key) as source:
        reader = FileSystemReader(source)
        dcp_load(state, storage_reader=reader, process_group=group, no_dist=group is None)
    for name in sorted(names, key=lambda n: _kind(objects[n]) == OPTIMIZER):  # modules first
        obj = objects[name]
        if _kind(obj) == MODULE:
            set_model_state_dict(obj, state[name])
        elif _kind(obj) == OPTIMIZER:
            set_optimizer_state_dict(objects[pairs[name]], obj, state[name])
        else:
            obj.load_state_dict(state[name])


@contextlib.contextmanager
def _readable(directory: Path, key: bytes | None) -> Iterator[Path]:
    """The step directory itself, or a private temp dir with its DCP files decrypted."""
    if key is None:
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="gpulease-dcp-") as tmp:
        for item in directory.iterdir():
            if item.name == DCP_METADATA or item.name.endswith(".distcp"):
                data = crypto.decrypt(key, item.name, item.read_bytes())
                write_atomic(Path(tmp) / item.name, data)
        yield Path(tmp)


def load_full(objects: Mapping[str, Any], states: Mapping[str, Any]) -> None:
    """Load a replicated checkpoint's full state dicts into (possibly sharded) objects."""
    pairs = pair_optimizers(objects)
    full = StateDictOptions(full_state_dict=True)
    for name, obj in objects.items():
        if _kind(obj) == MODULE:
            set_model_state_dict(obj, dict(states[name]), options=full)
    for name, obj in objects.items():
        if _kind(obj) == OPTIMIZER:
            module = objects[pairs[name]]
            set_optimizer_state_dict(module, obj, _by_name(module, obj, states[name]), options=full)
        elif _kind(obj) == STATEFUL:
            obj.load_state_dict(states[name])


def _by_name(module: nn.Module, optimizer: Any, state: Mapping[str, Any]) -> dict[str, Any]:
    """Key a plain ``Optimizer.state_dict()`` (parameter indices) by parameter name."""
    from torch.nn.parallel import DistributedDataParallel

    inner = module.module if isinstance(module, DistributedDataParallel) else module
    names = {id(p): _clean(n) for n, p in inner.named_parameters()}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    fqns = [names[id(p)] for p in params]
    return {
        "state": {fqns[int(i)]: v for i, v in state["state"].items()},
        "param_groups": [
            {**g, "params": [fqns[int(i)] for i in g["params"]]} for g in state["param_groups"]
        ],
    }


def _clean(name: str) -> str:
    """A parameter name as DCP's state-dict API spells it (without wrapper prefixes)."""
    for wrapper in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod."):
        name = name.replace(wrapper, "")
    return name
