"""Sharded checkpoints (torch.distributed.checkpoint): FSDP2 on CPU/gloo, resharding, corruption,
encryption, pruning; in-process checks of the single-process sharded format.

Run as ``python -m tests.train.test_sharded MODE BASE`` this file is one rank of a gloo group
(env RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): ``save`` trains an FSDP2 model and writes the
checkpoints under BASE; ``restore`` restores them into fresh FSDP2 objects and checks them against
the full states the ``save`` group recorded (``BASE/*.pt``).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from gpulease.errors import Permanent, UserInputError
from gpulease.storage import MANIFEST
from gpulease.train import CheckpointManager

ROOT = Path(__file__).resolve().parents[2]
KEY = "22" * 32
# single-process DCP calls warn that they are single-process: that is what these tests do
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


# -- the training set-up shared by the ranks and the test process -------------------------------


class Table:
    """Sharded state that is not a module: a DTensor row-sharded over the mesh (plain without)."""

    def __init__(self, mesh: Any, seed: int) -> None:
        full = torch.arange(12, dtype=torch.float32).reshape(6, 2) * (seed + 1)
        self.table = full if mesh is None else distribute_tensor(full, mesh, [Shard(0)])

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"table": self.table}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.table = state["table"]


class Legacy:
    """A ShardedTensor (the pre-DTensor sharded type), one 3x3 block per rank."""

    def __init__(self, world: int, fill: float) -> None:
        from torch.distributed._shard.sharded_tensor import empty
        from torch.distributed._shard.sharding_spec import ChunkShardingSpec

        spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world)])
        self.tensor = empty(spec, 3 * world, 3)
        self.local().fill_(fill)

    def local(self) -> torch.Tensor:
        return self.tensor.local_shards()[0].tensor

    def state_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tensor = state["tensor"]


def setup(world: int, seed: int) -> dict[str, Any]:
    """An MLP (FSDP2-sharded when ``world`` > 1), Adam, StepLR and a :class:`Table`."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    mesh = None
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        fully_shard(model[0], mesh=mesh)
        fully_shard(model[2], mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return {"model": model, "opt": opt, "sched": sched, "table": Table(mesh, seed)}


def train(objs: dict[str, Any], rank: int, steps: int = 1) -> None:
    for _ in range(steps):
        loss = objs["model"](torch.randn(4, 8) + rank).pow(2).mean()
        objs["opt"].zero_grad()
        loss.backward()
        objs["opt"].step()
        objs["sched"].step()
        if "table" in objs:
            with torch.no_grad():
                objs["table"].table.add_(1.0)


def full_state(objs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Gathered parameters, optimizer state and table (a collective under FSDP)."""
    full = StateDictOptions(full_state_dict=True)
    out = {f"model.{k}": v for k, v in get_model_state_dict(objs["model"], options=full).items()}
    optim = get_optimizer_state_dict(objs["model"], objs["opt"], options=full)
    for fqn, state in optim["state"].items():
        out.update({f"opt.{fqn}.{k}": torch.as_tensor(v) for k, v in state.items()})
    if "table" in objs:
        table = objs["table"].table
        out["table"] = table.full_tensor() if isinstance(table, DTensor) else table
    return {k: v.detach().clone() for k, v in out.items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- the ranks ------------------------------------------------------------------------------------


def save_ranks(base: Path, rank: int, world: int) -> None:
    objs = setup(world, seed=0)
    torch.manual_seed(1000 + rank)  # each rank its own data
    mgr = CheckpointManager(base / "main", keep=2)
    enc = CheckpointManager(base / "enc", keep=2, encrypt_key=KEY)
    train(objs, rank, 2)
    mgr.save(2, extra={"at": 2}, **objs)
    train(objs, rank, 2)
    record(base / "full-4.pt", full_state(objs), rank)
    mgr.save(4, extra={"at": 4}, **objs)
    train(objs, rank)  # mutates the state while step 4 may still be written
    record(base / "full-5.pt", full_state(objs), rank)
    mgr.save(5, extra={"at": 5}, **objs)  # waits for step 4 first
    enc.save(5, extra={"at": 5}, **objs)
    mgr.wait()
    enc.wait()
    train(objs, rank, 3)
    record(base / "final.pt", full_state(objs), rank)
    one_rank_fails(base / "bad", objs, rank)
    legacy = Legacy(world, fill=rank + 1)
    mgr = CheckpointManager(base / "legacy")
    mgr.save(1, legacy=legacy)
    legacy.local().fill_(9.0)  # after the snapshot
    mgr.wait()


def one_rank_fails(directory: Path, objs: dict[str, Any], rank: int) -> None:
    """A write failing on rank 1 fails the save on every rank; no manifest; the next save works."""
    mgr = CheckpointManager(directory)
    if rank == 1:

        def refuse(name: str, value: Any) -> bytes:
            raise OSError("disk full")

        mgr._encode = refuse  # type: ignore[method-assign]
    mgr.save(1, **objs)
    with pytest.raises(Permanent) as failure:
        mgr.wait()
    assert ("disk full" if rank == 1 else "another rank failed") in str(failure.value)
    assert mgr.list() == []
    if rank == 1:
        del mgr._encode
    mgr.save(2, **objs)
    mgr.wait()
    assert mgr.list() == [2]


def restore_ranks(base: Path, rank: int, world: int) -> None:
    objs = setup(world, seed=1)
    mgr = CheckpointManager(base / "main")
    assert mgr.restore(**objs) == 5
    assert mgr.extra == {"at": 5}
    assert objs["sched"].last_epoch == 5
    assert same(full_state(objs), expected(base / "full-5.pt")), "state at step 5"
    train(objs, rank, 3)
    assert same(full_state(objs), expected(base / "final.pt")), "continuation"

    objs = setup(world, seed=2)
    assert CheckpointManager(base / "corrupt").restore(**objs) == 4
    assert same(full_state(objs), expected(base / "full-4.pt")), "step 4 of corrupt"

    objs = setup(world, seed=3)
    assert CheckpointManager(base / "enc", encrypt_key=KEY).restore(**objs) == 5
    assert same(full_state(objs), expected(base / "full-5.pt")), "encrypted"

    legacy = Legacy(world, fill=0.0)
    assert CheckpointManager(base / "legacy").restore(legacy=legacy) == 1
    assert torch.equal(legacy.local(), torch.full((3, 3), rank + 1.0)), "ShardedTensor"

    plain = setup(1, seed=5)  # replicated objects (DDP-style): each rank reads on its own
    del plain["table"]
    assert CheckpointManager(base / "main").restore(**plain) == 5
    want = expected(base / "full-5.pt")
    del want["table"]
    assert same(full_state(plain), want), "replicated objects"

    for name in ("one", "rep"):  # saved by one process: sharded=True, and replicated
        objs = setup(world, seed=4)
        del objs["table"]
        assert CheckpointManager(base / name).restore(**objs) == 3
        assert same(full_state(objs), expected(base / "one.pt")), name


def record(path: Path, state: dict[str, torch.Tensor], rank: int) -> None:
    if rank == 0:
        torch.save(state, path)


def expected(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)  # type: ignore[no-any-return]


def rank_main(mode: str, base: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        run = save_ranks if mode == "save" else restore_ranks
        run(Path(base), dist.get_rank(), dist.get_world_size())
    finally:
        dist.destroy_process_group()


def run_ranks(mode: str, base: Path, world: int = 2) -> None:
    """Run ``world`` ranks of this file in ``mode``; fail with their output if any fails."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(world),
        "OMP_NUM_THREADS": "1",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.train.test_sharded", mode, str(base)],
            cwd=ROOT,
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world)
    ]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    codes = [p.returncode for p in procs]
    assert codes == [0] * world, "\n".join(f"rank {r}:\n{o[-3000:]}" for r, o in enumerate(outs))


