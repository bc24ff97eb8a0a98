"""The process table, read from ``/proc``: which processes each session holds, and signals to
every process group of a session.

The local provider starts each node's agent as a session leader, and the agent runs jobs in
process groups of that same session, so "the node" is "the session whose id is the agent's
pid". Zombies do not count as alive. A session id is trusted only while its leader (if still
there) is our agent — recognised by the node directory on its command line — so a recycled pid
never makes a dead node look alive.

Without ``/proc`` (not Linux) only the agent's own process group is seen. Also owns
``providers.local.node_cgroups`` (a node's agent put into a cgroup when it starts).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulease.errors import UserInputError

_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcessTable:
    """A snapshot: session id → [(pid, pgid)] of its live (non-zombie) processes."""

    sessions: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    has_proc: bool = True

    @classmethod
    def read(cls) -> ProcessTable:
        if not _PROC.is_dir():
            return cls(has_proc=False)
        sessions: dict[int, list[tuple[int, int]]] = {}
        for entry in os.scandir(_PROC):
            if not entry.name.isdigit():
                continue
            parsed = _stat(entry.name)
            if parsed is not None:
                pid, pgid, sid = parsed
                sessions.setdefault(sid, []).append((pid, pgid))
        return cls(sessions)

    def alive(self, sid: int, marker: str) -> bool:
        """True while session ``sid`` has a live process and is ours (see the module doc)."""
        if not self.has_proc:
            return _group_exists(sid)
        members = self.sessions.get(sid)
        if not members:
            return False
        if any(pid == sid for pid, _ in members):
            return marker in _cmdline(sid)
        return True

    def pids(self, sid: int) -> list[int]:
        return [pid for pid, _ in self.sessions.get(sid, [])]

    def signal(self, sid: int, sig: int) -> None:
        """Send ``sig`` to every process group of the session (the agent and every job)."""
        groups = {pgid for _, pgid in self.sessions.get(sid, [])} if self.has_proc else {sid}
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                continue


def _stat(pid: str) -> tuple[int, int, int] | None:
    try:
        text = (_PROC / pid / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 4 or fields[0] == "Z":
        return None
    return int(pid), int(fields[2]), int(fields[3])


def _cmdline(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def node_cgroups(local: Mapping[str, Any]) -> dict[int, Path]:
    """``providers.local.node_cgroups``: node rank (within a launch) → a cgroup directory whose
    ``cgroup.procs`` the agent of that rank joins (its task processes inherit it) — a
    deliberately slowed node (cgroup v1 ``cpu.cfs_quota_us``, ``blkio.throttle.*``)."""
    raw = local.get("node_cgroups") or {}
    if not isinstance(raw, Mapping):
        raise UserInputError(f"providers.local.node_cgroups: {{rank: cgroup dir}}, not {raw!r}")
    found: dict[int, Path] = {}
    for key, value in raw.items():
        where = f"providers.local.node_cgroups.{key}"
        if isinstance(key, bool) or not str(key).isdigit():
            raise UserInputError(f"{where}: the key is a node rank (0, 1, …), not {key!r}")
        path = Path(str(value))
        if not path.is_absolute() or not (path / "cgroup.procs").is_file():
            raise UserInputError(f"{where}: {value!r} is not a cgroup directory (no cgroup.procs)")
        found[int(key)] = path
    return found


def join_cgroup(pid: int, cgroup: Path) -> None:
    """Move process ``pid`` into ``cgroup`` (its children started later inherit it)."""
    (cgroup / "cgroup.procs").write_text(f"{pid}\n")
