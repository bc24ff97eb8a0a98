"""tuned_loader / ResumableLoader: settings from the machine, sharding, exact resume.

Real torch DataLoaders (with and without worker processes), a real CheckpointManager and two real
gloo ranks; ``DistributedSampler`` is the reference for the shard semantics.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset, DistributedSampler, IterableDataset

from gpulease.errors import UserInputError
from gpulease.train import CheckpointManager
from gpulease.train.loader import (
    MAX_WORKERS,
    ResumableLoader,
    auto_prefetch,
    auto_workers,
    epoch_order,
    rank_batches,
    tuned_loader,
)
from gpulease.train.loader import _local_world_size as local_world_size

ROOT = Path(__file__).resolve().parents[2]


class Indices(Dataset[int]):
    """Sample ``i`` is ``i``; records which indices were loaded (in this process)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        self.loaded.append(index)
        return index


class Stream(IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(10))


def flat(batches: list[list[int]]) -> list[int]:
    return list(chain.from_iterable(batches))


def one_epoch(loader: ResumableLoader) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


def take(loader: ResumableLoader, count: int) -> list[list[int]]:
    """The next ``count`` batches, crossing epochs; stops mid-iteration like a preempted job."""
    out: list[list[int]] = []
    while len(out) < count:
        for batch in loader:
            out.append(batch.tolist())
            if len(out) == count:
                break
    return out


def until_epoch(loader: ResumableLoader, epoch: int) -> list[list[int]]:
    out: list[list[int]] = []
    while loader.epoch < epoch:
        out.extend(one_epoch(loader))
    return out


def reference(size: int, seed: int, epoch: int, rank: int = 0, world: int = 1) -> list[int]:
    sampler: DistributedSampler[int] = DistributedSampler(
        Indices(size), num_replicas=world, rank=rank, seed=seed
    )
    sampler.set_epoch(epoch)
    return list(sampler)


# -- settings ----------------------------------------------------------------------------------


def test_settings_follow_the_machine_rule() -> None:
    loader = tuned_loader(Indices(1000), 10)
    s = loader.settings
    cpus = len(os.sched_getaffinity(0))
    assert s.cpus == cpus
    assert s.num_workers == (0 if cpus <= 1 else min(MAX_WORKERS, cpus - 1))
    assert s.num_workers <= max(0, cpus - 1)
    assert s.pin_memory == torch.cuda.is_available()
    assert s.persistent_workers == (s.num_workers > 0)
    if s.num_workers:
        assert s.prefetch_factor is not None and 2 <= s.prefetch_factor <= 4
    else:
        assert s.prefetch_factor is None
    assert (s.distributed, s.rank, s.world_size, s.local_world_size) == (False, 0, 1, 1)
    assert s.as_dict()["reason"] == s.reason and s.reason


def test_worker_and_prefetch_rules() -> None:
    assert auto_workers(1, 1, 10_000, 100)[0] == 0  # one core: nothing to spare
    assert auto_workers(16, 2, 10_000, 100)[0] == 7  # 8 cores per rank, one for the trainer
    assert auto_workers(64, 1, 10_000, 100)[0] == MAX_WORKERS
    assert auto_workers(16, 1, 10_000, 3)[0] == 3  # no more workers than batches
    assert auto_workers(16, 1, 10, 3) == (0, "tiny dataset (10 < 64 samples)")
    assert [auto_prefetch(w) for w in (0, 1, 2, 3, 4, 8)] == [None, 4, 4, 3, 2, 2]


def test_local_world_size_from_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert local_world_size(8) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "four")
    with pytest.raises(UserInputError, match=r"\$LOCAL_WORLD_SIZE"):
        local_world_size(8)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert local_world_size(1) == 1


