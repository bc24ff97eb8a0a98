"""Uploads cut off half-way, in both stores (a local directory; a real moto server process):
a SIGKILLed upload process or a failed upload leaves no step any reader takes, and the next
agent sync or CheckpointManager prune deletes what it left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from gpulease.agent.ckpt_sync import CheckpointSync, SyncPlaces, SyncStatus
from gpulease.atomic import is_temp_name
from gpulease.clock import SystemClock
from gpulease.errors import Permanent, Retryable
from gpulease.storage import (
    MANIFEST,
    CheckpointStore,
    LocalStore,
    S3Store,
    file_digest,
    inspect_checkpoints,
    read_manifest,
    write_manifest,
)
from gpulease.storage.digest import entry
from tests.awsfixtures import aws_client
from tests.waiting import wait_until

A, B = b"a" * 1000, b"b" * (1 << 20)  # the two files of every step: b.pt goes up second

# Uploads step N of SRC to URL. On S3 it stops for good just before b.pt goes up (a botocore
# event hook in this process, which the test then SIGKILLs); a local upload blocks reading b.pt,
# a FIFO the test feeds, and is SIGKILLed half-way through copying it.
UPLOADER = """\
import sys, time
from pathlib import Path
from gpulease.storage import S3Store, store_from_url

url, step, src = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
store = store_from_url(url)
if isinstance(store, S3Store):
    def pause(model, params, **_):
        if model.name == "PutObject" and params["Key"].endswith("/b.pt"):
            print("midway", flush=True)
            time.sleep(3600)
    store.client.meta.events.register("before-parameter-build.s3", pause)
store.upload(step, src)
print("finished", flush=True)
"""


@dataclass
class Case:
    """One store under test, and what is stored for a step (file names, temp files included)."""

    kind: str
    store: CheckpointStore
    url: str
    endpoint: str | None = None

    def stored(self, step: int) -> set[str]:
        if isinstance(self.store, LocalStore):
            directory = self.store.path(step)
            return {p.name for p in directory.iterdir()} if directory.exists() else set()
        assert isinstance(self.store, S3Store) and self.endpoint is not None
        prefix = self.store.step_prefix(step)
        s3 = aws_client("s3", self.endpoint)
        listing = s3.list_objects_v2(Bucket=self.store.bucket, Prefix=prefix)
        return {obj["Key"].removeprefix(prefix) for obj in listing.get("Contents", [])}


@pytest.fixture(params=["local", "s3"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Case:
    if request.param == "local":
        root = tmp_path / "store"
        return Case("local", LocalStore(root), f"local://{root}")
    bucket = request.getfixturevalue("s3_env")
    endpoint = request.getfixturevalue("aws_env")
    store = S3Store(bucket, "run")
    return Case("s3", store, store.url, endpoint)


def _src(tmp_path: Path, name: str, step: int, files: dict[str, bytes] | None = None) -> Path:
    """A checkpoint directory of ``step`` (data files, then its manifest)."""
    src = tmp_path / name
    src.mkdir()
    for file, data in (files or {"a.pt": A, "b.pt": B}).items():
        (src / file).write_bytes(data)
    write_manifest(src, step, sorted(files or {"a.pt": A, "b.pt": B}), {"format": "replicated"})
    return src


def _open_fifo_writer(path: Path) -> int | None:
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: the reader has not opened it yet
        return None


def _kill_upload_midway(case: Case, tmp_path: Path, step: int) -> int:
    """Run an upload of ``step`` in a child process and SIGKILL it half-way; its pid."""
    script = tmp_path / "uploader.py"
    script.write_text(UPLOADER)
    src = tmp_path / f"killed-{step}"
    src.mkdir()
    for name, data in (("a.pt", A), ("b.pt", B)):
        (src / name).write_bytes(data)
    files = {name: entry(*file_digest(src / name)) for name in ("a.pt", "b.pt")}
    if case.kind == "local":  # the same bytes, through a FIFO the test feeds
        (src / "b.pt").unlink()
        os.mkfifo(src / "b.pt")
    manifest = {"version": 2, "step": step, "checksum": "sha256-tree-16MiB", "files": files}
    (src / MANIFEST).write_text(json.dumps(manifest))
    command = [sys.executable, str(script), case.url, str(step), str(src)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        if case.kind == "local":
            _feed_half(case, src / "b.pt", step, proc.pid)
        else:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "midway\n"
            assert case.stored(step) == {"a.pt"}  # a.pt is up, b.pt and the manifest are not
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return proc.pid


def _feed_half(case: Case, fifo: Path, step: int, pid: int) -> None:
    """Write half of b.pt into the FIFO and wait until the upload copied it to its temp file."""
    fd = wait_until(lambda: _open_fifo_writer(fifo), what="the upload to open b.pt")
    try:
        os.set_blocking(fd, True)
        os.write(fd, B[: len(B) // 2])
        assert isinstance(case.store, LocalStore)
        step_dir = case.store.path(step)
        wait_until(
            lambda: any(
                p.stat().st_size >= len(B) // 4 for p in step_dir.glob(f".b.pt.tmp-{pid}-*")
            ),
            what="b.pt half copied",
        )
    finally:
        os.close(fd)


@dataclass
class Sync:
    sync: CheckpointSync
    places: SyncPlaces
    reports: list[dict[str, Any]]


def _sync(case: Case, tmp_path: Path, name: str, local_steps: tuple[int, ...] = ()) -> Sync:
    """The agent's sync of a task whose checkpoint dir holds ``local_steps`` (complete)."""
    ckpt = tmp_path / name / "ckpt"
    for step in local_steps:
        LocalStore(ckpt).write(step, {"a.pt": A, "b.pt": B})
    places = SyncPlaces(ckpt, tmp_path / name / "scratch", tmp_path / name / "task.log")
    reports: list[dict[str, Any]] = []
    status = SyncStatus(case.url)
    sync = CheckpointSync(
        case.store, status, places, interval_s=3600, clock=SystemClock(), report=reports.append
    )
    return Sync(sync, places, reports)


