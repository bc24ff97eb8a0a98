"""AWS fixtures shared by every test package that talks to AWS: a REAL moto server process.

Tests never mock boto3 in-process: they talk HTTP to ``moto_server`` (``moto[server]`` from
requirements-dev.txt), started here once per test session (once per pytest-xdist worker).

- ``moto_server`` (session): starts ``moto_server -H 127.0.0.1 -p <free port>`` (the binary next
  to ``sys.executable``, else on ``PATH``), waits until it answers, yields its endpoint URL
  (``http://127.0.0.1:PORT``) and terminates it at the end. Its log is in the session's temp dir.
  Skipped, with the reason, when moto or boto3 is not installed. moto keeps every service (S3,
  EC2, KMS, …) in that one process's memory; POST ``{url}/moto-api/reset`` wipes it.
- ``aws_env`` (function): points boto3 at that server through the environment only
  (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` = ``testing``,
  ``AWS_DEFAULT_REGION`` = ``us-east-1``; no profile, config file or session token from the
  machine leaks in; boto3's default session, which caches credentials, is fresh for the test);
  yields the endpoint URL. Code under test builds its clients as in production.
- ``s3_env`` (function): ``aws_env`` plus a fresh, uniquely named empty bucket; yields its name.
- ``ec2_env`` (function): ``aws_env`` after ``POST /moto-api/reset`` (fresh EC2 state).

Import the fixtures a conftest needs from here (``from tests.awsfixtures import moto_server,
aws_env, s3_env``); :func:`aws_client` gives a test its own boto3 client on the same server.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HOST = "127.0.0.1"
REGION = "us-east-1"
START_TIMEOUT_S = 30.0


def _moto_binary() -> str | None:
    beside = Path(sys.executable).parent / "moto_server"
    return str(beside) if beside.exists() else shutil.which("moto_server")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/moto-api/", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _start(binary: str, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start moto on a free port and wait until it answers; raise RuntimeError with its log."""
    port = _free_port()
    url = f"http://{HOST}:{port}"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [binary, "-H", HOST, "-p", str(port)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode}: {log_path.read_text()}")
        if _answers(url):
            return proc, url
        time.sleep(0.1)
    _stop(proc)
    raise RuntimeError(f"moto_server did not answer on {url} in {START_TIMEOUT_S:.0f}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint URL of a moto server process this session started."""
    pytest.importorskip(
        "boto3", reason="AWS tests need boto3 (pip install -r requirements-dev.txt)"
    )
    binary = _moto_binary()
    if binary is None:
        pytest.skip("AWS tests need moto_server (pip install -r requirements-dev.txt)")
    log_path = tmp_path_factory.mktemp("moto") / "moto_server.log"
    for attempt in range(3):  # another process may take the free port before moto binds it
        try:
            proc, url = _start(binary, log_path)
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        yield url
    finally:
        _stop(proc)


def aws_client(service: str, endpoint_url: str) -> Any:
    """A boto3 client of ``service`` on the moto server at ``endpoint_url``."""
    import boto3

    make_client: Any = boto3.client  # typed per service literal; any service name goes here
    return make_client(
        service,
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def fresh_default_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``boto3.client()`` build a new default session, so it reads this test's environment.

    boto3's default session caches the credentials it resolved first for the whole process.
    """
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)


@pytest.fixture
def aws_env(moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Point boto3 at the moto server through the environment; return the endpoint URL."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_REGION", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    fresh_default_session(monkeypatch)
    return moto_server


@pytest.fixture
def s3_env(aws_env: str) -> str:
    """A fresh, uniquely named, empty S3 bucket on the moto server (``aws_env`` applies)."""
    bucket = f"gl-test-{uuid.uuid4().hex[:16]}"
    aws_client("s3", aws_env).create_bucket(Bucket=bucket)
    return bucket


def reset_moto(endpoint_url: str) -> None:
    """Wipe every service's state in the moto server at ``endpoint_url``."""
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


@pytest.fixture
def ec2_env(aws_env: str) -> str:
    """``aws_env`` on a freshly reset moto server (no instances, groups or key pairs left by
    earlier tests); yields the endpoint URL."""
    reset_moto(aws_env)
    return aws_env
