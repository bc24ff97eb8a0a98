"""Checked ONNX export: ``export_onnx(model, example_inputs, path)`` → :class:`OnnxExport`.

Owns turning a PyTorch model into an ONNX file that is known to compute what the model computes,
so a trained model is not locked into one serving stack:

1. export with the ``torch.export``-based ("dynamo") exporter, the default since torch 2.9, which
   needs ``onnxscript``; when it cannot capture the model (data-dependent Python control flow, say)
   fall back to the legacy TorchScript exporter, with a warning, and record which one ran;
2. write into a temporary directory beside ``path`` (external-data files of big models included);
3. ``onnx.checker.check_model``, then run onnxruntime (CPU) on ``example_inputs`` — and, with
   ``dynamic_batch``, on a batch twice as large built by repeating them — and compare every output
   with the PyTorch model's (eval mode, ``no_grad``) within ``rtol``/``atol``;
4. only then move the file(s) into place, the ``.onnx`` file last (``os.replace``, atomic).

A mismatch raises :class:`~gpulease.errors.Permanent` naming the output and the max abs diff, and
leaves nothing at ``path``. torch, onnx and onnxruntime are imported by the functions.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulease.errors import Permanent, UserInputError
from gpulease.storage.manifest import fsync_path

if TYPE_CHECKING:
    import numpy as np
    import torch

MISSING_DEPS = "export_onnx needs onnx and onnxruntime: pip install 'gpulease[onnx]'"
BATCH_AXIS = "batch"


@dataclass(frozen=True)
class OnnxExport:
    """What was exported and how it was checked.

    ``exporter`` is ``"dynamo"`` (``torch.export``-based) or ``"torchscript"`` (the fallback);
    ``max_abs_diff`` is the largest difference between onnxruntime and PyTorch over all outputs
    and ``checked_batch_sizes`` (empty with ``check=False``); ``data_files`` are external-data
    files written beside ``path`` (big models only).
    """

    path: Path
    opset: int
    exporter: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    max_abs_diff: float
    checked_batch_sizes: tuple[int, ...]
    data_files: tuple[Path, ...] = ()


# -- inputs and outputs ------------------------------------------------------------------------


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise UserInputError(MISSING_DEPS) from exc


def _as_inputs(example_inputs: Any) -> tuple[torch.Tensor, ...]:
    import torch

    items = (
        tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    )
    if not items:
        raise UserInputError("export_onnx example_inputs= is empty: pass the model's input(s)")
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise UserInputError(
                f"export_onnx example_inputs[{i}] must be a torch.Tensor, got {type(item).__name__}"
            )
    return items


def _flatten(value: Any, where: str = "output") -> list[torch.Tensor]:
    """The tensors of a model output in the exporters' order (tuples, lists, dict values)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for i, v in enumerate(value) for t in _flatten(v, f"{where}[{i}]")]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in _flatten(v, f"{where}[{k!r}]")]
    raise UserInputError(
        f"export_onnx: model {where} is a {type(value).__name__}; ONNX outputs must be tensors "
        "(or tuples, lists, dicts of them)"
    )


def _names(given: Sequence[str] | None, count: int, default: list[str], what: str) -> list[str]:
    if given is None:
        return default
    names = list(given)
    if len(names) != count:
        raise UserInputError(f"export_onnx {what}= has {len(names)} names for {count} {what[:-6]}s")
    if len(set(names)) != len(names):
        raise UserInputError(f"export_onnx {what}= has duplicate names: {names}")
    return names


