"""The server's side of ``gpulease profile CLUSTER --rank R``: the summary and the trace that
``gpulease.train.profile`` wrote for rank ``R`` (``profile/rank-<R>/`` in a node's work dir),
read through the node's agent (``GET /v1/profile…``, docs/agent.md).

``R`` is the training process's rank: the node rank when the job runs one process per node
(the default), the global rank under torchrun, so the node holding it is found by asking the
nodes' agents which ranks they hold, node ``R`` first. Owns :class:`ProfileFetch` and the routes
``GET /v1/clusters/{name}/profile`` and ``GET /v1/clusters/{name}/profile/trace``. Moves no
states.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from gpulease.agent.client import AgentRequestError
from gpulease.errors import Retryable, UserInputError
from gpulease.server.agents import HttpAgent
from gpulease.server.service import ClusterService, Conflict, NotFound


class ProfileFetch:
    def __init__(self, service: ClusterService) -> None:
        self.service = service

    def summary(self, name: str, rank: int) -> dict[str, Any]:
        """``{cluster, rank, node_rank, summary, trace_bytes}``."""
        node_rank, agent, entry = self._find(name, rank)
        try:
            summary = json.loads(agent.profile_file(rank, "summary.json"))
        except AgentRequestError as exc:
            raise NotFound(f"cluster {name!r}: {exc}") from None
        except ValueError as exc:
            raise Conflict(
                f"cluster {name!r}: rank {rank}'s summary.json is not JSON: {exc}"
            ) from None
        return {"cluster": name, "rank": rank, "node_rank": node_rank, "summary": summary,
                "trace_bytes": entry.get("trace_bytes")}  # fmt: skip

    def trace(self, name: str, rank: int) -> tuple[int, bytes]:
        """The node rank and the gzipped Chrome trace."""
        node_rank, agent, _entry = self._find(name, rank)
        try:
            return node_rank, agent.profile_file(rank, "trace.json.gz")
        except AgentRequestError as exc:
            raise NotFound(f"cluster {name!r}: {exc}") from None

    def _find(self, name: str, rank: int) -> tuple[int, HttpAgent, dict[str, Any]]:
        if rank < 0:
            raise UserInputError("rank: must be >= 0")
        num_nodes = int(self.service.get(name)["num_nodes"])
        order = ([rank] if rank < num_nodes else []) + [r for r in range(num_nodes) if r != rank]
        found: set[int] = set()
        silent: list[str] = []
        status = None
        for node_rank in order:
            ref, _task_id, status = self.service._node(name, node_rank)  # the READY node
            if ref is None:
                silent.append(f"node {node_rank} is not up")
                continue
            agent = self.service.agents.agent(ref)
            if not isinstance(agent, HttpAgent):
                raise Conflict(f"cluster {name!r}: its nodes' agents cannot hand out profiles")
            try:
                entries = agent.profiles()["ranks"]
            except Retryable as exc:
                silent.append(f"node {node_rank} did not answer ({exc})")
                continue
            for entry in entries:
                if entry["rank"] == rank:
                    return node_rank, agent, entry
                found.add(int(entry["rank"]))
        if len(silent) == num_nodes and status is not None:
            raise Conflict(f"cluster {name!r} is {status.value}: " + "; ".join(silent))
        hint = (f" (ranks with a profile: {', '.join(map(str, sorted(found)))})" if found else
                ": the task writes one with gpulease.train.profile()")  # fmt: skip
        rest = f"; {'; '.join(silent)}" if silent else ""
        raise NotFound(f"cluster {name!r}: no profile of rank {rank} yet{hint}{rest}")


def profile_routes(router: APIRouter, profiles: ProfileFetch) -> None:
    @router.get("/clusters/{name}/profile")
    def profile_summary(name: str, rank: int = 0) -> dict[str, Any]:
        return profiles.summary(name, rank)

    @router.get("/clusters/{name}/profile/trace")
    def profile_trace(name: str, rank: int = 0) -> Response:
        node_rank, data = profiles.trace(name, rank)
        return Response(data, media_type="application/gzip",
                        headers={"X-Gpulease-Node-Rank": str(node_rank)})  # fmt: skip
