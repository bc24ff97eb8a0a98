"""The dashboard's HTTP side: the login-link API route, ``/ui/login``, the pages and their static
files (shipped in ``static/`` as package data, read once at start-up).

Pages (``/ui/``, ``/ui/cluster?name=N``, ``/ui/job?id=N``, ``/ui/service?name=N``) are one HTML
shell; their script reads the JSON API with the session cookie, which authorises only the GET
routes in :data:`COOKIE_READABLE` (see :func:`cookie_may_read`). Every answer carries a
Content-Security-Policy allowing this server only: nothing is ever loaded from elsewhere. Moves
no states.
"""

from __future__ import annotations

import html
from importlib import resources
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gpulease.server.webui.login import LoginRefused, Logins

COOKIE = "gpulease_session"
#: the API routes (FastAPI path templates) a dashboard session cookie may GET; nothing else
COOKIE_READABLE = frozenset({
    "/v1/health",
    "/v1/clusters",
    "/v1/clusters/{name}",
    "/v1/clusters/{name}/telemetry",
    "/v1/jobs",
    "/v1/jobs/{job_id}",
    "/v1/jobs/{job_id}/telemetry",
    "/v1/telemetry/latest",
    "/v1/services",
    "/v1/services/{name}",
    "/v1/services/{name}/load",
    "/v1/pools",
    "/v1/pools/{name}",
})  # fmt: skip
PAGES = {"": "Overview", "cluster": "Cluster", "job": "Managed job", "service": "Service"}
_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml",
          ".txt": "text/plain"}  # fmt: skip
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def cookie_may_read(request: Request, logins: Logins) -> bool:
    """Whether ``request`` is a GET of a readable route with a valid dashboard session."""
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    return (
        request.method in {"GET", "HEAD"}
        and path in COOKIE_READABLE
        and logins.valid_session(request.cookies.get(COOKIE))
    )


def login_route(router: APIRouter, logins: Logins) -> None:
    """``POST /v1/dashboard/login`` on the token-guarded router: a one-time login link."""

    @router.post("/dashboard/login", status_code=201)
    def login_link(request: Request) -> dict[str, Any]:
        link = logins.issue()
        base = str(request.base_url).rstrip("/")
        return {"url": f"{base}/ui/login?t={link.token}", "expires_at": link.expires_at,
                "ttl_s": logins.link_ttl_s}  # fmt: skip


def _static_files() -> dict[str, tuple[bytes, str]]:
    root = resources.files("gpulease.server.webui") / "static"
    found: dict[str, tuple[bytes, str]] = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return found


def _shell() -> str:
    root = resources.files("gpulease.server.webui") / "static"
    return (root / "shell.html.in").read_text(encoding="utf-8")


def _page(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _refused(shell: str, message: str) -> HTMLResponse:
    text = (f"{html.escape(message)}. Run <code>gpulease dashboard</code> for a new "
            "login link (each link works once, for two minutes).")  # fmt: skip
    body = shell.replace("{{page}}", "login").replace("{{title}}", "Not logged in")
    return _page(body.replace("{{message}}", text), 401)


def mount_ui(app: FastAPI, logins: Logins) -> None:
    """The ``/ui`` routes on ``app``."""
    files, shell = _static_files(), _shell()

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> Response:
        return RedirectResponse("/ui/", status_code=307, headers=SECURITY_HEADERS)

    @app.get("/ui/login", include_in_schema=False)
    def login(request: Request, t: str = "") -> Response:
        try:
            session, _until = logins.redeem(t)
        except LoginRefused as exc:
            return _refused(shell, str(exc))
        answer = RedirectResponse("/ui/", status_code=303, headers=SECURITY_HEADERS)
        answer.set_cookie(COOKIE, session, max_age=int(logins.session_ttl_s), path="/",
                          httponly=True, samesite="strict",
                          secure=request.url.scheme == "https")  # fmt: skip
        return answer

    @app.get("/ui/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in files:
            return Response("not found", status_code=404, media_type="text/plain")
        data, media_type = files[name]
        return Response(data, media_type=media_type, headers=SECURITY_HEADERS)

    @app.get("/ui/", include_in_schema=False)
    def overview(request: Request) -> Response:
        return page(request, "")

    @app.get("/ui/{page}", include_in_schema=False)
    def page(request: Request, page: str) -> Response:
        if page not in PAGES:
            return Response("not found", status_code=404, media_type="text/plain")
        if not logins.valid_session(request.cookies.get(COOKIE)):
            return _refused(shell, "This browser is not logged in to the gpulease dashboard")
        body = shell.replace("{{page}}", page or "overview").replace("{{title}}", PAGES[page])
        return _page(body.replace("{{message}}", ""))
