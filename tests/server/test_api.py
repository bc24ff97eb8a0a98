"""The REST API's contract, in process (FastAPI's test client) over a real SQLite DB, the real
planner and a provider double named ``local``: auth, error codes, the launch document, status
changes a user may ask for, and what a view never shows."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.catalog import Catalog
from gpulease.clock import VirtualClock
from gpulease.controller import LaunchDocument
from gpulease.providers.base import ProviderOffers, SupportsOffers
from gpulease.providers.local import LocalProvider
from gpulease.server.api import create_app
from gpulease.server.service import ClusterService
from gpulease.state import get_cluster_by_name, session_scope
from tests.controller.doubles import FakeAgents, FakeProvider
from tests.server.conftest import task_body

with warnings.catch_warnings():  # starlette's TestClient asks for httpx2 on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "t0ken-for-tests"


class SellingFake(FakeProvider, SupportsOffers):
    """The launch double, selling what the real local provider sells (this machine)."""

    def offers(self, catalog: Catalog) -> ProviderOffers:
        return LocalProvider(Path("/nonexistent")).offers(catalog)


@pytest.fixture
def http(engine: Engine) -> TestClient:
    provider = SellingFake(name="local")
    service = ClusterService(engine, {"local": provider}, FakeAgents(),
                             clock=VirtualClock(), owner="gl-test")  # fmt: skip
    client = TestClient(create_app(service, SecretStr(TOKEN)))
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    return client


def _error(response: object, status: int) -> str:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    return str(response.json()["error"]["message"])  # type: ignore[attr-defined]


def test_every_route_needs_the_token(http: TestClient) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        response = http.get("/v1/clusters", headers={"Authorization": "", **headers})
        assert response.status_code == 401
    assert http.get("/v1/health").json()["status"] == "ok"


def test_launch_writes_a_pending_cluster_with_its_ranked_plans(
    http: TestClient, engine: Engine
) -> None:
    body = {"task": task_body("python x.py", name="job", envs={"SECRET": "hunter2"}),
            "autostop_minutes": 5}  # fmt: skip
    view = http.post("/v1/clusters", json=body).json()
    assert view["status"] == "pending" and view["provider"] == "local"
    assert view["instance_type"] == "local-cpu" and view["autostop"]["minutes"] == 5
    assert "hunter2" not in http.get("/v1/clusters").text
    with session_scope(engine) as session:
        row = get_cluster_by_name(session, "job")
        assert row is not None
        doc = LaunchDocument.from_json(row.task)
    assert doc.spec["run"] == "python x.py" and doc.plans[0].provider == "local"
    assert doc.run.run == "python x.py" and doc.run.envs == {"SECRET": "hunter2"}
    assert [w.split(":")[0] for w in view["warnings"]] == ["envs.SECRET"]  # → secrets:
    assert "hunter2" not in str(view)


def test_launch_answers_with_the_warnings_of_its_one_parse(http: TestClient) -> None:
    body = {"task": task_body("true", name="w", envs={"UNSET": None})}
    view = http.post("/v1/clusters", json=body).json()
    assert [w for w in view["warnings"] if "envs.UNSET" in w and "no value" in w], view


def test_a_relative_workdir_is_refused_by_the_server(http: TestClient) -> None:
    response = http.post("/v1/clusters", json={"task": task_body("true", name="r"),
                                               "workdir": "examples/train"})  # fmt: skip
    assert response.status_code == 422 and "workdir" in response.text


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"task": {"name": "x", "run": "true", "nodes": 2}}, 422, "nodes"),
        ({"task": {"run": "true"}}, 422, "name"),
        ({"task": {"name": "bad name!", "run": "true"}}, 422, "not a valid cluster name"),
        ({"task": task_body("true", name="gpu", resources={"providers": ["local"],
                                                            "accelerators": "H100:8"})},
         422, "no plan can be launched"),
        ({"task": task_body("true", name="x"), "extra": 1}, 422, "extra"),
    ],
)  # fmt: skip
def test_bad_launches_are_refused_with_422(
    http: TestClient, body: dict[str, object], status: int, words: str
) -> None:
    response = http.post("/v1/clusters", json=body)
    assert response.status_code == status
    assert words in response.text


def test_a_taken_name_is_a_conflict_and_an_unknown_one_not_found(http: TestClient) -> None:
    assert http.post("/v1/clusters", json={"task": task_body("true", name="a")}).status_code == 201
    assert "exists" in _error(
        http.post("/v1/clusters", json={"task": task_body("true", name="a")}), 409
    )
    for method, path in (
        ("GET", "/v1/clusters/nope"),
        ("POST", "/v1/clusters/nope/down"),
        ("GET", "/v1/clusters/nope/logs"),
        ("POST", "/v1/clusters/nope/stop"),
    ):
        assert "nope" in _error(http.request(method, path), 404)  # fmt: skip
    response = http.post("/v1/clusters/nope/exec", json={"command": "ls"})
    assert response.status_code == 404


def test_status_changes_follow_the_machine(http: TestClient) -> None:
    http.post("/v1/clusters", json={"task": task_body("true", name="m")})
    assert "cannot stop" in _error(http.post("/v1/clusters/m/stop"), 409)
    assert "cannot start" in _error(http.post("/v1/clusters/m/start"), 409)
    assert "not up" in _error(http.post("/v1/clusters/m/exec", json={"command": "ls"}), 409)
    assert http.post("/v1/clusters/m/down").json()["status"] == "terminating"
    assert http.post("/v1/clusters/m/down").json()["status"] == "terminating"  # idempotent
    view = http.get("/v1/clusters/m", params={"history": "true"}).json()
    assert [h["to"] for h in view["history"]] == ["pending", "terminating"]


def test_autostop_is_set_and_cleared(http: TestClient) -> None:
    http.post("/v1/clusters", json={"task": task_body("true", name="auto")})
    view = http.post("/v1/clusters/auto/autostop", json={"minutes": 10, "down": True}).json()
    assert view["autostop"] == {"minutes": 10, "down": True, "gpu_utilisation_below": None}
    body = {"minutes": 10, "gpu_utilisation_below": 7.5}
    view = http.post("/v1/clusters/auto/autostop", json=body).json()
    assert view["autostop"] == {"minutes": 10, "down": False, "gpu_utilisation_below": 7.5}
    view = http.post("/v1/clusters/auto/autostop", json={"minutes": 20}).json()  # rule kept
    assert view["autostop"] == {"minutes": 20, "down": False, "gpu_utilisation_below": 7.5}
    body = {"minutes": 20, "gpu_utilisation_below": None}  # rule cleared, minutes kept
    view = http.post("/v1/clusters/auto/autostop", json=body).json()
    assert view["autostop"] == {"minutes": 20, "down": False, "gpu_utilisation_below": None}
    http.post("/v1/clusters/auto/autostop", json={"minutes": 20, "gpu_utilisation_below": 5})
    view = http.post("/v1/clusters/auto/autostop", json={"minutes": None}).json()
    assert view["autostop"] == {"minutes": None, "down": False, "gpu_utilisation_below": None}
    assert http.post("/v1/clusters/auto/autostop", json={"minutes": -1}).status_code == 422
    bad = {"minutes": 5, "gpu_utilisation_below": 101}
    response = http.post("/v1/clusters/auto/autostop", json=bad)
    assert response.status_code == 422 and "gpu_utilisation_below" in response.text


def test_the_tasks_autostop_is_stored_and_launch_i_and_down_override_it(
    http: TestClient,
) -> None:
    rule = {"idle_minutes": 30, "down": True, "gpu_utilization_below": 5}
    task = {**task_body("true", name="a1"), "resources": {"providers": ["local"], "autostop": rule}}
    view = http.post("/v1/clusters", json={"task": task}).json()
    assert view["autostop"] == {"minutes": 30, "down": True, "gpu_utilisation_below": 5.0}
    body = {"task": {**task, "name": "a2"}, "autostop_minutes": 2, "down": False}
    view = http.post("/v1/clusters", json=body).json()
    assert view["autostop"] == {"minutes": 2, "down": False, "gpu_utilisation_below": 5.0}
    plain = {
        **task_body("true", name="a3"),
        "resources": {"providers": ["local"], "autostop": True},
    }
    view = http.post("/v1/clusters", json={"task": plain}).json()
    assert view["autostop"] == {"minutes": 5, "down": False, "gpu_utilisation_below": None}
    bad = {**task_body("true", name="a4"), "resources": {"autostop": {"idle_minutes": "x"}}}
    response = http.post("/v1/clusters", json={"task": bad})
    assert response.status_code == 422
    assert "resources.autostop.idle_minutes" in response.json()["error"]["message"]


def test_logs_of_a_cluster_without_nodes_are_empty_with_its_status(http: TestClient) -> None:
    http.post("/v1/clusters", json={"task": task_body("true", name="l")})
    response = http.get("/v1/clusters/l/logs", params={"offset": 0})
    assert response.content == b""
    assert response.headers["X-Gpulease-Cluster-Status"] == "pending"
    assert response.headers["X-Gpulease-Log-Complete"] == "false"


@pytest.mark.parametrize(("cpu_arch", "yardstick"), [(None, 0.526), ("any", 0.42)])
def test_a_jobs_on_demand_yardstick_is_an_offer_the_task_can_run_on(
    engine: Engine, tmp_path: Path, cpu_arch: str | None, yardstick: float
) -> None:
    """The job report's "on-demand would have cost" price comes from the on-demand targets the
    optimizer kept: for a T4 task, the cheapest x86_64 host (g4dn.xlarge at $0.526/h), not the
    arm64 g5g.xlarge at $0.42/h — unless the task allows arm64."""
    from gpulease.controller.job_document import JobDocument
    from gpulease.controller.job_loop import JobReconciler
    from gpulease.providers.sim import SimProvider
    from gpulease.server.jobs import JobService
    from gpulease.state import Job

    sim = SimProvider.from_config({}, tmp_path / "sim")
    clock = VirtualClock()
    service = ClusterService(engine, {"sim": sim}, FakeAgents(), clock=clock, owner="gl-test")
    loop = JobReconciler(engine, {"sim": sim}, FakeAgents(), clock=clock, owner="gl-test")
    client = TestClient(
        create_app(service, SecretStr(TOKEN), jobs=JobService(engine, service, loop))
    )
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    resources = {"accelerators": "T4:1", "providers": ["sim"], "use_spot": "auto"}
    if cpu_arch:
        resources["cpu_arch"] = cpu_arch
    task = {"name": "t4", "resources": resources, "run": "true"}
    view = client.post("/v1/jobs", json={"task": task, "name": "t4"}).json()
    assert view["cost"]["on_demand_price_per_hour"] == pytest.approx(yardstick), view
    assert view["warnings"] == []
    ruled = {**task, "resources": {**resources, "autostop": 10}}
    warned = client.post("/v1/jobs", json={"task": ruled, "name": "t4b"}).json()["warnings"]
    assert [w for w in warned if w.startswith("resources.autostop: ignored by managed jobs")]
    with session_scope(engine) as session:
        row = session.get(Job, view["id"])
        assert row is not None
        doc = JobDocument.from_json(row.task)
    kinds = {t.instance_type for t in (*doc.on_demand, *doc.spot)}
    assert ("g5g.xlarge" in kinds) is (cpu_arch == "any"), kinds
