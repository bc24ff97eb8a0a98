"""``gpulease profile NAME [--rank R] [--out DIR] [--json]``: fetch the profile that
``gpulease.train.profile`` wrote for one training process of a cluster (through the server,
from its node's agent), save its summary and Chrome trace into ``--out`` (default
``./profile-NAME-rank-R/``) and print the summary: the split of step time and the top operators.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpulease.cli.follow import client
from gpulease.cli.output import console, print_json
from gpulease.errors import UserInputError

RANK_HELP = (
    "The training process's rank (one process per node: the node rank; under torchrun: the "
    "global rank)."
)
OUT_HELP = "Where to save summary.json and trace.json.gz (default: ./profile-NAME-rank-R/)."
SPLIT_LABELS = {"compute": "compute", "communication": "communication",
                "data_wait": "data wait", "other": "other"}  # fmt: skip


def profile(
    name: Annotated[str, typer.Argument(help="Cluster name.")],
    rank: Annotated[int, typer.Option("--rank", "-r", min=0, help=RANK_HELP)] = 0,
    out: Annotated[Path | None, typer.Option("--out", help=OUT_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fetch a training process's profile (gpulease.train.profile): summary and trace."""
    target = out if out is not None else Path(f"profile-{name}-rank-{rank}")
    if target.exists() and not target.is_dir():
        raise UserInputError(f"--out: {target} is not a directory")
    with client() as api:
        found = api.profile(name, rank=rank)
        trace = api.profile_trace(name, rank=rank) if found.get("trace_bytes") is not None else None
    saved = save(target, found["summary"], trace)
    if as_json:
        print_json({**found, "saved": {k: str(v) for k, v in saved.items()}})
        return
    render(found, saved)


def save(target: Path, summary: dict[str, Any], trace: bytes | None) -> dict[str, Path]:
    """Write ``summary.json`` (and ``trace.json.gz``) into ``target``, atomically."""
    from gpulease.atomic import write_atomic, write_json_atomic

    try:
        target.mkdir(parents=True, exist_ok=True)
        saved = {"summary": target / "summary.json"}
        write_json_atomic(saved["summary"], summary)
        if trace is not None:
            saved["trace"] = target / "trace.json.gz"
            write_atomic(saved["trace"], trace)
    except OSError as exc:
        raise UserInputError(f"--out: cannot write into {target}: {exc.strerror or exc}") from None
    return saved


def render(found: dict[str, Any], saved: dict[str, Path]) -> None:
    from rich.table import Table

    summary = found["summary"]
    out = console()
    steps = summary.get("step_ms") or []
    mean = sum(steps) / len(steps) if steps else 0.0
    task = f", task {summary['task_id']}" if summary.get("task_id") else ""
    out.print(f"cluster {found['cluster']} rank {found['rank']} (node {found['node_rank']}{task}):"
              f" {summary.get('steps', 0)} steps profiled on {summary.get('device', '?')}, "
              f"{mean:.2f} ms per step")  # fmt: skip
    split = Table(title="step time", title_justify="left")
    for column in ("part", "ms", "share"):
        split.add_column(column, justify="left" if column == "part" else "right")
    for key, label in SPLIT_LABELS.items():
        part = summary.get("split", {}).get(key, {})
        split.add_row(label, f"{part.get('ms', 0.0):,.3f}", f"{part.get('share', 0.0):.1%}")
    out.print(split)
    ops = Table(title="top operators by self time", title_justify="left")
    for column in ("operator", "calls", "self ms", "share"):
        ops.add_column(column, justify="left" if column == "operator" else "right")
    for op in summary.get("top_ops", []):
        ops.add_row(op["name"], str(op["calls"]), f"{op['self_ms']:,.3f}", f"{op['share']:.1%}")
    out.print(ops)
    for kind, path in saved.items():
        out.print(f"{kind}: {path}")
