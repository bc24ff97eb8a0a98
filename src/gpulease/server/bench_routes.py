"""The bench's routes (docs/bench.md): ``POST /v1/clusters/{name}/bench`` runs the bench on
every node of a running cluster and answers every node's judged report (synchronous: the quick
subset takes about half a minute, the full run minutes); ``GET /v1/bench`` lists the stored runs,
newest first. A cluster that is not up is a 409 naming it; an unknown family a 422 naming
``only``. Moves no states.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from gpulease.server.bench import BenchService


class BenchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    quick: bool = False  # the acceptance subset, smaller sizes
    only: list[str] | None = None  # these check families only


def bench_routes(router: APIRouter, benches: BenchService) -> None:
    @router.post("/clusters/{name}/bench")
    def bench_cluster(name: str, body: BenchBody) -> dict[str, Any]:
        return benches.run(name, quick=body.quick, only=body.only)

    @router.get("/bench")
    def bench_history(provider: str | None = None, instance_type: str | None = None,
                      cluster: str | None = None, limit: int = 20) -> dict[str, Any]:  # fmt: skip
        return benches.history(provider=provider, instance_type=instance_type,
                               cluster=cluster, limit=limit)  # fmt: skip
