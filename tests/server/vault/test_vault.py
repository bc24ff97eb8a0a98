"""The server's vault on a real SQLite file and a real PostgreSQL server: sets round-trip as
SecretStr, the DB file, its WAL and a ``pg_dump`` hold no canary, a blob moved to another row
does not decrypt, rotation re-seals every set under a new key (old key gone, values intact, a
vault opened before it still reads), and ``gpulease server rotate-secrets-key`` does it from
the CLI."""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine, text, update

from gpulease.errors import UserInputError
from gpulease.server.vault import KEYRING_FILE, SecretSetNotFound, Vault, VaultError, open_vault
from gpulease.state import session_scope
from gpulease.state.secret_sets import SecretSet, get_secret_set
from tests.state.postgres import PostgresServer
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]


def _canary() -> str:
    return secrets.token_hex(16)


def _hits(data: bytes, canary: str) -> bool:
    """Whether ``data`` holds the canary as text or as hex (how a bytea column is dumped)."""
    return canary.encode() in data or canary.encode().hex().encode() in data


def _rows(engine: Engine) -> list[SecretSet]:
    with session_scope(engine) as session:
        return list(session.query(SecretSet).all())


def test_a_set_round_trips_as_secret_str_and_nothing_logs_it(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    canary = _canary()
    vault = open_vault(tmp_path / "home", engine, {})
    set_id = vault.store({"HF_TOKEN": SecretStr(canary), "EMPTY": SecretStr("")})
    loaded = vault.load(set_id)
    assert set_id.startswith("ss-") and len(set_id) == 35
    assert {k: v.get_secret_value() for k, v in loaded.items()} == {"HF_TOKEN": canary, "EMPTY": ""}
    assert all(isinstance(v, SecretStr) for v in loaded.values()) and canary not in repr(loaded)
    (row,) = _rows(engine)
    assert (row.id, row.key_id, len(row.nonce)) == (set_id, vault.current_key_id, 12)
    assert not _hits(row.ciphertext, canary)
    vault.delete(set_id)
    vault.delete(set_id)  # twice: nothing to do
    with pytest.raises(SecretSetNotFound, match=set_id):
        vault.load(set_id)
    with pytest.raises(UserInputError, match="'BAD-NAME'"):
        vault.store({"BAD-NAME": SecretStr(canary)})
    assert canary not in caplog.text and canary not in repr(vault)


def test_the_db_file_its_wal_and_a_pg_dump_hold_no_canary(
    engine: Engine, db_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    canaries = [_canary() for _ in range(3)]
    vault = open_vault(tmp_path / "home", engine, {})
    ids = [vault.store({f"K{i}": SecretStr(c)}) for i, c in enumerate(canaries)]
    vault.rotate()  # the re-sealed rows, and the old ones in the WAL, are searched as well
    assert [vault.load(i)[f"K{n}"].get_secret_value() for n, i in enumerate(ids)] == canaries
    if db_kind == "sqlite":
        db = Path(str(engine.url.database))
        wal = db.with_name(db.name + "-wal")
        assert wal.stat().st_size > 0  # the connection is still open: the writes are in it
        dumps = [db.read_bytes(), wal.read_bytes()]
        engine.dispose()  # the last connection checkpoints the WAL into the file
        dumps.append(db.read_bytes())
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        dumped = server._run("pg_dump", "-h", "127.0.0.1", "-p", str(server.port), "-U",
                             "gpulease", str(engine.url.database))  # fmt: skip
        assert dumped.returncode == 0, dumped.stderr
        assert "secret_sets" in dumped.stdout and ids[0] in dumped.stdout
        dumps = [dumped.stdout.encode()]
    keyring = (tmp_path / "home" / KEYRING_FILE).read_bytes()
    for canary in canaries:
        assert not any(_hits(data, canary) for data in [*dumps, keyring])


def test_a_blob_moved_to_another_row_does_not_decrypt(engine: Engine, tmp_path: Path) -> None:
    canary = _canary()
    vault = open_vault(tmp_path / "home", engine, {})
    source, target = vault.store({"A": SecretStr(canary)}), vault.store({"A": SecretStr("b")})
    with session_scope(engine) as session:
        row = get_secret_set(session, source)
        assert row is not None
        moved = {"nonce": row.nonce, "ciphertext": row.ciphertext, "key_id": row.key_id}
        session.execute(update(SecretSet).where(SecretSet.id == target).values(**moved))
    with pytest.raises(VaultError, match=f"secret set {target}: does not decrypt") as caught:
        vault.load(target)
    assert canary not in str(caught.value)
    assert vault.load(source)["A"].get_secret_value() == canary


def test_rotation_reseals_every_set_and_a_vault_opened_before_still_reads(
    engine: Engine, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    first, other = open_vault(home, engine, {}), open_vault(home, engine, {})
    canaries = {f"S{i}": _canary() for i in range(3)}
    ids = {name: first.store({name: SecretStr(value)}) for name, value in canaries.items()}
    old_key = first.current_key_id
    assert other.current_key_id == old_key  # both hold the old keyring in memory

    assert first.rotate() == 3
    new_key = first.current_key_id
    ring = json.loads((home / KEYRING_FILE).read_text())
    assert new_key != old_key and ring["current"] == new_key and list(ring["keys"]) == [new_key]
    assert {row.key_id for row in _rows(engine)} == {new_key}
    for name, set_id in ids.items():  # the vault opened before the rotation reads the new key
        assert other.load(set_id)[name].get_secret_value() == canaries[name]
    later = other.store({"LATER": SecretStr("x")})  # and seals with the new key
    assert {row.key_id for row in _rows(engine) if row.id == later} == {new_key}
    assert stat.S_IMODE((home / KEYRING_FILE).stat().st_mode) == 0o600
    assert open_vault(home, engine, {}).rotate() == 4


def test_a_set_under_a_key_the_keyring_lacks_stops_the_rotation(
    engine: Engine, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    vault = open_vault(home, engine, {})
    set_id = vault.store({"A": SecretStr(_canary())})
    with session_scope(engine) as session:
        session.execute(update(SecretSet).where(SecretSet.id == set_id).values(key_id="k-gone"))
    with pytest.raises(VaultError, match=f"secret set {set_id}: sealed with key k-gone"):
        vault.rotate()
    with pytest.raises(VaultError, match="k-gone, which is not in"):
        vault.load(set_id)
    assert {row.key_id for row in _rows(engine)} == {"k-gone"}  # the transaction changed none


def test_two_vaults_on_one_home_share_one_keyring(engine: Engine, tmp_path: Path) -> None:
    home = tmp_path / "home"
    vaults = [Vault(engine, home / KEYRING_FILE) for _ in range(2)]
    set_id = vaults[0].store({"A": SecretStr("a")})
    assert vaults[1].load(set_id)["A"].get_secret_value() == "a"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


@pytest.mark.parametrize("db_kind", ["sqlite"])
def test_the_cli_rotates_and_names_a_bad_config_field(db_kind: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "GPULEASE_HOME": str(home)}
    env.pop("GPULEASE_DB_URL", None)

    def cli() -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gpulease", "server", "rotate-secrets-key"]
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip

    from gpulease.state import open_database

    canary = _canary()
    db = open_database(f"sqlite:///{home / 'state.db'}")
    vault = open_vault(home, db, {})
    set_id, old_key = vault.store({"A": SecretStr(canary)}), vault.current_key_id
    done = cli()
    assert done.returncode == 0, done.stderr
    assert "re-encrypted 1 secret set(s) with the new key" in done.stdout
    assert old_key not in (home / KEYRING_FILE).read_text()
    assert vault.load(set_id)["A"].get_secret_value() == canary
    assert canary not in done.stdout + done.stderr
    db.dispose()
    (home / "config.yaml").write_text("secrets: {kms_key_id: alias/k, regoin: us-east-1}\n")
    bad = cli()
    assert bad.returncode == 2 and "secrets.regoin: unknown field" in bad.stderr


def _in_function(thread: threading.Thread, name: str) -> bool:
    """Whether ``thread`` is now running inside the function ``name`` (its frame stack)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


@contextmanager
def _inserts_held(engine: Engine, db_kind: str) -> Iterator[None]:
    """Hold back every insert into ``secret_sets`` (reads and ``SELECT … FOR UPDATE`` go on)."""
    with engine.connect() as conn:
        if db_kind == "sqlite":
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # the one writer lock of the file
        else:
            conn.begin()
            conn.execute(text("LOCK TABLE secret_sets IN SHARE MODE"))
        try:
            yield
        finally:
            conn.exec_driver_sql("ROLLBACK") if db_kind == "sqlite" else conn.rollback()


def test_a_store_that_sealed_before_a_rotation_reseals_its_row_after(
    engine: Engine, db_kind: str, tmp_path: Path
) -> None:
    """The race rotation must survive: another vault read the old keyring, sealed a set with
    the old key, and its insert lands after the rotation re-sealed every row and dropped the old
    key. The store notices the keyring changed and re-seals its own row with the new key."""
    home, canary = tmp_path / "home", _canary()
    rotating, storing = open_vault(home, engine, {}), open_vault(home, engine, {})
    old_key, stored = storing.current_key_id, []
    with _inserts_held(engine, db_kind):
        thread = threading.Thread(
            target=lambda: stored.append(storing.store({"A": SecretStr(canary)}))
        )
        thread.start()
        wait_until(lambda: _in_function(thread, "add_secret_set"), 30, "the insert to wait")
        assert rotating.rotate() == 0  # the row is not in yet; the old key is dropped
    thread.join(30)
    (set_id,) = stored
    new_key = rotating.current_key_id
    assert new_key != old_key and [r.key_id for r in _rows(engine)] == [new_key]
    assert open_vault(home, engine, {}).load(set_id)["A"].get_secret_value() == canary
