"""Checkpoint sync between a task's checkpoint directory and its checkpoint store.

Owns what the agent does with ``NodeTask.checkpoint_store``:

- :func:`open_store` turns the URL into a store: ``local://PATH`` or a plain path (absolute
  either way) or ``s3://BUCKET/PREFIX``. A URL that names no store (unknown scheme, relative
  path, no bucket, boto3 missing, credentials in the URL) raises ``UserInputError``; the runner
  then fails the task rather than let it train from zero.
- :meth:`CheckpointSync.restore`, before ``run``: unless the local directory has a complete
  checkpoint at least as new as the store's newest complete one, that one is downloaded (the
  store verifies checksums) into a temp dir inside the checkpoint dir and renamed to
  ``step-<N>`` — the layout of :class:`~gpulease.storage.LocalStore` that ``CheckpointManager``
  reads. A store that fails (unreachable) is logged and reported; the job starts without it.
- The background thread (:meth:`CheckpointSync.start`): every ``interval_s``, each complete local
  checkpoint newer than the store's newest is uploaded, newest first (older ones are not: the
  store may have pruned them). Each is first snapshotted — hard links (copies across
  filesystems) of the files its manifest lists, into a private scratch dir — and uploaded only
  when the snapshot verifies, so a checkpoint still being written (no manifest, or files that do
  not match it) is never uploaded, and a rewrite by rename during the upload cannot mix two
  versions. The store checks every file it sends against the snapshot's manifest, so a file
  changed in place (which a hard link shares) fails the upload instead of reaching the store.
  Then the store's incomplete steps (uploads cut off) older than its newest complete one are
  deleted — all of them at the final sync.
- :meth:`CheckpointSync.finish`: the final sync once the run phase ended, bounded by a timeout so
  a hung store cannot keep the task from ending.
- :class:`SyncStatus`: what the task's status reports under ``checkpoint``.

What happened is appended to the task log as ``gpulease: …`` lines (``gpulease: uploaded
checkpoint step 40 to local:///ckpt (3 files, 1.2 MB)``). A URL's user-info is never shown and
no environment value is ever logged.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulease.clock import Clock
from gpulease.errors import Permanent, UserInputError
from gpulease.storage import (
    MANIFEST,
    CheckpointStore,
    LocalStore,
    is_data_name,
    read_manifest,
    store_from_url,
    verify_dir,
)
from gpulease.storage.manifest import fsync_dir
from gpulease.wire import NodeTask

log = logging.getLogger("gpulease.agent")

DEFAULT_SYNC_S = 300.0
DEFAULT_FINAL_SYNC_TIMEOUT_S = 120.0
RESTORE_PREFIX = ".gpulease-restore-"  # temp dirs of a restore, inside the checkpoint dir
_USERINFO = re.compile(r"(?<=://)[^/@]*@")
_MAX_ERROR = 300

Report = Callable[[dict[str, Any]], None]


def redact(url: str) -> str:
    """``url`` without any ``user:password@`` part."""
    return _USERINFO.sub("", url)


def open_store(url: str) -> CheckpointStore:
    """The store ``url`` names; ``UserInputError`` (with a redacted URL) when it names none."""
    shown = redact(url)
    if shown != url:
        raise UserInputError(
            f"checkpoint_store {shown!r}: credentials do not belong in the URL "
            "(the agent uses its own)"
        )
    path = _local_path(url)
    if path is not None and not Path(path).is_absolute():
        raise UserInputError(
            f"checkpoint_store {url!r}: the path must be absolute (local:///abs/path or /abs/path)"
        )
    try:
        return store_from_url(url)
    except UserInputError as exc:
        raise UserInputError(f"checkpoint_store: {exc}") from None


def _local_path(url: str) -> str | None:
    """The path of a local store URL (``local://PATH`` or a plain path); None for others."""
    if url.startswith("local://"):
        return url.removeprefix("local://")
    return None if "://" in url else url


@dataclass
class SyncStatus:
    """The ``checkpoint`` part of a task's status."""

    store: str  # the store URL, redacted
    restored_step: int | None = None  # the step restored before run, if one was
    last_uploaded_step: int | None = None  # the newest step this task uploaded
    store_latest_step: int | None = None  # the store's newest complete step, as last seen
    last_sync_at: float | None = None  # when a sync last succeeded
    error: str | None = None  # the last failure, None once a sync succeeds again

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SyncStatus:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def initial_status(sub: NodeTask) -> dict[str, Any] | None:
    """The status a new task starts with: None without a store."""
    if sub.checkpoint_store is None:
        return None
    return SyncStatus(store=redact(sub.checkpoint_store)).as_dict()


def append_log(path: Path, message: str) -> None:
    """Append ``gpulease: message`` as a line of its own to the task log (O_APPEND, like the
    job's output; a newline first when the job's last line has none)."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        newline = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        os.write(fd, ("\n" if newline else "").encode() + f"gpulease: {message}\n".encode())
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class SyncPlaces:
    """Where a sync works: the task's checkpoint dir, a private scratch dir, the task log."""

    checkpoint_dir: Path
    scratch_dir: Path
    log_path: Path


def for_task(
    sub: NodeTask,
    places: SyncPlaces,
    *,
    clock: Clock,
    report: Report,
    saved: dict[str, Any] | None,
) -> CheckpointSync | None:
    """The sync of ``sub`` (None without a store), resuming the ``saved`` status if any.

    Raises ``UserInputError`` when ``checkpoint_store`` names no store. Only node 0 uploads
    (it writes the checkpoints, or shares their directory with every rank); every node restores.
    """
    if sub.checkpoint_store is None:
        return None
    store = open_store(sub.checkpoint_store)
    status = SyncStatus.from_dict(saved) if saved else SyncStatus(redact(sub.checkpoint_store))
    interval = sub.checkpoint_sync_s if sub.checkpoint_sync_s is not None else DEFAULT_SYNC_S
    return CheckpointSync(
        store,
        status,
        places,
        interval_s=interval,
        clock=clock,
        report=report,
        upload=sub.node_rank == 0,
    )


class CheckpointSync:
    """Restore before run, upload in the background while it runs, a final bounded sync after.

    ``report`` receives every new status (as a dict), never while this object's lock is taken
    by anyone but the caller of ``report`` — so ``report`` may take the runner's lock.
    """

    def __init__(
        self,
        store: CheckpointStore,
        status: SyncStatus,
        places: SyncPlaces,
        *,
        interval_s: float,
        clock: Clock,
        report: Report,
        upload: bool = True,
    ) -> None:
        self.store = store
        self.status = status
        self.local = LocalStore(places.checkpoint_dir)
        self.interval_s = interval_s
        self._places = places
        self._clock = clock
        self._report = report
        self._upload = upload
        self._lock = threading.Lock()  # status changes and their reports, in order
        self._halt = threading.Event()
        self._final = False
        self._detached = False  # after finish gave up: the late thread reports nothing
        self._last_error: str | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.status.store

    # ---- restore ----------------------------------------------------------------------------

    def restore(self) -> None:
        """Fetch the store's newest complete checkpoint unless the local dir has one at least as
        new. Never raises: a failure is logged and reported, and the job starts without it."""
        try:
            self._restore()
        except Exception as exc:
            self._note_error(
                f"checkpoint restore from {self.url} failed ({_why(exc)}); "
                "the job starts without it"
            )

    def _restore(self) -> None:
        remote = self.store.list_complete()
        if not remote:
            self._log(f"no checkpoint in {self.url} to restore")
            return
        newest = remote[-1]
        local = self._local_newest()
        if local is not None and local >= newest:
            self._log(
                f"checkpoint step {local} in {self.local.root} is as new as the store's "
                f"(step {newest}); nothing restored"
            )
            self._update(store_latest_step=newest)
            return
        self._download(newest)
        files, size = _manifest_size(self.local.path(newest))
        self._log(
            f"restored checkpoint step {newest} from {self.url} into {self.local.root} "
            f"({files} files, {human_size(size)})"
        )
        self._update(restored_step=newest, store_latest_step=newest, error=None)

    def _local_newest(self) -> int | None:
        steps = reversed(self.local.all_steps())
        return next((step for step in steps if self.local.is_complete(step)), None)

    def _download(self, step: int) -> None:
        """Download ``step`` into a temp dir next to its final place, verify, rename it there."""
        self.local.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=RESTORE_PREFIX, dir=self.local.root))
        try:
            self.store.download(step, tmp)
            if not verify_dir(tmp):
                raise Permanent(f"checkpoint step {step} from {self.url} does not verify")
            self.local.delete(step)  # an incomplete leftover of that step (a complete one is new)
            tmp.rename(self.local.path(step))
            fsync_dir(self.local.root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # ---- background and final sync -----------------------------------------------------------

    def start(self) -> None:
        """Start the background thread (once; not on a node that does not upload)."""
        if not self._upload or self._thread is not None:
            return
        shutil.rmtree(self._places.scratch_dir, ignore_errors=True)  # a crashed agent's leftovers
        self._thread = threading.Thread(target=self._loop, name="checkpoint-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread without a final sync (the agent is going away; a new one resumes)."""
        self._halt.set()

    def finish(self, timeout_s: float) -> None:
        """Final sync: stop the thread after one more sync; wait at most ``timeout_s``."""
        thread = self._thread
        if thread is None:
            return
        self._final = True
        self._halt.set()
        thread.join(timeout_s)
        if thread.is_alive():
            message = (
                f"final checkpoint sync to {self.url} did not finish within {timeout_s:g} s; "
                "the task ends without it"
            )
            self._note_error(message)
            with self._lock:
                self._detached = True

    def _loop(self) -> None:
        while not self._halt.wait(self.interval_s):
            self.sync_once()
        if self._final:
            self.sync_once(final=True)

    def sync_once(self, *, final: bool = False) -> None:
        """Upload what the store lacks, remove cut-off uploads; record the outcome. Never raises."""
        try:
            uploaded = self._upload_new(final=final)
        except Exception as exc:
            self._note_error(f"checkpoint sync to {self.url} failed ({_why(exc)})")
            return
        if final and not uploaded:
            self._log(f"final checkpoint sync: nothing new to upload to {self.url}")
        with self._lock:
            self._last_error = None
        self._update(last_sync_at=self._clock.now(), error=None)

    def _upload_new(self, *, final: bool) -> list[int]:
        remote = self.store.list_complete()
        newest = remote[-1] if remote else None
        candidates = [
            step
            for step in reversed(self.local.all_steps())
            if (newest is None or step > newest) and self.local.has_manifest(step)
        ]
        done = [step for step in candidates if self._upload_step(step)]
        latest = max([*remote[-1:], *done], default=None)
        self._update(
            store_latest_step=latest,
            last_uploaded_step=max(done, default=self.status.last_uploaded_step),
        )
        self._remove_incomplete(latest, everything=final)
        return done

    def _remove_incomplete(self, latest: int | None, *, everything: bool) -> None:
        """Delete the store's incomplete steps (uploads cut off: a killed agent, a store that
        failed mid-upload) older than its newest complete one; at the final sync (the run is
        over: nothing else writes), all of them. A newer one may be an upload in progress — the
        job's own ``CheckpointManager(store=…)`` — and is replaced when that step is uploaded."""
        for step in self.store.list_incomplete():
            if everything or (latest is not None and step < latest):
                self.store.delete(step)
                self._log(f"removed incomplete checkpoint step {step} from {self.url}")

    def _upload_step(self, step: int) -> bool:
        """Upload a verified snapshot of ``step``; False when it is not complete (yet)."""
        snapshot = self._snapshot(step)
        if snapshot is None:
            return False
        try:
            files, size = _manifest_size(snapshot)
            self.store.upload(step, snapshot)
        finally:
            shutil.rmtree(snapshot, ignore_errors=True)
        self._log(
            f"uploaded checkpoint step {step} to {self.url} ({files} files, {human_size(size)})"
        )
        return True

    def _snapshot(self, step: int) -> Path | None:
        """Link the files ``step``'s manifest lists (and the manifest) into the scratch dir;
        the snapshot's path when it verifies, else None (removed)."""
        src = self.local.path(step)
        manifest = read_manifest(src)
        if manifest is None or manifest["step"] != step:
            return None
        names = [str(name) for name in manifest["files"]]
        if not all(is_data_name(name) for name in names):
            return None
        dest = self._places.scratch_dir / src.name
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        try:
            for name in [*names, MANIFEST]:
                _link_or_copy(src / name, dest / name)
        except FileNotFoundError:
            pass  # pruned or being rewritten: the check below fails
        again = read_manifest(dest)
        if again is None or again["step"] != step or not verify_dir(dest):
            shutil.rmtree(dest, ignore_errors=True)
            return None
        return dest

    # ---- status and log ---------------------------------------------------------------------

    def _update(self, **changes: Any) -> None:
        with self._lock:
            self.status = dataclasses.replace(self.status, **changes)
            if not self._detached:
                self._report(self.status.as_dict())

    def _note_error(self, message: str) -> None:
        """Report ``message`` as the error; log it when it differs from the last one."""
        with self._lock:
            repeated, self._last_error = message == self._last_error, message
        if not repeated:
            self._log(message, logging.WARNING)
        self._update(error=message)

    def _log(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, "%s", message)
        try:
            append_log(self._places.log_path, message)
        except OSError as exc:
            log.warning("cannot append to %s: %s", self._places.log_path, exc)


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except FileNotFoundError:
        raise
    except OSError:  # another filesystem, or links not allowed
        shutil.copyfile(src, dest)


def _manifest_size(directory: Path) -> tuple[int, int]:
    """(files, bytes) that the manifest of ``directory`` lists."""
    manifest = read_manifest(directory)
    entries = manifest["files"].values() if manifest else []
    sizes = [int(e.get("size", 0)) for e in entries if isinstance(e, dict)]
    return len(sizes), sum(sizes)


def human_size(size: int) -> str:
    """``size`` bytes in decimal units: ``512 B``, ``1.2 MB``."""
    if size < 1000:
        return f"{size} B"
    value = float(size)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def _why(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 1] + "…"
