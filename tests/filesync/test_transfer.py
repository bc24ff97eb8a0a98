"""Manifests, the difference of two trees, the sync stream (pack → apply) and its safety: after a
sync the destination is exactly the source's kept tree, whatever it held before; nothing outside
the destination is ever written, followed or deleted."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease.filesync import (
    BadStream,
    Entry,
    HashCache,
    Kind,
    UnsafePath,
    apply_stream,
    copy_tree,
    diff,
    link_escapes,
    manifest,
    manifest_from_json,
    manifest_to_json,
    pack,
    safe_rel,
    walk,
)
from tests.filesync.trees import build, listing


def sync(src: Path, dest: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """One sync of ``src`` onto ``dest`` through a stream: (sent, deleted)."""
    found = walk(src)
    local = manifest(found)
    remote = manifest(walk(dest, rules=False)) if dest.exists() else {}
    changes = diff(local, remote)
    body = io.BytesIO()
    packed = pack({f.rel: f for f in found}, local, changes, body)
    assert packed.size == len(body.getvalue())
    body.seek(0)
    apply_stream(body, dest)
    return packed.sent, packed.deleted


# ---- manifests and diffs ----------------------------------------------------------------------


def test_manifest_entries_and_their_json_round_trip(tmp_path: Path) -> None:
    build(tmp_path, {"run.sh": "echo", "d/": "", "l": "-> run.sh"})
    (tmp_path / "run.sh").chmod(0o755)
    (tmp_path / "d").chmod(0o500)
    tree = manifest(walk(tmp_path))
    assert tree["run.sh"].kind is Kind.FILE and tree["run.sh"].mode == 0o755
    assert tree["run.sh"].size == 4 and len(tree["run.sh"].sha256) == 64
    assert tree["d"] == Entry(Kind.DIR, mode=0o700)  # the owner's bits are always set
    assert tree["l"] == Entry(Kind.LINK, target="run.sh")
    assert manifest_from_json(manifest_to_json(tree)) == tree


@pytest.mark.parametrize(
    "bad",
    [[], {"a": 1}, {"a": {"kind": "file", "mode": -1, "size": 0, "sha256": ""}},
     {"a": {"kind": "socket"}}, {"a": {"kind": "link"}}, {"a": {"kind": "dir", "mode": True}}],
)  # fmt: skip
def test_a_bad_manifest_is_a_value_error(bad: object) -> None:
    with pytest.raises(ValueError):
        manifest_from_json(bad)


def test_the_hash_cache_rehashes_a_changed_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("one")
    cache = HashCache()
    first = cache.sha256(path, path.stat())
    assert cache.sha256(path, path.stat()) == first
    path.write_text("two")
    assert cache.sha256(path, path.stat()) != first


entries = st.sampled_from(
    [Entry(Kind.FILE, 0o644, 1, "a"), Entry(Kind.FILE, 0o755, 1, "a"), Entry(Kind.DIR, 0o700),
     Entry(Kind.LINK, target="x")]
)  # fmt: skip
paths = st.lists(st.sampled_from("abc"), min_size=1, max_size=3).map("/".join)


def _as_tree(flat: dict[str, Entry]) -> dict[str, Entry]:
    """Every parent of a path present, as a directory (what a walk of a real tree gives)."""
    tree = dict(flat)
    for rel in flat:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if tree.get(parent, Entry(Kind.FILE)).kind is not Kind.DIR:
                tree[parent] = Entry(Kind.DIR, 0o700)
    return tree


manifests = st.dictionaries(paths, entries).map(_as_tree)


@given(local=manifests, remote=manifests)
def test_applying_a_diff_gives_the_local_manifest(
    local: dict[str, Entry], remote: dict[str, Entry]
) -> None:
    changes = diff(local, remote)
    result = dict(remote)
    for top in changes.delete:
        assert top not in local
        for rel in [r for r in result if r == top or r.startswith(top + "/")]:
            del result[rel]
    for rel in changes.send:
        result[rel] = local[rel]
    assert result == local
    assert list(changes.send) == sorted(changes.send)  # parents before children
    assert not set(changes.send) & {r for r in remote if remote[r] == local.get(r)}


# ---- pack and apply ---------------------------------------------------------------------------

names = st.sampled_from(["a", "b", "c.txt", "d"])
rels = st.lists(names, min_size=1, max_size=3).map("/".join)
contents = st.one_of(st.sampled_from(["x", "y", "-> a", "-> ../a", "-> b/c.txt"]), st.just("/"))


def _spec(tree: dict[str, str]) -> dict[str, str]:
    """Drop the paths under a path that is not a directory (a random tree must be a tree) and
    the links out of the tree (the server refuses to send those)."""
    out: dict[str, str] = {}
    for rel in sorted(tree):
        if tree[rel].startswith("-> ") and link_escapes(rel, tree[rel][3:]):
            continue
        parents = ["/".join(rel.split("/")[:i]) for i in range(1, rel.count("/") + 1)]
        if all(out.get(p, "/") == "/" for p in parents) and not any(
            o.startswith(rel + "/") for o in out
        ):
            out[rel] = tree[rel]
    return {(r + "/" if v == "/" else r): v for r, v in out.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.dictionaries(rels, contents), after=st.dictionaries(rels, contents))
def test_a_sync_makes_the_destination_the_source_whatever_it_held(
    before: dict[str, str], after: dict[str, str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src, dest = Path(tmp) / "src", Path(tmp) / "dest"
        build(dest, _spec(before))
        build(src, _spec(after))
        sync(src, dest)
        assert listing(dest) == listing(src)
        sent, deleted = sync(src, dest)
        assert sent == () and deleted == ()  # nothing changed: nothing sent again


def test_only_what_changed_is_sent_again_and_deletions_follow(tmp_path: Path) -> None:
    src = build(tmp_path / "src", {"a.py": "1", "pkg/b.py": "2", "pkg/c.py": "3", "old/x": "4"})
    dest = tmp_path / "dest"
    sync(src, dest)
    (src / "pkg/b.py").write_text("22")
    (src / "a.py").chmod(0o755)
    (src / "pkg/c.py").unlink()
    for f in (src / "old").iterdir():
        f.unlink()
    (src / "old").rmdir()
    sent, deleted = sync(src, dest)
    assert sent == ("a.py", "pkg/b.py")
    assert deleted == ("old", "pkg/c.py")
    assert listing(dest) == listing(src)
    assert os.stat(dest / "a.py").st_mode & 0o777 == 0o755


def test_no_temp_file_is_left_behind(tmp_path: Path) -> None:
    src = build(tmp_path / "src", {"a": "1", "d/b": "2", "l": "-> a"})
    sync(src, tmp_path / "dest")
    assert not [p for p in (tmp_path / "dest").rglob("*") if "gpulease-tmp" in p.name]


# ---- refusing what leaves the destination -----------------------------------------------------


def _stream(*members: tuple[str, str, str]) -> io.BytesIO:
    """A tar of (name, type, data-or-link-target); type: file, dir, link, hard, fifo."""
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data.encode()))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE,
                         "hard": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]  # fmt: skip
            info.linkname = data
            tar.addfile(info)
    body.seek(0)
    return body


@pytest.mark.parametrize(
    "members",
    [
        [("f/../escape", "file", "x")],
        [("f//abs", "file", "x")],
        [("f/a/./b", "file", "x")],
        [("f/out", "link", "/etc")],
        [("f/out", "link", "../../escape")],
        [("f/d/out", "link", "../../escape")],
        [("f/in", "link", "."), ("f/in/escape", "file", "x")],  # a write through a link
        [("f/x", "file", "x"), ("f/x/escape", "file", "x")],  # a file used as a directory
        [("f/h", "hard", "/etc/passwd")],
        [("f/p", "fifo", "")],
        [("sync.json", "file", '{"delete": ["../outside"]}')],
        [("sync.json", "file", '{"delete": ["/outside"]}')],
    ],
)
def test_unsafe_members_are_refused_and_nothing_leaves(
    tmp_path: Path, members: list[tuple[str, str, str]]
) -> None:
    outside = build(tmp_path / "outside", {"keep": "k"})
    dest = tmp_path / "box" / "dest"
    dest.mkdir(parents=True)
    with pytest.raises(UnsafePath):
        apply_stream(_stream(*members), dest)
    assert listing(outside) == {"keep": "k"}
    assert not (tmp_path / "box" / "escape").exists()
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize(
    "members",
    [
        [("README", "file", "x")],
        [("f/a", "file", "x"), ("sync.json", "file", "{}")],  # the control member comes first
        [("sync.json", "file", "not json")],
        [("sync.json", "file", '{"delete": "a"}')],
    ],
)
def test_a_stream_that_is_not_a_sync_stream_is_refused(
    tmp_path: Path, members: list[tuple[str, str, str]]
) -> None:
    with pytest.raises(BadStream):
        apply_stream(_stream(*members), tmp_path)


def test_garbage_and_a_cut_stream_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BadStream):
        apply_stream(io.BytesIO(b"not a tar at all" * 100), tmp_path / "a")
    whole = _stream(("f/big", "file", "x" * 5000)).getvalue()
    with pytest.raises(BadStream):
        apply_stream(io.BytesIO(whole[:2000]), tmp_path / "b")
    assert not (tmp_path / "b" / "big").exists()  # the half-written file never took its place


def test_a_deletion_never_goes_through_a_link(tmp_path: Path) -> None:
    outside = build(tmp_path / "outside", {"victim": "v"})
    dest = build(tmp_path / "dest", {"link": f"-> {outside}"})
    apply_stream(_stream(("sync.json", "file", '{"delete": ["link/victim"]}')), dest)
    assert (outside / "victim").exists()


@given(name=st.text(st.sampled_from("ab./\\\x00 "), max_size=8))
def test_safe_names_stay_inside_and_others_are_refused(name: str) -> None:
    dest = Path("/dest")
    try:
        rel = safe_rel(name)
    except UnsafePath:
        parts = name.split("/")
        assert not name or name.startswith("/") or "\x00" in name or {"", ".", ".."} & set(parts)
        return
    resolved = Path(os.path.normpath(dest / rel))
    assert resolved.is_relative_to(dest) and resolved != dest
    assert resolved == dest / rel


# ---- copying on one machine -------------------------------------------------------------------


def test_copy_tree_replaces_links_in_the_way_and_never_writes_through_them(tmp_path: Path) -> None:
    outside = build(tmp_path / "outside", {"m.py": "original"})
    src = build(tmp_path / "src", {"pkg/m.py": "new", "top.txt": "t", ".gitignore": "*.log\n",
                                   "x.log": ""})  # fmt: skip
    dest = build(tmp_path / "work", {"pkg": f"-> {outside}", "top.txt": f"-> {outside}/m.py",
                                     "results/kept": "r"})  # fmt: skip
    copy_tree(walk(src), dest)
    assert (outside / "m.py").read_text() == "original"
    assert listing(dest) == {".gitignore": "*.log\n", "pkg": "/", "pkg/m.py": "new",
                             "top.txt": "t", "results": "/", "results/kept": "r"}  # fmt: skip
