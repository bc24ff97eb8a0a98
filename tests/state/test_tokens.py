"""Agent tokens: random, returned as a secret, stored and compared only as a sha256 hash."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from pydantic import SecretStr

from gpulease.state import hash_token, new_token, verify_token
from gpulease.state import tokens as tokens_module


def test_new_tokens_are_random_and_come_with_their_sha256() -> None:
    seen = set()
    for _ in range(50):
        token, digest = new_token()
        plain = token.get_secret_value()
        assert len(plain) >= 43  # 32 random bytes, URL-safe base64
        assert digest == hashlib.sha256(plain.encode()).hexdigest()
        seen.add(plain)
    assert len(seen) == 50


def test_the_token_never_shows_in_its_repr_or_str() -> None:
    token, _ = new_token()
    assert token.get_secret_value() not in repr(token)
    assert token.get_secret_value() not in str(token)
    assert f"{token}" == "**********"


def test_verify_accepts_the_token_and_refuses_anything_else() -> None:
    token, digest = new_token()
    assert verify_token(token, digest)
    assert verify_token(token.get_secret_value(), digest)
    assert not verify_token(token.get_secret_value() + "x", digest)
    assert not verify_token("", digest)
    assert not verify_token("é-not-ascii", digest)
    assert not verify_token(token, None)
    assert not verify_token(token, "")
    assert hash_token(SecretStr("abc")) == hash_token("abc")


def test_verify_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens_module.hmac, "compare_digest", spy)
    token, digest = new_token()
    assert verify_token(token, digest)
    assert len(calls) == 1
