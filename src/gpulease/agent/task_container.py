"""The container one task attempt runs in, when its task names an image (``resources.image_id``).

What this module owns: the life of that container on the node. One container per task attempt,
started before the first phase and kept until the node's next task, so what ``setup``
installs is there for ``run`` and ``gpulease exec`` enters the same environment (SkyPilot's
model):

- **start** (:meth:`TaskContainer.ensure_running`): the image made present (pulled at most once
  per node, with the registry login the server sent), then ``ENGINE run --detach`` of a keeper
  process that ignores SIGTERM (so a stop reaches the task's processes, never the container
  itself), with ``--init``, host networking, the work, checkpoint and task directories
  bind-mounted at the same paths, the GPUs passed through when the node has NVIDIA devices,
  and the task's environment named by ``--env NAME`` (the values in the engine process's
  environment only). A container already
  running under the attempt's name (the agent restarted) is adopted as it is.
- **phases** (:meth:`TaskContainer.phase_script`): the shell line the agent's phase wrapper
  runs in place of the task's script: ``ENGINE exec -w WORK NAME sh -c …`` running the script
  with ``bash`` when the image has it, else ``sh``. The exit status, the exit file and the
  process group on the host work as without a container. A task with secrets
  (:mod:`gpulease.agent.task_secrets`) gets them at each ``exec``, on its standard input
  (``exec --interactive … < tasks/<id>/secrets.env``), exported by the shell inside before
  the script starts: never in the ``run``'s env file.
- **stops** (:meth:`TaskContainer.signal_all`): a signal sent *inside* the container to every
  process but its init and keeper (``kill -s TERM -1`` from an exec'd shell): a preemption
  notice reaches the training as SIGTERM, so ``gpulease.train`` saves and exits 75 there as
  it does outside. (Signalling the host group would kill the engine's client, not the task.)
- **end**: when the task ends, what it left running inside is killed
  (:meth:`TaskContainer.end_processes`) and the container stays, so ``gpulease exec`` and
  ``ssh`` still enter the image's environment; it is removed (:meth:`TaskContainer.remove`,
  ``rm --force``) when the node's next task is submitted, when a stop's grace is over (that
  ends what a SIGKILL must end), or with the node.

Every container is labelled ``gpulease.task`` (the task id) and ``gpulease.node`` (the node
directory), and noted in ``<node dir>/containers/`` before it starts, so a provider that tears a
node down (the local provider: gpulease.providers._local_containers) finds what it left behind.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpulease.agent.containers import (
    ContainerEngine,
    ContainerError,
    RegistryCredentials,
    container_name,
    container_running,
    ensure_image,
    exec_argv,
    gpu_args,
    remove_argv,
    run_engine,
)
from gpulease.agent.env import container_env
from gpulease.wire import NodeTask

if TYPE_CHECKING:
    from gpulease.agent.runner import TaskPaths

log = logging.getLogger("gpulease.agent")

TASK_LABEL = "gpulease.task"
NODE_LABEL = "gpulease.node"
CONTAINER_NOTES = "containers"  # <node dir>/containers/<name>: noted before it is started
# the container's main process: it ignores the stop signals (a stop is for the task's
# processes), and an ignored signal stays ignored across exec, so the sleeps ignore them too
KEEPER = ("sh", "-c", "trap '' TERM INT HUP; while :; do sleep 3600; done")
# the phase inside: bash when the image has it (task scripts are written for bash), else sh
_PHASE_SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; fi; exec sh -c "$1"'
# the task's secrets, one KEY=VALUE line each on standard input: exported as they are (no
# quoting, no expansion), then standard input is /dev/null for the task, as on the node
_READ_SECRETS = (
    'while IFS= read -r kv; do case $kv in *=*) export "$kv";; esac; done; exec </dev/null; '
)
_NVIDIA_DEVICE = Path("/dev/nvidiactl")
# kill every process of the container but its init (1), the keeper (init's child) and this shell
_END_PROCESSES = (
    "keeper=$(cat /proc/1/task/1/children 2>/dev/null); "
    'for d in /proc/[0-9]*; do p=${d#/proc/}; case " 1 $keeper $$ " in *" $p "*) ;; '
    '*) kill -9 "$p" 2>/dev/null;; esac; done; true'
)


@dataclass(frozen=True)
class ContainerMounts:
    """The host directories a task's container sees at the same paths."""

    work_dir: Path
    checkpoint_dir: Path
    task_dir: Path  # the preemption file and the train stats file live here

    def volumes(self) -> list[str]:
        dirs: list[Path] = []
        for d in (self.work_dir, self.checkpoint_dir, self.task_dir):
            if not any(d.is_relative_to(kept) for kept in dirs):
                dirs.append(d)
        return [arg for d in dirs for arg in ("-v", f"{d}:{d}")]


