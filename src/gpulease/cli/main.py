"""Entry point of the ``gpulease`` console script: the Typer app and error handling.

Bad input (a :class:`~gpulease.errors.UserInputError`) prints one message and exits with code 2;
other gpulease errors exit with code 1; neither prints a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpulease.cli import (
    audit_cmd,
    bench_cmd,
    catalog_cmd,
    checkpoint_cmd,
    cluster_cmd,
    cost_cmd,
    dashboard_cmd,
    estimate_cmd,
    gpus_cmd,
    jobs_cmd,
    launch_cmd,
    metrics_cmd,
    plan_cmd,
    pool_cmd,
    profile_cmd,
    serve_cmd,
    server_cmd,
    sla_cmd,
    spot_cmd,
    ssh_cmd,
    tco_cmd,
    top_cmd,
)

# A CLI process loads no pydantic plugins: their entry-point scan slows every command's start.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

app = typer.Typer(
    name="gpulease",
    help="Rent GPU cloud servers for deep learning: what to rent, where, and what it will cost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(catalog_cmd.app, name="catalog")
app.command("plan")(plan_cmd.plan)
app.command("gpus")(gpus_cmd.gpus)
app.command("estimate")(estimate_cmd.estimate)
app.command("tco")(tco_cmd.tco)
app.command("launch")(launch_cmd.launch)
cluster_cmd.register(app)
app.command("ssh")(ssh_cmd.ssh)
app.command("top")(top_cmd.top)
app.command("audit")(audit_cmd.audit)
app.command("spot-sim")(spot_cmd.spot_sim)
app.add_typer(server_cmd.app, name="server")
app.add_typer(checkpoint_cmd.app, name="checkpoints")
app.add_typer(jobs_cmd.app, name="jobs")
app.add_typer(serve_cmd.app, name="serve")
app.add_typer(pool_cmd.app, name="pool")
app.add_typer(metrics_cmd.app, name="metrics")
app.command("dashboard")(dashboard_cmd.dashboard)
app.command("cost")(cost_cmd.cost)
app.command("sla")(sla_cmd.sla)
app.command("profile")(profile_cmd.profile)
app.command("bench")(bench_cmd.bench)


@app.command("schema")
def schema(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file.")
    ] = None,
) -> None:
    """Print the JSON Schema of the task YAML format."""
    import json

    from gpulease.spec import task_json_schema

    text = json.dumps(task_json_schema(), indent=2, sort_keys=False)
    if output:
        output.write_text(text + "\n", encoding="utf-8")
    else:
        typer.echo(text)


@app.command("version")
def version() -> None:
    """Print the gpulease version."""
    from gpulease import __version__

    typer.echo(__version__)


def run() -> None:
    """Console-script entry: run the app, turning gpulease errors into clean messages.

    Typer (standalone mode) reports usage errors itself with exit code 2.
    """
    from gpulease.errors import GpuleaseError, UserInputError

    try:
        app()
    except UserInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except GpuleaseError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run()
