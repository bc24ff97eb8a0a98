"""The agent's file API on real agent processes: ``GET /v1/files/<bundle>`` (the manifest the
node holds) and ``PUT`` (a sync stream applied into ``<node dir>/files/<bundle>/``), with
authentication, bad input as 4xx with a message, the node's upload limit, and no change while a
task runs. A task whose workdir is an uploaded bundle runs with exactly those files."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import httpx
import pytest

from gpulease.agent.client import AgentRequestError, AgentUnauthorized
from gpulease.filesync import diff, manifest, manifest_from_json, pack, walk
from tests.agent.conftest import AgentProcess, task, wait_until
from tests.filesync.trees import build, listing


def stream_for(src: Path, held: dict[str, object]) -> tuple[io.BytesIO, int]:
    found = walk(src)
    local = manifest(found)
    changes = diff(local, manifest_from_json(held["manifest"]))
    body = io.BytesIO()
    packed = pack({f.rel: f for f in found}, local, changes, body)
    body.seek(0)
    return body, packed.size


def upload(agent: AgentProcess, bundle: str, src: Path) -> dict[str, object]:
    body, size = stream_for(src, agent.api.file_manifest(bundle))
    return agent.api.put_files(bundle, body, size)


def test_a_new_bundle_is_empty_then_holds_what_was_put(agent: AgentProcess, tmp_path: Path) -> None:
    held = agent.api.file_manifest("workdir")
    assert held["manifest"] == {} and held["path"] == str(agent.node_dir / "files" / "workdir")
    assert held["max_upload_bytes"] > 0
    src = build(tmp_path / "src", {"a.py": "print(1)", "pkg/b.py": "x", ".gitignore": "*.log\n",
                                   "run.log": "no"})  # fmt: skip
    answer = upload(agent, "workdir", src)
    assert answer["path"] == held["path"] and answer["files"] == 3 and answer["deleted"] == 0
    expected = {k: v for k, v in listing(src).items() if k != "run.log"}
    assert listing(Path(str(held["path"]))) == expected
    assert manifest_from_json(agent.api.file_manifest("workdir")["manifest"]) == manifest(walk(src))


def test_a_task_runs_with_an_uploaded_workdir_once_the_original_is_gone(
    agent: AgentProcess, tmp_path: Path
) -> None:
    src = build(
        tmp_path / "src", {"train.py": "t", "data/x.csv": "1", ".gpuleaseignore": "data/\n"}
    )
    node_path = str(upload(agent, "workdir", src)["path"])
    shutil.rmtree(src)
    agent.api.submit(task(workdir=node_path, run="find . -type f | sort"))
    assert agent.wait_state("t1")["state"] == "SUCCEEDED"
    assert agent.all_logs("t1").split() == ["./.gpuleaseignore", "./train.py"]


def test_an_uploaded_bundle_is_copied_as_it_is(agent: AgentProcess, tmp_path: Path) -> None:
    """The bundle was filtered when it was sent: the node does not filter it again (a
    .gpuleaseignore that re-included a file git ignores may itself have been left out)."""
    files = {".gitignore": "*.bin\n.gpuleaseignore\n", ".gpuleaseignore": "!weights.bin\n",
             "weights.bin": "w"}  # fmt: skip
    src = build(tmp_path / "src", files)
    node_path = str(upload(agent, "workdir", src)["path"])
    agent.api.submit(task(workdir=node_path, run="cat weights.bin"))
    assert agent.wait_state("t1")["state"] == "SUCCEEDED"
    assert agent.all_logs("t1") == "w"


def _tar(name: str, data: bytes) -> bytes:
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return body.getvalue()


@pytest.mark.parametrize(
    ("body", "code"),
    [(b"not a tar" * 200, "bad_stream"), (_tar("f/../../escape", b"x"), "unsafe_path"),
     (_tar("stray", b"x"), "bad_stream")],
)  # fmt: skip
def test_bad_uploads_are_422_with_a_message(
    shared_agent: AgentProcess, tmp_path: Path, body: bytes, code: str
) -> None:
    with pytest.raises(AgentRequestError) as err:
        shared_agent.api.put_files("bad", io.BytesIO(body), len(body))
    assert err.value.status == 422 and err.value.code == code
    assert not (shared_agent.node_dir / "escape").exists()


def test_uploads_need_the_token_a_length_and_a_good_bundle_name(
    shared_agent: AgentProcess,
) -> None:
    url = shared_agent.url + "/v1/files/workdir"
    assert httpx.put(url, content=b"x").status_code == 401
    with pytest.raises(AgentUnauthorized):
        type(shared_agent.api)(shared_agent.url, "wrong").file_manifest("workdir")
    auth = {"Authorization": f"Bearer {shared_agent.token}"}
    chunked = httpx.put(url, content=iter([b"x"]), headers=auth)
    assert chunked.status_code == 411
    for bad in ("../x", ".hidden", "a" * 129):
        assert httpx.get(f"{shared_agent.url}/v1/files/{bad}", headers=auth).status_code == 404


def test_the_nodes_upload_limit_is_413(agent_factory: object, tmp_path: Path) -> None:
    agent = agent_factory(args=("--max-upload-mb", "0.001"))  # type: ignore[operator]
    assert agent.api.file_manifest("w")["max_upload_bytes"] == 1000
    body = _tar("f/big", b"x" * 5000)
    with pytest.raises(AgentRequestError) as err:
        agent.api.put_files("w", io.BytesIO(body), len(body))
    assert err.value.status == 413 and "1000 bytes" in str(err.value)


def test_files_cannot_change_while_a_task_runs(agent: AgentProcess, tmp_path: Path) -> None:
    agent.api.submit(task(run="sleep 30"))
    wait_until(lambda: agent.api.status("t1")["state"] == "RUNNING", what="running")
    src = build(tmp_path / "src", {"a": "x" * 300_000})  # the answer comes after the whole body
    body, size = stream_for(src, {"manifest": {}})
    with pytest.raises(AgentRequestError) as err:
        agent.api.put_files("workdir", body, size)
    assert err.value.status == 409 and err.value.code == "node_busy"
    agent.api.cancel("t1", grace_s=0.1)
    agent.wait_state("t1")
    body.seek(0)
    assert agent.api.put_files("workdir", body, size)["files"] == 1
