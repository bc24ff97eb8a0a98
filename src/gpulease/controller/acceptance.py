"""Acceptance on launch: once every node of a cluster whose task sets ``resources.acceptance`` is
up, and before ``setup``, the quick bench runs on every node at once (a node task of its own,
``<task>-accept-<round>``, meeting on node 0's address for the cross-node checks); each node's
report is judged against its peers, the task's minimums and ``min_ratio``. A node that fails is
terminated and replaced (a new node of the same rank, launched under an intent of its own; at
most ``max_replacements`` per launch target), then the bench runs again; past that the target is
given up (the failover path). Every failing node is remembered in the launch document with its
offer, so the server ranks that offer down for ``degraded_for`` (:mod:`.acceptance_store`).

Owns :class:`AcceptancePolicy` (the task's settings, from ``RunSpec.acceptance``),
:class:`AcceptanceState` (the document's ``acceptance`` key: round, replacements, passed, the
failures) and the SETTING_UP rule :func:`accepting`. Pure: moves no states itself (it returns
actions).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpulease.bench.judge import against_history, against_minimums, against_peers
from gpulease.bench.options import BenchOptions, Expected, Rendezvous, bench_argv
from gpulease.bench.report import BenchReport, Check
from gpulease.controller import running
from gpulease.controller.actions import (
    Action,
    RecordAcceptance,
    ReplaceNodes,
    SubmitTask,
    Terminate,
)
from gpulease.controller.document import node_task
from gpulease.controller.ports import Liveness
from gpulease.controller.rules import (
    ReconcileConfig,
    active_nodes,
    agent_ports,
    give_up_target,
    node_ips,
)
from gpulease.controller.running import fail_running, liveness
from gpulease.controller.snapshot import AcceptView, ClusterView, NodeView, Snapshot
from gpulease.state import ClusterStatus, NodeState
from gpulease.wire import TERMINAL, NodeTask, RunSpec

MAX_FAILURES_KEPT = 20  # failing nodes the document remembers (the newest)
_TRANSFER = {"h2d": "transfer", "d2h": "transfer"}


@dataclass(frozen=True, slots=True)
class AcceptancePolicy:
    """``resources.acceptance`` (docs/spec.md): see :mod:`gpulease.spec.acceptance`."""

    min_ratio: float = 0.5
    minimums: Mapping[str, float] = field(default_factory=dict)
    max_replacements: int = 2
    checks: tuple[str, ...] | None = None  # the families that count (None: all)
    degraded_for_s: float = 3600.0

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> AcceptancePolicy | None:
        if data is None:
            return None
        checks = data.get("checks")
        return cls(
            min_ratio=float(data.get("min_ratio", 0.5)),
            minimums={str(k): float(v) for k, v in (data.get("minimums") or {}).items()},
            max_replacements=int(data.get("max_replacements", 2)),
            checks=tuple(checks) if checks else None,
            degraded_for_s=float(data.get("degraded_for_s", 3600.0)),
        )

    def counts(self, check: Check) -> bool:
        """Whether the check's family is one the task judges nodes by."""
        prefix = check.name.split(".", 1)[0]
        return self.checks is None or _TRANSFER.get(prefix, prefix) in self.checks


@dataclass(frozen=True, slots=True)
class AcceptanceState:
    """Where acceptance stands, kept in the launch document: ``target`` the failovers count it
    applies to (a new target starts afresh), ``round`` the bench run under way (its task id),
    ``replacements`` the nodes replaced on this target, ``passed`` whether every node passed;
    ``failures`` every failing node's offer, check and figure (newest last; they rank the offer
    down until their ``until``); ``reports`` the last judged round, each node's checks in
    short."""

    target: int = 0
    round: int = 0
    replacements: int = 0
    passed: bool = False
    failures: tuple[Mapping[str, Any], ...] = ()
    reports: tuple[Mapping[str, Any], ...] = ()  # the last round's judged reports, in short

    @classmethod
    def of(cls, data: Mapping[str, Any] | None, failovers: int) -> AcceptanceState:
        """The state for the cluster's current target (``failovers`` so far)."""
        data = data or {}
        state = cls(
            target=int(data.get("target", 0)),
            round=int(data.get("round", 0)),
            replacements=int(data.get("replacements", 0)),
            passed=bool(data.get("passed", False)),
            failures=tuple(data.get("failures") or ()),
            reports=tuple(data.get("reports") or ()),
        )
        if state.target != failovers:  # a new target: its nodes are benched from scratch
            return cls(target=failovers, round=state.round + 1, failures=state.failures)
        return state

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "round": self.round, "replacements": self.replacements,
                "passed": self.passed, "failures": [dict(f) for f in self.failures],
                "reports": [dict(r) for r in self.reports]}  # fmt: skip


