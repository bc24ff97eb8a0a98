"""benchmarks/serve/loadgen.py: the rate schedule's arithmetic (pure), the loopback-only rule, wrk's
output read back (benchmarks/serve/wrk.py), and real runs against a trivial local HTTP server
(every request recorded with its status, failures and refused connections counted, slices taking
turns, the command line's exit codes and JSON)."""

from __future__ import annotations

import ipaddress
import itertools
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from benchmarks.serve import loadgen
from benchmarks.serve.loadgen import (
    Schedule,
    Segment,
    parse_ramp,
    run_closed,
    run_load,
    run_slices,
)
from benchmarks.serve.stats import LoadResult, RequestRecord, percentile
from benchmarks.serve.wrk import WrkResult, read_wrk
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import UserInputError

# --- the schedule (pure) ---


def test_a_constant_rate_is_evenly_spaced_and_half_open() -> None:
    times = list(Schedule.constant(10, 1.0).arrivals())
    assert times == pytest.approx([i / 10 for i in range(10)])


def test_a_ramp_follows_the_integral_of_its_rate() -> None:
    schedule = parse_ramp("0:100:2s")  # N(t) = 25 t²: request k is due at sqrt(k / 25)
    times = list(schedule.arrivals())
    assert len(times) == 100
    assert times[25] == pytest.approx(1.0)
    assert times[:3] == pytest.approx([0.0, 0.2, 0.2 * 2**0.5])
    assert schedule.rate_at(1.0) == pytest.approx(50)


def test_up_and_down_ramps_join_and_a_limit_stops_early() -> None:
    schedule = parse_ramp("10:30:1s, 30:10:1s")
    times = list(schedule.arrivals())
    assert len(times) == 40
    assert schedule.duration_s == 2.0
    assert all(0 <= t < 2.0 for t in times)
    assert times == sorted(times)
    first, second = [t for t in times if t < 1], [t for t in times if t >= 1]
    assert len(first) == len(second) == 20
    assert list(schedule.arrivals(limit=7)) == times[:7]


@given(
    st.lists(
        st.tuples(st.floats(0, 300), st.floats(0, 300), st.floats(0.05, 5, allow_subnormal=False)),
        min_size=1,
        max_size=4,
    )
)
def test_any_schedule_gives_its_integral_in_order(parts: list[tuple[float, float, float]]) -> None:
    schedule = Schedule(tuple(Segment(*part) for part in parts))
    times = list(schedule.arrivals())
    assert times == sorted(times)
    assert all(0 <= t < schedule.duration_s for t in times)
    assert abs(len(times) - schedule.expected_requests) <= 1 + 1e-6 * schedule.expected_requests


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("10:x:5s", "--ramp"),
        ("10:200", "START:END:DURATION"),
        ("10:200:5 parsecs", "--ramp"),
        ("-5:10:5s", "rate"),
        ("10:10:0s", "duration"),
        ("10:10:2h", "at most 3600"),
    ],
)
def test_bad_ramps_name_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(UserInputError, match=needle):
        parse_ramp(text)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:1/x", "http://127.4.5.6/", "http://localhost:8/", "http://[::1]:9/"]
)
def test_loopback_urls_are_accepted(url: str) -> None:
    assert loadgen.check_url(url) == url


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1/", "http://example.com/", "http://0.0.0.0:80/", "ftp://127.0.0.1/"]
)
def test_other_hosts_are_refused(url: str) -> None:
    with pytest.raises(UserInputError, match="url"):
        loadgen.check_url(url)


@given(st.ip_addresses(v=4))
def test_only_127_slash_8_passes(address: ipaddress.IPv4Address) -> None:
    url = f"http://{address}:8080/"
    if address in ipaddress.ip_network("127.0.0.0/8"):
        assert loadgen.check_url(url) == url
    else:
        with pytest.raises(UserInputError):
            loadgen.check_url(url)


def test_the_summary_adds_records_up() -> None:
    records = (
        RequestRecord(0.0, 0.0, 0.010, 200),
        RequestRecord(0.5, 0.5, 0.030, 200),
        RequestRecord(1.0, 1.2, 0.020, 503),
        RequestRecord(1.5, 1.5, 0.001, 0, "ClientConnectorError: refused"),
    )
    result = LoadResult("http://127.0.0.1:1/", "GET", records, 2.0, 4.0)
    summary = result.summary()
    assert (summary["requests"], summary["ok"], summary["failed"]) == (4, 2, 2)
    assert summary["statuses"] == {"200": 2, "503": 1, "no answer": 1}
    assert summary["errors"] == {"ClientConnectorError": 1}
    assert summary["latency_ms"] == {"p50": 20.0, "p95": 29.0, "p99": 29.8, "max": 30.0}
    assert summary["achieved_rps"] == 2.0
    assert summary["max_lag_ms"] == pytest.approx(200.0)
    assert [row["requests"] for row in result.timeline()] == [2, 2]
    assert [row["failed"] for row in result.timeline()] == [0, 2]
    assert "failed 2 (503 ×1, no answer ×1)" in result.table()
    assert percentile([], 50) is None


