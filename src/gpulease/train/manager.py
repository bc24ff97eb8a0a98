""":class:`CheckpointManager`: crash-safe, optionally async and encrypted training checkpoints.

Layout: ``DIR/step-<N>/`` with one ``torch.save`` file per object (``<name>.pt``), the RNG states
(``__rng__.pt``), the ``extra`` values (``__extra__.pt``) and ``manifest.json`` written last by
:mod:`gpulease.storage`. Only checkpoints whose manifest and checksums verify are restored.
"""

from __future__ import annotations

import builtins
import io
import os
import re
import threading
from pathlib import Path
from typing import Any, Protocol

from gpulease.errors import Permanent, UserInputError
from gpulease.storage import CheckpointStore, LocalStore, store_from_url
from gpulease.train import crypto, rng
from gpulease.train.snapshot import to_host

DIR_ENV = "GPULEASE_CHECKPOINT_DIR"
KEY_ENV = "GPULEASE_CHECKPOINT_KEY"
RNG_FILE = "__rng__.pt"
EXTRA_FILE = "__extra__.pt"
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


class CheckpointManager:
    """Save and restore training state crash-safely; keep the newest ``keep`` checkpoints.

    ``dir`` defaults to ``$GPULEASE_CHECKPOINT_DIR``; ``store`` is an optional URL
    (``local://PATH``) every checkpoint is also uploaded to and restored from when ``dir`` has
    none; ``encrypt_key`` (default ``$GPULEASE_CHECKPOINT_KEY``) turns on AES-256-GCM.
    """

    def __init__(
        self,
        dir: str | os.PathLike[str] | None = None,
        keep: int = 3,
        store: str | None = None,
        async_save: bool = True,
        encrypt_key: str | None = None,
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
        self.extra: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    # -- saving ---------------------------------------------------------------------------

    def save(self, step: int, *, extra: dict[str, Any] | None = None, **objects: Stateful) -> None:
        """Checkpoint ``objects`` (and RNG states, ``extra``) as ``step``.

        The state is copied to host memory before this returns; with ``async_save`` the files are
        written by a background thread (call :meth:`wait` for durability). A save while another is
        in flight waits for it first. Under ``torch.distributed`` only rank 0 writes.
        """
        if step < 0:
            raise UserInputError(f"checkpoint step must be >= 0, got {step}")
        for name in objects:
            if not _NAME.match(name):
                raise UserInputError(f"checkpoint object name {name!r} must be an identifier")
        rank, _ = _rank_and_world()
        if rank != 0:
            return
        snapshot: dict[str, Any] = {n: to_host(o.state_dict()) for n, o in objects.items()}
        rng_state = _portable_rng(rng.capture())
        extra_copy = to_host(dict(extra or {}))
        with self._lock:
            self._join()
            if self.async_save:
                self._thread = threading.Thread(
                    target=self._write_guarded,
                    args=(step, snapshot, rng_state, extra_copy),
                    name=f"gpulease-checkpoint-{step}",
                    daemon=False,
                )
                self._thread.start()
            else:
                self._write(step, snapshot, rng_state, extra_copy)

    def wait(self) -> None:
        """Block until the in-flight save is durable; re-raise its error if it failed."""
        with self._lock:
            self._join()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise Permanent(f"background checkpoint save failed: {error}") from error

    def _write_guarded(self, *args: Any) -> None:
        try:
            self._write(*args)
        except BaseException as exc:
            self._error = exc

    def _encode(self, name: str, value: Any) -> bytes:
        import torch

        buf = io.BytesIO()
        torch.save(value, buf)
        data = buf.getvalue()
        return crypto.encrypt(self._key, name, data) if self._key is not None else data

    def _write(
        self, step: int, snapshot: dict[str, Any], rng_state: dict[str, Any], extra: Any
    ) -> None:
        files = {f"{n}.pt": self._encode(f"{n}.pt", v) for n, v in snapshot.items()}
        files[RNG_FILE] = self._encode(RNG_FILE, rng_state)
        files[EXTRA_FILE] = self._encode(EXTRA_FILE, extra)
        self.local.write(step, files)
        if self.remote is not None:
            self.remote.upload(step, self.local.path(step))
        self._prune(step)

    def _prune(self, just_written: int) -> None:
        kept = 0
        for step in reversed(self.local.all_steps()):
            if kept < self.keep and self.local.is_complete(step):
                kept += 1
            elif kept >= self.keep or step < just_written:
                self.local.delete(step)  # beyond keep, or an incomplete leftover of a crash
        if self.remote is not None:
            for step in self.remote.list_complete()[: -self.keep]:
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
        or corrupt checkpoints are skipped; a wrong key raises ``Permanent``.
        """
        self.wait()
        if self.remote is not None and self.latest() is None:
            remote_steps = self.remote.list_complete()
            if remote_steps:
                self.remote.download(remote_steps[-1], self.local.path(remote_steps[-1]))
        for step in reversed(self.local.all_steps()):
            directory = self.local.path(step)
            if not self.local.is_complete(step):  # verified newest first: hash only what we use
                continue
            states = {n: self._decode(directory, f"{n}.pt") for n in objects}
            rng_state = self._decode(directory, RNG_FILE)
            extra = self._decode(directory, EXTRA_FILE)
            for name, obj in objects.items():
                obj.load_state_dict(states[name])
            rng.restore(_native_rng(rng_state))
            self.extra = dict(extra)
            return step
        self.extra = {}
        return None
