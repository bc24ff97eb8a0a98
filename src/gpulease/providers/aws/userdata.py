"""What a VM runs at first boot (its user-data) and the agent token it carries.

Tokens: the provider makes them, so :class:`AwsProvider` is ``SupportsNodeToken``. Instance ids
are not known before RunInstances, so a token is ``HMAC-SHA256(key, request id)`` with ``key``
kept 0600 in ``<home>/aws/node-token.key``: every node of one launch shares it, and a restarted
server re-derives it.

The script writes the token 0600 on the VM, checks the image's Python (``providers.aws.python``)
is ≥ 3.11, makes ``/opt/gpulease/venv`` with ``--system-site-packages`` (the image's ML stack,
torch on a DLAMI, stays visible; pip is the image's, else ensurepip's), gives it a ``torchrun``
that runs under the venv's Python, and touches ``/opt/gpulease/ready``. Installing gpulease and
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
) -> str:
    """The bash script a node runs at first boot (as root, on EC2 and in the test harness)."""
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
