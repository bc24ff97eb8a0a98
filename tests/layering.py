"""The import-layering checker behind tests/test_layering.py.

Reads every module of a package tree with ``ast`` (no import runs) and lists each place a module
reaches another *unit* of the package, a unit being a top-level subpackage (``spec``,
``server``…) or top-level module (``wire``, ``__init__``, ``__main__``). A module reaches a unit by:

- ``import gpulease.x`` / ``from gpulease.x import y`` (anywhere: in functions, under
  ``TYPE_CHECKING``, in ``try``);
- ``from gpulease import x`` (``x`` a subpackage or module, or a name the root package exports
  lazily through its ``_LAZY`` table);
- relative imports (``from . import x``, ``from ..server import y``), resolved against the
  module's own package;
- ``importlib.import_module(...)``, ``__import__(...)`` and ``pkgutil.resolve_name(...)`` with a
  literal name (relative ones with a literal ``package=``) or an f-string / concatenation whose
  literal prefix names the unit; any other argument is reported as a dynamic import the check
  cannot follow, except in a module whose literal ``_LAZY`` table lists what it loads;
- ``gpulease.x`` attribute access or ``getattr(gpulease, "x")`` on a name bound to the root
  package by ``import gpulease…`` (``import gpulease.spec`` binds ``gpulease``;
  ``gpulease.server.app`` then works only because something else imported it);
- ``from gpulease import *`` (every lazy export of the root).

Running ``python -m gpulease.agent`` in a subprocess is a process boundary, not an import, and is
not reported. The root package itself is a neutral facade: ``from gpulease import __version__``
reaches no unit.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass
from pathlib import Path

DYNAMIC = {"import_module", "__import__", "resolve_name", "find_spec"}


@dataclass(frozen=True)
class Edge:
    """One place where a module reaches a unit; ``unit`` is None when it cannot be followed."""

    path: Path
    line: int
    unit: str | None
    how: str


@dataclass(frozen=True)
class Violation:
    """An edge the layer rules forbid, with the module and line to fix."""

    path: Path
    line: int
    importer: str
    imported: str | None
    how: str
    reason: str

    def __str__(self) -> str:
        target = self.imported if self.imported is not None else "?"
        return f"{self.path}:{self.line}: {self.importer} → {target} ({self.how}): {self.reason}"


class Tree:
    """One package tree on disk (``root`` is the package directory, e.g. ``src/gpulease``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.top = root.name
        init = root / "__init__.py"
        self.lazy = _lazy_table(_parse(init), self.top) if init.exists() else {}

    def modules(self) -> list[Path]:
        return sorted(self.root.rglob("*.py"))

    def module_name(self, path: Path) -> str:
        parts = [self.top, *path.relative_to(self.root).with_suffix("").parts]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def package_of(self, path: Path) -> str:
        name = self.module_name(path)
        return name if path.name == "__init__.py" else name.rpartition(".")[0]

    def unit_of_path(self, path: Path) -> str:
        rel = path.relative_to(self.root)
        return rel.parts[0].removesuffix(".py")

    def units(self) -> set[str]:
        return {
            p.name if p.is_dir() else p.stem
            for p in self.root.iterdir()
            if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"
        }

    def is_unit(self, name: str) -> bool:
        return (self.root / f"{name}.py").exists() or (self.root / name / "__init__.py").exists()

    def unit_of_module(self, module: str) -> str | None:
        """The unit an absolute module name lies in; None outside the tree or for the root."""
        parts = module.split(".")
        if parts[0] != self.top or len(parts) < 2:
            return None
        return parts[1]

    def unit_of_name(self, package: str, name: str) -> str | None:
        """What ``from <package> import <name>`` reaches: a submodule, a lazy export, or nothing."""
        if package != self.top:
            return self.unit_of_module(package)
        if self.is_unit(name):
            return name
        if name in self.lazy:
            return self.unit_of_module(self.lazy[name])
        return None

    def edges(self, path: Path) -> list[Edge]:
        return list(_Walker(self, path).walk())


class _Walker:
    def __init__(self, tree: Tree, path: Path) -> None:
        self.tree = tree
        self.path = path
        self.package = tree.package_of(path)
        self.syntax = _parse(path)
        self.lazy = _lazy_table(self.syntax, self.package)

    def walk(self) -> Iterator[Edge]:
        roots = self._root_aliases()
        dynamic = DYNAMIC | {
            alias.asname
            for node in ast.walk(self.syntax)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if alias.name in DYNAMIC and alias.asname
        }
        for module in sorted(set(self.lazy.values())):
            unit = self.tree.unit_of_module(module)
            if unit is not None:
                yield Edge(self.path, 1, unit, f"_LAZY table: {module}")
        for node in ast.walk(self.syntax):
            if isinstance(node, ast.Import):
                yield from self._import(node)
            elif isinstance(node, ast.ImportFrom):
                yield from self._import_from(node)
            elif isinstance(node, ast.Call) and _call_name(node) in dynamic:
                yield from self._dynamic(node)
            elif isinstance(node, ast.Call) and _root_getattr(node, roots):
                unit = self.tree.unit_of_name(self.tree.top, _root_getattr(node, roots))
                if unit is not None:
                    yield Edge(self.path, node.lineno, unit, "getattr on the root package")
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in roots
            ):
                unit = self.tree.unit_of_name(self.tree.top, node.attr)
                if unit is not None:
                    yield Edge(
                        self.path, node.lineno, unit, f"attribute {node.value.id}.{node.attr}"
                    )

    def _root_aliases(self) -> set[str]:
        """Names bound to the root package: ``import gpulease[.x]`` and ``import gpulease as g``."""
        names: set[str] = set()
        for node in ast.walk(self.syntax):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == self.tree.top and alias.asname:
                        names.add(alias.asname)
                    elif alias.name.split(".")[0] == self.tree.top and not alias.asname:
                        names.add(self.tree.top)
        return names

    def _import(self, node: ast.Import) -> Iterator[Edge]:
        for alias in node.names:
            unit = self.tree.unit_of_module(alias.name)
            if unit is not None:
                yield Edge(self.path, node.lineno, unit, f"import {alias.name}")

    def _import_from(self, node: ast.ImportFrom) -> Iterator[Edge]:
        base = _resolve(node.module or "", node.level, self.package)
        if base is None:
            yield Edge(self.path, node.lineno, None, f"relative import beyond {self.tree.top}")
            return
        how = f"from {'.' * node.level}{node.module or ''} import"
        base_unit = self.tree.unit_of_module(base)
        if base_unit is not None:
            yield Edge(self.path, node.lineno, base_unit, how)
            return
        if base != self.tree.top:
            return
        for alias in node.names:
            if alias.name == "*":  # loads every lazy export of the root's __all__
                units = {self.tree.unit_of_module(m) for m in self.tree.lazy.values()}
            else:
                units = {self.tree.unit_of_name(base, alias.name)}
            for unit in sorted(u for u in units if u is not None):
                yield Edge(self.path, node.lineno, unit, f"{how} {alias.name}")

    def _dynamic(self, node: ast.Call) -> Iterator[Edge]:
        how = f"{_call_name(node)}(...)"
        target = node.args[0] if node.args else _keyword(node, "name")
        if target is None:
            return
        literal = _literal_prefix(target)
        complete = isinstance(target, ast.Constant)
        if literal is not None and literal.startswith("."):
            package = node.args[1] if len(node.args) > 1 else _keyword(node, "package")
            anchor = package.value if isinstance(package, ast.Constant) else None
            level = len(literal) - len(literal.lstrip("."))
            literal = _resolve(literal[level:], level, anchor) if isinstance(anchor, str) else None
        if literal is None:
            if not self.lazy:  # a lazy table says what the module loads; it is walked instead
                yield Edge(self.path, node.lineno, None, how)
            return
        parts = literal.partition(":")[0].split(".")
        if parts[0] != self.tree.top:
            if not complete and len(parts) == 1:  # f"{x}", f"gpu{x}": could be anything
                yield Edge(self.path, node.lineno, None, how)
            return  # another distribution: numpy, boto3…
        if complete:
            if len(parts) > 1:
                yield Edge(self.path, node.lineno, parts[1], how)
        elif len(parts) > 2:  # f"gpulease.spot.{x}": inside spot
            yield Edge(self.path, node.lineno, parts[1], how)
        else:  # f"gpulease.{x}", "gpulease.sp" + x: any unit
            yield Edge(self.path, node.lineno, None, how)