WRK_OUTPUT = """Running 1s test @ http://127.0.0.1:18777/x
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.56ms  842.84us   9.25ms   74.85%
  Latency Distribution
     50%  842.84us
     75%    2.95ms
     90%    3.61ms
     99%    1.20s
  1531 requests in 1.00s, 777.46KB read
  Socket errors: connect 0, read 2, write 1, timeout 0
  Non-2xx or 3xx responses: 7
Requests/sec:   1525.93
"""


def test_wrk_s_summary_is_read_back_in_milliseconds() -> None:
    assert read_wrk(WRK_OUTPUT, 1.0) == WrkResult(1.0, 1531, 10, 1525.93, 0.843, 1200.0)
    assert read_wrk("", 2.0) == WrkResult(2.0, 0, 0, 0.0, None, None)


# --- real runs against a trivial server ---


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        self._answer(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

    def _answer(self, body: bytes) -> None:
        with self.server.lock:
            self.server.bodies.append(body)
            n = len(self.server.bodies)
        fail = self.path == "/flaky" and n % 3 == 0
        self.send_response(503 if fail else 200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def test_every_request_is_sent_and_recorded(server: _Server) -> None:
    body = b'{"inputs": [[0]]}'
    result = run_load(f"{server.url}/predict", Schedule.constant(400, 10), requests=40, body=body)
    assert result.requests == result.ok == 40
    assert result.failed == 0
    assert server.bodies == [body] * 40
    assert result.method == "POST"
    assert result.statuses() == {"200": 40}
    p50, p95, p99 = (result.latency_s(q) for q in (50, 95, 99))
    assert p50 is not None and p95 is not None and p99 is not None
    assert 0 < p50 <= p95 <= p99
    assert all(r.sent_s >= r.due_s for r in result.records)
    assert result.achieved_rps > 0


def test_error_answers_are_failures(server: _Server) -> None:
    result = run_load(f"{server.url}/flaky", Schedule.constant(300, 10), requests=30)
    assert result.requests == 30
    assert result.statuses() == {"200": 20, "503": 10}
    assert result.failed == 10


def test_the_closed_loop_keeps_its_clients_busy_up_to_the_request_count(server: _Server) -> None:
    result = run_closed(f"{server.url}/x", 4, 600.0, requests=25, body=b"{}")
    assert result.requests == result.ok == 25
    assert len(server.bodies) == 25
    assert result.scheduled_requests == 25
    assert all(r.sent_s == r.due_s for r in result.records)
    with pytest.raises(UserInputError, match="concurrency"):
        run_closed(server.url, 0, 1.0)


def test_slices_take_turns_and_each_url_keeps_its_own_clock(server: _Server) -> None:
    urls = {"a": f"{server.url}/a", "b": f"{server.url}/b"}
    results = run_slices(urls, Schedule.constant(100, 0.05), 3)  # 5 requests a slice
    assert [r.requests for r in results.values()] == [15, 15]
    assert all(result.ok == 15 and result.scheduled_requests == 15 for result in results.values())
    for result in results.values():  # 10 ms apart in a slice; the next one goes on from the
        dues = [r.due_s for r in result.records]  # slice's end (no clock in the others' turns)
        gaps = [later - earlier for earlier, later in itertools.pairwise(dues)]
        assert [gaps[i] for i in range(14) if i % 5 != 4] == pytest.approx([0.01] * 12)
        assert gaps[4] >= 0.01 and gaps[9] >= 0.01
        assert result.elapsed_s >= dues[-1]
        lag = result.lag_s(99)
        assert lag is not None and 0 <= lag <= result.max_lag_s
    assert len(server.bodies) == 30
    with pytest.raises(UserInputError, match="slices"):
        run_slices(urls, Schedule.constant(1, 1), 0)


def test_refused_connections_are_failures_without_an_answer() -> None:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        result = run_load(url, Schedule.constant(200, 10), requests=5, timeout_s=5)
    assert result.requests == result.failed == 5
    assert result.statuses() == {"no answer": 5}
    assert all(r.error for r in result.records)
    assert result.latency_s(50) is None


def test_the_command_line(
    server: _Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    body = tmp_path / "body.json"
    body.write_text('{"inputs": []}')
    args = [f"{server.url}/p", "--rate", "200", "--requests", "10", "--body", str(body)]
    assert loadgen.main([*args, "--json", str(out), "--records"]) == 0
    data = json.loads(out.read_text())
    assert (data["requests"], data["failed"], len(data["records"])) == (10, 0, 10)
    assert sum(row["requests"] for row in data["timeline"]) == 10
    assert "ok 10, failed 0" in capsys.readouterr().out

    flaky = [f"{server.url}/flaky", "--ramp", "100:300:1s", "--requests", "6"]
    assert loadgen.main(flaky) == 1  # some requests failed
    assert loadgen.main([f"{server.url}/c", "--concurrency", "2", "--requests", "6"]) == 0
    assert "requests 6 " in capsys.readouterr().out

    assert loadgen.main(["http://192.0.2.1/", "--rate", "5"]) == 2
    assert "not this machine" in capsys.readouterr().err
    assert loadgen.main([server.url, "--ramp", "5:5"]) == 2
    assert loadgen.main([server.url, "--rate", "5", "--body", str(tmp_path / "none")]) == 2
    assert "--body" in capsys.readouterr().err
