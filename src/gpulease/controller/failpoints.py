"""Failpoints: ``GPULEASE_FAILPOINT=<name>`` makes the process exit hard (``os._exit``, no
cleanup, no commit) when a launch reaches the named step — how the crash tests prove that every
step can die and the next pass (in a restarted server) finishes the work.

Points, in launch order: ``intent-committed`` (the intent's attempt is committed; the provider
not called yet), ``provider-launched`` (``provider.launch`` returned; nothing recorded),
``nodes-recorded`` (node rows committed), ``task-submitted`` (an agent accepted the task; the
cluster's status not written yet). Moves no states.
"""

from __future__ import annotations

import logging
import os

ENV = "GPULEASE_FAILPOINT"
POINTS = ("intent-committed", "provider-launched", "nodes-recorded", "task-submitted")
EXIT_CODE = 86

log = logging.getLogger("gpulease.controller")


def hit(name: str) -> None:
    """Exit the process now when ``$GPULEASE_FAILPOINT`` names this point."""
    if name not in POINTS:
        raise ValueError(f"unknown failpoint {name!r}")
    if os.environ.get(ENV) == name:
        log.warning("failpoint %s: exiting hard", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(EXIT_CODE)
