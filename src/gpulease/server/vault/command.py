"""``python -m gpulease.server rotate-secrets-key`` (what ``gpulease server rotate-secrets-key``
runs): rotate the vault's key on this home's state DB and keyring, whether or not a server
runs (a running server's vault re-reads the keyring when it meets the new key id). The new
keyring is wrapped as the config's ``secrets`` section says, so this is also how a keyring gets
KMS-wrapped (or unwrapped). Prints how many sets were re-sealed; exit 0, 1 when the vault
cannot do it, 2 on bad input (a config field, the DB URL), with one line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from gpulease import config
from gpulease.errors import UserInputError
from gpulease.server.vault import KEYRING_FILE, Vault, configured_kms
from gpulease.server.vault.errors import KmsUnavailable, VaultError
from gpulease.state import open_database

BAD_INPUT = 2


def main(argv: list[str] | None = None) -> int:
    """``python -m gpulease.server rotate-secrets-key`` (what ``__main__`` runs for it)."""
    parser = argparse.ArgumentParser(prog="python -m gpulease.server rotate-secrets-key")
    parser.add_argument("command", choices=["rotate-secrets-key"])
    parser.add_argument("--log-level", default="WARNING")  # accepted as ``main``'s parser does
    parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return rotate_secrets_key()
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT


def rotate_secrets_key() -> int:
    home = config.home()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    kms = configured_kms(config.load_config())
    engine = open_database()
    try:
        vault = Vault(engine, home / KEYRING_FILE, kms)
        count = vault.rotate()
    except (VaultError, KmsUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    wrap = f", wrapped by {kms.where()}" if kms else ""
    print(f"re-encrypted {count} secret set(s) with the new key {vault.current_key_id}{wrap}")
    return 0
