"""The orphan sweep (DESIGN 2): instances tagged with this server's owner id that no cluster
claims are terminated — never anything another owner tagged.

An instance is claimed when a node row that is not TERMINATED names it, or when its request tag
is an open (PENDING or SUBMITTED) launch intent: a launch in flight whose nodes are not recorded
yet. Instances are listed BEFORE the DB is read: an instance seen was launched under an intent
committed before it, so the read that follows sees that intent — a launch in flight is never
mistaken for an orphan. Moves no states (it only calls ``terminate``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping

from sqlalchemy import Engine, select

from gpulease.controller.snapshot import GONE
from gpulease.errors import GpuleaseError
from gpulease.providers.base import TAG_OWNER, TAG_REQUEST, Instance, Provider
from gpulease.state import IntentStatus, NodeState, session_scope
from gpulease.state.models import LaunchIntent, Node

log = logging.getLogger("gpulease.controller")


def _listed(providers: Mapping[str, Provider], owner: str) -> dict[str, list[Instance]]:
    found: dict[str, list[Instance]] = {}
    for name, provider in sorted(providers.items()):
        try:
            found[name] = provider.list_instances({TAG_OWNER: owner})
        except GpuleaseError as exc:
            log.info("orphan sweep: %s did not list instances: %s", name, exc)
    return found


def _claimed(engine: Engine) -> tuple[set[tuple[str, str]], set[str]]:
    with session_scope(engine) as session:
        nodes = session.execute(
            select(Node.provider, Node.instance_id).where(Node.state != NodeState.TERMINATED)
        )
        open_requests = session.scalars(
            select(LaunchIntent.request_id).where(
                LaunchIntent.status.in_([IntentStatus.PENDING, IntentStatus.SUBMITTED])
            )
        )
        return {(p, i) for p, i in nodes}, set(open_requests)


def find_orphans(
    listed: Mapping[str, list[Instance]],
    nodes: set[tuple[str, str]],
    requests: set[str],
    owner: str,
) -> dict[str, list[str]]:
    """Provider → ids of the listed instances that are ours and that nothing claims."""
    orphans: dict[str, list[str]] = defaultdict(list)
    for name, instances in listed.items():
        for inst in instances:
            if inst.tags.get(TAG_OWNER) != owner or inst.state in GONE:
                continue
            if (inst.provider, inst.id) in nodes or inst.tags.get(TAG_REQUEST) in requests:
                continue
            orphans[name].append(inst.id)
    return dict(orphans)


def sweep_orphans(engine: Engine, providers: Mapping[str, Provider], owner: str) -> list[str]:
    """Terminate this owner's unclaimed instances; returns their ids."""
    listed = _listed(providers, owner)
    nodes, requests = _claimed(engine)
    orphans = find_orphans(listed, nodes, requests, owner)
    done: list[str] = []
    for name, ids in sorted(orphans.items()):
        try:
            providers[name].terminate(ids)
        except GpuleaseError as exc:
            log.warning("orphan sweep: terminate on %s failed: %s", name, exc)
            continue
        log.warning("orphan sweep: terminated %s on %s", ", ".join(ids), name)
        done += ids
    return done
