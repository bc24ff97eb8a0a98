"""examples/serve-digits end to end through a real server, the real CLI and real replicas.

On the local provider with fake T4s: ``serve up`` of a service derived from the example's
service.yaml (its app.py, a model trained and exported in process, short autoscale windows and
``PREDICT_DELAY_S`` so the load crosses the threshold at a rate this machine drives), the load
generator ramping the rate up and down (replicas 1 → ≥ 2 → 1 in ``serve status --json``'s
decisions, every request 2xx), a ``serve update`` under steady load with none failed, and
``serve down`` leaving no cluster and no node process. On sim (scaled time, a spot trace with
one outage, a 3 s notice): one on-demand and one spot replica under steady load; on the spot
one's preemption notice it is drained and replaced on-demand (spot held) while the other carries
the load, and no request fails.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from benchmarks.serve.loadgen import LoadResult, Schedule, Segment, run_load

from gpulease.providers.local import LocalProvider
from tests.cli.conftest import Cli, stop_server_and_sim_nodes
from tests.examples.test_serve_digits import EXAMPLE, REQUEST, _script
from tests.providers.procs import node_pids
from tests.server import conftest as server_fixtures
from tests.server.conftest import ServerProcess
from tests.waiting import wait_until

home = server_fixtures.home  # a private GPULEASE_HOME, and a real server process on it
server = server_fixtures.server
DELAY_S = 0.05  # per prediction: 60 req/s keep ~3 in flight (load 1.5 of one replica)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workdir like examples/serve-digits: its app.py and a model trained and exported here."""
    import torch

    digits = _script()
    torch.manual_seed(0)
    train, _test = digits.data(0)
    net = digits.model()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = train.tensors
    for _ in range(150):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    workdir = tmp_path_factory.mktemp("serve-digits")
    shutil.copy(EXAMPLE / "app.py", workdir / "app.py")
    digits.export(net, workdir / "model.onnx")
    return workdir


def service_file(workdir: Path, path: Path, *, version: str = "1", **service: Any) -> Path:
    """examples/serve-digits/service.yaml with this workdir and windows of a few seconds."""
    data = yaml.safe_load((EXAMPLE / "service.yaml").read_text())
    data["workdir"] = str(workdir)
    data["envs"] = {"PREDICT_DELAY_S": str(DELAY_S), "VERSION": version}
    data["service"]["readiness_probe"]["initial_delay"] = "30s"
    data["service"]["autoscale"] = {
        "metric": "load", "target_per_replica": 2, "cooldown": "2s",
        "up": {"above": 0.8, "add": 1, "for": "2s"},
        "down": {"below": 0.3, "remove": 1, "for": "2s"},
    }  # fmt: skip
    data["service"].update(service)  # a spot: mix asks for spot replicas by itself
    path.write_text(yaml.safe_dump(data))
    return path


