"""Getting a directory (a task's ``workdir``, a file mount) from one machine to another: which
files travel (default excludes, ``.gitignore``, ``.gpuleaseignore``), the size limit, manifests
and their difference (only changed files are sent again), the tar stream that carries the
changes and the deletions, and applying it safely on the receiving side.

A base package (it imports only the other base modules): the server packs
(:mod:`gpulease.server.uploads`), the node agent applies (``PUT /v1/files/<bundle>``) and copies
a tree locally with the same rules (:mod:`gpulease.agent.files`). The agent imports this package
only when it moves files (``tarfile`` and ``pathspec`` cost ~50 ms), so its start-up stays
light. Moves no states.
"""

from gpulease.filesync.transfer import (
    Applied,
    BadStream,
    Packed,
    Readable,
    UnsafePath,
    apply_stream,
    copy_file,
    copy_tree,
    pack,
    safe_rel,
)
from gpulease.filesync.tree import (
    CONFIG_KEY,
    CONFIG_SECTION,
    DEFAULT_EXCLUDES,
    DEFAULT_MAX_MB,
    IGNORE_FILES,
    Changes,
    Entry,
    Found,
    HashCache,
    Kind,
    Manifest,
    SourceError,
    check_size,
    diff,
    human_size,
    link_escapes,
    links_out,
    manifest,
    manifest_from_json,
    manifest_to_json,
    max_bytes,
    source_tree,
    tree_size,
    walk,
)

__all__ = [
    "CONFIG_KEY",
    "CONFIG_SECTION",
    "DEFAULT_EXCLUDES",
    "DEFAULT_MAX_MB",
    "IGNORE_FILES",
    "Applied",
    "BadStream",
    "Changes",
    "Entry",
    "Found",
    "HashCache",
    "Kind",
    "Manifest",
    "Packed",
    "Readable",
    "SourceError",
    "UnsafePath",
    "apply_stream",
    "check_size",
    "copy_file",
    "copy_tree",
    "diff",
    "human_size",
    "link_escapes",
    "links_out",
    "manifest",
    "manifest_from_json",
    "manifest_to_json",
    "max_bytes",
    "pack",
    "safe_rel",
    "source_tree",
    "tree_size",
    "walk",
]
