"""The ``sim`` provider: a simulated cloud whose nodes are real local processes.

Capacity, provisioning delay and spot preemptions follow :class:`SimCloud`'s rules in the sim
clock's time (``time_scale`` simulated seconds per real second, so a demo of hours takes seconds);
the nodes themselves are :class:`LocalProvider` nodes — real agents running real jobs in real
time, so a preempted training really stops.

States it moves (as :class:`InstanceState` views over the local nodes): PENDING until the
simulated provisioning delay has passed (the agent may already run; its URL is withheld), then
RUNNING; a spot node reaching its preemption time is terminated (events PREEMPTION_NOTICE at
``notice_seconds`` before, then PREEMPTED) and reported TERMINATED once its processes are gone.
Its records (launch, ready and preemption times, in sim time) live in ``root/sim.json`` and the
sim clock's origin in ``root/clock.json``, so a restarted server continues the same simulation.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import SecretStr

from gpulease.atomic import write_json_atomic
from gpulease.catalog.types import OfferTable
from gpulease.clock import Clock, ScaledClock
from gpulease.providers.base import (
    TAG_REQUEST,
    CapacityError,
    EventKind,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    ProviderEvent,
    ProviderOffers,
    SupportsMultiNode,
    SupportsNodeToken,
    SupportsOffers,
    SupportsPriceHistory,
    SupportsSpot,
    SupportsSpotMarket,
)
from gpulease.providers.local import LocalProvider
from gpulease.providers.sim_cloud import SimCloud, SimSettings

if TYPE_CHECKING:
    from gpulease.catalog import Catalog


@dataclass
class SimRecord:
    """What the simulated cloud decided for one node (times in sim seconds)."""

    region: str | None
    zone: str | None
    spot: bool
    launched_at: float
    ready_at: float
    preempt_at: float | None
    notice_sent: bool = False
    preempted: bool = False


def _load_clock(path: Path, scale: float) -> tuple[ScaledClock, float]:
    """The sim clock, continuing from where a previous server left it, and the simulated
    cloud's origin (sim time it first started: price changes and traces count from it)."""
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        elapsed_real = max(0.0, time.time() - float(saved["real_start"]))
        start = float(saved["sim_start"])
        return ScaledClock(scale, start=start + elapsed_real * scale), start
    clock = ScaledClock(scale)
    origin = clock.now()
    _write_json(path, {"real_start": time.time(), "sim_start": origin, "scale": scale})
    return clock, origin


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data, mode=0o600)  # gpulease-internal state, as before


