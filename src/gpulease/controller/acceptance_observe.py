"""What the observer adds for a cluster being accepted (:mod:`.acceptance`): one poll of each
node's acceptance task, and for a task that ended, its output read back from the agent and the
bench report it ends with (``GPULEASE-BENCH-REPORT {json}``, ``bench.report.report_from_output``).
Never raises for an agent that does not answer (its view is left out: nothing is concluded this
pass). Also the history a round is judged by: the same offer's past quick runs
(:func:`history_figures`). Moves no states.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from sqlalchemy.orm import Session

from gpulease.bench.report import report_from_output
from gpulease.controller.ports import AgentPort, AgentReport, Liveness
from gpulease.controller.snapshot import AcceptView, ClusterView
from gpulease.errors import GpuleaseError
from gpulease.state.bench import list_bench_runs
from gpulease.wire import TERMINAL

log = logging.getLogger("gpulease.controller")

MAX_LOG_BYTES = 8 << 20  # a bench's output is a few KiB; more is not read
HISTORY_RUNS = 50  # the newest quick runs of the same offer that judge a round (as bench CLUSTER)


def history_figures(session: Session, cluster: ClusterView) -> dict[str, tuple[float, ...]]:
    """Check name → the figures of the newest quick ``bench_runs`` of the cluster's provider and
    instance type, its own runs left out (a replaced node's figures must not judge its
    successor)."""
    target = cluster.target
    if target.instance_type is None:
        return {}
    runs = list_bench_runs(session, provider=target.provider, instance_type=target.instance_type,
                           quick=True, limit=HISTORY_RUNS)  # fmt: skip
    figures: dict[str, list[float]] = {}
    for run in runs:
        if run.cluster == cluster.name:
            continue
        for check in run.report.get("checks", ()):
            if isinstance(check.get("figure"), int | float):
                figures.setdefault(str(check["name"]), []).append(float(check["figure"]))
    return {name: tuple(found) for name, found in figures.items()}


def accept_views(
    agents: Iterable[tuple[int, AgentPort]], task_id: str, alive: Mapping[int, AgentReport]
) -> dict[int, AcceptView]:
    """node id → its acceptance view, for the nodes whose agent answered this pass."""
    views: dict[int, AcceptView] = {}
    for node_id, agent in agents:
        seen = alive.get(node_id)
        if seen is None or seen.liveness is not Liveness.ALIVE:
            continue
        try:
            report = agent.poll(task_id)
            if report.liveness is not Liveness.ALIVE:
                continue
            views[node_id] = _view(agent, task_id, report)
        except GpuleaseError as exc:
            log.info("acceptance %s on node %s: no answer: %s", task_id, node_id, exc)
    return views


def _view(agent: AgentPort, task_id: str, report: AgentReport) -> AcceptView:
    if report.task_state not in TERMINAL:
        return AcceptView(report.task_state)
    text = _output(agent, task_id)
    try:
        found = report_from_output(text)
    except (ValueError, TypeError, KeyError) as exc:
        return AcceptView(report.task_state, detail=f"the bench's report is unreadable: {exc}")
    if found is None:
        code = f" (exit code {report.exit_code})" if report.exit_code is not None else ""
        last = text.strip().splitlines()[-1:] or ["no output"]
        return AcceptView(report.task_state, detail=f"the bench ended {report.task_state}{code} "
                          f"without a report: {last[0][:200]}")  # fmt: skip
    return AcceptView(report.task_state, report=found)


def _output(agent: AgentPort, task_id: str) -> str:
    data = bytearray()
    offset = 0
    while len(data) < MAX_LOG_BYTES:
        chunk = agent.logs(task_id, offset)
        data += chunk.data
        if chunk.complete or chunk.next_offset <= offset:
            break
        offset = chunk.next_offset
    return data.decode("utf-8", "replace")
