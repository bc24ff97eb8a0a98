"""The quarterly audit (``gpulease audit``, ``GET /v1/audit``): findings ranked by dollars.

:func:`run_audit` reads the ledger, telemetry, clusters, nodes, jobs, status history and the
catalog (read only) over a period and returns each :class:`Finding` with its evidence and the
action to take. The families live in :mod:`.usage` (idle GPUs, clusters left up, low MFU /
input-bound jobs, oversized GPUs) and :mod:`.pricing` (spot slack, cheaper regions,
commitments, a stale catalog). Moves no states. See docs/cost-audit.md.
"""

from __future__ import annotations

from gpulease.cost.audit.model import (
    DEFAULT_SINCE,
    AuditInputs,
    Finding,
    Period,
    RightsizeAnswer,
    RightsizeAsk,
    Rightsizer,
    Thresholds,
    parse_since,
)
from gpulease.cost.audit.run import audit_view, run_audit

__all__ = [
    "DEFAULT_SINCE",
    "AuditInputs",
    "Finding",
    "Period",
    "RightsizeAnswer",
    "RightsizeAsk",
    "Rightsizer",
    "Thresholds",
    "audit_view",
    "parse_since",
    "run_audit",
]
