"""The load balancer against real replicas: aiohttp servers on 127.0.0.1 free ports, in process
or as a process that is killed mid-test (tests/serve/replica.py).

Covers routing (round robin when idle, least in flight), streaming both ways (server-sent
events pass through as they are written, a request body reaches the replica before the client
has sent all of it), headers, one retry on another replica when one dies, draining (in flight
ones finish; under load nothing is dropped), the queue while no replica is ready and its 503,
502 when every try fails, and the stats the autoscaler reads (windows on an injected clock;
the windows themselves: test_proxy_stats.py).
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gpulease.clock import VirtualClock
from gpulease.serve.proxy import Backend, LoadBalancer, LoadStats, ReplicaStats
from tests.serve.replica import Replica
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
MakeReplica = Callable[[str], Replica]
MakeBalancer = Callable[..., LoadBalancer]


@pytest.fixture
def replicas() -> Iterator[MakeReplica]:
    made: list[Replica] = []

    def make(name: str) -> Replica:
        replica = Replica(name).start()
        made.append(replica)
        return replica

    yield make
    for replica in made:
        replica.stop()


@pytest.fixture
def balancer() -> Iterator[MakeBalancer]:
    made: list[LoadBalancer] = []

    def make(**kwargs: object) -> LoadBalancer:
        lb = LoadBalancer(**kwargs)  # type: ignore[arg-type]
        lb.start()
        made.append(lb)
        return lb

    yield make
    for lb in made:
        lb.stop()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=8) as executor:
        yield executor


def client(lb: LoadBalancer) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{lb.port}", timeout=10, trust_env=False)


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=10, trust_env=False)


def backends(*replicas: Replica) -> list[Backend]:
    return [Backend(id=i, url=r.url) for i, r in enumerate(replicas)]


def settled(lb: LoadBalancer) -> LoadStats:
    """The balancer's stats once nothing is in flight: it books a request's end just after the
    response's last byte left, so a client may read the answer before that."""
    wait_until(lambda: lb.stats().in_flight == 0, 10, "every request booked")
    return lb.stats()


def replica_stats(lb: LoadBalancer, backend_id: int) -> ReplicaStats:
    return next(r for r in lb.stats().replicas if r.id == backend_id)


def holder(lb: LoadBalancer) -> int:
    """The id of the one backend with a request in flight."""
    busy = wait_until(
        lambda: [r.id for r in lb.stats().replicas if r.in_flight == 1], 10, "a held request"
    )
    assert len(busy) == 1
    return busy[0]


