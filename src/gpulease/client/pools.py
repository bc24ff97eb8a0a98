"""The SDK's pool methods (``/v1/pools``; docs/pools.md), mixed into
:class:`~gpulease.client.http.Client`: ``pool_up``, ``pool_list``, ``pool_status`` and
``pool_down``. Moves no states itself; the server does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpulease.client.tasks import post_task
from gpulease.jsonhttp import JsonHttp

if TYPE_CHECKING:
    from gpulease.spec import Task


class PoolRoutes:
    """Pools of nodes for managed jobs, sized by the queue of jobs waiting for them."""

    _http: JsonHttp

    def pool_up(
        self,
        task: Task | Mapping[str, Any],
        *,
        name: str | None = None,
        workdir: str | None = None,
        envs: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Start a pool from a pool file (a task with a ``pool:`` section: min and max nodes,
        idle timeout; its ``resources`` say what a node is, its ``setup`` runs once per node).
        Local paths, ``envs``, ``environ`` and ``secrets`` as in ``Client.launch``. A managed
        job with ``resources: {pool: NAME}`` then runs on an idle node of it."""
        return post_task(self._http, "/v1/pools", task, workdir=workdir, envs=envs,
                         environ=environ, secrets=secrets, name=name)  # fmt: skip

    def pool_list(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._http.json("GET", "/v1/pools")["pools"]
        return found

    def pool_status(self, name: str) -> dict[str, Any]:
        """One pool: its nodes (idle, busy, provisioning), the jobs waiting for it, its sizing
        decisions (newest last) and its status history."""
        return self._http.json("GET", f"/v1/pools/{name}")

    def pool_down(self, name: str) -> dict[str, Any]:
        """Terminate every node of the pool (the provider confirms them gone) → DOWN."""
        return self._http.json("POST", f"/v1/pools/{name}/down")
