"""The vault's keyring wrapped by a KMS key on a real moto server: the file holds only KMS
ciphertext (without KMS it cannot be opened, and no key in it opens a set), sets round-trip
through it, a rotation re-wraps a raw keyring, a KMS that cannot be reached is a clear error,
and a bad ``secrets`` section names its field."""

from __future__ import annotations

import base64
import json
import secrets
import socket
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.config import SecretsSettings, secrets_settings
from gpulease.errors import UserInputError
from gpulease.server.vault import KEYRING_FILE, KmsUnavailable, open_vault
from gpulease.state import session_scope
from gpulease.state.secret_sets import SecretSet
from tests.awsfixtures import REGION, aws_client


@pytest.fixture
def kms_key(aws_env: str) -> str:
    made = aws_client("kms", aws_env).create_key(Description="gpulease vault test")
    return str(made["KeyMetadata"]["KeyId"])


def _config(key: str) -> dict[str, Any]:
    return {"secrets": {"kms_key_id": key, "region": REGION}}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ON_SQLITE = pytest.mark.parametrize("db_kind", ["sqlite"])  # the wrap is the same on either DB


@ON_SQLITE
def test_a_kms_wrapped_keyring_holds_no_raw_key_and_round_trips(
    engine: Engine, tmp_path: Path, kms_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, canary = tmp_path / "home", secrets.token_hex(16)
    vault = open_vault(home, engine, _config(kms_key))
    set_id = vault.store({"WANDB_API_KEY": SecretStr(canary)})
    assert vault.load(set_id)["WANDB_API_KEY"].get_secret_value() == canary
    ring = json.loads((home / KEYRING_FILE).read_text())
    assert ring["kms"] == {"key_id": kms_key, "region": REGION}
    with session_scope(engine) as session:
        row = session.get(SecretSet, set_id)
        assert row is not None
    for stored in ring["keys"].values():  # KMS ciphertext: no 32-byte key, none opens the set
        blob = base64.b64decode(stored)
        assert len(blob) != 32
        with pytest.raises((InvalidTag, ValueError)):
            AESGCM(blob[:32]).decrypt(row.nonce, row.ciphertext, set_id.encode())
    assert open_vault(home, engine, _config(kms_key)).load(set_id)["WANDB_API_KEY"] == SecretStr(
        canary
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(KmsUnavailable, match=f"KMS key {kms_key} \\({REGION}\\): Decrypt failed"):
        open_vault(home, engine, _config(kms_key))


@ON_SQLITE
def test_a_raw_keyring_is_refused_until_a_rotation_wraps_it(
    engine: Engine, tmp_path: Path, kms_key: str
) -> None:
    home, canary = tmp_path / "home", secrets.token_hex(16)
    raw = open_vault(home, engine, {})
    set_id = raw.store({"A": SecretStr(canary)})
    with pytest.raises(UserInputError, match=r"is not wrapped by KMS.*rotate-secrets-key"):
        open_vault(home, engine, _config(kms_key))
    from gpulease.server.vault import Vault, configured_kms

    rotating = Vault(engine, home / KEYRING_FILE, configured_kms(_config(kms_key)))
    assert rotating.rotate() == 1
    wrapped = open_vault(home, engine, _config(kms_key))
    assert wrapped.load(set_id)["A"].get_secret_value() == canary
    assert raw.load(set_id)["A"].get_secret_value() == canary  # re-reads the new file via KMS
    with pytest.raises(UserInputError, match=f"is wrapped by KMS key {kms_key}"):
        open_vault(home, engine, {})


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("not-a-mapping", "secrets:"),
        ({"kms_key": "k"}, "secrets.kms_key: unknown field"),
        ({"kms_key_id": ""}, "secrets.kms_key_id:"),
        ({"kms_key_id": 7}, "secrets.kms_key_id:"),
        ({"kms_key_id": "k", "region": "mars"}, "secrets.region:"),
        ({"region": REGION}, "secrets.region: only with secrets.kms_key_id"),
    ],
)
def test_a_bad_secrets_section_names_the_field(section: object, field: str) -> None:
    with pytest.raises(UserInputError, match=field.replace(".", r"\.")):
        secrets_settings({"secrets": section})


def test_a_good_secrets_section() -> None:
    assert secrets_settings({}) == SecretsSettings()
    assert secrets_settings({"secrets": {"kms_key_id": " alias/g ", "region": "eu-west-1"}}) == (
        SecretsSettings(kms_key_id="alias/g", region="eu-west-1")
    )
