"""The SDK's bench methods (docs/bench.md), mixed into :class:`~gpulease.client.http.Client`:
``bench_cluster`` (every node of a running cluster benched at once, judged against its peers and
its instance type's history, stored) and ``bench_history`` (the stored runs). Moves no states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpulease.jsonhttp import JsonHttp

QUICK_WAIT_S = 660.0  # the server gives a node's quick run 600 s, a full run an hour
FULL_WAIT_S = 3660.0


class BenchRoutes:
    """``gpulease bench CLUSTER`` and ``gpulease bench --history`` over the API."""

    _http: JsonHttp

    def bench_cluster(
        self, name: str, *, quick: bool = False, only: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Run the bench on every node of cluster ``name`` (``quick``: the acceptance subset;
        ``only``: these check families). Answers ``{cluster, quick, verdict, nodes: [{rank,
        instance_id, verdict, report | error}], observed}``; a cluster that is not up raises
        :class:`~gpulease.client.errors.Conflict` naming it."""
        body: dict[str, Any] = {"quick": quick}
        if only:
            body["only"] = list(only)
        return self._http.json("POST", f"/v1/clusters/{name}/bench", json=body,
                               timeout=QUICK_WAIT_S if quick else FULL_WAIT_S)  # fmt: skip

    def bench_history(
        self,
        *,
        instance_type: str | None = None,
        provider: str | None = None,
        cluster: str | None = None,
        limit: int = 20,
    ) -> list[dict[str, Any]]:
        """The stored bench runs (one per node), newest first."""
        params: dict[str, Any] = {"limit": limit}
        for key, value in (("instance_type", instance_type), ("provider", provider),
                           ("cluster", cluster)):  # fmt: skip
            if value is not None:
                params[key] = value
        runs: list[dict[str, Any]] = self._http.json("GET", "/v1/bench", params=params)["runs"]
        return runs
