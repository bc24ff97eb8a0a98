"""``gpulease ssh NAME``: a shell on a node of a cluster, in the task's directory and with its
environment (node rank, node IPs, MASTER_ADDR, checkpoint dir, …).

The task's directory and environment are read from the node's agent (``exec`` of a probe). On the
``local`` and ``sim`` providers a node is a process group on this machine, so the shell is a
local ``bash`` started there. On providers whose nodes are machines the server logs in to
(``aws``: the server's ``GET /v1/clusters/NAME/ssh`` gives address, user, key and host-key
options), it is a real ``ssh`` session to the node that changes to that directory and starts
``bash`` with that environment (through ``sudo -n`` when the login user is not root: the agent
runs as root). The key is a file on the server's machine: this works where the server runs.

A task with an image (``resources.image_id``) runs in a container; the probe then answers from
inside it (``GPULEASE_CONTAINER`` names it, ``GPULEASE_CONTAINER_ENGINE`` the engine that runs
it), and the shell is ``ENGINE exec -it`` into that container (on the node, over ``ssh``, on
providers with remote nodes), where the task's environment is the container's own.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from gpulease.cli.follow import client
from gpulease.errors import UserInputError

LOCAL_PROVIDERS = {"local", "sim"}
_PROBE = 'printf "%s\\0" "$PWD"; env -0'
_NOISE = {"_", "SHLVL", "PWD", "OLDPWD"}


def ssh(
    name: Annotated[str, typer.Argument(help="Cluster name.")],
    rank: Annotated[
        int, typer.Option("--rank", "-r", min=0, help="Which node (0 = the head).")
    ] = 0,
    command: Annotated[
        str | None, typer.Option("--command", help="Run this instead of an interactive shell.")
    ] = None,
) -> None:
    """Open a shell on a node, in the task's directory and environment."""
    with client() as api:
        view = api.cluster(name)
        probe = api.exec(name, _PROBE, rank=rank, timeout_s=30.0)
        target = None if view["provider"] in LOCAL_PROVIDERS else api.ssh_target(name, rank=rank)
    if probe["exit_code"] != 0:
        raise UserInputError(f"ssh: the node did not answer: {probe['output'][:200]}")
    cwd, *pairs = probe["output"].split("\0")
    env = dict(p.split("=", 1) for p in pairs if "=" in p)
    inside = container_argv(env, cwd, command)
    if inside is not None:
        if target is not None:
            os.execvp("ssh", remote_container_argv(target, inside, command))
        os.execvp(inside[0], inside)
    if target is not None:
        os.execvp("ssh", remote_argv(target, cwd, env, command))
    os.chdir(cwd)
    argv = ["bash", "-c", command] if command is not None else ["bash", "-i"]
    os.execvpe("bash", argv, env)


_SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash {f} "$@"; fi; exec sh {f} "$@"'


def container_argv(env: dict[str, str], cwd: str, command: str | None) -> list[str] | None:
    """``ENGINE exec`` into the task's container (bash there when it has it, else sh), or None
    when the task runs on the node itself."""
    name, engine = env.get("GPULEASE_CONTAINER"), env.get("GPULEASE_CONTAINER_ENGINE")
    if not name or not engine:
        return None
    if command is not None:
        return [engine, "exec", "-i", "-w", cwd, name, "sh", "-c", _SHELL.format(f="-c"),
                "gpulease-ssh", command]  # fmt: skip
    return [engine, "exec", "-i", "-t", "-w", cwd, name, "sh", "-c", _SHELL.format(f="-i"),
            "gpulease-ssh"]  # fmt: skip


def remote_container_argv(
    target: dict[str, Any], inside: list[str], command: str | None
) -> list[str]:
    """``ssh`` into the node, then the engine's ``exec`` into the task's container."""
    _check_key(target)
    sudo = "" if target["user"] == "root" else "sudo -n "
    tty = [] if command is not None else ["-t"]
    remote = sudo + shlex.join(inside)
    return ["ssh", *tty, *target["options"], str(target["destination"]), remote]


def _check_key(target: dict[str, Any]) -> None:
    key = Path(str(target["key_file"]))
    if not key.exists():
        raise UserInputError(
            f"ssh: the node's key {key} is on the server's machine, not here: run gpulease ssh "
            "where the server runs"
        )


def remote_argv(
    target: dict[str, Any], cwd: str, env: dict[str, str], command: str | None
) -> list[str]:
    """``ssh`` into the node, then ``cd`` to the task's directory and run bash in its env."""
    _check_key(target)
    if "TERM" in os.environ:
        env = {**env, "TERM": os.environ["TERM"]}
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items())
                           if k not in _NOISE)  # fmt: skip
    shell = f"bash -c {shlex.quote(command)}" if command is not None else "bash -i"
    sudo = "" if target["user"] == "root" else "sudo -n "
    remote = f"cd {shlex.quote(cwd)} && exec {sudo}env -i {assignments} {shell}"
    tty = [] if command is not None else ["-t"]
    return ["ssh", *tty, *target["options"], str(target["destination"]), remote]
