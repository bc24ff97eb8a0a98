"""``gpulease server run|stop|status|rotate-secrets-key``: the local server. Other commands start it
on first use; ``run`` keeps it in the foreground (the same program: ``python -m gpulease.server
run``); ``rotate-secrets-key`` runs ``python -m gpulease.server rotate-secrets-key`` (the CLI never
imports the server) and exits with its code."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Annotated

import typer

from gpulease.cli.output import print_json

app = typer.Typer(help="The local gpulease server.", no_args_is_help=True)


@app.command("run")
def run(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free one).")] = 0,
) -> None:
    """Run the server in the foreground (Ctrl-C stops it; clusters keep running)."""
    argv = [sys.executable, "-m", "gpulease.server", "run", "--host", host, "--port", str(port)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


@app.command("stop")
def stop() -> None:
    """Stop the server (clusters keep running; the next server resumes them)."""
    from gpulease.client import stop as stop_server

    info = stop_server()
    typer.echo(
        "no server was running" if info is None else f"stopped gpulease server (pid {info.pid})"
    )


@app.command("status")
def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Whether the server runs, where, and for how long (exit 1 when it does not)."""
    from gpulease.client import running

    found = running()
    if found is None:
        if as_json:
            print_json({"running": False})
        else:
            typer.echo("no gpulease server is running")
        raise typer.Exit(1)
    api, info = found
    with api:
        health = api.health()
    if as_json:
        uptime, version = health.get("uptime_s"), health.get("version")
        print_json({"running": True, "pid": info.pid, "port": info.port, "url": info.url,
                    "uptime_s": uptime, "version": version})  # fmt: skip
        return
    typer.echo(
        f"gpulease server (pid {info.pid}) at {info.url}, up {health.get('uptime_s', 0):.0f} s"
    )


@app.command("rotate-secrets-key")
def rotate_secrets_key() -> None:
    """Rotate the vault's key: a new key, every stored secret set re-encrypted with it, the old
    keys dropped (works whether or not the server runs; prints how many sets)."""
    sys.stdout.flush()
    sys.stderr.flush()
    done = subprocess.run(
        [sys.executable, "-m", "gpulease.server", "rotate-secrets-key"], check=False
    )
    raise typer.Exit(done.returncode)
