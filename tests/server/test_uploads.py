"""The server's side of file delivery (:mod:`gpulease.server.uploads`) against a REAL agent
process: exactly the kept files of a workdir arrive, a re-sync sends only what changed (the
sync reports paths and bytes), local deletions are deleted on the node, file mounts (a directory,
a file) get bundles of their own, and sources that cannot go — too big, missing, links out —
fail with a message naming them. A task delivered this way runs after its sources are gone."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.filesync import SourceError
from gpulease.server.agents import HttpAgent
from gpulease.server.uploads import (
    WORKDIR_BUNDLE,
    FileDeliveryError,
    Source,
    Uploader,
    check_sources,
    mount_bundle,
)
from gpulease.wire import NodeTask
from tests.agent.conftest import AgentProcess
from tests.filesync.trees import build, listing

MB = 1_000_000


@pytest.fixture
def node(tmp_path: Path) -> Iterator[AgentProcess]:
    root = tmp_path / "node-root"
    root.mkdir()
    agent = AgentProcess(root).start()
    yield agent
    agent.kill_session()


def project(root: Path) -> Path:
    return build(root, {
        "train.py": "print('train')",
        "pkg/model.py": "m", "pkg/deep/util.py": "u",
        ".gitignore": "*.log\noutputs/\n",
        "run.log": "ignored by git", "outputs/ckpt.pt": "ignored dir",
        ".gpuleaseignore": "data/raw/\n*.secret\n",
        "data/raw/big.bin": "ignored by gpulease", "data/small.csv": "kept",
        "pkg/.gitignore": "scratch.txt\n", "pkg/scratch.txt": "nested ignore",
        "key.secret": "s", ".git/HEAD": "ref", ".venv/bin/python": "",
        "pkg/__pycache__/m.pyc": "",
    })  # fmt: skip


KEPT = {
    "train.py": "print('train')", "pkg": "/", "pkg/model.py": "m", "pkg/deep": "/",
    "pkg/deep/util.py": "u", ".gitignore": "*.log\noutputs/\n",
    ".gpuleaseignore": "data/raw/\n*.secret\n", "data": "/", "data/small.csv": "kept",
    "pkg/.gitignore": "scratch.txt\n",
}  # fmt: skip


def workdir(path: Path) -> Source:
    return Source("workdir", WORKDIR_BUNDLE, str(path))


def test_exactly_the_kept_files_arrive_and_only_changes_are_sent_again(
    node: AgentProcess, tmp_path: Path
) -> None:
    src = project(tmp_path / "proj")
    uploader = Uploader(limit=10 * MB)
    first = uploader.sync(node.api, workdir(src))
    assert first.node_path == str(node.node_dir / "files" / "workdir")
    assert listing(Path(first.node_path)) == KEPT
    assert set(first.sent) == set(KEPT) and first.deleted == () and first.kept == len(KEPT)

    again = uploader.sync(node.api, workdir(src))
    assert again.sent == () and again.deleted == () and again.sent_bytes == 0

    (src / "pkg/model.py").write_text("m2")
    changed = uploader.sync(node.api, workdir(src))
    assert changed.sent == ("pkg/model.py",) and changed.deleted == ()
    assert changed.sent_bytes < first.sent_bytes
    assert (Path(changed.node_path) / "pkg/model.py").read_text() == "m2"

    (src / "pkg/deep/util.py").unlink()
    (src / "pkg/deep").rmdir()
    (src / "train.py").unlink()
    gone = uploader.sync(node.api, workdir(src))
    assert gone.sent == () and gone.deleted == ("pkg/deep", "train.py")
    assert not (Path(gone.node_path) / "train.py").exists()
    assert not (Path(gone.node_path) / "pkg/deep").exists()

    (src / "run.log").write_text("still ignored")  # an ignored file changing sends nothing
    assert uploader.sync(node.api, workdir(src)).sent == ()


def test_a_fresh_uploader_finds_what_the_node_holds(node: AgentProcess, tmp_path: Path) -> None:
    """Only changed files are sent again, also after a server restart (no local memory)."""
    src = project(tmp_path / "proj")
    Uploader(limit=10 * MB).sync(node.api, workdir(src))
    assert Uploader(limit=10 * MB).sync(node.api, workdir(src)).sent == ()


def test_file_mounts_get_bundles_and_the_task_node_paths(
    node: AgentProcess, tmp_path: Path
) -> None:
    src = project(tmp_path / "proj")
    data = build(tmp_path / "data", {"a.txt": "A", ".gitignore": "tmp/\n", "tmp/x": "x"})
    config = tmp_path / "cfg.yaml"
    config.write_text("lr: 1")
    task = NodeTask(
        task_id="t1", run="true", node_rank=0, num_nodes=1, node_ips=("127.0.0.1",),
        workdir=str(src),
        file_mounts={"datasets/d": str(data), "/etc/app/cfg.yaml": str(config),
                     "remote": "s3://bucket/key"},
    )  # fmt: skip
    delivered, reports = Uploader(limit=10 * MB).deliver(node.api, task)
    files = node.node_dir / "files"
    assert delivered.workdir == str(files / "workdir")
    assert delivered.file_mounts == {
        "datasets/d": str(files / mount_bundle("datasets/d")),
        "/etc/app/cfg.yaml": str(files / mount_bundle("/etc/app/cfg.yaml") / "cfg.yaml"),
        "remote": "s3://bucket/key",  # URLs are passed on
    }
    assert listing(files / mount_bundle("datasets/d")) == {"a.txt": "A", ".gitignore": "tmp/\n"}
    assert Path(delivered.file_mounts["/etc/app/cfg.yaml"]).read_text() == "lr: 1"
    assert [r.bundle for r in reports] == [
        "workdir",
        mount_bundle("datasets/d"),
        mount_bundle("/etc/app/cfg.yaml"),
    ]
    assert mount_bundle("/etc/app/cfg.yaml") == mount_bundle("/etc/app/cfg.yaml")
    assert mount_bundle("a/b") != mount_bundle("a-b")


def test_an_empty_directory_arrives_as_one(node: AgentProcess, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for _ in range(2):
        report = Uploader(limit=MB).sync(
            node.api, Source("file_mounts out", "mount-out", str(empty))
        )
        assert report.sent == () and Path(report.node_path).is_dir()


def test_a_task_delivered_by_the_agent_runs_without_its_sources(
    node: AgentProcess, tmp_path: Path
) -> None:
    src = project(tmp_path / "proj")
    data = build(tmp_path / "data", {"a.txt": "A"})
    task = NodeTask(
        task_id="t1", node_rank=0, num_nodes=1, node_ips=("127.0.0.1",), workdir=str(src),
        file_mounts={"datasets/d": str(data)},
        run="find . -type f -not -path './checkpoints/*' | sort; test -e $SRC || echo gone",
        envs={"SRC": str(src)},
    )  # fmt: skip
    delivered, _ = Uploader(limit=10 * MB).deliver(node.api, task)
    os.rename(src, tmp_path / "moved")
    os.rename(data, tmp_path / "moved-data")
    HttpAgent(node.api).submit(delivered)  # (a node sharing files: nothing uploaded again)
    assert node.wait_state("t1")["state"] == "SUCCEEDED"
    assert node.all_logs("t1").split() == [
        "./.gitignore", "./.gpuleaseignore", "./data/small.csv", "./datasets/d/a.txt",
        "./pkg/.gitignore", "./pkg/deep/util.py", "./pkg/model.py", "./train.py", "gone",
    ]  # fmt: skip


def test_submit_uploads_through_the_agent_when_the_node_does_not_share_files(
    node: AgentProcess, tmp_path: Path
) -> None:
    src = build(tmp_path / "proj", {"main.py": "x"})
    task = NodeTask(task_id="t2", run="cat main.py", node_rank=0, num_nodes=1,
                    node_ips=("127.0.0.1",), workdir=str(src))  # fmt: skip
    HttpAgent(node.api, Uploader(limit=MB)).submit(task)
    assert node.wait_state("t2")["state"] == "SUCCEEDED"
    assert node.all_logs("t2") == "x"
    record = (node.node_dir / "tasks" / "t2" / "task.json").read_text()
    assert str(src) not in record and str(node.node_dir / "files" / "workdir") in record


def test_sources_that_cannot_go_fail_with_a_message_naming_them(
    node: AgentProcess, tmp_path: Path
) -> None:
    big = build(tmp_path / "big", {"weights.bin": b"x" * 2_500_000, "skip.log": "y" * 10**6,
                                   ".gitignore": "*.log\n"})  # fmt: skip
    with pytest.raises(FileDeliveryError) as err:
        Uploader(limit=2 * MB).sync(node.api, workdir(big))
    message = str(err.value)
    assert f"workdir: {big} holds 2.5 MB to send, over the limit of 2.0 MB" in message
    assert "file_sync.max_size_mb" in message
    assert Uploader(limit=3 * MB).sync(node.api, workdir(big)).kept == 2  # *.log left out

    with pytest.raises(FileDeliveryError, match="no such file or directory"):
        Uploader(limit=MB).sync(node.api, workdir(tmp_path / "nope"))
    linked = build(tmp_path / "linked", {"data": f"-> {tmp_path / 'big'}", "ok": "-> data"})
    with pytest.raises(FileDeliveryError, match=r"symbolic links out of it \(data\)"):
        Uploader(limit=MB).sync(node.api, workdir(linked))


def test_the_launch_check(tmp_path: Path) -> None:
    src = build(tmp_path / "proj", {"a": "x" * 2000, "l": f"-> {tmp_path}"})
    check_sources(str(src), {}, limit=MB, remote=False)  # a link out is fine on shared files
    with pytest.raises(SourceError, match="links out"):
        check_sources(str(src), {}, limit=MB, remote=True)
    with pytest.raises(SourceError, match=rf"workdir: {src} holds 2.0 kB to send"):
        check_sources(str(src), {}, limit=1000, remote=False)
    with pytest.raises(SourceError, match="file_mounts /data: no such file or directory"):
        check_sources(None, {"/data": str(tmp_path / "nope"), "/u": "s3://b/k"}, limit=MB,
                      remote=False)  # fmt: skip
