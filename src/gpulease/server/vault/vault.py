"""The :class:`Vault`: tasks' secret sets sealed with AES-256-GCM into the state DB's
``secret_sets`` table, under the keys of ``<home>/secrets.keyring`` (:mod:`.keyring`).

A set is the JSON ``{name: value}`` encrypted as one blob with the keyring's current key, a
fresh 12-byte nonce and the set's id as AAD (a blob moved to another row does not decrypt).
Values come in and go out only as ``pydantic.SecretStr``; an error names a set id or a key id,
never a value.

Rotation (:meth:`Vault.rotate`, under a lock file so two never overlap): write the keyring with
a new current key beside the old ones; re-seal every set with it in one transaction; write the
keyring with the new key only. Another process's vault notices the file changed: :meth:`load`
re-reads it when a row names a key it does not hold, and :meth:`store` re-reads it before
sealing and once more after its insert — a rotation that began meanwhile may have missed the
new row, so the store re-seals its own row with the new current key (it still holds the values).
Either way no set is left under a dropped key.
"""

from __future__ import annotations

import fcntl
import json
import re
import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.clock import Clock, SystemClock
from gpulease.errors import UserInputError
from gpulease.server.vault import keyring
from gpulease.server.vault.errors import SecretSetNotFound, VaultError
from gpulease.server.vault.keyring import Keyring
from gpulease.server.vault.kms import KmsWrap
from gpulease.state import session_scope
from gpulease.state.secret_sets import (
    SecretSet,
    add_secret_set,
    all_secret_sets,
    delete_secret_set,
    get_secret_set,
)

