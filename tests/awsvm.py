"""moto's EC2 instances made real: a "VM" per running instance, booted from its user-data.

moto runs no VMs. :class:`VmCloud` watches a moto server (boto3, from a thread of the test
process) and, for every instance moto reports ``running`` whose key pair's private key is in
the test's gpulease home, boots a VM; when moto says the instance is shutting down, terminated,
stopping or stopped (or it vanished: a moto reset), the VM is killed. A VM is:

- a network namespace ``glvm<tag>-<n>`` with ``eth0`` on a private /24 this module picks (never
  10.231.x, used by tests/netns; never one any interface here already has), joined by veth to a
  bridge whose root-namespace address is ``.254``; VMs reach each other and the server reaches
  them, nothing else. The address is written to the address map (``providers.aws.address_map``:
  instance id → address) so the server uses it, never moto's invented public addresses;
- one long-lived init process, ``ip netns exec NS unshare --mount --uts --propagation
  private``, with EC2's host name for its address (``ip-10-232-…``, in its own ``/etc/hosts``:
  each VM resolves its own name to its address, as VPC DNS does), in whose private mount
  namespace ``/opt``, ``/var/log`` and root's home are per-VM directories
  (VMs share no files), root's ``authorized_keys`` holds the key pair's public key (derived from
  the ``.pem`` the provider wrote), ``~/.config/pip/pip.conf`` points pip at the session's
  wheelhouse (``no-index``: namespaces reach no registry) and, when the cloud has an endpoint
  for them, ``~/.aws/{config,credentials}`` point boto3 at the same moto (what an instance
  profile gives a real VM);
- the client's files out of sight: the repository (all but its ``.venv``, which holds the
  image's packages) and the server's gpulease home are hidden under empty directories, so a
  task's workdir reaches a VM only the way it reaches a cloud VM (through the agent);
- the "image": the base interpreter's site-packages is replaced by a directory of links to the
  test venv's packages — torch, scikit-learn, gpulease's dependencies — *except* gpulease (its
  dist-info, the editable finder and every ``.pth`` left out), as a Deep Learning AMI comes
  with its ML stack and without gpulease: the server must bring it;
- an sshd on the VM address (root by key only), an IMDS on 169.254.169.254 (tests/awsvm_imds.py:
  :meth:`VmCloud.notice` writes the spot ``instance-action``), and the instance's user-data
  (DescribeInstanceAttribute ``userData``) run as root, as EC2 runs it at first boot, its output
  in the VM's ``/var/log/cloud-init-output.log``.

Killing a VM kills every process in its namespace (``ip netns pids``) and deletes the namespace.
Root and iproute2, util-linux and openssh-server are needed (:func:`missing`).
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.components import require, require_root, unavailable

if TYPE_CHECKING:
    from tests.cli.conftest import Cli

ROOT = Path(__file__).resolve().parents[1]
SSHD = "/usr/sbin/sshd"
IMDS_SCRIPT = Path(__file__).with_name("awsvm_imds.py")
#: The interpreter the test venv was made from: the VMs' "image" Python.
BASE_PYTHON: str = getattr(sys, "_base_executable", sys.executable)
VM_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          "HOME": "/root", "LANG": "C.UTF-8"}  # fmt: skip
_DOWN = {"shutting-down", "terminated", "stopping", "stopped"}


def missing() -> str | None:
    """Why VMs cannot be made here, or None."""
    for tool in ("ip", "unshare", "ssh", "ssh-keygen", SSHD):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2, util-linux, openssh-server: make test installs them)"
    return None


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def _free_subnet() -> ipaddress.IPv4Network:
    listed = _run("ip", "-o", "-4", "addr").splitlines()
    used = [ipaddress.ip_interface(w).network for line in listed
            for w in line.split() if "/" in w and w[0].isdigit()]  # fmt: skip
    for _ in range(100):
        net = ipaddress.IPv4Network(f"10.232.{random.randrange(1, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.232.x.0/24 here")


def _hostname(address: str) -> str:
    """EC2's default host name for a private address (``ip-10-0-0-1``)."""
    return "ip-" + address.replace(".", "-")