def _resolve(module: str, level: int, package: str | None) -> str | None:
    """``importlib.util.resolve_name`` without importing: None past the top of the tree."""
    if level == 0:
        return module
    if not package:
        return None
    parts = package.split(".")
    if level - 1 >= len(parts):
        return None
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def _root_getattr(node: ast.Call, roots: Set[str]) -> str:
    """``name`` of ``getattr(gpulease, "name"[, default])``, else ""."""
    if not (isinstance(node.func, ast.Name) and node.func.id == "getattr" and node.args[1:]):
        return ""
    owner, name = node.args[0], node.args[1]
    if isinstance(owner, ast.Name) and owner.id in roots and isinstance(name, ast.Constant):
        return str(name.value)
    return ""


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _keyword(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def _literal_prefix(node: ast.expr) -> str | None:
    """The literal text a string expression starts with (whole for a constant), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal_prefix(node.left)
    return None


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _lazy_table(syntax: ast.Module, package: str) -> dict[str, str]:
    """A module's literal ``_LAZY = {name: module}`` table, module names made absolute."""
    for node in syntax.body:
        target: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if not (isinstance(target, ast.Name) and target.id == "_LAZY"):
            continue
        if not isinstance(value, ast.Dict):
            return {}
        table: dict[str, str] = {}
        for key, item in zip(value.keys, value.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(item, ast.Constant):
                module = str(item.value)
                top = package.split(".", maxsplit=1)[0]
                absolute = module == top or module.startswith(f"{top}.")
                table[str(key.value)] = module if absolute else f"{package}.{module}"
        return table
    return {}


def check(tree: Tree, allowed: Mapping[str, Set[str]], base: Set[str]) -> list[Violation]:
    """Every edge of ``tree`` the rules forbid.

    ``allowed[unit]`` is what a unit may import on top of ``base``, the leaf modules any unit may
    use and which may import only each other. A unit in neither is a violation itself.
    """
    found: list[Violation] = []
    for path in tree.modules():
        importer = tree.unit_of_path(path)
        rel = path.relative_to(tree.root.parent)
        if importer not in base and importer not in allowed:
            found.append(Violation(rel, 1, importer, None, "-", "not in the layer table"))
            continue
        may = set(base) if importer in base else set(allowed[importer]) | set(base)
        for edge in tree.edges(path):
            if edge.unit is None:
                reason = "cannot tell which unit this reaches; name the module literally"
                found.append(Violation(rel, edge.line, importer, None, edge.how, reason))
            elif edge.unit != importer and edge.unit not in may:
                if importer in base:
                    reason = f"a base module may import only base modules {sorted(base)}"
                else:
                    reason = f"may import only {sorted(may - set(base))} and base modules"
                found.append(Violation(rel, edge.line, importer, edge.unit, edge.how, reason))
    return found
