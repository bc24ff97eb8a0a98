"""Optional AES-256-GCM encryption of checkpoint files (key from ``$GPULEASE_CHECKPOINT_KEY``).

The key is 64 hex characters or the base64 of 32 bytes. An encrypted file is
``b"GLENC1" + nonce(12) + ciphertext+tag``; the file name is bound as associated data, so files
cannot be swapped between names without detection.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable

from gpulease.errors import Permanent, UserInputError

MAGIC = b"GLENC1"
_NONCE = 12


def parse_key(text: str) -> bytes:
    """Decode a 32-byte key from 64 hex characters or base64; raise ``UserInputError`` if bad."""
    text = text.strip()
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == 32:
        return raw
    raise UserInputError(
        "encrypt_key / GPULEASE_CHECKPOINT_KEY must be 64 hex characters or base64 of 32 bytes"
    )


def encrypt(key: bytes, name: str, data: bytes) -> bytes:
    """Encrypt ``data`` for file ``name``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(_NONCE)
    return MAGIC + nonce + AESGCM(key).encrypt(nonce, data, name.encode())


def stream_encryptor(
    key: bytes, name: str
) -> tuple[bytes, Callable[[bytes | memoryview], bytes], Callable[[], bytes]]:
    """Encrypt file ``name`` while it is written: ``(header, update, finish)``.

    Writing ``header``, then ``update(chunk)`` for every chunk, then ``finish()`` produces the same
    format as :func:`encrypt` (AES-GCM's ciphertext followed by its 16-byte tag).
    """
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    nonce = os.urandom(_NONCE)
    encryptor = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()
    encryptor.authenticate_additional_data(name.encode())

    def finish() -> bytes:
        return encryptor.finalize() + encryptor.tag

    return MAGIC + nonce, encryptor.update, finish


def decrypt(key: bytes | None, name: str, blob: bytes) -> bytes:
    """Decrypt ``blob`` for file ``name``; plain blobs pass through only without a key."""
    if not blob.startswith(MAGIC):
        if key is not None:
            raise Permanent(f"checkpoint file {name} is not encrypted but a key was given")
        return blob
    if key is None:
        raise Permanent(f"checkpoint file {name} is encrypted; set GPULEASE_CHECKPOINT_KEY")
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = blob[len(MAGIC) : len(MAGIC) + _NONCE]
    try:
        return AESGCM(key).decrypt(nonce, blob[len(MAGIC) + _NONCE :], name.encode())
    except InvalidTag:
        raise Permanent(f"checkpoint file {name}: wrong key or tampered data") from None
