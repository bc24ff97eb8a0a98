"""The size limit of a workdir or file mount: ``file_sync.max_size_mb`` in the config file, and
the message a source over it fails with (its path, its size after the ignores, the limit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.errors import UserInputError
from gpulease.filesync import SourceError, check_size, human_size, max_bytes, source_tree
from tests.filesync.trees import build


@pytest.mark.parametrize(
    ("config", "limit"),
    [({}, 500_000_000), ({"file_sync": None}, 500_000_000),
     ({"file_sync": {"max_size_mb": 2000}}, 2_000_000_000),
     ({"file_sync": {"max_size_mb": 0.5}}, 500_000)],
)  # fmt: skip
def test_the_limit_comes_from_the_config_file(config: dict[str, object], limit: int) -> None:
    assert max_bytes(config) == limit


@pytest.mark.parametrize(
    "section", [{"max_size_mb": 0}, {"max_size_mb": -1}, {"max_size_mb": "big"},
                {"max_size_mb": True}, {"max_size_mb": float("inf")}, "500"],
)  # fmt: skip
def test_a_bad_limit_names_the_key(section: object) -> None:
    with pytest.raises(UserInputError, match=r"file_sync"):
        max_bytes({"file_sync": section})


def test_over_the_limit_names_the_source_its_size_and_the_limit(tmp_path: Path) -> None:
    src = build(tmp_path / "proj", {"a.bin": b"x" * 1_234_567, "b.log": b"y" * 10**6,
                                    ".gitignore": "*.log\n"})  # fmt: skip
    found = source_tree("workdir", src)
    assert check_size("workdir", src, found, 1_300_000) == 1_234_567 + len("*.log\n")
    with pytest.raises(SourceError) as err:
        check_size("workdir", src, found, 1_000_000)
    assert str(err.value).startswith(
        f"workdir: {src} holds 1.2 MB to send, over the limit of 1.0 MB; leave files out"
    )


def test_a_single_file_source_travels_under_its_own_name(tmp_path: Path) -> None:
    target = build(tmp_path, {"real.yaml": "x"}) / "real.yaml"
    (tmp_path / "named.yaml").symlink_to(target)
    [found] = source_tree("file_mounts /cfg", tmp_path / "named.yaml")
    assert found.rel == "named.yaml" and found.path == target.resolve()
    with pytest.raises(SourceError, match="file_mounts /cfg: no such file or directory"):
        source_tree("file_mounts /cfg", tmp_path / "nope")


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (1_500_000, "1.5 MB"), (2 * 10**9, "2.0 GB"),
     (3 * 10**12, "3.0 TB"), (5 * 10**15, "5000.0 TB")],
)  # fmt: skip
def test_sizes_read_in_decimal_units(size: int, text: str) -> None:
    assert human_size(size) == text