def test_explicit_settings_are_kept_and_validated() -> None:
    loader = tuned_loader(list(range(100)), 10, num_workers=0, pin_memory=False)
    assert loader.settings.num_workers == 0 and loader.settings.reason == "num_workers given"
    assert flat(one_epoch(loader)) == reference(100, 0, 0)  # a plain list is a map-style dataset
    cases: list[tuple[dict[str, Any], str]] = [
        ({"num_workers": -1}, "num_workers="),
        ({"num_workers": 0, "prefetch_factor": 2}, "prefetch_factor="),
        ({"num_workers": 0, "persistent_workers": True}, "persistent_workers=True"),
        ({"num_workers": 1, "prefetch_factor": 0}, "prefetch_factor="),
        ({"distributed": True}, "init_process_group"),
    ]
    for kwargs, needle in cases:
        with pytest.raises(UserInputError, match=needle):
            tuned_loader(Indices(100), 10, **kwargs)
    with pytest.raises(UserInputError, match="batch_size="):
        tuned_loader(Indices(100), 0)
    with pytest.raises(UserInputError, match="map-style"):
        tuned_loader(Stream(), 2)
    with pytest.raises(UserInputError, match="__getitem__ and __len__"):
        tuned_loader(object(), 2)


# -- epochs ------------------------------------------------------------------------------------


def test_full_epoch_covers_every_sample_once() -> None:
    loader = tuned_loader(Indices(103), 10, seed=5, num_workers=0)
    assert len(loader) == 11
    batches = one_epoch(loader)
    assert len(batches) == 11 and [len(b) for b in batches] == [10] * 10 + [3]
    assert sorted(flat(batches)) == list(range(103))
    assert flat(batches) == reference(103, 5, 0)  # DistributedSampler's order at world size 1
    assert (loader.epoch, loader.position) == (1, 0)
    dropping = tuned_loader(Indices(103), 10, drop_last=True, num_workers=0)
    assert len(dropping) == 10 and len(one_epoch(dropping)) == 10


def test_order_is_deterministic_by_seed_and_changes_per_epoch() -> None:
    a, b, c = (tuned_loader(Indices(64), 8, seed=s, num_workers=0) for s in (1, 1, 2))
    first_a, first_b, first_c = one_epoch(a), one_epoch(b), one_epoch(c)
    assert first_a == first_b
    assert first_a != first_c
    second_a = one_epoch(a)
    assert second_a != first_a and sorted(flat(second_a)) == list(range(64))
    assert flat(second_a) == reference(64, 1, 1)
    assert a.epoch == 2
    a.set_epoch(1)
    assert one_epoch(a) == second_a
    unshuffled = tuned_loader(Indices(20), 8, shuffle=False, num_workers=0)
    assert flat(one_epoch(unshuffled)) == list(range(20))


# -- resuming ----------------------------------------------------------------------------------


def test_resume_mid_epoch_skips_without_loading() -> None:
    straight = until_epoch(tuned_loader(Indices(50), 4, seed=9, num_workers=0), 2)
    data = Indices(50)
    loader = tuned_loader(data, 4, seed=9, num_workers=0)
    head = take(loader, 5)
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["position"] == 5 and state["samples_seen"] == 20
    fresh = Indices(50)
    resumed = tuned_loader(fresh, 4, seed=123, num_workers=0)  # the saved seed wins
    resumed.load_state_dict(state)
    assert (resumed.epoch, resumed.position, resumed.seed) == (0, 5, 9)
    tail = one_epoch(resumed)
    assert sorted(fresh.loaded) == sorted(flat(tail))  # consumed batches never loaded
    tail += until_epoch(resumed, 2)
    assert head + tail == straight


def test_resume_across_the_epoch_boundary() -> None:
    straight = until_epoch(tuned_loader(Indices(30), 4, seed=2, num_workers=0), 3)
    assert len(straight) == 3 * 8
    for stop in (8, 11):  # right after epoch 0's last batch; mid epoch 1
        loader = tuned_loader(Indices(30), 4, seed=2, num_workers=0)
        head = take(loader, stop)
        state = loader.state_dict()
        assert (state["epoch"], state["position"]) == divmod(stop, 8)
        resumed = tuned_loader(Indices(30), 4, seed=2, num_workers=0)
        resumed.load_state_dict(state)
        assert head + until_epoch(resumed, 3) == straight


