"""CheckpointManager in-process: round trip, pruning, corruption, encryption, async saves."""

from __future__ import annotations

import base64
import random
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from gpulease.errors import Permanent, UserInputError
from gpulease.storage import MANIFEST
from gpulease.train import CheckpointManager
from tests.train.helpers import make, train_step, weights

KEY_HEX = "11" * 32


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("async_save", [True, False])
def test_round_trip_gives_identical_continuation(tmp_path: Path, async_save: bool) -> None:
    model, opt, sched = make()
    for _ in range(5):
        train_step(model, opt, sched)
    mgr = CheckpointManager(tmp_path, async_save=async_save)
    mgr.save(5, model=model, opt=opt, sched=sched, extra={"epoch": 2, "name": "run"})
    mgr.wait()
    for _ in range(4):
        train_step(model, opt, sched)
    expected = weights(model)

    model2, opt2, sched2 = make(seed=99)
    random.seed(1)
    np.random.seed(1)
    mgr2 = CheckpointManager(tmp_path)
    assert mgr2.restore(model=model2, opt=opt2, sched=sched2) == 5
    assert mgr2.extra == {"epoch": 2, "name": "run"}
    assert sched2.last_epoch == 5
    for _ in range(4):
        train_step(model2, opt2, sched2)
    assert _equal(weights(model2), expected)


def test_restore_without_checkpoint(tmp_path: Path) -> None:
    model, _, _ = make()
    before = weights(model)
    mgr = CheckpointManager(tmp_path / "none")
    assert mgr.restore(model=model) is None
    assert mgr.latest() is None
    assert mgr.list() == []
    assert mgr.extra == {}
    assert _equal(weights(model), before)


def test_dir_from_env_and_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPULEASE_CHECKPOINT_DIR", raising=False)
    with pytest.raises(UserInputError, match="dir="):
        CheckpointManager()
    monkeypatch.setenv("GPULEASE_CHECKPOINT_DIR", str(tmp_path))
    assert CheckpointManager().dir == tmp_path
    with pytest.raises(UserInputError, match="keep="):
        CheckpointManager(keep=0)
    with pytest.raises(UserInputError, match="unknown scheme"):
        CheckpointManager(store="gs://bucket/x")


def test_keep_prunes_oldest(tmp_path: Path) -> None:
    model, opt, _ = make()
    mgr = CheckpointManager(tmp_path, keep=2)
    for step in range(1, 6):
        mgr.save(step, model=model, opt=opt)
    mgr.wait()
    assert mgr.list() == [4, 5]
    assert mgr.latest() == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-4", "step-5"]


def test_corrupt_and_partial_checkpoints_are_skipped(tmp_path: Path) -> None:
    model, opt, _ = make()
    mgr = CheckpointManager(tmp_path, keep=5, async_save=False)
    mgr.save(1, model=model, opt=opt, extra={"at": 1})
    mgr.save(2, model=model, opt=opt, extra={"at": 2})
    mgr.save(3, model=model, opt=opt, extra={"at": 3})
    data = (tmp_path / "step-3" / "model.pt").read_bytes()
    (tmp_path / "step-3" / "model.pt").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    (tmp_path / "step-2" / MANIFEST).unlink()
    (tmp_path / "step-4").mkdir()
    (tmp_path / "step-4" / "model.pt").write_bytes(b"partial")
    model2, opt2, _ = make(seed=5)
    assert mgr.list() == [1]
    assert mgr.restore(model=model2, opt=opt2) == 1
    assert mgr.extra == {"at": 1}


def test_encryption_round_trip_and_wrong_key(tmp_path: Path) -> None:
    model, opt, _ = make()
    mgr = CheckpointManager(tmp_path, encrypt_key=KEY_HEX)
    mgr.save(7, model=model, opt=opt, extra={"secret": 42})
    mgr.wait()
    raw = (tmp_path / "step-7" / "model.pt").read_bytes()
    assert raw.startswith(b"GLENC1")
    assert b"weight" not in raw
    b64 = base64.b64encode(bytes.fromhex(KEY_HEX)).decode()
    model2, opt2, _ = make(seed=3)
    mgr2 = CheckpointManager(tmp_path, encrypt_key=b64)
    assert mgr2.restore(model=model2, opt=opt2) == 7
    assert mgr2.extra == {"secret": 42}
    assert _equal(weights(model2), weights(model))
    with pytest.raises(Permanent, match="wrong key"):
        CheckpointManager(tmp_path, encrypt_key="22" * 32).restore(model=model2)
    with pytest.raises(Permanent, match="encrypted"):
        CheckpointManager(tmp_path).restore(model=model2)


