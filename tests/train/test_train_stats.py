"""gpulease.train's report to the agent (``GPULEASE_TRAIN_STATS_FILE``): throttled atomic writes
on steps, at once on checkpoints; step time, samples/s, tokens/s, MFU from a StepTimer; the
data-wait share from the time spent fetching batches; a write that fails is logged once and the
job goes on; and a real CPU torch training loop (StepTimer, ResumableLoader, CheckpointManager)
whose file the agent's parser accepts. Clocks are injected; nothing here bounds wall time."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.agent.telemetry.train import TRAIN_KEYS, parse_train_stats
from gpulease.clock import VirtualClock
from gpulease.errors import UserInputError
from gpulease.train import StepTimer, TrainStats, timed_batches


def _stats(path: Path | None, clock: VirtualClock, interval_s: float = 5.0) -> TrainStats:
    return TrainStats(path, interval_s=interval_s, clock=clock.now, monotonic=clock.now)


def _read(path: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads(path.read_text())
    return data


def test_steps_are_written_at_most_every_interval_and_checkpoints_at_once(tmp_path: Path) -> None:
    clock, path = VirtualClock(), tmp_path / "train.json"
    stats = _stats(path, clock)
    stats.step(samples=32)  # the first step is written at once
    assert _read(path)["step"] == 0
    for _ in range(4):
        clock.advance(1.0)
        stats.step(samples=32, tokens=32 * 128)
    assert _read(path)["step"] == 0  # 4 s since the last report: not yet
    clock.advance(1.0)
    stats.step(samples=32, tokens=32 * 128)
    report = _read(path)
    assert report["step"] == 5
    assert report["step_time_s"] == pytest.approx(1.0)  # 5 steps over the 5 s window
    assert report["samples_per_s"] == pytest.approx(32.0)
    assert report["tokens_per_s"] == pytest.approx(32 * 128.0)
    assert report["mfu"] is None  # no FLOPs given
    assert report["updated_at"] == clock.now() and report["checkpoint_step"] is None
    clock.advance(0.5)
    stats.checkpoint(5)
    report = _read(path)
    assert report["checkpoint_step"] == 5 and report["checkpoint_at"] == clock.now()
    assert set(parse_train_stats(path.read_text())) == set(TRAIN_KEYS)
    assert not [p for p in tmp_path.iterdir() if p.name != "train.json"]  # no temp left


def test_explicit_step_numbers_win_and_must_not_be_negative(tmp_path: Path) -> None:
    clock, path = VirtualClock(), tmp_path / "train.json"
    stats = _stats(path, clock, interval_s=0.0)
    stats.step(1000)
    stats.step()
    assert _read(path)["step"] == 1001
    with pytest.raises(UserInputError, match="step=-1"):
        stats.step(-1)
    with pytest.raises(UserInputError, match="interval_s"):
        TrainStats(path, interval_s=-1)


def test_a_step_timer_gives_step_time_and_mfu_against_the_rented_part(tmp_path: Path) -> None:
    clock, path = VirtualClock(), tmp_path / "train.json"
    stats = _stats(path, clock, interval_s=0.0)
    timer = StepTimer(flops_per_sample=1e9, accelerator="T4", precision="fp16", warmup=0,
                      clock=clock.now, report=False)  # fmt: skip
    for _ in range(3):
        with timer.step(samples=1000):
            clock.advance(0.5)
        stats.step(samples=1000, timer=timer)
    report = _read(path)
    speed = timer.throughput()
    assert report["step_time_s"] == pytest.approx(0.5)
    assert report["samples_per_s"] == pytest.approx(2000.0)
    assert speed.mfu is not None and report["mfu"] == pytest.approx(speed.mfu)
    assert 0 < speed.mfu < 1 and speed.accelerator == "T4"


def test_the_data_wait_share_is_the_time_spent_fetching_over_the_window(tmp_path: Path) -> None:
    clock, path = VirtualClock(), tmp_path / "train.json"
    stats = _stats(path, clock, interval_s=10.0)

    def slow_batches() -> Iterator[int]:
        for k in range(10):
            clock.advance(0.3)  # the input pipeline
            yield k

    stats.flush()  # the window starts now (nothing is written before the first step)
    for _ in timed_batches(slow_batches(), stats):
        clock.advance(0.7)  # the step
        stats.step(samples=8)
    report = _read(path)
    assert report["step"] == 9
    assert report["data_wait_ratio"] == pytest.approx(0.3)
    assert report["step_time_s"] == pytest.approx(1.0)


def test_a_write_that_fails_is_logged_once_and_never_fails_the_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    clock = VirtualClock()
    stats = _stats(blocker / "train.json", clock, interval_s=0.0)
    with caplog.at_level(logging.WARNING, logger="gpulease.train"):
        for _ in range(5):
            stats.step()
        stats.checkpoint(4)
    lines = [r for r in caplog.records if "cannot write the train stats" in r.getMessage()]
    assert len(lines) == 1 and stats.step_number == 4


def test_without_the_variable_nothing_is_written(tmp_path: Path) -> None:
    clock = VirtualClock()
    stats = _stats(None, clock, interval_s=0.0)
    stats.step(samples=1)
    stats.checkpoint(0)
    assert not stats.enabled and stats.figures()["step"] == 0
    assert list(tmp_path.iterdir()) == []


TRAINING = textwrap.dedent(
    """
    import sys
    import torch
    from gpulease.train import CheckpointManager, StepTimer, tuned_loader

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = tuned_loader(data, batch_size=16, shuffle=True, num_workers=0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    timer = StepTimer(flops_per_sample=6 * 9, precision="fp32", warmup=1)
    ckpt = CheckpointManager(sys.argv[1], async_save=False)
    for step, (x, y) in enumerate(loader):
        with timer.step(samples=len(x)):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if step == 7:
            ckpt.save(step, model=model, optimizer=opt)
    print("steps", step + 1)
    """
)


def test_a_cpu_torch_training_loop_reports_through_the_library(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "train.json"
    env = {**os.environ, "GPULEASE_TRAIN_STATS_FILE": str(path), "GPULEASE_ACCELERATOR": "T4"}
    done = subprocess.run(
        [sys.executable, "-c", TRAINING, str(tmp_path / "ckpt")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "steps 16" in done.stdout
    report = parse_train_stats(path.read_text())
    assert report["checkpoint_step"] == 7 and report["checkpoint_at"] is not None
    assert report["step"] == 15  # the last step, reported at exit
    assert report["step_time_s"] is not None and report["samples_per_s"] is not None
    assert report["mfu"] is not None and 0 < report["mfu"] < 1  # against the rented T4
    assert report["data_wait_ratio"] is not None and 0 <= report["data_wait_ratio"] <= 1