def test_resume_with_persistent_workers() -> None:
    def make() -> ResumableLoader:
        return tuned_loader(Indices(40), 4, seed=4, num_workers=2, persistent_workers=True)

    straight = until_epoch(make(), 2)
    loader = make()
    assert loader.settings.num_workers == 2 and loader.settings.persistent_workers
    head = take(loader, 13)  # mid epoch 1, after a worker-prefetched epoch 0
    state = loader.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert head + until_epoch(resumed, 2) == straight
    stale = iter(loader)
    assert next(stale).tolist() == straight[13]
    assert one_epoch(loader) == straight[14:]  # a new iteration continues where the last stopped
    with pytest.raises(UserInputError, match="superseded"):
        next(stale)
    assert len(multiprocessing.active_children()) >= 2
    for each in (loader, resumed):
        each.close()
    assert multiprocessing.active_children() == []
    assert len(one_epoch(loader)) == 10  # a closed loader starts new workers when iterated
    loader.close()


def test_checkpoint_manager_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    loader = tuned_loader(Indices(40), 4, seed=7, num_workers=0)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    mgr = CheckpointManager(tmp_path, async_save=False)
    mgr.save(3, model=model, loader=loader)
    expected = next(iterator).tolist()

    restored_model = torch.nn.Linear(1, 1)
    restored = tuned_loader(Indices(40), 4, num_workers=0)
    assert CheckpointManager(tmp_path).restore(model=restored_model, loader=restored) == 3
    assert (restored.epoch, restored.position, restored.seed) == (0, 3, 7)
    assert next(iter(restored)).tolist() == expected
    assert torch.equal(restored_model.weight, model.weight)


def test_bad_state_is_refused_by_name() -> None:
    loader = tuned_loader(Indices(40), 4, num_workers=0)
    good = loader.state_dict()
    cases: list[tuple[Any, str]] = [
        ([1, 2], "must be a dict"),
        ({k: v for k, v in good.items() if k != "position"}, "missing 'position'"),
        ({**good, "epoch": "1"}, "'epoch' must be an int"),
        ({**good, "seed": True}, "'seed' must be an int"),
        ({**good, "shuffle": 1}, "'shuffle' must be a bool"),
        ({**good, "epoch": -1}, "'epoch' must be >= 0"),
        ({**good, "world_size": 0}, "'world_size' must be >= 1"),
        ({**good, "version": 99}, "version 99"),
        ({**good, "position": 11}, "position 11 is beyond the epoch's 10 batches"),
        ({**good, "samples_seen": 41}, "samples_seen 41 is beyond dataset_size 40"),
        ({**good, "dataset_size": 41}, "dataset_size is 41 but this dataset has 40"),
        ({**good, "shuffle": False}, "shuffle is False"),
    ]
    for state, needle in cases:
        with pytest.raises(UserInputError, match=needle):
            loader.load_state_dict(state)
    assert (loader.epoch, loader.position) == (0, 0)


def test_resume_at_another_world_size_continues_from_the_global_offset() -> None:
    # Two ranks (batch 4 each) consumed 3 batches each, i.e. the first 24 samples of the epoch.
    order = epoch_order(50, 1, 0, True)
    ranks = [
        rank_batches(order, 0, rank=r, world=2, batch_size=4, drop_last=False)[:3] for r in (0, 1)
    ]
    consumed = [int(i) for batches in ranks for b in batches for i in b]
    assert sorted(consumed) == sorted(order[:24].tolist())
    state = {
        "version": 1,
        "epoch": 0,
        "position": 3,
        "samples_seen": 24,
        "seed": 1,
        "batch_size": 4,
        "world_size": 2,
        "dataset_size": 50,
        "shuffle": True,
        "drop_last": False,
    }
    same_global_batch = tuned_loader(Indices(50), 8, num_workers=0)
    same_global_batch.load_state_dict(state)
    assert same_global_batch.position == 3
    rest = flat(one_epoch(same_global_batch))
    assert sorted(consumed + rest) == list(range(50))

    other_global_batch = tuned_loader(Indices(50), 5, num_workers=0)
    other_global_batch.load_state_dict(state)
    assert (other_global_batch.position, other_global_batch.samples_seen) == (4, 24)
    rest = flat(one_epoch(other_global_batch))
    assert rest == order[24:].tolist()
    assert other_global_batch.epoch == 1