def _base_site_packages() -> list[str]:
    """The base interpreter's site-packages directories (what a venv with
    ``--system-site-packages`` made from it sees)."""
    code = "import json, site; print(json.dumps(site.getsitepackages()))"
    out = _run(BASE_PYTHON, "-I", "-c", code)
    return [p for p in json.loads(out) if Path(p).is_dir()]


@dataclass
class Image:
    """What every VM's disk has beside its own directories (made once per test session)."""

    site_packages: Path  # links to the test venv's packages, gpulease left out
    wheelhouse: Path  # pip's only index on the VMs
    python: str  # the interpreter user-data makes the node venv from
    base_sites: list[str]  # the base interpreter's site-packages, replaced in each VM

    @classmethod
    def build(cls, folder: Path, wheels: Sequence[Path] = ()) -> Image:
        site = folder / "site-packages"
        site.mkdir(parents=True)
        prefix = Path(sys.prefix).resolve()
        venv_site = Path(next(p for p in sys.path if p.endswith("site-packages")
                              and Path(p).resolve().is_relative_to(prefix)))  # fmt: skip
        for entry in sorted(venv_site.iterdir()):
            name = entry.name.lower()
            if name.startswith(("gpulease", "__editable__", "_gpulease")) or name.endswith(".pth"):
                continue
            (site / entry.name).symlink_to(entry)
        wheelhouse = folder / "wheelhouse"
        wheelhouse.mkdir()
        for wheel in wheels:
            shutil.copy2(wheel, wheelhouse / wheel.name)
        return cls(site, wheelhouse, BASE_PYTHON, _base_site_packages())


@dataclass
class Vm:
    instance_id: str
    ns: str
    address: str
    folder: Path
    init: subprocess.Popen[bytes]
    booted_wall: float = field(default_factory=time.time)

    @property
    def opt(self) -> Path:
        """The VM's ``/opt`` (``/opt/gpulease`` lives in it)."""
        return self.folder / "opt"

    @property
    def log(self) -> Path:
        """The VM's ``/var/log``."""
        return self.folder / "log"

    def agent_started_after(self) -> float | None:
        """Seconds from the VM's boot to the agent's start (its pid file), if it started."""
        pid = self.opt / "gpulease" / "agent.pid"
        return pid.stat().st_mtime - self.booted_wall if pid.exists() else None