class TaskContainer:
    """The container of one task attempt on this node."""

    def __init__(
        self,
        engine: ContainerEngine | None,
        *,
        image: str,
        name: str,
        task_id: str,
        node_dir: Path,
        mounts: ContainerMounts,
        env: Mapping[str, str],
        credentials: Callable[[], RegistryCredentials | None] = lambda: None,
        gpus: bool | None = None,
    ) -> None:
        """``env``: the variables the task sees inside; ``credentials``: the registry login
        (asked for when a pull is needed); ``gpus`` None: when the node has NVIDIA devices.
        ``engine`` None: the node has none, and starting fails saying so."""
        self.engine = engine
        self.image = image
        self.name = name
        self.task_id = task_id
        self.node_dir = node_dir
        self.mounts = mounts
        # inside, the task can tell where it runs; ``gpulease ssh`` enters the container by these
        self.env = {**env, "GPULEASE_CONTAINER": name}
        if engine is not None:
            self.env["GPULEASE_CONTAINER_ENGINE"] = engine.executable
        self._credentials = credentials
        self._gpus = _NVIDIA_DEVICE.exists() if gpus is None else gpus
        self.removed = False

    # ---- start --------------------------------------------------------------------------------

    def ensure_running(self) -> bool:
        """Make the container run (adopting one that does); True when it was started now. A
        failure (no engine, no image, an engine error) is a :class:`ContainerError` naming
        what failed."""
        engine = self._engine()
        if container_running(engine, self.name):
            return False
        run_engine(engine, remove_argv(engine, self.name))  # a stopped leftover
        if ensure_image(engine, self.image, self._credentials()):
            log.info("task %s: pulled image %s", self.task_id, self.image)
        notes = self.node_dir / CONTAINER_NOTES  # intent first: whoever removes the node looks
        notes.mkdir(exist_ok=True)
        (notes / self.name).touch()
        done = run_engine(engine, self.run_argv(), env=self.env)
        if done.returncode != 0:
            detail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
            raise ContainerError(f"starting a container from {self.image} failed "
                                 f"({engine.kind}): {detail[0]}")  # fmt: skip
        return True

    def _engine(self) -> ContainerEngine:
        if self.engine is None:
            raise ContainerError(f"the task runs in image {self.image}, but this node has no "
                                 "container engine (podman or docker on PATH)")  # fmt: skip
        return self.engine

    def run_argv(self) -> list[str]:
        """The detached ``run`` of the keeper, with everything the task's phases need. The
        task's variables are named (``--env NAME``), never valued: the engine takes each value
        from its own environment (:attr:`env`, given to the ``run`` process only), so no value
        is on a command line or in a file, and one with a newline (``GPULEASE_NODE_IPS``)
        passes as it is."""
        engine, work = self._engine(), str(self.mounts.work_dir)
        return engine.argv(
            "run",
            "--detach",
            "--name",
            self.name,
            "--init",
            "--stop-timeout",  # the keeper ignores the stop signal: an engine's stop kills soon
            "1",
            "--label",
            f"{TASK_LABEL}={self.task_id}",
            "--label",
            f"{NODE_LABEL}={self.node_dir}",
            "--network",
            "host",
            *self.mounts.volumes(),
            "-w",
            work,
            *(arg for name in sorted(self.env) for arg in ("--env", name)),
            *(gpu_args(engine) if self._gpus else []),
            self.image,
            *KEEPER,
        )

    # ---- phases and exec ------------------------------------------------------------------------

    def phase_script(self, script: str, secrets: Path | None = None) -> str:
        """The host shell line that runs ``script`` inside the container; ``secrets``: the
        task's secrets file (``KEY=VALUE`` lines), fed to the ``exec`` on its standard input."""
        line = shlex.join(self.exec_argv(script, secrets=secrets is not None))
        return line if secrets is None else f"{line} < {shlex.quote(str(secrets))}"

    def exec_argv(self, script: str, *, secrets: bool = False) -> list[str]:
        """``exec`` of ``script`` in the work directory (the container's environment is the
        task's); ``secrets``: the shell inside first exports the ``KEY=VALUE`` lines of its
        standard input (the task's secrets: never in the container's configuration or the
        engine's database, as ``exec --env-file`` would leave them)."""
        shell = _READ_SECRETS + _PHASE_SHELL if secrets else _PHASE_SHELL
        return self._engine().argv(
            "exec", *(["--interactive"] if secrets else []), "-w", str(self.mounts.work_dir),
            self.name, "sh", "-c", shell, "gpulease-phase", script,
        )  # fmt: skip

    # ---- stops and the end ----------------------------------------------------------------------

    def signal_all(self, signal_name: str) -> bool:
        """Send ``signal_name`` (``TERM``, ``KILL``…) to every process of the container but its
        init and keeper; False when the container is not running."""
        if self.engine is None:
            return False
        argv = exec_argv(self.engine, self.name, ["sh", "-c", f"kill -s {signal_name} -1"])
        done = run_engine(self.engine, argv, timeout_s=30)
        return done.returncode == 0

    def end_processes(self) -> None:
        """End what the task left running inside (a phase's background processes), keeping the
        container for ``exec`` and ``ssh`` until the node's next task or its end."""
        if self.engine is not None and not self.removed:
            run_engine(self.engine, exec_argv(self.engine, self.name, ["sh", "-c", _END_PROCESSES]),
                       timeout_s=30)  # fmt: skip

    def running(self) -> bool:
        return self.engine is not None and container_running(self.engine, self.name)

    def remove(self) -> None:
        """Kill and remove the container (nothing when it is gone already)."""
        if self.engine is None:
            return
        done = run_engine(self.engine, remove_argv(self.engine, self.name))
        self.removed = done.returncode == 0
        if done.returncode != 0:
            log.warning("task %s: removing container %s failed: %s", self.task_id, self.name,
                        done.stderr.strip()[-300:])  # fmt: skip


def task_container(
    sub: NodeTask,
    engine: ContainerEngine | None,
    *,
    node_dir: Path,
    paths: TaskPaths,
    base_env: Mapping[str, str],
    credentials: Callable[[], RegistryCredentials | None],
) -> TaskContainer:
    """The container of ``sub``'s attempt on its node (``sub.image`` set), named by
    :func:`~gpulease.agent.containers.container_name`."""
    assert sub.image is not None
    return TaskContainer(
        engine,
        image=sub.image,
        name=container_name(sub.task_id, sub.attempt, sub.node_rank),
        task_id=sub.task_id,
        node_dir=node_dir,
        mounts=ContainerMounts(paths.work_dir, paths.checkpoint_dir, paths.task_dir),
        env=container_env(
            base_env,
            sub,
            work_dir=paths.work_dir,
            checkpoint_dir=paths.checkpoint_dir,
            preemption_file=paths.preemption_file,
            train_stats_file=paths.train_stats_file,
        ),
        credentials=credentials,
    )
