"""``gpulease dashboard [--no-open]``: a one-time login link to the server's web dashboard.

Asks the server (starting it when none runs) for a login link, prints it, and opens it with
:mod:`webbrowser` when a browser can be shown here: not with ``--no-open``, not in an SSH
session, not on Linux without ``DISPLAY`` / ``WAYLAND_DISPLAY`` (``$BROWSER`` set counts as a
browser). The link works once, for two minutes; the API token itself is never printed. Moves no
states.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Annotated

import typer


def why_not_open(environ: Mapping[str, str], platform: str = sys.platform) -> str | None:
    """Why no browser should be opened here (None: try one)."""
    if environ.get("BROWSER"):
        return None
    if environ.get("SSH_CONNECTION") or environ.get("SSH_TTY"):
        return "an SSH session"
    graphical = environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY")
    if platform.startswith("linux") and not graphical:
        return "no DISPLAY"
    return None


def dashboard(
    no_open: Annotated[
        bool, typer.Option("--no-open", help="Only print the link; open no browser.")
    ] = False,
) -> None:
    """Print a one-time login link to the web dashboard and open it in a browser."""
    import webbrowser

    from gpulease.cli.follow import client

    with client() as api:
        link = api.dashboard_login()
    url = str(link["url"])
    ttl = int(float(link.get("ttl_s", 120)))
    typer.echo(url)
    typer.echo(f"(a one-time link: it works once, within {ttl} s)", err=True)
    if no_open:
        return
    reason = why_not_open(os.environ)
    if reason is not None:
        typer.echo(f"not opening a browser ({reason}): open the link above", err=True)
        return
    if not webbrowser.open(url):
        typer.echo("no browser found: open the link above", err=True)
