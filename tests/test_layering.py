"""The package layering of DESIGN.md holds: each package imports only the packages below it.

Walks every module's imports (including imports inside functions and under TYPE_CHECKING) with
``ast``, so a lazy import cannot slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gpulease"
BASE = {"errors", "config", "units", "clock", "backoff", "filesync"}  # any package may use them

ALLOWED: dict[str, set[str]] = {
    "filesync": set(),  # a base package (in BASE): what travels to a node, and how
    "spec": set(),
    "catalog": {"spec"},
    "estimate": {"catalog", "spec"},
    "policy": {"spec", "catalog"},
    "optimizer": {"catalog", "estimate", "policy", "spec"},
    "spot": set(),
    "providers": {"catalog", "spec", "spot"},
    "storage": set(),
    "state": {"spec"},
    "controller": {"providers", "storage", "state", "optimizer", "spot"},
    "agent": {"storage", "spec"},
    "train": {"storage", "catalog"},
    "serve": {"controller"},
    "metrics": {"state", "catalog"},
    "bench": {"catalog"},
    "client": {"spec"},
    "cli": {
        "client",
        "spec",
        "catalog",
        "estimate",
        "optimizer",
        "spot",
        "bench",
        "policy",
        "storage",  # `checkpoints list|verify` inspects a store in process, like `plan`
    },
    "server": {
        "spec",
        "catalog",
        "estimate",
        "policy",
        "optimizer",
        "spot",
        "providers",
        "storage",
        "state",
        "controller",
        "agent",
        "serve",
        "metrics",
        "bench",
    },
}


def _package_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "gpulease" and len(parts) > 1:
                found.add(parts[1])
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p.parent != SRC or p.stem in BASE)


def test_every_package_is_in_the_layer_table() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(ALLOWED), f"add {packages - set(ALLOWED)} to ALLOWED and DESIGN.md"


@pytest.mark.parametrize("module", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_layers(module: Path) -> None:
    package = _package_of(module)
    imported = _imported_packages(module) - {package}
    if package in BASE:
        assert imported <= BASE, f"{package} is a base module and may import only {BASE}"
        return
    forbidden = imported - ALLOWED[package] - BASE
    assert not forbidden, f"{module.relative_to(SRC)} imports {sorted(forbidden)}"


def test_nothing_imports_cli_or_server() -> None:
    for module in _modules():
        if _package_of(module) in {"cli", "server"}:
            continue
        assert not _imported_packages(module) & {"cli", "server"}, module
