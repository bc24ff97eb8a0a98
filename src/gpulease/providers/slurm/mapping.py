"""Slurm jobs (``squeue --json``) → :class:`Instance` states and ids. Pure functions.

A job is one allocation; its nodes are the instances ``<job id>.<node index>`` (the index is
``SLURM_NODEID``: the node's place in the job's sorted node list), node_rank = index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpulease.providers.base import InstanceState

_S = InstanceState
_WAITING = {
    "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
    "SUSPENDED", "RESIZING", "POWER_UP_NODE",
}  # fmt: skip
_ENDING = {"COMPLETING", "SIGNALING", "STAGE_OUT", "STOPPED"}
#: job states that mean the nodes were taken away (→ a PREEMPTED event)
TAKEN = {"PREEMPTED", "NODE_FAIL", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}


def job_state(job: Mapping[str, Any]) -> str:
    state = job.get("job_state")
    if isinstance(state, list):
        state = state[0] if state else ""
    return str(state or "").upper()


def instance_state(state: str, agent_known: bool) -> InstanceState:
    """A node's state from its job's state (RUNNING only once the agent wrote its port)."""
    if state in _WAITING:
        return _S.PENDING
    if state == "RUNNING":
        return _S.RUNNING if agent_known else _S.PENDING
    if state in _ENDING:
        return _S.TERMINATING
    return _S.TERMINATED


def instance_id(job_id: int | str, index: int) -> str:
    return f"{job_id}.{index}"


def split_id(instance_id_: str) -> tuple[str, int] | None:
    """``"123.1"`` → ("123", 1); None for ids that are not ours."""
    job, _, index = instance_id_.partition(".")
    if not job.isdigit() or not index.isdigit():
        return None
    return job, int(index)


def number(value: Any) -> int:
    """Slurm's JSON numbers: plain ints, or ``{"set": …, "number": …}`` in newer versions."""
    if isinstance(value, Mapping):
        value = value.get("number", 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
