"""The web dashboard the server serves under ``/ui/`` (docs/dashboard.md): clusters and jobs with
their status, place and $/h, services with their load and cost, pools with their nodes and queue;
a cluster's GPU charts, nodes and events; a job's attempts, recoveries, checkpoints and
throughput; a service's replicas, scaling decisions and load. Plain HTML, CSS and JavaScript
shipped as package data (``static/``), reading the JSON API; nothing is loaded from the
internet.

Owns the one-time login links and browser sessions (:mod:`.login`) and the ``/ui`` routes
(:mod:`.routes`). Moves no DB states.
"""

from gpulease.server.webui.login import LoginLink, LoginRefused, Logins
from gpulease.server.webui.routes import (
    COOKIE,
    COOKIE_READABLE,
    cookie_may_read,
    login_route,
    mount_ui,
)

__all__ = [
    "COOKIE",
    "COOKIE_READABLE",
    "LoginLink",
    "LoginRefused",
    "Logins",
    "cookie_may_read",
    "login_route",
    "mount_ui",
]
