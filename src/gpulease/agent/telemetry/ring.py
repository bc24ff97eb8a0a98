"""A bounded, thread-safe ring buffer of :class:`~gpulease.agent.telemetry.sample.Sample` s.

Owns the samples an agent keeps in memory: the sampler thread appends, HTTP threads read. When
full, the oldest sample is dropped. Nothing is written to disk: a restarted agent starts empty
(the server keeps the history).
"""

from __future__ import annotations

import threading
from collections import deque

from gpulease.agent.telemetry.sample import Sample


class SampleRing:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a sample ring holds at least one sample")
        self.capacity = capacity
        self._samples: deque[Sample] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def append(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)

    def since(self, at: float | None = None) -> list[Sample]:
        """The samples taken strictly after ``at`` (all of them for ``None``), oldest first."""
        with self._lock:
            samples = list(self._samples)
        if at is None:
            return samples
        return [s for s in samples if s.at > at]

    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._samples)
