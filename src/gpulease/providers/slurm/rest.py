"""Talking to slurmrestd (openapi/v0.0.38, Slurm 22.05) instead of running the commands.

:class:`SlurmRest` has the interface the provider uses of :class:`SlurmCli` (``jobs``,
``nodes``, ``cluster_name``, ``hostnames``, ``submit``, ``cancel``). Auth: the headers
``X-SLURM-USER-NAME`` (``rest_user``) and ``X-SLURM-USER-TOKEN``, the JWT read from the
environment variable named by ``rest_token_env`` at each request (never logged, never stored).
Transport failures, 5xx answers and an unreachable slurmctld are :class:`ProviderUnavailable`,
retried with jittered, bounded backoff; error bodies are classified by their Slurm error numbers
(:mod:`~gpulease.providers.slurm.rest_errors`), not by their text. Moves no states.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from gpulease.backoff import retry
from gpulease.clock import Clock, SystemClock
from gpulease.providers.base import LaunchRequest, ProviderError, ProviderUnavailable
from gpulease.providers.slurm import script
from gpulease.providers.slurm.commands import NodeInfo, parse_gres
from gpulease.providers.slurm.rest_errors import (
    CANCEL,
    NOTHING,
    SUBMIT,
    Accept,
    classify_errors,
    rest_errors,
)
from gpulease.providers.slurm.settings import SlurmSettings

API = "/slurm/v0.0.38"


class SlurmRest:
    """slurmrestd of one cluster."""

    def __init__(
        self,
        settings: SlurmSettings,
        *,
        timeout_s: float = 20.0,
        attempts: int = 4,
        retry_base: float = 0.2,
        clock: Clock | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not settings.rest_url:
            raise ProviderError("slurmrestd: providers.slurm.rest_url is not set")
        self.settings = settings
        self._attempts = attempts
        self._retry_base = retry_base
        self._clock = clock or SystemClock()
        self._http = httpx.Client(
            base_url=settings.rest_url, timeout=timeout_s, transport=transport
        )
        self._cluster: str | None = None

    def close(self) -> None:
        self._http.close()

    # ---- requests ----------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        token = os.environ.get(self.settings.rest_token_env, "").strip()
        if not token:
            raise ProviderError(
                f"slurmrestd: no token: set the environment variable "
                f"{self.settings.rest_token_env} (e.g. from `scontrol token`)"
            )
        return {"X-SLURM-USER-NAME": self.settings.rest_user, "X-SLURM-USER-TOKEN": token}

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        partition: str | None = None,
        accept: Accept = NOTHING,
    ) -> Mapping[str, Any]:
        """The JSON answer of ``method path``; retried while slurmrestd/slurmctld is away.
        Errors in the body that ``accept`` covers are not failures of this call."""
        return retry(
            lambda: self._once(method, path, body, partition, accept),
            attempts=self._attempts,
            base=self._retry_base,
            cap=2.0,
            clock=self._clock,
        )

    def _once(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        partition: str | None,
        accept: Accept,
    ) -> Mapping[str, Any]:
        what = f"slurmrestd {method} {path}"
        try:
            answer = self._http.request(method, API + path, headers=self._headers(), json=body)
        except httpx.TimeoutException:
            raise ProviderUnavailable(f"{what}: no answer in time") from None
        except httpx.TransportError as exc:
            raise ProviderUnavailable(f"{what}: {type(exc).__name__}", delay=0.5) from None
        if answer.status_code in (401, 403):
            raise ProviderError(
                f"{what}: authentication failed (HTTP {answer.status_code}; is the token in "
                f"{self.settings.rest_token_env} valid for {self.settings.rest_user}?)"
            )
        if answer.status_code >= 500 and answer.status_code != 500:
            raise ProviderUnavailable(f"{what}: HTTP {answer.status_code}", delay=0.5)
        try:
            data = answer.json()
        except ValueError:
            data = None
        if not isinstance(data, Mapping):
            if answer.status_code >= 500:
                raise ProviderUnavailable(f"{what}: HTTP {answer.status_code}", delay=0.5)
            raise ProviderError(f"{what}: HTTP {answer.status_code}, not JSON")
        errors = rest_errors(data)
        failed = [e for e in errors if not accept.covers(e)]
        if failed:
            raise classify_errors(what, failed, partition=partition)
        if answer.status_code >= 400 and not errors:
            raise ProviderError(f"{what}: HTTP {answer.status_code}")
        return data

    # ---- the backend interface ---------------------------------------------------------------

    def jobs(self) -> list[Mapping[str, Any]]:
        """Every job slurmctld still knows (finished ones for MinJobAge)."""
        jobs = self.request("GET", "/jobs").get("jobs") or []
        found = [j for j in jobs if isinstance(j, Mapping)]
        if self._cluster is None:
            for job in found:
                if job.get("cluster"):
                    self._cluster = str(job["cluster"])
                    break
        return found

    def nodes(self) -> list[NodeInfo]:
        """Every (node, partition) pair, like ``sinfo -N``."""
        found = []
        for node in self.request("GET", "/nodes").get("nodes") or []:
            if not isinstance(node, Mapping):
                continue
            count, kind = parse_gres(str(node.get("gres") or ""))
            for partition in node.get("partitions") or []:
                found.append(NodeInfo(
                    name=str(node.get("name")), partition=str(partition),
                    address=str(node.get("address") or node.get("hostname") or ""),
                    state=str(node.get("state") or "").lower(), gpus=count, gpu_type=kind,
                    cpus=_int(node.get("cpus")), memory_mb=_int(node.get("real_memory")),
                    arch=str(node.get("architecture") or ""),
                ))  # fmt: skip
        return found

    def cluster_name(self) -> str:
        """From the jobs slurmctld lists (v0.0.38 has no config endpoint); ``slurm`` if none."""
        if self._cluster is None:
            self.jobs()
        return self._cluster or "slurm"

    def hostnames(self, nodelist: str) -> list[str]:
        return expand_hostlist(nodelist)

    def submit(self, request: LaunchRequest, folder: Path, partition: str | None) -> str:
        """POST job/submit: ``folder/batch.sh`` with what sbatch_argv would pass."""
        job: dict[str, Any] = {
            "name": script.job_name(request.request_id),
            "nodes": request.num_nodes,
            "tasks_per_node": 1,
            "requeue": True,
            "standard_output": str(folder / "slurm-%j.out"),
            "current_working_directory": str(folder),
            "comment": script.comment(request),
            "environment": self._job_environment(),
        }
        if request.gpus_per_node > 0:
            job["gpus_per_node"] = str(request.gpus_per_node)
        if partition:
            job["partition"] = partition
        if self.settings.account:
            job["account"] = self.settings.account
        if self.settings.qos:
            job["qos"] = self.settings.qos
        body = {"script": (folder / "batch.sh").read_text(), "job": job}
        # "not available now" comes with a job id: the job was queued (pending), like sbatch
        data = self.request("POST", "/job/submit", body=body, partition=partition, accept=SUBMIT)
        job_id = str(data.get("job_id") or "")
        if not job_id.isdigit():
            raise ProviderError(f"slurmrestd job/submit: no job id in the answer ({job_id!r})")
        return job_id

    def cancel(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            self.request("DELETE", f"/job/{job_id}", accept=CANCEL)

    def _job_environment(self) -> dict[str, str]:
        """This process's environment for the job (as sbatch exports it), less the token and
        Slurm's own variables."""
        return {
            k: v for k, v in os.environ.items()
            if k != self.settings.rest_token_env and not k.startswith(("SLURM_", "SBATCH_"))
        }  # fmt: skip


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(nodelist: str) -> list[str]:
    """``vm,vm-[1-2]``, ``n[01-03,7]`` → each host name (what ``scontrol show hostnames`` does
    for one bracket per name)."""
    hosts: list[str] = []
    depth, start = 0, 0
    items = []
    for i, ch in enumerate(nodelist):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(nodelist[start:i])
            start = i + 1
    items.append(nodelist[start:])
    for item in filter(None, (x.strip() for x in items)):
        head, bracket, rest = item.partition("[")
        if not bracket:
            hosts.append(item)
            continue
        ranges, _, tail = rest.partition("]")
        for part in ranges.split(","):
            found = _RANGE.match(part.strip())
            if found is None:
                raise ProviderError(f"slurmrestd: cannot read the node list {nodelist!r}")
            low, high = found.group(1), found.group(2) or found.group(1)
            for n in range(int(low), int(high) + 1):
                hosts.append(f"{head}{str(n).zfill(len(low))}{tail}")
    return hosts
