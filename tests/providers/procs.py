"""Read the process table the way a suspicious operator would: every live (non-zombie) process
whose environment names the node, or that runs in the node's session."""

from __future__ import annotations

import json
from pathlib import Path

from gpulease.providers.local import LocalProvider


def _stat(pid_dir: Path) -> tuple[str, int] | None:
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[3])


def _environ_names(pid_dir: Path, instance_ids: set[str]) -> bool:
    try:
        environ = (pid_dir / "environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(f"GPULEASE_INSTANCE_ID={i}".encode() in environ for i in instance_ids)


def node_pids(provider: LocalProvider, instance_ids: list[str]) -> list[int]:
    """Live pids of the nodes: by their session (from the registry) or their environment."""
    sessions = set()
    for instance_id in instance_ids:
        path = provider.root / "instances" / f"{instance_id}.json"
        if path.exists():
            sid = json.loads(path.read_text()).get("sid")
            if sid:
                sessions.add(int(sid))
    found = []
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        stat = _stat(pid_dir)
        if stat is None or stat[0] == "Z":
            continue
        if stat[1] in sessions or _environ_names(pid_dir, set(instance_ids)):
            found.append(int(pid_dir.name))
    return found
