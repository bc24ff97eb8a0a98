"""Checkpoint sync in a real agent: restore from the store before ``run``, background uploads of
complete checkpoints only, a final sync before the terminal state, bad and unreachable stores,
restarts, and tasks without a store behaving as before."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gpulease.agent.ckpt_sync import CheckpointSync, SyncPlaces, SyncStatus, human_size, redact
from gpulease.agent.state import TaskRecord
from gpulease.clock import SystemClock
from gpulease.storage import LocalStore
from gpulease.wire import MAX_SYNC_S, NodeTask
from tests.agent.conftest import AgentProcess, task
from tests.awsfixtures import aws_env, moto_server, s3_env  # noqa: F401 - fixtures
from tests.waiting import wait_until

# A run script: writes checkpoints with the storage API (CheckpointManager's layout), driven by
# its arguments: "w:N" complete step N; "i:N" step N cut off before its manifest (it never has
# one); "c:N" step N with a file that no longer matches its manifest, put in place by a rename
# (it is never complete in the checkpoint dir, not even for a moment); "s:N" wait until the
# store has step N complete; "f:PATH" wait until PATH exists; "x:CODE" exit with CODE.
WRITER = """\
import os, sys, time
from pathlib import Path
from gpulease.storage import LocalStore

local = LocalStore(Path(os.environ["GPULEASE_CHECKPOINT_DIR"]))
staging = LocalStore(local.root / ".staging")  # same filesystem: a rename is atomic
store = LocalStore(Path(sys.argv[1]))
for op in sys.argv[2:]:
    kind, arg = op.split(":", 1)
    files = {"model.pt": arg.encode() * 100, "extra.pt": b"e"}
    if kind == "w":
        local.write(int(arg), files)
    if kind == "i":
        out = local.writer(int(arg))
        for name, data in files.items():
            out.write_bytes(name, data)  # and no out.finish(): no manifest
    if kind == "c":
        staging.write(int(arg), files)
        (staging.path(int(arg)) / "model.pt").write_bytes(b"changed")
        staging.path(int(arg)).rename(local.path(int(arg)))
    while kind == "s" and int(arg) not in store.list_complete():
        time.sleep(0.02)
    while kind == "f" and not Path(arg).exists():
        time.sleep(0.02)
    if kind == "x":
        sys.exit(int(arg))
    print("done", op, flush=True)
