"""Provider events derived from EC2 polling (EC2 pushes nothing to us).

:class:`EventTracker` remembers the last state it saw of each gpulease instance and turns a
change into a STATE_CHANGE event, a shutdown whose ``StateReason`` code is
``Server.SpotInstanceTermination`` into PREEMPTED, and a spot request marked for termination
into one PREEMPTION_NOTICE. Instances first seen are recorded silently (a restarted server
reports no stale changes), except an already spot-terminated one. Each change is reported
once. Moves no states.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from gpulease.providers.aws.mapping import SPOT_TERMINATION, ec2_state, state_reason
from gpulease.providers.base import EventKind, ProviderEvent

NOTICE_CODES = frozenset({
    "marked-for-termination", "marked-for-stop", "instance-terminated-by-price",
    "instance-terminated-no-capacity", "instance-terminated-capacity-oversubscribed",
})  # fmt: skip
_ENDED = {"shutting-down", "terminated"}


class EventTracker:
    def __init__(self) -> None:
        self._states: dict[str, str] = {}
        self._preempted: set[str] = set()
        self._noticed: set[str] = set()
        self._lock = threading.Lock()

    def seen(self, instance_id: str, state: str) -> None:
        """Record an instance just launched (its later changes are reported)."""
        with self._lock:
            self._states.setdefault(instance_id, state)

    def changes(
        self, described: Iterable[tuple[str, Mapping[str, Any]]], now: float
    ) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        with self._lock:
            for region, data in described:
                events += self._one(region, data, now)
        return events

    def _one(self, region: str, data: Mapping[str, Any], now: float) -> list[ProviderEvent]:
        iid = str(data["InstanceId"])
        state = ec2_state(data)
        zone = (data.get("Placement") or {}).get("AvailabilityZone")
        before = self._states.get(iid)
        self._states[iid] = state
        events: list[ProviderEvent] = []
        if before is not None and before != state:
            events.append(ProviderEvent(EventKind.STATE_CHANGE, now, iid, region, zone,
                                        f"{before} -> {state}"))  # fmt: skip
        spot_ended = state in _ENDED and state_reason(data) == SPOT_TERMINATION
        if spot_ended and iid not in self._preempted:
            self._preempted.add(iid)
            events.append(ProviderEvent(EventKind.PREEMPTED, now, iid, region, zone,
                                        SPOT_TERMINATION))  # fmt: skip
        return events

    def notices(
        self, requests: Iterable[tuple[str, Mapping[str, Any]]], now: float
    ) -> list[ProviderEvent]:
        """PREEMPTION_NOTICE for spot requests of known instances whose status warns."""
        events: list[ProviderEvent] = []
        with self._lock:
            for region, req in requests:
                iid = str(req.get("InstanceId") or "")
                code = str((req.get("Status") or {}).get("Code") or "")
                if iid in self._states and code in NOTICE_CODES and iid not in self._noticed:
                    self._noticed.add(iid)
                    events.append(ProviderEvent(EventKind.PREEMPTION_NOTICE, now, iid, region,
                                                None, code))  # fmt: skip
        return events
