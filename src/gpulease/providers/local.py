"""The ``local`` provider (the default): this machine as N virtual nodes.

A node is an agent process (``python -m gpulease.agent serve``, started by its CLI contract — this
module imports no agent code) that leads its own session, with its own directory, bearer token,
loopback port and fake GPUs (``CUDA_VISIBLE_DEVICES`` in the agent's environment, which its jobs
inherit; the agent reports them, ``--fake-gpus``, with the load scripted by
``providers.local.gpu_load``). Jobs run in process groups of the agent's session, so the node's
processes are exactly that session's.

Files under ``root`` (``gpulease.config.home()/local`` by default)::

    instances/<id>.json    the registry — this provider's "cloud" (see _local_registry)
    nodes/<id>/token       the agent's bearer token (0600; :meth:`LocalProvider.node_token`)
    nodes/<id>/port        the port the agent bound (written by the agent)
    nodes/<id>/agent.log   the agent's own log
    nodes/<id>/node/       the agent's node dir: work/, tasks/, checkpoints/, heartbeat
    venvs/                 the task environments every node's agent shares (``--venv-root``):
                           one venv per setup script, made once, seeing the server's packages

States it moves (InstanceState): PENDING (intent written, agent starting) → RUNNING (the agent
answered ``/v1/health``) → STOPPING → STOPPED → PENDING (``start``); any → TERMINATING →
TERMINATED. STOPPED and TERMINATED are reported only once the process table shows no process of
the node's session; a node whose processes all died on their own is TERMINATED too (with an
event). Every pass is level-triggered: what runs is read from ``/proc``, never assumed.

Timing: ``launch`` and ``start`` return as soon as every agent answers, or after ``boot_wait_s``
(default 3 s) with the slow nodes PENDING and ``agent_url`` None until a later
``list_instances``. ``terminate`` and ``stop`` send SIGTERM and return; a later
``list_instances``/``poll_events`` sends SIGKILL to what outlived ``kill_grace_s``.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from gpulease.atomic import write_atomic
from gpulease.backoff import backoff_delay
from gpulease.clock import Clock, SystemClock
from gpulease.config import home, load_config
from gpulease.errors import UserInputError
from gpulease.providers._local_containers import remove_node_containers
from gpulease.providers._local_gpus import GpuLoad, parse_gpu_load
from gpulease.providers._local_registry import NodeRecord, Registry
from gpulease.providers._procs import ProcessTable, join_cgroup, node_cgroups
from gpulease.providers.base import (
    TAG_NODE_RANK,
    CapacityError,
    EventKind,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    ProviderOffers,
    ProviderUnavailable,
    QuotaError,
    SupportsMultiNode,
    SupportsNodeToken,
    SupportsOffers,
    SupportsStopStart,
)

if TYPE_CHECKING:
    from gpulease.catalog import Catalog

AGENT_HOST = "127.0.0.1"
_S = InstanceState
_LIVE = {_S.PENDING, _S.RUNNING}
_children: list[subprocess.Popen[bytes]] = []  # agents we started: reaped on every call


class LocalProvider(
    Provider, SupportsStopStart, SupportsMultiNode, SupportsNodeToken, SupportsOffers
):
    name = "local"
    shares_files = True  # the nodes are processes on this machine

    def __init__(
        self,
        root: Path,
        *,
        clock: Clock | None = None,
        gpus: int | None = None,
        accelerator: str = "T4",
        python: str = sys.executable,
        boot_wait_s: float = 3.0,
        kill_grace_s: float = 2.0,
        keep_terminated_s: float = 86400.0,
        gpu_load: GpuLoad | None = None,
        price_per_gpu_hour: float = 0.0,
        node_cgroups: Mapping[int, Path] | None = None,
    ) -> None:
        """``gpus``: how many fake GPUs the machine has (None: as many as asked for; it then
        sells none); ``accelerator``: what they are called in the catalog; ``gpu_load``: what
        their agents report (see :mod:`._local_gpus`; default idle); ``price_per_gpu_hour``: a
        make-believe price of each fake GPU (default 0), so $/h, costs and budgets show on this
        machine (the CPU-only shape stays free); ``node_cgroups``: node rank (within a launch) →
        the cgroup its agent joins (a deliberately slowed node, :func:`._procs.node_cgroups`)."""
        self.root = root
        self.gpus = gpus
        self.accelerator = accelerator
        self.gpu_load = gpu_load or GpuLoad()
        self.price_per_gpu_hour = price_per_gpu_hour
        self.node_cgroups = dict(node_cgroups or {})
        self._clock = clock or SystemClock()
        self._python = python
        self._boot_wait_s = boot_wait_s
        self._kill_grace_s = kill_grace_s
        self._keep_terminated_s = keep_terminated_s
        self._registry = Registry(root)
        self._seen: dict[str, InstanceState] = {}
        self._events: list[ProviderEvent] = []

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None, **kw: Any) -> LocalProvider:
        """From the ``providers.local`` section of the config file (``root``, ``gpus``,
        ``accelerator``, ``gpu_load``, ``gpu_memory``, ``price_per_gpu_hour``,
        ``node_cgroups``)."""
        section = (load_config() if config is None else config).get("providers", {}) or {}
        local = section.get("local", {}) or {}
        gpus = local.get("gpus")
        if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0):
            raise UserInputError(f"providers.local.gpus: a whole number >= 0, not {gpus!r}")
        accelerator = local.get("accelerator", "T4")
        if not isinstance(accelerator, str) or not accelerator:
            raise UserInputError(
                f"providers.local.accelerator: a name like T4, not {accelerator!r}"
            )
        root = Path(local.get("root", home() / "local")).expanduser()
        kw.setdefault("gpu_load", parse_gpu_load(local, gpus))
        kw.setdefault("price_per_gpu_hour", _price_per_gpu_hour(local))
        kw.setdefault("node_cgroups", node_cgroups(local))
        return cls(root, gpus=gpus, accelerator=accelerator, **kw)

    # ---- the Provider contract ---------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> list[Instance]:
        if request.num_nodes < 1 or request.gpus_per_node < 0:
            raise ProviderError("num_nodes must be >= 1 and gpus_per_node >= 0")
        ids = [_instance_id(request.request_id, rank) for rank in range(request.num_nodes)]
        with self._registry.locked():
            records = self._ensure_records(request, ids)
            for record in records:
                if record.sid is None and record.state is _S.PENDING:
                    self._spawn(record)
        self._wait_for_boot(ids)
        return self._snapshot(ids)

    def terminate(self, instance_ids: list[str]) -> None:
        self._begin_kill(instance_ids, _S.TERMINATING)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        with self._registry.locked():
            table = self._read_table()
            found = []
            for record in self._registry.all():
                if all(record.tags.get(k) == v for k, v in tags.items()):
                    found.append(self._instance(record, self._observe(record, table)))
            return found

    def poll_events(self) -> list[ProviderEvent]:
        with self._registry.locked():
            table = self._read_table()
            for record in self._registry.all():
                self._observe(record, table)
            events, self._events = self._events, []
        return events

    # ---- SupportsStopStart ---------------------------------------------------------------------

    def stop(self, instance_ids: list[str]) -> None:
        """Kill the node's processes, keep its directory, GPUs and token."""
        self._begin_kill(instance_ids, _S.STOPPING)

    def start(self, instance_ids: list[str]) -> None:
        """Start a new agent on each STOPPED node (a no-op for running ones)."""
        with self._registry.locked():
            table = self._read_table()
            for instance_id in instance_ids:
                record = self._registry.get(instance_id)
                if record is None or record.state in (_S.TERMINATING, _S.TERMINATED):
                    raise ProviderError(f"{instance_id}: no such instance to start")
                state = self._observe(record, table)
                if state is _S.STOPPING:
                    raise ProviderUnavailable(f"{instance_id} is still stopping", delay=1.0)
                if state is _S.STOPPED:
                    self._spawn(record)
        self._wait_for_boot(instance_ids)

    # ---- SupportsOffers --------------------------------------------------------------------------

    def offers(self, catalog: Catalog) -> ProviderOffers:
        """This machine: CPU only (``local-cpu``) and, with fake GPUs, one shape per
        power-of-two GPU count up to ``gpus`` — at price 0, region ``local``."""
        from gpulease.catalog.runtime import CPU_SPEC, LOCAL_CPU_PART, offer_row, offer_table

        rows = [offer_row("local", "local-cpu", accelerator="CPU", part=LOCAL_CPU_PART)]
        if self.gpus:
            parts = catalog.parts_of(self.accelerator)
            if not parts:
                raise UserInputError(
                    f"providers.local.accelerator: unknown accelerator {self.accelerator!r}"
                )
            spec = parts[0]
            count = 1
            while count <= self.gpus:
                name = f"local-{spec.name}x{count}"
                rows.append(offer_row("local", name, accelerator=spec.name, part=spec.part,
                                      gpus=count, memory=spec.memory_gb,
                                      price_on_demand=count * self.price_per_gpu_hour))  # fmt: skip
                count *= 2
        return ProviderOffers(offer_table(rows), {LOCAL_CPU_PART: CPU_SPEC})

    # ---- SupportsNodeToken ---------------------------------------------------------------------

    def node_token(self, instance_id: str) -> SecretStr:
        """The node's agent token. Here a file the provider wrote (0600) next to the node; on
        cloud VMs the server generates the token and passes it through user-data."""
        try:
            return SecretStr((self._node_dir(instance_id) / "token").read_text().strip())
        except FileNotFoundError:
            raise ProviderError(f"{instance_id}: no such instance (or it was terminated)") from None

    # ---- launching -----------------------------------------------------------------------------

    def _ensure_records(self, request: LaunchRequest, ids: list[str]) -> list[NodeRecord]:
        """The request's records, writing the intent for ranks that have none yet."""
        records: list[NodeRecord | None] = [self._registry.get(i) for i in ids]
        for record in records:
            if record is not None and (
                record.request_id != request.request_id or record.num_nodes != request.num_nodes
            ):
                raise ProviderError(f"request id {request.request_id} reused for another launch")
        missing = [rank for rank, record in enumerate(records) if record is None]
        gpu_sets = self._allocate_gpus(len(missing), request.gpus_per_node)
        now = self._clock.now()
        for rank, gpus in zip(missing, gpu_sets, strict=True):
            record = NodeRecord(
                id=ids[rank],
                request_id=request.request_id,
                node_rank=rank,
                num_nodes=request.num_nodes,
                tags={**request.all_tags(), TAG_NODE_RANK: str(rank)},
                gpus=gpus,
                instance_type=request.instance_type or "local",
                accelerator=request.accelerator,
                created_at=now,
                state_at=now,
            )
            self._registry.save(record)
            records[rank] = record
        return [r for r in records if r is not None]

    def _allocate_gpus(self, nodes: int, per_node: int) -> list[list[int]]:
        if self.gpus is not None and per_node > self.gpus:
            raise QuotaError(f"a node wants {per_node} GPUs; this machine has {self.gpus}")
        used = {g for r in self._registry.all() if r.state is not _S.TERMINATED for g in r.gpus}
        limit = self.gpus if self.gpus is not None else len(used) + nodes * per_node
        free = [g for g in range(limit) if g not in used]
        if len(free) < nodes * per_node:
            raise CapacityError(
                f"{nodes}x{per_node} fake GPUs asked, {len(free)} of {limit} free", region="local"
            )
        return [free[i * per_node : (i + 1) * per_node] for i in range(nodes)]

    def _spawn(self, record: NodeRecord) -> None:
        node = self._node_dir(record.id)
        (node / "node").mkdir(parents=True, exist_ok=True)
        node.chmod(0o700)
        _write_token_once(node / "token")
        (node / "port").unlink(missing_ok=True)
        env = {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, record.gpus)),
            "GPULEASE_INSTANCE_ID": record.id,
        }
        command = [
            self._python, "-m", "gpulease.agent", "serve", "--host", AGENT_HOST, "--port", "0",
            "--port-file", str(node / "port"), "--token-file", str(node / "token"),
            "--node-dir", str(node / "node"), "--node-rank", str(record.node_rank),
            "--venv-root", str(self.root / "venvs"),
        ]  # fmt: skip
        if record.gpus:  # the agent reports these fake GPUs (GET /v1/metrics)
            command += ["--fake-gpus", self.gpu_load.script(record.gpus, self.accelerator)]
        try:
            with open(node / "agent.log", "ab") as log:
                proc = subprocess.Popen(
                    command, cwd=node, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=log, start_new_session=True,
                )  # fmt: skip
        except OSError as exc:
            raise ProviderError(f"cannot start the agent for {record.id}: {exc}") from None
        _children.append(proc)
        cgroup = self.node_cgroups.get(record.node_rank)
        if cgroup is not None:
            try:
                join_cgroup(proc.pid, cgroup)
            except OSError as exc:
                proc.kill()
                raise ProviderError(f"{record.id}: cannot join {cgroup}: {exc}") from None
        record.sid, record.port, record.healthy = proc.pid, None, False
        self._set_state(record, _S.PENDING)

    def _wait_for_boot(self, ids: list[str]) -> None:
        """Until every node answers health or ``boot_wait_s`` passes (bounded backoff)."""
        deadline = self._clock.now() + self._boot_wait_s
        attempt = 0
        while self._clock.now() < deadline:
            if all(i.state is not _S.PENDING for i in self._snapshot(ids)):
                return
            attempt += 1
            self._clock.sleep(backoff_delay(attempt, base=0.02, cap=0.25))

    # ---- observing -----------------------------------------------------------------------------

    def _snapshot(self, ids: list[str]) -> list[Instance]:
        with self._registry.locked():
            table = self._read_table()
            records = [r for r in map(self._registry.get, ids) if r is not None]
            return [self._instance(r, self._observe(r, table)) for r in records]

    def _read_table(self) -> ProcessTable:
        for proc in list(_children):  # reap our exited agents so they do not linger as zombies
            if proc.poll() is not None:
                _children.remove(proc)
        return ProcessTable.read()

    def _observe(self, record: NodeRecord, table: ProcessTable) -> InstanceState:
        """The node's real state, from the process table; a change becomes an event."""
        state, why = self._observe_once(record, table)
        previous = self._seen.get(record.id)
        if previous is not None and previous is not state:
            detail = f"{previous.value} -> {state.value}" + (f": {why}" if why else "")
            self._events.append(
                ProviderEvent(EventKind.STATE_CHANGE, self._clock.now(), record.id, "local",
                              detail=detail)
            )  # fmt: skip
        self._seen[record.id] = state
        return state

    def _observe_once(self, record: NodeRecord, table: ProcessTable) -> tuple[InstanceState, str]:
        if record.state is _S.TERMINATED:
            self._forget_if_old(record)
            return _S.TERMINATED, ""
        alive = record.sid is not None and table.alive(record.sid, self._marker(record))
        if record.state in (_S.TERMINATING, _S.STOPPING, _S.STOPPED):
            return self._observe_stopping(record, table, alive), ""
        if record.sid is None:
            return _S.PENDING, ""  # intent written, agent not started: launch again starts it
        if not alive:
            remove_node_containers(self._node_dir(record.id) / "node")
            self._set_state(record, _S.TERMINATED)
            return _S.TERMINATED, "the node's processes exited without a terminate"
        if not record.healthy and self._answers_health(record):
            record.healthy = True
            self._set_state(record, _S.RUNNING)
        return (_S.RUNNING if record.healthy else _S.PENDING), ""

    def _observe_stopping(
        self, record: NodeRecord, table: ProcessTable, alive: bool
    ) -> InstanceState:
        if alive and record.sid is not None:
            if record.state is _S.STOPPED or (
                record.kill_after is not None and self._clock.now() >= record.kill_after
            ):
                table.signal(record.sid, signal.SIGKILL)  # outlived the grace period
            return _S.STOPPING if record.state is _S.STOPPED else record.state
        if record.state in (_S.TERMINATING, _S.STOPPING):
            remove_node_containers(self._node_dir(record.id) / "node")  # they outlive the session
        if record.state is _S.TERMINATING:
            shutil.rmtree(self._node_dir(record.id), ignore_errors=True)
            self._set_state(record, _S.TERMINATED)
        elif record.state is _S.STOPPING:
            self._set_state(record, _S.STOPPED)
        return record.state

    def _answers_health(self, record: NodeRecord) -> bool:
        node = self._node_dir(record.id)
        if record.port is None:
            try:
                record.port = int((node / "port").read_text().strip())
            except (FileNotFoundError, ValueError):
                return False
        token = (node / "token").read_text().strip()
        conn = http.client.HTTPConnection(AGENT_HOST, record.port, timeout=0.5)
        try:
            conn.request("GET", "/v1/health", headers={"Authorization": f"Bearer {token}"})
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    # ---- stopping --------------------------------------------------------------------------------

    def _begin_kill(self, instance_ids: list[str], target: InstanceState) -> None:
        """Record the intent (TERMINATING / STOPPING), then SIGTERM every process of the node.
        A missing or already finished instance is a no-op."""
        with self._registry.locked():
            table = self._read_table()
            for instance_id in instance_ids:
                record = self._registry.get(instance_id)
                if record is None or record.state in (_S.TERMINATED, target):
                    continue
                if target is _S.STOPPING and record.state not in _LIVE:
                    continue  # stopping, stopped or terminating already
                if record.kill_after is None:
                    record.kill_after = self._clock.now() + self._kill_grace_s
                self._set_state(record, target)
                if record.sid is not None:
                    table.signal(record.sid, signal.SIGTERM)

    def _set_state(self, record: NodeRecord, state: InstanceState) -> None:
        record.state = state
        record.state_at = self._clock.now()
        if state in (_S.STOPPED, _S.TERMINATED, _S.PENDING):
            record.kill_after = None
        self._registry.save(record)

    def _forget_if_old(self, record: NodeRecord) -> None:
        if self._clock.now() - record.state_at > self._keep_terminated_s:
            shutil.rmtree(self._node_dir(record.id), ignore_errors=True)
            self._registry.delete(record.id)

    # ---- helpers -----------------------------------------------------------------------------

    def _node_dir(self, instance_id: str) -> Path:
        return self.root / "nodes" / instance_id

    def _marker(self, record: NodeRecord) -> str:
        return str(self._node_dir(record.id) / "node")

    def _instance(self, record: NodeRecord, state: InstanceState) -> Instance:
        running = state is _S.RUNNING and record.port is not None
        return Instance(
            id=record.id,
            provider=self.name,
            state=state,
            tags=dict(record.tags),
            region="local",
            instance_type=record.instance_type,
            node_rank=record.node_rank,
            private_ip=AGENT_HOST,
            agent_url=f"http://{AGENT_HOST}:{record.port}" if running else None,
            price_per_hour=len(record.gpus) * self.price_per_gpu_hour,
            launched_at=record.created_at,
        )


def _price_per_gpu_hour(local: Mapping[str, Any]) -> float:
    """``providers.local.price_per_gpu_hour``: dollars, a finite number >= 0 (default 0)."""
    value = local.get("price_per_gpu_hour", 0.0)
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    if not valid or not math.isfinite(value) or value < 0:
        raise UserInputError(
            f"providers.local.price_per_gpu_hour: dollars per fake GPU-hour >= 0, not {value!r}"
        )
    return float(value)


def _instance_id(request_id: str, rank: int) -> str:
    """Stable, path-safe ids: the same request id always names the same nodes."""
    return f"local-{hashlib.sha256(request_id.encode()).hexdigest()[:12]}-{rank}"


def _write_token_once(path: Path) -> None:
    """A fresh token, readable by the owner only; kept across stop/start (never half-written)."""
    with contextlib.suppress(FileExistsError):
        write_atomic(path, secrets.token_urlsafe(32) + "\n", mode=0o600, exclusive=True)
