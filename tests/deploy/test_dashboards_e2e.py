"""The dashboards and the Prometheus path end to end, on real components only: the real server
process (relay every second), a managed job on a 2-node local cluster with fake T4 GPUs scripted
at 30 % (node 0) and 70 % (node 1) running a tiny CPU training loop under ``gpulease.train``
(StepTimer, timed_batches, CheckpointManager), and Debian's Prometheus scraping the server with
the config ``gpulease metrics prometheus-config`` prints and evaluating
``deploy/prometheus/alerts.yml``. PromQL returns the scripted utilisation per node and the
cluster's and the job's $/h as the server quotes them; EVERY query of every committed dashboard
(``deploy/grafana/*.json``, variables set to this cluster and job) returns data, and the
dashboards' variable queries list them; every alert rule evaluates without an error on the real
series, and the idle alert's join picks this cluster. One module fixture: one cluster, one
Prometheus, for every test here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpulease.providers.base import InstanceState
from tests.components import require
from tests.deploy.dashboards import Target, targets, variable_queries
from tests.prometheus import query as prometheus_query
from tests.prometheus import start_prometheus
from tests.prometheus import stop as stop_prometheus
from tests.server.conftest import ROOT, ServerProcess
from tests.waiting import wait_until

# one module fixture for every test here: one xdist worker (one cluster, not two), and the
# worker that runs the other multi-process torch tests, one at a time
pytestmark = pytest.mark.xdist_group("torch-ddp")

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
LOAD = {0: 30.0, 1: 70.0}  # fake GPU number → utilisation; node rank r holds GPU r
CONFIG = """\
providers:
  local:
    gpus: 2
    accelerator: T4
    gpu_load: [30, 70]
    gpu_memory: [25, 50]
    price_per_gpu_hour: 0.35
server:
  telemetry:
    interval_s: 1
"""
TRAIN = """\
import time

import torch

from gpulease.train import CheckpointManager
from gpulease.train.stats import timed_batches, train_stats
from gpulease.train.timer import StepTimer

train_stats().interval_s = 1.0  # report every second (the default is 5 s)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ckpt = CheckpointManager(keep=2, async_save=False)  # $GPULEASE_CHECKPOINT_DIR: the agent syncs it
timer = StepTimer(flops_per_sample=6 * 9, warmup=1, window=20)


def batches():
    while True:
        time.sleep(0.01)  # the input pipeline's share of each step
        x = torch.randn(32, 8)
        yield x, x.sum(dim=1, keepdim=True)


