"""`gpulease checkpoints list|verify` on checkpoints written by a real CheckpointManager."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Cli

torch = pytest.importorskip("torch")


def _write_checkpoints(directory: Path, steps: list[int]) -> None:
    from gpulease.train import CheckpointManager

    model = torch.nn.Linear(64, 64)
    mgr = CheckpointManager(directory, keep=10, async_save=False)
    for step in steps:
        mgr.save(step, model=model, extra={"step": step})


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_list_reports_complete_incomplete_and_corrupt_steps(cli: Cli, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    _write_checkpoints(ckpt, [10, 20, 30, 40])
    (ckpt / "step-40" / "manifest.json").unlink()  # a save cut off before its manifest
    _flip_a_byte(ckpt / "step-30" / "model.pt")  # bit rot

    data = json.loads(cli("checkpoints", "list", str(ckpt), "--json", check=True).stdout)

    statuses = {c["step"]: c["status"] for c in data["checkpoints"]}
    assert statuses == {10: "complete", 20: "complete", 30: "corrupt", 40: "incomplete"}
    assert data["latest_complete"] == 20
    step10 = data["checkpoints"][0]
    assert step10["files"] == 3 and step10["bytes"] > 64 * 64 * 4
    assert step10["format"] == "replicated"

    table = cli("checkpoints", "list", f"local://{ckpt}", check=True).stdout
    assert "corrupt" in table and "incomplete" in table
    assert "Restore would take step 20" in table


def test_verify_exit_code_says_whether_the_newest_checkpoint_restores(
    cli: Cli, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    _write_checkpoints(ckpt, [1, 2])
    assert cli("checkpoints", "verify", str(ckpt)).returncode == 0

    (tmp_path / "ckpt" / "step-3").mkdir()  # an incomplete leftover is not an error
    assert cli("checkpoints", "verify", str(ckpt)).returncode == 0

    _flip_a_byte(ckpt / "step-2" / "__extra__.pt")
    result = cli("checkpoints", "verify", str(ckpt), "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["ok"] is False

    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("checkpoints", "verify", str(empty))
    assert result.returncode == 1
    assert "No checkpoints" in result.stdout


@pytest.mark.parametrize(
    ("location", "fragment"),
    [("/no/such/dir", "is not a directory"), ("ftp://host/x", "unknown scheme")],
)
def test_bad_location_is_a_clean_error(cli: Cli, location: str, fragment: str) -> None:
    result = cli("checkpoints", "list", location)
    assert result.returncode == 2
    assert fragment in result.stderr and "Traceback" not in result.stderr


def test_list_shows_the_format_of_a_sharded_checkpoint(cli: Cli, tmp_path: Path) -> None:
    from gpulease.train import CheckpointManager

    ckpt = tmp_path / "dcp"
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    CheckpointManager(ckpt, async_save=False, sharded=True).save(5, model=model, opt=opt)

    data = json.loads(cli("checkpoints", "list", str(ckpt), "--json", check=True).stdout)
    [info] = data["checkpoints"]
    assert (info["step"], info["status"], info["format"], info["world_size"]) == (
        5,
        "complete",
        "dcp",
        1,
    )
    assert "dcp ×1" in cli("checkpoints", "list", str(ckpt), check=True).stdout
