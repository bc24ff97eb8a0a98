"""on_preemption / should_stop / exit_preempted in-process; rank > 0 does not write."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.train import (
    EXIT_PREEMPTED,
    CheckpointManager,
    exit_preempted,
    manager,
    on_preemption,
    preemption,
    should_stop,
)
from tests.train.helpers import make
from tests.waiting import wait_until


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("GPULEASE_PREEMPTION_FILE", raising=False)
    previous = signal.getsignal(signal.SIGTERM)
    preemption.reset()
    yield
    signal.signal(signal.SIGTERM, previous)
    preemption.reset()


def test_sigterm_sets_should_stop_and_runs_callback() -> None:
    calls: list[int] = []
    on_preemption(lambda: calls.append(1))
    assert not should_stop()
    os.kill(os.getpid(), signal.SIGTERM)
    wait_until(lambda: calls, 5, "the preemption callback")
    assert calls == [1]
    assert should_stop()
    preemption.reset()
    assert not should_stop()


def test_preemption_file_sets_should_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notice = tmp_path / "notice"
    monkeypatch.setenv("GPULEASE_PREEMPTION_FILE", str(notice))
    assert not should_stop()
    notice.touch()
    assert should_stop()
    monkeypatch.setenv("GPULEASE_PREEMPTION_FILE", "")
    assert not should_stop()


def test_exit_preempted_exits_75() -> None:
    with pytest.raises(SystemExit) as info:
        exit_preempted()
    assert info.value.code == EXIT_PREEMPTED == 75


def test_only_rank_0_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _, _ = make()
    monkeypatch.setattr(manager, "_rank_and_world", lambda: (1, 2))
    mgr = CheckpointManager(tmp_path)
    mgr.save(1, model=model)
    mgr.wait()
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    monkeypatch.setattr(manager, "_rank_and_world", lambda: (0, 2))
    mgr.save(1, model=model)
    mgr.wait()
    assert mgr.list() == [1]