def _default_input_names(model: torch.nn.Module, count: int) -> list[str]:
    """The ``forward`` parameter names (as the dynamo exporter names them), else ``input_<i>``."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in params if p.kind in kinds]
    return names[:count] if len(names) >= count else [f"input_{i}" for i in range(count)]


def _check_path(path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    if target.is_dir():
        raise UserInputError(f"export_onnx path={str(target)!r} is a directory; name a file")
    if not target.parent.is_dir():
        raise UserInputError(
            f"export_onnx path={str(target)!r}: directory {str(target.parent)!r} does not exist"
        )
    return target


# -- exporting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """One export: the model (in eval mode), its example inputs, the names of both ends."""

    model: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    input_names: list[str]
    output_names: list[str]
    output_ranks: list[int]
    dynamic_batch: bool
    opset: int | None
    external_data: bool | None


def _export_dynamo(job: _Job, out: Path) -> None:
    import torch

    dynamic_shapes: tuple[Any, ...] | None = None
    if job.dynamic_batch:
        batch = torch.export.Dim(BATCH_AXIS)
        dynamic_shapes = tuple({0: batch} if t.dim() else None for t in job.inputs)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used.*")
        warnings.filterwarnings("ignore", message=".*LeafSpec.*")
        program = torch.onnx.export(
            job.model,
            job.inputs,
            None,
            input_names=job.input_names,
            output_names=job.output_names,
            opset_version=job.opset,
            dynamo=True,
            dynamic_shapes=dynamic_shapes,
            verbose=False,
        )
        if program is None:  # pragma: no cover - dynamo=True with f=None always returns one
            raise Permanent("torch.onnx.export returned no ONNX program")
        program.save(out, external_data=job.external_data)


def _export_torchscript(job: _Job, out: Path) -> None:
    import torch

    axes: dict[str, dict[int, str]] | None = None
    if job.dynamic_batch:
        ranks = [t.dim() for t in job.inputs] + job.output_ranks
        names = job.input_names + job.output_names
        axes = {name: {0: BATCH_AXIS} for name, rank in zip(names, ranks, strict=True) if rank}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*will be removed.*")
        torch.onnx.export(
            job.model,
            job.inputs,
            str(out),
            input_names=job.input_names,
            output_names=job.output_names,
            opset_version=job.opset,
            dynamo=False,
            dynamic_axes=axes,
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _export(job: _Job, out: Path) -> str:
    """Export to ``out`` with the dynamo exporter, else the TorchScript one; return which ran."""
    try:
        _export_dynamo(job, out)
        return "dynamo"
    except Exception as dynamo_error:
        for leftover in out.parent.iterdir():
            leftover.unlink()
        try:
            _export_torchscript(job, out)
        except Exception as ts_error:
            raise Permanent(
                f"ONNX export failed with both exporters: dynamo ({_first_line(dynamo_error)}); "
                f"torchscript ({_first_line(ts_error)})"
            ) from ts_error
        warnings.warn(
            f"export_onnx: the dynamo exporter could not capture the model "
            f"({_first_line(dynamo_error)}); used the TorchScript exporter, which traces one "
            "path through Python control flow",
            stacklevel=4,
        )
        return "torchscript"


# -- checking ----------------------------------------------------------------------------------


def _to_numpy(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    return tensor.detach().cpu().numpy()


def _compare(
    name: str,
    expected: torch.Tensor,
    actual: np.ndarray[Any, Any],
    batch: int,
    tolerance: tuple[float, float],
) -> float:
    """Max abs diff between PyTorch and onnxruntime; ``Permanent`` beyond tolerance."""
    import numpy as np

    want = _to_numpy(expected)
    if want.shape != actual.shape:
        raise Permanent(
            f"ONNX output {name!r} has shape {list(actual.shape)} but PyTorch gives "
            f"{list(want.shape)} at batch size {batch}"
        )
    if want.size == 0:
        return 0.0
    want64, got64 = want.astype(np.float64), actual.astype(np.float64)
    rtol, atol = tolerance
    close = np.isclose(got64, want64, rtol=rtol, atol=atol, equal_nan=True)
    diff = np.abs(got64 - want64)
    both_nan = np.isnan(got64) & np.isnan(want64)
    max_diff = float(np.nanmax(np.where(both_nan, 0.0, diff))) if diff.size else 0.0
    if not bool(close.all()):
        raise Permanent(
            f"ONNX output {name!r} differs from PyTorch at batch size {batch}: max abs diff "
            f"{max_diff:.3g} exceeds rtol={rtol}, atol={atol}"
        )
    return max_diff


def _batches(inputs: tuple[torch.Tensor, ...], dynamic_batch: bool) -> list[tuple[Any, ...]]:
    import torch

    sizes = [t.shape[0] for t in inputs if t.dim()]
    first = int(sizes[0]) if sizes else 1
    out: list[tuple[Any, ...]] = [(first, inputs)]
    if dynamic_batch and sizes:
        doubled = tuple(torch.cat([t, t]) if t.dim() else t for t in inputs)
        out.append((2 * first, doubled))
    return out


def _check(job: _Job, onnx_path: Path, tolerance: tuple[float, float]) -> tuple[float, list[int]]:
    """Run onnxruntime on the example batch (and a doubled one); compare with PyTorch."""
    import onnxruntime as ort
    import torch

    try:
        session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise Permanent(f"onnxruntime cannot load the exported model: {exc}") from exc
    graph_inputs = [i.name for i in session.get_inputs()]
    if sorted(graph_inputs) != sorted(job.input_names):
        raise Permanent(
            f"exported graph inputs {graph_inputs} differ from {job.input_names}: the exporter "
            "dropped or renamed an input (is one of example_inputs unused by the model?)"
        )
    max_diff, checked = 0.0, list[int]()
    for batch, batch_inputs in _batches(job.inputs, job.dynamic_batch):
        with torch.no_grad():
            expected = _flatten(job.model(*batch_inputs))
        feed = {n: _to_numpy(t) for n, t in zip(job.input_names, batch_inputs, strict=True)}
        try:
            actual = session.run(job.output_names, feed)
        except Exception as exc:
            hint = " (pass dynamic_batch=False for a fixed batch size)" if checked else ""
            raise Permanent(f"onnxruntime failed at batch size {batch}: {exc}{hint}") from exc
        for name, want, got in zip(job.output_names, expected, actual, strict=True):
            max_diff = max(max_diff, _compare(name, want, got, batch, tolerance))
        checked.append(batch)
    return max_diff, checked


def _checker(onnx_path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(str(onnx_path))
    except Exception as exc:
        raise Permanent(f"the exported ONNX model fails onnx.checker: {exc}") from exc


def _opset(onnx_path: Path) -> int:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise Permanent(f"exported model {onnx_path} declares no ai.onnx opset")


# -- placing the files -------------------------------------------------------------------------


def _place(staging: Path, onnx_name: str, target: Path) -> tuple[Path, ...]:
    """Move the staged external-data files, then the ``.onnx`` file, into ``target``'s folder."""
    data_files = []
    for item in sorted(staging.iterdir()):
        if item.name == onnx_name:
            continue
        if not item.is_file():
            raise Permanent(f"the ONNX exporter wrote a non-file {item.name!r}")
        fsync_path(item)
        dest = target.parent / item.name
        os.replace(item, dest)
        data_files.append(dest)
    fsync_path(staging / onnx_name)
    os.replace(staging / onnx_name, target)
    fsync_path(target.parent)
    return tuple(data_files)


