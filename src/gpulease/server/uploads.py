"""A task's ``workdir`` and ``file_mounts`` on nodes that do not share this machine's files.

Providers say whether their nodes see this machine's files at the same paths
(``Provider.shares_files``: local and sim do; aws and slurm do not). For those that do not,
before the task is submitted to a node each local source is synced into the node's staging dir
through its agent — ``GET /v1/files/<bundle>`` (what the node holds), then ``PUT`` of a tar
stream with only the paths whose manifest entry differs and the list of paths to delete — and
the task is submitted with the node paths the agent answered in place of the local ones, so the
agent's own copy step runs unchanged. Bundles: ``workdir``, and ``mount-<slug>-<hash>`` per file
mount (stable for a remote path). URL sources (``s3://…``) are passed on as they are.

Owns :class:`Uploader` (the sync, with one hash cache for every node) and
:func:`check_sources` (the launch-time check: every source exists and is within the size limit,
and none holds a link out of it when a plan's nodes need uploads). Moves no states.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulease import filesync
from gpulease.agent.client import AgentClient
from gpulease.errors import Permanent, Retryable
from gpulease.wire import NodeTask

log = logging.getLogger("gpulease.server")

WORKDIR_BUNDLE = "workdir"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SPOOL = 8 << 20  # bytes of a sync stream kept in memory; larger ones spill to a temp file


class FileDeliveryError(Permanent):
    """A source cannot be delivered: missing, too large, a link out of it, the node's limit."""


class FileDeliveryDeferred(Retryable):
    """A source could not be read this time (a file changed while being sent)."""


def is_url(source: str) -> bool:
    return bool(_URL.match(source))


def mount_bundle(remote: str) -> str:
    """The bundle of the file mount at ``remote``: readable, stable, unique per remote path."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", remote).strip("-._")[:48] or "root"
    return f"mount-{slug}-{hashlib.sha256(remote.encode()).hexdigest()[:12]}"


@dataclass(frozen=True, slots=True)
class Source:
    label: str  # how errors name it: "workdir", "file_mounts /data"
    bundle: str
    path: str


def sources(workdir: str | None, file_mounts: Mapping[str, str]) -> list[Source]:
    """The local sources of a task (URLs left out)."""
    found = [Source("workdir", WORKDIR_BUNDLE, workdir)] if workdir else []
    for remote, local in file_mounts.items():
        if not is_url(local):
            found.append(Source(f"file_mounts {remote}", mount_bundle(remote), local))
    return found


def _links_out(found: list[filesync.Found]) -> list[str]:
    import os

    links = [f for f in found if f.kind is filesync.Kind.LINK]
    return [f.rel for f in links if filesync.link_escapes(f.rel, os.readlink(f.path))]


def _refuse_links_out(source: Source, escaping: list[str]) -> None:
    if escaping:
        more = f" and {len(escaping) - 3} more" if len(escaping) > 3 else ""
        shown = ", ".join(escaping[:3]) + more
        raise filesync.SourceError(
            f"{source.label}: {source.path} holds symbolic links out of it ({shown}); a node "
            "that does not share this machine's files cannot follow them: copy the files in, "
            "or give them their own file_mounts entry"
        )


def check_sources(
    workdir: str | None, file_mounts: Mapping[str, str], *, limit: int, remote: bool
) -> None:
    """Raise :class:`~gpulease.filesync.SourceError` (a ``UserInputError``: the launch fails
    with exit code 2) when a source is missing or over ``limit`` bytes, or — with ``remote``,
    when some plan's nodes need uploads — holds a link out of it."""
    for source in sources(workdir, file_mounts):
        found = filesync.source_tree(source.label, source.path)
        filesync.check_size(source.label, source.path, found, limit)
        if remote:
            _refuse_links_out(source, _links_out(found))


@dataclass(frozen=True, slots=True)
class SyncReport:
    """One source synced to one node: what was sent (paths and stream bytes) and deleted."""

    bundle: str
    node_path: str  # what the submission names: the bundle dir, or the file in it
    sent: tuple[str, ...]
    deleted: tuple[str, ...]
    sent_bytes: int
    kept: int  # paths the source has (after the ignore rules)