def test_importing_the_modules_does_not_import_torch() -> None:
    code = (
        "import sys, gpulease.train.loader, gpulease.train.onnx_export; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"


# -- property: stop anywhere, resume, same sequence --------------------------------------------


@st.composite
def stop_cases(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "dataset": Indices(draw(st.integers(0, 40), label="size")),
        "batch_size": draw(st.integers(1, 9), label="batch_size"),
        "drop_last": draw(st.booleans(), label="drop_last"),
        "shuffle": draw(st.booleans(), label="shuffle"),
        "seed": draw(st.integers(0, 2**31), label="seed"),
        "num_workers": 0,
    }


@settings(max_examples=100, deadline=None)
@given(case=stop_cases(), data=st.data())
def test_stop_and_resume_anywhere_gives_the_uninterrupted_sequence(
    case: dict[str, Any], data: st.DataObject
) -> None:
    straight = until_epoch(tuned_loader(**case), 2)
    stop = data.draw(st.integers(0, len(straight)), label="stop")
    loader = tuned_loader(**case)
    head = take(loader, stop)
    resumed = tuned_loader(**case)
    resumed.load_state_dict(loader.state_dict())
    assert head + until_epoch(resumed, 2) == straight


# -- two real gloo ranks -----------------------------------------------------------------------


def _ddp_rank(rank: int, port: int, out_dir: str, single_state: dict[str, Any]) -> None:
    """One rank: shard an epoch, stop mid epoch 1 and resume; resume a world-size-1 state."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group(
        "gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60)
    )
    try:
        result: dict[str, Any] = {}
        loader = tuned_loader(Indices(51), 4, seed=3, num_workers=0)
        s = loader.settings
        result["settings"] = [s.distributed, s.rank, s.world_size, s.local_world_size]
        result["epoch0"] = one_epoch(loader)
        result["head"] = take(loader, 2)
        state = loader.state_dict()
        result["state"] = state
        result["tail"] = one_epoch(loader)
        resumed = tuned_loader(Indices(51), 4, seed=3, num_workers=0)
        resumed.load_state_dict(state)
        result["resumed_tail"] = one_epoch(resumed)
        grown = tuned_loader(Indices(51), 4, num_workers=0)
        grown.load_state_dict(single_state)
        result["grown_tail"] = one_epoch(grown)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_two_gloo_ranks_get_disjoint_shards_and_resume(tmp_path: Path) -> None:
    single = tuned_loader(Indices(51), 8, seed=3, num_workers=0)  # global batch 8 = 2 ranks x 4
    single_head = take(single, 2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torch.multiprocessing.spawn(
        _ddp_rank, args=(port, str(tmp_path), single.state_dict()), nprocs=2, join=True
    )
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, result in enumerate(results):
        assert result["settings"] == [True, rank, 2, 2]
        assert flat(result["epoch0"]) == reference(51, 3, 0, rank, 2)
        assert flat(result["head"] + result["tail"]) == reference(51, 3, 1, rank, 2)
        assert result["state"]["epoch"] == 1 and result["state"]["position"] == 2
        assert result["resumed_tail"] == result["tail"]
    shards = [set(flat(r["epoch0"])) for r in results]
    assert len(flat(results[0]["epoch0"])) == len(flat(results[1]["epoch0"])) == 26
    assert shards[0] | shards[1] == set(range(51))
    assert len(shards[0] & shards[1]) == 1  # 51 samples padded to 52: one repeats
    # a world-size-1 run stopped after 16 samples; two ranks deal the rest of its epoch
    grown = flat(results[0]["grown_tail"]) + flat(results[1]["grown_tail"])
    order = epoch_order(51, 3, 0, True).tolist()
    assert sorted(flat(single_head)) == sorted(order[:16])
    assert sorted(grown) == sorted([*order[16:], order[0]])  # padded from the epoch's start
