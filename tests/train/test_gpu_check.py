"""benchmarks/gpu_check.sh without a GPU: refuses with a clear message, or with ``--allow-cpu``
runs the tiny CPU smoke version (< 30 s) and writes the JSON and Markdown summaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="with a GPU the check is the benchmark itself (minutes)"
)
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
RUN = ROOT / "benchmarks" / "gpu" / "run.py"


def test_cpu_smoke_run_writes_the_results(tmp_path: Path) -> None:
    out = tmp_path / "results" / "check.json"
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--allow-cpu", "--out", str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert time.monotonic() - start < 30
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no GPU on this machine" in proc.stdout
    assert "| bf16 | bf16 |" in proc.stdout  # the table
    results = json.loads(out.read_text())
    assert results["complete"] is True and results["cpu_smoke"] is True
    assert results["gpu"] is None and results["accelerator"] is None
    assert results["mfu_bf16"] is None  # no peak on CPU
    modes = results["block"]["modes"]
    assert set(modes) == {"fp32", "tf32", "bf16", "fp16"}
    assert modes["fp32"]["speedup_vs_fp32"] == 1.0
    assert modes["fp16"]["effective"] == "fp32" and modes["fp16"]["fallback"]
    assert modes["bf16"]["effective"] == "bf16" and modes["bf16"]["achieved_tflops"] > 0
    d, f, seq = (results["block"][k] for k in ("d_model", "ffn", "seq"))
    assert results["block"]["flops_per_token"] == 3 * (8 * d * d + 4 * d * f + 4 * seq * d)
    assert results["matmul"]["fp32_tflops"] > 0 and results["matmul"]["tf32_effective"] == "fp32"
    ckpt = results["checkpoint"]
    assert ckpt["state_bytes"] == 8 * 2**20
    assert ckpt["checkpoint_bytes"] > ckpt["state_bytes"]
    assert ckpt["manager_gb_s"] > 0 and ckpt["raw_gb_s"] > 0
    stall = results["stall"]
    assert stall["checkpoint_bytes"] > 0 and stall["blocking_ms"] > 0 and stall["step_ms"] > 0
    assert stall["stall_share_of_interval"] <= stall["stall_share_of_step"]
    assert not list(out.parent.glob("gpu-check-*"))  # scratch removed
    summary = out.with_suffix(".md").read_text()
    assert "no GPU (CPU smoke run)" in summary and "CheckpointManager" in summary
    assert "stall per save" in summary


def test_without_a_gpu_it_refuses_unless_allowed(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    proc = subprocess.run(
        [sys.executable, str(RUN), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "no CUDA GPU visible" in proc.stderr and "--allow-cpu" in proc.stderr
    assert not out.exists()