class VmCloud:
    """Bridge, address map and the watcher that boots and kills VMs for moto's instances."""

    def __init__(self, folder: Path, image: Image) -> None:
        self.folder = folder
        self.image = image
        self.tag = f"{os.getpid() % 1000:03d}{random.randrange(16**2):02x}"
        self.subnet = _free_subnet()
        hosts = list(self.subnet.hosts())
        self.gateway = str(hosts[-1])  # .254: the root namespace's side
        self._free = [str(h) for h in hosts[:-1]]
        self.bridge = f"glvb{self.tag}"
        folder.mkdir(parents=True, exist_ok=True)
        self.address_map = folder / "address-map.json"
        self.vms: dict[str, Vm] = {}
        self.booted: list[Vm] = []  # every VM so far, killed ones too (their files stay)
        self.boot_seconds: list[float] = []
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ec2: Any = None
        self.key_dir: Path | None = None
        self.aws_endpoint: str | None = None
        self.errors: list[str] = []

    # ---- the network ---------------------------------------------------------------------

    def up(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        self._write_map()

    def down(self) -> None:
        self.stop_watching()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30,
                       check=False)  # fmt: skip

    # ---- watching moto -------------------------------------------------------------------

    def watch(self, ec2: Any, key_dir: Path, aws_endpoint: str | None = None) -> None:
        """Boot VMs for the instances ``ec2`` (a boto3 client) reports whose key is in
        ``key_dir``; VMs get ``aws_endpoint`` as their AWS endpoint when given."""
        self.stop_watching()
        self._ec2, self.key_dir, self.aws_endpoint = ec2, key_dir, aws_endpoint
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="awsvm", daemon=True)
        self._thread.start()

    def stop_watching(self) -> None:
        """Stop the watcher and kill every VM."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        for iid in list(self.vms):
            self.kill(iid)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # keep watching; the test sees self.errors
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(0.2)

    def _step(self) -> None:
        pages = self._ec2.get_paginator("describe_instances").paginate()
        seen: dict[str, dict[str, Any]] = {
            i["InstanceId"]: i
            for page in pages
            for r in page["Reservations"]
            for i in r["Instances"]
        }
        for iid in list(self.vms):
            if iid not in seen or seen[iid]["State"]["Name"] in _DOWN:
                self.kill(iid)
        for iid, data in seen.items():
            if data["State"]["Name"] in ("pending", "running") and iid not in self.vms:
                key = self._key(data)
                if key is not None:
                    self.boot(iid, key)

    def _key(self, data: dict[str, Any]) -> Path | None:
        name = str(data.get("KeyName") or "")
        owner = name.removeprefix("gpulease-")
        found = sorted(self.key_dir.glob(f"*-{owner}.pem")) if self.key_dir and owner else []
        return found[0] if found else None

    # ---- one VM --------------------------------------------------------------------------

    def boot(self, instance_id: str, key: Path) -> Vm:
        with self._lock:
            self._count += 1
            n = self._count
            address = self._free.pop(0)
        ns, outer = f"glvm{self.tag}-{n}", f"glv{self.tag}{n}"
        folder = self.folder / "vms" / f"{n}-{instance_id}"
        self._prepare(folder, instance_id, address, key)
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", f"{outer}i")
        _run("ip", "link", "set", outer, "master", self.bridge)
        _run("ip", "link", "set", outer, "up")
        _run("ip", "link", "set", f"{outer}i", "netns", ns)
        inside = ("ip", "netns", "exec", ns, "ip")
        _run(*inside, "link", "set", f"{outer}i", "name", "eth0")
        _run(*inside, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _run(*inside, "link", "set", "eth0", "up")
        _run(*inside, "link", "set", "lo", "up")
        _run(*inside, "addr", "add", "169.254.169.254/32", "dev", "lo")
        console = (folder / "console.log").open("ab")
        init = subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private",
             "bash", str(folder / "init.sh")],
            stdin=subprocess.DEVNULL, stdout=console, stderr=console, start_new_session=True,
            env=VM_ENV,  # a VM does not inherit this machine's environment (PIP_*, AWS_*, …)
        )  # fmt: skip
        vm = Vm(instance_id, ns, address, folder, init)
        with self._lock:
            self.vms[instance_id] = vm
            self.booted.append(vm)
        self._write_map()
        return vm

    def _prepare(self, folder: Path, instance_id: str, address: str, key: Path) -> None:
        for sub in ("opt", "log", "home/.ssh", "home/.config/pip", "imds", "etc"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        home = folder / "home"
        public = _run("ssh-keygen", "-y", "-f", str(key))
        (home / ".ssh" / "authorized_keys").write_text(public)
        (home / ".config" / "pip" / "pip.conf").write_text(
            f"[global]\nno-index = true\nfind-links = {self.image.wheelhouse}\n"
            "disable-pip-version-check = true\n"
        )
        if self.aws_endpoint:
            (home / ".aws").mkdir()
            (home / ".aws" / "config").write_text(
                f"[default]\nregion = us-east-1\nendpoint_url = {self.aws_endpoint}\n"
            )
            (home / ".aws" / "credentials").write_text(
                "[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
            )
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "etc" / "host"))
        (folder / "etc" / "sshd_config").write_text(
            f"Port 22\nListenAddress {address}\nHostKey {folder / 'etc' / 'host'}\n"
            "AuthorizedKeysFile /root/.ssh/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"StrictModes no\nPidFile {folder / 'etc' / 'sshd.pid'}\n"
        )
        data = self._ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        encoded = (data.get("UserData") or {}).get("Value") or ""
        (folder / "etc" / "user-data").write_bytes(base64.b64decode(encoded))
        shutil.copy(IMDS_SCRIPT, folder / "etc" / "imds.py")
        (folder / "etc" / "hosts").write_text(
            f"127.0.0.1 localhost\n{address} {_hostname(address)}\n"
        )
        (folder / "init.sh").write_text(self._init_script(folder, instance_id, address))

    def _init_script(self, folder: Path, instance_id: str, address: str) -> str:
        q = shlex.quote
        lines = ["set -eu", f"hostname {_hostname(address)}",
                 f"mount --bind {q(str(folder / 'etc' / 'hosts'))} /etc/hosts",
                 f"mount --bind {q(str(folder / 'opt'))} /opt",
                 f"mount --bind {q(str(folder / 'log'))} /var/log"]  # fmt: skip
        real_home = Path.home()
        for base in {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}:
            if base.is_relative_to(real_home):  # keep the interpreter under the home visible
                inner = folder / "home" / base.relative_to(real_home)
                inner.mkdir(parents=True, exist_ok=True)
                lines.append(f"mount --bind {q(str(base))} {q(str(inner))}")
        lines.append(f"mount --rbind {q(str(folder / 'home'))} {q(str(real_home))}")
        lines += self._hide(folder, ROOT, keep=Path(sys.prefix).resolve())
        if self.key_dir is not None:
            lines += self._hide(folder, self.key_dir.parent.resolve(), keep=None)
        empty = folder / "empty"
        empty.mkdir(exist_ok=True)
        for k, site in enumerate(self.image.base_sites):
            source = self.image.site_packages if k == 0 else empty
            lines.append(f"mount --bind {q(str(source))} {q(site)}")
        lines += [
            "mkdir -p /run/sshd",
            f"{q(sys.executable)} {q(str(folder / 'etc' / 'imds.py'))} {q(str(folder / 'imds'))} "
            f"{q(instance_id)}"
            " >>/var/log/imds.log 2>&1 &",
            f"{SSHD} -D -e -f {q(str(folder / 'etc' / 'sshd_config'))} >>/var/log/sshd.log 2>&1 &",
            "cd / && "
            f"bash {q(str(folder / 'etc' / 'user-data'))} >>/var/log/cloud-init-output.log 2>&1"
            " || echo user-data failed: $? >>/var/log/cloud-init-output.log",
            "wait",
        ]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _hide(folder: Path, path: Path, keep: Path | None) -> list[str]:
        """Mount lines that hide ``path`` (the repository, the server's home: a VM must not
        see the client's files) except ``keep`` inside it (the test venv: the image's
        packages live there)."""
        q = shlex.quote
        blank = folder / "hidden" / path.as_posix().strip("/").replace("/", "_")
        blank.mkdir(parents=True, exist_ok=True)
        lines = []
        if keep is not None and keep.is_relative_to(path):
            held = folder / "held" / blank.name
            held.mkdir(parents=True, exist_ok=True)
            (blank / keep.relative_to(path)).mkdir(parents=True, exist_ok=True)
            lines.append(f"mount --bind {q(str(keep))} {q(str(held))}")
            lines.append(f"mount --bind {q(str(blank))} {q(str(path))}")
            lines.append(f"mount --bind {q(str(held))} {q(str(keep))}")
        else:
            lines.append(f"mount --bind {q(str(blank))} {q(str(path))}")
        return lines

    def kill(self, instance_id: str) -> None:
        with self._lock:
            vm = self.vms.pop(instance_id, None)
        if vm is None:
            return
        for _ in range(5):
            pids = subprocess.run(["ip", "netns", "pids", vm.ns], capture_output=True, text=True,
                                  timeout=30, check=False).stdout.split()  # fmt: skip
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.05)
        with contextlib.suppress(subprocess.TimeoutExpired):
            vm.init.wait(10)
        subprocess.run(["ip", "netns", "del", vm.ns], capture_output=True, timeout=30, check=False)
        self._write_map()

    def _write_map(self) -> None:
        with self._lock:
            mapping = {iid: vm.address for iid, vm in self.vms.items()}
        tmp = self.address_map.with_name(f".{self.address_map.name}.tmp")
        tmp.write_text(json.dumps(mapping))
        os.replace(tmp, self.address_map)

    # ---- what tests do to VMs ------------------------------------------------------------

    def notice(self, instance_id: str, action: str = "terminate") -> None:
        """The spot two-minute warning on the VM's metadata service."""
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        body = json.dumps({"action": action, "time": when})
        (self.vms[instance_id].folder / "imds" / "instance-action.json").write_text(body)

    def report(self, lines: int = 15) -> str:
        """The tail of every VM's logs (printed by the fixture: pytest shows it on failure)."""
        out = [f"harness errors: {self.errors}"] if self.errors else []
        for vm in self.booted:
            out.append(f"== VM {vm.instance_id} at {vm.address} ({vm.folder})")
            for name in ("cloud-init-output.log", "gpulease-bootstrap.log", "gpulease-agent.log"):
                path = vm.log / name
                if path.exists():
                    tail = path.read_text(errors="replace").splitlines()[-lines:]
                    out += [f"-- {name}", *tail]
        return "\n".join(out)

    def namespaces(self) -> list[str]:
        """This cloud's namespaces that exist now."""
        listed = _run("ip", "netns", "list").split()
        return [n for n in listed if n.startswith(f"glvm{self.tag}-")]