def dead_url() -> str:
    """A 127.0.0.1 port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_idle_requests_go_round_robin(replicas: MakeReplica, balancer: MakeBalancer) -> None:
    lb = balancer()
    lb.set_backends(backends(replicas("a"), replicas("b")))
    with client(lb) as c:
        names = [c.get("/id").text for _ in range(6)]
    assert sorted(names) == ["a", "a", "a", "b", "b", "b"]
    assert names[0::2] == [names[0]] * 3 and names[1::2] == [names[1]] * 3


def test_requests_go_to_the_least_in_flight(
    replicas: MakeReplica, balancer: MakeBalancer, pool: ThreadPoolExecutor
) -> None:
    a, b = replicas("a"), replicas("b")
    lb = balancer()
    lb.set_backends(backends(a, b))
    with client(lb) as c:
        held = pool.submit(c.get, "/hold/k")
        busy = holder(lb)
        others = [c.get("/id").text for _ in range(4)]
        free_name = "b" if busy == 0 else "a"
        assert others == [free_name] * 4
        get(f"{(a, b)[busy].url}/release/k")
        assert held.result(10).text == ("a", "b")[busy]


def test_server_sent_events_pass_through_as_they_come(
    replicas: MakeReplica, balancer: MakeBalancer
) -> None:
    """The replica sends its second event only after the client has read the first through the
    balancer: a balancer that buffered would never deliver it (read timeout)."""
    a = replicas("a")
    lb = balancer()
    lb.set_backends(backends(a))
    with client(lb) as c, c.stream("GET", "/sse") as response:
        assert response.headers["content-type"] == "text/event-stream"
        lines = response.iter_lines()
        assert next(line for line in lines if line) == "data: one"
        get(f"{a.url}/release/sse")
        assert next(line for line in lines if line) == "data: two"
    with client(lb) as c:
        assert c.get("/chunks").text == "alpha-beta-gamma"
        big = c.get("/big")
        assert big.headers["content-length"] == str(1 << 20) and big.content == b"z" * (1 << 20)


def test_a_request_body_streams_to_the_replica(
    replicas: MakeReplica, balancer: MakeBalancer
) -> None:
    """The second half is sent only once the replica has read the first: a balancer that
    buffered the body would wait for the whole of it (the client would stall)."""
    a = replicas("a")
    lb = balancer()
    lb.set_backends(backends(a))
    half = 64 * 1024

    def body() -> Iterator[bytes]:
        yield b"x" * half
        wait_until(lambda: int(get(f"{a.url}/seen").text) >= half, 10, "the first half")
        yield b"y" * half

    with client(lb) as c:
        answer = c.post("/upload", content=body()).json()
    assert answer == {
        "bytes": 2 * half,
        "sha256": hashlib.sha256(b"x" * half + b"y" * half).hexdigest(),
    }


def test_a_client_that_goes_away_releases_its_replica(
    replicas: MakeReplica, balancer: MakeBalancer
) -> None:
    """The request is cancelled at the balancer: nothing stays in flight at the replica."""
    a = replicas("a")
    lb = balancer()
    lb.set_backends(backends(a))
    with client(lb) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.get("/hold/never", timeout=httpx.Timeout(10, read=0.2))
        wait_until(lambda: lb.stats().in_flight == 0, 10, "the request released")
        get(f"{a.url}/release/never")
        head = c.head("/id")
    assert (head.status_code, head.headers["content-length"], head.content) == (200, "1", b"")
    assert settled(lb).failed == 0


def test_expect_100_continue_is_answered_before_the_body(
    replicas: MakeReplica, balancer: MakeBalancer
) -> None:
    lb = balancer()
    lb.set_backends(backends(replicas("a")))
    with socket.create_connection(("127.0.0.1", lb.port), timeout=10) as sock:
        sock.sendall(
            b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Expect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"hello")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["sha256"] == hashlib.sha256(b"hello").hexdigest()


def test_hop_by_hop_headers_are_dropped_and_forwarded_ones_added(
    replicas: MakeReplica, balancer: MakeBalancer
) -> None:
    lb = balancer()
    lb.set_backends(backends(replicas("a")))
    with client(lb) as c:
        response = c.get(
            "/headers",
            headers={
                "Connection": "keep-alive, X-Hop",
                "X-Hop": "1",
                "Keep-Alive": "timeout=5",
                "TE": "trailers",
                "X-Custom": "yes",
                "X-Forwarded-For": "203.0.113.7",
            },
        )
    got = response.json()
    assert got["x-custom"] == ["yes"]
    assert not {"x-hop", "keep-alive", "te"} & set(got)
    assert got["x-forwarded-for"] == ["203.0.113.7, 127.0.0.1"]
    assert got["x-forwarded-proto"] == ["http"]
    assert got["x-forwarded-host"] == [f"127.0.0.1:{lb.port}"]
    assert got["host"] != got["x-forwarded-host"]
    assert "keep-alive" not in response.headers
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]


def _hanging_replica() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.serve.replica", "p", "--hang"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = json.loads(proc.stdout.readline())["port"]
    return proc, f"http://127.0.0.1:{port}"


def test_a_replica_killed_mid_request_costs_idempotent_requests_nothing(
    replicas: MakeReplica, balancer: MakeBalancer, pool: ThreadPoolExecutor
) -> None:
    """GETs in flight at a replica that dies go once more to another replica; a bodyless POST,
    which the dead replica may have acted on, gets the balancer's 502."""
    proc, dead = _hanging_replica()
    try:
        q = replicas("q")
        lb = balancer()
        lb.set_backends([Backend(1, dead)])
        with client(lb) as c:
            gets: list[Future[httpx.Response]] = [pool.submit(c.get, "/id") for _ in range(3)]
            post = pool.submit(c.post, "/id")
            wait_until(lambda: replica_stats(lb, 1).in_flight == 4, 10, "4 requests at p")
            lb.set_backends([Backend(1, dead), Backend(2, q.url)])
            proc.kill()
            assert [f.result(10).text for f in gets] == ["q"] * 3
            refused = post.result(10)
            assert refused.status_code == 502
            assert refused.json()["error"]["code"] == "bad_gateway"
            after = [c.get("/id") for _ in range(5)]  # p refuses: retried, then ejected
        assert [(r.status_code, r.text) for r in after] == [(200, "q")] * 5
        stats = settled(lb)
        assert stats.failed == 1 and stats.requests == 9
        assert replica_stats(lb, 1).failed >= 4
        assert replica_stats(lb, 2).failed == 0
    finally:
        proc.kill()
        proc.wait(10)


