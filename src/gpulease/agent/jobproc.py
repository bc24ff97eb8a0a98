"""Processes of a job: start a phase (setup or run) in its own process group, signal the group,
learn how it ended, and run one-off ``exec`` commands.

A phase runs as ``bash -c WRAPPER`` where the wrapper runs the user's script with ``bash -c``
and writes its exit status to an *exit file*. The wrapper traps TERM (so it outlives a graceful
stop and still records the status) while the user's script gets the signal normally. The exit
file lets an agent that restarted while a job ran learn the job's exit code without being its
parent.

Process groups: each phase gets its own group (``setpgid``) so one ``killpg`` reaches the script
and everything it started; the group stays in the agent's session, so whoever started the agent
(the local provider) can find every process of the node by session id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from gpulease.wire import ExecResult

_WRAPPER = (
    'trap : TERM; bash -c "$1"; rc=$?; '
    'printf "%s" "$rc" > "$2.tmp" && mv -f "$2.tmp" "$2"; exit "$rc"'
)
MAX_EXEC_OUTPUT = 1 << 20  # bytes of exec output returned; the rest is cut
_PROC = Path("/proc")


def spawn_phase(
    script: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path,
    exit_path: Path,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``script`` with its stdout and stderr appended to ``log_path``; return at once.
    ``pass_fds`` are inherited (a lock the phase holds while it runs)."""
    exit_path.unlink(missing_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        return subprocess.Popen(
            ["bash", "-c", _WRAPPER, "gpulease-job", script, str(exit_path)],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            process_group=0,
            close_fds=True,
            pass_fds=pass_fds,
        )
    finally:
        os.close(fd)


def read_exit_file(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (FileNotFoundError, ValueError):
        return None


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group; False when the group is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    """True while a process of the group lives. Zombies do not count (on a machine whose init
    does not reap, a dead job would otherwise look alive for ever); without ``/proc``, any
    process of the group counts."""
    if not _PROC.is_dir():
        return signal_group(pgid, 0)
    for entry in os.scandir(_PROC):
        if entry.name.isdigit() and _live_member(entry.name, pgid):
            return True
    return False


def _live_member(pid: str, pgid: int) -> bool:
    try:
        stat = (_PROC / pid / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid)


def describe_exit(returncode: int) -> tuple[int, str | None]:
    """A Popen return code as (shell-style exit code, signal name or None)."""
    if returncode < 0:
        return 128 - returncode, _signal_name(-returncode)
    if returncode > 128:
        return returncode, _signal_name(returncode - 128)
    return returncode, None


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def run_exec(
    command: str, *, cwd: Path, env: Mapping[str, str], timeout_s: float, scratch: Path
) -> ExecResult:
    """Run ``command`` with ``bash -c`` in its own group; kill the group at the timeout."""
    with tempfile.TemporaryFile(dir=scratch) as out:
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        signal_group(proc.pid, signal.SIGKILL)  # what the command left behind
        out.seek(0)
        data = out.read(MAX_EXEC_OUTPUT + 1)
    code, _ = describe_exit(proc.returncode)
    return ExecResult(
        exit_code=None if timed_out else code,
        output=data[:MAX_EXEC_OUTPUT].decode("utf-8", "replace"),
        timed_out=timed_out,
        truncated=len(data) > MAX_EXEC_OUTPUT,
    )
