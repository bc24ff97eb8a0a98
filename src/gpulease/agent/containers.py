"""The node's container engine: the commands the agent gives it (issue 19).

What this module owns: finding the node's engine (Podman or Docker on ``PATH``; Podman first,
it needs no daemon), the command lines of the engine commands the agent uses — ``exec`` into a
running container, ``rm``, ``ps``, ``image exists``, ``login``, ``pull`` — and
:func:`ensure_image`, which pulls an image at most once per node (nothing when the image is
there already), logging in to its registry first when credentials are given. The life of a
task's container (its ``run``, phases, stops) is :mod:`gpulease.agent.task_container`.

The builders are pure (argv lists); :func:`run_engine` is the one thin runner, which may give
the engine extra environment variables (how a task's variables reach a container: named on the
command line, valued only in the engine's environment). A registry password goes to ``login
--password-stdin`` on standard input, and is cut out of every error message.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

EngineKind = Literal["podman", "docker"]
ENGINE_PREFERENCE: tuple[EngineKind, ...] = ("podman", "docker")
ENGINE_TIMEOUT_S = 600.0  # one engine command (a pull of a large image included)
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ContainerError(RuntimeError):
    """An engine command failed; the message names the command and carries its stderr."""


@dataclass(frozen=True)
class ContainerEngine:
    """The engine the agent drives: its kind, executable, global flags (``--runtime runc``,
    ``--root DIR``) and extra environment for its own processes (``CONTAINERS_CONF``)."""

    kind: EngineKind
    executable: str
    global_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        return [self.executable, *self.global_args, *args]

    def process_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` (the environment the engine process starts with) plus :attr:`env`."""
        return {**base, **self.env}


@dataclass(frozen=True)
class RegistryCredentials:
    """A registry login; the password is never shown (``repr`` hides it)."""

    registry: str
    username: str
    password: str = field(repr=False)


def detect_engine(
    path: str | None = None, preference: Sequence[EngineKind] = ENGINE_PREFERENCE
) -> ContainerEngine | None:
    """The first engine of ``preference`` found on ``path`` (default ``PATH``), or ``None``."""
    for kind in preference:
        found = shutil.which(kind, path=path)
        if found:
            return ContainerEngine(kind=kind, executable=found)
    return None


def container_name(task_id: str, attempt: int, node_rank: int = 0) -> str:
    """A task attempt's container on node ``node_rank``: ``gpulease-<task id>-<attempt>`` plus
    ``-n<rank>`` on nodes after the first (nodes of one cluster may share an engine: the local
    provider's), unsafe characters as ``_``."""
    rank = f"-n{node_rank}" if node_rank else ""
    return _NAME_UNSAFE.sub("_", f"gpulease-{task_id}-{attempt}{rank}")


def gpu_args(engine: ContainerEngine) -> list[str]:
    """The flags that pass every GPU of the node through."""
    if engine.kind == "podman":
        return ["--device", "nvidia.com/gpu=all"]
    return ["--gpus", "all"]


def exec_argv(engine: ContainerEngine, name: str, command: Sequence[str]) -> list[str]:
    """Run ``command`` inside the running container ``name``."""
    return engine.argv("exec", name, *command)


def remove_argv(engine: ContainerEngine, name: str) -> list[str]:
    """Kill and remove ``name`` at once. Needed after a SIGKILL of the phase's group: that
    kills the engine's client, not the container (Podman's conmon lives on outside it)."""
    if engine.kind == "podman":
        return engine.argv("rm", "--force", "--ignore", "--time", "0", name)
    return engine.argv("rm", "--force", name)


def container_running(engine: ContainerEngine, name: str) -> bool:
    done = run_engine(engine, engine.argv("ps", "--quiet", "--filter", f"name=^{name}$"))
    return done.returncode == 0 and bool(done.stdout.strip())


def image_exists_argv(engine: ContainerEngine, ref: str) -> list[str]:
    if engine.kind == "podman":
        return engine.argv("image", "exists", ref)
    return engine.argv("image", "inspect", "--format", "{{.Id}}", ref)


def login_argv(engine: ContainerEngine, creds: RegistryCredentials) -> list[str]:
    """``login`` reading the password from standard input (never on the command line)."""
    return engine.argv("login", "--username", creds.username, "--password-stdin", creds.registry)


def pull_argv(engine: ContainerEngine, ref: str) -> list[str]:
    return engine.argv("pull", ref)


def registry_of(ref: str) -> str:
    """The registry an image reference names (``docker.io`` when its first part is no host)."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def run_engine(
    engine: ContainerEngine,
    argv: Sequence[str],
    *,
    stdin: str | None = None,
    secret: str | None = None,
    timeout_s: float = ENGINE_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one engine command and return it (whatever its exit status); ``secret`` is cut out
    of its output. A command that does not start or finish is a :class:`ContainerError`."""
    try:
        done = subprocess.run(
            list(argv),
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            env={**engine.process_env(os.environ), **(env or {})},
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ContainerError(f"{_shown(argv)}: {_redact(str(e), secret)}") from None
    if secret:
        done.stdout, done.stderr = _redact(done.stdout, secret), _redact(done.stderr, secret)
    return done


def image_present(engine: ContainerEngine, ref: str) -> bool:
    return run_engine(engine, image_exists_argv(engine, ref)).returncode == 0


def ensure_image(
    engine: ContainerEngine, ref: str, credentials: RegistryCredentials | None = None
) -> bool:
    """Make ``ref`` present on the node: nothing when it is (``False``); otherwise log in
    (when ``credentials`` are given) and pull it (``True``). A failure is a
    :class:`ContainerError` naming the image, without the password."""
    if image_present(engine, ref):
        return False
    secret = credentials.password if credentials else None
    if credentials is not None:
        _check(engine, login_argv(engine, credentials), f"registry login for image {ref}",
               stdin=credentials.password + "\n", secret=secret)  # fmt: skip
    _check(engine, pull_argv(engine, ref), f"pull of image {ref}", secret=secret)
    return True


def _check(
    engine: ContainerEngine,
    argv: list[str],
    what: str,
    *,
    stdin: str | None = None,
    secret: str | None = None,
) -> None:
    done = run_engine(engine, argv, stdin=stdin, secret=secret)
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise ContainerError(f"{what} failed ({engine.kind}): {detail[0]}")


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def _shown(argv: Sequence[str]) -> str:
    return " ".join(argv[:3])
