"""The server brings its own gpulease: the wheel of the running code, and the bootstrap over SSH
into VMs of tests/awsvm.py (moto's instances made real), with the provider in this process.

On a VM: the agent URL appears only once the agent of exactly this version answers through the
tunnel; a second bootstrap changes nothing; a node running another version gets this one (the
agent restarted); with ``install: pypi`` the VM's user-data installs the "published" version
from the VM's index (the session's wheelhouse) and the server installs nothing."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import time
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from gpulease.agent.client import AgentClient
from gpulease.providers.aws import AwsProvider, AwsSettings
from gpulease.providers.aws.bootstrap import Bootstraps
from gpulease.providers.base import LaunchRequest
from gpulease.providers.ssh import SshTarget
from gpulease.providers.wheel import Wheel, _content, _write, own_version, own_wheel
from tests.awsvm import VM_ENV, AwsVms, Vm, aws_vms, vm_image, vm_moto, vm_network  # noqa: F401
from tests.waiting import wait_until


def test_the_wheel_is_the_running_code_with_the_installed_metadata(tmp_path: Path) -> None:
    wheel = own_wheel(tmp_path / "a")
    again = own_wheel(tmp_path / "b")
    assert re.fullmatch(r"0\.1\.0\+g[0-9a-f]{12}", wheel.version) and wheel.version == own_version()
    assert wheel.path.read_bytes() == again.path.read_bytes()  # same content, same bytes
    assert own_wheel(tmp_path / "a").path == wheel.path  # cached
    with zipfile.ZipFile(wheel.path) as archive:
        names = set(archive.namelist())
        info = f"gpulease-{wheel.version}.dist-info"
        assert {f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"} <= names
        assert "gpulease/providers/wheel.py" in names and "gpulease/catalog/data" not in names
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        meta = archive.read(f"{info}/METADATA").decode()
        requires = metadata.distribution("gpulease").metadata.get_all("Requires-Dist") or []
        assert [line[15:] for line in meta.splitlines() if line.startswith("Requires-Dist: ")] == (
            requires
        )
        for line in archive.read(f"{info}/RECORD").decode().splitlines():  # every digest holds
            name, digest, size = line.rsplit(",", 2)
            if digest:
                content = archive.read(name)
                expected = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=")
                assert digest == f"sha256={expected.decode()}" and int(size) == len(content)
        assert (
            "gpulease = gpulease.cli.main:run" in archive.read(f"{info}/entry_points.txt").decode()
        )


def _settings(aws_vms: AwsVms, **extra: Any) -> AwsSettings:  # noqa: F811 - fixture name
    cloud = aws_vms.cloud
    return AwsSettings(regions=("us-east-1",), ssh_user="root", address_map=cloud.address_map,
                       python=cloud.image.python, placement_group=False, **extra)  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"  # aws_vms boots VMs for keys under home/aws


@pytest.fixture
def provider(aws_vms: AwsVms, home: Path) -> Iterator[AwsProvider]:  # noqa: F811 - fixture
    made = AwsProvider(home / "aws", _settings(aws_vms), retry_base=0.01,
                       wheel_dir=home / "wheels", bootstrap_base_s=0.1)  # fmt: skip
    yield made
    made.close()


def _up(provider: AwsProvider, request_id: str) -> tuple[str, str]:
    """Wait until the request's one instance has an agent URL: (instance id, URL)."""

    def url() -> tuple[str, str] | None:
        (inst,) = provider.list_instances({"gpulease-request": request_id})
        return (inst.id, inst.agent_url) if inst.agent_url else None

    return wait_until(url, 90, "the agent through the tunnel")


def _agent(vm: Vm) -> tuple[str, str]:
    """(pid, version) of the VM's agent, read from the VM's own /opt/gpulease."""
    g = vm.opt / "gpulease"
    return (g / "agent.pid").read_text().strip(), (g / "agent.version").read_text().strip()


def _old_wheel(folder: Path) -> Wheel:
    """The same code under another version: what an earlier server installed."""
    version, files, meta, entry_points = _content()
    old = "0.0.9+gold"
    path = folder / f"gpulease-{old}-py3-none-any.whl"
    _write(path, old, files, meta.replace(f"Version: {version}", f"Version: {old}"), entry_points)
    return Wheel(path, old)


