"""The dashboard's login model and routes, in process (FastAPI's test client) over a real SQLite
DB and the real :class:`~gpulease.server.webui.Logins` on a virtual clock: links work once and
expire, they are kept hashed, the session cookie is HttpOnly + SameSite=Strict and opens only the
read routes (GET; a real service and pool's too, with their real load balancer), pages need a
session, every answer forbids loading anything from elsewhere, and the static files are shipped
and reference nothing outside the server."""

from __future__ import annotations

import re
import warnings
from importlib import resources
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.cli.dashboard_cmd import why_not_open
from gpulease.clock import VirtualClock
from gpulease.server.api import create_app
from gpulease.server.endpoints import Endpoints
from gpulease.server.pools import PoolService
from gpulease.server.service import ClusterService
from gpulease.server.service_load import LoadHistory
from gpulease.server.services import ServiceOps
from gpulease.server.webui import COOKIE, LoginRefused, Logins
from gpulease.server.webui.login import LINK_TTL_S, SESSION_TTL_S
from tests.controller.doubles import FakeAgents
from tests.server.conftest import task_body
from tests.server.test_api import SellingFake

with warnings.catch_warnings():  # starlette's TestClient asks for httpx2 on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "t0ken-for-the-dashboard-tests"


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def logins(clock: VirtualClock) -> Logins:
    return Logins(clock)


@pytest.fixture
def app(engine: Engine, logins: Logins, clock: VirtualClock) -> TestClient:
    service = ClusterService(engine, {"local": SellingFake(name="local")}, FakeAgents(),
                             clock=clock, owner="gl-test")  # fmt: skip
    return TestClient(create_app(service, SecretStr(TOKEN), logins=logins))


BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def load(endpoints: Endpoints, clock: VirtualClock) -> LoadHistory:
    return LoadHistory(endpoints, clock)


@pytest.fixture
def serving_app(
    engine: Engine, logins: Logins, clock: VirtualClock, endpoints: Endpoints, load: LoadHistory
) -> TestClient:
    """The app with the services and pools routes (a service's endpoint is a real balancer)."""
    service = ClusterService(engine, {"local": SellingFake(name="local")}, FakeAgents(),
                             clock=clock, owner="gl-test")  # fmt: skip
    services = ServiceOps(engine, service, endpoints, load_history=load)
    app = create_app(service, SecretStr(TOKEN), logins=logins, pools=PoolService(engine, service),
                     services=services)  # fmt: skip
    return TestClient(app)


def _link(app: TestClient) -> str:
    answer = app.post("/v1/dashboard/login", headers=BEARER)
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["ttl_s"] == LINK_TTL_S
    url = str(body["url"])
    assert url.startswith("http://testserver/ui/login?t=")
    return url.removeprefix("http://testserver")


