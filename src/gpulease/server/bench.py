"""``gpulease bench CLUSTER`` on the server: run ``python -m gpulease.bench --json`` on every
node of a running cluster at once (through each node's agent, as ``exec`` does: in the
environment of the cluster's task), read each node's report from its output's marker line,
judge the reports against each other (:func:`gpulease.bench.judge.against_peers`) and against
the same instance type's stored runs (:func:`~gpulease.bench.judge.against_history`), store them
(``bench_runs``) and rewrite the home's ``bench/observed.json`` summary for ``plan --observed``.

Each node is told what its offer sold (accelerator, GPUs, their memory and interconnect, the
instance type), its work dir, the task's checkpoint store and — on more than one node — a
rendezvous (node 0's address, a port free there) for ``allreduce.cluster`` and ``net.latency``.
Moves no states; records activity on the cluster (a bench is use, for autostop).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from gpulease.bench.judge import against_history, against_peers
from gpulease.bench.observed import BenchSample, summarise, write_observed
from gpulease.bench.options import BenchOptions, Expected, bench_argv, known_families
from gpulease.bench.report import VERDICTS, BenchReport, Verdict, report_from_output
from gpulease.clock import Clock
from gpulease.controller import NodeRef
from gpulease.controller.document import LaunchDocument, cluster_task_id
from gpulease.errors import Permanent, Retryable, UserInputError
from gpulease.server.service import AgentUnreachable, ClusterService, Conflict, NotFound
from gpulease.state import (
    ClusterStatus,
    NodeState,
    get_cluster_by_name,
    list_nodes,
    record_activity,
    session_scope,
)
from gpulease.state.bench import BenchRun, list_bench_runs

QUICK_TIMEOUT_S = 600.0  # the quick subset targets 30 s; a slow node gets twenty times that
FULL_TIMEOUT_S = 3600.0
OBSERVED_EVERY_S = 30.0  # how often the server looks for runs stored since the summary was written
HISTORY_RUNS = 50  # the newest runs of the same instance type (and quick or not) judged against
BENCHABLE = frozenset({ClusterStatus.RUNNING, ClusterStatus.SUCCEEDED, ClusterStatus.FAILED})
FREE_PORT = ("python -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); "
             "print(s.getsockname()[1])'")  # fmt: skip


def bench_timeout_s(quick: bool) -> float:
    return QUICK_TIMEOUT_S if quick else FULL_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class BenchNode:
    """One node of the cluster being benched."""

    rank: int
    ref: NodeRef


@dataclass(frozen=True, slots=True)
class BenchTarget:
    """The cluster as the bench needs it: its nodes by rank, the task they run, and what the
    cluster's offer sold."""

    name: str
    task_id: str
    nodes: tuple[BenchNode, ...]
    provider: str
    region: str | None
    instance_type: str | None
    accelerator: str | None
    gpus_per_node: int
    store: str | None


def check_only(only: Sequence[str] | None) -> tuple[str, ...] | None:
    """The families asked for, each one known (a bad one names ``only``)."""
    if not only:
        return None
    try:
        return known_families(only, field="only")
    except ValueError as exc:
        raise UserInputError(str(exc)) from None


