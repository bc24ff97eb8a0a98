"""The per-node agent: runs a task's setup and run scripts with the node's environment, keeps
their output in a log file served by byte offset, relays preemption notices and cancels to the
job's process group, and reports the task's state and a heartbeat.

Start it (the providers do, as a subprocess)::

    python -m gpulease.agent serve --host 127.0.0.1 --port PORT --token-file FILE \\
        --node-dir DIR [--port-file FILE] [--node-rank N] [--final-sync-timeout S]

Modules: :mod:`~gpulease.agent.api` (request bodies), :mod:`~gpulease.agent.state` (task states
and the record on disk), :mod:`~gpulease.agent.runner` (one task's phases),
:mod:`~gpulease.agent.jobproc` (processes), :mod:`~gpulease.agent.ckpt_sync` (checkpoint
restore and sync with a store), :mod:`~gpulease.agent.service` (the operations),
:mod:`~gpulease.agent.http` (the ``/v1`` API), :mod:`~gpulease.agent.client` (the server's
side). See ``docs/agent.md``.
"""

from __future__ import annotations

from gpulease.agent.api import API_VERSION

__all__ = ["API_VERSION"]
