"""``gpulease audit [--since 90d] [--json]``: the quarterly audit from the server.

Prints the findings ranked by dollars (what each cost or would have saved over the period),
each with its evidence and the action; ``--json`` prints the server's answer as it is. A bad
``--since`` exits 2 naming it. Moves no states.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpulease.cli.follow import client
from gpulease.cli.output import print_json
from gpulease.errors import UserInputError


def _check_since(value: str | None) -> None:
    from gpulease.units import parse_duration_hours

    if value is None:
        return
    try:
        hours = parse_duration_hours(value)
    except ValueError as exc:
        raise UserInputError(f"--since: {exc}") from None
    if hours <= 0:
        raise UserInputError(f"--since: must be a duration above zero, not {value!r}")


def _evidence(evidence: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in evidence.items())


def render(view: dict[str, Any]) -> str:
    """The findings as text, costliest first."""
    findings = view["findings"]
    days = (view["until"] - view["since"]) / 86400
    lines = [f"audit of the last {days:.0f} days: spend ${view['spend_usd']:,.2f}, "
             f"{len(findings)} findings worth ${view['total_usd']:,.2f}"]  # fmt: skip
    for i, finding in enumerate(findings, 1):
        lines.append(f"{i:>2}. ${finding['dollars']:>10,.2f}  {finding['title']}")
        lines.append(f"     action: {finding['action']}")
        lines.append(f"     evidence: {_evidence(finding['evidence'])}")
    lines += [f"note: {note}" for note in view.get("notes", [])]
    if not findings:
        lines.append("nothing to fix")
    return "\n".join(lines)


def audit(
    since: Annotated[
        str | None, typer.Option("--since", help="How far back: 90d (default), 30d, 12h.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Findings ranked by dollars: idle GPUs, clusters left up, slow or input-bound jobs,
    oversized GPUs, spot slack, cheaper regions, commitments, a stale catalog."""
    _check_since(since)
    with client() as api:
        view = api.audit(since)
    if as_json:
        print_json(view)
    else:
        typer.echo(render(view))
