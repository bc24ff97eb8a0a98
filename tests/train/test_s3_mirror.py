"""CheckpointManager with an ``s3://`` store, against a real moto server process: every save is
mirrored, pruning applies in S3 too, a fresh machine restores bit-identical weights from S3, and
encrypted checkpoints are ciphertext in S3."""

from __future__ import annotations

from pathlib import Path

import torch

from gpulease.storage import MANIFEST
from gpulease.train import CheckpointManager
from gpulease.train.crypto import MAGIC
from tests.awsfixtures import aws_client
from tests.train.helpers import make, train_step, weights

KEY_HEX = "3c" * 32
MARKER = "plain-marker-5f0c2e9a"


def _objects(endpoint: str, bucket: str) -> dict[str, bytes]:
    s3 = aws_client("s3", endpoint)
    listing = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listing}


def _steps(objects: dict[str, bytes]) -> list[int]:
    names = {key.split("/")[1] for key in objects if key.endswith("/" + MANIFEST)}
    return sorted(int(name.removeprefix("step-")) for name in names)


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_saves_mirror_to_s3_prune_and_restore_on_a_fresh_machine(
    s3_env: str, aws_env: str, tmp_path: Path
) -> None:
    url = f"s3://{s3_env}/ckpt"
    model, opt, sched = make()
    mgr = CheckpointManager(dir=tmp_path / "a", store=url, keep=2)
    for step in range(1, 5):
        train_step(model, opt, sched)
        mgr.save(step, model=model, opt=opt, extra={"step": step})
    mgr.wait()
    expected = weights(model)
    objects = _objects(aws_env, s3_env)
    assert _steps(objects) == [3, 4]
    assert all(key.startswith("ckpt/step-") for key in objects)
    assert {key.split("/")[1] for key in objects} == {"step-3", "step-4"}  # pruned in S3 too

    model2, opt2, _ = make(seed=7)
    assert not _equal(weights(model2), expected)
    fresh = CheckpointManager(dir=tmp_path / "b", store=url, keep=2)
    assert fresh.restore(model=model2, opt=opt2) == 4
    assert fresh.extra == {"step": 4}
    assert _equal(weights(model2), expected)
    assert fresh.list() == [4]  # the downloaded copy is verified and complete locally


def test_encrypted_checkpoints_are_ciphertext_in_s3(
    s3_env: str, aws_env: str, tmp_path: Path
) -> None:
    url = f"s3://{s3_env}/enc"
    model, opt, _ = make()
    plain = CheckpointManager(dir=tmp_path / "plain", store=f"s3://{s3_env}/plain", keep=1)
    plain.save(1, model=model, extra={"note": MARKER})
    plain.wait()
    plain_objects = _objects(aws_env, s3_env)
    assert any(MARKER.encode() in data for data in plain_objects.values())  # the marker shows

    mgr = CheckpointManager(dir=tmp_path / "a", store=url, keep=1, encrypt_key=KEY_HEX)
    mgr.save(1, model=model, opt=opt, extra={"note": MARKER})
    mgr.wait()
    encrypted = {k: v for k, v in _objects(aws_env, s3_env).items() if k.startswith("enc/")}
    data_files = {k: v for k, v in encrypted.items() if not k.endswith(MANIFEST)}
    assert len(data_files) == 4  # model, opt, rng, extra
    for key, data in data_files.items():
        assert data.startswith(MAGIC), key
        assert MARKER.encode() not in data, key
        assert b"PK\x03\x04" not in data[:64], key  # not a torch.save zip archive

    model2, opt2, _ = make(seed=3)
    fresh = CheckpointManager(dir=tmp_path / "b", store=url, keep=1, encrypt_key=KEY_HEX)
    assert fresh.restore(model=model2, opt=opt2) == 1
    assert fresh.extra == {"note": MARKER}
    assert _equal(weights(model2), weights(model))
