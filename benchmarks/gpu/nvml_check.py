"""The agent's NVML sampler against a real GPU: start a real agent (``python -m gpulease.agent
serve`` on 127.0.0.1, sampling every 0.5 s), read ``GET /v1/metrics`` and check that every GPU
has a utilisation, memory used/total and power (non-null: the real driver answers the calls the
fake ``libnvidia-ml.so.1`` of tests/agent stands in for).

    python benchmarks/gpu/nvml_check.py [--allow-none] [--out PATH.json]

Exit 0 when every GPU reads; 1 when a figure is null or the agent found no GPU (``--allow-none``:
0 then, for a machine without a GPU — the CPU smoke run of gpu_check.sh); the agent's first
sample goes to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REQUIRED = ("utilization_pct", "memory_used_mb", "memory_total_mb", "power_w")


def _agent_metrics(root: Path, seconds: float = 30.0) -> dict[str, Any]:
    from gpulease.agent.client import AgentClient

    token = secrets.token_urlsafe(24)
    (root / "token").write_text(token)
    (root / "token").chmod(0o600)
    log = (root / "agent.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulease.agent", "serve", "--host", "127.0.0.1", "--port", "0",
         "--port-file", str(root / "port"), "--token-file", str(root / "token"),
         "--node-dir", str(root / "node"), "--metrics-interval", "0.5"],
        stdout=log, stderr=log,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            port = (root / "port").read_text().strip() if (root / "port").exists() else ""
            if port:
                client = AgentClient(f"http://127.0.0.1:{port}", token)
                try:
                    report = client.metrics()
                except Exception:
                    report = {"samples": []}
                if report["samples"]:
                    return dict(report)
            time.sleep(0.2)
        raise SystemExit(f"nvml check: the agent gave no sample within {seconds:.0f} s")
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nvml_check.py")
    parser.add_argument("--allow-none", action="store_true", help="no GPU is not a failure")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpulease-nvml-") as tmp:
        report = _agent_metrics(Path(tmp))
    sample = report["samples"][-1]
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if report["gpu_source"] != "nvml" or not sample["gpus"]:
        why = report.get("gpu_error") or "no devices"
        print(f"nvml check: the agent reads no GPU through NVML ({why})")
        return 0 if args.allow_none else 1
    bad = [f"GPU {g['index']}: {k} is null" for g in sample["gpus"] for k in REQUIRED
           if g.get(k) is None]  # fmt: skip
    for gpu in sample["gpus"]:
        print(f"nvml check: GPU {gpu['index']} {gpu['name']}: {gpu['utilization_pct']} %, "
              f"{gpu['memory_used_mb']}/{gpu['memory_total_mb']} MB, {gpu['power_w']} W "
              f"(limit {gpu['power_limit_w']} W), {gpu['temperature_c']} °C, "
              f"SM {gpu['sm_clock_mhz']} MHz, throttle {gpu['throttle_reasons']}")  # fmt: skip
    for line in bad:
        print(f"nvml check: FAILED: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
