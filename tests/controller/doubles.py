"""Doubles for the reconciler's unit tests: an in-memory provider (idempotent launches by request
id, terminate confirmed only by a LATER ``list_instances``, scripted capacity errors and outages)
and in-memory agents whose answers and task states the test sets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpulease.controller import AgentReport, Liveness, NodeRef
from gpulease.errors import Retryable
from gpulease.providers.base import (
    CapacityError,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    ProviderEvent,
    ProviderUnavailable,
    SupportsStopStart,
)
from gpulease.state import hash_token
from gpulease.wire import ExecResult, LogChunk, NodeTask, TaskState

S = InstanceState


class FakeProvider(Provider, SupportsStopStart):
    name = "fake"

    def __init__(self, name: str = "fake") -> None:
        self.name = name
        self.instances: dict[str, Instance] = {}
        self.by_request: dict[str, list[str]] = {}
        self.launch_calls: list[str] = []
        self.requests: list[LaunchRequest] = []  # every launch's request, in order
        self.terminate_calls: list[list[str]] = []
        self.no_capacity: set[str | None] = set()  # regions that refuse every launch
        self.unavailable = 0  # the next N calls raise ProviderUnavailable
        self.boot_running = True  # launched instances are RUNNING at once
        self._closing: dict[str, InstanceState] = {}  # confirmed on the next list
        self.events: list[ProviderEvent] = []  # handed out by the next poll_events

    def launch(self, request: LaunchRequest) -> list[Instance]:
        self.launch_calls.append(request.request_id)
        self.requests.append(request)
        self._maybe_unavailable()
        if request.region in self.no_capacity:
            raise CapacityError(f"no capacity in {request.region}", region=request.region)
        if request.request_id not in self.by_request:
            ids = []
            for rank in range(request.num_nodes):
                iid = f"{self.name}-{request.request_id[:8]}-{rank}"
                self.instances[iid] = Instance(
                    id=iid,
                    provider=self.name,
                    state=S.RUNNING if self.boot_running else S.PENDING,
                    tags=request.all_tags(),
                    region=request.region,
                    node_rank=rank,
                    private_ip=f"10.0.0.{rank + 1}",
                    agent_url=f"http://agent/{iid}",
                )
                ids.append(iid)
            self.by_request[request.request_id] = ids
        return [self.instances[i] for i in self.by_request[request.request_id]]

    def terminate(self, instance_ids: list[str]) -> None:
        self.terminate_calls.append(list(instance_ids))
        self._maybe_unavailable()
        for iid in instance_ids:
            if iid in self.instances and self.instances[iid].state is not S.TERMINATED:
                self._set(iid, S.TERMINATING)
                self._closing[iid] = S.TERMINATED

    def stop(self, instance_ids: list[str]) -> None:
        for iid in instance_ids:
            if self.instances[iid].state is not S.RUNNING:
                continue
            self._set(iid, S.STOPPING)
            self._closing[iid] = S.STOPPED

    def start(self, instance_ids: list[str]) -> None:
        for iid in instance_ids:
            self._set(iid, S.RUNNING)
            inst = self.instances[iid]
            self.instances[iid] = replace(inst, agent_url=f"{inst.agent_url}/restarted")

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        self._maybe_unavailable()
        found = [
            i for i in self.instances.values() if all(i.tags.get(k) == v for k, v in tags.items())
        ]
        for iid, state in list(self._closing.items()):  # confirmed from the next listing on
            self._set(iid, state)
            del self._closing[iid]
        return [i for i in found if i.state is not S.TERMINATED]

    def poll_events(self) -> list[ProviderEvent]:
        events, self.events = self.events, []
        return events

    def vanish(self, iid: str) -> None:
        self._set(iid, S.TERMINATED)

    def live(self) -> list[str]:
        return [i for i, inst in self.instances.items() if inst.state is not S.TERMINATED]

    def _set(self, iid: str, state: InstanceState) -> None:
        self.instances[iid] = replace(self.instances[iid], state=state)

    def _maybe_unavailable(self) -> None:
        if self.unavailable > 0:
            self.unavailable -= 1
            raise ProviderUnavailable("throttled", delay=1.0)


@dataclass
class FakeAgent:
    alive: bool = True
    task: NodeTask | None = None
    state: str | None = None
    exit_code: int | None = None
    step: str | None = None  # of a task that ended badly: setup, run, file sync, ...
    detail: str | None = None
    submits: int = 0
    cancels: int = 0
    log: bytes = b""
    preempts: list[tuple[str, float]] = field(default_factory=list)  # (task id, grace s)


class Unavailable(Retryable):
    pass


@dataclass
class FakeAgents:
    """Agents by instance id (created on first use)."""

    by_instance: dict[str, FakeAgent] = field(default_factory=dict)

    def __getitem__(self, instance_id: str) -> FakeAgent:
        return self.by_instance.setdefault(instance_id, FakeAgent())

    def agent(self, node: NodeRef) -> _Port:
        return _Port(self[node.instance_id])

    def token_hash(self, provider: str, instance_id: str) -> str | None:
        return hash_token(f"token-{instance_id}")

    def forget(self, node: NodeRef) -> None:
        pass

    def finish_all(self, state: str = "SUCCEEDED", code: int = 0) -> None:
        for agent in self.by_instance.values():
            if agent.task is not None:
                agent.state, agent.exit_code = state, code


@dataclass
class _Port:
    a: FakeAgent

    def _check(self) -> None:
        if not self.a.alive:
            raise Unavailable("no answer")

    def poll(self, task_id: str) -> AgentReport:
        if not self.a.alive:
            return AgentReport(Liveness.UNKNOWN)
        if self.a.task is None or self.a.task.task_id != task_id:
            return AgentReport(Liveness.ALIVE)
        a = self.a
        state = TaskState(a.state) if a.state else None
        return AgentReport(Liveness.ALIVE, state, a.exit_code, step=a.step, detail=a.detail)

    def submit(self, task: NodeTask) -> None:
        self._check()
        self.a.submits += 1
        if self.a.task is None:
            self.a.task, self.a.state = task, "RUNNING"

    def cancel(self, task_id: str) -> None:
        self._check()
        self.a.cancels += 1
        self.a.state = "CANCELLED"

    def preempt(self, task_id: str, grace_s: float) -> None:
        self._check()
        self.a.preempts.append((task_id, grace_s))

    def logs(self, task_id: str, offset: int, limit: int | None = None) -> LogChunk:
        self._check()
        data = self.a.log[offset:]
        state = TaskState(self.a.state or TaskState.PENDING)
        return LogChunk(data, offset, offset + len(data), state is TaskState.SUCCEEDED, state)

    def exec(self, task_id: str, command: str, timeout_s: float) -> ExecResult:
        self._check()
        return ExecResult(0, f"ran {command}", False)
