"""``python -m gpulease.server rotate-secrets-key`` (what ``gpulease server rotate-secrets-key``
runs): rotate the vault's key on this home's state DB and keyring, whether or not a server
runs (a running server's vault re-reads the keyring when it meets the new key id). The new
keyring is wrapped as the config's ``secrets`` section says, so this is also how a keyring gets
KMS-wrapped (or unwrapped). Prints how many sets were re-sealed; exit 0, 1 when the vault
cannot do it (the reason on stderr); a bad config raises ``UserInputError`` (exit 2 in main).
"""

from __future__ import annotations

import sys

from gpulease import config
from gpulease.server.vault import KEYRING_FILE, Vault, configured_kms
from gpulease.server.vault.errors import KmsUnavailable, VaultError
from gpulease.state import open_database


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
