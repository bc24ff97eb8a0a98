"""examples/serve-digits on this machine, for real: train_digits.py's model and data, trained here
in a fraction of a second and exported by the script's own ``export`` (``export_onnx``; the
script as a process takes 15-25 s on this machine, torch start-up and the first export mostly, so
its training loop stays in test_train_example.py); app.py serves the model as a process of its
own on a free loopback port: /health is 503 until the model file is there and 200 once it is
loaded, the sample body request.json is predicted right, bad bodies are 400 naming the field (on
a connection that stays usable), a chunked body works, a short bounded run of the load generator
fails no request, and SIGTERM lets a request in flight finish before the app exits 0."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.waiting import wait_until

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "serve-digits"
TRAIN = ROOT / "examples" / "train" / "train_digits.py"
REQUEST = (EXAMPLE / "request.json").read_bytes()
REQUEST_DIGITS = [0, 1, 2, 3]  # request.json holds load_digits() images 0..3, pixel / 16


class App:
    """app.py as a process: its output collected on a thread, its port read from its first line."""

    def __init__(self, **env: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE / "app.py")],
            env={**os.environ, "PORT": "0", "BIND_HOST": "127.0.0.1", **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        line = wait_until(self._address, timeout=60, what="app.py listening")
        self.port = int(line)

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.append(line)

    def _address(self) -> str | None:
        if self.proc.poll() is not None and not self.lines:
            raise AssertionError(f"app.py exited {self.proc.returncode} before listening")
        for line in self.lines:
            if match := re.match(r"serve-digits on http://127\.0\.0\.1:(\d+)", line):
                return match.group(1)
        return None

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        conn = self.connection()
        try:
            return answer(conn, method, path, body)
        finally:
            conn.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def answer(
    conn: http.client.HTTPConnection, method: str, path: str, body: Any = None, **kw: Any
) -> tuple[int, Any]:
    conn.request(method, path, body=body, **kw)
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_digits", TRAIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def train_digits() -> ModuleType:
    return _script()


@pytest.fixture(scope="module")
def model(train_digits: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train_digits.py's MLP and data (full batch, 150 Adam steps), exported by its export()."""
    import torch

    torch.manual_seed(0)
    train, test = train_digits.data(0)
    net = train_digits.model()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = train.tensors
    for _ in range(150):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    assert train_digits.accuracy(net, test) > 0.93
    out = tmp_path_factory.mktemp("trained") / "model.onnx"
    train_digits.export(net, out)
    return out


