"""setup_precision on CPU: effective modes, warnings, autocast, backward/step and scaler state.

There is no GPU here, so the CUDA paths (bf16/fp16 autocast on the GPU, the CUDA GradScaler, the
TF32 flags taking effect, the pre-Ampere fallbacks) are not tested by this file; they run in
``benchmarks/gpu/run.py`` on a GPU machine. The scaler methods are exercised with a real CPU
``GradScaler`` below.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gpulease.errors import UserInputError
from gpulease.train import CheckpointManager, Precision, setup_precision


@pytest.fixture(autouse=True)
def _restore_matmul_flags() -> Iterator[None]:
    """setup_precision sets process-wide flags; put them back for the other tests."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


def _train(prec: Precision, steps: int = 40) -> tuple[float, float]:
    """Fit a tiny linear regression; the first and last loss."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1)
    losses = []
    for _ in range(steps):
        with prec.autocast():
            loss = (model(x).float() - y).pow(2).mean()
        prec.backward(loss)
        prec.step(opt)
        opt.zero_grad()
        losses.append(loss.item())
    return losses[0], losses[-1]


def test_bf16_on_cpu_uses_cpu_autocast_without_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prec = setup_precision("bf16", "cpu")
    assert (prec.requested, prec.effective, prec.device_type) == ("bf16", "bf16", "cpu")
    assert prec.dtype is torch.bfloat16
    assert prec.scaler is None
    with prec.autocast():
        assert torch.is_autocast_enabled("cpu")
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype is torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    first, last = _train(prec)
    assert last < first * 0.2


@pytest.mark.skipif(torch.cuda.is_available(), reason="the default device is cuda there")
def test_default_device_is_cpu_without_cuda() -> None:
    assert setup_precision().device_type == "cpu"
    assert setup_precision("BF16 ").effective == "bf16"  # case and spaces are forgiven


def test_fp16_on_cpu_falls_back_to_fp32_with_warning() -> None:
    with pytest.warns(UserWarning, match=r"fp16 is not available \(.*CPU.*\); using fp32"):
        prec = setup_precision("fp16", "cpu")
    assert (prec.requested, prec.effective) == ("fp16", "fp32")
    assert prec.dtype is None and prec.scaler is None
    with prec.autocast():
        assert not torch.is_autocast_enabled("cpu")
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype is torch.float32
    assert prec.state_dict() == {}
    first, last = _train(prec)
    assert last < first * 0.2


def test_tf32_on_cpu_is_a_noop_with_warning() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    with pytest.warns(UserWarning, match=r"tf32 is not available .*; using fp32"):
        prec = setup_precision("tf32", "cpu")
    assert (prec.requested, prec.effective, prec.dtype) == ("tf32", "fp32", None)
    assert torch.backends.cuda.matmul.allow_tf32 is False  # left alone on CPU


def test_fp32_turns_tf32_off() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prec = setup_precision("fp32")
    assert (prec.effective, prec.dtype, prec.scaler) == ("fp32", None, None)
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == "highest"
    first, last = _train(prec)
    assert last < first * 0.2


def test_unknown_mode_and_bad_device_are_named() -> None:
    with pytest.raises(UserInputError, match=r"mode='int4'.*bf16, fp16, tf32, fp32"):
        setup_precision("int4")
    with pytest.raises(UserInputError, match=r"device='gpu'"):
        setup_precision("bf16", "gpu")
    if not torch.cuda.is_available():
        with pytest.raises(UserInputError, match=r"device='cuda'.*CUDA is not available"):
            setup_precision("bf16", "cuda")


def test_other_device_types_fall_back_to_fp32() -> None:
    with pytest.warns(UserWarning, match="not meta"):
        prec = setup_precision("bf16", torch.device("meta"))
    assert (prec.effective, prec.device_type) == ("fp32", "meta")


def _scaled() -> Precision:
    """A Precision with a real (CPU) GradScaler, as setup_precision builds for fp16 on CUDA."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
    return Precision("fp16", "fp16", "cpu", None, scaler)


def test_scaler_backward_step_and_state_round_trip() -> None:
    prec = _scaled()
    weight = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([weight], lr=0.1)
    prec.backward((weight * 2).sum())
    assert torch.equal(weight.grad, torch.full((3,), 2.0 * 2**10))  # scaled
    prec.unscale_(opt)
    assert torch.equal(weight.grad, torch.full((3,), 2.0))
    prec.step(opt)
    assert torch.allclose(weight.detach(), torch.full((3,), 0.8))
    first, last = _train(prec)
    assert last < first * 0.2
    state = prec.state_dict()
    assert state["scale"] > 0 and state["growth_interval"] == 3

    fresh = _scaled()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    empty = _scaled()
    empty.load_state_dict({})  # saved by a run without scaler: keep the fresh one
    assert empty.state_dict()["scale"] == 2.0**10
    with pytest.warns(UserWarning, match="dropping the saved GradScaler state"):
        setup_precision("bf16", "cpu").load_state_dict(state)


def test_precision_checkpoints_with_checkpoint_manager(tmp_path: Path) -> None:
    prec = _scaled()
    _train(prec, steps=5)
    mgr = CheckpointManager(tmp_path, async_save=False)
    mgr.save(1, precision=prec)
    restored = _scaled()
    assert mgr.restore(precision=restored) == 1
    assert restored.state_dict() == prec.state_dict()
