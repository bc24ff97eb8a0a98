"""SSH from the server to a machine it rents (a cloud VM; later a Slurm login node): one
:class:`SshTarget` says where and as whom, :func:`ssh_options` the options every connection
uses, :func:`run_ssh` runs one remote command (stdin given, output captured, bounded in time).

Host keys are accepted on first use into the provider's ``known_hosts`` and pinned under
``HostKeyAlias`` (the instance id where there is one): cloud providers recycle public addresses,
instance ids they never reuse, so a new VM at an old address is not a "changed host key".
Key authentication only (``BatchMode``), never an ssh agent's or the user's other keys
(``IdentitiesOnly``). Nothing here logs a command's input; callers log outcomes only.
Moves no states.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

#: ssh's own exit status for "could not connect / authenticate" (a command's own is 0..254).
SSH_FAILED = 255


@dataclass(frozen=True, slots=True)
class SshTarget:
    host: str
    user: str
    key: Path
    known_hosts: Path
    port: int = 22
    alias: str | None = None  # the name host keys are pinned under (default: host)

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}"


@dataclass(frozen=True, slots=True)
class SshResult:
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def connected(self) -> bool:
        return self.returncode != SSH_FAILED

    def tail(self, lines: int = 5) -> str:
        """The last lines of stderr, for a log line or an error message."""
        return " | ".join(self.stderr.strip().splitlines()[-lines:])


def ssh_options(target: SshTarget, *, connect_timeout_s: int = 10) -> list[str]:
    options = [
        "-i", str(target.key),
        "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", f"UserKnownHostsFile={target.known_hosts}",
        "-o", f"ConnectTimeout={connect_timeout_s}",
        "-o", "ServerAliveInterval=15",
        "-o", "LogLevel=ERROR",
    ]  # fmt: skip
    if target.alias:
        options += ["-o", f"HostKeyAlias={target.alias}"]
    if target.port != 22:
        options += ["-p", str(target.port)]
    return options


def ssh_argv(target: SshTarget, remote_command: str | None = None, *, ssh: str = "ssh",
             extra: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    """``ssh`` with the target's options, ``extra`` options, the destination and the command."""
    argv = [ssh, *ssh_options(target), *extra, target.destination]
    return [*argv, remote_command] if remote_command is not None else argv


def run_ssh(
    target: SshTarget, remote_command: str, *, stdin: bytes | None = None,
    timeout_s: float = 120.0, ssh: str = "ssh",
) -> SshResult:  # fmt: skip
    """Run ``remote_command`` (a shell command line on the target) and wait for it. A timeout is
    reported as an ssh failure; the remote side's own failures come back as its exit code."""
    target.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ssh_argv(target, remote_command, ssh=ssh), input=stdin or b"",
            capture_output=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return SshResult(SSH_FAILED, b"", f"ssh to {target.host} timed out after {timeout_s:.0f}s")
    except OSError as exc:  # no ssh binary
        return SshResult(SSH_FAILED, b"", f"cannot run {ssh}: {exc}")
    return SshResult(done.returncode, done.stdout, done.stderr.decode(errors="replace"))
