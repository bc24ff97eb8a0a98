"""Real processes: resume exactness across kill -9, crash safety under SIGKILL, SIGTERM → 75."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gpulease.storage import LocalStore
from gpulease.train import EXIT_PREEMPTED, CheckpointManager
from tests.train.child import Big

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _child(*args: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.train.child", *args],
        cwd=ROOT,
        env={**ENV, **kw.pop("env", {})},  # type: ignore[dict-item]
        text=True,
        **kw,  # type: ignore[call-overload]
    )


def test_resume_after_kill_9_is_exact(tmp_path: Path) -> None:
    straight = _child("train", str(tmp_path / "a"), "12", str(tmp_path / "a.pt"))
    killed = _child("train", str(tmp_path / "b"), "12", str(tmp_path / "b.pt"), "6")
    assert straight.wait(60) == 0
    assert killed.wait(60) == -signal.SIGKILL
    assert not (tmp_path / "b.pt").exists()
    assert CheckpointManager(tmp_path / "b").latest() == 6
    resumed = _child("train", str(tmp_path / "b"), "12", str(tmp_path / "b.pt"))
    assert resumed.wait(60) == 0
    a = torch.load(tmp_path / "a.pt", weights_only=True)
    b = torch.load(tmp_path / "b.pt", weights_only=True)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


KILLS = 50


def test_sigkill_during_saves_never_loses_the_previous_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    server = _child(
        "forkserver", str(directory), "32", stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert server.stdin is not None and server.stdout is not None
    rand = random.Random(1234)
    store = LocalStore(directory)
    last_good = 0
    incomplete_seen = 0
    try:
        for kill in range(KILLS):
            server.stdin.write("start\n")
            server.stdin.flush()
            pid = int(server.stdout.readline())
            # mostly short delays (kills land mid-save); every 5th long enough to finish a save
            time.sleep(rand.uniform(0.6, 1.0) if kill % 5 == 4 else rand.uniform(0.01, 0.3))
            os.kill(pid, signal.SIGKILL)
            server.stdin.write("reap\n")
            server.stdin.flush()
            status = int(server.stdout.readline())
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            incomplete_seen += len(set(store.all_steps()) - set(store.list_complete()))
            big = Big(1)
            mgr = CheckpointManager(directory, keep=2)
            step = mgr.restore(big=big)
            if step is None:
                assert last_good == 0
                continue
            assert step >= last_good
            assert mgr.extra == {"step": step}
            assert big.tensor.numel() == 32 * (1 << 20) // 4
            assert bool((big.tensor == float(step)).all())
            last_good = step
    finally:
        server.kill()
        server.wait()
    assert last_good >= 5, "the child never got to save: the test did not exercise anything"
    assert incomplete_seen > 0, "no kill landed mid-save"


def test_sigterm_checkpoints_and_exits_75(tmp_path: Path) -> None:
    notice = tmp_path / "preempted"
    proc = _child(
        "preempt",
        str(tmp_path / "ckpt"),
        stdout=subprocess.PIPE,
        env={"GPULEASE_PREEMPTION_FILE": str(notice)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    notice.touch()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == EXIT_PREEMPTED
    mgr = CheckpointManager(tmp_path / "ckpt")
    assert mgr.latest() is not None
    mgr.restore()
    assert mgr.extra == {"preempted": True}


def test_preemption_file_alone_stops(tmp_path: Path) -> None:
    proc = _child(
        "preempt",
        str(tmp_path / "ckpt"),
        stdout=subprocess.PIPE,
        env={"GPULEASE_PREEMPTION_FILE": str(tmp_path / "notice")},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    (tmp_path / "notice").touch()
    assert proc.wait(30) == EXIT_PREEMPTED


@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_two_gloo_ranks_only_rank_0_writes(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    procs = [
        _child(
            "dist",
            str(tmp_path / "ckpt"),
            stdout=subprocess.PIPE,
            env={**base, "RANK": str(rank)},
        )
        for rank in (0, 1)
    ]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [
        "rank=0 wrote=True step=1 extra={'rank': 0}",
        "rank=1 wrote=False step=1 extra={'rank': 0}",
    ]
