"""What the job tells its node's agent: ``gpulease.train``'s figures in the stats file.

The job→agent half of the agent↔job base protocol (docs/agent.md, "The job's files"): the agent
names a file in ``GPULEASE_TRAIN_STATS_FILE``; :class:`TrainStats` rewrites it atomically (temp
name, rename; no fsync: a lost report costs nothing) at most every ``interval_s`` seconds on a
step and at once on a checkpoint. The agent reads it at each telemetry pass. Writing never
blocks the job on anything but a small local write and never fails it: the first ``OSError``
(or any other failure) is logged once, later ones are ignored.

Owns the process-wide reporter (:func:`train_stats`, a no-op without the variable) and its
figures: the step (the last one given, else counted from the steps seen), the step time,
samples/s, tokens/s and MFU (from the :class:`~gpulease.train.timer.StepTimer` that timed the
last step, else from the counts given to :meth:`TrainStats.step` over the time since the last
report), the data-wait share (seconds spent waiting for the next batch — :func:`timed_batches`,
``ResumableLoader`` — over the wall time since the last report) and the last checkpoint's step
and time. No states beyond those counters.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulease.atomic import write_atomic
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.train.timer import StepTimer

log = logging.getLogger("gpulease.train")

FILE_ENV = "GPULEASE_TRAIN_STATS_FILE"
DEFAULT_INTERVAL_S = 5.0


class TrainStats:
    """The job's figures, written to ``path`` (None: nowhere; every method is then a no-op
    apart from counting). ``clock`` stamps ``updated_at`` / ``checkpoint_at`` (seconds since the
    epoch), ``monotonic`` measures the time between reports; tests inject both."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_s >= 0:
            raise UserInputError(f"TrainStats(interval_s={interval_s}): must be >= 0")
        self.path = Path(path) if path else None
        self.interval_s = interval_s
        self.clock = clock
        self.monotonic = monotonic
        self.step_number: int | None = None
        self.checkpoint_step: int | None = None
        self.checkpoint_at: float | None = None
        self.timer: StepTimer | None = None
        self._lock = threading.Lock()
        self._since = monotonic()  # the start of the current report window
        self._last_write: float | None = None
        self._window = [0, 0, 0, 0.0]  # steps, samples, tokens, data-wait seconds
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def step(
        self,
        step: int | None = None,
        *,
        samples: int = 0,
        tokens: int = 0,
        timer: StepTimer | None = None,
    ) -> None:
        """A training step ended: ``step`` is its number (None: the previous one + 1), ``samples``
        / ``tokens`` what it processed (for samples/s and tokens/s when no ``timer`` timed it).
        Writes the file when the last report is ``interval_s`` old."""
        if step is not None and step < 0:
            raise UserInputError(f"train stats: step={step} must be >= 0")
        with self._lock:
            if step is None:
                self.step_number = 0 if self.step_number is None else self.step_number + 1
            else:
                self.step_number = step
            if timer is not None:
                self.timer = timer
            self._window[0] += 1
            self._window[1] += max(samples, 0)
            self._window[2] += max(tokens, 0)
            due = self._last_write is None or self.monotonic() - self._last_write >= self.interval_s
        if due:
            self.flush()

    def data_wait(self, seconds: float) -> None:
        """``seconds`` spent waiting for the next batch (counted in the data-wait share)."""
        if seconds > 0:
            with self._lock:
                self._window[3] += seconds

    def checkpoint(self, step: int) -> None:
        """A checkpoint of ``step`` is complete: remember it and report at once."""
        with self._lock:
            self.checkpoint_step = step
            self.checkpoint_at = self.clock()
            if self.step_number is None or self.step_number < step:
                self.step_number = step
        self.flush()

    def figures(self) -> dict[str, Any]:
        """The report as it would be written now (the window is not reset)."""
        with self._lock:
            return self._figures(self.monotonic())

    def flush(self) -> None:
        """Write the report now (and start a new window); never raises."""
        with self._lock:
            now = self.monotonic()
            data = self._figures(now)
            self._since, self._last_write = now, now
            self._window = [0, 0, 0, 0.0]
        if self.path is None or data["step"] is None:
            return
        try:
            write_atomic(self.path, json.dumps(data) + "\n", durable=False)
        except Exception as exc:  # never fail the job over a report
            if not self._failed:
                self._failed = True
                log.warning("gpulease.train: cannot write the train stats to %s: %s (ignored "
                            "from now on)", self.path, exc)  # fmt: skip

    def _figures(self, now: float) -> dict[str, Any]:
        steps, samples, tokens, waited = self._window
        elapsed = now - self._since
        figures: dict[str, Any] = {
            "step": self.step_number,
            "step_time_s": elapsed / steps if steps and elapsed > 0 else None,
            "samples_per_s": samples / elapsed if samples and elapsed > 0 else None,
            "tokens_per_s": tokens / elapsed if tokens and elapsed > 0 else None,
            "mfu": None,
            "data_wait_ratio": min(waited / elapsed, 1.0) if elapsed > 0 and steps else None,
            "checkpoint_step": self.checkpoint_step,
            "checkpoint_at": self.checkpoint_at,
            "updated_at": self.clock(),
            "interval_s": self.interval_s,
        }
        if self.timer is not None:
            figures.update(_timer_figures(self.timer))
        return figures


def _timer_figures(timer: StepTimer) -> dict[str, Any]:
    """Step time, samples/s, tokens/s and MFU over the timer's window (none before its first
    counted step; a timer whose FLOPs count cannot apply gives no MFU)."""
    if not timer.measured:
        return {}
    try:
        speed = timer.throughput()
    except Exception:  # e.g. flops_per_sample given but no samples counted: no figures, no crash
        return {}
    return {
        "step_time_s": speed.step_time_s,
        "samples_per_s": speed.samples_per_s or None,
        "tokens_per_s": speed.tokens_per_s or None,
        "mfu": speed.mfu,
    }


_default: list[TrainStats] = []  # this process's reporter, made on first use
_default_lock = threading.Lock()


def train_stats() -> TrainStats:
    """This process's reporter: writes to ``$GPULEASE_TRAIN_STATS_FILE`` (the agent sets it on
    every node; outside a gpulease task there is none and nothing is written).
    ``StepTimer``, ``CheckpointManager`` and ``ResumableLoader`` report to it by themselves."""
    with _default_lock:
        if not _default:
            stats = TrainStats(os.environ.get(FILE_ENV) or None)
            if stats.enabled:
                atexit.register(stats.flush)  # the last steps of the run are reported too
            _default.append(stats)
        return _default[0]


def report_step(step: int | None = None, *, samples: int = 0, tokens: int = 0) -> None:
    """Tell the agent a step ended (see :meth:`TrainStats.step`); for loops without
    ``StepTimer``. Never raises over the file."""
    train_stats().step(step, samples=samples, tokens=tokens)


def timed_batches(batches: Iterable[Any], stats: TrainStats | None = None) -> Iterator[Any]:
    """Yield from ``batches``, counting the time each ``next`` waits as data wait (the
    input-pipeline share the agent reports)."""
    reporter = stats or train_stats()
    source = iter(batches)
    while True:
        started = reporter.monotonic()
        try:
            batch = next(source)
        except StopIteration:
            return
        reporter.data_wait(reporter.monotonic() - started)
        yield batch