class Load:
    """``run_load`` on a thread: one schedule, or (``steady``) 2 s runs at ``rate`` one after
    another until the block ends. ``results``: every run's."""

    def __init__(
        self, url: str, schedule: Schedule, *, steady: bool = False, body: bytes | None = REQUEST
    ) -> None:
        self.url, self.schedule, self.steady, self.body = url, schedule, steady, body
        self.results: list[LoadResult] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.results.append(run_load(self.url, self.schedule, body=self.body, timeout_s=20.0))
            if not self.steady or self._stop.is_set():
                return

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.schedule.duration_s + 60)

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the run to end; True while it still runs."""
        self._thread.join(seconds)
        return self._thread.is_alive()

    def failures(self) -> list[Any]:
        assert self.results and sum(r.requests for r in self.results) > 0
        return [r for result in self.results for r in result.records if not r.ok]

    def table(self) -> str:
        return "\n".join(result.table() for result in self.results if result.failed)


def status_json(cli: Cli, name: str = "digits") -> dict[str, Any]:
    view: dict[str, Any] = json.loads(cli("serve", "status", name, "--json", check=True).stdout)
    return view


def settled(server: ServerProcess, version: int, count: int) -> Callable[[], Any]:
    def check() -> dict[str, Any] | None:
        view = server.api.serve_status("digits")
        live = [r for r in view["replicas"] if r["state"] == "ready" and r["version"] == version]
        ok = view["status"] == "ready" and view["version"] == version
        return view if ok and len(live) == len(view["replicas"]) == count else None

    return check


def down_leaves_nothing(server: ServerProcess, cli: Cli, nodes: Callable[[], list[int]]) -> None:
    cli("serve", "down", "digits", check=True)
    wait_until(lambda: server.api.serve_status("digits")["status"] == "down" or None, 60,
               "the service to be down")  # fmt: skip
    assert all(c["status"] == "terminated" for c in server.api.clusters())
    wait_until(lambda: nodes() == [] or None, 20, "no node process left")


@pytest.mark.slow
def test_digits_scale_up_down_and_update_under_load_on_local(
    server: ServerProcess, home: Path, exported: Path, tmp_path: Path
) -> None:
    (home / "config.yaml").write_text("providers:\n  local: {gpus: 4, accelerator: T4}\n")
    server.start()
    cli = Cli(home)
    up = cli("serve", "up", str(service_file(exported, tmp_path / "v1.yaml")), "-p", "local")
    assert up.returncode == 0, up.stderr
    view = wait_until(settled(server, 1, 1), 60, "the first digits replica")
    url = view["endpoint"] + "/predict"

    ramp = Schedule((Segment(5, 60, 3), Segment(60, 60, 9), Segment(60, 4, 2),
                     Segment(4, 4, 14)))  # fmt: skip
    most = 1
    with Load(url, ramp) as load:
        while load.wait(0.3):
            most = max(most, server.api.serve_status("digits")["desired_replicas"])
    assert load.failures() == [], load.table()
    assert most >= 2
    wait_until(settled(server, 1, 1), 30, "back to one replica")
    view = status_json(cli)
    targets = [d["to"] for d in view["decisions"]]
    assert targets[0] == 1 and max(targets) >= 2 and targets[-1] == 1, view["decisions"]
    assert all(d["reason"] for d in view["decisions"])

    with Load(url, Schedule.constant(20, 2), steady=True) as steady:
        v2 = service_file(exported, tmp_path / "v2.yaml", version="2")
        cli("serve", "update", "digits", str(v2), "-p", "local", check=True)
        wait_until(settled(server, 2, 1), 60, "version 2 to replace version 1")
    assert steady.failures() == [], steady.table()

    down_leaves_nothing(server, cli, server.node_processes)


@pytest.fixture
def sim_home(server: ServerProcess, home: Path, tmp_path: Path) -> Iterator[Path]:
    """A home whose sim cloud runs 20× real time (a 60 s tick is 3 s) and whose spot trace has
    one one-tick outage after 8 ticks (24 s): a spot replica launched before is taken back, its
    notice 60 s (3 s real) before — many requests long."""
    trace = tmp_path / "trace.json"
    data = [1] * 8 + [0] + [1] * 600
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": data}))
    (home / "config.yaml").write_text(
        "providers:\n  sim:\n    time_scale: 20\n    provision_seconds: [20, 40]\n"
        f"    notice_seconds: 60\n    spot_trace: {trace}\n"
    )
    yield home
    stop_server_and_sim_nodes(Cli(home))


def sim_nodes(home: Path) -> list[int]:
    """The sim's node processes still alive (its nodes are local ones under ``sim/local``)."""
    nodes = LocalProvider(home / "sim" / "local", kill_grace_s=0.5)
    ids = [p.stem for p in (nodes.root / "instances").glob("*.json")]
    return node_pids(nodes, ids) if ids else []


def _replicas(server: ServerProcess) -> list[dict[str, Any]]:
    replicas: list[dict[str, Any]] = server.api.serve_status("digits")["replicas"]
    return replicas


@pytest.mark.slow
def test_a_preempted_spot_replica_is_replaced_under_load_on_sim(
    server: ServerProcess, sim_home: Path, exported: Path, tmp_path: Path
) -> None:
    server.start()
    cli = Cli(sim_home)
    spec = service_file(exported, tmp_path / "sim.yaml", replicas={"min": 2, "max": 2},
                        spot={"on_demand_base": 1, "spot_share": 1.0})  # fmt: skip
    cli("serve", "up", str(spec), "-p", "sim", check=True)
    view = wait_until(settled(server, 1, 2), 60, "an on-demand and a spot replica")
    spots = [r["cluster"] for r in view["replicas"] if r["spot"]]
    assert len(spots) == 1, json.dumps(view, indent=1)
    (spot,) = spots
    url = view["endpoint"] + "/predict"

    def replaced() -> list[dict[str, Any]] | None:
        now = _replicas(server)
        ready = [r for r in now if r["state"] == "ready"]
        return now if spot not in {r["cluster"] for r in now} and len(ready) == 2 else None

    with (
        Load(url, Schedule.constant(20, 2), steady=True) as predict,
        Load(
            view["endpoint"] + "/health", Schedule.constant(20, 2), steady=True, body=None
        ) as health,
    ):
        after = wait_until(replaced, 60, f"the spot replica {spot} to be preempted and replaced")
    assert health.failures() == [], health.table()
    lost = predict.failures()
    sent = sum(result.requests for result in predict.results)
    print(f"POST /predict across the preemption: {sent} sent, failed: {lost}")  # -s shows it
    assert predict.results and lost == [], predict.table()  # drained on its notice: none lost
    assert len(after) == 2 and spot not in {r["cluster"] for r in after}
    assert [r["spot"] for r in after] == [False, False]  # replaced on-demand: spot is held
    records = list(json.loads((sim_home / "sim" / "sim.json").read_text()).values())
    spot_nodes = [r for r in records if r["spot"]]  # the sim's own record: its one spot node
    assert len(spot_nodes) == 1 and spot_nodes[0]["notice_sent"], records  # got the notice
    assert [d["to"] for d in status_json(cli)["decisions"]] == [2]  # a replacement, no scaling
    down_leaves_nothing(server, cli, lambda: sim_nodes(sim_home))