@pytest.mark.slow
@pytest.mark.xdist_group("awsvm")
def test_a_vm_gets_exactly_this_version_once_and_another_version_is_replaced(
    provider: AwsProvider,
    aws_vms: AwsVms,  # noqa: F811 - fixture
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    # a task with an image: the user-data's engine step finds this machine's podman (VMs share
    # /usr) and installs nothing; without one here the step is left out (it would try apt-get)
    engine = shutil.which("podman", path=VM_ENV["PATH"])
    image = "ghcr.io/org/img:v1" if engine else None
    (inst,) = provider.launch(LaunchRequest("req-boot", "c1", "gl-boot", image=image))
    assert inst.agent_url is None  # launch returns at once; the bootstrap runs in the background
    iid, url = _up(provider, "req-boot")
    print(f"\nlaunch to agent URL: {time.monotonic() - started:.1f} s")
    with AgentClient(url, provider.node_token(iid), timeout=10.0) as agent:
        assert agent.health()["api_version"]
    vm = aws_vms.cloud.vms[iid]
    if engine:
        assert (vm.log / "gpulease-engine.log").read_text() == f"gpulease engine: found {engine}\n"
    first = _agent(vm)
    assert first[1] == own_version()
    log = vm.log / "gpulease-bootstrap.log"
    size = log.stat().st_size if log.exists() else 0

    target = provider.ssh_target(iid)
    same = Bootstraps(lambda: own_wheel(tmp_path / "w"), agent_port=7070)
    assert same.once(target)  # a second bootstrap: nothing installed, the agent left alone
    assert _agent(vm) == first
    assert (log.stat().st_size if log.exists() else 0) == size

    older = _old_wheel(tmp_path)
    assert Bootstraps(lambda: older, agent_port=7070).once(target)  # an earlier server's
    assert _agent(vm)[1] == "0.0.9+gold" and _agent(vm)[0] != first[0]
    provider.bootstraps.forget(iid)  # as a restarted server: it probes again
    provider.tunnels.drop(iid)
    _up(provider, "req-boot")
    pid, version = _agent(vm)
    assert version == own_version() and pid != first[0]


@pytest.mark.slow
@pytest.mark.xdist_group("awsvm")
def test_install_pypi_lets_user_data_install_the_published_version(
    aws_vms: AwsVms,  # noqa: F811 - fixture
    home: Path,
) -> None:
    provider = AwsProvider(home / "aws", _settings(aws_vms, install="pypi"), retry_base=0.01,
                           bootstrap_base_s=0.1)  # fmt: skip
    try:
        provider.launch(LaunchRequest("req-pypi", "c1", "gl-pypi"))
        iid, _url = _up(provider, "req-pypi")
        vm = aws_vms.cloud.vms[iid]
        # pip on the VM found gpulease[aws]==0.1.0 in the VM's index: the session's wheelhouse
        assert _agent(vm)[1] == own_version()
        assert not (vm.log / "gpulease-bootstrap.log").exists()  # the server installed nothing
        assert list((vm.opt / "gpulease" / "wheels").glob("*.whl")) == []
    finally:
        provider.close()


def test_a_vm_that_does_not_answer_is_retried_and_each_reason_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on: ssh's connection is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    key = tmp_path / "key.pem"
    key.write_text("not a key")
    target = SshTarget("127.0.0.1", "root", key, tmp_path / "known_hosts", port=port, alias="i-x")
    boots = Bootstraps(lambda: own_wheel(tmp_path / "w"), agent_port=7070, base_s=0.01, cap_s=0.05)
    caplog.set_level("INFO", logger="gpulease.providers.aws")
    try:
        assert not boots.ready("i-x", target)  # returns at once; a thread works on it
        wait_until(lambda: "Connection refused" in caplog.text or None, 20, "a logged failure")
        assert not boots.ready("i-x", target)
        assert caplog.text.count("bootstrap failed") == 1  # the same reason once, not per retry
        thread, _stop = boots._threads["i-x"]
        boots.forget("i-x")  # terminated: the thread ends
        thread.join(5)
        assert not thread.is_alive()
    finally:
        boots.close()
