""":class:`CheckpointManager`: crash-safe, optionally async and encrypted training checkpoints.

Layout: ``DIR/step-<N>/`` with one ``torch.save`` file per object (``<name>.pt``), the RNG states
(``__rng__.pt``), the ``extra`` values (``__extra__.pt``) and ``manifest.json`` written last by
:mod:`gpulease.storage`. Only checkpoints whose manifest and checksums verify are restored.
Sharded state (FSDP, DTensor) is written with ``torch.distributed.checkpoint`` by every rank into
the same directory; :mod:`gpulease.train.sharded` owns that format.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import io
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol, cast

from gpulease.errors import Permanent, UserInputError
from gpulease.storage import CheckpointStore, LocalStore, store_from_url, write_manifest
from gpulease.storage.digest import lower_thread_priority
from gpulease.storage.manifest import fsync_dir
from gpulease.storage.writer import CheckpointWriter
from gpulease.train import crypto, rng
from gpulease.train.snapshot import HostStager, to_host
from gpulease.train.stats import train_stats

DIR_ENV = "GPULEASE_CHECKPOINT_DIR"
KEY_ENV = "GPULEASE_CHECKPOINT_KEY"
RNG_FILE = "__rng__.pt"
EXTRA_FILE = "__extra__.pt"
DCP_INFO_FILE = "__dcp__.json"  # marks a sharded (torch.distributed.checkpoint) checkpoint
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class Stateful(Protocol):
    """Anything with ``state_dict`` / ``load_state_dict``: models, optimizers, schedulers."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state_dict: Any, /) -> Any: ...


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _portable_rng(state: dict[str, Any]) -> dict[str, Any]:
    """Make the numpy RNG state loadable with ``torch.load(weights_only=True)``."""
    out = dict(state)
    if "numpy" in out:
        name, keys, pos, has_gauss, gauss = out["numpy"]
        out["numpy"] = (name, [int(k) for k in keys], int(pos), int(has_gauss), float(gauss))
    return out


def _native_rng(state: dict[str, Any]) -> dict[str, Any]:
    out = dict(state)
    if "numpy" in out:
        import numpy as np

        name, keys, pos, has_gauss, gauss = out["numpy"]
        out["numpy"] = (name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss)
    return out


_CRC_LOCK = threading.Lock()
_crc_saves = {"running": 0, "before": 1}  # saves now inside torch.save; the setting they found


@contextlib.contextmanager
def _without_zip_crc32() -> Iterator[None]:
    """Skip the CRC32 ``torch.save`` computes per zip record (~15 % of a save's CPU time here).

    The manifest's checksums already cover every byte. ``torch.serialization.set_crc32_options``
    is process-wide: a ``torch.save`` of the user's running at the same moment also skips it
    (its file still loads; only the redundant zip CRC is 0). Saves of several managers may
    overlap; the last one to finish puts the setting back.
    """
    import torch

    with _CRC_LOCK:
        if _crc_saves["running"] == 0:
            _crc_saves["before"] = int(torch.serialization.get_crc32_options())
            torch.serialization.set_crc32_options(False)
        _crc_saves["running"] += 1
    try:
        yield
    finally:
        with _CRC_LOCK:
            _crc_saves["running"] -= 1
            if _crc_saves["running"] == 0:
                torch.serialization.set_crc32_options(bool(_crc_saves["before"]))


