"""The spec package's public surface, its imports (layering) and its module sizes."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from gpulease import spec

PACKAGE = Path(spec.__file__).parent
# gpulease.wire: the node variables a secret may not be named (NODE_VARIABLES)
ALLOWED_IMPORTS = {
    "gpulease.units",
    "gpulease.errors",
    "gpulease.wire",
    "pydantic",
    "pydantic_core",
    "yaml",
}

PUBLIC_API = {
    "Task",
    "Resources",
    "Workload",
    "ModelSpec",
    "AcceleratorRequest",
    "CheckpointSpec",
    "JobRecovery",
    "ServiceSpec",
    "ReadinessProbe",
    "ReplicaRange",
    "ScaleRule",
    "AutoscaleSpec",
    "ServiceSpot",
    "PoolSpec",
    "load_task",
    "parse_task",
    "task_from_dict",
    "task_from_dict_with_warnings",
    "dump_task",
    "task_json_schema",
    "with_providers",
    "load_task_with_warnings",
    "parse_task_with_warnings",
    "SpecWarning",
    "canonical_accelerator_name",
    "KNOWN_ACCELERATORS",
}


def _modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_all_is_the_curated_public_api() -> None:
    assert set(spec.__all__) == PUBLIC_API
    assert len(spec.__all__) == len(set(spec.__all__))
    for name in spec.__all__:
        assert getattr(spec, name) is not None


def test_spec_imports_only_units_errors_wire_pydantic_yaml_and_the_standard_library() -> None:
    for path in _modules():
        for name in _imports(path):
            top = name.split(".")[0]
            allowed = (
                top in sys.stdlib_module_names
                or name.startswith("gpulease.spec")
                or any(name == ok or name.startswith(ok + ".") for ok in ALLOWED_IMPORTS)
            )
            assert allowed, f"{path.name} imports {name}"


def test_modules_are_small_and_say_what_they_own() -> None:
    for path in _modules():
        source = path.read_text()
        assert len(source.splitlines()) < 400, f"{path.name} is too long"
        assert ast.get_docstring(ast.parse(source)), f"{path.name} has no module docstring"