class SimProvider(
    Provider,
    SupportsSpot,
    SupportsMultiNode,
    SupportsNodeToken,
    SupportsSpotMarket,
    SupportsPriceHistory,
    SupportsOffers,
):
    name = "sim"
    shares_files = True  # its nodes are local processes

    def __init__(
        self,
        root: Path,
        *,
        settings: SimSettings | None = None,
        clock: Clock | None = None,
        nodes: LocalProvider | None = None,
    ) -> None:
        self.root = root
        self.settings = settings or SimSettings()
        self._clock = clock
        self._origin: float | None = None
        self._cloud: SimCloud | None = None
        self.billing = self.settings.billing
        self.nodes = nodes or LocalProvider(root / "local")
        self._path = root / "sim.json"
        self._lock = threading.Lock()
        self._records: dict[str, SimRecord] = self._load()
        self._events: list[ProviderEvent] = []

    @classmethod
    def from_config(cls, config: Mapping[str, Any], root: Path) -> SimProvider:
        """From the ``providers.sim`` config section (see :class:`SimSettings`)."""
        return cls(root, settings=SimSettings.from_mapping(config, where="providers.sim"))

    @property
    def clock(self) -> Clock:
        """The sim clock, read (or started) on first use, so building the provider only to ask
        for its offers (``gpulease plan``) writes nothing."""
        if self._clock is None:
            self._clock, self._origin = _load_clock(
                self.root / "clock.json", self.settings.time_scale
            )
        return self._clock

    @property
    def cloud(self) -> SimCloud:
        """The simulated cloud, from its first origin (a restarted server keeps its schedule of
        price changes and trace); an injected clock starts it at the first use."""
        if self._cloud is None:
            now = self.clock.now()
            self._cloud = SimCloud(self.settings, start=self._origin or now)
        return self._cloud

    def offers(self, catalog: Catalog) -> ProviderOffers:
        """The catalog's own offers — same regions, zones, shapes, prices and interruption
        bands — under the provider name ``sim``."""
        columns = catalog.offers.column_dict()
        columns["provider"] = np.full(len(catalog.offers), "sim")
        columns["source"] = np.char.add("sim of ", catalog.offers.source.astype(str))
        return ProviderOffers(OfferTable.from_columns(columns))

    # ---- the Provider contract ---------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> list[Instance]:
        existing = self.nodes.list_instances({TAG_REQUEST: request.request_id})
        if not existing:  # a repeat of a launched request never meets a capacity error
            now = self.clock.now()
            self.cloud.check_capacity(request.region, request.zone)
            if request.spot and not self.cloud.spot_available(now, request.num_nodes):
                raise CapacityError(
                    "no spot capacity now", region=request.region, zone=request.zone
                )
        instances = self.nodes.launch(request)
        with self._lock:
            for instance in instances:
                if instance.id not in self._records:
                    self._records[instance.id] = self._decide(request, instance)
            self._save()
        return [self._view(i) for i in instances]

    def terminate(self, instance_ids: list[str]) -> None:
        self.nodes.terminate(instance_ids)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        self._advance()
        return [self._view(i) for i in self.nodes.list_instances(tags)]

    def poll_events(self) -> list[ProviderEvent]:
        self._advance()
        events, self._events = self._events, []
        for event in self.nodes.poll_events():
            events.append(replace(event, at=self.clock.now()))
        return events

    def node_token(self, instance_id: str) -> SecretStr:
        return self.nodes.node_token(instance_id)

    def close(self) -> None:
        self.nodes.close()

    # ---- the spot market -----------------------------------------------------------------------

    def spot_available(self, region: str | None, zone: str | None, num_nodes: int) -> bool | None:
        return self.cloud.spot_available(self.clock.now(), num_nodes)

    def spot_price(
        self, region: str | None, zone: str | None, instance_type: str | None, quoted: float
    ) -> float | None:
        return quoted * self.cloud.spot_price_factor(self.clock.now())

    @property
    def market_clock(self) -> Clock:
        return self.clock

    def spot_price_changes(
        self,
        region: str | None,
        zone: str | None,
        instance_type: str | None,
        quoted: float,
        *,
        after: float,
        until: float,
    ) -> list[tuple[float, float]]:
        return [(at, quoted * f) for at, f in self.cloud.spot_price_changes(after, until)]

    # ---- simulation ----------------------------------------------------------------------------

    def _decide(self, request: LaunchRequest, instance: Instance) -> SimRecord:
        now = self.clock.now()
        preempt = self.cloud.preempted_at(now, request.num_nodes) if request.spot else None
        return SimRecord(
            region=request.region,
            zone=request.zone,
            spot=request.spot,
            launched_at=now,
            ready_at=self.cloud.ready_at(now),
            preempt_at=preempt,
        )

    def _advance(self) -> None:
        """Send due notices and take back spot nodes whose time has come."""
        now = self.clock.now()
        doomed: list[str] = []
        with self._lock:
            for instance_id, record in self._records.items():
                if record.preempt_at is None or record.preempted:
                    continue
                if not record.notice_sent and now >= self.cloud.notice_at(record.preempt_at):
                    record.notice_sent = True
                    self._events.append(
                        self._event(
                            EventKind.PREEMPTION_NOTICE,
                            instance_id,
                            record,
                            "spot capacity reclaimed soon",
                        )
                    )
                if now >= record.preempt_at:
                    record.preempted = True
                    doomed.append(instance_id)
                    self._events.append(
                        self._event(
                            EventKind.PREEMPTED, instance_id, record, "spot capacity reclaimed"
                        )
                    )
            if doomed:
                self._save()
        if doomed:
            self.nodes.terminate(doomed)

    def _event(
        self, kind: EventKind, instance_id: str, record: SimRecord, detail: str
    ) -> ProviderEvent:
        return ProviderEvent(
            kind=kind,
            at=self.clock.now(),
            instance_id=instance_id,
            region=record.region,
            zone=record.zone,
            detail=detail,
        )

    def _view(self, instance: Instance) -> Instance:
        record = self._records.get(instance.id)
        if record is None:
            return replace(instance, provider=self.name)
        state, url = instance.state, instance.agent_url
        if state is InstanceState.RUNNING and self.clock.now() < record.ready_at:
            state, url = InstanceState.PENDING, None  # still "provisioning" in sim time
        return replace(
            instance,
            provider=self.name,
            state=state,
            agent_url=url,
            region=record.region or instance.region,
            zone=record.zone,
            spot=record.spot,
            launched_at=record.launched_at,
        )

    def _load(self) -> dict[str, SimRecord]:
        if not self._path.exists():
            return {}
        raw = json.loads(self._path.read_text(encoding="utf-8"))
        return {key: SimRecord(**value) for key, value in raw.items()}

    def _save(self) -> None:
        _write_json(self._path, {key: asdict(value) for key, value in self._records.items()})
