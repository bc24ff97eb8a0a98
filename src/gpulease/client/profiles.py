"""The SDK's profile methods, mixed into :class:`~gpulease.client.http.Client`: ``profile``
(the summary ``gpulease.train.profile`` wrote for one rank) and ``profile_trace`` (its gzipped
Chrome trace), through ``GET /v1/clusters/{name}/profile[/trace]``. Moves no states.
"""

from __future__ import annotations

from typing import Any

from gpulease.jsonhttp import JsonHttp


class ProfileRoutes:
    """Profiles of a cluster's training processes (docs/train.md, "Profiling")."""

    _http: JsonHttp

    def profile(self, name: str, *, rank: int = 0) -> dict[str, Any]:
        """``{cluster, rank, node_rank, summary, trace_bytes}`` of the training process of rank
        ``rank``; :class:`~gpulease.client.errors.NotFound` when it wrote no profile yet."""
        return self._http.json("GET", f"/v1/clusters/{name}/profile", params={"rank": rank})

    def profile_trace(self, name: str, *, rank: int = 0) -> bytes:
        """The gzipped Chrome trace (``trace.json.gz``) of rank ``rank``."""
        response = self._http.request("GET", f"/v1/clusters/{name}/profile/trace",
                                      params={"rank": rank}, timeout=600.0)  # fmt: skip
        return response.content
