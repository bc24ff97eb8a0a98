"""``gpulease ssh NAME``: a shell on a node of a cluster, in the task's directory and with its
environment (node rank, node IPs, MASTER_ADDR, checkpoint dir, …).

The task's directory and environment are read from the node's agent (``exec`` of a probe). On the
``local`` and ``sim`` providers a node is a process group on this machine, so the shell is a
local ``bash`` started there. On providers whose nodes are machines the server logs in to
(``aws``: the server's ``GET /v1/clusters/NAME/ssh`` gives address, user, key and host-key
options), it is a real ``ssh`` session to the node that changes to that directory and starts
``bash`` with that environment (through ``sudo -n`` when the login user is not root: the agent
runs as root). The key is a file on the server's machine: this works where the server runs.
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
    if target is not None:
        os.execvp("ssh", remote_argv(target, cwd, env, command))
    os.chdir(cwd)
    argv = ["bash", "-c", command] if command is not None else ["bash", "-i"]
    os.execvpe("bash", argv, env)


def remote_argv(
    target: dict[str, Any], cwd: str, env: dict[str, str], command: str | None
) -> list[str]:
    """``ssh`` into the node, then ``cd`` to the task's directory and run bash in its env."""
    key = Path(str(target["key_file"]))
    if not key.exists():
        raise UserInputError(
            f"ssh: the node's key {key} is on the server's machine, not here: run gpulease ssh "
            "where the server runs"
        )
    if "TERM" in os.environ:
        env = {**env, "TERM": os.environ["TERM"]}
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items())
                           if k not in _NOISE)  # fmt: skip
    shell = f"bash -c {shlex.quote(command)}" if command is not None else "bash -i"
    sudo = "" if target["user"] == "root" else "sudo -n "
    remote = f"cd {shlex.quote(cwd)} && exec {sudo}env -i {assignments} {shell}"
    tty = [] if command is not None else ["-t"]
    return ["ssh", *tty, *target["options"], str(target["destination"]), remote]
