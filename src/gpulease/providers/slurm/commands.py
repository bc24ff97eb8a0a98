"""Running the Slurm commands (sbatch, squeue, scancel, sinfo, scontrol) and reading their output.

Every call is ``subprocess.run([...])`` with ``SLURM_CONF`` in its environment, never a shell,
always with a timeout. Failures are classified (:func:`classify`): an unreachable slurmctld is
:class:`ProviderUnavailable` (retried with jittered, bounded backoff), a partition that cannot
hold the job is :class:`CapacityError`, anything else :class:`ProviderError`. With
``login: {ssh: user@host}`` the same argv runs through ``ssh`` on the login node. Moves no states.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpulease.backoff import retry
from gpulease.clock import Clock, SystemClock
from gpulease.errors import GpuleaseError
from gpulease.providers.base import (
    CapacityError,
    LaunchRequest,
    ProviderError,
    ProviderUnavailable,
)
from gpulease.providers.slurm import script
from gpulease.providers.slurm.settings import SlurmSettings

_UNREACHABLE = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "slurm_load_jobs error: unable to contact",
    "zero bytes were transmitted",
    "munge",
)
_NO_ROOM = (
    "requested node configuration is not available",
    "node count specification invalid",
    "requested partition configuration not available",
)


def classify(command: str, stderr: str, *, partition: str | None = None) -> GpuleaseError:
    """A Slurm command's failure as a typed error."""
    text = stderr.strip().lower()
    message = f"{command}: {stderr.strip() or 'failed'}"
    if any(s in text for s in _UNREACHABLE):
        return ProviderUnavailable(message, delay=0.5)
    if any(s in text for s in _NO_ROOM):
        return CapacityError(message, zone=partition)
    return ProviderError(message)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node of one partition, from ``sinfo``."""

    name: str
    partition: str
    address: str
    state: str
    gpus: int
    gpu_type: str | None
    cpus: int
    memory_mb: int
    arch: str = ""  # the node's CPU architecture where the backend says (slurmrestd), else ""


class SlurmBackend(Protocol):
    """What the provider needs of a cluster: the commands (:class:`SlurmCli`) or slurmrestd
    (:class:`~gpulease.providers.slurm.rest.SlurmRest`)."""

    def jobs(self) -> list[Mapping[str, Any]]: ...
    def nodes(self) -> list[NodeInfo]: ...
    def cluster_name(self) -> str: ...
    def hostnames(self, nodelist: str) -> list[str]: ...
    def submit(self, request: LaunchRequest, folder: Path, partition: str | None) -> str: ...
    def cancel(self, job_ids: list[str]) -> None: ...
    def close(self) -> None: ...


class SlurmCli:
    """The Slurm client commands of one cluster."""

    def __init__(
        self,
        settings: SlurmSettings,
        *,
        timeout_s: float = 20.0,
        attempts: int = 4,
        retry_base: float = 0.2,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self._timeout = timeout_s
        self._attempts = attempts
        self._retry_base = retry_base
        self._clock = clock or SystemClock()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.settings.slurm_conf:
            env["SLURM_CONF"] = self.settings.slurm_conf
        return env

    def run(self, argv: list[str], *, partition: str | None = None) -> str:
        """stdout of ``argv``; retried while slurmctld is unreachable."""
        return retry(
            lambda: self._run_once(argv, partition),
            attempts=self._attempts,
            base=self._retry_base,
            cap=2.0,
            clock=self._clock,
        )

    def _over_ssh(self, argv: list[str]) -> list[str]:
        """``argv`` run on the login node: ssh (never asking for a password), the configured
        options, the cluster's slurm.conf passed as SLURM_CONF when one is configured."""
        settings = self.settings
        assert settings.ssh is not None
        conf = ["-o", f"SetEnv=SLURM_CONF={settings.slurm_conf}"] if settings.slurm_conf else []
        return ["ssh", "-o", "BatchMode=yes", *settings.ssh_options, *conf, settings.ssh,
                shlex.join(argv)]  # fmt: skip

    def _run_once(self, argv: list[str], partition: str | None) -> str:
        full = self._over_ssh(argv) if self.settings.ssh is not None else argv
        try:
            done = subprocess.run(
                full, env=self.env(), capture_output=True, text=True, timeout=self._timeout,
                stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except FileNotFoundError:
            raise ProviderError(f"{argv[0]}: not installed (is this a Slurm login node?)") from None
        except subprocess.TimeoutExpired:
            raise ProviderUnavailable(f"{argv[0]}: no answer in {self._timeout:g} s") from None
        if done.returncode != 0:
            raise classify(argv[0], done.stderr, partition=partition)
        return done.stdout

    def submit(self, request: LaunchRequest, folder: Path, partition: str | None) -> str:
        """sbatch ``folder/batch.sh`` for ``request``; the new job's id."""
        argv = script.sbatch_argv(request, self.settings, folder, partition)
        out = self.run(argv, partition=partition).strip()
        job_id = out.split(";")[0]
        if not job_id.isdigit():
            raise ProviderError(f"sbatch: unexpected answer {out!r}")
        return job_id

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            self.run(["scancel", *job_ids])

    def jobs(self) -> list[Mapping[str, Any]]:
        """Every job slurmctld still knows (``squeue --json``, finished ones for MinJobAge)."""
        out = self.run(["squeue", "--json", "--states=all"])
        try:
            data = json.loads(out)
        except ValueError:
            raise ProviderError("squeue --json: not JSON") from None
        jobs = data.get("jobs") or []
        return [j for j in jobs if isinstance(j, Mapping)]

    def nodes(self) -> list[NodeInfo]:
        """Every (node, partition) pair ``sinfo`` shows."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N|%P|%o|%T|%G|%c|%m"])
        return [n for n in map(parse_sinfo_line, out.splitlines()) if n is not None]

    def cluster_name(self) -> str:
        for line in self.run(["scontrol", "show", "config"]).splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "ClusterName":
                return value.strip()
        return "slurm"

    def close(self) -> None:
        """Nothing to release: every command is its own process."""

    def hostnames(self, nodelist: str) -> list[str]:
        if not nodelist:
            return []
        return self.run(["scontrol", "show", "hostnames", nodelist]).split()


def parse_gres(gres: str) -> tuple[int, str | None]:
    """``gpu:4``, ``gpu:a100:8(S:0-1)``, ``(null)`` → (count, type or None)."""
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        try:
            return int(parts[-1]), (parts[1] if len(parts) > 2 else None)
        except ValueError:
            continue
    return 0, None


def parse_sinfo_line(line: str) -> NodeInfo | None:
    fields = line.strip().split("|")
    if len(fields) != 7:
        return None
    name, partition, address, state, gres, cpus, memory = fields
    count, kind = parse_gres(gres)
    return NodeInfo(
        name=name, partition=partition.rstrip("*"), address=address, state=state, gpus=count,
        gpu_type=kind, cpus=_int(cpus), memory_mb=_int(memory),
    )  # fmt: skip


def _int(text: str) -> int:
    try:
        return int(text.rstrip("+"))
    except ValueError:
        return 0
