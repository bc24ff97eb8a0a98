"""A task's secret values on its node (issue 20): checked, held, handed to the task, removed.

What this module owns:

- **the rules** a submission's ``secrets`` must follow (:func:`check_secrets`): valid
  environment variable names that are not the agent's own variables (the node variables of
  :mod:`gpulease.agent.env`, the container's), and values on one line (no CR, LF or NUL: the
  file below is ``KEY=VALUE`` lines). A refusal names the variable, never its value;
- **the values** of one task attempt (:class:`TaskSecrets`): in memory as
  :class:`pydantic.SecretStr`, and in ``tasks/<id>/secrets.env`` — ``KEY=VALUE`` lines, written
  atomically and ``0600`` from its creation — so an agent restarted mid-task resumes with them.
  The file and the values are dropped when the task reaches its end state (and when a newer
  attempt of the task is submitted);
- **how they reach the task's processes**: on the node, in the environment of each phase and
  ``exec`` (:func:`with_secrets`: over the task's ``envs``, under the node variables); in a
  container, on the standard input of each ``exec`` into it, read and exported by the shell
  inside before the task's script starts (:mod:`gpulease.agent.task_container`), so neither
  the container's configuration (``podman inspect``) nor the engine's database on disk ever
  holds them (an ``exec --env-file`` would: Podman keeps an exec session's environment in its
  ``bolt_state.db``).

Never in the task's record (``task.json``), a status, a log line or an error message.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import SecretStr

from gpulease.agent.env import NODE_VARIABLES
from gpulease.atomic import is_temp_name, write_atomic

log = logging.getLogger("gpulease.agent")

SECRETS_FILE = "secrets.env"  # in the task's directory
# what the agent sets itself: a secret may not take its place
RESERVED = frozenset({*NODE_VARIABLES, "GPULEASE_CONTAINER", "GPULEASE_CONTAINER_ENGINE"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LINE_BREAKS = ("\n", "\r", "\0")


class SecretsRefused(ValueError):
    """A submission's secrets break a rule; the message names the variable, never a value."""


def check_submission(secret_set: str | None, values: Mapping[str, SecretStr] | None) -> None:
    """Refuse secrets given for a task without a ``secret_set``, none for one with it, and
    values that break the rules of :func:`check_secrets`."""
    if values is not None and secret_set is None:
        raise SecretsRefused("secrets: given for a task without secret_set")
    if values is None and secret_set is not None:
        raise SecretsRefused("secrets: required for a task with secret_set (the server sends "
                             "the values of its set)")  # fmt: skip
    check_secrets(values or {})


def check_secrets(values: Mapping[str, SecretStr]) -> None:
    """Refuse (:class:`SecretsRefused`) a bad name or a value with a line break or NUL."""
    for name in sorted(values):
        if not _ENV_NAME.match(name):
            raise SecretsRefused(f"secrets: {name!r} is not a valid environment variable name")
        if name in RESERVED:
            raise SecretsRefused(f"secrets: {name} is set by the agent on every node and "
                                 "cannot be a secret")  # fmt: skip
        if any(c in values[name].get_secret_value() for c in _LINE_BREAKS):
            raise SecretsRefused(f"secrets.{name}: a secret's value may not hold a line break "
                                 "or a NUL byte")  # fmt: skip


class TaskSecrets:
    """The secret values of one task attempt: in memory and in its ``secrets.env`` until
    :meth:`remove`."""

    def __init__(self, path: Path, values: Mapping[str, SecretStr]) -> None:
        self.path = path
        self._values = dict(values)

    def __repr__(self) -> str:
        return f"TaskSecrets({self.path}, names={sorted(self._values)})"

    @classmethod
    def write(cls, task_dir: Path, values: Mapping[str, SecretStr]) -> TaskSecrets:
        """Check ``values`` and write them to ``task_dir/secrets.env`` (atomically, 0600)."""
        check_secrets(values)
        path = task_dir / SECRETS_FILE
        lines = "".join(f"{k}={v.get_secret_value()}\n" for k, v in sorted(values.items()))
        write_atomic(path, lines, mode=0o600)
        return cls(path, values)

    @classmethod
    def load(cls, task_dir: Path) -> TaskSecrets | None:
        """The values a restarted agent resumes a task with (None: there is no file, or it
        breaks the rules — logged by name only)."""
        path = task_dir / SECRETS_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("task dir %s: its secrets file cannot be read (%s); the task resumes "
                        "without its secrets", task_dir.name, type(exc).__name__)  # fmt: skip
            return None
        values = {}
        for line in text.split("\n")[:-1]:  # not splitlines: a value may hold \f, \v, \x85…
            name, _, value = line.partition("=")
            values[name] = SecretStr(value)
        try:
            check_secrets(values)
        except SecretsRefused as exc:
            log.warning("task dir %s: its secrets file is bad (%s); the task resumes without "
                        "its secrets", task_dir.name, exc)  # fmt: skip
            return None
        return cls(path, values)

    def file(self) -> Path | None:
        """The file of the values, for a container's ``exec`` (None once removed, or when
        there are none)."""
        return self.path if self._values and self.path.exists() else None

    def env(self) -> dict[str, str]:
        """The values as a process environment takes them (empty once removed)."""
        return {k: v.get_secret_value() for k, v in self._values.items()}

    def remove(self) -> None:
        """Forget the values and delete the file (and a temp one a killed writer left)."""
        self._values = {}
        remove_file(self.path.parent)


def remove_file(task_dir: Path) -> None:
    """Delete ``task_dir``'s secrets file, and any temp file of an interrupted write of it."""
    (task_dir / SECRETS_FILE).unlink(missing_ok=True)
    for left in task_dir.glob(f".{SECRETS_FILE}.tmp-*"):
        if is_temp_name(left.name):
            left.unlink(missing_ok=True)


def with_secrets(env: Mapping[str, str], secrets: TaskSecrets | None) -> dict[str, str]:
    """``env`` (a job's, :func:`gpulease.agent.env.job_env`) with ``secrets`` over the task's
    ``envs`` and under the node variables, which win."""
    if secrets is None:
        return dict(env)
    node = {k: env[k] for k in NODE_VARIABLES if k in env}
    return {**env, **secrets.env(), **node}
