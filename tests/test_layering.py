"""The package layering of DESIGN.md holds: each package imports only the packages below it.

The rules table mirrors docs/architecture.md ("Packages and layers"). The checker
(tests/layering.py) reads every module with ``ast`` and follows absolute, ``from gpulease
import x``, relative and literal ``import_module`` imports, lazy ones included; the second half
of this file proves on synthetic package trees that each of those is caught.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from tests.layering import Tree, Violation, check

SRC = Path(__file__).resolve().parents[1] / "src" / "gpulease"

# Leaf modules any unit may use; they import only each other. Add a new one here and to
# docs/architecture.md.
BASE = frozenset(
    {
        "errors",
        "config",
        "units",
        "clock",
        "backoff",
        "wire",
        "filesync",
        "atomic",
        "jsonhttp",
        "billing",
    }
)

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
    "controller": {"providers", "storage", "state", "optimizer", "spot", "serve", "bench"},
    "agent": {"storage", "spec"},
    "train": {"storage", "catalog"},
    # services: the load balancer (serve.proxy) and the autoscaler's pure decisions; the
    # controller and the server run them
    "serve": {"spec"},
    "metrics": {"state", "catalog"},
    # reports over the cost ledger (read only); the server and the CLI use it, the controller not
    "cost": {"state", "catalog", "spec"},
    # the node bench (checks, references, peers); the controller judges acceptance with it
    "bench": {"catalog", "storage"},
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
        "providers",  # `plan` plans over what this install's providers sell (their offers())
        "cost",  # `gpulease cost` shapes the server's report; `tco` runs in process
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
        "cost",  # GET /v1/cost and the other cost reports
    },
    # the lazy SDK facade: gpulease.plan(...), gpulease.estimate(...)
    "__init__": {"catalog", "estimate", "optimizer", "spec", "cost"},  # + gpulease.tco(...)
    "__main__": {"cli"},  # python -m gpulease
}


def test_every_unit_is_in_the_layer_table() -> None:
    units = Tree(SRC).units()
    missing = units - set(ALLOWED) - BASE
    assert not missing, f"add {sorted(missing)} to ALLOWED (or BASE) and docs/architecture.md"


def test_src_follows_the_layers() -> None:
    violations = check(Tree(SRC), ALLOWED, BASE)
    assert not violations, "\n".join(map(str, violations))


def test_nothing_imports_cli_or_server() -> None:
    for unit, may in ALLOWED.items():
        assert "server" not in may, unit
        assert "cli" not in may or unit == "__main__", unit


def test_the_controller_may_not_import_cost() -> None:
    """The ledger is written by the controller through ``state``; the reports over it sit
    above, beside the server and the CLI."""
    assert "cost" not in ALLOWED["controller"]
    assert ALLOWED["cost"] <= {"state", "catalog", "spec"}
    assert "cost" in ALLOWED["server"] and "cost" in ALLOWED["cli"]


def test_the_checker_sees_the_real_lazy_imports() -> None:
    """A guard against a checker that silently sees nothing: known edges of src are found."""
    tree = Tree(SRC)
    root = {e.unit for e in tree.edges(SRC / "__init__.py")}
    assert {"catalog", "estimate", "optimizer", "spec"} <= root
    policies = tree.edges(SRC / "spot" / "policies.py")
    assert any(e.how == "import_module(...)" and e.unit == "spot" for e in policies)


# --- the checker catches every way of reaching a unit ------------------------------------------

RULES: dict[str, set[str]] = {
    "spec": set(),
    "optimizer": {"spec"},
    "server": {"spec", "optimizer"},
    "cli": {"spec"},
    "__init__": {"spec", "optimizer"},
    "__main__": {"cli"},
}
SYNTHETIC = {
    "__init__.py": '_LAZY = {"plan": "gpulease.optimizer", "Task": "gpulease.spec"}\n',
    "wire.py": "",
    "spec/__init__.py": "",
    "spec/other.py": "",
    "optimizer/__init__.py": "",
    "server/__init__.py": "",
    "server/api.py": "app = object()\n",
    "cli/__init__.py": "",
}


def _tree(tmp_path: Path, files: dict[str, str]) -> Tree:
    root = tmp_path / "gpulease"
    for rel, text in {**SYNTHETIC, **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return Tree(root)


def _found(tmp_path: Path, files: dict[str, str]) -> list[tuple[str, str, str | None]]:
    return [
        (str(v.path), v.importer, v.imported)
        for v in check(_tree(tmp_path, files), RULES, {"wire"})
    ]


IM = "from importlib import import_module\n"
HOLES = {
    "absolute": "import gpulease.server.api",
    "from absolute": "from gpulease.server.api import app",
    "from package import subpackage": "from gpulease import server",
    "from package import subpackage as": "from gpulease import spec, server as srv",
    "lazy root export": "from gpulease import plan",
    "relative parent": "from .. import server",
    "relative sibling package": "from ..server import api",
    "relative sibling module": "from ..server.api import app",
    "import_module": "import importlib\nimportlib.import_module('gpulease.server')",
    "bare import_module": IM + "import_module('gpulease.server.api')",
    "__import__": "__import__('gpulease.server.api')",
    "import_module relative": IM + "import_module('.api', 'gpulease.server')",
    "import_module package=": "from importlib import import_module as im\n"
    "im('..server', package='gpulease.spec')",
    "import_module f-string": IM + "import_module(f'gpulease.server.{x}')",
    "import_module concatenation": IM + "import_module('gpulease.server.' + x)",
    "pkgutil.resolve_name": "import pkgutil\npkgutil.resolve_name('gpulease.server.api:app')",
    "find_spec": "import importlib.util\nimportlib.util.find_spec('gpulease.server.api')",
    "attribute of root": "import gpulease.spec\nprint(gpulease.server.api.app)",
    "attribute of root alias": "import gpulease as g\ng.server",
    "attribute lazy export": "import gpulease\ngpulease.plan()",
    "TYPE_CHECKING": "import typing\nif typing.TYPE_CHECKING:\n    import gpulease.server",
    "inside a function": "def f():\n    from gpulease.server import api\n    return api",
    "getattr on the root": "import gpulease\nserver = getattr(gpulease, 'server')",
    "star from the root": "from gpulease import *",
    "inside try": "try:\n    import gpulease.server\nexcept ImportError:\n    pass",
}


@pytest.mark.parametrize("source", HOLES.values(), ids=HOLES.keys())
def test_a_forbidden_import_is_reported(tmp_path: Path, source: str) -> None:
    found = _found(tmp_path, {"spec/bad.py": source + "\n"})
    assert found, f"not caught: {source!r}"
    assert {(p, i) for p, i, _ in found} == {("gpulease/spec/bad.py", "spec")}
    assert {t for *_, t in found} <= {"server", "optimizer"}


UNFOLLOWABLE = {
    "f-string of any unit": "import importlib\nimportlib.import_module(f'gpulease.{x}')",
    "variable": "import importlib\nimportlib.import_module(name)",
    "f-string, no literal": "__import__(f'{name}')",
    "relative, variable package": "import importlib\nimportlib.import_module('.api', pkg)",
    "relative beyond the top": "from ... import server",
}


@pytest.mark.parametrize("source", UNFOLLOWABLE.values(), ids=UNFOLLOWABLE.keys())
def test_an_import_the_checker_cannot_follow_is_reported(tmp_path: Path, source: str) -> None:
    assert _found(tmp_path, {"spec/bad.py": source + "\n"}) == [
        ("gpulease/spec/bad.py", "spec", None)
    ]


ALLOWED_SOURCES = {
    "own unit relative": "from . import other\nfrom .other import x",
    "own unit absolute": "import gpulease.spec.other",
    "own unit import_module": "import importlib\nimportlib.import_module(f'gpulease.spec.{x}')",
    "base module": "from gpulease import wire\nfrom gpulease.wire import x",
    "root version": "from gpulease import __version__",
    "other distribution": "import importlib\nimportlib.import_module('numpy')\n"
    "importlib.import_module(f'numpy.{x}')\nimportlib.util.find_spec('boto3')",
    "a subprocess is not an import": "cmd = ['python', '-m', 'gpulease.server']",
    "a logger name is not an import": "import logging\nlogging.getLogger('gpulease.server')",
}


@pytest.mark.parametrize("source", ALLOWED_SOURCES.values(), ids=ALLOWED_SOURCES.keys())
def test_an_allowed_import_passes(tmp_path: Path, source: str) -> None:
    assert _found(tmp_path, {"spec/ok.py": source + "\n"}) == []


def test_a_base_module_imports_only_base(tmp_path: Path) -> None:
    found = _found(tmp_path, {"wire.py": "from gpulease.spec import other\n"})
    assert found == [("gpulease/wire.py", "wire", "spec")]


def test_the_root_lazy_table_is_checked(tmp_path: Path) -> None:
    found = _found(tmp_path, {"__init__.py": '_LAZY = {"serve": "gpulease.server.api"}\n'})
    assert found == [("gpulease/__init__.py", "__init__", "server")]


def test_a_unit_missing_from_the_table_is_reported(tmp_path: Path) -> None:
    found = _found(tmp_path, {"extra.py": "", "newpkg/__init__.py": ""})
    assert sorted(found) == [
        ("gpulease/extra.py", "extra", None),
        ("gpulease/newpkg/__init__.py", "newpkg", None),
    ]


def test_the_issue_example_fails_on_a_copy_of_src(tmp_path: Path) -> None:
    """``from gpulease import server`` in spec/ passed the old walker; it fails this one."""
    copy = tmp_path / "gpulease"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    with (copy / "spec" / "__init__.py").open("a", encoding="utf-8") as f:
        f.write("\nfrom gpulease import server\nfrom .. import controller\n")
    found: list[Violation] = check(Tree(copy), ALLOWED, BASE)
    assert {(str(v.path), v.imported) for v in found} == {
        ("gpulease/spec/__init__.py", "server"),
        ("gpulease/spec/__init__.py", "controller"),
    }
