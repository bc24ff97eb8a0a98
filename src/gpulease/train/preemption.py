"""Preemption: the agent touches ``$GPULEASE_PREEMPTION_FILE`` then sends SIGTERM.

``on_preemption(cb)`` installs a SIGTERM handler that records the notice and calls ``cb``;
``should_stop()`` is True after SIGTERM or while the preemption file exists; ``exit_preempted()``
exits with code 75 ("preempted, checkpoint taken, resume me").
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn

from gpulease.wire import PREEMPTED_EXIT_CODE

EXIT_PREEMPTED = PREEMPTED_EXIT_CODE  # "preempted, checkpoint taken, resume me" (gpulease.wire)
PREEMPTION_FILE_ENV = "GPULEASE_PREEMPTION_FILE"

_state: dict[str, bool] = {"notified": False}


def _handler(callback: Callable[[], None] | None) -> Callable[[int, FrameType | None], None]:
    def handle(signum: int, frame: FrameType | None) -> None:
        _state["notified"] = True
        if callback is not None:
            callback()

    return handle


def on_preemption(callback: Callable[[], None] | None = None) -> None:
    """Install the SIGTERM handler (main thread only); ``callback`` runs inside the handler.

    Keep the callback short (set a flag); take the checkpoint in the training loop when
    :func:`should_stop` turns True.
    """
    signal.signal(signal.SIGTERM, _handler(callback))


def should_stop() -> bool:
    """True after SIGTERM (with :func:`on_preemption` installed) or when the notice file exists."""
    if _state["notified"]:
        return True
    path = os.environ.get(PREEMPTION_FILE_ENV)
    return path is not None and path != "" and Path(path).exists()


def reset() -> None:
    """Forget a recorded notice (for tests and for a loop that handled it)."""
    _state["notified"] = False


def exit_preempted() -> NoReturn:
    """Exit with code 75 so the agent marks the job PREEMPTED and resumes it."""
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(EXIT_PREEMPTED)