def test_every_try_failing_is_a_502_with_a_json_body(balancer: MakeBalancer) -> None:
    lb = balancer()
    lb.set_backends([Backend(1, dead_url()), Backend(2, dead_url())])
    with client(lb) as c:
        response = c.get("/id")
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "bad_gateway"
    assert "replica 1, 2" in error["message"] or "replica 2, 1" in error["message"]
    assert "127.0.0.1" not in error["message"]  # the replicas' addresses stay inside
    assert [r.failed for r in settled(lb).replicas] == [1, 1]


def test_drain_finishes_what_is_in_flight_and_sends_nothing_new(
    replicas: MakeReplica, balancer: MakeBalancer, pool: ThreadPoolExecutor
) -> None:
    a, b = replicas("a"), replicas("b")
    lb = balancer()
    lb.set_backends(backends(a, b))
    with client(lb) as c:
        held = pool.submit(c.get, "/hold/d")
        busy = holder(lb)
        lb.drain(busy)
        assert not lb.drained(busy)
        assert replica_stats(lb, busy).draining
        other = ("a", "b")[1 - busy]
        assert [c.get("/id").text for _ in range(4)] == [other] * 4
        get(f"{(a, b)[busy].url}/release/d")
        assert held.result(10).status_code == 200
        wait_until(lambda: lb.drained(busy), 10, "drained")
    assert lb.drained(99)  # an unknown backend has nothing in flight


def test_draining_and_replacing_under_load_drops_nothing(
    replicas: MakeReplica, balancer: MakeBalancer, pool: ThreadPoolExecutor
) -> None:
    a, b = replicas("a"), replicas("b")
    lb = balancer()
    lb.set_backends([Backend(1, a.url), Backend(2, b.url)])
    stop = threading.Event()

    def load() -> list[int]:
        codes: list[int] = []
        with client(lb) as c:
            while not stop.is_set() and len(codes) < 400:
                codes.append(c.get("/slow", params={"s": "0.005"}).status_code)
        return codes

    workers = [pool.submit(load) for _ in range(6)]
    wait_until(lambda: lb.stats().requests >= 30, 10, "load")
    lb.drain(1)  # a rolling step: a drains, a new replica c comes, a goes
    c_replica = replicas("c")
    lb.set_backends([Backend(1, a.url), Backend(2, b.url), Backend(3, c_replica.url)])
    wait_until(lambda: lb.drained(1), 10, "a drained")
    served_by_a = a.app.served
    lb.set_backends([Backend(2, b.url), Backend(3, c_replica.url)])
    done = lb.stats().requests
    wait_until(lambda: lb.stats().requests >= done + 30, 10, "load after the change")
    stop.set()
    codes = [code for w in workers for code in w.result(20)]
    assert codes and set(codes) == {200}
    assert settled(lb).failed == 0
    assert a.app.served == served_by_a  # nothing reached a once drained
    assert c_replica.app.served > 0


