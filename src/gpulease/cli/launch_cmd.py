"""``gpulease launch TASK.yaml``: plan, provision, set up and run a task through the server,
showing progress and the run's output live; exits with the task's exit status."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpulease.cli.follow import client, follow, say


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
        typer.Option("--idle-minutes-to-autostop", "-i", min=0, help="Autostop after N idle min."),
    ] = None,
    down: Annotated[
        bool, typer.Option("--down", help="With -i: terminate instead of stopping.")
    ] = False,
) -> None:
    """Launch a task: rent the best launchable plan, set it up and run it."""
    from gpulease.spec import load_task_with_warnings

    task, warnings = load_task_with_warnings(task_file)
    for warning in warnings:
        say(f"warning: {warning}")
    workdir = resolve_workdir(task.workdir)
    data = task.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    resolve_file_mounts(data)
    if provider:
        data.setdefault("resources", {})["providers"] = [p.lower() for p in provider]
    api = client()
    with api:
        view = api.launch(data, name=name, workdir=workdir, autostop_minutes=idle_minutes,
                          down=down)  # fmt: skip
        say(_summary(view))
        if detach:
            say(f"follow it with: gpulease logs {view['name']} -f")
            return
        code = follow(api, view["name"], progress=True)
    raise typer.Exit(code)


def resolve_workdir(workdir: str | None) -> str | None:
    """The task's workdir as an absolute path (relative ones are taken from the current
    directory); it must exist."""
    if workdir is None:
        return None
    path = Path(workdir).expanduser().resolve()
    if not path.is_dir():
        from gpulease.errors import UserInputError

        raise UserInputError(f"workdir: no such directory: {workdir}")
    return str(path)


def resolve_file_mounts(data: dict[str, Any]) -> None:
    """Make the local paths of the task's ``file_mounts`` absolute (relative ones are taken
    from the current directory, like the workdir; URLs are left as they are). The server checks
    that they exist."""
    import re

    mounts = data.get("file_mounts")
    if not mounts:
        return
    url = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
    data["file_mounts"] = {
        remote: local if url.match(local) else str(Path(local).expanduser().absolute())
        for remote, local in mounts.items()
    }


def _summary(view: dict[str, Any]) -> str:
    where = "/".join(p for p in (view["provider"], view["region"]) if p)
    nodes = f"{view['num_nodes']}× {view['instance_type']}"
    price = view.get("price_per_hour")
    cost = f", ${price:,.2f}/h" if price is not None else ""
    return f"launching {view['name']} on {where}: {nodes}{cost}"
