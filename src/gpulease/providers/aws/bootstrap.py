"""The server brings its own gpulease to each VM, over SSH, once the VM answers.

User-data (:mod:`.userdata`) only prepares the VM: ``/opt/gpulease`` (0700), the token (0600),
a venv made ``--system-site-packages`` from the image's Python, then ``/opt/gpulease/ready``.
:class:`Bootstraps` then runs, per instance, a background thread that:

1. **probes** (``ssh … bash -c PROBE``): is the VM ready, which gpulease the venv has, which
   version the running agent (``/opt/gpulease/agent.pid`` + ``agent.version``) is;
2. when the venv's gpulease is not exactly the server's
   (:func:`~gpulease.providers.wheel.own_wheel`, ``install: server``), **installs** it: the
   wheel goes over the same SSH channel on stdin (``cat > …``), then ``pip install
   '<wheel>[aws]'`` into the venv (the image's packages are visible; only what is missing
   comes from the VM's index);
3. **starts** the agent (``nohup setsid … gpulease.agent serve --host 127.0.0.1 --imds``) unless
   one of this exact version runs; one of another version is stopped first (TERM, then KILL);
   the step waits until the agent's port accepts connections.

Every step is idempotent and runs under ``flock /opt/gpulease/.bootstrap.lock`` on the VM, so a
second server (or a retry) never installs twice at once. With ``install: pypi`` user-data
installs the published version and starts the agent itself; the thread then only checks that an
agent runs (and starts it again if it died). A failure (SSH not up yet, pip failing) is logged
— outcome and the remote stderr's tail, never the token, which is not in any command — and
retried with jittered, capped backoff (:mod:`gpulease.backoff`) until it succeeds, the instance
is forgotten (terminated) or the provider closes: a VM that never bootstraps is a node that
never becomes reachable, which the controller times out. Provider calls never wait for this:
:meth:`Bootstraps.ready` says whether an instance is done. Moves no states.
"""

from __future__ import annotations

import logging
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpulease.backoff import backoff_delay
from gpulease.errors import GpuleaseError
from gpulease.providers.ssh import SshResult, SshTarget, run_ssh
from gpulease.providers.wheel import Wheel

log = logging.getLogger("gpulease.providers.aws")

G = "/opt/gpulease"


#: The venv's own gpulease version, from its dist-info directory's name (no Python start-up).
_VERSION = (
    f"for d in {G}/venv/lib/python3*/site-packages/gpulease-*.dist-info; do "
    'v=${d##*/gpulease-}; [ -d "$d" ] && echo "${v%.dist-info}"; done; true'
)


PROBE = f"""set -u
if [ ! -f {G}/ready ]; then echo state=booting; exit 0; fi
echo state=ready
echo "installed=$({_VERSION})"
pid=$(cat {G}/agent.pid 2>/dev/null || true)
if [ -n "$pid" ] && tr '\\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -q 'gpulease.agent serve'; then
  echo "agent=$(cat {G}/agent.version 2>/dev/null || echo unknown)"
fi
"""  # noqa: E501


def start_script(version: str | None, agent_port: int) -> str:
    """Bash that (re)starts the agent unless one of ``version`` (None: the venv's gpulease)
    runs, and waits for its port."""
    v = shlex.quote(version) if version is not None else f"$({_VERSION})"
    port = int(agent_port)
    return f"""V={v}
pid=$(cat {G}/agent.pid 2>/dev/null || true)
if [ -n "$pid" ] && tr '\\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -q 'gpulease.agent serve'; then
  if [ "$(cat {G}/agent.version 2>/dev/null)" = "$V" ]; then exit 0; fi
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
fi
cd {G}
GPULEASE_AGENT_IMDS_URL=http://169.254.169.254 nohup setsid {G}/venv/bin/python -m gpulease.agent \\
  serve --host 127.0.0.1 --port {port} --token-file {G}/token --node-dir {G}/node --imds \\
  >>/var/log/gpulease-agent.log 2>&1 </dev/null 9>&- &
agent=$!
echo "$agent" >{G}/agent.pid
printf '%s\\n' "$V" >{G}/agent.version
for i in $(seq 300); do
  if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then exit 0; fi
  if ! kill -0 "$agent" 2>/dev/null; then tail -n 20 /var/log/gpulease-agent.log >&2; exit 5; fi
  sleep 0.1
done
echo "the agent did not listen on {port} in 30 s" >&2
exit 6
"""  # noqa: E501


def install_script(wheel: Wheel) -> str:
    """Bash that stores the wheel read from stdin and pip-installs it (with ``[aws]``)."""
    name = shlex.quote(wheel.filename)
    v = shlex.quote(wheel.version)
    return f"""install -d -m 700 {G}/wheels
cat >{G}/wheels/.{name}.part
mv {G}/wheels/.{name}.part {G}/wheels/{name}
if ! {G}/venv/bin/python -m pip install --quiet --no-input --disable-pip-version-check \\
    --no-compile "{G}/wheels/"{name}"[aws]" >>/var/log/gpulease-bootstrap.log 2>&1; then
  tail -n 20 /var/log/gpulease-bootstrap.log >&2; exit 3
fi
got=$({_VERSION})
if [ "$got" != {v} ]; then echo "pip installed gpulease $got, not {v}" >&2; exit 4; fi
"""