@pytest.fixture
def killed(case: Case, tmp_path: Path) -> Iterator[int]:
    """Step 1 complete in the store, then an upload of step 2 SIGKILLed half-way; its pid."""
    case.store.upload(1, _src(tmp_path, "one", 1))
    yield _kill_upload_midway(case, tmp_path, 2)


def test_a_killed_upload_is_never_read_and_the_next_sync_deletes_it(
    case: Case, killed: int, tmp_path: Path
) -> None:
    stored = case.stored(2)  # half a step: no manifest
    if case.kind == "local":  # and the killed writer's temp file (.b.pt.tmp-PID-RANDOM)
        temps = {name for name in stored if name.startswith(f".b.pt.tmp-{killed}-")}
        assert len(temps) == 1 and all(is_temp_name(name) for name in temps)
        stored -= temps
    assert stored == {"a.pt"}

    assert case.store.list_complete() == [1]
    assert case.store.list_incomplete() == [2]
    with pytest.raises(Permanent, match="step 2"):
        case.store.download(2, tmp_path / "out")
    assert read_manifest(tmp_path / "out") is None
    infos = {info.step: info.status for info in inspect_checkpoints(case.url)}
    assert infos == {1: "complete", 2: "incomplete"}  # `gpulease checkpoints list|verify`
    fresh = _sync(case, tmp_path, "fresh-node")
    fresh.sync.restore()
    assert fresh.sync.status.restored_step == 1
    assert LocalStore(fresh.places.checkpoint_dir).list_complete() == [1]
    if isinstance(case.store, LocalStore):
        from gpulease.train import CheckpointManager

        assert CheckpointManager(dir=case.store.root).latest() == 1

    later = _sync(case, tmp_path, "later", local_steps=(3,))  # step 2 went, step 3 came
    later.sync.sync_once()
    assert later.sync.status.error is None
    assert case.store.list_complete() == [1, 3]
    assert case.store.list_incomplete() == [] and case.stored(2) == set()
    assert (
        f"removed incomplete checkpoint step 2 from {case.url}" in later.places.log_path.read_text()
    )


def test_a_killed_upload_of_the_newest_step_is_replaced_by_the_next_sync(
    case: Case, killed: int, tmp_path: Path
) -> None:
    again = _sync(case, tmp_path, "restarted-agent", local_steps=(2,))
    again.sync.sync_once()
    assert again.sync.status.error is None and again.sync.status.last_uploaded_step == 2
    assert case.store.list_complete() == [1, 2]
    assert case.stored(2) == {"a.pt", "b.pt", MANIFEST}  # no temp file left of the killed one


def test_the_final_sync_deletes_every_incomplete_step(
    case: Case, killed: int, tmp_path: Path
) -> None:
    final = _sync(case, tmp_path, "final")  # nothing to upload: step 2 is newer than 1, not older
    final.sync.sync_once()
    assert case.store.list_incomplete() == [2]  # maybe an upload in progress: left alone
    final.sync.sync_once(final=True)  # the run is over: nothing else writes
    assert case.store.list_incomplete() == [] and case.store.list_complete() == [1]


def test_the_next_prune_deletes_a_killed_upload(case: Case, killed: int, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from gpulease.train import CheckpointManager
    from tests.train.helpers import make

    model, _, _ = make()
    manager = CheckpointManager(dir=tmp_path / "ckpt", store=case.url, keep=3, async_save=False)
    manager.save(3, model=model)
    assert case.store.list_complete() == [1, 3]
    assert case.store.list_incomplete() == [] and case.stored(2) == set()


def test_an_upload_failing_half_way_leaves_nothing(case: Case, tmp_path: Path) -> None:
    src = _src(tmp_path, "src", 2)
    (src / "b.pt").write_bytes(b"B" * len(B))  # in place, after its manifest: not that step
    with pytest.raises(Permanent, match=r"b\.pt does not match its manifest"):
        case.store.upload(2, src)  # a.pt went first
    assert case.stored(2) == set()
    assert case.store.list_complete() == case.store.list_incomplete() == []


def test_an_s3_put_failing_half_way_leaves_nothing(
    s3_env: str, aws_env: str, tmp_path: Path
) -> None:
    store = S3Store(s3_env, "run")
    case = Case("s3", store, store.url, aws_env)

    def network_gone(model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name == "PutObject" and params["Key"].endswith("/b.pt"):
            raise EndpointConnectionError(endpoint_url=aws_env)

    store.client.meta.events.register("before-parameter-build.s3", network_gone)
    with pytest.raises(Retryable, match="cannot reach S3"):
        store.upload(2, _src(tmp_path, "src", 2))
    assert case.stored(2) == set() and store.list_incomplete() == []


def test_an_s3_upload_of_a_file_changed_while_it_is_sent_fails(
    s3_env: str, aws_env: str, tmp_path: Path
) -> None:
    store = S3Store(s3_env, "run")
    src = _src(tmp_path, "src", 2)

    def rewrite_a(model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name == "PutObject" and params["Key"].endswith("/a.pt"):
            with open(src / "a.pt", "ab") as fh:  # a writer appending in place
                fh.write(b"more")

    store.client.meta.events.register("before-parameter-build.s3", rewrite_a)
    with pytest.raises(Permanent, match=r"a\.pt changed while it was uploaded"):
        store.upload(2, src)
    assert Case("s3", store, store.url, aws_env).stored(2) == set()
