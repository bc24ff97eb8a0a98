"""The server's secrets on disk: created once, 0600 from the first byte, never half-written,
never replaced by a second writer."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from gpulease.atomic import is_temp_name
from gpulease.server.keys import KEY_FILE, TOKEN_FILE, api_token, server_key


def test_the_token_and_key_are_made_once_and_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    token = api_token(home).get_secret_value()
    key = server_key(home)
    assert api_token(home).get_secret_value() == token and server_key(home) == key
    assert len(key) == 32 and len(token) >= 32
    for name in (TOKEN_FILE, KEY_FILE):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert sorted(p.name for p in home.iterdir()) == sorted([TOKEN_FILE, KEY_FILE])


def test_a_key_that_begins_or_ends_with_whitespace_bytes_is_read_whole(tmp_path: Path) -> None:
    """The key is 32 random bytes: about one in twenty begins or ends with a byte such as
    ``\\n`` or ``\\x0b``, and reading it must keep them (stripping once cost CI a flaky run)."""
    raw = b"\n\x0b" + bytes(range(100, 128)) + b" \t"
    (tmp_path / KEY_FILE).write_bytes(raw)
    (tmp_path / KEY_FILE).chmod(0o600)
    assert server_key(tmp_path) == raw


def test_racing_creators_agree_on_one_token(tmp_path: Path) -> None:
    """Every creator writes its own temp and links it in only if there is no file yet: all of
    them then read the one that won, and no temp is left."""
    seen: list[str] = []
    start = threading.Barrier(8)

    def create() -> None:
        start.wait()
        seen.append(api_token(tmp_path).get_secret_value())

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and len(set(seen)) == 1
    assert not [p for p in tmp_path.iterdir() if is_temp_name(p.name)]