def test_requests_queue_until_a_backend_appears(
    replicas: MakeReplica, balancer: MakeBalancer, pool: ThreadPoolExecutor
) -> None:
    lb = balancer(queue_timeout_s=30)
    with client(lb) as c:
        waiting = pool.submit(c.get, "/id")
        wait_until(lambda: lb.stats().queued == 1, 10, "a queued request")
        assert lb.stats().in_flight == 0
        lb.set_backends(backends(replicas("a")))
        response = waiting.result(10)
    assert (response.status_code, response.text) == (200, "a")
    assert lb.stats().queued == 0


def test_stopping_answers_the_queue_503(pool: ThreadPoolExecutor) -> None:
    lb = LoadBalancer(queue_timeout_s=60)
    lb.start()
    with client(lb) as c:
        waiting = pool.submit(c.get, "/id")
        wait_until(lambda: lb.stats().queued == 1, 10, "a queued request")
        lb.stop()
        response = waiting.result(10)
    assert response.status_code == 503
    assert response.json()["error"]["message"] == "the endpoint is stopping"


def test_the_queue_times_out_with_a_503(replicas: MakeReplica, balancer: MakeBalancer) -> None:
    lb = balancer(queue_timeout_s=0.1)
    with client(lb) as c:
        response = c.get("/id")
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "no_replica"
        lb.set_backends(backends(replicas("a")))
        lb.drain(0)  # only draining replicas: queued too
        assert c.get("/id").status_code == 503
    assert settled(lb).failed == 2


def test_stats_count_per_replica_over_a_window(
    replicas: MakeReplica, balancer: MakeBalancer
) -> None:
    clock = VirtualClock(start=1_000.0)
    lb = balancer(clock=clock)
    lb.set_backends(backends(replicas("a")))
    with client(lb) as c:
        codes = [c.get("/id").status_code for _ in range(5)]
        codes += [c.get("/status/500").status_code for _ in range(2)]
    assert codes == [200] * 5 + [500] * 2
    settled(lb)
    stats = lb.stats(window_s=60)
    assert (stats.requests, stats.failed, stats.in_flight, stats.queued) == (7, 2, 0, 0)
    assert stats.qps == pytest.approx(7.0)  # all within the first second of a new balancer
    (only,) = stats.replicas
    assert (only.requests, only.failed, only.in_flight) == (7, 2, 0)
    assert only.latency_p50_s is not None and only.latency_p95_s is not None
    assert 0 < only.latency_p50_s <= only.latency_p95_s < 10
    clock.advance(120)
    later = lb.stats(window_s=60)
    assert (later.requests, later.qps, later.latency_p95_s) == (7, 0.0, None)
    assert later.replicas[0].qps == 0.0 and later.replicas[0].requests == 7


def test_a_taken_port_is_a_clear_error(balancer: MakeBalancer) -> None:
    lb = balancer()
    with pytest.raises(OSError, match=f"could not listen on 127.0.0.1:{lb.port}"):
        LoadBalancer(port=lb.port).start()


def test_a_replica_answering_503_sends_an_idempotent_request_once_to_another(
    replicas: MakeReplica, balancer: MakeBalancer
) -> None:
    """A 503 is a replica refusing work (draining after a preemption notice, not ready): a GET
    goes once more to another replica; any other status is the answer."""
    lb = balancer()
    lb.set_backends(backends(replicas("a"), replicas("b")))
    with client(lb) as c:
        refused = c.get("/status/503")  # both refuse: the second's 503 is relayed
        assert refused.status_code == 503
        assert sorted(r.requests for r in settled(lb).replicas) == [1, 1]
        assert c.get("/status/500").status_code == 500  # not retried
    assert sorted(r.requests for r in settled(lb).replicas) in ([1, 2], [2, 1])
