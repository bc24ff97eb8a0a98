"""``gpulease checkpoints list|verify LOCATION``: inspect the checkpoints gpulease.train wrote.

Runs in process (no server): LOCATION is a directory, ``local://PATH`` or ``s3://BUCKET/PREFIX``
(through :func:`gpulease.storage.inspect_checkpoints`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulease.cli.output import console, print_json
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.storage.inspect import CheckpointInfo

app = typer.Typer(
    help="Inspect training checkpoints (a directory, local://PATH or s3://BUCKET/PREFIX).",
    no_args_is_help=True,
)

Location = Annotated[
    str, typer.Argument(help="Checkpoint directory, local://PATH or s3://BUCKET/PREFIX.")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _inspect(location: str) -> list[CheckpointInfo]:
    from gpulease.storage import inspect_checkpoints

    if "://" not in location and not Path(location).is_dir():
        raise UserInputError(f"LOCATION: {location} is not a directory")
    return inspect_checkpoints(location)


def _size(value: int | None) -> str:
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _render(infos: list[CheckpointInfo], location: str) -> None:
    from rich.table import Table

    out = console()
    if not infos:
        out.print(f"No checkpoints at {location}.")
        return
    table = Table(title=f"Checkpoints at {location}")
    for column in ("step", "status", "files", "size", "format", "written (UTC)"):
        table.add_column(column, justify="right" if column in {"step", "files", "size"} else "left")
    colours = {"complete": "green", "incomplete": "yellow", "corrupt": "red"}
    for info in infos:
        fmt = info.format or "—"
        if info.world_size:
            fmt += f" ×{info.world_size}"
        table.add_row(
            str(info.step),
            f"[{colours[info.status]}]{info.status}[/]",
            "—" if info.files is None else str(info.files),
            _size(info.bytes),
            fmt,
            info.written_at or "—",
        )
    out.print(table)
    latest = [i.step for i in infos if i.status == "complete"]
    out.print(f"Restore would take step {latest[-1]}." if latest else "Nothing to restore.")


@app.command("list")
def list_checkpoints(location: Location, as_json: AsJson = False) -> None:
    """List every checkpoint step with its status (complete, incomplete, corrupt)."""
    infos = _inspect(location)
    if as_json:
        complete = [i.step for i in infos if i.status == "complete"]
        print_json(
            {
                "location": location,
                "checkpoints": [i.as_dict() for i in infos],
                "latest_complete": complete[-1] if complete else None,
            }
        )
        return
    _render(infos, location)


@app.command("verify")
def verify(location: Location, as_json: AsJson = False) -> None:
    """Check every checkpoint's checksums; exit 1 when no checkpoint would restore.

    Incomplete steps (saves cut off by a crash) are reported but are not an error; a corrupt
    step is, when it is the newest one.
    """
    infos = _inspect(location)
    complete = [i for i in infos if i.status == "complete"]
    manifested = [i for i in infos if i.status != "incomplete"]
    newest_corrupt = bool(manifested) and manifested[-1].status == "corrupt"
    ok = bool(complete) and not newest_corrupt
    if as_json:
        print_json(
            {
                "location": location,
                "ok": ok,
                "checkpoints": [i.as_dict() for i in infos],
                "latest_complete": complete[-1].step if complete else None,
            }
        )
    else:
        _render(infos, location)
    if not ok:
        raise typer.Exit(1)
