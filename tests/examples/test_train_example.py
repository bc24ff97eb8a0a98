"""The training example trains for real: alone, and as two DDP processes under torchrun (gloo on
loopback)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train" / "train_digits.py"


def _accuracy(output: str) -> float:
    match = re.search(r"test accuracy ([0-9.]+) \(world size (\d+)\)", output)
    assert match, output
    return float(match.group(1))


def test_trains_alone_to_a_useful_accuracy() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "5"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert _accuracy(out.stdout) > 0.9


@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_trains_as_two_ddp_processes() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [*torchrun, str(SCRIPT), "--epochs", "5"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
    )
    assert "(world size 2)" in out.stdout
    assert _accuracy(out.stdout) > 0.85
