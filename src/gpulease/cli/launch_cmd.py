"""``gpulease launch TASK.yaml``: plan, provision, set up and run a task through the server,
showing progress and the run's output live; exits with the task's exit status. ``--env`` /
``--env-file`` give the task's envs and ``--secret`` its secrets (:mod:`gpulease.cli.envs`); an
env or secret the file lists without a value must get one, here or from the environment, or
nothing is launched (exit 2)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpulease.cli.envs import (
    EnvFileOption,
    EnvOption,
    SecretOption,
    env_overrides,
    secret_overrides,
)
from gpulease.cli.follow import client, follow, say

if TYPE_CHECKING:
    from pydantic import SecretStr

    from gpulease.spec import Task


def launch(
    task_file: Annotated[Path, typer.Argument(help="Task YAML (gpulease or SkyPilot format).")],
    name: Annotated[
        str | None,
        typer.Option("--cluster", "-c", "--name", "-n", help="Cluster name (default: the task's)."),
    ] = None,
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider",
            "-p",
            help="Launch only on this provider (repeatable); "
            "replaces the task's resources.providers.",
        ),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Return once launched; do not follow.")
    ] = False,
    idle_minutes: Annotated[
        int | None,
        typer.Option(
            "--idle-minutes-to-autostop",
            "-i",
            min=0,
            help="Autostop after N idle min (overrides the task's resources.autostop).",
        ),
    ] = None,
    down: Annotated[
        bool | None,
        typer.Option(
            "--down/--no-down",
            help="Autostop terminates instead of stopping (default: the task's autostop.down).",
        ),
    ] = None,
    over_budget: Annotated[
        bool,
        typer.Option("--over-budget", help="Launch although a block budget refuses it."),
    ] = False,
    env: EnvOption = None,
    env_file: EnvFileOption = None,
    secret: SecretOption = None,
) -> None:
    """Launch a task: rent the best launchable plan, set it up and run it."""
    envs, secrets = env_overrides(env, env_file), secret_overrides(secret)
    task, said = load_for_launch(task_file, provider, envs, secrets)
    for note in not_for_launch(task):
        say(f"warning: {note}")
    api = client()
    with api:
        view = api.launch(task, name=name, autostop_minutes=idle_minutes, down=down,
                          over_budget=over_budget)  # fmt: skip
        say_new_warnings(view, said)
        say(_summary(view))
        if detach:
            say(f"follow it with: gpulease logs {view['name']} -f")
            return
        code = follow(api, view["name"], progress=True)
    raise typer.Exit(code)


def not_for_launch(task: Task) -> list[str]:
    """What of the task ``launch`` does not act on, and the command that does."""
    notes = []
    if task.service is not None:
        notes.append("service: is read by `gpulease serve up` (replicas behind an endpoint); "
                     "launch runs the task once on one cluster")  # fmt: skip
    if task.pool is not None:
        notes.append(
            "pool: is read by `gpulease pool up`; launch runs the task once on one cluster"
        )
    if task.resources.pool is not None:
        notes.append(
            "resources.pool: only managed jobs run on pool nodes (`gpulease jobs launch`); "
            f"launch rents a cluster of its own, not a node of {task.resources.pool!r}"
        )
    return notes


def load_for_launch(
    task_file: Path,
    providers: list[str] | None,
    envs: Mapping[str, str] | None = None,
    secrets: Mapping[str, SecretStr] | None = None,
) -> tuple[Task, list[str]]:
    """The task file, parsed here (errors name the field and the line), with ``envs`` (``--env``)
    and ``secrets`` (``--secret``) over its own and its value-less envs and secrets from this
    environment (still missing: exit 2, naming them), its warnings said, and limited to
    ``--provider`` when given; returns the task and the warnings said."""
    from gpulease.spec import load_task_with_warnings, with_providers

    task, warnings = load_task_with_warnings(
        task_file, envs=envs, secrets=secrets, environ=os.environ, require_envs=True
    )
    for warning in warnings:
        say(f"warning: {warning}")
    return (with_providers(task, providers) if providers else task), warnings


def say_new_warnings(view: dict[str, Any], said: list[str]) -> None:
    """The server's warnings that were not said already (the server reads the task without its
    file, so its warning ``envs.X: …`` was said here as ``task.yaml:3: envs.X: …``)."""
    for warning in view.get("warnings", []):
        if not any(seen == warning or seen.endswith(f": {warning}") for seen in said):
            say(f"warning: {warning}")


def _summary(view: dict[str, Any]) -> str:
    where = "/".join(p for p in (view["provider"], view["region"]) if p)
    nodes = f"{view['num_nodes']}× {view['instance_type']}"
    price = view.get("price_per_hour")
    cost = f", ${price:,.2f}/h" if price is not None else ""
    return f"launching {view['name']} on {where}: {nodes}{cost}"