def _locked(body: str) -> str:
    return f"set -euo pipefail\numask 077\nexec 9>{G}/.bootstrap.lock\nflock 9\n{body}"


class BootstrapError(Exception):
    """One bootstrap attempt failed (retried)."""


@dataclass(frozen=True, slots=True)
class Probe:
    ready: bool
    installed: str
    agent: str | None  # the running agent's version, None when none runs


def parse_probe(output: str) -> Probe:
    fields = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    return Probe(fields.get("state") == "ready", fields.get("installed", ""), fields.get("agent"))


class Bootstraps:
    """One background bootstrap per instance; ``ready`` once its agent of the right version runs.

    ``wheel`` is called (in the thread) when an install is needed; None means ``install: pypi``:
    the VM installed gpulease itself."""

    def __init__(
        self, wheel: Callable[[], Wheel] | None, *, agent_port: int, ssh: str = "ssh",
        base_s: float = 0.5, cap_s: float = 10.0, timeout_s: float = 600.0,
    ) -> None:  # fmt: skip
        self.wheel = wheel
        self.agent_port = agent_port
        self.ssh = ssh
        self.base_s, self.cap_s, self.timeout_s = base_s, cap_s, timeout_s
        self._done: set[str] = set()
        self._targets: dict[str, SshTarget] = {}  # the latest address: it may change
        self._threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._lock = threading.Lock()

    def ready(self, instance_id: str, target: SshTarget) -> bool:
        """True once the instance is bootstrapped; otherwise makes sure a thread works on it."""
        with self._lock:
            self._targets[instance_id] = target
            if instance_id in self._done:
                return True
            running = self._threads.get(instance_id)
            if running is None or not running[0].is_alive():
                stop = threading.Event()
                thread = threading.Thread(target=self._loop, args=(instance_id, stop),
                                          name=f"bootstrap-{instance_id}", daemon=True)  # fmt: skip
                self._threads[instance_id] = (thread, stop)
                thread.start()
        return False

    def _loop(self, instance_id: str, stop: threading.Event) -> None:
        attempt, last_error = 0, ""
        while not stop.is_set():
            with self._lock:
                target = self._targets.get(instance_id)
            if target is None:  # forgotten
                return
            try:
                if self.once(target):
                    with self._lock:
                        self._done.add(instance_id)
                    log.info("%s: the gpulease agent runs", instance_id)
                    return
            except (BootstrapError, GpuleaseError, OSError) as exc:
                if str(exc) != last_error:  # each new reason once at warning level
                    log.warning("%s: bootstrap failed, retrying: %s", instance_id, exc)
                last_error = str(exc)
            attempt += 1
            stop.wait(backoff_delay(min(attempt, 30), base=self.base_s, cap=self.cap_s))

    def once(self, target: SshTarget) -> bool:
        """One attempt: True when the agent of the right version runs, False while the VM is
        still booting; raises :class:`BootstrapError`."""
        probe = parse_probe(self._ssh(target, PROBE).stdout.decode(errors="replace"))
        if not probe.ready:
            return False
        body, stdin = "", None
        wheel = self.wheel() if self.wheel is not None else None
        wanted = wheel.version if wheel is not None else probe.installed
        if wheel is not None and probe.installed != wheel.version:
            body, stdin = install_script(wheel), wheel.path.read_bytes()
        if body or probe.agent != wanted:
            script = body + start_script(wanted or None, self.agent_port)
            self._ssh(target, script, stdin=stdin, lock=True)
        return True

    def _ssh(self, target: SshTarget, script: str, *, stdin: bytes | None = None,
             lock: bool = False) -> SshResult:  # fmt: skip
        body = _locked(script) if lock else script
        shell = "bash -c" if target.user == "root" else "sudo -n bash -c"
        result = run_ssh(target, f"{shell} {shlex.quote(body)}", stdin=stdin,
                         timeout_s=self.timeout_s, ssh=self.ssh)  # fmt: skip
        if result.returncode != 0:
            where = "ssh" if not result.connected else f"exit {result.returncode}"
            raise BootstrapError(f"{target.destination}: {where}: {result.tail() or 'no output'}")
        return result

    def forget(self, instance_id: str) -> None:
        """Stop working on an instance (terminated)."""
        with self._lock:
            self._done.discard(instance_id)
            self._targets.pop(instance_id, None)
            running = self._threads.pop(instance_id, None)
        if running is not None:
            running[1].set()

    def close(self) -> None:
        with self._lock:
            threads, self._threads = list(self._threads.values()), {}
        for _thread, stop in threads:
            stop.set()
        for thread, _stop in threads:
            thread.join(5)