"""


@pytest.fixture
def writer(tmp_path: Path) -> Path:
    path = tmp_path / "writer.py"
    path.write_text(WRITER)
    return path


def _run(writer: Path, store: Path, *ops: str) -> str:
    return f"python {writer} {store} {' '.join(ops)}"


def _ckpt(status: dict[str, Any]) -> dict[str, Any]:
    checkpoint: dict[str, Any] = status["checkpoint"]
    return checkpoint


# ---- restore ---------------------------------------------------------------------------------


def test_the_newest_complete_checkpoint_is_restored_before_run(
    agent: AgentProcess, tmp_path: Path
) -> None:
    store = LocalStore(tmp_path / "store")
    store.write(10, {"model.pt": b"ten"})
    store.write(20, {"model.pt": b"twenty", "extra.pt": b"x"})
    (tmp_path / "store" / "step-30").mkdir()  # incomplete: never restored
    (tmp_path / "store" / "step-30" / "model.pt").write_bytes(b"half")
    run = (
        'cat "$GPULEASE_CHECKPOINT_DIR/step-20/model.pt"; echo; '
        "python -c 'from gpulease.train.manager import CheckpointManager as M; "
        'print("latest", M().latest())\''
    )
    agent.api.submit(task(run=run, checkpoint_store=f"local://{tmp_path}/store"))
    status = agent.wait_state("t1")
    assert status["state"] == "SUCCEEDED"
    states = ["PENDING", "SETTING_UP", "RUNNING", "SUCCEEDED"]  # SETTING_UP: the restore
    assert [h["state"] for h in status["history"]] == states
    logs = agent.all_logs("t1")
    assert "twenty\nlatest 20\n" in logs
    assert f"gpulease: restored checkpoint step 20 from local://{tmp_path}/store" in logs
    assert logs.index("restored checkpoint") < logs.index("twenty")
    assert _ckpt(status)["restored_step"] == 20
    local = agent.node_dir / "work" / "checkpoints"
    assert sorted(p.name for p in local.iterdir()) == ["step-20"]  # no temp dir left


def test_a_local_checkpoint_as_new_as_the_stores_is_kept(
    agent: AgentProcess, tmp_path: Path
) -> None:
    LocalStore(tmp_path / "store").write(10, {"model.pt": b"store"})
    LocalStore(tmp_path / "local").write(10, {"model.pt": b"mine"})
    agent.api.submit(
        task(
            run='cat "$GPULEASE_CHECKPOINT_DIR/step-10/model.pt"',
            checkpoint_dir=str(tmp_path / "local"),
            checkpoint_store=str(tmp_path / "store"),  # a plain absolute path
        )
    )
    status = agent.wait_state("t1")
    assert status["state"] == "SUCCEEDED" and _ckpt(status)["restored_step"] is None
    logs = agent.all_logs("t1")
    assert "is as new as the store's (step 10); nothing restored" in logs
    assert "mine\ngpulease: final checkpoint sync: nothing new" in logs  # on a line of its own


def test_an_unreachable_store_is_logged_and_the_job_still_runs(
    agent_factory: Callable[..., AgentProcess],
) -> None:
    unreachable = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # nothing listens there
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "not-a-real-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
    }
    agent: AgentProcess = agent_factory(env=unreachable)
    agent.api.submit(task(run="echo trained", checkpoint_store="s3://bucket/run-1"))
    status = agent.wait_state("t1", timeout=20)
    assert status["state"] == "SUCCEEDED"
    logs = agent.all_logs("t1")
    assert "gpulease: checkpoint restore from s3://bucket/run-1 failed (" in logs
    assert "the job starts without it" in logs and "trained\n" in logs
    assert "checkpoint sync to s3://bucket/run-1 failed" in _ckpt(status)["error"]
    assert "not-a-real-secret" not in logs + json.dumps(status)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://host/ckpt", "unknown scheme 'ftp'"),
        ("local://relative/dir", "must be absolute"),
        ("relative/dir", "must be absolute"),
        ("s3://", "has no bucket"),
        ("s3://AKIA:hunter2@bucket/p", "credentials do not belong in the URL"),
    ],
)
def test_a_store_url_that_names_no_store_fails_the_task(
    shared_agent: AgentProcess, tmp_path: Path, url: str, why: str
) -> None:
    task_id = f"bad-{abs(hash(url))}"
    marker = tmp_path / "ran"
    shared_agent.api.submit(task(task_id, run=f"touch {marker}", checkpoint_store=url))
    status = shared_agent.wait_state(task_id)
    assert status["state"] == "FAILED" and why in status["detail"]
    assert status["detail"].startswith("checkpoint_store")
    assert why in shared_agent.all_logs(task_id)
    assert not marker.exists()
    assert "hunter2" not in json.dumps(status) + shared_agent.all_logs(task_id)


# ---- background and final sync ---------------------------------------------------------------


def test_complete_checkpoints_are_uploaded_while_the_job_runs_and_others_never(
    agent: AgentProcess, tmp_path: Path, writer: Path
) -> None:
    store = tmp_path / "store"
    # 1 complete, 2 cut off before its manifest; once 1 is in the store: 3 complete, 5 with a
    # file that does not match its manifest; once 3 is in the store, a few more syncs, exit 0
    run = _run(writer, store, "w:1", "i:2", "s:1", "w:3", "c:5", "s:3")
    agent.api.submit(
        task(run=run + "; sleep 0.6", checkpoint_store=str(store), checkpoint_sync_s=0.2)
    )
    status = agent.wait_state("t1", timeout=20)
    assert status["state"] == "SUCCEEDED"
    assert LocalStore(store).all_steps() == LocalStore(store).list_complete() == [1, 3]
    checkpoint = _ckpt(status)
    assert checkpoint["last_uploaded_step"] == checkpoint["store_latest_step"] == 3
    assert checkpoint["error"] is None and checkpoint["last_sync_at"] >= status["started_at"]
    logs = agent.all_logs("t1")
    assert f"gpulease: uploaded checkpoint step 1 to {store} (2 files, 101 B)" in logs
    assert "uploaded checkpoint step 3" in logs
    assert "step 2 to" not in logs and "step 5 to" not in logs
    assert "final checkpoint sync: nothing new" in logs
    assert not list((agent.node_dir / "tasks" / "t1" / "ckpt-upload").iterdir())


def test_the_final_sync_after_exit_75_lands_before_the_task_is_preempted(
    agent: AgentProcess, tmp_path: Path, writer: Path
) -> None:
    store = tmp_path / "store"
    run = _run(writer, store, "w:7", "x:75")
    agent.api.submit(task(run=run, checkpoint_store=f"local://{store}", checkpoint_sync_s=3600))
    status = agent.wait_state("t1")  # the first status seen as ended
    assert (status["state"], status["exit_code"]) == ("PREEMPTED", 75)
    assert LocalStore(store).list_complete() == [7]
    assert _ckpt(status)["last_uploaded_step"] == 7
    manifest = store / "step-7" / "manifest.json"
    assert manifest.stat().st_mtime <= status["finished_at"]
    assert "gpulease: uploaded checkpoint step 7" in agent.all_logs("t1")


def test_the_final_sync_after_a_preemption_notice_lands_before_preempted(
    agent: AgentProcess, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    script = tmp_path / "job.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        "from gpulease.storage import LocalStore\n"
        "local = LocalStore(Path(os.environ['GPULEASE_CHECKPOINT_DIR']))\n"
        "def on_term(*_):\n"
        "    local.write(9, {'model.pt': b'nine'})\n"
        "    sys.exit(75)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "print('training', flush=True)\n"
        "while True:\n"
        "    time.sleep(0.02)\n"
    )
    agent.api.submit(task(run=f"python {script}", checkpoint_store=str(store)))
    wait_until(lambda: b"training" in agent.api.logs("t1").data, what="the job to start")
    agent.api.preempt("t1", grace_s=10)
    status = agent.wait_state("t1")
    assert (status["state"], status["exit_code"]) == ("PREEMPTED", 75)
    assert LocalStore(store).list_complete() == [9]
    assert _ckpt(status)["last_uploaded_step"] == 9


def test_a_restarted_agent_keeps_syncing(agent: AgentProcess, tmp_path: Path, writer: Path) -> None:
    store, go = tmp_path / "store", tmp_path / "go"
    run = _run(writer, store, "w:1", f"f:{go}", "w:2", "s:2")
    agent.api.submit(task(run=run, checkpoint_store=str(store), checkpoint_sync_s=0.2))
    wait_until(lambda: LocalStore(store).list_complete() == [1], what="step 1 in the store")
    agent.kill()  # the job lives on
    go.touch()
    agent.start()
    status = agent.wait_state("t1", timeout=20)
    assert status["state"] == "SUCCEEDED"  # the job waited for step 2 to reach the store
    assert LocalStore(store).list_complete() == [1, 2]
    assert _ckpt(status)["last_uploaded_step"] == 2


def test_only_node_0_uploads_and_every_node_restores(
    agent_factory: Callable[..., AgentProcess], tmp_path: Path, writer: Path
) -> None:
    store = tmp_path / "store"
    LocalStore(store).write(4, {"model.pt": b"four"})
    agent: AgentProcess = agent_factory(rank=1)
    run = _run(writer, store, "w:8")
    two_nodes = {"num_nodes": 2, "node_ips": ["10.0.0.1", "10.0.0.2"]}
    agent.api.submit(task(run=run, node_rank=1, checkpoint_store=str(store), **two_nodes))
    status = agent.wait_state("t1")
    assert status["state"] == "SUCCEEDED" and _ckpt(status)["restored_step"] == 4
    assert LocalStore(store).all_steps() == [4] and _ckpt(status)["last_uploaded_step"] is None
    assert LocalStore(agent.node_dir / "work" / "checkpoints").list_complete() == [4, 8]


def test_a_hung_store_cannot_keep_the_task_from_ending(tmp_path: Path) -> None:
    release = threading.Event()

    class HungStore(LocalStore):
        def list_complete(self) -> list[int]:
            release.wait(30)
            return super().list_complete()

    reports: list[dict[str, Any]] = []
    places = SyncPlaces(tmp_path / "ckpt", tmp_path / "scratch", tmp_path / "task.log")
    sync = CheckpointSync(
        HungStore(tmp_path / "store"),
        SyncStatus("local:///store"),
        places,
        interval_s=3600,
        clock=SystemClock(),
        report=reports.append,
    )
    sync.start()
    started = time.monotonic()
    sync.finish(0.3)
    assert 0.3 <= time.monotonic() - started < 2.0
    assert "did not finish within 0.3 s" in (reports[-1]["error"] or "")
    assert "final checkpoint sync to local:///store did not finish" in places.log_path.read_text()
    count = len(reports)
    release.set()
    time.sleep(0.2)
    assert len(reports) == count  # a late sync reports nothing once the task ended


# ---- without a store, as before --------------------------------------------------------------


def test_without_a_store_nothing_changes_but_the_default_dir(agent: AgentProcess) -> None:
    agent.api.submit(task(run='echo "$GPULEASE_CHECKPOINT_DIR"'))
    status = agent.wait_state("t1")
    assert status["state"] == "SUCCEEDED" and status["checkpoint"] is None
    assert [h["state"] for h in status["history"]] == ["PENDING", "RUNNING", "SUCCEEDED"]
    default = agent.node_dir / "work" / "checkpoints"
    assert agent.all_logs("t1") == f"{default}\n" and default.is_dir()
    assert not (agent.node_dir / "checkpoints").exists()


def test_a_relative_checkpoint_dir_is_under_the_work_dir(agent: AgentProcess) -> None:
    agent.api.submit(task(run='echo "$GPULEASE_CHECKPOINT_DIR"', checkpoint_dir="out/ckpt"))
    agent.wait_state("t1")
    expected = agent.node_dir / "work" / "out" / "ckpt"
    assert agent.all_logs("t1") == f"{expected}\n" and expected.is_dir()


# ---- submission rules ------------------------------------------------------------------------


@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(min_value=1e-9, max_value=MAX_SYNC_S),
    )
)
def test_checkpoint_sync_s_must_be_a_positive_finite_interval(seconds: float) -> None:
    body = {
        "task_id": "t",
        "run": "x",
        "checkpoint_store": "s3://b/p",
        "checkpoint_sync_s": seconds,
    }
    valid = math.isfinite(seconds) and 0 < seconds <= MAX_SYNC_S
    try:
        sub = NodeTask.model_validate(body)
    except ValidationError as exc:
        assert not valid, exc
        assert exc.errors()[0]["loc"] == ("checkpoint_sync_s",)
        return
    assert valid
    record = TaskRecord.from_json(json.loads(json.dumps(TaskRecord(sub).to_json())))
    assert record.submission == sub  # the record on disk keeps the fields


def test_a_submission_without_the_new_fields_is_read_as_before() -> None:
    sub = NodeTask.model_validate({"task_id": "t", "run": "x"})
    assert (sub.checkpoint_store, sub.checkpoint_sync_s) == (None, None)
    old_record = TaskRecord(sub).to_json()
    del old_record["checkpoint"]  # written by an agent from before checkpoint sync
    assert TaskRecord.from_json(old_record).status()["checkpoint"] is None


def test_sizes_and_urls_as_logged() -> None:
    assert [human_size(n) for n in (0, 999, 1200, 1_234_567, 5 * 10**12)] == [
        "0 B",
        "999 B",
        "1.2 kB",
        "1.2 MB",
        "5.0 TB",
    ]
    assert redact("s3://key:secret@bucket/p") == "s3://bucket/p"
    assert redact("local:///ckpt") == "local:///ckpt"


# ---- an s3:// store (a real moto server) --------------------------------------------------------


def test_an_s3_store_takes_the_final_sync_and_restores_on_a_fresh_node(
    s3_env: str,  # noqa: F811 - fixture
    agent_factory: Callable[..., AgentProcess],
    tmp_path: Path,
    writer: Path,
) -> None:
    """What a managed job on AWS does: node A uploads its checkpoint to s3:// when it is
    preempted (exit 75), a fresh node B restores it before ``run``."""
    url = f"s3://{s3_env}/jobs/t1"
    first = agent_factory("node-a")  # started after s3_env: the agent's env points at moto
    run = _run(writer, tmp_path / "unused", "w:5", "w:9", "x:75")
    first.api.submit(task(run=run, checkpoint_store=url, checkpoint_sync_s=3600))
    status = first.wait_state("t1")
    assert (status["state"], _ckpt(status)["last_uploaded_step"]) == ("PREEMPTED", 9)

    second = agent_factory("node-b")
    check = 'cat "$GPULEASE_CHECKPOINT_DIR/step-9/model.pt" | head -c 3; echo'
    second.api.submit(task(run=check, checkpoint_store=url))
    status = second.wait_state("t1")
    assert status["state"] == "SUCCEEDED" and _ckpt(status)["restored_step"] == 9
    assert "999\n" in second.all_logs("t1")
