"""``gpulease profile NAME --rank R`` as a user runs it: a real server process and local cluster
run a 2-node task whose training loop is profiled on each node (``gpulease.train.profile``,
torch on CPU); the real CLI fetches the summary and the trace through the server and the node's
agent, prints the split and the top operators, saves both; rank 1 is found on node 1; a rank
without a profile and an unknown cluster exit 2 with a message; the SDK's ``Client.profile``
reads the same."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server import conftest as server_fixtures
from tests.server.conftest import ROOT, ServerProcess, task_body

home = server_fixtures.home  # the fixtures: a private home, a real server process on it
server = server_fixtures.server

pytestmark = pytest.mark.slow

JOB = """\
import torch
from gpulease.train import profile

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with profile(steps=3) as prof:
    for _ in range(6):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()
print("profiled", prof.summary["steps"], "steps into", prof.out)
"""


def _cli(at: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPULEASE_HOME": str(at), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "gpulease", "profile", *args]
    return subprocess.run(
        argv, cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=120
    )


def test_profile_fetches_the_summary_and_trace_of_a_rank(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))  # the nodes import this tree
    workdir = tmp_path / "job"
    workdir.mkdir()
    (workdir / "job.py").write_text(JOB)
    api = server.start().api
    api.launch(task_body("python job.py", name="prof", nodes=2, workdir=str(workdir)))
    done = server.wait_status("prof", {"succeeded", "failed"}, timeout=90)
    logs = server.all_logs("prof")
    assert done["status"] == "succeeded", (done["reason"], logs)
    assert "profiled 3 steps into" in logs and "profile/rank-0" in logs
    assert "profile/rank-1" in server.all_logs("prof", rank=1)

    out = tmp_path / "fetched"
    shown = _cli(server.home, "prof", "--rank", "0", "--out", str(out))
    assert shown.returncode == 0, shown.stderr
    assert (
        "cluster prof rank 0 (node 0" in shown.stdout and "3 steps profiled on cpu" in shown.stdout
    )
    for part in ("compute", "communication", "data wait", "other", "aten::addmm"):
        assert part in shown.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["rank"] == 0 and summary["task_id"]
    assert sum(p["share"] for p in summary["split"].values()) == pytest.approx(1.0, abs=0.002)
    trace = json.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"])

    as_json = _cli(server.home, "prof", "--json", "--out", str(tmp_path / "j"))
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert (data["rank"], data["node_rank"], data["summary"]) == (0, 0, summary)
    assert data["saved"]["trace"] == str(tmp_path / "j" / "trace.json.gz")
    assert api.profile("prof", rank=0)["summary"] == summary
    assert gzip.decompress(api.profile_trace("prof", rank=0)) == gzip.decompress(
        (out / "trace.json.gz").read_bytes()
    )

    second = api.profile("prof", rank=1)  # on the other node: found by asking each agent
    assert (second["node_rank"], second["summary"]["rank"]) == (1, 1)
    missing = _cli(server.home, "prof", "--rank", "2", "--out", str(tmp_path / "none"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "no profile of rank 2 yet (ranks with a profile: 0, 1)" in missing.stderr
    assert not (tmp_path / "none").exists()
    unknown = _cli(server.home, "nosuch")
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "nosuch" in unknown.stderr
