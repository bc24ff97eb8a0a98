"""``gpulease bench`` and ``gpulease plan --observed`` as a user runs them: the real entry point
in subprocesses. ``plan --observed`` over a hand-written ``<home>/bench/observed.json`` changes
the hours of the observed offer and says so in the notes (the datasheet, and a note, without
the file); a bad ``--only`` exits 2 before anything runs; and, once the checks are installed, a
2-node local cluster benched through a real server — both nodes' reports stored and judged
against each other, listed by ``--history``, summarised into observed.json."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from gpulease.bench.observed import OBSERVED_FILE
from tests.cli.conftest import Cli, stop_server_and_nodes
from tests.server.conftest import ServerProcess, task_body

TASK = "examples/finetune-7b.yaml"
VAST = ("vast", "8x-H100_SXM-32-65536")  # the cheapest H100 plan of TASK on the bundled catalog


def _plans(cli: Cli, *extra: str) -> dict[str, Any]:
    out = cli("plan", TASK, "--json", "--top", "40", *extra, check=True)
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def _hours(data: dict[str, Any], provider: str, instance_type: str) -> float:
    wanted = (provider, instance_type)
    found = [p for p in data["plans"] if (p["provider"], p["instance_type"]) == wanted]
    assert found, [(p["provider"], p["instance_type"]) for p in data["plans"]]
    assert {p["part"] for p in found} == {
        "H100-SXM"
    }  # the datasheet part's name, not a derived one
    return float(found[0]["est_hours"]["expected"])


def test_plan_observed_uses_the_observed_throughput_with_enough_runs(cli: Cli) -> None:
    datasheet = _plans(cli, "--observed")
    assert any("observed: no " in n and "datasheet peaks" in n for n in datasheet["notes"])
    (cli.home / OBSERVED_FILE).parent.mkdir(parents=True)
    offers = [{"provider": VAST[0], "instance_type": VAST[1], "accelerator": "H100",
               "matmul": {"bf16": {"tflops": 494.7, "samples": 5}}},
              {"provider": "fluidstack", "instance_type": "H100_NVLINK_80GB::8",
               "accelerator": "H100",
               "matmul": {"bf16": {"tflops": 100.0, "samples": 2}}}]  # fmt: skip
    (cli.home / OBSERVED_FILE).write_text(json.dumps({"schema": 1, "offers": offers}))
    observed = _plans(cli, "--observed")
    assert "H100-SXM@" not in json.dumps(observed)  # the derived part never shows
    before, after = _hours(datasheet, *VAST), _hours(observed, *VAST)
    assert 1.8 < after / before < 2.2, (before, after)  # half the datasheet's bf16 peak
    fluid = ("fluidstack", "H100_NVLINK_80GB::8")
    assert _hours(observed, *fluid) == _hours(datasheet, *fluid)  # 2 runs: the datasheet
    assert "observed: H100 bf16 495 TFLOP/s over 5 runs, datasheet 989 (vast " \
        "8x-H100_SXM-32-65536)" in observed["notes"]  # fmt: skip
    assert any("fluidstack H100_NVLINK_80GB::8 has 2 bf16 run(s), fewer than 3" in n
               for n in observed["notes"])  # fmt: skip
    (cli.home / OBSERVED_FILE).write_text("{not json")
    bad = cli("plan", TASK, "--observed")
    assert bad.returncode == 2 and "--observed:" in bad.stderr and "Traceback" not in bad.stderr


def test_a_bad_family_exits_2_naming_only(cli: Cli) -> None:
    bad = cli("bench", "--only", "matmul,gpu-burn")
    assert bad.returncode == 2, bad.stderr
    assert "--only: unknown check families gpu-burn" in bad.stderr and "Traceback" not in bad.stderr
    for argv, says in (
        (("bench", "pair", "--workdir", "/tmp"), "--workdir: only in process"),
        (("bench", "--instance-type", "p5.48xlarge"), "--instance-type: only with"),
    ):
        refused = cli(*argv)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr


FAST = "disk,matmul,allreduce,net"
HAS_CHECKS = importlib.util.find_spec("gpulease.bench.runner") is not None


@pytest.mark.slow
@pytest.mark.xdist_group("torch-ddp")  # gloo across two node processes: one torch run at a time
@pytest.mark.skipif(not HAS_CHECKS, reason="the checks (gpulease.bench.runner) are not installed")
def test_bench_a_two_node_cluster_through_the_server(cli: Cli, tmp_path: Path) -> None:
    cli.home.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(cli.home)
    try:
        api = server.start().api
        api.launch(task_body("sleep 120", name="pair", nodes=2))
        server.wait_status("pair", {"running"}, timeout=60)
        out = cli("bench", "pair", "--quick", "--only", FAST, "--json", timeout=300)
        assert out.returncode in (0, 1), out.stderr
        answer = json.loads(out.stdout)
        assert [n["rank"] for n in answer["nodes"]] == [0, 1], answer
        assert (out.returncode == 1) == (answer["verdict"] == "fail")
        for node in answer["nodes"]:
            checks = {c["name"]: c for c in node["report"]["checks"]}
            assert checks["disk.seq_read"]["figure"] > 0
            assert checks["disk.seq_read"]["reference_source"] == "peers"
            assert checks["matmul.fp32"]["figure"] > 0
            for across in ("allreduce.cluster", "net.latency"):  # the rendezvous on node 0
                assert checks[across]["figure"] is not None, checks[across]
        missing = cli("bench", "nope")
        assert missing.returncode == 2 and "no cluster named 'nope'" in missing.stderr
        history = json.loads(cli("bench", "--history", "--json", check=True).stdout)["runs"]
        assert sorted(r["rank"] for r in history) == [0, 1]
        assert {r["cluster"] for r in history} == {"pair"} and all(r["quick"] for r in history)
        table = cli("bench", "--history", check=True).stdout
        assert "pair" in table and "quick" in table
        summary = json.loads((cli.home / OBSERVED_FILE).read_text())
        [offer] = summary["offers"]
        assert offer["provider"] == "local" and offer["matmul"]["fp32"]["samples"] == 2
    finally:
        server.stop()
        stop_server_and_nodes(cli)


@pytest.mark.skipif(not HAS_CHECKS, reason="the checks (gpulease.bench.runner) are not installed")
def test_bench_in_process_prints_the_report(cli: Cli, tmp_path: Path) -> None:
    out = cli("bench", "--quick", "--only", "disk", "--workdir", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr  # nothing to fail against on one CPU node
    report = json.loads(out.stdout)
    assert {c["name"] for c in report["checks"]} >= {"disk.seq_read", "disk.seq_write"}
    assert report["quick"] is True and report["verdict"] in {"info", "pass", "warn"}
    assert not list(tmp_path.iterdir())  # the disk checks cleaned up after themselves
    table = cli("bench", "--quick", "--only", "disk", "--workdir", str(tmp_path), check=True)
    assert "disk.seq_read" in table.stdout and "MB/s" in table.stdout
