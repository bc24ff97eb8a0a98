"""A service on aws VMs, reached only over the server's SSH channel: the real CLI and server, the
aws provider against moto, moto's instances made real VMs by tests/awsvm.py.

The replica app (a stdlib HTTP server written into the test's workdir, which reaches each VM
through the agent) listens on the VM's 127.0.0.1 only: a connection from the server's host to
the VM's address on that port is refused (while the VM's sshd on the same address accepts), so
requests through the service's endpoint reach it only through the SSH forward the server opens
per replica. Two replicas come up ready in ``serve status --json`` with their place and $ per
hour; one instance is terminated from outside (EC2 terminates it, the harness kills its VM) and
is replaced on a new VM while requests keep succeeding through the other (at most the one
``POST`` in flight on the lost VM fails: it is not retried), and the lost replica's forward is
closed (its ssh reaped, not left a zombie); ``serve down`` leaves no instance, VM, key pair,
security group or ssh process to the VMs."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.awsvm import AwsVms, Vm, aws_vms, vm_config, vm_image, vm_moto, vm_network, vm_user  # noqa: F401
from tests.cli.conftest import Cli
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("awsvm")]
PORT = 8080  # the service's port: every replica's $PORT on its VM

APP = """import json, os, socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Replica(BaseHTTPRequestHandler):
    def _send(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200 if self.path == "/health" else 404, b"ok")

    def do_POST(self):
        got = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self._send(200, json.dumps({"echo": got, "host": socket.gethostname()}).encode())

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Replica).serve_forever()
"""

SERVICE = """name: echo
resources:
  providers: [aws]
  regions: [us-east-1]
workdir: {workdir}
run: exec python app.py
service:
  port: {port}
  readiness_probe: {{path: /health, initial_delay: 120s, timeout: 5s}}
  replicas: {{min: 2, max: 2}}
"""


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def _status(user: Cli) -> dict[str, Any]:
    view: dict[str, Any] = json.loads(_ok(user("serve", "status", "echo", "--json")).stdout)
    return view


def _ready(user: Cli, count: int, without: str | None = None) -> dict[str, Any] | None:
    view = _status(user)
    ready = [r for r in view["replicas"] if r["state"] == "ready" and r["cluster"] != without]
    return view if view["status"] == "ready" and len(ready) == len(view["replicas"]) == count \
        else None  # fmt: skip


def _ssh_to(addresses: set[str], port: int | None = None) -> dict[int, str]:
    """The ssh processes to these VMs by pid (every one a forward: to an agent, or with ``port``
    to ``127.0.0.1:port`` on the VM, a replica's); ``ww``: command lines never cut to a width."""
    listed = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True,
                            check=True)  # fmt: skip
    found = {}
    for line in listed.stdout.splitlines():
        pid, _, args = line.strip().partition(" ")
        if (
            args.startswith("ssh ")
            and _host(args) in addresses
            and (port is None or f":127.0.0.1:{port} " in args)
        ):
            found[int(pid)] = args
    return found


def _host(args: str) -> str:
    """The address an ssh command line goes to (its last word, ``user@address``)."""
    return args.rsplit(maxsplit=1)[-1].rsplit("@", maxsplit=1)[-1]


def _reaped(pids: list[int]) -> bool:
    """None of these processes is left, not even as a zombie: their owner stopped and waited for
    them (a forward whose ssh exited by itself and was never dropped stays a zombie)."""
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


