"""The agent's operations, independent of HTTP: accept tasks, report them, hand out their logs
by byte offset, deliver stop requests, run ``exec`` commands, write the heartbeat file.

Node directory (``--node-dir``), owned by this module::

    heartbeat               the time of the last heartbeat (seconds since the epoch), rewritten
    work/                   the jobs' working directory (the synced workdir lands here)
    work/checkpoints/       the default GPULEASE_CHECKPOINT_DIR (a relative checkpoint_dir is
                            relative to work/)
    tasks/<task_id>/        task.json (the record), task.log (setup + run output, appended),
                            preempted (the preemption file), train.json (the job's figures),
                            <attempt>.<phase>.exit, secrets.env (0600: the task's secret
                            values while it runs, see agent.task_secrets),
                            ckpt-upload/ (the checkpoint sync's scratch dir)
    venvs/                  the default venv root: task environments (see agent.venvs), unless
                            ``serve --venv-root`` names a shared one
    files/<bundle>/         files the server uploaded (a workdir, a file mount): see staging

One task runs at a time; a finished task stays reported until a newer attempt replaces it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from gpulease import __version__
from gpulease.agent import ckpt_sync, files, jobproc, task_secrets, venvs
from gpulease.agent.api import API_VERSION, ExecRequest
from gpulease.agent.containers import (
    ContainerEngine,
    RegistryCredentials,
    detect_engine,
)
from gpulease.agent.env import job_env
from gpulease.agent.runner import TaskPaths, TaskRunner
from gpulease.agent.staging import DEFAULT_MAX_UPLOAD_MB, Staging
from gpulease.agent.state import TaskRecord, TaskState, load_record, save_record
from gpulease.agent.task_container import TaskContainer, task_container
from gpulease.agent.task_secrets import TaskSecrets
from gpulease.agent.telemetry.peers import Peer
from gpulease.agent.telemetry.sampler import TelemetrySampler, metrics_report
from gpulease.atomic import write_atomic
from gpulease.clock import Clock, SystemClock
from gpulease.wire import SERVICE_VARIABLE, ExecResult, LogChunk, NodeTask

if TYPE_CHECKING:
    from gpulease.filesync import Readable

log = logging.getLogger("gpulease.agent")

DEFAULT_LOG_CHUNK = 1 << 20
MAX_LOG_CHUNK = 8 << 20


class AgentError(Exception):
    """A request the agent refuses; ``status`` is the HTTP status, ``code`` a stable name."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class Agent:
    def __init__(
        self,
        node_dir: Path,
        *,
        node_rank: int | None = None,
        clock: Clock | None = None,
        base_env: Mapping[str, str] | None = None,
        final_sync_timeout_s: float = ckpt_sync.DEFAULT_FINAL_SYNC_TIMEOUT_S,
        venv_root: Path | None = None,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_MB * 1_000_000,
    ) -> None:
        """``venv_root``: where task environments live (default ``<node_dir>/venvs``)."""
        self.node_dir = node_dir = node_dir.resolve()
        self.venv_root = (venv_root or node_dir / "venvs").resolve()
        self._site_dirs = venvs.agent_site_dirs()
        self.node_rank = node_rank
        self.clock = clock or SystemClock()
        self.started_at = self.clock.now()
        self.stopping = threading.Event()
        self._base_env = dict(os.environ if base_env is None else base_env)
        self.final_sync_timeout_s = final_sync_timeout_s
        self._lock = threading.RLock()
        self._runners: dict[str, TaskRunner] = {}
        for sub in ("work", "tasks"):
            (node_dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(node_dir, 0o700)
        self.staging = Staging(node_dir / "files", max_upload_bytes=max_upload_bytes)
        self.telemetry: TelemetrySampler | None = None  # set by ``serve`` unless sampling is off
        self.port: int | None = None  # the port it serves on (set by ``serve``)
        # registry logins the server sent (PUT /v1/registries/HOST): in memory only, never on
        # disk; the runner of a task with an image pulls with them
        self._registry_logins: dict[str, RegistryCredentials] = {}
        self._container_engine: ContainerEngine | None = None
        self._engine_found = False
        self._resume_saved_tasks()

    @property
    def work_dir(self) -> Path:
        return self.node_dir / "work"

    # ---- health -----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Liveness for the server's poll: version, rank, uptime and the current (else the
        latest) task's state."""
        current = self._current() or self._latest()
        return {
            "agent_version": __version__,
            "api_version": API_VERSION,
            "node_rank": self.node_rank,
            "uptime_s": round(self.clock.now() - self.started_at, 3),
            "now": self.clock.now(),
            "task": None if current is None else _brief(current.record),
        }

    def write_heartbeat(self) -> None:
        # not durable: an fsync every few seconds could stall behind a checkpoint's writes
        write_atomic(self.node_dir / "heartbeat", f"{self.clock.now():.3f}\n", durable=False)

    # ---- tasks ------------------------------------------------------------------------------

    def submit(
        self, sub: NodeTask, secrets: Mapping[str, SecretStr] | None = None
    ) -> tuple[bool, dict[str, Any]]:
        """Accept ``sub`` (with its secret values, given for a task with a ``secret_set`` and
        for no other); (True, status) when it starts now, (False, status) for a repeat."""
        try:
            task_secrets.check_submission(sub.secret_set, secrets)
        except task_secrets.SecretsRefused as exc:  # it names the variable, never a value
            raise AgentError(422, "invalid_request", str(exc)) from None
        with self._lock:
            existing = self._runners.get(sub.task_id)
            if existing is not None and _same_attempt(existing.record, sub):
                return False, self._status_of(existing)
            self._refuse_conflicts(sub, existing)
            self._remove_old_containers()
            try:
                files.check_sources(sub.workdir, sub.file_mounts)
            except files.FileSyncError as exc:
                raise AgentError(422, "missing_source", str(exc)) from None
            runner = self._new_runner(sub, secrets)
            self._runners[sub.task_id] = runner
        log.info("task %s attempt %d accepted", sub.task_id, sub.attempt)
        runner.start()
        return True, self._status_of(runner)

    def _refuse_conflicts(self, sub: NodeTask, existing: TaskRunner | None) -> None:
        if existing is not None:
            old = existing.record
            if sub.attempt < old.submission.attempt:
                raise AgentError(409, "stale_attempt", "a newer attempt of this task exists")
            if not old.state.terminal:
                raise AgentError(409, "task_active", "the previous attempt is still running")
        busy = self._current()
        if busy is not None and busy.record.task_id != sub.task_id:
            raise AgentError(409, "node_busy", f"task {busy.record.task_id} is running")

    def _remove_old_containers(self) -> None:
        """A new task on the node: the containers earlier (ended) tasks kept go."""
        for old in self._runners.values():
            if old.container is not None and not old.container.removed:
                old.container.remove()

    def _new_runner(self, sub: NodeTask, secrets: Mapping[str, SecretStr] | None) -> TaskRunner:
        paths = self._paths(sub)
        paths.task_dir.mkdir(parents=True, exist_ok=True)
        paths.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        paths.preemption_file.unlink(missing_ok=True)
        task_secrets.remove_file(paths.task_dir)  # an earlier attempt's, if any was left
        held = None if secrets is None else TaskSecrets.write(paths.task_dir, secrets)
        record = TaskRecord(
            submission=sub,
            submitted_at=self.clock.now(),
            checkpoint=ckpt_sync.initial_status(sub),
        )
        record.history.append((TaskState.PENDING.value, record.submitted_at))
        runner = self._runner_for(record, paths, held)
        save_record(paths.record, record)
        return runner

    def status(self, task_id: str) -> dict[str, Any]:
        return self._status_of(self._runner(task_id))

    def list_tasks(self) -> list[dict[str, Any]]:
        with self._lock:
            runners = list(self._runners.values())
        return [self._status_of(r) for r in runners]

    def logs(self, task_id: str, offset: int, limit: int = DEFAULT_LOG_CHUNK) -> LogChunk:
        runner = self._runner(task_id)
        if offset < 0 or limit <= 0:
            raise AgentError(422, "bad_range", "offset must be >= 0 and limit > 0")
        with runner.lock:
            state = runner.record.state
        try:
            with open(runner.paths.log, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(min(offset, size))
                data = fh.read(min(limit, MAX_LOG_CHUNK))
        except FileNotFoundError:
            size, data = 0, b""
        next_offset = min(offset, size) + len(data)
        complete = state.terminal and next_offset >= size
        return LogChunk(data, offset, next_offset, complete, state, size)

    def stop_task(self, task_id: str, kind: str, grace_s: float) -> dict[str, Any]:
        runner = self._runner(task_id)
        runner.request_stop(kind, grace_s)
        return self._status_of(runner)

    def preempt_current(self, grace_s: float) -> str | None:
        """Preempt the running task as ``stop_task(id, "preempt", grace_s)`` does (the VM's own
        spot notice, :mod:`gpulease.agent.imds`); its id, or None when none runs. A service
        replica (``$GPULEASE_SERVICE`` in its environment) is left serving: it has nothing to
        checkpoint, and the server takes it out of its load balancer, drains it and starts its
        replacement on the same notice (docs/serving.md)."""
        runner = self._current()
        if runner is None:
            return None
        service = runner.env.get(SERVICE_VARIABLE)
        if service:
            log.warning("spot notice: task %s, a replica of service %s, is left serving (the "
                        "server drains it)", runner.record.task_id, service)  # fmt: skip
            return None
        runner.request_stop("preempt", grace_s)
        return runner.record.task_id

    def exec(self, task_id: str, req: ExecRequest) -> ExecResult:
        """Run ``req.command`` on the node — inside the task's container while it runs."""
        runner = self._runner(task_id)
        command = req.command
        if runner.container is not None and runner.container.running():
            command = runner.container.phase_script(command, runner.secrets_input())
        return jobproc.run_exec(
            command,
            cwd=self.work_dir,
            env=runner.process_env(),
            timeout_s=req.timeout_s,
            scratch=runner.paths.task_dir,
        )

    def shutdown(self, *, cancel_task: bool, grace_s: float) -> None:
        """Stop serving (the caller's main loop watches :attr:`stopping`); cancel the task
        first, waiting at most ``grace_s`` plus a second, when asked."""
        current = self._current()
        if cancel_task and current is not None:
            current.request_stop("cancel", grace_s)
            current.join(grace_s + 1.0)
        self.stopping.set()

    # ---- registry logins ----------------------------------------------------------------------

    def set_registry_login(self, creds: RegistryCredentials) -> None:
        """Keep ``creds`` (in memory only) for pulls from ``creds.registry``."""
        with self._lock:
            self._registry_logins[creds.registry] = creds

    def registry_login(self, registry: str | None) -> RegistryCredentials | None:
        """The login the server sent for ``registry`` (None: an anonymous pull)."""
        if registry is None:
            return None
        with self._lock:
            return self._registry_logins.get(registry)

    # ---- telemetry ----------------------------------------------------------------------------

    def metrics(self, since: float | None) -> dict[str, Any]:
        """The buffered telemetry samples taken after ``since`` (see :mod:`.telemetry`)."""
        return metrics_report(self.telemetry, since)

    def train_stats_file(self) -> Path | None:
        """The stats file of the running (else the latest) task: what ``gpulease.train``
        reports (see :mod:`.telemetry.train`); None without a task."""
        runner = self._current() or self._latest()
        return None if runner is None else runner.paths.train_stats_file

    def peer_targets(self) -> list[Peer]:
        """The other nodes' agents of the running task's cluster (none without a task, or on
        one node): ``node_ips`` and ``agent_ports`` by rank, this agent's port where the port
        is not given."""
        runner = self._current()
        if runner is None:
            return []
        sub = runner.record.submission
        ports = sub.agent_ports or (None,) * sub.num_nodes
        peers = []
        for rank, (host, given) in enumerate(zip(sub.node_ips, ports, strict=True)):
            port = given or self.port
            if rank != sub.node_rank and port:
                peers.append(Peer(rank, host, port))
        return peers

    # ---- uploaded files ---------------------------------------------------------------------

    def file_manifest(self, bundle: str) -> dict[str, Any]:
        """What the node holds of an uploaded bundle (see :mod:`gpulease.agent.staging`)."""
        return self.staging.manifest(bundle)

    def put_files(self, bundle: str, stream: Readable) -> dict[str, Any]:
        """Apply a sync stream to a bundle; refused while a task runs (its setup may be copying
        the bundle, and its files must not change under it)."""
        from gpulease import filesync

        busy = self._current()
        if busy is not None:
            raise AgentError(409, "node_busy", f"task {busy.record.task_id} is running; files "
                             "can change only between tasks")  # fmt: skip
        try:
            result = self.staging.apply(bundle, stream)
        except filesync.UnsafePath as exc:
            raise AgentError(422, "unsafe_path", str(exc)) from None
        except filesync.BadStream as exc:
            raise AgentError(422, "bad_stream", str(exc)) from None
        except OSError as exc:
            raise AgentError(422, "cannot_write", f"{bundle}: {exc.strerror or exc}") from None
        log.info("files %s: %d files (%d bytes), %d deleted", bundle, result["files"],
                 result["bytes"], result["deleted"])  # fmt: skip
        return result

    # ---- internals --------------------------------------------------------------------------

    def _current(self) -> TaskRunner | None:
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            with runner.lock:
                if not runner.record.state.terminal:
                    return runner
        return None

    def _latest(self) -> TaskRunner | None:
        with self._lock:
            runners = list(self._runners.values())
        return max(runners, key=lambda r: r.record.submitted_at, default=None)

    def _runner(self, task_id: str) -> TaskRunner:
        with self._lock:
            runner = self._runners.get(task_id)
        if runner is None:
            raise AgentError(404, "no_such_task", f"no task {task_id!r} on this node")
        return runner

    def _status_of(self, runner: TaskRunner) -> dict[str, Any]:
        with runner.lock:
            status = runner.record.status()
        try:
            status["log_size"] = runner.paths.log.stat().st_size
        except FileNotFoundError:
            status["log_size"] = 0
        return status

    def _paths(self, sub: NodeTask) -> TaskPaths:
        return TaskPaths(
            task_dir=self.node_dir / "tasks" / sub.task_id,
            work_dir=self.work_dir,
            checkpoint_dir=self._checkpoint_dir(sub),
            staging_dir=self.staging.root,
        )

    def _checkpoint_dir(self, sub: NodeTask) -> Path:
        """``checkpoint_dir`` resolved like a file mount's remote path (relative: under the
        work dir, ``~``: the job's home); ``checkpoints/`` in the work dir when not given."""
        home = sub.envs.get("HOME", self._base_env.get("HOME"))
        return files.resolve_remote(sub.checkpoint_dir or "checkpoints", self.work_dir, home)

    def _runner_for(
        self, record: TaskRecord, paths: TaskPaths, secrets: TaskSecrets | None = None
    ) -> TaskRunner:
        container = self._container_for(record.submission, paths)
        venv = None
        if container is None:  # in an image, the image's own Python runs the task
            venv = venvs.venv_path(self.venv_root, record.submission.setup, self._site_dirs)
        env = job_env(
            self._base_env,
            record.submission,
            work_dir=paths.work_dir,
            checkpoint_dir=paths.checkpoint_dir,
            preemption_file=paths.preemption_file,
            venv=venv,
            train_stats_file=paths.train_stats_file,
        )
        return TaskRunner(
            record,
            paths,
            env,
            clock=self.clock,
            persist=lambda rec: save_record(paths.record, rec),
            stopping=self.stopping,
            final_sync_timeout_s=self.final_sync_timeout_s,
            venv=venv,
            site_dirs=self._site_dirs,
            container=container,
            secrets=secrets,
        )

    def _container_for(self, sub: NodeTask, paths: TaskPaths) -> TaskContainer | None:
        """The container a task with an image runs in (None: the task has no image)."""
        if sub.image is None:
            return None
        registry = sub.image_registry
        return task_container(
            sub,
            self._engine(),
            node_dir=self.node_dir,
            paths=paths,
            base_env=self._base_env,
            credentials=lambda: self.registry_login(registry),
        )

    def _engine(self) -> ContainerEngine | None:
        """The node's container engine (found once, on the agent's ``PATH``)."""
        with self._lock:
            if not self._engine_found:
                self._container_engine = detect_engine(self._base_env.get("PATH"))
                self._engine_found = True
            return self._container_engine

    def _resume_saved_tasks(self) -> None:
        for path in sorted((self.node_dir / "tasks").glob("*/task.json")):
            try:
                record = load_record(path)
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable task record %s: %s", path, exc)
                continue
            paths = self._paths(record.submission)
            secrets = None
            if record.state.terminal:
                task_secrets.remove_file(paths.task_dir)  # the agent died before removing it
            elif record.submission.secret_set is not None:
                secrets = TaskSecrets.load(paths.task_dir)
            runner = self._runner_for(record, paths, secrets)
            self._runners[record.task_id] = runner
            if not record.state.terminal:
                log.info("task %s: resuming in state %s", record.task_id, record.state.value)
                runner.start()


def _same_attempt(record: TaskRecord, sub: NodeTask) -> bool:
    if record.submission.attempt != sub.attempt:
        return False
    if record.submission.digest() != sub.digest():
        raise AgentError(409, "conflict", "this task attempt was submitted with another body")
    return True


def _brief(record: TaskRecord) -> dict[str, Any]:
    brief: dict[str, Any] = {
        "task_id": record.task_id,
        "attempt": record.submission.attempt,
        "state": record.state.value,
    }
    if record.checkpoint is not None:  # a task with a checkpoint store: when it last synced
        brief["checkpoint_synced_at"] = record.checkpoint.get("last_sync_at")
    return brief