def test_the_export_goes_beside_the_checkpoints_unless_told(
    train_digits: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def target(onnx: str | None, ckpt: Path | None = None, weights: Path | None = None) -> Any:
        return train_digits.onnx_target(
            Namespace(onnx=onnx, checkpoint_dir=ckpt and str(ckpt), save_weights=weights)
        )

    assert target(None, tmp_path, tmp_path / "w" / "final.pt") == tmp_path / "model.onnx"
    assert target(None, None, tmp_path / "w" / "final.pt") == tmp_path / "w" / "model.onnx"
    assert target("x/m.onnx", tmp_path) == Path("x/m.onnx")
    assert target("off", tmp_path) is None
    assert target(None) is None  # nowhere to put it: never into the current directory
    assert "ONNX export skipped: no --onnx PATH" in capsys.readouterr().out


def test_without_the_onnx_extra_the_export_is_skipped_or_refused(
    train_digits: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(  # as on a machine without onnxruntime
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name)
    )
    assert train_digits.onnx_target(Namespace(onnx=None, checkpoint_dir="c")) is None
    out = capsys.readouterr().out
    assert (
        out
        == "ONNX export skipped: the onnx extra is not installed (pip install 'gpulease[onnx]')\n"
    )
    with pytest.raises(SystemExit) as exit_:
        train_digits.onnx_target(Namespace(onnx="m.onnx", checkpoint_dir="c"))
    assert exit_.value.code == 2
    assert "error: --onnx m.onnx: the onnx extra is not installed" in capsys.readouterr().err


@pytest.fixture(scope="module")
def app(model: Path) -> Iterator[App]:
    running = App(MODEL=str(model))
    wait_until(lambda: running.call("GET", "/health")[0] == 200, timeout=60, what="ready")
    yield running
    assert running.stop() == 0, running.output


def test_health_is_503_until_the_model_arrives_then_predictions_are_right(
    model: Path, tmp_path: Path
) -> None:
    target = tmp_path / "later" / "model.onnx"
    waiting = App(MODEL=str(target), MODEL_WAIT_S="300")
    try:
        status, health = waiting.call("GET", "/health")
        assert (status, health["status"]) == (503, "loading")
        status, body = waiting.call("POST", "/predict", REQUEST)
        assert (status, body["error"]) == (503, "model loading")

        target.parent.mkdir()
        shutil.copy(model, tmp_path / "model.tmp")
        os.replace(tmp_path / "model.tmp", target)  # appears whole
        wait_until(lambda: waiting.call("GET", "/health")[0] == 200, timeout=60, what="ready")
        assert waiting.call("GET", "/health")[1] == {
            "status": "ready",
            "model": str(target),
            "in_flight": 0,
        }

        status, body = waiting.call("POST", "/predict", REQUEST)
        assert status == 200
        assert body["predictions"] == REQUEST_DIGITS
        probabilities = body["probabilities"]
        assert len(probabilities) == 4 and all(len(row) == 10 for row in probabilities)
        for row, digit in zip(probabilities, REQUEST_DIGITS, strict=True):
            assert sum(row) == pytest.approx(1, abs=1e-4)
            assert max(range(10), key=row.__getitem__) == digit
    finally:
        assert waiting.stop() == 0, waiting.output


def test_bad_bodies_are_400_naming_the_field_and_the_connection_stays_usable(app: App) -> None:
    conn = app.connection()
    try:
        bad = {
            b"not json": "not JSON",
            b'{"x": 1}': "inputs: expected",
            b'{"inputs": [[1, 2, 3]]}': "inputs[0]: 3 values, expected a list of 64",
            json.dumps({"inputs": [[0] * 63 + ["a"]]}).encode(): "inputs[0][63]: 'a'",
            json.dumps({"inputs": [[0] * 64] * 1025}).encode(): "at most 1024",
        }
        for body, message in bad.items():
            status, payload = answer(conn, "POST", "/predict", body)
            assert status == 400, body[:40]
            assert message in payload["error"]
        assert answer(conn, "GET", "/predict")[0] == 405
        assert answer(conn, "GET", "/nowhere")[0] == 404
        half = len(REQUEST) // 2
        chunks = iter([REQUEST[:half], REQUEST[half:]])  # Transfer-Encoding: chunked
        status, payload = answer(conn, "POST", "/predict", chunks, encode_chunked=True)
        assert (status, len(payload["predictions"])) == (200, 4)
    finally:
        conn.close()


def test_a_short_bounded_load_run_fails_no_request(app: App) -> None:
    from benchmarks.serve.loadgen import Schedule, run_load

    url = f"http://127.0.0.1:{app.port}/predict"
    result = run_load(url, Schedule.constant(100, 2.0), body=REQUEST)
    assert result.requests == 200
    assert result.failed == 0, result.summary()
    assert result.latency_s(99) is not None


def test_a_missing_model_or_a_bad_port_is_exit_2(tmp_path: Path) -> None:
    missing = App(MODEL=str(tmp_path / "none.onnx"))
    assert missing.proc.wait(60) == 2
    assert f"error: FileNotFoundError: no model at {tmp_path / 'none.onnx'}" in missing.output
    bad = subprocess.run(
        [sys.executable, str(EXAMPLE / "app.py")],
        env={**os.environ, "PORT": "http"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (bad.returncode, bad.stderr) == (
        2,
        "error: $PORT='http': expected a port number 0..65535\n",
    )


def test_sigterm_lets_the_request_in_flight_finish(model: Path) -> None:
    slow = App(MODEL=str(model), PREDICT_DELAY_S="1.0")
    wait_until(lambda: slow.call("GET", "/health")[0] == 200, timeout=60, what="ready")
    results: list[tuple[int, Any]] = []
    client = threading.Thread(target=lambda: results.append(slow.call("POST", "/predict", REQUEST)))
    client.start()
    wait_until(lambda: slow.call("GET", "/health")[1]["in_flight"] == 1, what="a request in flight")
    slow.proc.send_signal(signal.SIGTERM)
    client.join(60)
    assert slow.proc.wait(60) == 0, slow.output
    assert results and results[0][0] == 200
    assert len(results[0][1]["predictions"]) == 4
    assert "SIGTERM: draining" in slow.output
    assert "drained; bye" in slow.output


@pytest.mark.parametrize(
    ("name", "accelerators"),
    [("train.yaml", {"A100", "H100"}), ("service.yaml", {"T4", "L4", "A10G"})],
)
def test_train_on_the_big_offer_serve_on_the_small_one(name: str, accelerators: set[str]) -> None:
    import warnings

    import gpulease

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # service: is dropped with a warning until the spec has it
        task = gpulease.load_task(EXAMPLE / name)
    plans = gpulease.plan(task, hours=1, config={}, top=50)
    assert plans
    assert {plan.accelerator for plan in plans} == accelerators


def test_service_yaml_is_a_service() -> None:
    """The service: section as the spec reads it (issue 17's spec work; skipped before it)."""
    import gpulease

    task = gpulease.load_task(EXAMPLE / "service.yaml")
    service = getattr(task, "service", None)
    if service is None:
        pytest.skip("the spec does not read service: sections yet")
    assert service.port == 8080
    assert (service.readiness_probe.path, service.readiness_probe.initial_delay_s) == (
        "/health",
        60,
    )
    assert (service.replicas.min, service.replicas.max) == (1, 4)
    autoscale = service.autoscale
    assert (autoscale.metric, autoscale.target_per_replica) == ("load", 8)
    assert (autoscale.up.threshold, autoscale.up.step, autoscale.up.for_s) == (0.8, 1, 30)
    assert (autoscale.down.threshold, autoscale.down.step, autoscale.down.for_s) == (0.3, 1, 120)
    assert (service.spot.on_demand_base, service.spot.spot_share) == (1, 0.75)
