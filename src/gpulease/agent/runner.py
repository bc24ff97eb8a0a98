"""Drives one task through its phases on a thread: file sync, ``setup``, ``run``; and delivers
stop requests (preemption notice, cancel) to the running phase's process group.

States moved (see :mod:`gpulease.agent.state`): PENDING → SETTING_UP (files or a setup script)
→ RUNNING → SUCCEEDED | FAILED | PREEMPTED | CANCELLED. How a phase's end maps to a state:

- a cancel was requested → CANCELLED (whatever the exit code);
- exit 0 → the next phase, or SUCCEEDED after ``run`` (even after a preemption notice);
- a preemption notice was delivered, or exit 75 → PREEMPTED;
- anything else → FAILED (the exit code, and the signal when one killed the job).

Every phase runs in the task environment (:mod:`gpulease.agent.venvs`), made (or found) before
the first phase; one that cannot be made fails the task (``task environment: …``). Nodes whose
agents share a venv root take turns for ``setup`` (a lock the setup process holds), so two nodes
never ``pip install`` into the same venv at once.

A runner started for a record loaded from disk (the agent restarted) resumes: it adopts a phase
whose process group still lives, reads the exit file of one that ended, and runs what is left.

With a ``checkpoint_store`` (see :mod:`gpulease.agent.ckpt_sync`) the runner also owns the
task's :class:`~gpulease.agent.ckpt_sync.CheckpointSync`: the store is opened before anything
runs (a URL that names no store fails the task), the newest checkpoint is restored just before
``run`` starts (SETTING_UP covers it), the background sync runs while ``run`` runs (a resumed
runner restarts it), and a final, bounded sync happens after ``run`` ended and before the task's
terminal state is recorded — also before ``run`` is marked done, so an agent that dies during it
redoes it after its restart.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulease.agent import ckpt_sync, files, jobproc, venvs
from gpulease.agent.containers import ContainerError
from gpulease.agent.state import PREEMPTED_EXIT_CODE, TaskRecord, TaskState, set_state
from gpulease.agent.task_secrets import with_secrets
from gpulease.clock import Clock
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.agent.task_container import TaskContainer
    from gpulease.agent.task_secrets import TaskSecrets

log = logging.getLogger("gpulease.agent")

ADOPT_POLL_S = 0.2  # how often an adopted phase (no longer our child) is checked
NODE_STOP_WAIT_S = 1.0  # how long a signal death waits for the agent's own stop signal
_NODE_STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})


@dataclass(frozen=True, slots=True)
class TaskPaths:
    task_dir: Path
    work_dir: Path
    checkpoint_dir: Path
    staging_dir: Path | None = None  # the uploaded bundles (copied without ignore rules)

    @property
    def record(self) -> Path:
        return self.task_dir / "task.json"

    @property
    def log(self) -> Path:
        return self.task_dir / "task.log"

    @property
    def preemption_file(self) -> Path:
        return self.task_dir / "preempted"

    @property
    def train_stats_file(self) -> Path:
        """Where ``gpulease.train`` reports its figures (GPULEASE_TRAIN_STATS_FILE)."""
        return self.task_dir / "train.json"

    def exit_file(self, attempt: int, phase: str) -> Path:
        return self.task_dir / f"{attempt}.{phase}.exit"

    def sync_places(self) -> ckpt_sync.SyncPlaces:
        """Where the checkpoint sync works (its scratch dir is node-private, in the task dir)."""
        return ckpt_sync.SyncPlaces(
            checkpoint_dir=self.checkpoint_dir,
            scratch_dir=self.task_dir / "ckpt-upload",
            log_path=self.log,
        )


class TaskRunner:
    """Owns one :class:`TaskRecord`; every change is saved through ``persist`` under ``lock``."""

    def __init__(
        self,
        record: TaskRecord,
        paths: TaskPaths,
        env: dict[str, str],
        *,
        clock: Clock,
        persist: Callable[[TaskRecord], None],
        stopping: threading.Event,
        final_sync_timeout_s: float = ckpt_sync.DEFAULT_FINAL_SYNC_TIMEOUT_S,
        venv: Path | None = None,
        site_dirs: list[str] | None = None,
        container: TaskContainer | None = None,
        secrets: TaskSecrets | None = None,
    ) -> None:
        """``venv``: the task environment to make before the first phase (None: none);
        ``container``: the container the phases run in (a task with an image), else None."""
        self.record = record
        self.paths = paths
        self.env = env
        self.lock = threading.RLock()
        self._clock = clock
        self._persist = persist
        self._stopping = stopping  # the agent is shutting down
        self._final_sync_timeout_s = final_sync_timeout_s
        self._ckpt: ckpt_sync.CheckpointSync | None = None
        self._venv = venv
        self._site_dirs = site_dirs
        self.container = container
        self.secrets = secrets  # the task's secret values (agent.task_secrets), until its end
        self._thread = threading.Thread(target=self._main, name=f"task-{record.task_id}")
        self._thread.daemon = True

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # ---- stop requests (called from HTTP threads) -------------------------------------------

    def request_stop(self, kind: str, grace_s: float) -> None:
        """Preempt (touch the preemption file first) or cancel: SIGTERM the running phase's
        group now, SIGKILL it after ``grace_s``. A cancel overrides an earlier preemption."""
        with self.lock:
            rec = self.record
            if rec.state.terminal or rec.stop == "cancel":
                return
            rec.stop, rec.stop_grace_s = kind, grace_s
            if kind == "preempt":
                self.paths.preemption_file.touch()
            self._persist(rec)
            pgid = rec.pgid
        log.info("task %s: %s requested (grace %.1f s)", rec.task_id, kind, grace_s)
        if pgid is not None:
            self._terminate_group(pgid, grace_s)

    def _terminate_group(self, pgid: int, grace_s: float) -> None:
        """SIGTERM the phase (inside its container, when it has one: the engine's client in the
        group would die of it, not pass it on), SIGKILL after ``grace_s``."""
        if self.container is not None:
            self.container.signal_all("TERM")
        else:
            jobproc.signal_group(pgid, signal.SIGTERM)
        timer = threading.Timer(grace_s, self._kill_if_current, args=(pgid,))
        timer.daemon = True
        timer.start()

    def _kill_if_current(self, pgid: int) -> None:
        with self.lock:
            if self.record.pgid != pgid:
                return
            if self.container is not None:
                self.container.remove()  # kills what runs inside: the group holds its client
            if jobproc.signal_group(pgid, signal.SIGKILL):
                log.info("task %s: grace over, SIGKILL sent", self.record.task_id)

    # ---- the thread -------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._drive()
        except Exception as exc:  # the runner must always leave a final state behind
            log.exception("task %s: runner failed", self.record.task_id)
            with self.lock:
                if not self.record.state.terminal:
                    self._end(TaskState.FAILED, f"agent error: {type(exc).__name__}: {exc}")

    def _drive(self) -> None:
        if not self._open_checkpoint_sync():
            return
        try:
            self._drive_phases()
        finally:
            if self._ckpt is not None:
                self._ckpt.stop()

    def _drive_phases(self) -> None:
        rec = self.record
        syncing = rec.state is TaskState.SETTING_UP and rec.phase is None  # restarted mid-sync
        if (rec.state is TaskState.PENDING or syncing) and not self._prepare():
            return
        if not (self._ensure_container() if self.container else self._ensure_venv()):
            return
        for phase in ("setup", "run"):
            if phase in rec.phases_done or (phase == "setup" and not rec.submission.setup):
                continue
            if phase == "run" and not self._enter_running():
                return
            outcome = self._run_phase(phase)
            if outcome is None:
                return
            if self._ended(phase, *outcome):
                return
        with self.lock:
            self._end(TaskState.SUCCEEDED, "")

    def _prepare(self) -> bool:
        """Sync files (SETTING_UP when there is anything to set up); False when the task
        ended."""
        sub = self.record.submission
        needs_setup = bool(
            sub.setup or sub.workdir or sub.file_mounts or sub.checkpoint_store or sub.image
        )
        with self.lock:
            if self._stopped_before_start():
                return False
            if self.record.state is TaskState.PENDING:
                state = TaskState.SETTING_UP if needs_setup else TaskState.RUNNING
                set_state(self.record, state, self._clock.now())
                self._persist(self.record)
        try:
            staging = self.paths.staging_dir
            if sub.workdir:
                files.sync_workdir(sub.workdir, self.paths.work_dir, staging)
            home = self.env.get("HOME")
            files.apply_file_mounts(sub.file_mounts, self.paths.work_dir, home, staging)
        except files.FileSyncError as exc:
            with self.lock:
                self._end(TaskState.FAILED, f"file sync: {exc}")
            return False
        return True

    def _ensure_venv(self) -> bool:
        """Make (or find) the task environment; False when that failed the task."""
        if self._venv is None:
            return True
        try:
            venvs.ensure(self._venv, self._site_dirs)
        except venvs.VenvError as exc:
            with self.lock:
                self._end(TaskState.FAILED, f"task environment: {exc}")
            return False
        return True

    def _ensure_container(self) -> bool:
        """Start (or adopt) the task's container, pulling its image when the node lacks it;
        False when that failed the task."""
        assert self.container is not None
        try:
            if self.container.ensure_running():
                ckpt_sync.append_log(self.paths.log, f"container {self.container.name} started "
                                     f"from image {self.container.image}")  # fmt: skip
        except (ContainerError, ValueError) as exc:
            with self.lock:
                self._end(TaskState.FAILED, f"container: {exc}")
            return False
        return True

    def _setup_turn(self) -> int | None:
        """Wait for our turn to run ``setup`` in a task environment other nodes share: a file
        descriptor holding its setup lock (None without a task environment, or when a stop
        came meanwhile)."""
        if self._venv is None:
            return None

        def waiting() -> None:
            ckpt_sync.append_log(
                self.paths.log,
                f"waiting for another node's setup in the task environment {self._venv}",
            )

        def give_up() -> bool:
            return self._stopping.is_set() or self.record.stop is not None

        return venvs.setup_turn(self._venv, give_up=give_up, on_wait=waiting)

    def _enter_running(self) -> bool:
        """Restore the checkpoint (unless ``run`` started already: a resumed runner), move to
        RUNNING and start the background sync; False when a stop ended the task first."""
        if self._ckpt is not None and self.record.phase != "run":
            self._ckpt.restore()
        with self.lock:
            if self._stopped_before_start():
                return False
            if self.record.state is TaskState.SETTING_UP:
                set_state(self.record, TaskState.RUNNING, self._clock.now())
                self._persist(self.record)
        if self._ckpt is not None:
            self._ckpt.start()
        return True

    # ---- checkpoint sync --------------------------------------------------------------------

    def _open_checkpoint_sync(self) -> bool:
        """Build the task's checkpoint sync (if it has a store); False when that ended the
        task (a store URL that names no store, before anything ran)."""
        rec = self.record
        try:
            self._ckpt = ckpt_sync.for_task(
                rec.submission,
                self.paths.sync_places(),
                clock=self._clock,
                report=self._report_checkpoint,
                saved=rec.checkpoint,
            )
        except UserInputError as exc:
            return self._bad_store(str(exc))
        return True

    def _bad_store(self, message: str) -> bool:
        """Fail a task whose store URL is bad; a resumed one whose job already ran goes on
        without sync (its URL was good when it started)."""
        started = self.record.phase is not None
        ckpt_sync.append_log(
            self.paths.log, message + ("; checkpoints are not synced" if started else "")
        )
        if started:
            return True
        with self.lock:
            self._end(TaskState.FAILED, message)
        return False

    def _report_checkpoint(self, status: dict[str, Any]) -> None:
        with self.lock:
            self.record.checkpoint = status
            self._persist(self.record)

    def _final_sync(self) -> None:
        """After ``run``: the last sync, bounded; never while holding :attr:`lock`."""
        if self._ckpt is not None:
            self._ckpt.finish(self._final_sync_timeout_s)

    def _stopped_before_start(self) -> bool:
        rec = self.record
        if rec.stop is None:
            return False
        state = TaskState.CANCELLED if rec.stop == "cancel" else TaskState.PREEMPTED
        self._end(state, f"{rec.stop} requested before the job started")
        return True

    def _run_phase(self, phase: str) -> tuple[int | None, str | None] | None:
        """Start (or adopt) ``phase`` and wait for it: (exit code, signal); the code is None
        when it was lost. None when there is nothing more to do: a stop came before the start
        (the task has ended), or the agent is shutting down (a restarted agent resumes)."""
        rec = self.record
        exit_path = self.paths.exit_file(rec.submission.attempt, phase)
        proc: subprocess.Popen[bytes] | None = None
        adopting = rec.phase == phase and rec.pgid is not None  # a restarted agent
        turn = None
        if phase == "setup" and not adopting:
            turn = self._setup_turn()  # may wait for another node's setup
            if turn is None and self._stopping.is_set():
                return None
        try:
            with self.lock:
                if rec.phase == phase and rec.pgid is not None:
                    pgid = rec.pgid  # a restarted agent: the phase may still run
                    if rec.stop:
                        self._terminate_group(pgid, rec.stop_grace_s)
                else:
                    if self._stopped_before_start():  # checked under the lock the stop takes
                        return None
                    proc = self._spawn(phase, exit_path, turn)
                    rec.phase, rec.pgid, pgid = phase, proc.pid, proc.pid
                    self._persist(rec)
        finally:
            if turn is not None:
                os.close(turn)  # the setup process holds the lock now
        log.info("task %s: %s started (pgid %d)", rec.task_id, phase, pgid)
        returncode = self._wait(proc, pgid, exit_path)
        if returncode is None and self._stopping.is_set():
            return None
        if self._killed_with_the_node(returncode):
            return None
        jobproc.signal_group(pgid, signal.SIGKILL)  # whatever the phase left behind
        if phase == "run":
            self._final_sync()  # before "run" is done: a restarted agent would redo it
        with self.lock:
            rec.phases_done.append(phase)
            rec.pgid = None
            self._persist(rec)
        if returncode is None:
            return None, None
        return jobproc.describe_exit(returncode)

    def _killed_with_the_node(self, returncode: int | None) -> bool:
        """A phase killed by a signal no stop of ours sent, while the agent itself is told to
        stop: the node is going away (its session was signalled: an instance terminated, the
        machine shutting down) — the task did not fail, and a restarted agent resumes it. The
        two signals race, so a signal death waits up to :data:`NODE_STOP_WAIT_S` for the
        agent's own."""
        if returncode is None or self.record.stop is not None:
            return False
        if jobproc.describe_exit(returncode)[1] not in _NODE_STOP_SIGNALS:
            return False
        return self._stopping.wait(NODE_STOP_WAIT_S)

    def _spawn(self, phase: str, exit_path: Path, turn: int | None) -> subprocess.Popen[bytes]:
        sub = self.record.submission
        script = (sub.setup if phase == "setup" else sub.run) or ""
        if self.container is not None:
            script = self.container.phase_script(script, self.secrets_input())
        return jobproc.spawn_phase(
            script,
            cwd=self.paths.work_dir,
            env=self.process_env(),
            log_path=self.paths.log,
            exit_path=exit_path,
            pass_fds=() if turn is None else (turn,),
        )

    def process_env(self) -> dict[str, str]:
        """The environment of a phase's (or ``exec``'s) process on the node: with the task's
        secrets, unless they go to its container (:meth:`secrets_input`)."""
        return with_secrets(self.env, None if self.container else self.secrets)

    def secrets_input(self) -> Path | None:
        """The secrets file a container's ``exec`` reads on its standard input (None: no
        secrets, or no container)."""
        return None if self.container is None or self.secrets is None else self.secrets.file()

    def _wait(self, proc: subprocess.Popen[bytes] | None, pgid: int, exit_path: Path) -> int | None:
        if proc is not None:
            proc.wait()
            recorded = jobproc.read_exit_file(exit_path)
            return recorded if recorded is not None else proc.returncode
        while not exit_path.exists() and jobproc.group_alive(pgid):
            if self._stopping.wait(ADOPT_POLL_S):
                return None
        return jobproc.read_exit_file(exit_path)

    def _ended(self, phase: str, code: int | None, sig: str | None) -> bool:
        """Record how ``phase`` ended; True when that ends the task."""
        rec = self.record
        with self.lock:
            rec.exit_code, rec.signal = code, sig
            how = _describe(phase, code, sig)
            if rec.stop == "cancel":
                self._end(TaskState.CANCELLED, f"cancelled; {how}")
            elif code == 0:
                return False
            elif rec.stop == "preempt" or code == PREEMPTED_EXIT_CODE:
                self._end(TaskState.PREEMPTED, f"preempted; {how}")
            else:
                self._end(TaskState.FAILED, how)
        return True

    def _end(self, state: TaskState, detail: str) -> None:
        if self.container is not None:
            self.container.end_processes()  # before the end is reported: nothing of it runs on
        if self.secrets is not None:
            self.secrets.remove()  # the values leave the node with the task
        set_state(self.record, state, self._clock.now(), detail)
        self._persist(self.record)
        log.info("task %s: %s %s", self.record.task_id, state.value, detail)


def _describe(phase: str, code: int | None, sig: str | None) -> str:
    if code is None:
        return f"{phase}: exit status lost (the agent restarted and the job was killed)"
    return f"{phase} exited {code}" + (f" ({sig})" if sig else "")