def _refused(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def _tagged(ec2: Any, kind: str) -> list[dict[str, Any]]:
    found = (ec2.describe_security_groups()["SecurityGroups"] if kind == "groups"
             else ec2.describe_key_pairs()["KeyPairs"])  # fmt: skip
    return [x for x in found if any(t["Key"] == "gpulease-owner" for t in x.get("Tags", []))]


class Echoes:
    """``POST /echo`` through the endpoint on a thread, one after another until stopped: which
    VM (host name) answered each, and every failure."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.hosts: list[str] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10.0) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                try:
                    answer = client.post(self.url, content=f"r{n}")
                    body = answer.json() if answer.status_code == 200 else None
                except (httpx.HTTPError, ValueError) as exc:
                    self.failures.append(f"r{n}: {type(exc).__name__}: {exc}")
                    continue
                if body is None or body["echo"] != f"r{n}":
                    self.failures.append(f"r{n}: {answer.status_code} {answer.text[:200]}")
                else:
                    self.hosts.append(body["host"])
                self._stop.wait(0.05)

    def __enter__(self) -> Echoes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_a_service_on_vms_is_reached_only_through_the_ssh_channel(
    user: Cli,
    aws_vms: AwsVms,  # noqa: F811 - fixture
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "echo"
    workdir.mkdir()
    (workdir / "app.py").write_text(APP)
    spec = tmp_path / "echo.yaml"
    spec.write_text(SERVICE.format(workdir=workdir, port=PORT))
    cloud = aws_vms.cloud
    before = len(cloud.booted)  # the VMs of earlier tests in this session stay listed

    def booted() -> list[Vm]:
        return cloud.booted[before:]

    started = time.monotonic()
    up = _ok(user("serve", "up", str(spec), "-p", "aws", timeout=180))
    view = wait_until(lambda: _ready(user, 2), 300, "two ready replicas on VMs")
    print(f"\nserve up to two ready replicas on VMs: {time.monotonic() - started:.1f} s")
    assert len(cloud.vms) == 2 and len(booted()) == 2  # one VM boot per replica
    for replica in view["replicas"]:
        assert replica["where"].startswith("aws/us-east-1") and not replica["spot"]
        assert replica["instance_type"] and replica["price_per_hour"] > 0
    assert view["cost"]["per_hour_usd"] > 0
    endpoint = view["endpoint"]
    assert endpoint.startswith("http://127.0.0.1:") and endpoint in up.stdout + up.stderr

    hosts = {f"ip-{vm.address.replace('.', '-')}": vm for vm in cloud.vms.values()}
    for vm in cloud.vms.values():  # nothing reaches the app from outside its VM
        assert _refused(vm.address, PORT), vm.address
        socket.create_connection((vm.address, 22), timeout=5).close()  # while sshd answers
    live = {vm.address for vm in cloud.vms.values()}
    forwards = _ssh_to(live, PORT)
    assert sorted(map(_host, forwards.values())) == sorted(live), forwards  # one per replica
    with httpx.Client(timeout=10.0) as client:
        answered = {client.post(f"{endpoint}/echo", content=f"x{n}").json()["host"]
                    for n in range(20)}  # fmt: skip
        assert client.get(f"{endpoint}/health").text == "ok"
    assert answered == set(hosts)  # both VMs answered through the endpoint

    (lost_id, lost_vm), *_ = cloud.vms.items()
    lost_forward = [pid for pid, args in forwards.items() if _host(args) == lost_vm.address]
    lost_host = f"ip-{lost_vm.address.replace('.', '-')}"
    with Echoes(f"{endpoint}/echo") as echoes:
        wait_until(lambda: len(echoes.hosts) >= 5 or None, 30, "requests before the loss")
        aws_vms.ec2.terminate_instances(InstanceIds=[lost_id])  # from outside gpulease
        wait_until(lambda: lost_id not in cloud.vms or None, 30, "the VM to be killed")
        lost_at, killed = len(echoes.hosts), time.monotonic()
        after = wait_until(lambda: _ready(user, 2) if len(booted()) == 3 else None, 300,
                           "a replacement replica on a new VM")  # fmt: skip
        served_after = echoes.hosts[lost_at:]
        print(f"VM killed to its replacement ready: {time.monotonic() - killed:.1f} s")
    new_vm = booted()[-1]
    assert new_vm.instance_id != lost_id and new_vm.instance_id in cloud.vms
    assert served_after and lost_host not in served_after  # the other one carried the load
    print(f"\nacross the loss: {len(echoes.hosts)} answered, {len(echoes.failures)} failed:"
          f" {echoes.failures[:5]}")  # fmt: skip
    assert len(echoes.failures) <= 1, echoes.failures  # at most the one in flight on the lost VM
    assert {r["cluster"] for r in after["replicas"]} != {r["cluster"] for r in view["replicas"]}
    wait_until(lambda: _reaped(lost_forward), 60, "the lost replica's forward to be closed")
    forwards = _ssh_to({vm.address for vm in booted()}, PORT)
    live = {vm.address for vm in cloud.vms.values()}
    assert sorted(map(_host, forwards.values())) == sorted(live), forwards  # the new one's open

    _ok(user("serve", "down", "echo"))
    wait_until(lambda: _status(user)["status"] == "down" or None, 120, "the service to be down")
    reservations = aws_vms.ec2.describe_instances()["Reservations"]
    states = {i["State"]["Name"] for r in reservations for i in r["Instances"]}
    assert states == {"terminated"}, states
    wait_until(lambda: not cloud.namespaces() or None, 30, "the VMs' namespaces to go")
    wait_until(lambda: not _tagged(aws_vms.ec2, "groups") or None, 30, "the security group")
    assert _tagged(aws_vms.ec2, "keys") == []
    left = _ssh_to({vm.address for vm in booted()})
    assert left == {}, left  # no ssh forward to a replica or an agent outlives the service
    assert _reaped(list(forwards)), "a replica's forward was never closed"
