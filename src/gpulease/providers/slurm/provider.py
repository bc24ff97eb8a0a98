"""The ``slurm`` provider: every launch is ONE Slurm allocation whose nodes each run an agent.

Files under ``root`` (``<home>/slurm`` by default; on a real cluster ``providers.slurm.root``
must be a directory every compute node sees)::

    requests/<key>/job.json        the idempotency record: job id, request id, node count
    requests/<key>/batch.sh        the batch script (srun … node.sh)
    requests/<key>/node.sh         run on every node: the agent of node-$SLURM_NODEID
    requests/<key>/node-<i>/token  the node's agent token (0600; :meth:`node_token`)
    requests/<key>/node-<i>/port   written by the agent once bound
    jobs/<job id>                  → <key>
    venvs/                         the agents' task environments (``serve --venv-root``)

States it reports (never moves: Slurm owns them): PENDING (queued, or running but the agent has
not written its port), RUNNING, TERMINATING (completing), TERMINATED (finished, cancelled,
failed; jobs slurmctld forgot are simply absent). A state change is a STATE_CHANGE event; a
requeue (``restart_cnt`` grew, or state REQUEUED / PREEMPTED / NODE_FAIL) is a PREEMPTED event.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import secrets
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from gpulease.atomic import write_atomic, write_json_atomic
from gpulease.clock import Clock, SystemClock
from gpulease.providers.base import (
    TAG_NODE_RANK,
    EventKind,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    ProviderOffers,
    SupportsMultiNode,
    SupportsNodeToken,
    SupportsOffers,
)
from gpulease.providers.slurm import mapping, script
from gpulease.providers.slurm.commands import SlurmBackend, SlurmCli
from gpulease.providers.slurm.offers import slurm_offers
from gpulease.providers.slurm.rest import SlurmRest
from gpulease.providers.slurm.settings import SlurmSettings

if TYPE_CHECKING:
    from gpulease.catalog import Catalog

_S = InstanceState
Job = Mapping[str, Any]
OFFERS_TIMEOUT_S = 5.0


def backend_for(
    settings: SlurmSettings, *, clock: Clock | None = None, timeout_s: float = 20.0,
    attempts: int = 4,
) -> SlurmBackend:  # fmt: skip
    """slurmrestd when ``rest_url`` is set, else the commands (locally or over ssh)."""
    kind = SlurmRest if settings.rest_url else SlurmCli
    return kind(settings, clock=clock, timeout_s=timeout_s, attempts=attempts)


class SlurmProvider(Provider, SupportsMultiNode, SupportsNodeToken, SupportsOffers):
    name = "slurm"

    def __init__(
        self,
        root: Path,
        settings: SlurmSettings | None = None,
        *,
        clock: Clock | None = None,
        python: str = sys.executable,
        cli: SlurmBackend | None = None,
    ) -> None:
        self.settings = settings or SlurmSettings.from_mapping({})
        self.root = Path(self.settings.root).expanduser() if self.settings.root else root
        self.cli: SlurmBackend = cli or backend_for(self.settings, clock=clock)
        # offers are asked for while planning: one quick try, never the retries of a launch
        self._quick: SlurmBackend | None = cli
        self._clock = clock or SystemClock()
        self._python = python
        self._seen: dict[str, InstanceState] = {}
        self._restarts: dict[str, int] = {}
        self._preempted: dict[str, int] = {}  # job id -> restart count already reported
        self._events: list[ProviderEvent] = []
        self._cluster: str | None = None

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None, root: Path, **kw: Any) -> SlurmProvider:
        return cls(root, SlurmSettings.from_mapping(section), **kw)

    def offers(self, catalog: Catalog) -> ProviderOffers:
        """The partitions' node shapes now, through this provider's backend (see
        :mod:`.offers`)."""
        if self._quick is None:
            self._quick = backend_for(self.settings, timeout_s=OFFERS_TIMEOUT_S, attempts=1)
        return slurm_offers(self._quick, self.settings, catalog)

    # ---- the Provider contract ---------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> list[Instance]:
        if request.num_nodes < 1 or request.gpus_per_node < 0:
            raise ProviderError("num_nodes must be >= 1 and gpus_per_node >= 0")
        partition = request.zone or (self.settings.partitions[0] if self.settings.partitions
                                     else None)  # fmt: skip
        folder = self._request_dir(request.request_id)
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder / ".lock"):
            job_id = self._existing_job(request, folder)
            if job_id is None:
                job_id = self._submit(request, folder, partition)
        found = [i for i in self._observe(self.cli.jobs()) if i.id.split(".")[0] == job_id]
        if found:
            return sorted(found, key=lambda i: i.node_rank)
        return [self._placeholder(request, job_id, rank) for rank in range(request.num_nodes)]

    def close(self) -> None:
        self.cli.close()

    def terminate(self, instance_ids: list[str]) -> None:
        wanted = {p[0] for p in map(mapping.split_id, instance_ids) if p is not None}
        if not wanted:
            return
        live = [
            str(j.get("job_id")) for j in self._our_jobs(self.cli.jobs())
            if str(j.get("job_id")) in wanted
            and mapping.instance_state(mapping.job_state(j), True) is not _S.TERMINATED
        ]  # fmt: skip
        if live:
            self.cli.cancel(sorted(live))

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        instances = self._observe(self.cli.jobs())
        return [i for i in instances if all(i.tags.get(k) == v for k, v in tags.items())]

    def poll_events(self) -> list[ProviderEvent]:
        self._observe(self.cli.jobs())
        events, self._events = self._events, []
        return events

    # ---- SupportsNodeToken ---------------------------------------------------------------------

    def node_token(self, instance_id: str) -> SecretStr:
        parts = mapping.split_id(instance_id)
        try:
            if parts is None:
                raise FileNotFoundError
            key = (self.root / "jobs" / parts[0]).read_text().strip()
            token = self.root / "requests" / key / f"node-{parts[1]}" / "token"
            return SecretStr(token.read_text().strip())
        except FileNotFoundError:
            raise ProviderError(f"{instance_id}: no such instance (or it was forgotten)") from None

    # ---- launching -----------------------------------------------------------------------------

    def _request_dir(self, request_id: str) -> Path:
        return self.root / "requests" / hashlib.sha256(request_id.encode()).hexdigest()[:16]

    def _existing_job(self, request: LaunchRequest, folder: Path) -> str | None:
        """The job this request id already submitted: the record, else squeue by job name."""
        record = folder / "job.json"
        if record.exists():
            data = json.loads(record.read_text())
            if (
                data.get("request_id") != request.request_id
                or data.get("nodes") != request.num_nodes
            ):
                raise ProviderError(f"request id {request.request_id} reused for another launch")
            return str(data["job_id"])
        name = script.job_name(request.request_id)
        for job in self._our_jobs(self.cli.jobs()):
            if job.get("name") == name:
                self._record(folder, request, str(job.get("job_id")))
                return str(job.get("job_id"))
        return None

    def _submit(self, request: LaunchRequest, folder: Path, partition: str | None) -> str:
        for rank in range(request.num_nodes):
            node = folder / f"node-{rank}"
            node.mkdir(exist_ok=True)
            node.chmod(0o700)
            _write_token_once(node / "token")
        (folder / "batch.sh").write_text(script.batch_script(folder))
        (folder / "node.sh").write_text(
            script.node_script(folder, self._python, self.settings.agent_host, self.root / "venvs")
        )
        job_id = self.cli.submit(request, folder, partition)
        self._record(folder, request, job_id)
        return job_id

    def _record(self, folder: Path, request: LaunchRequest, job_id: str) -> None:
        data = {"job_id": job_id, "request_id": request.request_id, "nodes": request.num_nodes}
        write_json_atomic(folder / "job.json", data)
        (self.root / "jobs").mkdir(parents=True, exist_ok=True)
        write_atomic(self.root / "jobs" / job_id, folder.name)

    # ---- observing -----------------------------------------------------------------------------

    def _our_jobs(self, jobs: list[Job]) -> list[Job]:
        return [
            j for j in jobs
            if str(j.get("name", "")).startswith(script.JOB_PREFIX)
            and script.parse_comment(j.get("comment")) is not None
        ]  # fmt: skip

    def _observe(self, jobs: list[Job]) -> list[Instance]:
        """Every node of our jobs, as instances; changes since the last look become events."""
        addresses: dict[str, str] | None = None
        instances: list[Instance] = []
        for job in self._our_jobs(jobs):
            if job.get("nodes") and addresses is None:
                addresses = {n.name: n.address for n in self.cli.nodes()}
            found = self._job_instances(job, addresses or {})
            self._note_requeue(job, found)
            instances.extend(found)
        listed = {i.id for i in instances}
        for instance in instances:
            self._note(instance.id, instance.state, instance.zone)
        for gone in [
            i for i, s in self._seen.items() if i not in listed and s is not _S.TERMINATED
        ]:
            self._note(gone, _S.TERMINATED, None, "slurmctld no longer lists the job")
        return instances

    def _job_instances(self, job: Job, addresses: Mapping[str, str]) -> list[Instance]:
        meta = script.parse_comment(job.get("comment")) or {}
        tags = meta.get("tags")
        tags = dict(tags) if isinstance(tags, dict) else {}
        job_id = str(job.get("job_id"))
        count = int(str(meta.get("nodes") or 0)) or max(mapping.number(job.get("node_count")), 1)
        state = mapping.job_state(job)
        hosts = self._hosts(str(job.get("nodes") or "")) if state != "PENDING" else []
        folder = self._folder_of(job_id)
        kind = meta.get("instance_type")
        gpus = int(str(meta.get("gpus_per_node") or 0))
        found = []
        for rank in range(count):
            address = addresses.get(hosts[rank]) if rank < len(hosts) else None
            port = _read_port(folder / f"node-{rank}" / "port") if folder else None
            agent_known = port is not None and address is not None
            url = f"http://{address}:{port}" if agent_known and state == "RUNNING" else None
            found.append(Instance(
                id=mapping.instance_id(job_id, rank), provider=self.name,
                state=mapping.instance_state(state, agent_known),
                tags={**tags, TAG_NODE_RANK: str(rank)}, region=self._cluster_name(),
                zone=str(job.get("partition") or "") or None,
                instance_type=str(kind) if kind else f"slurm-gpu{gpus}", node_rank=rank,
                private_ip=address,
                agent_url=url,
                price_per_hour=self.settings.price_per_gpu_hour * gpus,
                launched_at=float(mapping.number(job.get("submit_time"))) or None,
            ))  # fmt: skip
        return found

    def _note_requeue(self, job: Job, instances: list[Instance]) -> None:
        """A requeue (restart count grew, or a state that took the nodes) → PREEMPTED events."""
        job_id = str(job.get("job_id"))
        restarts = mapping.number(job.get("restart_cnt"))
        before = self._restarts.get(job_id)
        self._restarts[job_id] = restarts
        state = mapping.job_state(job)
        previous = self._seen.get(instances[0].id) if instances else None
        ran = previous is not None and previous is not _S.PENDING
        taken = (before is not None and restarts > before) or (state in mapping.TAKEN and ran)
        if not taken or self._preempted.get(job_id) == restarts:
            return
        self._preempted[job_id] = restarts
        folder = self._folder_of(job_id)
        for instance in instances:
            if folder is not None:  # the agents start again elsewhere: their old ports are stale
                (folder / f"node-{instance.node_rank}" / "port").unlink(missing_ok=True)
            self._events.append(ProviderEvent(
                EventKind.PREEMPTED, self._clock.now(), instance.id, instance.region,
                instance.zone, detail=f"slurm job {job_id} requeued ({state}, restarts {restarts})",
            ))  # fmt: skip

    def _note(
        self, instance_id: str, state: InstanceState, zone: str | None, why: str = ""
    ) -> None:
        previous = self._seen.get(instance_id)
        if previous is not None and previous is not state:
            detail = f"{previous.value} -> {state.value}" + (f": {why}" if why else "")
            self._events.append(ProviderEvent(
                EventKind.STATE_CHANGE, self._clock.now(), instance_id, self._cluster_name(),
                zone, detail=detail,
            ))  # fmt: skip
        self._seen[instance_id] = state

    # ---- helpers -----------------------------------------------------------------------------

    def _placeholder(self, request: LaunchRequest, job_id: str, rank: int) -> Instance:
        return Instance(
            id=mapping.instance_id(job_id, rank), provider=self.name, state=_S.PENDING,
            tags={**request.all_tags(), TAG_NODE_RANK: str(rank)}, region=self._cluster_name(),
            zone=request.zone, instance_type=request.instance_type, node_rank=rank,
            price_per_hour=self.settings.price_per_gpu_hour * request.gpus_per_node,
            launched_at=self._clock.now(),
        )  # fmt: skip

    def _hosts(self, nodelist: str) -> list[str]:
        if "[" not in nodelist:
            return [h for h in nodelist.split(",") if h]
        return self.cli.hostnames(nodelist)

    def _folder_of(self, job_id: str) -> Path | None:
        try:
            return self.root / "requests" / (self.root / "jobs" / job_id).read_text().strip()
        except FileNotFoundError:
            return None

    def _cluster_name(self) -> str:
        if self._cluster is None:
            self._cluster = self.cli.cluster_name()
        return self._cluster


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_port(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _write_token_once(path: Path) -> None:
    """A fresh token, readable by the owner only; kept across requeues (never half-written)."""
    with contextlib.suppress(FileExistsError):
        write_atomic(path, secrets.token_urlsafe(32) + "\n", mode=0o600, exclusive=True)
