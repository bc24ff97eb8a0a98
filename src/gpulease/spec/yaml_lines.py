"""YAML text ↔ plain data, remembering the line of every mapping key and list item.

:func:`load_yaml` composes the document with PyYAML's safe loader and builds plain Python data
from the node tree itself, so that it can record ``lines[path] = line`` for every key and item
(``("resources", "accelerators")`` → 7) and refuse what a task file should never contain:
duplicate keys, non-scalar keys, custom tags, several documents, runaway nesting or alias
expansion. Every failure is a :class:`~gpulease.errors.SpecError` with the line.

:func:`dump_yaml` writes plain data as block-style YAML (multi-line strings as ``|`` blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpulease.errors import SpecError

__all__ = ["Document", "Path", "dump_yaml", "format_path", "load_yaml"]

Path = tuple[Any, ...]
"""Keys and list indices from the top of the document: ``("resources", "any_of", 1)``."""

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_DEPTH = 50
_MAX_NODES = 100_000


@dataclass(frozen=True)
class Document:
    """Plain data read from a task file, with the 1-based line of each key and item."""

    data: Any
    lines: dict[Path, int] = field(default_factory=dict)
    source: str | None = None

    def line(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None

    def error(self, path: Path, message: str) -> SpecError:
        """A SpecError for ``path``, naming the field and its line."""
        return SpecError(
            message, field=format_path(path) or None, line=self.line(path), source=self.source
        )


def format_path(path: Path) -> str:
    """``("resources", "any_of", 1, "cloud")`` → ``"resources.any_of[1].cloud"``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) and not isinstance(part, bool) else f".{part}"
    return text.lstrip(".")


class _Builder:
    """Builds plain data from a composed node tree, recording lines as it goes."""

    def __init__(self, loader: yaml.SafeLoader, source: str | None) -> None:
        self.loader = loader
        self.source = source
        self.lines: dict[Path, int] = {}
        self.nodes = 0

    def fail(self, node: Node, message: str, path: Path = ()) -> SpecError:
        line = node.start_mark.line + 1
        return SpecError(message, field=format_path(path) or None, line=line, source=self.source)

    def build(self, node: Node, path: Path, depth: int = 0) -> Any:
        self.nodes += 1
        if depth > _MAX_DEPTH or self.nodes > _MAX_NODES:
            raise self.fail(node, "the document is nested or aliased too deeply to be a task")
        if isinstance(node, MappingNode) and node.tag == _MAP_TAG:
            return self.mapping(node, path, depth)
        if isinstance(node, SequenceNode) and node.tag == _SEQ_TAG:
            return [
                self.item(child, (*path, index), depth) for index, child in enumerate(node.value)
            ]
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        raise self.fail(node, f"unsupported YAML tag {node.tag!r}", path)

    def item(self, node: Node, path: Path, depth: int) -> Any:
        self.lines[path] = node.start_mark.line + 1
        return self.build(node, path, depth + 1)

    def scalar(self, node: ScalarNode, path: Path) -> Any:
        try:
            return self.loader.construct_object(node)
        except (yaml.YAMLError, ValueError, OverflowError, TypeError, AttributeError) as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            if path[:1] in (("envs",), ("secrets",)):  # often a secret: never echoed
                raise self.fail(node, f"invalid value: {problem}", path) from None
            raise self.fail(node, f"invalid value {node.value!r}: {problem}", path) from None

    def key(self, node: Node, path: Path) -> Any:
        if not isinstance(node, ScalarNode):
            raise self.fail(node, "mapping keys must be plain names, not lists or mappings", path)
        return self.scalar(node, path)

    def mapping(self, node: MappingNode, path: Path, depth: int) -> dict[Any, Any]:
        merged: dict[Any, Any] = {}
        own: dict[Any, Any] = {}
        own_lines: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                self.merge(value_node, merged, path, depth)
                continue
            key = self.key(key_node, path)
            if key in own:
                message = f"duplicate key {key!r} (first given on line {own_lines[key]})"
                raise self.fail(key_node, message, (*path, key))
            own_lines[key] = key_node.start_mark.line + 1
            own[key] = self.build(value_node, (*path, key), depth + 1)
        for key, line in own_lines.items():
            self.lines[(*path, key)] = line
        return {**merged, **own}

    def merge(self, node: Node, into: dict[Any, Any], path: Path, depth: int) -> None:
        """``<<: *base`` or ``<<: [*a, *b]``: keys not given yet are taken from the sources."""
        sources = node.value if isinstance(node, SequenceNode) else [node]
        for source in sources:
            value = self.build(source, path, depth + 1)
            if not isinstance(value, dict):
                raise self.fail(source, "a merge key (<<) needs a mapping", path)
            for key, item in value.items():
                into.setdefault(key, item)


def _yaml_error(exc: yaml.YAMLError, text: str, source: str | None) -> SpecError:
    if isinstance(exc, yaml.reader.ReaderError):
        line = text[: exc.position].count("\n") + 1
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        message = f"invalid YAML: character {char!r} is not allowed"
        return SpecError(message, line=line, source=source)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if "found another document" in problem:
        return SpecError(_SEVERAL_DOCUMENTS, line=mark.line + 1 if mark else None, source=source)
    context = getattr(exc, "context", None)
    message = f"invalid YAML: {context + ', ' if context else ''}{problem}"
    return SpecError(message, line=mark.line + 1 if mark else None, source=source)


_SEVERAL_DOCUMENTS = (
    "this file holds several YAML documents (a SkyPilot pipeline or job group, documents "
    "separated by ---): pipelines are not supported yet; gpulease runs one task per file, so "
    "put each task in a file of its own and launch them in order"
)


def load_yaml(text: str, source: str | None = None) -> Document:
    """Parse one YAML document into plain data and the line of every key and item."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        if node is None:
            return Document(None, {}, source)
        builder = _Builder(loader, source)
        data = builder.build(node, ())
        builder.lines[()] = node.start_mark.line + 1
        return Document(data, builder.lines, source)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    except RecursionError:
        raise SpecError("the document is nested too deeply to be a task", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()


class _BlockDumper(yaml.SafeDumper):
    """Safe dumper that writes multi-line strings as ``|`` blocks and indents lists."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


_ODD_BREAKS = ("\r", "\x85", "\u2028", "\u2029")


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    """Multi-line text as a ``|`` block; line breaks YAML would normalise, escaped in quotes."""
    style = "|" if "\n" in data else None
    if any(char in data for char in _ODD_BREAKS):
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_BlockDumper.add_representer(str, _represent_str)


def dump_yaml(data: Any) -> str:
    """Block-style YAML, keys in the given order, multi-line strings as ``|`` blocks."""
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)
