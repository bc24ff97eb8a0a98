"""``gpulease ssh NAME``: a shell on a node of a cluster, in the task's directory and with its
environment (node rank, node IPs, MASTER_ADDR, checkpoint dir, …).

On the ``local`` and ``sim`` providers a node is a process group on this machine, so the shell is a
local ``bash`` started in the node's work directory with the environment the node's agent gives
its job (read through ``exec``). Cloud nodes get a real SSH session when their providers land.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from gpulease.cli.follow import client
from gpulease.errors import UserInputError

LOCAL_PROVIDERS = {"local", "sim"}
_PROBE = 'printf "%s\\0" "$PWD"; env -0'


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
        if view["provider"] not in LOCAL_PROVIDERS:
            raise UserInputError(
                f"ssh: {name} runs on {view['provider']}; a shell is available "
                f"only on {', '.join(sorted(LOCAL_PROVIDERS))} nodes so far"
            )
        probe = api.exec(name, _PROBE, rank=rank, timeout_s=30.0)
    if probe["exit_code"] != 0:
        raise UserInputError(f"ssh: the node did not answer: {probe['output'][:200]}")
    cwd, *pairs = probe["output"].split("\0")
    env = dict(p.split("=", 1) for p in pairs if "=" in p)
    os.chdir(cwd)
    argv = ["bash", "-c", command] if command is not None else ["bash", "-i"]
    os.execvpe("bash", argv, env)