def _staged_export(
    job: _Job, target: Path, check: bool, tolerance: tuple[float, float]
) -> OnnxExport:
    """Export and check in a staging directory beside ``target``; place the files on success."""
    import torch

    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        staged = staging / target.name
        with torch.no_grad():
            exporter = _export(job, staged)
        _checker(staged)
        max_diff, checked = _check(job, staged, tolerance) if check else (0.0, [])
        opset = _opset(staged)
        data_files = _place(staging, target.name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return OnnxExport(
        path=target,
        opset=opset,
        exporter=exporter,
        input_names=tuple(job.input_names),
        output_names=tuple(job.output_names),
        max_abs_diff=max_diff,
        checked_batch_sizes=tuple(checked),
        data_files=data_files,
    )


def export_onnx(
    model: torch.nn.Module,
    example_inputs: Any,
    path: str | os.PathLike[str],
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_batch: bool = True,
    opset: int | None = None,
    rtol: float = 1e-3,
    atol: float = 1e-5,
    check: bool = True,
    external_data: bool | None = None,
) -> OnnxExport:
    """Export ``model`` to ONNX at ``path`` and check onnxruntime reproduces its outputs.

    ``example_inputs`` is a tensor or a tuple of tensors (positional arguments of ``forward``).
    With ``dynamic_batch`` dim 0 of every input (and output) is a symbolic ``batch`` axis.
    ``external_data`` ``None`` stores weights inside the file unless the model passes ONNX's 2 GB
    limit; ``True`` forces a ``<name>.data`` file beside it. ``check=False`` skips the onnxruntime
    comparison (``onnx.checker`` still runs). The model is run in eval mode and put back in the
    mode it had. Raises ``Permanent`` on a failed export, check or mismatch (nothing is left at
    ``path`` then), ``UserInputError`` on bad arguments or missing onnx/onnxruntime.
    """
    import torch

    _require_onnx()
    if not isinstance(model, torch.nn.Module):
        raise UserInputError(f"export_onnx model must be a torch.nn.Module, got {type(model)}")
    target = _check_path(path)
    inputs = _as_inputs(example_inputs)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            outputs = _flatten(model(*inputs))
        default_outputs = [f"output_{i}" for i in range(len(outputs))]
        job = _Job(
            model=model,
            inputs=inputs,
            input_names=_names(
                input_names, len(inputs), _default_input_names(model, len(inputs)), "input_names"
            ),
            output_names=_names(output_names, len(outputs), default_outputs, "output_names"),
            output_ranks=[t.dim() for t in outputs],
            dynamic_batch=dynamic_batch,
            opset=opset,
            external_data=external_data,
        )
        return _staged_export(job, target, check, (rtol, atol))
    finally:
        model.train(was_training)
