"""The training example trains for real: alone, as two DDP processes under torchrun (gloo on
loopback), and after a kill -9 or a preemption notice it resumes to the very same weights."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_until

pytest.importorskip("torch")
pytest.importorskip("sklearn")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train" / "train_digits.py"
NO_ONNX = ["--onnx", "off"]  # the export is tested in test_serve_digits.py; not into the cwd here


def _accuracy(output: str) -> float:
    match = re.search(r"test accuracy ([0-9.]+) \(world size (\d+)\)", output)
    assert match, output
    return float(match.group(1))


def test_trains_alone_to_a_useful_accuracy() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "5", *NO_ONNX],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert _accuracy(out.stdout) > 0.9


@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_trains_as_two_ddp_processes() -> None:
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # torchrun picks a free port itself: no race with other tests
        "--nproc_per_node=2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [*torchrun, str(SCRIPT), "--epochs", "5", *NO_ONNX],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert "(world size 2)" in out.stdout
    assert _accuracy(out.stdout) > 0.85


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        **kwargs,
    )


def _complete_steps(directory: Path) -> list[int]:
    from gpulease.storage import LocalStore

    return LocalStore(directory).list_complete()


@pytest.mark.parametrize("how", ["kill -9", "preemption notice"])
def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path: Path, how: str) -> None:
    """N epochs straight vs the same N epochs interrupted mid-run and resumed: equal weights."""
    import torch

    common = ["--epochs", "4", "--save-every", "7", *NO_ONNX]
    straight = _run([*common, "--save-weights", str(tmp_path / "straight.pt")])
    assert straight.returncode == 0, straight.stderr

    ckpt = tmp_path / "ckpt"
    slow = [*common, "--checkpoint-dir", str(ckpt), "--step-delay", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), *slow], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    wait_until(lambda: len(_complete_steps(ckpt)) >= 2, timeout=120, what="two checkpoints")
    proc.send_signal(signal.SIGKILL if how == "kill -9" else signal.SIGTERM)
    code = proc.wait(60)
    if how == "kill -9":
        assert code == -signal.SIGKILL
    else:
        assert code == 75, proc.stderr.read() if proc.stderr else ""  # "preempted, resume me"
    interrupted_at = _complete_steps(ckpt)[-1]
    total_steps = 4 * 22  # 1347 training samples in batches of 64
    assert 7 <= interrupted_at < total_steps

    resumed = _run(
        [*common, "--checkpoint-dir", str(ckpt), "--save-weights", str(tmp_path / "r.pt")]
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {interrupted_at}" in resumed.stdout

    expected = torch.load(tmp_path / "straight.pt", weights_only=True)
    actual = torch.load(tmp_path / "r.pt", weights_only=True)
    assert expected.keys() == actual.keys()
    for name, tensor in expected.items():
        assert torch.equal(tensor, actual[name]), name
    assert _accuracy(resumed.stdout) == _accuracy(straight.stdout)
