"""setup_distributed: one process is a no-op; two real gloo processes under torchrun and under
the gpulease agent's one-process-per-node environment; bad environment values are named.

No GPU here: the NCCL path (``cuda:LOCAL_RANK``, ``device_id``) is not tested by this file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from gpulease.errors import UserInputError
from gpulease.train import cleanup_distributed, setup_distributed
from gpulease.train.distributed import _layout

ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "NODE_RANK",
    "NNODES",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GPULEASE_NODE_RANK",
    "GPULEASE_NUM_NODES",
    "GPULEASE_GPUS_PER_NODE",
)
TORCHRUN = Path(sys.executable).parent / "torchrun"
CHILD = textwrap.dedent(
    """
    import json, sys
    import torch, torch.distributed as dist
    from gpulease.train import cleanup_distributed, setup_distributed

    info = setup_distributed(timeout_s=60)
    assert setup_distributed() is info
    total = torch.tensor([info.rank + 1.0])
    dist.all_reduce(total)
    fields = {k: getattr(info, k) for k in info.__dataclass_fields__}
    fields["device"] = str(info.device)
    fields["sum"] = total.item()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    fields["timeout_s"] = backend.options._timeout.total_seconds()
    with open(f"{sys.argv[1]}/info-{info.rank}.json", "w") as out:  # not stdout: lines interleave
        json.dump(fields, out)
    cleanup_distributed()
    assert not dist.is_initialized()
    open(f"{sys.argv[1]}/cleaned-{info.rank}", "w").close()
    """
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    cleanup_distributed()
    yield monkeypatch
    cleanup_distributed()


def _child_env() -> dict[str, str]:
    """The environment without launcher variables, and without GPUs (so: gloo on CPU)."""
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    return {**env, "CUDA_VISIBLE_DEVICES": ""}


def _infos(directory: Path) -> list[dict[str, object]]:
    found = [json.loads(path.read_text()) for path in directory.glob("info-*.json")]
    return sorted(found, key=lambda info: int(str(info["rank"])))


def _exit_after_cleanup(returncode: int, cleaned: Path) -> int:
    """The child's exit code, with one torch-internal failure forgiven: gloo's teardown at
    interpreter exit, after ``cleanup_distributed`` returned (the marker file exists), now and
    then aborts the process ("terminate called without an active exception", SIGABRT) when
    the machine is loaded. Seen once in CI on rank 0, never when reproduced on its own; an
    abort before the cleanup returned still fails."""
    if returncode == -signal.SIGABRT and cleaned.exists():
        return 0
    return returncode


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_one_process_is_a_noop(clean_env: pytest.MonkeyPatch) -> None:
    info = setup_distributed()
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (0, 0, 1, 1)
    assert (info.node_rank, info.num_nodes, info.backend, info.is_main) == (0, 1, None, True)
    cuda = torch.cuda.is_available()
    assert info.device == (torch.device("cuda", 0) if cuda else torch.device("cpu"))
    assert not dist.is_initialized()
    assert setup_distributed() is info  # idempotent
    clean_env.setenv("WORLD_SIZE", "1")
    clean_env.setenv("RANK", "0")
    cleanup_distributed()
    assert setup_distributed().world_size == 1
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"WORLD_SIZE": "2", "RANK": "abc"}, r"RANK='abc' is not an integer"),
        ({"WORLD_SIZE": "zero"}, r"WORLD_SIZE='zero'"),
        ({"WORLD_SIZE": "0"}, r"WORLD_SIZE='0' must be >= 1"),
        ({"WORLD_SIZE": "2"}, r"RANK is not set"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, r"RANK=2 must be < WORLD_SIZE=2"),
        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "-1"}, r"LOCAL_RANK='-1'"),
        (
            {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
            r"LOCAL_RANK=2 must be < LOCAL_WORLD_SIZE=2",
        ),
        ({"GPULEASE_NUM_NODES": "2", "GPULEASE_GPUS_PER_NODE": "8"}, r"torchrun --nnodes"),
        ({"GPULEASE_NUM_NODES": "2"}, r"GPULEASE_NODE_RANK is not set"),
        ({"GPULEASE_NUM_NODES": "2", "GPULEASE_NODE_RANK": "x"}, r"GPULEASE_NODE_RANK='x'"),
        ({"WORLD_SIZE": "2", "RANK": "0"}, r"MASTER_ADDR is not set"),
    ],
)
def test_bad_environment_is_named(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], match: str
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(UserInputError, match=match):
        setup_distributed()
    assert not dist.is_initialized()


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the CPU-only refusal of NCCL")
def test_bad_arguments(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserInputError, match=r"timeout_s=0"):
        setup_distributed(timeout_s=0)
    for name, value in {
        "WORLD_SIZE": "2",
        "RANK": "0",
        "MASTER_ADDR": "x",
        "MASTER_PORT": "1",
    }.items():
        clean_env.setenv(name, value)
    with pytest.raises(UserInputError, match=r"backend='nccl'\) needs CUDA"):
        setup_distributed(backend="nccl")


def test_layout_from_torchrun_and_defaults() -> None:
    torchrun = {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
    }
    layout = _layout(torchrun)
    assert (layout.rank, layout.local_rank, layout.node_rank, layout.num_nodes) == (5, 1, 1, 2)
    derived = _layout({"RANK": "3", "WORLD_SIZE": "4", "NNODES": "2"})  # manual launch
    assert (derived.local_world_size, derived.local_rank, derived.node_rank) == (2, 1, 1)
    per_node = _layout(
        {"GPULEASE_NUM_NODES": "3", "GPULEASE_NODE_RANK": "2", "GPULEASE_GPUS_PER_NODE": "1"}
    )
    assert (per_node.rank, per_node.world_size, per_node.local_rank) == (2, 3, 0)
    assert (per_node.node_rank, per_node.num_nodes) == (2, 3)


@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_two_processes_under_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(script), str(tmp_path)],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    infos = _infos(tmp_path)
    assert [i["rank"] for i in infos] == [0, 1]
    assert [i["local_rank"] for i in infos] == [0, 1]
    assert [i["is_main"] for i in infos] == [True, False]
    for info in infos:
        assert info["world_size"] == 2 and info["local_world_size"] == 2
        assert info["node_rank"] == 0 and info["num_nodes"] == 1
        assert info["backend"] == "gloo" and info["device"] == "cpu"
        assert info["sum"] == 3.0 and info["timeout_s"] == 60


@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_one_process_per_node_from_the_gpulease_env(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    base = {
        **_child_env(),
        "GPULEASE_NUM_NODES": "2",
        "GPULEASE_GPUS_PER_NODE": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path)],
            env={**base, "GPULEASE_NODE_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    codes = [
        _exit_after_cleanup(p.returncode, tmp_path / f"cleaned-{r}") for r, p in enumerate(procs)
    ]
    assert codes == [0, 0], [err[-2000:] for _, err in outputs]
    infos = _infos(tmp_path)
    assert [(i["rank"], i["node_rank"], i["local_rank"]) for i in infos] == [(0, 0, 0), (1, 1, 0)]
    for info in infos:
        assert info["world_size"] == 2 and info["num_nodes"] == 2
        assert info["backend"] == "gloo" and info["sum"] == 3.0
