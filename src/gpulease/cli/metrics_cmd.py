"""``gpulease metrics prometheus-config``: a Prometheus scrape config for the running server.

Prints a ``prometheus.yml`` (one ``scrape_configs`` entry: the server's address, ``/metrics``, the
API token as ``authorization.credentials_file`` — the home's ``server.token``, or a copy written
where ``--token-file`` says — or, with ``--inline-token``, inline). The token goes to stdout only
when asked for inline, never to a log. Moves no states.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from gpulease.errors import UserInputError

app = typer.Typer(help="The server's Prometheus metrics.", no_args_is_help=True)

_DURATION = re.compile(r"^(\d+(ms|s|m|h))+$")


def _duration(value: str, option: str) -> str:
    if not _DURATION.match(value):
        raise UserInputError(f"{option}: a Prometheus duration such as 15s or 1m, not {value!r}")
    return value


def scrape_config(
    url: str,
    *,
    job_name: str = "gpulease",
    interval: str = "15s",
    credentials_file: Path | None = None,
    credentials: str | None = None,
) -> str:
    """The text of a prometheus.yml scraping ``url``'s ``/metrics`` (strings quoted as JSON,
    which YAML reads as they are)."""
    parts = urlsplit(url)
    q = json.dumps
    lines = [
        f"# Prometheus scrape config for the gpulease server at {url}.",
        "# Its port changes when the server restarts unless fixed: gpulease server run --port P",
        "# (or GPULEASE_SERVER_PORT=P). Use as prometheus.yml, or copy the entry into yours.",
        "scrape_configs:",
        f"  - job_name: {q(job_name)}",
        f"    scrape_interval: {interval}",
        f"    scheme: {parts.scheme or 'http'}",
        "    metrics_path: /metrics",
    ]
    if credentials_file is not None or credentials is not None:
        lines += ["    authorization:", "      type: Bearer"]
        if credentials is not None:
            lines.append(f"      credentials: {q(credentials)}")
        else:
            lines.append(f"      credentials_file: {q(str(credentials_file))}")
    lines += ["    static_configs:", f"      - targets: [{q(parts.netloc)}]"]
    return "\n".join(lines) + "\n"


@app.command("prometheus-config")
def prometheus_config(
    job_name: Annotated[str, typer.Option("--job-name", help="The scrape job's name.")] = (
        "gpulease"
    ),
    interval: Annotated[str, typer.Option("--interval", help="Scrape interval.")] = "15s",
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="Copy the API token here (0600) and name this file."),
    ] = None,
    inline_token: Annotated[
        bool, typer.Option("--inline-token", help="Put the token itself in the config.")
    ] = False,
    no_auth: Annotated[
        bool,
        typer.Option("--no-auth", help="No token (server.metrics.open_to_loopback is set)."),
    ] = False,
) -> None:
    """Print a Prometheus scrape config for the running server (exit 1 when none runs)."""
    from gpulease import config
    from gpulease.atomic import write_atomic
    from gpulease.client import running
    from gpulease.client.server import TOKEN_FILE

    if sum([token_file is not None, inline_token, no_auth]) > 1:
        raise UserInputError("--token-file, --inline-token and --no-auth: give at most one")
    interval = _duration(interval, "--interval")
    found = running()
    if found is None:
        typer.echo("error: no gpulease server is running (start one: gpulease server run "
                   "--port P)", err=True)  # fmt: skip
        raise typer.Exit(1)
    client, info = found
    client.close()
    home_token = config.home() / TOKEN_FILE
    credentials_file: Path | None = None if no_auth or inline_token else home_token
    credentials = home_token.read_text(encoding="utf-8").strip() if inline_token else None
    if token_file is not None:
        token_file = token_file.expanduser().absolute()
        write_atomic(token_file, home_token.read_bytes(), mode=0o600)
        credentials_file = token_file
    typer.echo(scrape_config(info.url, job_name=job_name, interval=interval,
                             credentials_file=credentials_file, credentials=credentials),
               nl=False)  # fmt: skip
