"""Entry point of the ``gpulease`` console script: the Typer app and error handling.

Bad input (a :class:`~gpulease.errors.UserInputError`) prints one message and exits with code 2;
other gpulease errors exit with code 1; neither prints a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import click
import typer

from gpulease.cli import catalog_cmd, gpus_cmd, plan_cmd

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
    """Console-script entry: run the app, turning gpulease errors into clean messages."""
    from gpulease.errors import GpuleaseError, UserInputError

    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except UserInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except GpuleaseError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run()
