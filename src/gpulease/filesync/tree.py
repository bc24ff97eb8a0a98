"""Which files of a source directory travel, and what each is: the ignore rules, the size limit,
the manifest (relative path → kind, mode, size, sha256 or link target) and the difference of two
manifests.

Kept: everything under the source except

- the default excludes, by name at any depth: ``.git``, ``.venv``, ``__pycache__``;
- what ``.gitignore`` files ignore, with git's semantics: the root's and nested ones (a nested
  file's patterns are relative to its directory and override its parents'), ``!`` re-includes,
  a trailing ``/`` matches directories only, and nothing inside an ignored directory comes back;
- what ``.gpuleaseignore`` files ignore: the same syntax, read after the ``.gitignore`` of the
  same directory, so it can ignore more or re-include (``!data.bin``) what git ignores.

``.git/info/exclude`` and git's global excludes are not read: what travels does not depend on
the machine's git configuration. Symbolic links are kept as links (their target text), never
followed; the source itself may be a link (the user named it). Moves no states.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

DEFAULT_EXCLUDES = frozenset({".git", ".venv", "__pycache__"})
IGNORE_FILES = (".gitignore", ".gpuleaseignore")
CONFIG_SECTION = "file_sync"
CONFIG_KEY = "max_size_mb"
DEFAULT_MAX_MB = 500.0
_CHUNK = 1 << 20


class SourceError(UserInputError):
    """A workdir or file mount that cannot be sent: missing, too large, a link out of it."""


class Kind(StrEnum):
    FILE = "file"
    DIR = "dir"
    LINK = "link"


@dataclass(frozen=True, slots=True)
class Entry:
    """One path of a tree. ``mode``: permission bits, with the owner's read and write (and, for
    directories, search) bits always set, so both ends of a transfer agree on it."""

    kind: Kind
    mode: int = 0
    size: int = 0
    sha256: str = ""
    target: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.kind is Kind.LINK:
            return {"kind": "link", "target": self.target}
        if self.kind is Kind.DIR:
            return {"kind": "dir", "mode": self.mode}
        return {"kind": "file", "mode": self.mode, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Any) -> Entry:
        """Parse an entry another process wrote; :class:`ValueError` when it is not one."""
        if not isinstance(data, dict):
            raise ValueError("a manifest entry must be an object")
        kind = Kind(str(data.get("kind")))
        if kind is Kind.LINK:
            return cls(kind, target=_text(data, "target"))
        mode = _int(data, "mode")
        if kind is Kind.DIR:
            return cls(kind, mode=mode)
        return cls(kind, mode=mode, size=_int(data, "size"), sha256=_text(data, "sha256"))


Manifest = dict[str, Entry]


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f"manifest entry: {key} must be a string")
    return value


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"manifest entry: {key} must be a whole number >= 0")
    return value


def manifest_to_json(manifest: Mapping[str, Entry]) -> dict[str, Any]:
    return {rel: entry.to_json() for rel, entry in sorted(manifest.items())}


def manifest_from_json(data: Any) -> Manifest:
    if not isinstance(data, dict):
        raise ValueError("a manifest must be an object")
    return {str(rel): Entry.from_json(entry) for rel, entry in data.items()}


def file_mode(st_mode: int) -> int:
    return (st_mode & 0o777) | 0o600


def dir_mode(st_mode: int) -> int:
    return (st_mode & 0o777) | 0o700


# ---- walking with the ignore rules ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Found:
    """A kept path: ``rel`` (POSIX, relative to the source), its absolute ``path`` and lstat."""

    rel: str
    path: Path
    stat: os.stat_result

    @property
    def kind(self) -> Kind:
        if stat.S_ISLNK(self.stat.st_mode):
            return Kind.LINK
        return Kind.DIR if stat.S_ISDIR(self.stat.st_mode) else Kind.FILE


# per ignore-file directory: its prefix ("a/b/" or "") and its patterns in file order, each
# (ignores: True, re-includes: False; directories only; the pattern without its trailing "/")
_Patterns = tuple[tuple[bool, bool, "GitIgnoreSpecPattern"], ...]
_Rules = tuple[tuple[str, _Patterns], ...]


def _level_rules(directory: Path, prefix: str, rules: _Rules) -> _Rules:
    lines: list[str] = []
    for name in IGNORE_FILES:
        path = directory / name
        if path.is_symlink():  # never followed, like git
            continue
        try:
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
    patterns = tuple(p for p in map(_compile, lines) if p is not None)
    return (*rules, (prefix, patterns)) if patterns else rules


def _compile(line: str) -> tuple[bool, bool, GitIgnoreSpecPattern] | None:
    """One ignore-file line; None for blanks and comments. Like git, a trailing ``/`` is taken
    off and makes the pattern match directories only."""
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

    pattern = GitIgnoreSpecPattern(line)
    if pattern.include is None:
        return None
    text = line.rstrip()
    dir_only = text.endswith("/") and not text.endswith("\\/")
    if dir_only:
        pattern = GitIgnoreSpecPattern(text[:-1])
        if pattern.include is None:
            return None
    return bool(pattern.include), dir_only, pattern


def _matches_itself(pattern: GitIgnoreSpecPattern, sub: str) -> bool:
    """Whether a pattern matches the path ``sub`` itself, not as a path inside a directory it
    matches: we never descend into an ignored directory, so those matches never decide.
    (pathspec's regexes mark the latter with the group ``ps_d``. Its ``GitIgnoreSpec`` weighs
    matches by that mark, which disagrees with git for directories — ``!*`` then ``x`` ignores
    the directory ``x`` in git — so the last match is taken here, as git does.)"""
    found = pattern.match_file(sub)
    return found is not None and found.match.groupdict().get("ps_d") is None


def ignored(rel: str, is_dir: bool, rules: _Rules) -> bool:
    """Whether ``rel`` is ignored: the deepest ignore file with a pattern that matches it
    decides, and in that file the last such pattern."""
    for prefix, patterns in reversed(rules):
        sub = rel[len(prefix) :]
        for ignores, dir_only, pattern in reversed(patterns):
            if (is_dir or not dir_only) and _matches_itself(pattern, sub):
                return ignores
    return False


def walk(root: Path, *, rules: bool = True) -> list[Found]:
    """Every kept path under the directory ``root``, parents before their children (sorted);
    with ``rules=False`` only the default excludes apply."""
    found: list[Found] = []

    def visit(directory: Path, prefix: str, active: _Rules) -> None:
        if rules:
            active = _level_rules(directory, prefix, active)
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda e: e.name)
        for child in children:
            if child.name in DEFAULT_EXCLUDES:
                continue
            st = child.stat(follow_symlinks=False)
            rel = prefix + child.name
            is_dir = stat.S_ISDIR(st.st_mode)
            if active and ignored(rel, is_dir, active):
                continue
            found.append(Found(rel, Path(child.path), st))
            if is_dir:
                visit(Path(child.path), rel + "/", active)

    visit(root, "", ())
    return found


def source_tree(label: str, source: str | Path, *, rules: bool = True) -> list[Found]:
    """What a workdir or file mount sends: a directory's kept paths, or a single file under its
    own name. ``label`` names the source in errors (``workdir``, ``file_mounts /data``)."""
    path = Path(source).expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SourceError(f"{label}: no such file or directory: {source}") from None
    except OSError as exc:
        raise SourceError(f"{label}: cannot read {source}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        try:
            return walk(path, rules=rules)
        except OSError as exc:
            raise SourceError(f"{label}: cannot read {source}: {exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"{label}: {source} is neither a file nor a directory")
    return [Found(path.name, path.resolve(), st)]  # the link the user named is followed


# ---- the size limit ---------------------------------------------------------------------------


def tree_size(found: Iterable[Found]) -> int:
    """The bytes of the regular files among ``found``."""
    return sum(f.stat.st_size for f in found if f.kind is Kind.FILE)


def human_size(size: int) -> str:
    """``size`` bytes in decimal units: ``512 B``, ``1.2 MB``."""
    if size < 1000:
        return f"{size} B"
    value, unit = float(size), "B"
    for unit in ("kB", "MB", "GB", "TB"):  # noqa: B007 - the unit the loop stops at is shown
        value /= 1000
        if value < 1000:
            break
    return f"{value:.1f} {unit}"


def check_size(label: str, source: str | Path, found: Iterable[Found], limit: int) -> int:
    """The tree's size; :class:`SourceError` naming the source, its size and the limit when it
    is over ``limit`` bytes."""
    size = tree_size(found)
    if size > limit:
        raise SourceError(
            f"{label}: {source} holds {human_size(size)} to send, over the limit of "
            f"{human_size(limit)}; leave files out with .gitignore or .gpuleaseignore, or raise "
            f"{CONFIG_SECTION}.{CONFIG_KEY} in the config file"
        )
    return size


def max_bytes(config: Mapping[str, Any]) -> int:
    """The limit of one workdir or file mount, in bytes: ``file_sync.max_size_mb`` of the config
    file (megabytes of 10**6 bytes; default 500)."""
    section = config.get(CONFIG_SECTION) or {}
    if not isinstance(section, dict):
        raise UserInputError(f"{CONFIG_SECTION}: must be a mapping (max_size_mb: 500)")
    value = section.get(CONFIG_KEY, DEFAULT_MAX_MB)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise UserInputError(
            f"{CONFIG_SECTION}.{CONFIG_KEY}: a number of megabytes > 0, not {value!r}"
        )
    if value == float("inf"):
        raise UserInputError(f"{CONFIG_SECTION}.{CONFIG_KEY}: must be finite")
    return int(value * 1_000_000)


# ---- manifests --------------------------------------------------------------------------------


class HashCache:
    """sha256 of files, remembered while their (size, mtime, ctime, inode) stay the same, so a
    re-sync of an unchanged tree reads no file. Thread-safe; forgets everything past
    ``max_entries``."""

    def __init__(self, max_entries: int = 500_000) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, tuple[tuple[int, int, int, int], str]] = {}
        self._max = max_entries

    def sha256(self, path: Path, st: os.stat_result) -> str:
        key = str(path)
        sig = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        with self._lock:
            known = self._known.get(key)
        if known is not None and known[0] == sig:
            return known[1]
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
        value = digest.hexdigest()
        with self._lock:
            if len(self._known) >= self._max:
                self._known.clear()
            self._known[key] = (sig, value)
        return value


def manifest(found: Iterable[Found], cache: HashCache | None = None) -> Manifest:
    """The manifest of a tree (files are hashed, through ``cache`` when given)."""
    cache = cache or HashCache()
    out: Manifest = {}
    for f in found:
        if f.kind is Kind.LINK:
            out[f.rel] = Entry(Kind.LINK, target=os.readlink(f.path))
        elif f.kind is Kind.DIR:
            out[f.rel] = Entry(Kind.DIR, mode=dir_mode(f.stat.st_mode))
        else:
            sha = cache.sha256(f.path, f.stat)
            out[f.rel] = Entry(Kind.FILE, file_mode(f.stat.st_mode), f.stat.st_size, sha)
    return out


def link_escapes(rel: str, target: str) -> bool:
    """Whether a link at ``rel`` pointing at ``target`` leaves the tree (absolute, or ``..``
    past its root)."""
    if not target or target.startswith("/"):
        return True
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return joined == ".." or joined.startswith("../")


def links_out(tree: Mapping[str, Entry]) -> list[str]:
    """The links of ``tree`` whose target is outside it."""
    return [
        rel
        for rel, e in sorted(tree.items())
        if e.kind is Kind.LINK and link_escapes(rel, e.target)
    ]


@dataclass(frozen=True, slots=True)
class Changes:
    """What turns a node's tree into the local one: paths to send (parents first) and paths to
    delete (the topmost of each deleted subtree)."""

    send: tuple[str, ...]
    delete: tuple[str, ...]


def diff(local: Mapping[str, Entry], remote: Mapping[str, Entry]) -> Changes:
    send = tuple(rel for rel in sorted(local) if remote.get(rel) != local[rel])
    gone = {rel for rel in remote if rel not in local}
    top = [rel for rel in sorted(gone) if not any(a in gone for a in _ancestors(rel))]
    return Changes(send, tuple(top))


def _ancestors(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