@contextlib.contextmanager
def vm_cloud(folder: Path, image: Image) -> Iterator[VmCloud]:
    cloud = VmCloud(folder, image)
    try:
        cloud.up()
        yield cloud
    finally:
        cloud.down()


# ---- pytest fixtures (import them where used: ``from tests.awsvm import aws_vms, …``) ------------


@pytest.fixture(scope="session")
def vm_image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The VMs' image, once per session: the ML stack without gpulease, and a wheelhouse
    holding the server's own wheel (what ``install: pypi`` finds there as the published
    version)."""
    require_root("the VMs are network namespaces (ip netns add) with private mounts (unshare)")
    require("iproute2", "openssh-server")
    why = missing()
    if why:
        unavailable(why)
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    pytest.importorskip("moto.server")
    from gpulease.providers.wheel import own_wheel

    folder = tmp_path_factory.mktemp("awsvm-image")
    return Image.build(folder, [own_wheel(folder / "wheels").path])


@pytest.fixture(scope="session")
def vm_network(tmp_path_factory: pytest.TempPathFactory, vm_image: Image) -> Iterator[VmCloud]:
    with vm_cloud(tmp_path_factory.mktemp("awsvm"), vm_image) as cloud:
        yield cloud


@pytest.fixture(scope="session")
def vm_moto(vm_network: VmCloud) -> Iterator[str]:
    """A moto server on the bridge's address, in this process (the test reaches its backend to
    interrupt spot instances); the server and the VMs both reach it."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address=vm_network.gateway, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclass
