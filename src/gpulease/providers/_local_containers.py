"""The containers a local node's agent left behind, removed with the node.

What this module owns: finding and removing them. A task with an image runs in a container of
the node's engine (Podman or Docker), whose processes live outside the node's session (under
Podman's conmon or Docker's daemon), so killing the session does not end them. The agent labels
every container it starts ``gpulease.node=<node dir>`` and notes it in ``<node dir>/containers/``
first (gpulease.agent.task_container); once the node's processes are gone the local provider
removes those, as a terminated VM takes its containers with it. The engine reads its
configuration from the environment (``CONTAINERS_CONF``, ``CONTAINERS_STORAGE_CONF``) as the
agents do, which inherit it from the same process.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger("gpulease.providers.local")

NODE_LABEL = "gpulease.node"  # the label gpulease.agent.task_container sets
MARKERS = "containers"  # the node dir's folder where the agent notes each container it starts
_ENGINES = ("podman", "docker")
_TIMEOUT_S = 60.0


def remove_node_containers(node_dir: Path) -> int:
    """Remove every container labelled with ``node_dir``, on every engine found; the count.
    Nothing to ask the engines when the agent noted no container (most nodes)."""
    markers = node_dir / MARKERS
    if not markers.is_dir() or not any(markers.iterdir()):
        return 0
    removed = 0
    for kind in _ENGINES:
        engine = shutil.which(kind)
        if engine is None:
            continue
        ids = _run([engine, "ps", "--all", "--quiet", "--filter",
                    f"label={NODE_LABEL}={node_dir.resolve()}"]).split()  # fmt: skip
        if ids:
            _run([engine, "rm", "--force", *ids])
            log.info("removed %d container(s) of node %s (%s)", len(ids), node_dir.name, kind)
            removed += len(ids)
    return removed


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s: %s", " ".join(argv[:3]), exc)
        return ""
    if done.returncode != 0:
        log.warning("%s failed: %s", " ".join(argv[:3]), done.stderr.strip()[-300:])
        return ""
    return done.stdout
