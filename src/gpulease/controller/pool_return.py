"""A pool node going back to its pool when the managed job on it is done with it — whether the
job's task succeeded, failed or was cancelled — as long as the node itself is healthy; the jobs
loop's ``EndAttempt`` on a pool node (:mod:`~gpulease.controller.job_loop`) asks here first.

The node goes back idle only when

- it is a node of the pool the job holds (``clusters.job_id``), every one of its nodes READY
  (a preempted, lost or failed node, or one with a preemption notice — the task then ended
  ``infra`` — is torn down as any attempt cluster is);
- the cluster rests SUCCEEDED, or FAILED by the user's task (``failure = "task"``), or still
  SETTING_UP or RUNNING the job's task (a cancel, a job ended by a timeout): then the task is
  **stopped first** (the agents' cancel, once the cluster loop submitted it) and the node given
  back once the cluster loop saw it end (FAILED, by the task: cancelled);
- every node's agent answers that the job's task is over (none running on it), and the job's
  checkpoint directory on each node is removed (with the job's environment, when it lies in the
  node's work dir — :data:`CLEAN_CHECKPOINTS`): the next job must not resume from this one's
  checkpoint; the job's store keeps it for the job itself.

Then, in one transaction: a FAILED node moves ``failed → succeeded`` (compare-and-set), ``job_id``
becomes NULL and the node's ledger rows are split (:func:`~gpulease.controller.pool_jobs.
release_node`). States moved: pool node clusters FAILED → SUCCEEDED.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from sqlalchemy.orm import Session

from gpulease.controller.document import cluster_task_id
from gpulease.controller.ports import AgentConnector, Liveness, NodeRef
from gpulease.errors import GpuleaseError, Retryable
from gpulease.state import Cluster, ClusterStatus, NodeState, list_nodes
from gpulease.wire import TaskState

log = logging.getLogger("gpulease.controller.jobs")

_C = ClusterStatus
_LIVE = (_C.SETTING_UP, _C.RUNNING)  # the job's task submitted or about to be, or running
# The job's checkpoint dir emptied when it lies inside the node's work dir (the default,
# ``work/checkpoints``, shared by the tasks run on the node one after the other); one elsewhere
# (an absolute ``checkpoint.dir``: a shared file system, say) is the user's and left alone.
CLEAN_CHECKPOINTS = (
    'w=$(pwd -P); cd -- "$GPULEASE_CHECKPOINT_DIR" 2>/dev/null || exit 0; d=$(pwd -P); '
    'case "$d" in "$w"/*) cd / && rm -rf -- "$d" ;; esac'
)
CLEAN_TIMEOUT_S = 60.0


class Outcome(Enum):
    """What :func:`settle` found: the node is ``CLEAN`` (give it back now), its task is being
    ``STOPPING`` or the node still ``BUSY`` (a task not over, an agent that did not answer this
    time: ask again next step), or it is ``UNFIT`` (tear it down)."""

    CLEAN = "clean"
    STOPPING = "stopping"
    BUSY = "busy"
    UNFIT = "unfit"


@dataclass(frozen=True, slots=True)
class Handback:
    """A pool node the job may give back: its agents, the job's task id on it, and whether the
    task still runs (``stop_first``)."""

    cluster_id: int
    task_id: str
    refs: tuple[NodeRef, ...]
    stop_first: bool


def handback_of(session: Session, cluster: Cluster, job_id: int) -> Handback | None:
    """How ``cluster`` goes back to its pool; None when it is no pool node of ``job_id`` or is not
    healthy (see the module docstring): it is then torn down."""
    if cluster.pool_id is None or cluster.job_id != job_id:
        return None
    if cluster.status is _C.FAILED and cluster.failure != "task":
        return None
    if cluster.status not in (_C.SUCCEEDED, _C.FAILED, *_LIVE):
        return None
    nodes = [n for n in list_nodes(session, cluster.id) if n.state is not NodeState.TERMINATED]
    if len(nodes) != cluster.num_nodes or any(n.state is not NodeState.READY for n in nodes):
        return None
    if any(not n.agent_url for n in nodes):
        return None
    refs = tuple(NodeRef(n.provider, n.instance_id, n.agent_url or "") for n in nodes)
    task_id = cluster_task_id(cluster.name, cluster.id, cluster.task)
    return Handback(cluster.id, task_id, refs, stop_first=cluster.status in _LIVE)


def settle(agents: AgentConnector, hb: Handback) -> Outcome:
    """Make the node fit for the next job: stop the job's task (when it still runs), check that
    no node runs it any more, empty its checkpoint directory. Agent calls only; no DB."""
    reports = [agents.agent(ref).poll(hb.task_id) for ref in hb.refs]
    if any(r.liveness is Liveness.DEAD for r in reports):
        return Outcome.UNFIT
    if any(r.liveness is not Liveness.ALIVE for r in reports):
        return Outcome.BUSY  # no answer this time: ask again (a node that stays away goes LOST)
    if hb.stop_first:
        return _stop(agents, hb, [r.task_state for r in reports])
    if any(r.task_state is not None and not r.task_state.terminal for r in reports):
        return Outcome.BUSY  # a peer's task is still being cancelled
    return _clean(agents, hb)


def _clean(agents: AgentConnector, hb: Handback) -> Outcome:
    """Remove the job's checkpoint dir on every node (:data:`CLEAN_CHECKPOINTS`)."""
    for ref in hb.refs:
        try:
            done = agents.agent(ref).exec(hb.task_id, CLEAN_CHECKPOINTS, CLEAN_TIMEOUT_S)
        except Retryable as exc:
            log.info("pool node %s: checkpoints not cleaned yet: %s", ref.instance_id, exc)
            return Outcome.BUSY
        except GpuleaseError as exc:
            log.info("pool node %s: checkpoints not cleaned: %s", ref.instance_id, exc)
            return Outcome.UNFIT
        if done.exit_code != 0:
            log.info("pool node %s: checkpoints not cleaned: %s", ref.instance_id, done.output)
            return Outcome.UNFIT
    return Outcome.CLEAN


def _stop(agents: AgentConnector, hb: Handback, states: list[TaskState | None]) -> Outcome:
    """Cancel the job's task wherever it runs; while no node has it yet (the cluster loop is
    still submitting it), wait for it."""
    running = [ref for ref, state in zip(hb.refs, states, strict=True)
               if state is not None and not state.terminal]  # fmt: skip
    if not running:
        return Outcome.BUSY  # not submitted yet, or ended: the cluster loop moves on first
    delivered = 0
    for ref in running:
        try:
            agents.agent(ref).cancel(hb.task_id)
            delivered += 1
        except GpuleaseError as exc:
            log.info("pool node %s: the task not cancelled: %s", ref.instance_id, exc)
    return Outcome.STOPPING if delivered else Outcome.BUSY
