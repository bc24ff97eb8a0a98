"""Which files travel: the default excludes, ``.gitignore`` (root and nested, with git's own
semantics — checked against ``git ls-files`` on random trees and patterns) and
``.gpuleaseignore``."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease.filesync import Kind, walk
from tests.filesync.trees import build


def kept(root: Path) -> list[str]:
    return [f.rel for f in walk(root)]


def kept_files(root: Path) -> set[str]:
    return {f.rel for f in walk(root) if f.kind is not Kind.DIR}


def test_default_excludes_apply_at_every_depth(tmp_path: Path) -> None:
    build(tmp_path, {"a.py": "", ".git/HEAD": "", ".venv/bin/python": "", "pkg/m.py": "",
                     "pkg/__pycache__/m.pyc": "", "pkg/.git": "gitdir: x"})  # fmt: skip
    assert kept(tmp_path) == ["a.py", "pkg", "pkg/m.py"]


def test_root_and_nested_gitignore(tmp_path: Path) -> None:
    build(tmp_path, {
        ".gitignore": "*.log\nbuild/\n/top.txt\n",
        "a.log": "", "keep.py": "", "top.txt": "", "sub/top.txt": "",
        "build/out.o": "", "sub/build/out.o": "", "sub/build.txt": "",
        "sub/.gitignore": "!important.log\n*.tmp\n",
        "sub/important.log": "", "sub/other.log": "", "sub/x.tmp": "", "x.tmp": "",
    })  # fmt: skip
    assert kept_files(tmp_path) == {
        ".gitignore", "keep.py", "sub/top.txt", "sub/build.txt", "sub/.gitignore",
        "sub/important.log", "x.tmp",
    }  # fmt: skip


def test_nothing_comes_back_from_inside_an_ignored_directory(tmp_path: Path) -> None:
    build(tmp_path, {".gitignore": "data/\n!data/keep.txt\n", "data/keep.txt": "",
                     "data/.gitignore": "!keep.txt\n"})  # fmt: skip
    assert kept_files(tmp_path) == {".gitignore"}


def test_gpuleaseignore_ignores_more_and_can_re_include(tmp_path: Path) -> None:
    build(tmp_path, {
        ".gitignore": "*.bin\n",
        ".gpuleaseignore": "notebooks/\n!weights.bin\n",
        "weights.bin": "w", "other.bin": "o", "notebooks/n.ipynb": "", "train.py": "",
        "sub/.gpuleaseignore": "*.csv\n", "sub/a.csv": "", "a.csv": "",
    })  # fmt: skip
    assert kept_files(tmp_path) == {".gitignore", ".gpuleaseignore", "weights.bin", "train.py",
                                    "sub/.gpuleaseignore", "a.csv"}  # fmt: skip


def test_links_are_kept_as_links_and_never_followed(tmp_path: Path) -> None:
    outside = build(tmp_path / "outside", {"secret.txt": "s"})
    src = build(tmp_path / "src", {"a.txt": "a", "in": "-> a.txt", "out": f"-> {outside}"})
    found = {f.rel: f.kind for f in walk(src)}
    assert found == {"a.txt": Kind.FILE, "in": Kind.LINK, "out": Kind.LINK}


def test_without_rules_only_the_default_excludes_apply(tmp_path: Path) -> None:
    build(tmp_path, {".gitignore": "*\n", "a": "", ".git/x": ""})
    assert kept(tmp_path) == []
    assert [f.rel for f in walk(tmp_path, rules=False)] == [".gitignore", "a"]


# ---- against git itself -----------------------------------------------------------------------

NAMES = ["a", "b", "c.log", "d.txt", "e"]
DIRS = ["", "x/", "x/y/", "z/"]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    name = draw(
        st.sampled_from([*NAMES, "x", "y", "z", "*.log", "*.txt", "*", "?", "[ab]", "**/a"])
    )
    prefix = draw(st.sampled_from(["", "", "/", "x/", "**/", "/x/"]))
    suffix = draw(st.sampled_from(["", "", "/", "/**"]))
    neg = draw(st.sampled_from(["", "", "!"]))
    return neg + prefix + name + suffix


trees = st.dictionaries(
    st.builds(lambda d, n: d + n, st.sampled_from(DIRS), st.sampled_from(NAMES)),
    st.just("content"),
    min_size=1,
    max_size=12,
)
ignore_files = st.dictionaries(
    st.sampled_from(DIRS), st.lists(patterns(), min_size=1, max_size=5), max_size=3
)


def _git_kept(root: Path) -> set[str]:
    home = root.parent / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "XDG_CONFIG_HOME": str(home),
           "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--others", "--exclude-standard"],
        check=True, env=env, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return {p for p in out.split("\0") if p}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=trees, ignores=ignore_files)
def test_gitignore_semantics_match_git(
    files: dict[str, str], ignores: dict[str, list[str]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        spec = {**files}
        for directory, lines in ignores.items():
            spec[directory + ".gitignore"] = "\n".join(lines) + "\n"
        build(root, spec)  # file names and directory names never collide (NAMES, DIRS)
        ours = kept_files(root)
        theirs = _git_kept(root)
        assert ours == theirs, (spec, sorted(ours ^ theirs))
