"""S3Store against a real moto server process: layout, manifest last, verification, multipart,
replacement, deletion, prefixes, SSE-KMS, URL parsing and errors."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease.errors import Permanent, UserInputError
from gpulease.storage import (
    MANIFEST,
    CheckpointStore,
    LocalStore,
    S3Store,
    store_from_url,
    verify_dir,
    write_manifest,
)
from gpulease.storage.s3 import MIB
from tests.awsfixtures import aws_client, fresh_default_session

Calls = list[tuple[str, str]]


def _src(tmp_path: Path, files: dict[str, bytes] | None = None, name: str = "src") -> Path:
    src = tmp_path / name
    src.mkdir(exist_ok=True)
    for path in src.iterdir():
        path.unlink()
    for file, data in (files or {"model.pt": b"weights", "optim.pt": b"optim" * 100}).items():
        (src / file).write_bytes(data)
    return src


def _keys(bucket: str, endpoint: str, prefix: str = "") -> set[str]:
    s3 = aws_client("s3", endpoint)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {obj["Key"] for page in pages for obj in page.get("Contents", [])}


def _record(store: S3Store, fail: Callable[[str, dict[str, Any]], None] | None = None) -> Calls:
    """Record (operation, key) of every S3 call the store makes; ``fail`` may raise to inject."""
    calls: Calls = []

    def before(model: Any, params: dict[str, Any], **_: Any) -> None:
        calls.append((model.name, params.get("Key", "")))
        if fail is not None:
            fail(model.name, params)

    store.client.meta.events.register("before-parameter-build.s3", before)
    return calls


def _no_copy_left(dest: Path) -> None:
    assert not (dest / MANIFEST).exists()
    assert not verify_dir(dest)
    leftovers = [p.name for p in dest.iterdir()] if dest.exists() else []
    assert leftovers == []


# -- round trip and layout ----------------------------------------------------------------


def test_round_trip_is_byte_exact_with_a_verified_manifest(
    s3_env: str, aws_env: str, tmp_path: Path
) -> None:
    files = {"model.pt": os.urandom(100_000), "optim.pt": b"o" * 7, ".metadata": b"dcp"}
    src = _src(tmp_path, files)
    (src / MANIFEST).write_text("stale local manifest: never uploaded as data")
    store = S3Store(s3_env, "runs/ckpt")
    assert isinstance(store, CheckpointStore)
    assert store.list_complete() == []
    calls = _record(store)
    store.upload(3, src)

    assert _keys(s3_env, aws_env) == {f"runs/ckpt/step-3/{n}" for n in [*files, MANIFEST]}
    assert calls[0] == ("DeleteObject", "runs/ckpt/step-3/manifest.json")  # old manifest first
    assert calls[-1] == ("PutObject", "runs/ckpt/step-3/manifest.json")  # new manifest last
    assert store.list_complete() == [3]

    dest = tmp_path / "out" / "step-3"
    store.download(3, dest)
    for name, data in files.items():
        assert (dest / name).read_bytes() == data
    assert verify_dir(dest)
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest == {
        "version": 2,
        "step": 3,
        "checksum": "sha256-tree-16MiB",
        "files": {n: {"sha256_tree": hashlib.sha256(hashlib.sha256(d).digest()).hexdigest(),
                      "size": len(d)} for n, d in files.items()},  # one block per small file
    }  # fmt: skip
    assert LocalStore(tmp_path / "out").list_complete() == [3]


def test_extra_fields_of_the_source_manifest_are_kept(s3_env: str, tmp_path: Path) -> None:
    src = _src(tmp_path, {"model.pt": b"m"})
    write_manifest(src, 6, ["model.pt"], {"world_size": 4})
    store = S3Store(s3_env, "ck")
    store.upload(6, src)
    store.upload(7, src)  # a manifest of another step: nothing carried
    for step, extra in ((6, {"world_size": 4}), (7, {})):
        dest = tmp_path / f"out-{step}"
        store.download(step, dest)
        manifest = json.loads((dest / MANIFEST).read_text())
        assert set(manifest["files"]) == {"model.pt"}
        core = {"version", "step", "checksum", "files"}
        assert {k: v for k, v in manifest.items() if k not in core} == extra


def test_objects_carry_a_sha256_checksum(s3_env: str, aws_env: str, tmp_path: Path) -> None:
    store = S3Store(s3_env, "ck")
    store.upload(1, _src(tmp_path, {"model.pt": b"hello"}))
    head = aws_client("s3", aws_env).head_object(
        Bucket=s3_env, Key="ck/step-1/model.pt", ChecksumMode="ENABLED"
    )
    assert head["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"hello").digest()).decode()


def test_big_files_go_up_in_parts(s3_env: str, aws_env: str, tmp_path: Path) -> None:
    big = os.urandom(12 * MIB)
    src = _src(tmp_path, {"big.pt": big, "small.pt": b"s"})
    store = S3Store(s3_env, "mp", multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    calls = _record(store)
    store.upload(7, src)
    s3 = aws_client("s3", aws_env)
    assert s3.head_object(Bucket=s3_env, Key="mp/step-7/big.pt")["ETag"].endswith('-3"')
    assert "-" not in s3.head_object(Bucket=s3_env, Key="mp/step-7/small.pt")["ETag"]
    operations = [op for op, _ in calls]
    assert operations.count("UploadPart") == 3
    assert operations.count("CompleteMultipartUpload") == 1
    assert calls[-1] == ("PutObject", "mp/step-7/manifest.json")

    dest = tmp_path / "out"
    store.download(7, dest)
    assert (dest / "big.pt").read_bytes() == big
    assert verify_dir(dest)


# -- what is not complete -----------------------------------------------------------------


def _break(kind: str, bucket: str, endpoint: str) -> None:
    """Damage step 2 of prefix ``ck`` the way ``kind`` says, straight through boto3."""
    s3 = aws_client("s3", endpoint)
    key = "ck/step-2/"
    if kind == "no manifest":
        s3.delete_object(Bucket=bucket, Key=key + MANIFEST)
    elif kind == "manifest of another step":
        other = s3.get_object(Bucket=bucket, Key="ck/step-1/" + MANIFEST)["Body"].read()
        s3.put_object(Bucket=bucket, Key=key + MANIFEST, Body=other)
    elif kind == "malformed manifest":
        s3.put_object(Bucket=bucket, Key=key + MANIFEST, Body=b"{not json")
    elif kind == "manifest escaping the step":
        body = {"version": 1, "step": 2, "files": {"../x": {"sha256": "0" * 64, "size": 1}}}
        s3.put_object(Bucket=bucket, Key=key + MANIFEST, Body=json.dumps(body).encode())
    elif kind == "missing object":
        s3.delete_object(Bucket=bucket, Key=key + "optim.pt")
    elif kind == "truncated object":
        s3.put_object(Bucket=bucket, Key=key + "optim.pt", Body=b"short")
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "no manifest",
        "manifest of another step",
        "malformed manifest",
        "manifest escaping the step",
        "missing object",
        "truncated object",
    ],
)
def test_incomplete_steps_are_neither_listed_nor_downloaded(
    kind: str, s3_env: str, aws_env: str, tmp_path: Path
) -> None:
    store = S3Store(s3_env, "ck")
    store.upload(1, _src(tmp_path))
    store.upload(2, _src(tmp_path))
    _break(kind, s3_env, aws_env)
    assert store.list_complete() == [1]
    dest = tmp_path / "out"
    with pytest.raises(Permanent, match="step 2"):
        store.download(2, dest)
    _no_copy_left(dest)


def test_same_size_corruption_fails_the_download(s3_env: str, aws_env: str, tmp_path: Path) -> None:
    store = S3Store(s3_env, "ck")
    store.upload(2, _src(tmp_path, {"a.pt": b"first", "model.pt": b"weights", "z.pt": b"last"}))
    aws_client("s3", aws_env).put_object(Bucket=s3_env, Key="ck/step-2/model.pt", Body=b"weighTs")
    assert store.list_complete() == [2]  # the listing checks sizes only: cheap
    dest = tmp_path / "out"
    (dest).mkdir()
    (dest / MANIFEST).write_text("an older manifest")
    with pytest.raises(Permanent, match=r"model\.pt does not match its manifest"):
        store.download(2, dest)
    _no_copy_left(dest)


def test_a_failed_replacement_leaves_the_step_incomplete(s3_env: str, tmp_path: Path) -> None:
    store = S3Store(s3_env, "ck")
    store.upload(4, _src(tmp_path, {"a.pt": b"old a", "b.pt": b"old b"}))

    def fail_on_b(operation: str, params: dict[str, Any]) -> None:
        if operation == "PutObject" and params["Key"].endswith("/b.pt"):
            raise RuntimeError("network gone")

    _record(store, fail_on_b)
    with pytest.raises(RuntimeError, match="network gone"):
        store.upload(4, _src(tmp_path, {"a.pt": b"new a", "b.pt": b"new b"}))
    assert store.list_complete() == []


# -- replace, delete, prefixes ------------------------------------------------------------


def test_reupload_replaces_the_step(s3_env: str, aws_env: str, tmp_path: Path) -> None:
    store = S3Store(s3_env, "ck")
    store.upload(5, _src(tmp_path, {"a.pt": b"old", "b.pt": b"gone"}))
    store.upload(5, _src(tmp_path, {"a.pt": b"new", "c.pt": b"added"}))
    assert _keys(s3_env, aws_env) == {f"ck/step-5/{n}" for n in ("a.pt", "c.pt", MANIFEST)}
    assert store.list_complete() == [5]
    dest = tmp_path / "out"
    store.download(5, dest)
    assert (dest / "a.pt").read_bytes() == b"new"
    assert not (dest / "b.pt").exists()


def test_delete_removes_the_manifest_first(s3_env: str, aws_env: str, tmp_path: Path) -> None:
    store = S3Store(s3_env, "ck")
    store.upload(1, _src(tmp_path))
    store.upload(2, _src(tmp_path))
    calls = _record(store)
    store.delete(1)
    assert calls[0] == ("DeleteObject", "ck/step-1/manifest.json")
    assert calls[-1][0] == "DeleteObjects"
    assert store.list_complete() == [2]
    assert not _keys(s3_env, aws_env, "ck/step-1/")
    store.delete(1)  # absent: no error
    store.delete(99)
    assert store.list_complete() == [2]


def test_prefixes_are_isolated(s3_env: str, tmp_path: Path) -> None:
    stores = {p: S3Store(s3_env, p) for p in ("a", "ab", "a/b", "")}
    for step, store in enumerate(stores.values(), start=1):
        store.upload(step, _src(tmp_path))
    assert {p: s.list_complete() for p, s in stores.items()} == {
        "a": [1],
        "ab": [2],
        "a/b": [3],
        "": [4],
    }
    stores["a"].delete(1)
    stores["ab"].delete(3)  # another prefix's step: nothing to delete here
    assert [s.list_complete() for s in stores.values()] == [[], [2], [3], [4]]


def test_empty_prefix_puts_steps_at_the_bucket_root(
    s3_env: str, aws_env: str, tmp_path: Path
) -> None:
    store = store_from_url(f"s3://{s3_env}/")
    assert isinstance(store, S3Store)
    assert store.prefix == ""
    assert store.url == f"s3://{s3_env}"
    store.upload(8, _src(tmp_path, {"m.pt": b"m"}))
    assert _keys(s3_env, aws_env) == {"step-8/m.pt", "step-8/manifest.json"}
    assert store.list_complete() == [8]


# -- SSE-KMS ------------------------------------------------------------------------------


def test_sse_kms_applies_to_every_object(s3_env: str, aws_env: str, tmp_path: Path) -> None:
    key_id = aws_client("kms", aws_env).create_key()["KeyMetadata"]["KeyId"]
    store = S3Store(
        s3_env,
        "enc",
        sse_kms_key_id=key_id,
        multipart_threshold=5 * MIB,
        multipart_chunksize=5 * MIB,
    )
    big = os.urandom(6 * MIB)
    store.upload(1, _src(tmp_path, {"big.pt": big, "small.pt": b"s"}))
    s3 = aws_client("s3", aws_env)
    keys = _keys(s3_env, aws_env)
    assert len(keys) == 3
    for key in keys:
        head = s3.head_object(Bucket=s3_env, Key=key)
        assert head["ServerSideEncryption"] == "aws:kms", key
        assert key_id in head["SSEKMSKeyId"], key
    dest = tmp_path / "out"
    store.download(1, dest)
    assert (dest / "big.pt").read_bytes() == big


# -- URLs, arguments, errors --------------------------------------------------------------


@pytest.fixture
def offline_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS config of this machine reaches boto3 (clients are built, never called)."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    fresh_default_session(monkeypatch)


@pytest.mark.usefixtures("offline_aws")
def test_store_from_url_parses_s3_urls() -> None:
    store = store_from_url("s3://my-bucket/runs/exp1//")
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.url) == (
        "my-bucket",
        "runs/exp1",
        "s3://my-bucket/runs/exp1",
    )
    assert repr(store) == "S3Store('s3://my-bucket/runs/exp1')"
    assert store.key(3, "model.pt") == "runs/exp1/step-3/model.pt"
    bare = store_from_url("s3://my-bucket")
    assert isinstance(bare, S3Store)
    assert bare.prefix == ""
    for url in ("s3://", "s3:///prefix", "s3:////"):
        with pytest.raises(UserInputError, match=r"no bucket.*s3://BUCKET/PREFIX"):
            store_from_url(url)
    with pytest.raises(UserInputError, match=r"'s3://bad bucket/x'.*not a valid S3 bucket"):
        store_from_url("s3://bad bucket/x")
    with pytest.raises(UserInputError, match=r"unknown scheme 'gs'.*local://PATH or s3://"):
        store_from_url("gs://bucket")


@pytest.mark.usefixtures("offline_aws")
def test_bad_arguments_name_the_argument() -> None:
    with pytest.raises(UserInputError, match="multipart_chunksize="):
        S3Store("bkt", multipart_chunksize=MIB)
    with pytest.raises(UserInputError, match="multipart_threshold="):
        S3Store("bkt", multipart_threshold=0)
    with pytest.raises(UserInputError, match="sse_kms_key_id="):
        S3Store("bkt", sse_kms_key_id=" ")
    with pytest.raises(UserInputError, match="endpoint_url="):
        S3Store("bkt", endpoint_url="not a url")
    with pytest.raises(UserInputError, match="step must be"):
        S3Store("bkt").key(-1, "model.pt")


@pytest.mark.usefixtures("offline_aws")
def test_without_boto3_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 now raises ImportError
    with pytest.raises(UserInputError, match=r"pip install 'gpulease\[aws\]'"):
        store_from_url("s3://bkt/prefix")


_URLS = st.one_of(
    st.text(),
    st.text().map(lambda s: "s3://" + s),
    st.text(alphabet="abc/-._ ").map(lambda s: "s3://" + s),
    st.text().map(lambda s: "local://" + s),
    st.from_regex(r"\A[a-z0-9]{1,6}://.*", fullmatch=True),
)


@pytest.mark.usefixtures("offline_aws")
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(url=_URLS)
def test_any_string_is_a_store_or_a_user_input_error(url: str) -> None:
    try:
        store = store_from_url(url)
    except UserInputError as exc:
        assert repr(url) in str(exc)
        return
    assert isinstance(store, CheckpointStore)


def test_a_missing_bucket_is_a_user_input_error_naming_it(aws_env: str, tmp_path: Path) -> None:
    store = S3Store("gl-no-such-bucket", "ck")
    for action in (
        store.list_complete,
        lambda: store.upload(1, _src(tmp_path)),
        lambda: store.download(1, tmp_path / "out"),
        lambda: store.delete(1),
        store.total_bytes,
    ):
        with pytest.raises(UserInputError, match="bucket 'gl-no-such-bucket' does not exist"):
            action()


def test_missing_credentials_are_a_user_input_error(
    aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-role lookup
    fresh_default_session(monkeypatch)
    with pytest.raises(UserInputError, match="no usable AWS credentials"):
        S3Store("gl-any-bucket").list_complete()


def test_a_missing_source_directory_is_refused(s3_env: str, tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="not a directory"):
        S3Store(s3_env).upload(1, tmp_path / "absent")


def test_total_bytes_sums_every_object_under_the_prefix(s3_env: str, tmp_path: Path) -> None:
    store = S3Store(s3_env, "runs/a")
    assert store.total_bytes() == 0  # an empty prefix
    store.upload(1, _src(tmp_path, {"model.pt": b"w" * 1234}))
    s3 = store.client
    s3.put_object(Bucket=s3_env, Key="runs/a/step-2/model.pt", Body=b"x" * 10)  # incomplete
    s3.put_object(Bucket=s3_env, Key="runs/ab/other", Body=b"y" * 99)  # another prefix
    s3.put_object(Bucket=s3_env, Key="top", Body=b"z" * 3)
    manifest = s3.head_object(Bucket=s3_env, Key=store.key(1, MANIFEST))["ContentLength"]
    assert store.total_bytes() == 1234 + manifest + 10
    assert S3Store(s3_env).total_bytes() == 1234 + manifest + 10 + 99 + 3  # the whole bucket
