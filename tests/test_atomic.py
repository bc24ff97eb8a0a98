"""gpulease.atomic on a real directory: content replaced whole, the old file intact and no temp
left after any failure (an exception from the producer, Ctrl-C, a write the kernel refuses),
the mode right from the temp file's creation, the file and then its directory fsynced."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease import atomic
from gpulease.atomic import (
    AtomicFile,
    atomic_file,
    is_temp_name,
    temp_path,
    write_atomic,
    write_json_atomic,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if is_temp_name(p.name))


@pytest.fixture
def umask() -> Iterator[None]:
    """Umask 022 for the test (restored after)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_content_is_replaced_and_nothing_else_is_left(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    write_atomic(target, b"old")
    write_atomic(target, "néw\n")
    assert target.read_bytes() == "néw\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    write_json_atomic(target, {"a": [1, 2]}, indent=1)
    assert json.loads(target.read_text()) == {"a": [1, 2]}
    assert target.read_text().endswith("}\n")


def _rows() -> Iterator[str]:
    yield "a,b\n"
    yield "1,2\n"
    raise RuntimeError("the producer failed half-way")


def test_an_exception_from_the_producer_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "offers.csv"
    target.write_text("old\n")
    seen: list[str] = []
    with pytest.raises(RuntimeError, match="half-way"), atomic_file(target, text=True) as fh:
        for row in _rows():
            fh.write(row)
            fh.flush()
            seen = _temps(tmp_path)
    assert len(seen) == 1  # the temp existed beside the target while it was written
    assert target.read_text() == "old\n"
    assert _temps(tmp_path) == []


def test_an_interrupt_mid_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_file(target) as fh:
        fh.write(b"new, but only half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert _temps(tmp_path) == []


def test_a_write_the_kernel_refuses_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    """A real failing write (EFBIG under RLIMIT_FSIZE, as a full disk fails a write) in a child
    process, so the limit binds nothing else."""
    target = tmp_path / "big.bin"
    target.write_bytes(b"old")
    code = textwrap.dedent(f"""
        import errno, resource, signal, sys
        from gpulease.atomic import write_atomic
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            write_atomic({str(target)!r}, b"x" * (1 << 20))
        except OSError as exc:
            sys.exit(0 if exc.errno == errno.EFBIG else 3)
        sys.exit(4)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"old"
    assert _temps(tmp_path) == []


@pytest.mark.usefixtures("umask")
def test_a_given_mode_holds_from_the_temps_creation(tmp_path: Path) -> None:
    target = tmp_path / "server.token"
    with atomic_file(target, mode=0o600) as fh:
        fh.write(b"secret")
        fh.flush()
        (temp,) = _temps(tmp_path)
        assert _mode(tmp_path / temp) == 0o600  # while the secret is being written
    assert _mode(target) == 0o600
    write_atomic(tmp_path / "run.sh", "#!/bin/sh\n", mode=0o750)
    assert _mode(tmp_path / "run.sh") == 0o750


@pytest.mark.usefixtures("umask")
def test_without_a_mode_the_file_gets_what_open_would_give(tmp_path: Path) -> None:
    write_atomic(tmp_path / "a", b"x")
    with open(tmp_path / "b", "wb") as fh:
        fh.write(b"x")
    assert _mode(tmp_path / "a") == _mode(tmp_path / "b") == 0o644


def test_exclusive_creates_once_and_never_replaces(tmp_path: Path) -> None:
    target = tmp_path / "server.key"
    write_atomic(target, b"first", mode=0o600, exclusive=True)
    with pytest.raises(FileExistsError):
        write_atomic(target, b"second", mode=0o600, exclusive=True)
    assert target.read_bytes() == b"first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.key"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name an fd")
def test_the_file_then_its_directory_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spy on ``os.fsync`` (the real one still runs) records what each fsync was of."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    target = tmp_path / "heartbeat"
    write_atomic(target, "1.0\n")
    assert len(synced) == 2
    assert is_temp_name(Path(synced[0]).name) and Path(synced[0]).parent == tmp_path
    assert synced[1] == str(tmp_path)
    synced.clear()
    with atomic_file(target) as fh:
        fh.write(b"2.0\n")
    assert synced[1] == str(tmp_path)


def test_a_write_that_need_not_be_durable_skips_the_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    write_atomic(tmp_path / "heartbeat", "1.0\n", durable=False)
    write_atomic(tmp_path / "heartbeat", "2.0\n", durable=False)
    assert (tmp_path / "heartbeat").read_text() == "2.0\n"
    assert synced == [] and _temps(tmp_path) == []


def test_an_atomic_file_object_commits_once_or_aborts(tmp_path: Path) -> None:
    target = tmp_path / "b.pt"
    out = AtomicFile(target)
    out.file.write(b"half")
    out.abort()
    assert list(tmp_path.iterdir()) == []
    out = AtomicFile(target)
    out.file.write(b"whole")
    out.commit(sync_dir=False)
    assert target.read_bytes() == b"whole"
    with pytest.raises(ValueError, match="already finished"):
        out.commit()


def test_text_mode_keeps_the_newline_it_is_given(tmp_path: Path) -> None:
    with atomic_file(tmp_path / "x.csv", text=True, newline="") as fh:
        fh.write("a\r\nb\n")
    assert (tmp_path / "x.csv").read_bytes() == b"a\r\nb\n"


_NAMES = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    min_size=1,
    max_size=255,
).filter(lambda s: s not in {".", ".."} and len(s.encode()) <= 255)


@given(_NAMES)
def test_temp_names_are_recognised_and_fit_a_directory_entry(name: str) -> None:
    temp = temp_path(Path("/d") / name)
    assert temp.parent == Path("/d")
    assert is_temp_name(temp.name)
    assert len(os.fsencode(temp.name)) <= 255  # NAME_MAX, however long the name in bytes


@pytest.mark.parametrize("name", [".metadata", "x.tmp", ".b.pt.tmp-12", "a.tmp-1-deadbeef"])
def test_other_names_are_not_temp_names(name: str) -> None:
    assert not is_temp_name(name)
