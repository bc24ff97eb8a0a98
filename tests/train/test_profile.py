"""``gpulease.train.profile`` around a real torch CPU training loop: the trace and the summary it
writes (top operators, the split of step time), communication under a real gloo group, a loop
that ends early, bad arguments; and the split's arithmetic on spans whose figures are known."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from gpulease.atomic import is_temp_name
from gpulease.errors import UserInputError
from gpulease.train import profile
from gpulease.train.profile_summary import Span, split_window


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
                y: torch.Tensor) -> None:  # fmt: skip
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    opt.step()


def _assert_split_adds_up(summary: dict[str, object]) -> dict[str, dict[str, float]]:
    split = summary["split"]
    assert isinstance(split, dict)
    assert set(split) == {"compute", "communication", "data_wait", "other"}
    assert sum(p["share"] for p in split.values()) == pytest.approx(1.0, abs=0.002)
    assert sum(p["ms"] for p in split.values()) == pytest.approx(summary["wall_ms"], abs=0.01)
    return split


def test_a_cpu_training_loop_writes_its_trace_and_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULEASE_WORK_DIR", str(tmp_path))
    monkeypatch.setenv("GPULEASE_NODE_RANK", "2")
    monkeypatch.setenv("GPULEASE_TASK_ID", "task-7")
    monkeypatch.delenv("RANK", raising=False)
    model, opt = _model()
    data = TensorDataset(torch.randn(160, 32), torch.randint(0, 4, (160,)))
    done_at = None
    with profile(steps=3) as prof:
        for i, (x, y) in enumerate(DataLoader(data, batch_size=16)):
            _train_step(model, opt, x, y)
            prof.step()
            if prof.done and done_at is None:
                done_at = i
    assert done_at == 4  # wait 1 + warmup 1 + 3 recorded: written at the 5th step, then stopped
    assert prof._torch is None and prof.step_num == 10

    out = tmp_path / "profile" / "rank-2"
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "trace.json.gz"]
    assert not [p for p in out.iterdir() if is_temp_name(p.name)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == prof.summary
    assert summary["format"] == "gpulease-profile" and summary["device"] == "cpu"
    assert (summary["rank"], summary["node_rank"], summary["task_id"]) == (2, 2, "task-7")
    assert summary["steps"] == 3 and len(summary["step_ms"]) == 3
    assert summary["wall_ms"] == pytest.approx(sum(summary["step_ms"]), abs=0.01)
    split = _assert_split_adds_up(summary)
    assert split["compute"]["ms"] > 0 and split["data_wait"]["ms"] > 0  # the DataLoader's spans
    assert split["communication"]["ms"] == 0

    ops = summary["top_ops"]
    names = [op["name"] for op in ops]
    assert "aten::addmm" in names and not [n for n in names if n.startswith("ProfilerStep")]
    assert [op["self_ms"] for op in ops] == sorted((op["self_ms"] for op in ops), reverse=True)
    assert 0 < sum(op["share"] for op in ops) <= 1.0001
    addmm = ops[names.index("aten::addmm")]
    assert addmm["calls"] == 3 * 2  # two Linear layers' forward, three steps

    trace = json.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))
    steps = {
        e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep")
    }
    assert len(steps) == 3


def test_communication_under_gloo_is_its_own_share(tmp_path: Path) -> None:
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())  # type: ignore[attr-defined]
    try:
        model, opt = _model()
        with profile(steps=3, wait=0, out=tmp_path / "p") as prof:
            for _ in range(5):
                x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                for param in model.parameters():
                    assert param.grad is not None
                    dist.all_reduce(param.grad)
                opt.step()
                prof.step()
    finally:
        dist.destroy_process_group()
    assert prof.summary is not None and prof.rank == 0
    split = _assert_split_adds_up(prof.summary)
    assert split["communication"]["ms"] > 0 and split["compute"]["ms"] > 0
    assert "c10d::allreduce_" in [op["name"] for op in prof.summary["top_ops"]]


def test_a_loop_that_ends_early_writes_the_steps_it_made(tmp_path: Path) -> None:
    model, opt = _model()
    with profile(steps=10, wait=0, warmup=1, out=tmp_path) as prof:
        for _ in range(4):
            _train_step(model, opt, torch.randn(8, 32), torch.randint(0, 4, (8,)))
            prof.step()
    assert prof.summary is not None and prof.summary["steps"] == 3
    assert (tmp_path / "summary.json").exists() and (tmp_path / "trace.json.gz").exists()
    _assert_split_adds_up(prof.summary)


def test_a_failed_write_is_logged_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("not a directory")
    model, opt = _model()
    with profile(steps=1, wait=0, out=tmp_path / "file" / "p") as prof:
        for _ in range(3):
            _train_step(model, opt, torch.randn(8, 32), torch.randint(0, 4, (8,)))
            prof.step()
    assert prof.done and prof.summary is None and prof._torch is None and prof.step_num == 3
    assert prof.error is not None and "NotADirectoryError" in prof.error
    assert "profile: writing rank" in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"wait": -1}, "wait"),
        ({"warmup": 1.5}, "warmup"),
        ({"steps": True}, "steps"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(UserInputError, match=rf"profile\({field}="):
        profile(**kwargs)  # type: ignore[arg-type]


def test_the_split_of_known_spans() -> None:
    """CPU timeline: exposed communication only; ops inside the DataLoader are data wait; the
    time before the first operator is data wait; the rest is other."""
    cpu = [
        Span("enumerate(DataLoader)#_Iter.__next__", 0, 10, annotation=True),
        Span("aten::stack", 2, 8, parents=("enumerate(DataLoader)#_Iter.__next__",)),
        Span("aten::addmm", 15, 50),
        Span("gloo:all_reduce", 40, 70),  # another thread: 40..50 overlaps compute
        Span("Optimizer.step#SGD.step", 70, 90, annotation=True),  # no operator inside
    ]
    assert split_window(cpu, (0, 100), cuda=False) == {
        "compute": 35, "communication": 20, "data_wait": 15, "other": 30,
    }  # fmt: skip
    cuda = [
        Span("enumerate(DataLoader)#_Iter.__next__", 0, 30, annotation=True),
        Span("aten::mm", 30, 35),  # the CPU side of a CUDA run: launches, not the busy time
        Span("sm90_gemm", 20, 60, device="cuda"),
        Span("ncclDevKernel_AllReduce_Sum_f32", 50, 80, device="cuda"),
    ]
    assert split_window(cuda, (0, 100), cuda=True) == {
        "compute": 40, "communication": 20, "data_wait": 20, "other": 20,
    }  # fmt: skip