class CheckpointManager:
    """Save and restore training state crash-safely; keep the newest ``keep`` checkpoints.

    ``dir`` defaults to ``$GPULEASE_CHECKPOINT_DIR``; ``store`` is an optional URL
    (``local://PATH``) every checkpoint is also uploaded to and restored from when ``dir`` has
    none; ``encrypt_key`` (default ``$GPULEASE_CHECKPOINT_KEY``) turns on AES-256-GCM.

    ``sharded``: ``None`` (default) writes sharded checkpoints with ``torch.distributed.checkpoint``
    when the world size is > 1 and a module is FSDP-wrapped or any state holds DTensors /
    ShardedTensors; ``True`` always (even in one process: the checkpoint can then be restored
    with another world size); ``False`` never (rank 0 writes everything). In sharded mode
    ``save`` and ``restore`` are collective: every rank must call them, in the same order, and
    ``dir`` must be one directory shared by all ranks.
    """

    def __init__(
        self,
        dir: str | os.PathLike[str] | None = None,
        keep: int = 3,
        store: str | None = None,
        async_save: bool = True,
        encrypt_key: str | None = None,
        *,
        sharded: bool | None = None,
    ) -> None:
        directory = dir if dir is not None else os.environ.get(DIR_ENV)
        if not directory:
            raise UserInputError(f"CheckpointManager needs dir= (or set ${DIR_ENV})")
        if keep < 1:
            raise UserInputError(f"CheckpointManager keep= must be at least 1, got {keep}")
        self.dir = Path(directory)
        self.keep = keep
        self.async_save = async_save
        self.local = LocalStore(self.dir)
        self.remote: CheckpointStore | None = store_from_url(store) if store else None
        key_text = encrypt_key if encrypt_key is not None else os.environ.get(KEY_ENV)
        self._key = crypto.parse_key(key_text) if key_text else None
        self.sharded = sharded
        self.extra: dict[str, Any] = {}
        self._group: Any = None  # the checkpoint's own gloo group, created on first use
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._stager = HostStager()  # host buffers reused between saves (see snapshot.py)

    # -- saving ---------------------------------------------------------------------------

    def save(self, step: int, *, extra: dict[str, Any] | None = None, **objects: Stateful) -> None:
        """Checkpoint ``objects`` (and RNG states, ``extra``) as ``step``.

        The state is copied to host memory before this returns; with ``async_save`` the files are
        written by a background thread (call :meth:`wait` for durability). A save while another is
        in flight waits for it first. Under ``torch.distributed`` only rank 0 writes replicated
        state; in sharded mode every rank writes its shards and every rank must call ``save``.
        """
        if step < 0:
            raise UserInputError(f"checkpoint step must be >= 0, got {step}")
        for name in objects:
            if not _NAME.match(name):
                raise UserInputError(f"checkpoint object name {name!r} must be an identifier")
        rank, world = _rank_and_world()
        if self._is_sharded(objects, world):
            self._save_sharded(step, rank, world, extra, objects)
            return
        if rank != 0:
            return
        rng_state = _portable_rng(rng.capture())
        extra_copy = to_host(dict(extra or {}))

        def stage() -> tuple[Any, ...]:  # runs once the previous write released the buffers
            snapshot = self._stager.stage_all({n: o.state_dict() for n, o in objects.items()})
            return (step, snapshot, rng_state, extra_copy)

        self._launch(step, self._write, stage)

    def _is_sharded(self, objects: dict[str, Stateful], world: int) -> bool:
        if self.sharded is not None:
            return self.sharded
        if world == 1:
            return False
        from gpulease.train import sharded

        return sharded.uses_sharded_state(objects)

    def _dist_group(self, world: int) -> Any:
        """The checkpoint's own gloo group (``None`` in one process); collective on first use."""
        if world == 1:
            return None
        if self._group is None:
            from gpulease.train import sharded

            self._group = sharded.new_group()
        return self._group

    def _save_sharded(
        self, step: int, rank: int, world: int, extra: Any, objects: dict[str, Stateful]
    ) -> None:
        from gpulease.train import sharded

        group = self._dist_group(world)
        job = sharded.snapshot(
            step,
            objects,
            rank=rank,
            world=world,
            rng=_portable_rng(rng.capture()),
            extra=to_host(dict(extra or {})),
        )
        target = sharded.Target(self.local, self._encode, self._key, self._commit)
        self._launch(step, sharded.write, lambda: (job, target, group))

    def _launch(self, step: int, target: Any, prepare: Callable[[], tuple[Any, ...]]) -> None:
        """After the previous save finished: ``args = prepare()``, then ``target(*args)`` in the
        background (or right here without ``async_save``). One lock covers all of it, so saves
        from several threads never share staging buffers with a write in flight."""
        with self._lock:
            self._join()
            args = prepare()
            if self.async_save:
                self._thread = threading.Thread(
                    target=self._write_guarded,
                    args=(target, *args),
                    name=f"gpulease-checkpoint-{step}",
                    daemon=False,
                )
                self._thread.start()
            else:
                target(*args)

    def wait(self) -> None:
        """Block until the in-flight save is durable; re-raise its error if it failed.

        In sharded mode a failure on any rank is raised on every rank.
        """
        with self._lock:
            self._join()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise Permanent(f"background checkpoint save failed: {error}") from error

    def _write_guarded(self, target: Any, *args: Any) -> None:
        lower_thread_priority()  # the write yields a contended core to the training threads
        try:
            target(*args)
        except BaseException as exc:
            self._error = exc

    def _encode(self, name: str, value: Any) -> bytes:
        import torch

        buf = io.BytesIO()
        torch.save(value, buf)
        data = buf.getvalue()
        return crypto.encrypt(self._key, name, data) if self._key is not None else data

    def _write_file(self, out: CheckpointWriter, name: str, value: Any) -> None:
        """``torch.save`` straight into the checkpoint file: hashed (and encrypted) as written."""
        import torch

        if self._key is None:
            handle = out.open(name)
        else:
            header, update, finish = crypto.stream_encryptor(self._key, name)
            handle = out.open(name, header=header, transform=update, trailer=finish)
        with handle, _without_zip_crc32():
            torch.save(value, cast("IO[bytes]", handle))  # a write-only file object

    def _write(
        self, step: int, snapshot: dict[str, Any], rng_state: dict[str, Any], extra: Any
    ) -> None:
        with self.local.writer(step, {"format": "replicated"}) as out:
            for name, value in snapshot.items():
                self._write_file(out, f"{name}.pt", value)
            self._write_file(out, RNG_FILE, rng_state)
            self._write_file(out, EXTRA_FILE, extra)
        self._publish(step)

    def _commit(self, step: int, names: builtins.list[str]) -> None:
        """Sharded mode, rank 0, after every rank's files are durable: manifest last, publish."""
        from gpulease.train import sharded

        directory = self.local.path(step)
        info = sharded.read_info(directory)
        fields = {"format": info["format"], "world_size": info.get("world_size")}
        write_manifest(directory, step, names, fields)
        fsync_dir(self.local.root)
        self._publish(step)

    def _publish(self, step: int) -> None:
        if self.remote is not None:
            self.remote.upload(step, self.local.path(step))
        self._prune(step)
        train_stats().checkpoint(step)  # the node's agent reports the last checkpoint

    def _prune(self, just_written: int) -> None:
        kept = 0
        for step in reversed(self.local.all_steps()):  # manifests only: restore verifies checksums
            if kept < self.keep and self.local.has_manifest(step):
                kept += 1
            elif kept >= self.keep or step < just_written:
                self.local.delete(step)  # beyond keep, or an incomplete leftover of a crash
        if self.remote is not None:
            for step in self.remote.list_complete()[: -self.keep]:
                self.remote.delete(step)
            for step in self.remote.list_incomplete():  # uploads cut off (a killed process)
                if step < just_written:
                    self.remote.delete(step)

    # -- restoring ------------------------------------------------------------------------

    def list(self) -> builtins.list[int]:
        """Complete checkpoints in ``dir``, oldest first."""
        return self.local.list_complete()

    def latest(self) -> int | None:
        """The newest complete checkpoint step, or ``None``."""
        steps = self.list()
        return steps[-1] if steps else None

    def _decode(self, directory: Path, name: str) -> Any:
        import torch

        path = directory / name
        if not path.exists():
            raise UserInputError(f"checkpoint {directory} has no {name}")
        data = crypto.decrypt(self._key, name, path.read_bytes())
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)

    def restore(self, **objects: Stateful) -> int | None:
        """Load the newest complete checkpoint into ``objects``; restore RNG; set ``extra``.

        Returns its step, or ``None`` when there is none (``extra`` is then ``{}``). Incomplete
        or corrupt checkpoints are skipped; a wrong key raises ``Permanent``. In sharded mode this
        is collective: rank 0 chooses the step for all ranks, and a sharded checkpoint is
        resharded to the current world size.
        """
        self.wait()
        rank, world = _rank_and_world()
        is_sharded = self._is_sharded(objects, world)
        group = self._dist_group(world) if is_sharded else None
        if group is None:
            step = self._newest()
        else:
            from gpulease.train import sharded

            step = sharded.broadcast_step(self._newest, rank, group)
        if step is None:
            self.extra = {}
            return None
        self._load(self.local.path(step), objects, rank, is_sharded, group)
        return step

    def _newest(self) -> int | None:
        """The newest complete step in ``dir`` (fetched from the mirror store when it has none)."""
        if self.remote is not None and self.latest() is None:
            remote_steps = self.remote.list_complete()
            if remote_steps:
                self.remote.download(remote_steps[-1], self.local.path(remote_steps[-1]))
        steps = reversed(self.local.all_steps())  # verified newest first: hash only what we use
        return next((step for step in steps if self.local.is_complete(step)), None)

    def _load(
        self, directory: Path, objects: dict[str, Stateful], rank: int, is_sharded: bool, group: Any
    ) -> None:
        if not (directory / DCP_INFO_FILE).exists():
            states = {n: self._decode(directory, f"{n}.pt") for n in objects}
            rng_state = self._decode(directory, RNG_FILE)
            extra = self._decode(directory, EXTRA_FILE)
            if is_sharded:
                from gpulease.train import sharded

                sharded.load_full(objects, states)
            else:
                for name, obj in objects.items():
                    obj.load_state_dict(states[name])
        else:
            from gpulease.train import sharded

            info = sharded.read_info(directory)
            own_rng = sharded.rng_file(rank)
            rng_state = self._decode(directory, own_rng) if (directory / own_rng).exists() else None
            extra = self._decode(directory, EXTRA_FILE)
            decode = functools.partial(self._decode, directory)
            sharded.load(directory, objects, info, decode=decode, key=self._key, group=group)
        if rng_state is not None:
            rng.restore(_native_rng(rng_state))
        self.extra = dict(extra)