class AwsVms:
    """What an end-to-end test gets: the VM cloud, moto's endpoint, a boto3 EC2 client on it."""

    cloud: VmCloud
    endpoint: str
    ec2: Any


def vm_config(cloud: VmCloud, extra: str = "") -> str:
    """``providers.aws`` for the harness: the address map, root logins, the image's Python; moto
    has no placement groups (tests/providers/test_aws_placement.py models them)."""
    return (
        "providers:\n  aws:\n    regions: [us-east-1]\n    ssh_user: root\n"
        f"    address_map: {cloud.address_map}\n    python: {cloud.image.python}\n"
        f"    placement_group: false\n{extra}"
    )


@pytest.fixture
def aws_vms(
    vm_network: VmCloud, vm_moto: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[AwsVms]:
    """Fresh moto state, boto3 pointed at it through the environment (the CLI's server inherits
    it), and VMs booted for the instances of keys under ``$GPULEASE_HOME/aws`` (set by the
    test's ``cli`` fixture: ``tmp_path/home``); every VM killed at the end."""
    from tests.awsfixtures import aws_client, fresh_default_session, reset_moto

    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (
        ("AWS_ENDPOINT_URL", vm_moto), ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config")),
        ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials")),
    ):  # fmt: skip
        monkeypatch.setenv(name, value)
    fresh_default_session(monkeypatch)
    reset_moto(vm_moto)
    ec2 = aws_client("ec2", vm_moto)
    vm_network.watch(ec2, tmp_path / "home" / "aws", aws_endpoint=vm_moto)
    first = len(vm_network.booted)
    try:
        yield AwsVms(vm_network, vm_moto, ec2)
    finally:
        vm_network.stop_watching()
        mine, vm_network.booted = vm_network.booted[first:], vm_network.booted[first:]
        print(vm_network.report())
        vm_network.booted = mine


@pytest.fixture(name="user")
def vm_user(cli: Cli, aws_vms: AwsVms) -> Iterator[Cli]:
    """The test's CLI user (tests/cli's ``cli`` fixture) configured for the VM cloud; its server
    stopped at the end. Import ``vm_user`` into a tests/cli module to get ``user``."""
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text(vm_config(aws_vms.cloud))
    yield cli
    cli("server", "stop")
