"""What a VM runs at first boot (its user-data) and the agent token it carries.

Tokens: the provider makes them, so :class:`AwsProvider` is ``SupportsNodeToken``. Instance ids
are not known before RunInstances, so a token is ``HMAC-SHA256(key, request id)`` with ``key``
kept 0600 in ``<home>/aws/node-token.key``: every node of one launch shares it, and a restarted
server re-derives it.

The script writes the token 0600 on the VM, checks the image's Python (``providers.aws.python``)
is ≥ 3.11, makes ``/opt/gpulease/venv`` with ``--system-site-packages`` (the image's ML stack,
torch on a DLAMI, stays visible; pip is the image's, else ensurepip's), gives it a ``torchrun``
that runs under the venv's Python, and touches ``/opt/gpulease/ready``. A node of a task with a
container image (``engine``) first gets a container engine when it has none
(:func:`engine_script`: Podman from the image's package manager, else Docker), and on a GPU
node (``gpus``) the NVIDIA container toolkit's CDI spec when ``nvidia-ctk`` is there — best
effort: logged to ``/var/log/gpulease-engine.log`` and the boot log, never fatal (the agent
says so when the task starts without an engine). Installing gpulease and
starting the agent is the server's job over SSH (:mod:`.bootstrap`); with ``install: pypi`` the
script pip-installs ``gpulease[aws]==<version>`` and starts the agent itself (bound to
127.0.0.1, reached through the SSH tunnel, ``--imds`` on). Moves no states.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import shlex
from pathlib import Path

from pydantic import SecretStr

import gpulease
from gpulease.atomic import write_atomic
from gpulease.providers.aws.bootstrap import start_script

KEY_FILE = "node-token.key"


def token_key(root: Path) -> bytes:
    """The key node tokens are derived from (created 0600 on first use)."""
    path = root / KEY_FILE
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # made once, whole, 0600 from the start
        write_atomic(path, secrets.token_bytes(32), mode=0o600, exclusive=True)
    key = path.read_bytes()
    if len(key) < 16:
        raise RuntimeError(f"{path} is too short to be a key")
    return key


def request_token(key: bytes, request_id: str) -> SecretStr:
    return SecretStr(hmac.new(key, request_id.encode(), hashlib.sha256).hexdigest())


def user_data(
    token: SecretStr,
    agent_port: int,
    *,
    install: str = "server",
    python: str = "python3",
    version: str = gpulease.__version__,
    engine: bool = False,
    gpus: bool = False,
) -> str:
    """The bash script a node runs at first boot (as root, on EC2 and in the test harness);
    ``engine``: the node runs a task in a container image (``gpus``: on GPUs)."""
    secret = shlex.quote(token.get_secret_value())
    py = shlex.quote(python)
    script = f"""#!/bin/bash
set -euo pipefail
umask 077
G=/opt/gpulease
install -d -m 700 $G $G/node $G/wheels
printf '%s\\n' {secret} > $G/token
if ! {py} -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "gpulease needs Python >= 3.11 on the node: set providers.aws.python" >&2; exit 1
fi
if [ ! -x $G/venv/bin/python ]; then
  {py} -m venv --system-site-packages --without-pip $G/venv
fi
$G/venv/bin/python -m pip --version >/dev/null 2>&1 || $G/venv/bin/python -m ensurepip >/dev/null
if [ ! -e $G/venv/bin/torchrun ] && $G/venv/bin/python -c {_HAS_TORCH}; then
  printf '#!%s\\nimport sys\\nfrom torch.distributed.run import main\\nsys.exit(main())\\n' \\
    $G/venv/bin/python > $G/venv/bin/torchrun
  chmod 700 $G/venv/bin/torchrun
fi
"""
    if engine:
        script += engine_script(gpus=gpus)
    if install == "pypi":
        package = shlex.quote(f"gpulease[aws]=={version}")
        script += f"$G/venv/bin/python -m pip install --quiet --no-input {package}\n"
        script += "(\n" + start_script(None, agent_port) + ")\n"
    return script + "touch $G/ready\n"


#: The image's torch (a DLAMI's) is visible in the venv, its ``torchrun`` script is not: the
#: script above writes one that runs under the venv's Python (which has gpulease).
_HAS_TORCH = shlex.quote(
    "import importlib.util, sys; sys.exit(not importlib.util.find_spec('torch'))"
)


ENGINE_LOG = "/var/log/gpulease-engine.log"
CDI_SPEC = "/etc/cdi/nvidia.yaml"


def engine_script(*, gpus: bool, log: str = ENGINE_LOG, cdi: str = CDI_SPEC) -> str:
    """Bash that installs a container engine unless ``podman`` or ``docker`` is on ``PATH``
    (Podman first: apt-get, dnf; else Docker: dnf, yum, then started with systemd), and, with
    ``gpus``, writes the NVIDIA container toolkit's CDI spec (``cdi``, what Podman's
    ``--device nvidia.com/gpu=all`` reads) when ``nvidia-ctk`` is there. Best effort, in a
    subshell: each outcome is a ``gpulease engine:`` line in ``log`` and on stderr (the boot
    log), the package managers' output goes to ``log``, and a failure never stops the boot."""
    q_log, q_cdi = shlex.quote(log), shlex.quote(cdi)
    script = f"""( set +e; umask 022
  L={q_log}
  log() {{ echo "gpulease engine: $*" | tee -a $L >&2; }}
  have() {{ command -v "$1" >/dev/null 2>&1; }}
  if have podman || have docker; then
    log "found $(command -v podman || command -v docker)"
  else
    if have apt-get; then
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >>$L 2>&1
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman >>$L 2>&1
    fi
    have podman || ! have dnf || dnf install -y -q podman >>$L 2>&1
    have podman || have docker || ! have dnf || dnf install -y -q docker >>$L 2>&1
    have podman || have docker || ! have yum || yum install -y -q docker >>$L 2>&1
    if ! have podman && have docker && have systemctl; then
      systemctl enable --now docker >>$L 2>&1 || log "could not start docker"
    fi
    if have podman || have docker; then
      log "installed $(command -v podman || command -v docker)"
    else
      log "no container engine could be installed (tried apt-get, dnf, yum)"
    fi
  fi
"""
    if gpus:
        script += f"""  if have nvidia-ctk; then
    mkdir -p "$(dirname {q_cdi})"
    if nvidia-ctk cdi generate --output={q_cdi} >>$L 2>&1; then
      log "wrote the CDI spec "{q_cdi}
    else
      log "nvidia-ctk cdi generate failed (see $L)"
    fi
  else
    log "no nvidia-ctk: no CDI spec, so Podman passes no GPUs to containers"
  fi
"""
    return script + ") || true\n"