def policy_of(snap: Snapshot) -> AcceptancePolicy | None:
    return AcceptancePolicy.of(snap.cluster.document.run.acceptance)


def state_of(snap: Snapshot) -> AcceptanceState:
    return AcceptanceState.of(snap.cluster.document.acceptance, snap.cluster.failovers)


def accept_task_id(task_id: str, round_: int) -> str:
    """The node task id of acceptance round ``round_`` (within the agent's 128 characters)."""
    suffix = f"-accept-{round_}"
    return f"{task_id[: 128 - len(suffix)]}{suffix}"


def bench_command(snap: Snapshot, node: NodeView, ips: Sequence[str], port: int) -> str:
    """``python -m gpulease.bench --quick --json`` with what the offer sold and this node's place
    among the cluster's nodes (the agent puts its own Python first on PATH)."""
    target = snap.cluster.target
    gpus = bool(target.accelerator and target.gpus_per_node)
    sold = Expected(target.accelerator if gpus else None, target.gpus_per_node if gpus else None,
                    instance_type=target.instance_type or None)  # fmt: skip
    policy = policy_of(snap)
    meet = Rendezvous(ips[0], port, node.rank, len(ips)) if len(ips) > 1 else None
    options = BenchOptions(quick=True, only=tuple(policy.checks) if policy and policy.checks
                           else None, expected=sold, rendezvous=meet,
                           node=f"{node.rank}:{node.instance_id}")  # fmt: skip
    return shlex.join(bench_argv(options))


def _bench_task(snap: Snapshot, node: NodeView, nodes: Sequence[NodeView], tid: str) -> NodeTask:
    ips = node_ips(snap, nodes)
    ports = agent_ports(nodes, ips) if len(nodes) == len(ips) > 1 else ()
    target = snap.cluster.target

    def build(run: str) -> NodeTask:
        doc = replace(snap.cluster.document, run=RunSpec(run=run), checkpoint=None)
        return node_task(doc, task_id=tid, rank=node.rank, node_ips=ips,
                         gpus_per_node=target.gpus_per_node, agent_ports=ports,
                         accelerator=target.accelerator)  # fmt: skip

    port = build(":").effective_master_port()  # the same on every node: derived from the id
    return build(bench_command(snap, node, ips, port))


def judged(
    reports: Sequence[BenchReport],
    policy: AcceptancePolicy,
    history: Mapping[str, Sequence[float]] | None = None,
) -> list[BenchReport]:
    """Each report against its peers (the median of the other nodes) and its offer's history
    (``bench.judge.against_history``: the median of at least 3 past figures), the worse
    verdict winning, with ``min_ratio`` as the fail bound; then the task's minimums (which have
    the last word)."""
    peered = against_peers(reports) if len(reports) > 1 else list(reports)
    out = []
    for peer_judged in peered:
        report = against_history(peer_judged, history or {})
        checks = tuple(_bounded(c, policy.min_ratio) for c in report.checks)
        out.append(against_minimums(replace(report, checks=checks), policy.minimums))
    return out


def _bounded(check: Check, min_ratio: float) -> Check:
    if check.ratio is None or check.verdict in ("skip", "info"):
        return check
    if check.ratio < min_ratio:
        return replace(check, verdict="fail")
    return replace(check, verdict="warn") if check.verdict == "fail" else check