def _log_in(app: TestClient) -> None:
    answer = app.get(_link(app), follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"


def test_a_login_link_needs_the_api_token_and_sets_a_strict_httponly_cookie(
    app: TestClient,
) -> None:
    assert app.post("/v1/dashboard/login").status_code == 401
    assert (
        app.post("/v1/dashboard/login", headers={"Authorization": "Bearer no"}).status_code == 401
    )
    answer = app.get(_link(app), follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/", f"max-age={int(SESSION_TTL_S)}"} <= attributes
    assert "secure" not in attributes  # plain http on loopback: a Secure cookie would be dropped
    page = app.get("/ui/")
    assert page.status_code == 200 and 'data-page="overview"' in page.text


def test_a_link_works_once_and_a_used_expired_or_made_up_one_says_so(
    app: TestClient, clock: VirtualClock
) -> None:
    link = _link(app)
    assert app.get(link, follow_redirects=False).status_code == 303
    app.cookies.clear()
    again = app.get(link, follow_redirects=False)
    assert again.status_code == 401 and "already used" in again.text
    assert "set-cookie" not in again.headers and "gpulease dashboard" in again.text
    late = _link(app)
    clock.advance(LINK_TTL_S + 1)
    expired = app.get(late, follow_redirects=False)
    assert expired.status_code == 401 and "expired" in expired.text
    made_up = app.get("/ui/login?t=guess", follow_redirects=False)
    assert made_up.status_code == 401 and "not valid" in made_up.text
    assert app.get("/ui/login", follow_redirects=False).status_code == 401
    assert app.get("/ui/").status_code == 401  # no session was opened by any of these


def test_sessions_end_after_their_time(app: TestClient, clock: VirtualClock) -> None:
    _log_in(app)
    assert app.get("/v1/clusters").status_code == 200
    clock.advance(SESSION_TTL_S + 1)
    assert app.get("/v1/clusters").status_code == 401
    assert app.get("/ui/").status_code == 401


def test_the_cookie_opens_the_read_routes_and_nothing_else(app: TestClient) -> None:
    launched = app.post("/v1/clusters", json={"task": task_body("true", name="seen")},
                        headers=BEARER)  # fmt: skip
    assert launched.status_code == 201, launched.text
    assert app.get("/v1/clusters").status_code == 401  # before logging in
    _log_in(app)
    assert [c["name"] for c in app.get("/v1/clusters").json()["clusters"]] == ["seen"]
    assert app.get("/v1/clusters/seen", params={"history": "true"}).json()["name"] == "seen"
    assert app.get("/v1/health").status_code == 200
    # no state change by cookie: POST routes and the non-read GETs want the token
    for method, path in (("POST", "/v1/clusters/seen/down"), ("POST", "/v1/clusters/seen/stop"),
                         ("POST", "/v1/server/shutdown"), ("POST", "/v1/dashboard/login"),
                         ("GET", "/v1/clusters/seen/ssh"), ("GET", "/v1/clusters/seen/logs"),
                         ("GET", "/v1/providers")):  # fmt: skip
        assert app.request(method, path).status_code == 401, (method, path)
    assert app.get("/v1/clusters/seen").json()["status"] == "pending"  # not taken down
    # a wrong bearer token is not rescued by a good cookie
    assert app.get("/v1/clusters", headers={"Authorization": "Bearer no"}).status_code == 401


def test_the_cookie_reads_services_and_pools_and_changes_neither(
    serving_app: TestClient, load: LoadHistory, clock: VirtualClock
) -> None:
    app = serving_app
    served = {"port": 8080, "readiness_probe": "/health", "replicas": {"min": 1, "max": 1}}
    up = app.post("/v1/services", headers=BEARER,
                  json={"task": task_body("true", name="web", service=served)})  # fmt: skip
    assert up.status_code == 201, up.text
    sized = {"min_nodes": 0, "max_nodes": 2}
    pool = app.post("/v1/pools", headers=BEARER,
                    json={"task": task_body("true", name="gpus", pool=sized)})  # fmt: skip
    assert pool.status_code == 201, pool.text
    load.run_pass()  # a point of the new service's endpoint (no replica behind it yet)
    readable = ("/v1/services", "/v1/services/web", "/v1/services/web/load", "/v1/pools",
                "/v1/pools/gpus")  # fmt: skip
    for path in readable:
        assert app.get(path).status_code == 401, path  # before logging in
    _log_in(app)
    assert [s["name"] for s in app.get("/v1/services").json()["services"]] == ["web"]
    web = app.get("/v1/services/web").json()
    assert web["status"] == "pending" and web["endpoint"].startswith("http://127.0.0.1:")
    assert [d["to"] for d in web["decisions"]] == [1] and web["history"]
    assert [p["name"] for p in app.get("/v1/pools").json()["pools"]] == ["gpus"]
    assert app.get("/v1/pools/gpus").json()["max_nodes"] == 2
    (point,) = app.get("/v1/services/web/load").json()["points"]
    assert point["at"] == clock.now() and point["replicas"] == 0 and point["qps"] == 0
    later = app.get("/v1/services/web/load", params={"since": clock.now() + 1}).json()
    assert later == {"name": "web", "step_s": 10.0, "points": []}
    assert app.get("/v1/services/nothing").status_code == 404  # read, and found missing
    assert app.get("/v1/services/nothing/load").status_code == 404
    answer = app.get("/ui/service", params={"name": "web"})
    assert answer.status_code == 200 and 'data-page="service"' in answer.text
    for method, path in (("POST", "/v1/services"), ("POST", "/v1/services/web/update"),
                         ("DELETE", "/v1/services/web"), ("GET", "/v1/services/web/logs"),
                         ("POST", "/v1/pools"), ("POST", "/v1/pools/gpus/down")):  # fmt: skip
        assert app.request(method, path, json={"task": {}}).status_code == 401, (method, path)
    assert app.get("/v1/services/web").json()["status"] == "pending"  # not taken down
    assert app.get("/v1/pools/gpus").json()["status"] == "pending"


def test_pages_need_a_session_and_forbid_loading_anything_from_elsewhere(
    app: TestClient,
) -> None:
    refused = app.get("/ui/cluster", params={"name": "x"})
    assert refused.status_code == 401 and "gpulease dashboard" in refused.text
    _log_in(app)
    for path, page in (("/ui/", "overview"), ("/ui/cluster?name=x", "cluster"),
                       ("/ui/job?id=1", "job"), ("/ui/service?name=x", "service")):  # fmt: skip
        answer = app.get(path)
        assert answer.status_code == 200 and f'data-page="{page}"' in answer.text
        csp = answer.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp
        assert "script-src 'self'" in csp and "http" not in csp
        assert answer.headers["referrer-policy"] == "no-referrer"  # the link's token stays here
    assert app.get("/ui/nothing").status_code == 404
    assert app.get("/ui", follow_redirects=False).headers["location"] == "/ui/"


def test_the_static_files_are_shipped_served_and_self_contained(app: TestClient) -> None:
    root = resources.files("gpulease.server.webui") / "static"
    names = {entry.name for entry in root.iterdir()}
    assert {"shell.html.in", "app.js", "serving.js", "chart.js", "style.css"} <= names
    shell = (root / "shell.html.in").read_text(encoding="utf-8")
    for entry in root.iterdir():
        text = entry.read_text(encoding="utf-8")
        # the SVG namespace is an identifier, never fetched
        urls = set(re.findall(r"https?://[^\s\"')]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, (entry.name, urls)
    for ref in re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', shell):
        answer = app.get(ref)
        assert answer.status_code == 200, ref
        assert answer.headers["content-type"].split(";")[0] in {"text/javascript", "text/css"}
    assert app.get("/ui/static/shell.html.in").status_code == 404
    assert app.get("/ui/static/..%2Flogin.py").status_code == 404


def test_logins_keep_only_hashes() -> None:
    logins = Logins(VirtualClock())
    link = logins.issue()
    session, _until = logins.redeem(link.token)
    kept = repr(vars(logins))
    assert link.token not in kept and session not in kept
    assert logins.valid_session(session) and not logins.valid_session(link.token)
    assert not logins.valid_session(None) and not logins.valid_session("")
    with pytest.raises(LoginRefused, match="already used"):
        logins.redeem(link.token)


def test_the_url_points_at_the_host_the_cli_asked(app: TestClient) -> None:
    answer = app.post("/v1/dashboard/login", headers={**BEARER, "Host": "127.0.0.1:8123"})
    parts = urlsplit(answer.json()["url"])
    assert (parts.netloc, parts.path) == ("127.0.0.1:8123", "/ui/login")


@pytest.mark.parametrize(
    ("environ", "platform", "reason"),
    [
        ({"DISPLAY": ":0"}, "linux", None),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", None),
        ({}, "linux", "no DISPLAY"),
        ({}, "darwin", None),
        ({"DISPLAY": ":0", "SSH_CONNECTION": "10.0.0.1 5 10.0.0.2 22"}, "linux", "an SSH session"),
        ({"SSH_TTY": "/dev/pts/1"}, "darwin", "an SSH session"),
        ({"BROWSER": "lynx", "SSH_TTY": "/dev/pts/1"}, "linux", None),
    ],
)
def test_when_the_cli_opens_a_browser(
    environ: dict[str, str], platform: str, reason: str | None
) -> None:
    assert why_not_open(environ, platform) == reason
