"""The server's secrets on disk, and agent tokens.

Files in the gpulease home (created with mode 0600, never logged, never returned by the API):

- ``server.token`` — the API bearer token; the client (same user, same machine) reads it.
- ``server.key`` — 32 random bytes. A node's agent token is ``HMAC-SHA256(server.key, instance
  id)`` (hex) when its provider does not hand out tokens itself (``SupportsNodeToken``): the
  server can always re-derive it after a restart, and the DB keeps only its sha256.
- ``secrets.keyring`` — the vault's keys for tasks' secrets (owned by
  :mod:`gpulease.server.vault.keyring`, same rules).

Moves no states.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
from pathlib import Path

from pydantic import SecretStr

from gpulease.atomic import write_atomic

TOKEN_FILE = "server.token"
KEY_FILE = "server.key"


def _create_private(path: Path, content: bytes) -> None:
    """Write ``content`` to a new file readable by its owner only (no-op when it exists); a
    crash never leaves an empty or half-written one (atomic, 0600 from the temp's creation)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        write_atomic(path, content, mode=0o600, exclusive=True)


def _read_private(path: Path) -> bytes:
    """The file's bytes as written (a binary key may begin or end with whitespace bytes)."""
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return path.read_bytes()


def api_token(home: Path) -> SecretStr:
    """The API token (created on first use)."""
    path = home / TOKEN_FILE
    _create_private(path, secrets.token_urlsafe(32).encode() + b"\n")
    return SecretStr(_read_private(path).decode().strip())


def server_key(home: Path) -> bytes:
    """The key agent tokens are derived from (created on first use)."""
    path = home / KEY_FILE
    _create_private(path, secrets.token_bytes(32))
    key = _read_private(path)
    if len(key) < 16:
        raise RuntimeError(f"{path} is too short to be a key")
    return key


def derived_node_token(key: bytes, instance_id: str) -> SecretStr:
    digest = hmac.new(key, instance_id.encode(), hashlib.sha256).hexdigest()
    return SecretStr(digest)


def same_token(presented: str, expected: SecretStr) -> bool:
    return hmac.compare_digest(presented.encode(), expected.get_secret_value().encode())