class BenchService:
    """Bench runs on clusters, and their stored history."""

    def __init__(self, engine: Engine, clusters: ClusterService, *, home: Path,
                 clock: Clock) -> None:  # fmt: skip
        self.engine = engine
        self.clusters = clusters
        self.home = home
        self.clock = clock
        self._observed_upto: int | None = None  # the newest run the summary was written with

    def run(self, name: str, *, quick: bool = False,
            only: Sequence[str] | None = None) -> dict[str, Any]:  # fmt: skip
        """Bench every node of cluster ``name`` at once; every node's judged report (or why it
        has none), the worst verdict, and where the observed summary went."""
        families = check_only(only)
        target = self._target(name)
        started = self.clock.now()
        port = self._free_port(target) if len(target.nodes) > 1 else None
        expected = self._expected(target)
        commands = [bench_command(target, node, expected, quick=quick, only=families, port=port)
                    for node in target.nodes]  # fmt: skip
        timeout = bench_timeout_s(quick)
        with ThreadPoolExecutor(max_workers=len(target.nodes)) as pool:
            outputs = list(pool.map(lambda n, c: self._exec(target, n, c, timeout),
                                    target.nodes, commands))  # fmt: skip
        reports = {n.rank: r for n, (r, _err) in zip(target.nodes, outputs, strict=True) if r}
        judged = self._judged(target, quick, reports)
        self._store(target, judged, quick, started)
        path = self.write_observed()
        self._touch(name)
        errors = {n.rank: err for n, (_r, err) in zip(target.nodes, outputs, strict=True)}
        nodes = [_node_answer(node, judged.get(node.rank), errors[node.rank])
                 for node in target.nodes]  # fmt: skip
        return {"cluster": name, "quick": quick, "started_at": started,
                "verdict": _worst(n["verdict"] for n in nodes), "nodes": nodes,
                "observed": str(path)}  # fmt: skip

    # ---- the cluster and its nodes ----------------------------------------------------------

    def _target(self, name: str) -> BenchTarget:
        with session_scope(self.engine) as session:
            cluster = get_cluster_by_name(session, name)
            if cluster is None:
                raise NotFound(f"no cluster named {name!r}")
            if cluster.status not in BENCHABLE:
                raise Conflict(f"cluster {name!r} is {cluster.status.value}: bench needs its "
                               "nodes up (running, succeeded or failed)")  # fmt: skip
            latest: dict[int, BenchNode] = {}
            for node in list_nodes(session, cluster.id):
                if node.state is NodeState.READY and node.agent_url:
                    ref = NodeRef(node.provider, node.instance_id, node.agent_url)
                    latest[node.node_rank] = BenchNode(node.node_rank, ref)
            missing = [r for r in range(cluster.num_nodes) if r not in latest]
            if missing:
                raise Conflict(f"cluster {name!r}: node(s) {', '.join(map(str, missing))} not "
                               "up: bench needs every node")  # fmt: skip
            doc = LaunchDocument.from_json(cluster.task)
            return BenchTarget(
                name=name, task_id=cluster_task_id(cluster.name, cluster.id, cluster.task),
                nodes=tuple(latest[r] for r in range(cluster.num_nodes)),
                provider=cluster.provider, region=cluster.region,
                instance_type=cluster.instance_type, accelerator=cluster.accelerator,
                gpus_per_node=cluster.gpus_per_node,
                store=doc.checkpoint.store if doc.checkpoint else None,
            )  # fmt: skip

    def _expected(self, target: BenchTarget) -> Expected:
        """What the offer sold: its accelerator and GPUs, with memory and interconnect from the
        catalog's spec of its part (only the instance type for a CPU node)."""
        if target.gpus_per_node <= 0 or not target.accelerator:
            return Expected(instance_type=target.instance_type)
        memory, link = None, None
        catalog = self.clusters.catalog()
        offers = catalog.offers
        rows = ((offers.provider == target.provider)
                & (offers.instance_type == target.instance_type)).nonzero()[0]  # fmt: skip
        if rows.size:
            spec = catalog.accelerators.get(str(offers.part[rows[0]]))
            if spec is not None:
                memory = spec.memory_gb
                link = spec.interconnect if spec.interconnect in ("nvlink", "pcie") else None
        return Expected(target.accelerator, target.gpus_per_node, memory, link,
                        target.instance_type)  # fmt: skip

    def _free_port(self, target: BenchTarget) -> int:
        output, error = self._run(target, target.nodes[0], FREE_PORT, 60.0)
        try:
            return int((output or "").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise Conflict(f"cluster {target.name!r}: node 0 found no free port for the "
                           f"rendezvous: {error or output}") from None  # fmt: skip

    def _exec(self, target: BenchTarget, node: BenchNode, command: str,
              timeout_s: float) -> tuple[BenchReport | None, str | None]:  # fmt: skip
        """The node's report, or None and why (an agent that does not answer included)."""
        try:
            output, error = self._run(target, node, command, timeout_s)
        except AgentUnreachable as exc:
            return None, str(exc)
        if output is None:
            return None, error
        try:
            report = report_from_output(output)
        except (ValueError, TypeError, KeyError) as exc:
            return None, f"node {node.rank}: unreadable report: {exc}"
        if report is None:
            return None, f"node {node.rank}: no report in its output ({error}): {output[-2000:]}"
        return report, None

    def _run(self, target: BenchTarget, node: BenchNode, command: str,
             timeout_s: float) -> tuple[str | None, str | None]:  # fmt: skip
        try:
            result = self.clusters.agents.agent(node.ref).exec(target.task_id, command, timeout_s)
        except Retryable as exc:
            raise AgentUnreachable(f"cluster {target.name!r}: node {node.rank} did not answer: "
                                   f"{exc}") from None  # fmt: skip
        except Permanent as exc:
            return None, f"node {node.rank}: {exc}"
        if result.timed_out:
            return result.output, f"timed out after {timeout_s:g} s"
        return result.output, f"exit code {result.exit_code}"

    def _touch(self, name: str) -> None:
        with session_scope(self.engine) as session:
            cluster = get_cluster_by_name(session, name)
            if cluster is not None:
                record_activity(session, cluster.id, now=self.clock.now())

    # ---- judging and keeping ----------------------------------------------------------------

    def _judged(self, target: BenchTarget, quick: bool,
                reports: Mapping[int, BenchReport]) -> dict[int, BenchReport]:  # fmt: skip
        """Each report against its peers, then against its instance type's history (runs of
        the same kind, quick or full: their sizes differ); by rank."""
        history = self._history_figures(target, quick)
        ranks = sorted(reports)
        peers = against_peers([reports[r] for r in ranks])
        return {r: against_history(p, history) for r, p in zip(ranks, peers, strict=True)}

    def _history_figures(self, target: BenchTarget, quick: bool) -> dict[str, list[float]]:
        figures: dict[str, list[float]] = {}
        if target.instance_type is None:
            return figures
        with session_scope(self.engine) as session:
            runs = list_bench_runs(session, provider=target.provider,
                                   instance_type=target.instance_type, quick=quick,
                                   limit=HISTORY_RUNS)  # fmt: skip
            for run in runs:
                for check in run.report.get("checks", ()):
                    if isinstance(check.get("figure"), int | float):
                        figures.setdefault(check["name"], []).append(float(check["figure"]))
        return figures

    def _store(self, target: BenchTarget, judged: Mapping[int, BenchReport], quick: bool,
               started: float) -> None:  # fmt: skip
        with session_scope(self.engine) as session:
            for rank, report in sorted(judged.items()):
                node = target.nodes[rank]
                session.add(BenchRun(
                    cluster=target.name, node_rank=rank, instance_id=node.ref.instance_id,
                    provider=target.provider, region=target.region,
                    instance_type=target.instance_type, accelerator=target.accelerator,
                    started_at=started, quick=quick, verdict=report.verdict,
                    report=report.to_json(),
                ))  # fmt: skip

    def refresh_observed(self) -> bool:
        """Rewrite the observed summary when runs were stored since it was last written — by
        acceptance on launch (the reconcile loop keeps its rounds' reports) or by another
        server process; True when it was rewritten. The server runs it every
        :data:`OBSERVED_EVERY_S` (and once at start)."""
        with session_scope(self.engine) as session:
            newest = session.scalar(select(func.max(BenchRun.id)))
        if newest is None or newest == self._observed_upto:
            return False
        self.write_observed()
        return True

    def write_observed(self) -> Path:
        """Rewrite ``<home>/bench/observed.json`` from every stored run (idempotent)."""
        with session_scope(self.engine) as session:
            runs = list_bench_runs(session)
            samples = [BenchSample(r.provider, r.instance_type, r.accelerator, r.report)
                       for r in runs]  # fmt: skip
            newest = max((r.id for r in runs), default=None)
        path = write_observed(self.home, summarise(samples, now=self.clock.now()))
        self._observed_upto = newest
        return path

    def history(self, *, provider: str | None = None, instance_type: str | None = None,
                cluster: str | None = None, limit: int = 20) -> dict[str, Any]:  # fmt: skip
        """The stored runs, newest first (``GET /v1/bench``)."""
        if not 1 <= limit <= 1000:
            raise UserInputError("limit: between 1 and 1000")
        with session_scope(self.engine) as session:
            runs = list_bench_runs(session, provider=provider, instance_type=instance_type,
                                   cluster=cluster, limit=limit)  # fmt: skip
            return {"runs": [r.view() for r in runs]}


def node_name(target: BenchTarget, node: BenchNode) -> str:
    """The report's node name: the cluster, the rank and the instance."""
    return f"{target.name}/{node.rank}:{node.ref.instance_id}"


def bench_command(target: BenchTarget, node: BenchNode, expected: Expected, *,
                  quick: bool, only: Sequence[str] | None, port: int | None) -> str:  # fmt: skip
    """The shell command the node's agent runs (in the task's work dir; node 0's address comes
    from the task's environment: ``MASTER_ADDR``)."""
    options = BenchOptions(quick=quick, only=tuple(only) if only else None, store=target.store,
                           expected=expected, node=node_name(target, node))  # fmt: skip
    line = shlex.join(bench_argv(options))
    if port is not None:
        line += (f' --rendezvous "$MASTER_ADDR:{port}" --rank {node.rank} '
                 f"--world {len(target.nodes)}")  # fmt: skip
    return line


def _node_answer(node: BenchNode, report: BenchReport | None, error: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"rank": node.rank, "instance_id": node.ref.instance_id}
    if report is None:
        return {**entry, "verdict": "fail", "error": error}
    return {**entry, "verdict": report.verdict, "report": report.to_json()}


def _worst(verdicts: Iterable[str]) -> Verdict:
    found = set(verdicts)
    return next((v for v in VERDICTS if v in found), "skip")