def test_key_from_env_and_bad_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULEASE_CHECKPOINT_KEY", KEY_HEX)
    model, _, _ = make()
    mgr = CheckpointManager(tmp_path, async_save=False)
    mgr.save(1, model=model)
    assert (tmp_path / "step-1" / "model.pt").read_bytes().startswith(b"GLENC1")
    for bad in ("abc", "zz" * 32, base64.b64encode(b"x" * 16).decode()):
        with pytest.raises(UserInputError, match="64 hex characters"):
            CheckpointManager(tmp_path, encrypt_key=bad)


def test_async_snapshot_is_taken_before_save_returns(tmp_path: Path) -> None:
    model, opt, _ = make()
    mgr = CheckpointManager(tmp_path, keep=5)
    saved = weights(model)
    mgr.save(1, model=model, opt=opt)
    with torch.no_grad():  # mutate while the write may still be in flight
        for p in model.parameters():
            p.add_(1.0)
    mgr.save(2, model=model, opt=opt)  # waits for save 1, never corrupts it
    mgr.wait()
    assert mgr.list() == [1, 2]
    fresh, _, _ = make(seed=8)
    loader = CheckpointManager(tmp_path)
    assert loader.restore(model=fresh) == 2
    assert _equal(weights(fresh), weights(model))
    import shutil

    shutil.rmtree(tmp_path / "step-2")
    assert loader.restore(model=fresh) == 1
    assert _equal(weights(fresh), saved)


def test_saves_from_two_threads_serialise(tmp_path: Path) -> None:
    model, opt, _ = make(width=256)
    mgr = CheckpointManager(tmp_path, keep=10)
    threads = [
        threading.Thread(target=mgr.save, args=(s,), kwargs={"model": model, "opt": opt})
        for s in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mgr.wait()
    assert mgr.list() == list(range(6))


def test_background_error_surfaces_on_wait(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    model, _, _ = make()
    mgr = CheckpointManager(blocker)
    mgr.save(1, model=model)
    with pytest.raises(Permanent, match="background checkpoint save failed"):
        mgr.wait()
    mgr.wait()  # the error is reported once


def test_bad_names_and_steps(tmp_path: Path) -> None:
    model, _, _ = make()
    mgr = CheckpointManager(tmp_path)
    with pytest.raises(UserInputError, match="identifier"):
        mgr.save(1, **{"__rng__": model})
    with pytest.raises(UserInputError, match=">= 0"):
        mgr.save(-1, model=model)


def test_missing_object_in_checkpoint_is_named(tmp_path: Path) -> None:
    model, opt, _ = make()
    mgr = CheckpointManager(tmp_path, async_save=False)
    mgr.save(1, model=model)
    with pytest.raises(UserInputError, match=r"no opt\.pt"):
        mgr.restore(model=model, opt=opt)


def test_remote_store_mirror_and_restore(tmp_path: Path) -> None:
    model, opt, _ = make()
    mgr = CheckpointManager(tmp_path / "local", keep=2, store=f"local://{tmp_path / 'remote'}")
    for step in (1, 2, 3):
        mgr.save(step, model=model, opt=opt, extra={"s": step})
    mgr.wait()
    assert sorted(p.name for p in (tmp_path / "remote").iterdir()) == ["step-2", "step-3"]
    fresh, fresh_opt, _ = make(seed=4)
    other = CheckpointManager(tmp_path / "new-local", store=f"local://{tmp_path / 'remote'}")
    assert other.restore(model=fresh, opt=fresh_opt) == 3
    assert other.extra == {"s": 3}
    assert _equal(weights(fresh), weights(model))


def test_grad_scaler_state_round_trips(tmp_path: Path) -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    mgr = CheckpointManager(tmp_path, async_save=False)
    mgr.save(1, scaler=scaler)
    other = torch.amp.GradScaler("cpu", init_scale=2.0)
    mgr.restore(scaler=other)
    assert other.get_scale() == 1024.0
