"""Providers: the places that run nodes, behind one interface (:mod:`gpulease.providers.base`).

``local`` (:class:`gpulease.providers.local.LocalProvider`, the default) runs nodes as process
groups on this machine; ``sim``, ``aws`` and ``slurm`` follow. Every provider passes the
conformance suite in ``tests/providers/conformance.py``. See ``docs/providers.md``.

The provider modules are imported on demand (``import gpulease.providers`` loads only the
interface).
"""

from __future__ import annotations

from gpulease.providers.base import (
    TAG_CLUSTER,
    TAG_NODE_RANK,
    TAG_OWNER,
    TAG_REQUEST,
    CapacityError,
    EventKind,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    ProviderUnavailable,
    QuotaError,
    SupportsMultiNode,
    SupportsNodeToken,
    SupportsSpot,
    SupportsStopStart,
)

__all__ = [
    "TAG_CLUSTER",
    "TAG_NODE_RANK",
    "TAG_OWNER",
    "TAG_REQUEST",
    "CapacityError",
    "EventKind",
    "Instance",
    "InstanceState",
    "LaunchRequest",
    "Provider",
    "ProviderError",
    "ProviderEvent",
    "ProviderUnavailable",
    "QuotaError",
    "SupportsMultiNode",
    "SupportsNodeToken",
    "SupportsSpot",
    "SupportsStopStart",
]
