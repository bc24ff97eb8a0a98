"""What a VM runs at first boot (its user-data) and the agent token it carries.

Tokens: the provider makes them, so :class:`AwsProvider` is ``SupportsNodeToken``. Instance ids
are not known before RunInstances, so a token is ``HMAC-SHA256(key, request id)`` with ``key``
kept 0600 in ``<home>/aws/node-token.key``: every node of one launch shares it, and a restarted
server re-derives it. The script writes it 0600 on the VM, installs ``gpulease[aws]`` pinned to
this version with pip and starts the agent bound to 127.0.0.1 (reached through the SSH tunnel),
with the spot-notice poller (``--imds``) on. Moves no states.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shlex
from pathlib import Path

from pydantic import SecretStr

import gpulease

KEY_FILE = "node-token.key"


def token_key(root: Path) -> bytes:
    """The key node tokens are derived from (created 0600 on first use)."""
    path = root / KEY_FILE
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(32))
    key = path.read_bytes()
    if len(key) < 16:
        raise RuntimeError(f"{path} is too short to be a key")
    return key


def request_token(key: bytes, request_id: str) -> SecretStr:
    return SecretStr(hmac.new(key, request_id.encode(), hashlib.sha256).hexdigest())


def user_data(token: SecretStr, agent_port: int, version: str = gpulease.__version__) -> str:
    """The bash script a node runs at first boot."""
    package = shlex.quote(f"gpulease[aws]=={version}")
    secret = shlex.quote(token.get_secret_value())
    return f"""#!/bin/bash
set -euo pipefail
umask 077
install -d -m 700 /opt/gpulease /opt/gpulease/node
printf '%s\\n' {secret} > /opt/gpulease/token
python3 -m venv /opt/gpulease/venv
/opt/gpulease/venv/bin/pip install --quiet {package}
export GPULEASE_AGENT_IMDS_URL=http://169.254.169.254
nohup /opt/gpulease/venv/bin/python -m gpulease.agent serve --host 127.0.0.1 \\
  --port {int(agent_port)} --token-file /opt/gpulease/token --node-dir /opt/gpulease/node \\
  --imds >>/var/log/gpulease-agent.log 2>&1 &
"""
