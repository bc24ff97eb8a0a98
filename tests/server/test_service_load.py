"""The services' load history against the real endpoints (a real load balancer in front of a real
aiohttp replica, tests/serve/replica.py), on a virtual clock for the history's own time: a pass
takes a point of every open endpoint (QPS and latency of the requests sent, the replicas behind
it, a drained one not counted), ``since`` filters, points older than an hour go, a closed
endpoint's points go with it, and a pass that fails does not end the thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from gpulease.clock import VirtualClock
from gpulease.server.endpoints import Endpoints
from gpulease.server.service_load import KEEP_S, LoadHistory, LoadHistoryThread
from tests.serve.replica import Replica
from tests.waiting import wait_until


@pytest.fixture
def replica() -> Iterator[Replica]:
    started = Replica("one").start()
    yield started
    started.stop()


def test_a_pass_keeps_a_point_of_each_open_endpoint(endpoints: Endpoints, replica: Replica) -> None:
    clock = VirtualClock(1_000_000.0)
    history = LoadHistory(endpoints, clock, step_s=10.0)
    assert history.run_pass() == 0 and history.points(1) == []
    port = endpoints.open(1, None)
    endpoints.open(2, None)  # a second service, no replica yet
    endpoints.set_backends(1, [(7, replica.url)])
    for _ in range(3):
        answer = httpx.get(f"http://127.0.0.1:{port}/id", timeout=10, trust_env=False)
        assert answer.status_code == 200 and answer.text == "one"
    wait_until(lambda: ((s := endpoints.stats(1)) is not None and s.in_flight == 0) or None,
               10, "the balancer to end the last request")  # fmt: skip
    assert history.run_pass() == 2
    (point,) = history.points(1)
    assert point["at"] == clock.now() and point["qps"] > 0 and point["replicas"] == 1
    assert point["latency_p50_ms"] is not None and point["latency_p95_ms"] is not None
    assert (point["in_flight"], point["queued"]) == (0, 0)
    (idle,) = history.points(2)
    assert idle["replicas"] == 0 and idle["qps"] == 0 and idle["latency_p50_ms"] is None

    clock.advance(10.0)
    endpoints.drain(1, 7)
    history.run_pass()
    assert [p["replicas"] for p in history.points(1)] == [1, 0]  # a draining one is not counted
    assert [p["at"] for p in history.points(1, since=clock.now())] == [clock.now()]

    clock.advance(KEEP_S - 5.0)  # the first point is now over an hour old, the second not
    history.run_pass()
    assert len(history.points(1)) == 2 and history.points(1)[0]["replicas"] == 0
    endpoints.close(2)
    history.run_pass()
    assert history.points(2) == [] and len(history.points(1)) == 3


class _Flaky:
    """Endpoints whose first read fails (a bug's stand-in), then none open."""

    def __init__(self) -> None:
        self.calls = 0
        self.again = threading.Event()

    def open_ids(self) -> list[int]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug")
        self.again.set()
        return []

    def stats(self, service_id: int) -> None:
        return None


def test_the_thread_survives_a_failed_pass() -> None:
    flaky = _Flaky()
    thread = LoadHistoryThread(LoadHistory(flaky, VirtualClock(), step_s=0.01))
    thread.start()
    try:
        wait_until(lambda: flaky.again.is_set() or None, 10, "a pass after the failed one")
    finally:
        thread.stop()
