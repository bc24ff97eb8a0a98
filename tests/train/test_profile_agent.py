"""The agent hands out the profiles in its work dir's ``profile/`` folder and nothing else: a
real agent process, files laid out as ``gpulease.train.profile`` writes them, and requests that
try to reach beyond them (other names, ``..``, encoded slashes, symlinks)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpulease.agent.client import AgentRequestError
from tests.agent.conftest import AgentProcess


@pytest.fixture
def node(tmp_path: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(tmp_path).start()
    yield agent
    agent.kill_session()


def _lay_out(work: Path, outside: Path) -> None:
    profile = work / "profile"
    (profile / "rank-0").mkdir(parents=True)
    (profile / "rank-0" / "summary.json").write_text(json.dumps({"rank": 0}))
    (profile / "rank-0" / "trace.json.gz").write_bytes(b"\x1f\x8b trace")
    (profile / "rank-0" / "notes.txt").write_text("not a profile file")
    (profile / "rank-3").mkdir()
    (profile / "rank-3" / "summary.json").write_text(json.dumps({"rank": 3}))  # no trace
    (profile / "rank-01").mkdir()  # not a rank's name
    (profile / "rank-01" / "summary.json").write_text("{}")
    outside.mkdir()
    (outside / "summary.json").write_text("SECRET")
    (profile / "rank-5").symlink_to(outside)  # a symlinked folder
    (profile / "rank-6").mkdir()
    (profile / "rank-6" / "summary.json").symlink_to(outside / "summary.json")


def test_the_agent_lists_and_serves_profiles_and_nothing_outside(
    node: AgentProcess, tmp_path: Path
) -> None:
    api = node.api
    assert api.profiles() == {"ranks": []}  # no profile folder yet
    _lay_out(node.node_dir / "work", tmp_path / "outside")

    listed = api.profiles()["ranks"]
    assert [(r["rank"], r["trace_bytes"]) for r in listed] == [(0, 8), (3, None)]
    assert api.profile_file(0, "summary.json") == b'{"rank": 0}'
    assert api.profile_file(0, "trace.json.gz") == b"\x1f\x8b trace"

    for rank, name in [(3, "trace.json.gz"), (5, "summary.json"), (6, "summary.json"),
                       (9, "summary.json")]:  # fmt: skip
        with pytest.raises(AgentRequestError) as refused:
            api.profile_file(rank, name)
        assert refused.value.status == 404 and refused.value.code == "no_profile"

    headers = {"Authorization": f"Bearer {node.token}"}
    for path in [
        "/v1/profile/rank-0/notes.txt",
        "/v1/profile/rank-01/summary.json",
        "/v1/profile/rank-0/../../heartbeat",
        "/v1/profile/rank-0/..%2f..%2fheartbeat",
        "/v1/profile/rank-0%2f..%2f..%2ftasks/summary.json",
        "/v1/profile/rank--1/summary.json",
        "/v1/profile/../work/profile/rank-0/summary.json",
    ]:
        answer = httpx.get(node.url + path, headers=headers)
        assert answer.status_code == 404, path
        assert answer.json()["error"]["code"] == "not_found", path
        assert b"SECRET" not in answer.content and b"rank" not in answer.content.lower()
    unauthorised = httpx.get(node.url + "/v1/profile/rank-0/summary.json")
    assert unauthorised.status_code == 401
    assert os.path.exists(node.node_dir / "heartbeat")  # what the traversals aimed at is there