def describe(check: Check) -> str:
    """``matmul.fp32 0.012 TFLOP/s, 0.21 of peers (0.057)``."""
    figure = f"{check.figure:.4g} {check.unit}" if check.figure is not None else "no figure"
    if check.ratio is None or check.reference is None:
        return f"{check.name} {figure}"
    return (f"{check.name} {figure}, {check.ratio:.2f} of {check.reference_source} "
            f"({check.reference:.4g})")  # fmt: skip


def _failures(
    snap: Snapshot, nodes: Sequence[NodeView], policy: AcceptancePolicy
) -> tuple[dict[int, str], list[tuple[NodeView, BenchReport]]]:
    """(node id → why it failed (its failing checks with their figures), for the failing
    nodes; each node with its judged report)."""
    views = [snap.accept[n.id] for n in nodes]
    with_report = [(n, v.report) for n, v in zip(nodes, views, strict=True) if v.report]
    reports = judged([r for _n, r in with_report], policy, snap.accept_history)
    why: dict[int, str] = {}
    for (node, _raw), report in zip(with_report, reports, strict=True):
        bad = [c for c in report.failed() if policy.counts(c)]
        if bad:
            why[node.id] = "; ".join(describe(c) for c in bad)
    for node, view in zip(nodes, views, strict=True):
        if view.report is None:
            why[node.id] = view.detail or f"the bench ended {view.task_state} without a report"
    pairs = [(n, r) for (n, _raw), r in zip(with_report, reports, strict=True)]
    return why, pairs


def _run(node: NodeView, report: BenchReport) -> dict[str, Any]:
    """A judged report as a ``bench_runs`` row keeps it (``acceptance_store.keep_runs``)."""
    return {"rank": node.rank, "instance_id": node.instance_id, "report": report.to_json()}


def _short(node: NodeView, report: BenchReport, passed: bool) -> dict[str, Any]:
    """A judged report as the launch document keeps it: per check figure, reference, its
    source, ratio and verdict."""
    checks = {c.name: {"figure": c.figure, "unit": c.unit, "reference": c.reference,
                       "source": c.reference_source, "ratio": c.ratio, "verdict": c.verdict}
              for c in report.checks if c.verdict != "skip"}  # fmt: skip
    return {"rank": node.rank, "instance_id": node.instance_id, "passed": passed,
            "wall_s": report.wall_s, "device": report.device, "checks": checks}  # fmt: skip


def _failure_record(
    snap: Snapshot, node: NodeView, why: str, until: float, round_: int
) -> dict[str, Any]:
    t = snap.cluster.target
    return {"provider": t.provider, "region": t.region, "zone": t.zone,
            "instance_type": t.instance_type, "node": node.rank, "round": round_,
            "instance_id": node.instance_id, "why": why[:500], "at": snap.now,
            "until": until}  # fmt: skip


def accepting(snap: Snapshot, config: ReconcileConfig) -> list[Action] | None:
    """The SETTING_UP rule while acceptance is pending; None when the cluster has no acceptance
    or has passed it (then :func:`~gpulease.controller.running.setting_up` rules)."""
    policy = policy_of(snap)
    state = state_of(snap)
    if policy is None or state.passed:
        return None
    actions, dead = liveness(snap, config)
    if dead:
        return [*actions, *fail_running(snap, dead)]
    nodes = sorted(active_nodes(snap), key=lambda n: n.rank)
    if len(nodes) < snap.cluster.target.num_nodes:
        return actions  # a node went away meanwhile: the status's timeout ends the wait
    tid = accept_task_id(snap.cluster.task_id, state.round)
    views = [snap.accept.get(n.id) for n in nodes]
    if not all(v is not None and v.task_state in TERMINAL for v in views):
        return actions + _submissions(snap, nodes, views, tid)
    return actions + _verdict(snap, nodes, policy, state)


def setting_up(snap: Snapshot, config: ReconcileConfig) -> list[Action]:
    """SETTING_UP: acceptance while it is pending, then the task's own setup and run."""
    found = accepting(snap, config)
    return running.setting_up(snap, config) if found is None else found


