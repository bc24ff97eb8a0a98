"""The process table, read from ``/proc``: which processes each session holds, and signals to
every process group of a session.

The local provider starts each node's agent as a session leader, and the agent runs jobs in
process groups of that same session, so "the node" is "the session whose id is the agent's
pid". Zombies do not count as alive. A session id is trusted only while its leader (if still
there) is our agent — recognised by the node directory on its command line — so a recycled pid
never makes a dead node look alive.

Without ``/proc`` (not Linux) only the agent's own process group is seen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

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