# -- the tests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Checkpoints written by two FSDP2 ranks (steps 2, 4, 5; keep=2) and an encrypted one."""
    base = tmp_path_factory.mktemp("sharded")
    run_ranks("save", base)
    return base


@pytest.mark.xdist_group("torch-ddp")
def test_layout_and_keep(saved: Path) -> None:
    main = saved / "main"
    assert CheckpointManager(main).list() == [4, 5]
    assert sorted(p.name for p in main.iterdir()) == ["step-4", "step-5"]
    assert sorted(p.name for p in (main / "step-5").iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
        "__dcp__.json",
        "__extra__.pt",
        "__rng__.0.pt",
        "__rng__.1.pt",
        MANIFEST,
        "sched.pt",
    ]
    info = json.loads((main / "step-5" / "__dcp__.json").read_text())
    assert info == {
        "format": "dcp",
        "version": 1,
        "world_size": 2,
        "objects": {"model": "module", "opt": "optimizer", "table": "stateful"},
        "replicated": ["sched"],
    }
    manifest = json.loads((main / "step-5" / MANIFEST).read_text())
    assert len(manifest["files"]) == 8
    legacy = json.loads((saved / "legacy" / "step-1" / "__dcp__.json").read_text())
    assert legacy["objects"] == {"legacy": "stateful"}


@pytest.mark.xdist_group("torch-ddp")
def test_restore_with_one_process_reshards(saved: Path) -> None:
    objs = setup(1, seed=7)
    mgr = CheckpointManager(saved / "main")
    assert mgr.restore(**objs) == 5
    assert mgr.extra == {"at": 5}
    assert same(full_state(objs), expected(saved / "full-5.pt"))

    objs = setup(1, seed=8)
    assert CheckpointManager(saved / "enc", encrypt_key=KEY).restore(**objs) == 5
    assert same(full_state(objs), expected(saved / "full-5.pt"))


@pytest.mark.xdist_group("torch-ddp")
def test_encrypted_sharded_files(saved: Path) -> None:
    step = saved / "enc" / "step-5"
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp", "__rng__.1.pt", "sched.pt"):
        assert (step / name).read_bytes().startswith(b"GLENC1"), name
    objs = setup(1, seed=9)
    with pytest.raises(Permanent, match="wrong key"):
        CheckpointManager(saved / "enc", encrypt_key="33" * 32).restore(**objs)
    with pytest.raises(Permanent, match="encrypted"):
        CheckpointManager(saved / "enc").restore(**objs)