for step, (x, y) in enumerate(timed_batches(batches()), start=1):
    with timer.step(samples=32, tokens=32 * 8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if step % 20 == 0:
        ckpt.save(step, model=model, opt=opt)
    time.sleep(0.01)
"""


@dataclass
class Watched:
    """The running system: the server, its job, the attempt cluster and Prometheus's URL."""

    server: ServerProcess
    job_id: str
    cluster: str
    prometheus: str

    def query(self, promql: str) -> list[dict[str, Any]]:
        return prometheus_query(self.prometheus, promql)


def _prometheus(home: Path, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "GPULEASE_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "gpulease", "metrics", "prometheus-config",
                          "--interval", "1s"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    config = work / "prometheus.yml"  # the printed config, plus the alert rules every second
    rules = f"global:\n  evaluation_interval: 1s\nrule_files:\n  - {json.dumps(str(ALERTS))}\n"
    config.write_text(out.stdout + rules)
    return start_prometheus(config, work)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    require("prometheus")
    work = tmp_path_factory.mktemp("dashboards")
    home = work / "home"
    home.mkdir()
    (home / "config.yaml").write_text(CONFIG)
    code = work / "code"
    code.mkdir()
    (code / "train_tiny.py").write_text(TRAIN)
    server = ServerProcess(home)
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        server.start()
        task = {"name": "tiny", "num_nodes": 2, "run": "python train_tiny.py",
                "resources": {"providers": ["local"], "accelerators": "T4:1"},
                "checkpoint": {"sync_interval": "2s"}}  # fmt: skip
        job = server.api.job_launch(task, workdir=str(code))
        job_id = int(job["id"])
        view = wait_until(
            lambda: (v := server.api.job(job_id))["status"] == "running" and v, 120, "the job"
        )
        prometheus, url = _prometheus(home, work)
        watched = Watched(server, str(job_id), view["cluster"], url)
        yield watched
    finally:
        if prometheus is not None:
            stop_prometheus(prometheus)
        server.stop()
        provider = server.provider()
        live = [
            i.id for i in provider.list_instances({}) if i.state is not InstanceState.TERMINATED
        ]
        if live:
            provider.terminate(live)
            wait_until(lambda: not server.node_processes() or None, 30, "the nodes to die")
            provider.list_instances({})


def _wait_for(watched: Watched, promql: str, count: int = 1, timeout: float = 60) -> Any:
    return wait_until(lambda: len(r := watched.query(promql)) >= count and r, timeout, promql)


@pytest.mark.slow
def test_promql_returns_the_scripted_utilisation_per_node_and_the_price(watched: Watched) -> None:
    util = f'gpulease_gpu_utilization_percent{{cluster="{watched.cluster}"}}'
    found = _wait_for(watched, util, count=2)
    per_node = {s["metric"]["node_rank"]: float(s["value"][1]) for s in found}
    assert per_node == {"0": LOAD[0], "1": LOAD[1]}, found
    for series in found:
        labels = series["metric"]
        assert labels["job_id"] == watched.job_id and labels["provider"] == "local", labels
        assert labels["instance_type"] and labels["spot"] == "false", labels

    view = watched.server.api.cluster(watched.cluster)
    price = watched.query(f'gpulease_cluster_price_usd_per_hour{{cluster="{watched.cluster}"}}')
    assert len(price) == 1, price
    assert float(price[0]["value"][1]) == pytest.approx(view["price_per_hour"]) == 2 * 0.35
    job_price = watched.query(f'gpulease_job_price_usd_per_hour{{job_id="{watched.job_id}"}}')
    assert len(job_price) == 1 and job_price[0]["metric"]["cluster"] == watched.cluster
    assert float(job_price[0]["value"][1]) == float(price[0]["value"][1])


@pytest.mark.slow
def test_every_dashboard_query_returns_data(watched: Watched) -> None:
    # relayed series come after the first samples and relays; increase() and rate() need two
    # scrapes in their window: give every query a minute
    def missing() -> list[Target]:
        return [t for t in targets() if not watched.query(_promql(t, watched))]

    try:
        wait_until(lambda: not missing() or None, 60, "every dashboard query to return data")
    except Exception:  # the message names each query that stayed empty
        empty = missing()
        lines = [f"{t.board} / {t.panel} / {t.ref_id}: {_promql(t, watched)}" for t in empty]
        pytest.fail(f"{len(empty)} of {len(targets())} dashboard queries return no data:\n"
                    + "\n".join(lines), pytrace=False)  # fmt: skip
    assert len(targets()) >= 40


def _promql(target: Target, watched: Watched) -> str:
    return target.promql(cluster=watched.cluster, job_id=watched.job_id, window="30s")


@pytest.mark.slow
def test_the_dashboard_variables_list_the_cluster_and_the_job(watched: Watched) -> None:
    expected = {"cluster": watched.cluster, "job_id": watched.job_id}
    for board, name, query in variable_queries():
        metric, label = query.removeprefix("label_values(").removesuffix(")").split(", ")
        assert label == name, (board, query)

        def values(label: str = label, metric: str = metric) -> list[str]:
            answer = httpx.get(f"{watched.prometheus}/api/v1/label/{label}/values",
                               params={"match[]": metric}, timeout=10).json()  # fmt: skip
            assert answer["status"] == "success", (label, answer)
            found: list[str] = answer["data"]
            return found

        # the series come after a relay and a scrape: wait for them, as a user's Grafana would
        wait_until(lambda n=name, v=values: expected[n] in v(), 60, f"{board}: {query} values")


@pytest.mark.slow
def test_the_jobs_train_figures_and_the_peers_round_trip(watched: Watched) -> None:
    job = f'job_id="{watched.job_id}"'

    def per_node(metric: str) -> dict[str, float]:
        found = _wait_for(watched, f"{metric}{{{job}}}", count=2)
        return {s["metric"]["node_rank"]: float(s["value"][1]) for s in found}

    assert all(v >= 20 for v in per_node("gpulease_train_checkpoint_step").values())
    first = per_node("gpulease_train_step")
    assert all(v > 0 for v in per_node("gpulease_train_samples_per_second").values())
    tokens, samples = (
        per_node("gpulease_train_tokens_per_second"),
        per_node("gpulease_train_samples_per_second"),
    )
    assert all(tokens[r] == pytest.approx(8 * samples[r], rel=0.3) for r in tokens), tokens
    assert all(0 < v < 1 for v in per_node("gpulease_train_mfu_ratio").values())
    # each batch sleeps 10 ms before it is handed over: a real share of the step, not all of it
    assert all(0.05 < v < 0.95 for v in per_node("gpulease_train_data_wait_ratio").values())
    wait_until(lambda: all(v > first[r] for r, v in per_node("gpulease_train_step").items()),
               30, "the steps to advance")  # fmt: skip

    rtt = _wait_for(watched, f'gpulease_node_peer_rtt_seconds{{cluster="{watched.cluster}"}}', 2)
    pairs = {(s["metric"]["node_rank"], s["metric"]["peer_rank"]) for s in rtt}
    assert pairs == {("0", "1"), ("1", "0")}, rtt
    assert all(0 < float(s["value"][1]) < 1 for s in rtt), rtt


@pytest.mark.slow
def test_the_alert_rules_evaluate_on_the_real_series(watched: Watched) -> None:
    def rules() -> list[dict[str, Any]]:
        answer = httpx.get(f"{watched.prometheus}/api/v1/rules", timeout=10).json()
        return [r for g in answer["data"]["groups"] for r in g["rules"]]

    names = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}

    def evaluated_once() -> list[dict[str, Any]] | None:
        found = rules()
        return found if found and all(r["health"] != "unknown" for r in found) else None

    evaluated = wait_until(evaluated_once, 30, "every rule to be evaluated")
    assert {r["name"] for r in evaluated} == names
    assert [(r["name"], r["lastError"]) for r in evaluated if r["health"] != "ok"] == []
    # the idle rule's join on real labels: with its threshold moved (busy 50 %; the fake GPUs
    # are billed at $0.35/h each) it selects exactly this cluster, with the job's id
    idle = next(r for r in evaluated if r["name"] == "GpuleaseGpusIdleWhileBilled")["query"]
    moved = idle.replace("< 10", "< 60")
    assert moved != idle
    found = watched.query(moved)
    assert [(s["metric"]["cluster"], s["metric"]["job_id"]) for s in found] == [
        (watched.cluster, watched.job_id)
    ], found
    assert float(found[0]["value"][1]) == pytest.approx((LOAD[0] + LOAD[1]) / 2)
    # the checkpoint rule's join: with the factor at 0 it selects this job
    synced = next(r for r in evaluated if r["name"] == "GpuleaseCheckpointNotSynced")["query"]
    moved = synced.replace("> on (job_id) 3 *", ">= on (job_id) 0 *")
    assert moved != synced
    assert [s["metric"]["job_id"] for s in watched.query(moved)] == [watched.job_id]