class Uploader:
    def __init__(self, limit: int, cache: filesync.HashCache | None = None) -> None:
        self.limit = limit
        self.cache = cache or filesync.HashCache()

    def deliver(self, client: AgentClient, task: NodeTask) -> tuple[NodeTask, list[SyncReport]]:
        """Sync every local source of ``task`` to the node; the task with node paths."""
        reports: list[SyncReport] = []
        paths: dict[str, str] = {}
        for source in sources(task.workdir, task.file_mounts):
            report = self.sync(client, source)
            reports.append(report)
            paths[source.bundle] = report.node_path
        workdir = paths[WORKDIR_BUNDLE] if task.workdir else None
        mounts = {
            remote: local if is_url(local) else paths[mount_bundle(remote)]
            for remote, local in task.file_mounts.items()
        }
        return task.model_copy(update={"workdir": workdir, "file_mounts": mounts}), reports

    def sync(self, client: AgentClient, source: Source) -> SyncReport:
        """Bring the node's bundle to the source's kept files: only what differs is sent."""
        try:
            found = filesync.source_tree(source.label, source.path)
            filesync.check_size(source.label, source.path, found, self.limit)
            _refuse_links_out(source, _links_out(found))
            local = filesync.manifest(found, self.cache)
        except filesync.SourceError as exc:
            raise FileDeliveryError(str(exc)) from None
        except OSError as exc:
            raise _read_error(source, exc) from None
        held = client.file_manifest(source.bundle)
        try:
            remote = filesync.manifest_from_json(held["manifest"])
            bundle_path, node_limit = str(held["path"]), int(held["max_upload_bytes"])
        except (KeyError, TypeError, ValueError) as exc:
            why = f"{source.label}: the node's manifest is unreadable: {exc}"
            raise FileDeliveryError(why) from None
        is_dir = Path(source.path).expanduser().is_dir()
        node_path = bundle_path if is_dir else f"{bundle_path}/{found[0].rel}"
        changes = filesync.diff(local, remote)
        if not changes.send and not changes.delete and local:  # an empty one is always sent,
            return SyncReport(source.bundle, node_path, (), (), 0, len(local))  # making its dir
        packed = _send(client, source, changes,
                       found=found, local=local, node_limit=node_limit)  # fmt: skip
        log.info("%s: sent %d paths (%s), deleted %d, %d unchanged", source.label,
                 len(packed.sent), filesync.human_size(packed.size), len(packed.deleted),
                 len(local) - len(packed.sent))  # fmt: skip
        return SyncReport(source.bundle, node_path, packed.sent, packed.deleted, packed.size,
                          len(local))  # fmt: skip


def _send(
    client: AgentClient,
    source: Source,
    changes: filesync.Changes,
    *,
    found: list[filesync.Found],
    local: filesync.Manifest,
    node_limit: int,
) -> filesync.Packed:
    """Pack ``changes`` into a spooled tar stream and PUT it to the node."""
    by_rel = {f.rel: f for f in found}
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as body:
        try:
            packed = filesync.pack(by_rel, local, changes, body)
        except OSError as exc:
            raise _read_error(source, exc) from None
        if packed.size > node_limit:
            raise FileDeliveryError(
                f"{source.label}: {filesync.human_size(packed.size)} to send, over the "
                f"node's upload limit of {filesync.human_size(node_limit)}"
            )
        body.seek(0)
        try:
            client.put_files(source.bundle, body, packed.size)
        except OSError as exc:  # the spooled stream could not be read back
            raise FileDeliveryDeferred(f"{source.label}: upload failed: {exc}") from None
    return packed


def _read_error(source: Source, exc: OSError) -> FileDeliveryError | FileDeliveryDeferred:
    why = f"{source.label}: cannot read {exc.filename or source.path}: {exc.strerror or exc}"
    return FileDeliveryError(why) if isinstance(exc, PermissionError) else FileDeliveryDeferred(why)
