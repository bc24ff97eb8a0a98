"""``GET /v1/cost``: the cost report (:mod:`gpulease.cost.report`) over this server's ledger.

``since`` (``30d``), ``month`` (``2026-11``) and ``by`` (``day``, ``cluster``, ...) are checked
by the report, so a bad one is a 422 naming it in the usual error shape. Reads only; moves no
states.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import Engine

from gpulease.clock import Clock
from gpulease.cost.report import cost_report


class CostReports:
    """The reports of one server: its state DB and its clock (the forecast's "now")."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock

    def report(self, since: str | None, month: str | None, by: str | None) -> dict[str, Any]:
        return cost_report(self.engine, since=since, month=month, by=by, clock=self.clock)


def cost_routes(router: APIRouter, reports: CostReports) -> None:
    @router.get("/cost")
    def cost(
        since: str | None = None, month: str | None = None, by: str | None = None
    ) -> JSONResponse:
        # the report is plain JSON already (str, numbers, lists, dicts): sent as it is, without
        # FastAPI's per-value encoding pass (~0.3 s for a breakdown of 2,000 clusters)
        return JSONResponse(reports.report(since, month, by))
