"""Resumable, machine-tuned data loading: ``tuned_loader`` → :class:`ResumableLoader`.

Owns three things a training script otherwise gets subtly wrong:

- **Settings from the machine** (:func:`choose_settings`, shown as ``loader.settings``): worker
  processes, pinned memory, prefetch factor and persistent workers, each chosen only where the
  caller passed ``None``.
- **Sharding under DDP**: with ``torch.distributed`` initialised and world size > 1 every rank gets
  a disjoint shard of each epoch, padded so all shards are equal (``DistributedSampler``
  semantics: rank ``r`` takes slots ``r, r+W, r+2W, …`` of the epoch order, which is padded by
  repeating its start).
- **A checkpointable position**: the epoch order is a permutation seeded by ``(seed, epoch)``;
  ``state_dict()`` records the epoch and the batches already yielded, and after
  ``load_state_dict`` the next iteration yields exactly the batch an uninterrupted run would have
  yielded next. Consumed batches are skipped in the batch sampler, never loaded.

A position is also counted in *global samples* (``samples_seen``: the prefix of the epoch order the
ranks together have consumed). Resuming with the same global batch (``batch_size × world_size``)
continues batch for batch; resuming with another one continues from the same global sample offset,
the rest of the epoch order dealt over the new ranks. torch is imported by the functions; importing
this module stays cheap.
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gpulease.errors import UserInputError

if TYPE_CHECKING:
    import torch

MAX_WORKERS = 8  # beyond this, loader workers rarely pay for their memory and start-up
TINY_DATASET = 64  # fewer samples than this: workers cost more than they save
IN_FLIGHT = 8  # batches prefetched across all workers of a rank (prefetch factor 2–4 each)
STATE_VERSION = 1
_STATE_TYPES: dict[str, type] = {
    "version": int,
    "epoch": int,
    "position": int,
    "samples_seen": int,
    "seed": int,
    "batch_size": int,
    "world_size": int,
    "dataset_size": int,
    "shuffle": bool,
    "drop_last": bool,
}


@dataclass(frozen=True)
class LoaderSettings:
    """The loader settings in force and how they were chosen (``reason``, for logs)."""

    num_workers: int
    pin_memory: bool
    prefetch_factor: int | None
    persistent_workers: bool
    distributed: bool
    rank: int
    world_size: int
    local_world_size: int
    cpus: int
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- choosing settings -------------------------------------------------------------------------


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, else the CPU count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _dist_rank_world() -> tuple[bool, int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return True, dist.get_rank(), dist.get_world_size()
    return False, 0, 1


def _local_world_size(world_size: int) -> int:
    """Ranks on this machine: ``$LOCAL_WORLD_SIZE`` (torchrun), else one per visible GPU."""
    text = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    if text:
        try:
            value = int(text)
        except ValueError:
            raise UserInputError(f"$LOCAL_WORLD_SIZE must be an integer, got {text!r}") from None
        if value < 1:
            raise UserInputError(f"$LOCAL_WORLD_SIZE must be at least 1, got {value}")
        return value
    if world_size == 1:
        return 1
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return min(world_size, gpus) if gpus else world_size


def auto_workers(cpus: int, local_world_size: int, samples: int, batches: int) -> tuple[int, str]:
    """The worker rule: ``min(8, cpus // local_world_size - 1, batches per epoch)``, 0 if tiny.

    One core per rank stays with the training process itself; fewer than 64 samples, or a single
    core per rank, means no workers (their start-up costs more than they save).
    """
    per_rank = cpus // max(1, local_world_size)
    if per_rank <= 1:
        return 0, f"{cpus} cpu(s) / {local_world_size} local rank(s): no core to spare"
    if samples < TINY_DATASET:
        return 0, f"tiny dataset ({samples} < {TINY_DATASET} samples)"
    workers = max(0, min(MAX_WORKERS, per_rank - 1, batches))
    return workers, (
        f"{cpus} cpu(s) / {local_world_size} local rank(s) - 1 for the trainer, "
        f"cap {MAX_WORKERS}, ≤ {batches} batches/epoch"
    )


def auto_prefetch(workers: int) -> int | None:
    """About 8 batches in flight per rank, 2–4 per worker; ``None`` without workers."""
    if workers == 0:
        return None
    return max(2, min(4, math.ceil(IN_FLIGHT / workers)))


def choose_settings(
    samples: int,
    batch_size: int,
    *,
    num_workers: int | None = None,
    pin_memory: bool | None = None,
    prefetch_factor: int | None = None,
    persistent_workers: bool | None = None,
    distributed: bool | None = None,
) -> LoaderSettings:
    """Fill every ``None`` from the machine; validate the values given explicitly."""
    import torch

    initialised, rank, world = _dist_rank_world()
    if distributed is None:
        distributed = initialised and world > 1
    elif distributed and not initialised:
        raise UserInputError(
            "tuned_loader(distributed=True) needs torch.distributed.init_process_group() first"
        )
    if not distributed:
        rank, world = 0, 1
    local = _local_world_size(world) if distributed else 1
    cpus = usable_cpus()
    per_rank_samples = math.ceil(samples / world)
    batches = max(1, math.ceil(per_rank_samples / batch_size))
    if num_workers is None:
        num_workers, reason = auto_workers(cpus, local, samples, batches)
    elif num_workers < 0:
        raise UserInputError(f"tuned_loader num_workers= must be >= 0, got {num_workers}")
    else:
        reason = "num_workers given"
    if num_workers == 0 and prefetch_factor is not None:
        raise UserInputError("tuned_loader prefetch_factor= needs num_workers > 0")
    if num_workers == 0 and persistent_workers:
        raise UserInputError("tuned_loader persistent_workers=True needs num_workers > 0")
    if prefetch_factor is not None and prefetch_factor < 1:
        raise UserInputError(f"tuned_loader prefetch_factor= must be >= 1, got {prefetch_factor}")
    return LoaderSettings(
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        prefetch_factor=auto_prefetch(num_workers) if prefetch_factor is None else prefetch_factor,
        persistent_workers=num_workers > 0 if persistent_workers is None else persistent_workers,
        distributed=distributed,
        rank=rank,
        world_size=world,
        local_world_size=local,
        cpus=cpus,
        reason=reason,
    )


# -- the epoch plan ----------------------------------------------------------------------------


def epoch_order(size: int, seed: int, epoch: int, shuffle: bool) -> torch.Tensor:
    """The global sample order of ``epoch``: a permutation seeded by ``seed + epoch``."""
    import torch

    if not shuffle:
        return torch.arange(size)
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(size, generator=generator)


def rank_batches(
    order: torch.Tensor,
    offset: int,
    *,
    rank: int,
    world: int,
    batch_size: int,
    drop_last: bool,
) -> list[torch.Tensor]:
    """The batches of ``rank`` for ``order[offset:]``: padded to a multiple of ``world`` by
    repeating the start of ``order``, dealt round-robin, cut into ``batch_size`` pieces."""
    import torch

    rest = order[offset:]
    pad = (-len(rest)) % world
    if pad and len(order):
        repeats = math.ceil(pad / len(order))
        rest = torch.cat([rest, order.repeat(repeats)[:pad]])
    shard = rest[rank::world]
    if not len(shard):
        return []
    batches = list(torch.split(shard, batch_size))
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


def batches_per_epoch(size: int, batch_size: int, world: int, drop_last: bool) -> int:
    """Batches each rank yields in a whole epoch."""
    per_rank = math.ceil(size / world)
    return per_rank // batch_size if drop_last else math.ceil(per_rank / batch_size)


class _BatchSampler:
    """The index batches the ``DataLoader`` loads: the rest of the current epoch segment.

    Read afresh at every ``iter()``, so a persistent-worker ``DataLoader`` follows the loader's
    position; batches before the position are never produced, so never loaded. It holds its loader
    weakly: a reference cycle would leave the worker processes to the cyclic garbage collector,
    whose late ``DataLoader`` shutdown waits seconds per worker.
    """

    def __init__(self, owner: ResumableLoader) -> None:
        self._owner = weakref.ref(owner)

    def _batches(self) -> list[torch.Tensor]:
        owner = self._owner()
        return owner._pending() if owner is not None else []

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._batches():
            yield batch.tolist()

    def __len__(self) -> int:
        return len(self._batches())


# -- the loader --------------------------------------------------------------------------------


class ResumableLoader:
    """An iterable over batches whose position is checkpointable.

    Each ``for batch in loader`` runs (the rest of) one epoch. ``epoch`` and ``position`` (batches
    this rank yielded in the epoch) advance as batches are yielded; when an epoch is exhausted,
    ``epoch += 1`` and ``position = 0``. ``len(loader)`` is the batches per epoch of this rank.
    Pass the loader to ``CheckpointManager.save(step, loader=loader)`` / ``restore(loader=...)``.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        settings: LoaderSettings,
        *,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        collate_fn: Callable[[list[Any]], Any] | None,
    ) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.settings = settings
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.size = len(dataset)
        self.epoch = 0
        self.position = 0
        self._segment_start = 0  # global sample offset the current segment of the epoch starts at
        self._segment_base = 0  # position at the start of the segment
        self._plan: tuple[tuple[int, int, int], list[torch.Tensor]] | None = None
        self._generation = 0
        self._dataloader = self._make_dataloader(collate_fn)

    def close(self) -> None:
        """Stop the persistent worker processes now (a later iteration starts new ones)."""
        iterator = getattr(self._dataloader, "_iterator", None)
        if iterator is not None:
            self._dataloader._iterator = None
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()

    def _make_dataloader(self, collate_fn: Callable[[list[Any]], Any] | None) -> Any:
        from torch.utils.data import DataLoader

        s = self.settings
        return DataLoader(
            self.dataset,
            batch_sampler=_BatchSampler(self),
            num_workers=s.num_workers,
            collate_fn=collate_fn,
            pin_memory=s.pin_memory,
            prefetch_factor=s.prefetch_factor,
            persistent_workers=s.persistent_workers,
        )

    # -- geometry -----------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.settings.rank

    @property
    def world_size(self) -> int:
        return self.settings.world_size

    def __len__(self) -> int:
        return batches_per_epoch(self.size, self.batch_size, self.world_size, self.drop_last)

    def _pending(self) -> list[torch.Tensor]:
        """This rank's batches from the current position to the end of the epoch segment."""
        key = (self.epoch, self._segment_start, self.seed)
        if self._plan is None or self._plan[0] != key:
            order = epoch_order(self.size, self.seed, self.epoch, self.shuffle)
            batches = rank_batches(
                order,
                self._segment_start,
                rank=self.rank,
                world=self.world_size,
                batch_size=self.batch_size,
                drop_last=self.drop_last,
            )
            self._plan = (key, batches)
        return self._plan[1][self.position - self._segment_base :]

    @property
    def samples_seen(self) -> int:
        """Samples of this epoch's global order that all ranks together have consumed."""
        done = self._segment_start + (self.position - self._segment_base) * (
            self.batch_size * self.world_size
        )
        return min(self.size, done)

    # -- iteration ----------------------------------------------------------------------------

    def _exhausted(self) -> bool:
        """True when this segment's batches were all yielded (and at least one was)."""
        return self.position > self._segment_base and not self._pending()

    def _next_epoch(self) -> None:
        self.epoch += 1
        self.position = 0
        self._segment_start = 0
        self._segment_base = 0

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning (the loader does this itself after each epoch)."""
        if epoch < 0:
            raise UserInputError(f"set_epoch epoch must be >= 0, got {epoch}")
        self.epoch = epoch
        self.position = 0
        self._segment_start = 0
        self._segment_base = 0

    def __iter__(self) -> Iterator[Any]:
        if self._exhausted():  # the last batch was yielded but the epoch was not closed
            self._next_epoch()
        self._generation += 1
        return self._run(self._generation)

    def _run(self, generation: int) -> Iterator[Any]:
        from gpulease.train.stats import timed_batches

        batches = timed_batches(self._dataloader)  # the wait for each batch: data-wait share
        while True:
            if generation != self._generation:  # checked before taking the newer one's batch
                raise UserInputError(
                    "this ResumableLoader iterator was superseded by a newer iter(loader); "
                    "only one iteration may run at a time"
                )
            try:
                batch = next(batches)
            except StopIteration:
                break
            self.position += 1
            yield batch
        self._next_epoch()

    # -- state --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The position as plain values (loadable with ``torch.load(weights_only=True)``).

        An epoch whose last batch was yielded is recorded as the start of the next one.
        """
        epoch, position, seen = self.epoch, self.position, self.samples_seen
        if self._exhausted():
            epoch, position, seen = epoch + 1, 0, 0
        return {
            "version": STATE_VERSION,
            "epoch": epoch,
            "position": position,
            "samples_seen": seen,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "dataset_size": self.size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved position (see the module docstring for another world size)."""
        state = _validated(state_dict)
        if state["dataset_size"] != self.size:
            raise UserInputError(
                f"loader state dataset_size is {state['dataset_size']} but this dataset has "
                f"{self.size} samples: the position would point at other samples"
            )
        if state["shuffle"] != self.shuffle:
            raise UserInputError(
                f"loader state shuffle is {state['shuffle']} but this loader has "
                f"shuffle={self.shuffle}: the epoch order would differ"
            )
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        same_geometry = (
            state["batch_size"] * state["world_size"] == self.batch_size * self.world_size
            and state["drop_last"] == self.drop_last
        )
        if same_geometry:
            self.position = state["position"]
            self._segment_base = self.position
            self._segment_start = self.position * self.batch_size * self.world_size
        else:  # continue from the same global sample offset, dealt over this geometry
            self._segment_start = state["samples_seen"]
            self.position = state["samples_seen"] // (self.batch_size * self.world_size)
            self._segment_base = self.position
        if self._segment_start >= self.size:
            self._next_epoch()


def _validated(state: Any) -> dict[str, Any]:
    """Check a loader state dict's keys, types and ranges; name what is wrong."""
    if not isinstance(state, dict):
        raise UserInputError(f"loader state must be a dict, got {type(state).__name__}")
    for key, kind in _STATE_TYPES.items():
        if key not in state:
            raise UserInputError(f"loader state is missing {key!r}")
        value = state[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise UserInputError(f"loader state {key!r} must be an int, got {value!r}")
        if kind is bool and not isinstance(value, bool):
            raise UserInputError(f"loader state {key!r} must be a bool, got {value!r}")
    if state["version"] != STATE_VERSION:
        raise UserInputError(f"loader state version {state['version']} is not {STATE_VERSION}")
    for key in ("epoch", "position", "samples_seen", "dataset_size"):
        if state[key] < 0:
            raise UserInputError(f"loader state {key!r} must be >= 0, got {state[key]}")
    for key in ("batch_size", "world_size"):
        if state[key] < 1:
            raise UserInputError(f"loader state {key!r} must be >= 1, got {state[key]}")
    per_epoch = batches_per_epoch(
        state["dataset_size"], state["batch_size"], state["world_size"], state["drop_last"]
    )
    if state["position"] > per_epoch:
        raise UserInputError(
            f"loader state position {state['position']} is beyond the epoch's {per_epoch} "
            f"batches (dataset_size={state['dataset_size']}, batch_size={state['batch_size']}, "
            f"world_size={state['world_size']})"
        )
    if state["samples_seen"] > state["dataset_size"]:
        raise UserInputError(
            f"loader state samples_seen {state['samples_seen']} is beyond dataset_size "
            f"{state['dataset_size']}"
        )
    return dict(state)


def tuned_loader(
    dataset: Any,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    num_workers: int | None = None,
    pin_memory: bool | None = None,
    prefetch_factor: int | None = None,
    persistent_workers: bool | None = None,
    distributed: bool | None = None,
) -> ResumableLoader:
    """A :class:`ResumableLoader` over a map-style ``dataset`` with settings from the machine.

    Every ``None`` is chosen by :func:`choose_settings` (see ``loader.settings``); ``distributed``
    ``None`` means "shard when ``torch.distributed`` is initialised with world size > 1".
    """
    from torch.utils.data import IterableDataset

    if isinstance(dataset, IterableDataset):
        raise UserInputError(
            "tuned_loader needs a map-style dataset (__getitem__ and __len__): a resumable "
            "position skips samples by index, which an IterableDataset cannot do"
        )
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise UserInputError(
            f"tuned_loader dataset must define __getitem__ and __len__, "
            f"got {type(dataset).__name__}"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserInputError(f"tuned_loader batch_size= must be an int >= 1, got {batch_size!r}")
    settings = choose_settings(
        len(dataset),
        batch_size,
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
        distributed=distributed,
    )
    return ResumableLoader(
        dataset,
        batch_size,
        settings,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        collate_fn=collate_fn,
    )