def _submissions(
    snap: Snapshot, nodes: Sequence[NodeView], views: Sequence[AcceptView | None], tid: str
) -> list[Action]:
    out: list[Action] = []
    for node, view in zip(nodes, views, strict=True):
        report = snap.agents.get(node.id)
        alive = report is not None and report.liveness is Liveness.ALIVE
        if node.state is NodeState.READY and alive and view is not None and not view.task_state:
            out.append(SubmitTask(node.id, _bench_task(snap, node, nodes, tid)))
    return out


def _verdict(
    snap: Snapshot, nodes: Sequence[NodeView], policy: AcceptancePolicy, state: AcceptanceState
) -> list[Action]:
    why, pairs = _failures(snap, nodes, policy)
    state = replace(state, reports=tuple(_short(n, r, n.id not in why) for n, r in pairs))
    runs = tuple(_run(n, r) for n, r in pairs)
    summary = f"acceptance round {state.round}: " + (
        f"{len(nodes)} node(s) passed" if not why else
        "; ".join(f"node {n.rank} failed: {why[n.id]}" for n in nodes if n.id in why)
    )  # fmt: skip
    if not why:
        return [RecordAcceptance(replace(state, passed=True).to_json(), summary, runs)]
    failing = [n for n in nodes if n.id in why]
    until = snap.now + policy.degraded_for_s
    seen = {(f.get("instance_id"), f.get("round")) for f in state.failures}
    fresh = [_failure_record(snap, n, why[n.id], until, state.round) for n in failing]
    records = [r for r in fresh if (r["instance_id"], r["round"]) not in seen]  # once each
    failures = (*state.failures, *records)[-MAX_FAILURES_KEPT:]
    some = len(failing) < len(nodes) or len(nodes) == 1  # all of several failing: the offer's
    if state.replacements + len(failing) <= policy.max_replacements and some:
        after = replace(state, round=state.round + 1, failures=failures,
                        replacements=state.replacements + len(failing))  # fmt: skip
        reasons = {n.id: f"acceptance failed: {why[n.id]}" for n in failing}
        replacing = f"{summary}; replacing {len(failing)} (replacements {after.replacements} of " \
                    f"{policy.max_replacements})"  # fmt: skip
        # the rows first (intent before side effect), then the provider call
        return [ReplaceNodes(reasons, after.to_json(), replacing, runs), *_terminate(failing)]
    after = replace(state, failures=failures)
    left = "no replacement left" if some else "every node failed"
    error = f"{summary} ({left})"
    return [RecordAcceptance(after.to_json(), error, runs), *give_up_target(snap, error)]


def _terminate(nodes: Sequence[NodeView]) -> list[Action]:
    by_provider: dict[str, list[str]] = {}
    for node in nodes:
        by_provider.setdefault(node.provider, []).append(node.instance_id)
    return [Terminate(p, tuple(ids)) for p, ids in sorted(by_provider.items())]


def replacement_ranks(snap: Snapshot, instance_ids: Sequence[str]) -> dict[str, int]:
    """The ranks of instances a replacement launch returned (instance id → rank): the ranks no
    active node holds, in order; {} for a launch of the whole target, or instances already
    recorded."""
    if len(instance_ids) >= snap.cluster.target.num_nodes:
        return {}
    held = {n.rank for n in active_nodes(snap)}
    free = [r for r in range(snap.cluster.target.num_nodes) if r not in held]
    known = {n.instance_id for n in snap.nodes}
    fresh = [i for i in instance_ids if i not in known]
    return dict(zip(fresh, free, strict=False))


def pending_task_id(cluster: ClusterView) -> str | None:
    """The acceptance task id to poll for a SETTING_UP cluster whose acceptance is pending,
    else None (for the observer)."""
    if cluster.status is not ClusterStatus.SETTING_UP or cluster.document.run.acceptance is None:
        return None
    state = AcceptanceState.of(cluster.document.acceptance, cluster.failovers)
    return None if state.passed else accept_task_id(cluster.task_id, state.round)
