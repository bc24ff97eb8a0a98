"""The report's whole days from the ledger's daily rollup (``ledger_days``, read only; written by
:mod:`gpulease.state.ledger` as each row closes): per group of one dimension (or per day), the
sums of the closed rows' shares of the UTC days ``[first_day, end_day)``. The open rows and a
period's partial first and last days come from the rows (:mod:`gpulease.cost.report`). Moves no
states."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Connection, Table, func, select

from gpulease.state.models import LedgerDay

DAYS = cast(Table, LedgerDay.__table__)
# the report's measures (gpulease.cost.overlap.MEASURES) and the rollup's columns of them
COLUMNS = {"cost_usd": "cost_usd", "billed_s": "billed_s", "gpu_s": "gpu_s",
           "spot_savings_usd": "spot_savings_usd", "spot_cost_usd": "spot_cost_usd",
           "cost_instance": "cost_instance", "cost_volume": "cost_volume",
           "cost_storage": "cost_storage"}  # fmt: skip


def whole_days(
    conn: Connection, by: str, first_day: int, end_day: int, count: str = "starts"
) -> dict[Any, dict[str, float]]:
    """Group key (``by`` ``day``: the day number) → measures, over the days ``[first_day,
    end_day)``. ``entries`` is the rollup's ``count`` column: ``starts`` (each row once, in the
    day it starts) or ``entries`` (a row in every day it overlaps)."""
    c = DAYS.c
    group = c.day if by == "day" else c.key
    sums = [func.sum(c[col]).label(name) for name, col in COLUMNS.items()]
    query = (
        select(group.label("group"), *sums, func.sum(c[count]).label("entries"))
        .where(c.dim == ("all" if by == "day" else by), c.day >= first_day, c.day < end_day)
        .group_by(group)
    )
    return {
        row["group"]: {k: float(v or 0.0) for k, v in row.items() if k != "group"}
        for row in conn.execute(query).mappings()
    }