NONCE_BYTES = 12
_SET_ID = re.compile(r"^ss-[0-9a-f]{32}$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FOLLOW_ROTATIONS = 5


def new_set_id() -> str:
    return f"ss-{secrets.token_hex(16)}"


class Vault:
    """Secret sets in the state DB behind ``engine``, keys in the keyring file at ``path``
    (created when missing; new files wrapped by ``kms`` when given). Thread-safe."""

    def __init__(
        self, engine: Engine, path: Path, kms: KmsWrap | None = None, *, clock: Clock | None = None
    ) -> None:
        self._engine = engine
        self.path = path
        self._kms = kms
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._raw = b""
        self._ring: Keyring | None = None
        keyring.ensure(path, kms)
        self._refresh()

    @property
    def current_key_id(self) -> str:
        """The id of the key new sets are sealed with (not secret)."""
        return self._refresh().current

    @property
    def file_kms(self) -> KmsWrap | None:
        """The KMS wrap of the keyring file as it is now (None: raw keys)."""
        return self._refresh().kms

    def store(self, values: Mapping[str, SecretStr]) -> str:
        """Seal ``values`` as a new set; its id (``ss-<32 hex>``)."""
        plaintext = _plaintext(values)
        set_id = new_set_id()
        ring = self._refresh()
        nonce, blob = _seal(ring, set_id, plaintext)
        now = self._clock.now()
        row = SecretSet(id=set_id, key_id=ring.current, nonce=nonce, ciphertext=blob,
                        created_at=now, updated_at=now)  # fmt: skip
        with session_scope(self._engine) as session:
            add_secret_set(session, row)
        self._follow_rotation(set_id, ring.current, plaintext)
        return set_id

    def load(self, set_id: str) -> dict[str, SecretStr]:
        """The set's values; :class:`SecretSetNotFound` naming ``set_id`` when there is none."""
        if not _SET_ID.match(set_id):
            raise SecretSetNotFound(set_id)
        ring, row = self._refresh(), self._row(set_id)
        if ring.key(row.key_id) is None:  # a rotation since the file was read: read both again
            ring, row = self._refresh(), self._row(set_id)
        key = ring.key(row.key_id)
        if key is None:
            raise VaultError(
                f"secret set {set_id}: sealed with key {row.key_id}, which is not in {self.path}"
            )
        return _values(set_id, _open(key, row))

    def delete(self, set_id: str) -> None:
        """Remove the set (nothing to do when there is none)."""
        with session_scope(self._engine) as session:
            delete_secret_set(session, set_id)

    def rotate(self) -> int:
        """A new current key, every set re-sealed with it in one transaction, then the old keys
        dropped from the keyring; the number of sets re-sealed."""
        with _exclusive(self.path.with_name(self.path.name + ".lock")):
            old = self._refresh(force=True)
            staged = keyring.new_keyring(self._kms, keep=old.keys)
            self._write(staged)
            count = self._reseal_all(staged)
            self._write(Keyring(current=staged.current, kms=self._kms,
                                keys={staged.current: staged.keys[staged.current]}))  # fmt: skip
        return count

    # --- internals ---------------------------------------------------------------------------

    def _refresh(self, *, force: bool = False) -> Keyring:
        """The keyring as the file says now (decoded again only when its bytes changed)."""
        data = keyring.read_bytes(self.path)
        with self._lock:
            if self._ring is not None and data == self._raw and not force:
                return self._ring
        ring = keyring.decode(self.path, data)
        with self._lock:
            self._raw, self._ring = data, ring
        return ring

    def _write(self, ring: Keyring) -> None:
        data = keyring.write(self.path, ring)
        with self._lock:
            self._raw, self._ring = data, ring

    def _row(self, set_id: str) -> SecretSet:
        with session_scope(self._engine) as session:
            row = get_secret_set(session, set_id)
        if row is None:
            raise SecretSetNotFound(set_id)
        return row

    def _follow_rotation(self, set_id: str, used: str, plaintext: bytes) -> None:
        """Re-seal a just-stored set when a rotation began since its key was read."""
        for _ in range(_FOLLOW_ROTATIONS):
            ring = self._refresh()
            if ring.current == used:
                return
            nonce, blob = _seal(ring, set_id, plaintext)
            with session_scope(self._engine) as session:
                row = get_secret_set(session, set_id)
                if row is None or row.key_id == ring.current:
                    return
                row.key_id, row.nonce, row.ciphertext = ring.current, nonce, blob
                row.updated_at = self._clock.now()
            used = ring.current

    def _reseal_all(self, ring: Keyring) -> int:
        now = self._clock.now()
        with session_scope(self._engine) as session:
            rows = all_secret_sets(session, lock=True)
            for row in rows:
                key = ring.key(row.key_id)
                if key is None:
                    raise VaultError(
                        f"secret set {row.id}: sealed with key {row.key_id}, which is not in "
                        f"{self.path}; the rotation changed no set"
                    )
                row.nonce, row.ciphertext = _seal(ring, row.id, _open(key, row))
                row.key_id, row.updated_at = ring.current, now
        return len(rows)


def _plaintext(values: Mapping[str, SecretStr]) -> bytes:
    doc: dict[str, str] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise UserInputError(f"secrets: {name!r} is not an environment variable name")
        if not isinstance(value, SecretStr):
            raise TypeError(f"secrets.{name}: the value must be a pydantic SecretStr")
        doc[name] = value.get_secret_value()
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _seal(ring: Keyring, set_id: str, plaintext: bytes) -> tuple[bytes, bytes]:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce, AESGCM(ring.keys[ring.current]).encrypt(nonce, plaintext, set_id.encode())


def _open(key: bytes, row: SecretSet) -> bytes:
    try:
        return AESGCM(key).decrypt(row.nonce, row.ciphertext, row.id.encode())
    except InvalidTag:
        raise VaultError(
            f"secret set {row.id}: does not decrypt with key {row.key_id} (its blob belongs to "
            "another set, or was altered)"
        ) from None


def _values(set_id: str, plaintext: bytes) -> dict[str, SecretStr]:
    try:
        doc = json.loads(plaintext.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        doc = None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise VaultError(f"secret set {set_id}: not a set of names and values")
    return {str(name): SecretStr(value) for name, value in doc.items()}


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created 0600) for the block."""
    with open(path, "a") as handle:
        path.chmod(0o600)
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
