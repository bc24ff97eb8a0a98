"""``gpulease bench``: measure a node against what was sold — GPUs present, matmul throughput per
dtype, memory and host↔device bandwidth, all-reduce within and across nodes, disk, checkpoint
store reads and two small training steps — each check with its figure, its reference, the ratio
and a verdict (:mod:`.report`, the contract every other part reads). Importing this package
loads neither numpy nor torch; the checks import what they need when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpulease.bench.runner import run_bench

__all__ = ["run_bench"]


def __getattr__(name: str) -> Any:
    """``gpulease.bench.run_bench``, imported on first use (the runner loads the catalog)."""
    if name == "run_bench":
        from gpulease.bench.runner import run_bench

        return run_bench
    raise AttributeError(f"module 'gpulease.bench' has no attribute {name!r}")
