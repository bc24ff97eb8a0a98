"""export_onnx: real exports (torch.onnx), real onnx.checker and real onnxruntime comparisons."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from gpulease.errors import Permanent, UserInputError
from gpulease.train.onnx_export import MISSING_DEPS, OnnxExport, export_onnx


def run_onnx(path: Path, feed: dict[str, torch.Tensor]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return list(session.run(None, {k: v.numpy() for k, v in feed.items()}))


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.head = nn.Linear(8 * 8 * 8, 5)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(image).flatten(1))


class TwoInTwoOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(5, 6)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.tanh(self.a(x) + self.b(y))
        return hidden, hidden.sum(dim=1)


class CountsCalls(nn.Module):
    """Scales by a Python-side call counter: the export trace bakes in the count it saw (and
    ``torch.export`` then restores the attribute), later PyTorch calls count on, so the ONNX graph
    genuinely diverges from the model by the second check at the latest."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.linear(x) * self.calls


class BatchOfThreeOnly(nn.Module):
    """Python control flow on the batch size: the exported graph fixes the example's size."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) if x.shape[0] == 3 else -self.linear(x)


class SignBranch(nn.Module):
    """Data-dependent control flow: ``torch.export`` refuses it; TorchScript traces one path."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) if x.sum() > 0 else -self.linear(x)


def test_mlp_exports_checks_and_serves_other_batch_sizes(tmp_path: Path) -> None:
    model = mlp()
    model.train()
    target = tmp_path / "mlp.onnx"
    target.write_bytes(b"an older export")  # replaced atomically
    x = torch.randn(3, 8)
    result = export_onnx(model, x, target)
    assert isinstance(result, OnnxExport)
    assert result.path == target and target.is_file()
    assert result.exporter == "dynamo"
    assert result.input_names == ("input",) and result.output_names == ("output_0",)
    assert result.checked_batch_sizes == (3, 6)
    assert result.max_abs_diff < 1e-5
    assert result.opset >= 18 and result.data_files == ()
    assert model.training  # put back in the mode it had
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.onnx"]  # no staging leftovers
    onnx.checker.check_model(str(target))
    model.eval()
    five = torch.randn(5, 8)
    (got,) = run_onnx(target, {"input": five})
    with torch.no_grad():
        np.testing.assert_allclose(got, model(five).numpy(), rtol=1e-4, atol=1e-5)


def test_conv_net_exports_with_batchnorm_in_eval_mode(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = ConvNet()
    model.train()
    model(torch.randn(4, 3, 16, 16))  # move the BatchNorm running statistics off their defaults
    result = export_onnx(model, torch.randn(2, 3, 16, 16), tmp_path / "conv.onnx", opset=18)
    assert result.opset == 18
    assert result.input_names == ("image",)
    assert result.checked_batch_sizes == (2, 4)
    assert result.max_abs_diff < 1e-4


def test_two_inputs_two_outputs_with_names(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = TwoInTwoOut()
    inputs = (torch.randn(2, 4), torch.randn(2, 5))
    result = export_onnx(
        model,
        inputs,
        tmp_path / "two.onnx",
        input_names=["left", "right"],
        output_names=["hidden", "total"],
    )
    assert (result.input_names, result.output_names) == (("left", "right"), ("hidden", "total"))
    assert result.checked_batch_sizes == (2, 4)
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["left", "right"]
    assert [o.name for o in session.get_outputs()] == ["hidden", "total"]
    with pytest.raises(UserInputError, match="output_names= has 1 names for 2 outputs"):
        export_onnx(model, inputs, tmp_path / "bad.onnx", output_names=["only"])


def test_external_data_files_land_beside_the_model(tmp_path: Path) -> None:
    result = export_onnx(mlp(), torch.randn(2, 8), tmp_path / "big.onnx", external_data=True)
    assert result.data_files == (tmp_path / "big.onnx.data",)
    assert result.data_files[0].stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]
    (got,) = run_onnx(result.path, {"input": torch.randn(4, 8)})
    assert got.shape == (4, 3)


def test_diverging_model_raises_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "counter.onnx"
    with pytest.raises(Permanent, match=r"output 'output_0' differs .* max abs diff [0-9.]+"):
        export_onnx(CountsCalls(), torch.randn(3, 4), target)
    assert list(tmp_path.iterdir()) == []


def test_batch_size_specialised_graph_fails_the_dynamic_batch_check(tmp_path: Path) -> None:
    with pytest.raises(Permanent, match=r"(?s)batch size 6.*dynamic_batch=False"):
        export_onnx(BatchOfThreeOnly(), torch.randn(3, 4), tmp_path / "b.onnx")
    assert list(tmp_path.iterdir()) == []
    fixed = export_onnx(
        BatchOfThreeOnly(), torch.randn(3, 4), tmp_path / "b.onnx", dynamic_batch=False
    )
    assert fixed.checked_batch_sizes == (3,)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the one path it traced
def test_torchscript_fallback_when_torch_export_cannot_capture(tmp_path: Path) -> None:
    torch.manual_seed(3)
    with pytest.warns(UserWarning, match="used the TorchScript exporter"):
        result = export_onnx(SignBranch(), torch.ones(2, 4), tmp_path / "sign.onnx")
    assert result.exporter == "torchscript"
    assert result.checked_batch_sizes == (2, 4)
    assert result.max_abs_diff < 1e-5


def test_check_false_skips_only_the_comparison(tmp_path: Path) -> None:
    result = export_onnx(CountsCalls(), torch.randn(3, 4), tmp_path / "c.onnx", check=False)
    assert result.checked_batch_sizes == () and result.max_abs_diff == 0.0
    assert result.path.is_file()


def test_bad_arguments_are_user_errors(tmp_path: Path) -> None:
    x = torch.randn(2, 8)
    with pytest.raises(UserInputError, match=r"directory '.*missing' does not exist"):
        export_onnx(mlp(), x, tmp_path / "missing" / "m.onnx")
    with pytest.raises(UserInputError, match="is a directory"):
        export_onnx(mlp(), x, tmp_path)
    with pytest.raises(UserInputError, match=r"example_inputs\[1\] must be a torch.Tensor"):
        export_onnx(mlp(), (x, 3), tmp_path / "m.onnx")
    with pytest.raises(UserInputError, match=r"model must be a torch\.nn\.Module"):
        export_onnx(lambda t: t, x, tmp_path / "m.onnx")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_missing_onnxruntime_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an absent package looks like
    with pytest.raises(UserInputError) as info:
        export_onnx(mlp(), torch.randn(2, 8), tmp_path / "m.onnx")
    assert str(info.value) == MISSING_DEPS
    assert "pip install 'gpulease[onnx]'" in MISSING_DEPS
