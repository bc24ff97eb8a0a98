"""The public surface of gpulease.estimate and what the package may import."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from gpulease import estimate

PACKAGE = Path(estimate.__file__).parent
ALLOWED = ("gpulease.catalog", "gpulease.spec", "gpulease.units", "gpulease.errors",
           "gpulease.estimate")  # fmt: skip


def test_all_is_curated_and_importable():
    assert sorted(estimate.__all__) == estimate.__all__
    for name in estimate.__all__:
        assert getattr(estimate, name) is not None
    contract = {
        "HoursRange", "TrainingEstimate", "InferenceEstimate", "training_flops",
        "training_memory_gb", "min_training_gpus", "estimate_training", "estimate_inference",
        "utilisation", "scaling_efficiency", "calibration_report", "CalibrationRow",
    }  # fmt: skip
    assert contract <= set(estimate.__all__)


def test_hours_range_scales():
    scaled = estimate.HoursRange(1.0, 2.0, 4.0).scale(8)
    assert scaled == estimate.HoursRange(8.0, 16.0, 32.0)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_estimate_imports_only_catalog_spec_units_errors_and_stdlib():
    for path in sorted(PACKAGE.glob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            assert name.startswith(ALLOWED), f"{path.name} imports {name}"


def test_modules_stay_small_and_documented():
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) < 400, path.name
        assert ast.get_docstring(ast.parse(text)), f"{path.name} has no module docstring"