def _break(base: Path, name: str, how: str) -> Path:
    target = base / name
    shutil.copytree(base / "main", target)
    shard = target / "step-5" / "__1_0.distcp"
    if how == "flip":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 1
        shard.write_bytes(bytes(data))
    elif how == "truncate":
        shard.write_bytes(shard.read_bytes()[:-7])
    else:
        shard.unlink()
    return target


@pytest.mark.xdist_group("torch-ddp")
def test_two_ranks_restore_exactly_and_reshard(saved: Path) -> None:
    """Fresh 2-rank group: exact state and continuation; corrupt shard skipped; encrypted; a
    checkpoint saved by one process (sharded=True, and a plain replicated one) → 2 FSDP ranks."""
    _break(saved, "corrupt", "flip")
    for how in ("truncate", "missing"):
        assert CheckpointManager(_break(saved, how, how)).list() == [4]
    objs = setup(1, seed=4)
    del objs["table"]
    torch.manual_seed(5)
    train(objs, 0, 3)
    torch.save(full_state(objs), saved / "one.pt")
    one = CheckpointManager(saved / "one", async_save=False, sharded=True)
    one.save(3, **objs)
    assert (saved / "one" / "step-3" / "__0_0.distcp").exists()
    CheckpointManager(saved / "rep", async_save=False).save(3, **objs)
    run_ranks("restore", saved)


# -- in one process -----------------------------------------------------------------------------


def test_single_process_sharded_round_trip_and_keep(tmp_path: Path) -> None:
    objs = setup(1, seed=0)
    train(objs, 0, 2)
    mgr = CheckpointManager(tmp_path, keep=2, sharded=True)
    mgr.save(1, **objs)
    mgr.save(2, extra={"n": 2}, **objs)
    want = full_state(objs)
    train(objs, 0, 3)
    after = full_state(objs)
    mgr.save(3, **objs)  # a third save prunes step 1
    mgr.wait()
    assert mgr.list() == [2, 3]
    shutil.rmtree(tmp_path / "step-3")

    fresh = setup(1, seed=1)
    loader = CheckpointManager(tmp_path)  # the format is read from the checkpoint
    assert loader.restore(**fresh) == 2
    assert loader.extra == {"n": 2}
    assert same(full_state(fresh), want)
    train(fresh, 0, 3)
    assert same(full_state(fresh), after)


def test_single_process_sharded_mirror_store(tmp_path: Path) -> None:
    objs = setup(1, seed=0)
    remote = f"local://{tmp_path / 'remote'}"
    mgr = CheckpointManager(tmp_path / "local", keep=1, store=remote, sharded=True)
    mgr.save(1, **objs)
    train(objs, 0, 1)
    mgr.save(2, **objs)
    mgr.wait()
    assert sorted(p.name for p in (tmp_path / "remote").iterdir()) == ["step-2"]
    assert (tmp_path / "remote" / "step-2" / ".metadata").exists()
    fresh = setup(1, seed=1)
    assert CheckpointManager(tmp_path / "new", store=remote).restore(**fresh) == 2
    assert same(full_state(fresh), full_state(objs))


def test_single_process_encrypted_round_trip(tmp_path: Path) -> None:
    objs = setup(1, seed=0)
    train(objs, 0, 1)
    CheckpointManager(tmp_path, sharded=True, encrypt_key=KEY, async_save=False).save(1, **objs)
    assert (tmp_path / "step-1" / "__0_0.distcp").read_bytes().startswith(b"GLENC1")
    fresh = setup(1, seed=1)
    assert CheckpointManager(tmp_path, encrypt_key=KEY).restore(**fresh) == 1
    assert same(full_state(fresh), full_state(objs))


def test_optimizer_needs_its_module_and_objects_are_named(tmp_path: Path) -> None:
    objs = setup(1, seed=0)
    mgr = CheckpointManager(tmp_path, sharded=True, async_save=False)
    with pytest.raises(UserInputError, match="optimizer 'opt' needs its model"):
        mgr.save(1, opt=objs["opt"])
    mgr.save(1, model=objs["model"], opt=objs["opt"])
    with pytest.raises(UserInputError, match="has no sched"):
        mgr.restore(model=objs["model"], sched=objs["sched"])
    with pytest.raises(UserInputError, match="opt was saved as optimizer state, not stateful"):
        mgr.restore(opt=objs["sched"])


def test_auto_mode_stays_replicated_for_plain_state(tmp_path: Path) -> None:
    objs = setup(1, seed=0)
    mgr = CheckpointManager(tmp_path, async_save=False)
    mgr.save(1, **objs)
    assert not (tmp_path / "step-1" / "__dcp__.json").exists()
    assert (tmp_path / "step-1" / "model.pt").exists()


if __name__ == "__main__":
    rank_main(sys.argv[1], sys.argv[2])
