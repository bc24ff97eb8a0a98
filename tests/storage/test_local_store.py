"""LocalStore: atomic upload, manifest last, verification, download, delete."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from gpulease.errors import Permanent, UserInputError
from gpulease.storage import (
    MANIFEST,
    CheckpointStore,
    LocalStore,
    entry_matches,
    file_digest,
    inspect_checkpoints,
    read_manifest,
    store_from_url,
    verify_dir,
)


def _src(tmp_path: Path, content: bytes = b"weights") -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "model.pt").write_bytes(content)
    (src / "optim.pt").write_bytes(b"optim" * 100)
    return src


def test_store_from_url(tmp_path: Path) -> None:
    store = store_from_url(f"local://{tmp_path}")
    assert isinstance(store, LocalStore)
    assert isinstance(store, CheckpointStore)
    assert store.root == tmp_path
    with pytest.raises(UserInputError, match="unknown scheme"):
        store_from_url("gs://bucket")
    with pytest.raises(UserInputError, match="no path"):
        store_from_url("local://")


def test_upload_list_download_delete(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "ckpt")
    assert store.list_complete() == []
    store.upload(10, _src(tmp_path, b"a"))
    store.upload(20, _src(tmp_path, b"b"))
    assert store.list_complete() == [10, 20]
    manifest = json.loads((store.path(20) / MANIFEST).read_text())
    assert manifest["step"] == 20
    assert set(manifest["files"]) == {"model.pt", "optim.pt"}
    assert manifest["files"]["model.pt"]["size"] == 1
    dest = tmp_path / "out"
    store.download(20, dest)
    assert (dest / "model.pt").read_bytes() == b"b"
    assert verify_dir(dest)
    store.delete(10)
    store.delete(10)
    assert store.list_complete() == [20]


def test_corrupt_and_partial_checkpoints_are_not_complete(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "ckpt")
    for step in (1, 2, 3, 4):
        store.upload(step, _src(tmp_path))
    (store.path(1) / MANIFEST).unlink()  # crashed before the manifest
    (store.path(2) / "model.pt").write_bytes(b"weighTs")  # bit flip, same size
    (store.path(3) / "optim.pt").write_bytes(b"short")  # truncated
    (store.path(4) / MANIFEST).write_text("{not json")
    (tmp_path / "ckpt" / "step-5").mkdir()  # empty directory
    assert store.list_complete() == []
    assert store.all_steps() == [1, 2, 3, 4, 5]
    with pytest.raises(Permanent, match="missing or corrupt"):
        store.download(2, tmp_path / "out")


def test_manifest_for_another_step_is_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "ckpt")
    store.upload(1, _src(tmp_path))
    store.path(1).rename(store.path(7))
    assert store.list_complete() == []


def test_write_from_memory_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.write(3, {"a.pt": b"1", "b.pt": b"22"})
    assert sorted(p.name for p in store.path(3).iterdir()) == ["a.pt", "b.pt", MANIFEST]
    assert store.list_complete() == [3]
    with pytest.raises(ValueError, match="bad checkpoint file name"):
        store.write(4, {"../x": b""})


def _tree(data: bytes) -> str:
    """The manifest checksum written out by hand: sha256 over the sha256s of 16 MiB blocks."""
    block = 16 << 20
    digests = b"".join(
        hashlib.sha256(data[i : i + block]).digest() for i in range(0, len(data), block)
    )
    return hashlib.sha256(digests).hexdigest()


def test_checksum_is_a_sha256_tree_over_blocks_and_version_1_still_verifies(
    tmp_path: Path,
) -> None:
    data = os.urandom((16 << 20) * 2 + 12345)  # two full blocks and a short one
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert file_digest(path) == (_tree(data), len(data))
    assert entry_matches(path, {"sha256_tree": _tree(data), "size": len(data)})
    assert entry_matches(path, {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)})
    assert not entry_matches(path, {"sha256": _tree(data), "size": len(data)})
    assert not entry_matches(path, {"sha256_tree": _tree(data), "size": len(data) + 1})
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert file_digest(empty) == (hashlib.sha256(b"").hexdigest(), 0)


def test_writer_streams_files_and_writes_the_manifest_from_their_digests(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    big = os.urandom(3 << 20)  # above the size hashed on the helper thread
    with store.writer(7, {"format": "test"}) as out:
        with out.open("big.bin") as handle:
            handle.write(big[: 1 << 20])
            handle.write(memoryview(big)[1 << 20 :])
        out.write_bytes(".metadata", b"dot names are data")
        assert read_manifest(store.path(7)) is None  # nothing is complete before the end
    manifest = read_manifest(store.path(7))
    assert manifest is not None and manifest["format"] == "test"
    assert manifest["files"]["big.bin"] == {
        "sha256_tree": _tree(big),
        "size": len(big),
    }
    assert (store.path(7) / "big.bin").read_bytes() == big
    assert store.list_complete() == [7]
    assert sorted(p.name for p in store.path(7).iterdir()) == [".metadata", "big.bin", MANIFEST]


def test_writer_failure_leaves_an_incomplete_step_without_temp_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with pytest.raises(RuntimeError), store.writer(3) as out:
        out.write_bytes("a.bin", b"complete file")
        with out.open("b.bin") as handle:
            handle.write(b"half")
            raise RuntimeError("killed mid-write")
    assert store.list_complete() == []
    assert sorted(p.name for p in store.path(3).iterdir()) == ["a.bin"]


def test_writer_transform_and_trailer_are_hashed_as_written(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with (
        store.writer(1) as out,
        out.open(
            "x.bin",
            header=b"HDR",
            transform=lambda chunk: bytes(chunk).upper(),
            trailer=lambda: b"!",
        ) as handle,
    ):
        handle.write(b"abc")
    assert (store.path(1) / "x.bin").read_bytes() == b"HDRABC!"
    assert verify_dir(store.path(1))


def test_upload_of_a_checkpoint_keeps_its_manifest_fields_and_sends_only_its_files(
    tmp_path: Path,
) -> None:
    src = LocalStore(tmp_path / "run")
    with src.writer(4, {"format": "dcp", "world_size": 2}) as out:
        out.write_bytes(".metadata", b"dcp")
        out.write_bytes("__0_0.distcp", b"shard")
    (src.path(4) / "stray.pt").write_bytes(b"not in the manifest")
    store = LocalStore(tmp_path / "store")
    store.upload(4, src.path(4))
    manifest, original = read_manifest(store.path(4)), read_manifest(src.path(4))
    assert manifest is not None and original is not None
    assert (manifest["format"], manifest["world_size"]) == ("dcp", 2)
    assert manifest["files"] == original["files"]
    assert sorted(p.name for p in store.path(4).iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        MANIFEST,
    ]
    info = {i.step: i for i in inspect_checkpoints(f"local://{store.root}")}[4]
    assert (info.status, info.format, info.world_size) == ("complete", "dcp", 2)


def test_upload_refuses_a_checkpoint_that_is_not_complete(tmp_path: Path) -> None:
    src = LocalStore(tmp_path / "run")
    src.write(5, {"a.pt": b"a", "b.pt": b"b"})
    store = LocalStore(tmp_path / "store")
    (src.path(5) / "b.pt").unlink()
    with pytest.raises(Permanent, match=r"b\.pt is missing"):
        store.upload(5, src.path(5))
    (src.path(5) / "b.pt").write_bytes(b"B")  # same size, other bytes
    with pytest.raises(Permanent, match=r"b\.pt does not match its manifest"):
        store.upload(5, src.path(5))
    assert store.all_steps() == []  # nothing left of either attempt
    with pytest.raises(UserInputError, match="already that step"):
        src.upload(5, src.path(5))


def test_total_bytes_counts_every_file_under_the_root_complete_or_not(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "ckpt")
    assert store.total_bytes() == 0  # no root yet
    store.write(1, {"model.pt": b"w" * 1000})
    complete = store.total_bytes()
    assert complete == 1000 + (store.path(1) / MANIFEST).stat().st_size
    (store.root / "step-2").mkdir()
    (store.root / "step-2" / "model.pt.tmp").write_bytes(b"x" * 77)  # an upload cut off
    (store.root / "notes.txt").write_bytes(b"n" * 5)  # not a checkpoint: still on the disk
    os.symlink(store.path(1) / "model.pt", store.root / "link.pt")  # a link: not counted again
    assert store.total_bytes() == complete + 77 + 5
    store.delete(1)
    assert store.total_bytes() == 77 + 5
