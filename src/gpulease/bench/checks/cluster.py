"""The process group of the cross-node checks (:class:`ClusterGroup`): ``torch.distributed`` at
``tcp://host:port`` of the run's :class:`~gpulease.bench.options.Rendezvous`, gloo for CPU
tensors and NCCL for CUDA ones. Opened on first use, with a timeout so that a node that never
arrives (or a check one node skipped) fails the collective instead of hanging the bench;
a failure to open is kept, so the next family does not wait again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpulease.bench.options import Rendezvous

TIMEOUT_S = 120.0


class ClusterGroup:
    def __init__(self, rendezvous: Rendezvous, cuda: bool, timeout_s: float = TIMEOUT_S) -> None:
        self.rendezvous = rendezvous
        self.cuda = cuda
        self.timeout_s = timeout_s
        self._dist: Any = None
        self._error: BaseException | None = None

    @property
    def backend(self) -> str:
        return "cpu:gloo,cuda:nccl" if self.cuda else "gloo"

    def open(self) -> Any:
        """``torch.distributed``, its default group joined (raises what joining raised)."""
        if self._dist is not None:
            return self._dist
        if self._error is not None:
            raise RuntimeError(f"the cluster group did not open: {self._error}")
        try:
            import torch
            import torch.distributed as dist

            if self.cuda:
                torch.cuda.set_device(0)
            r = self.rendezvous
            dist.init_process_group(self.backend, init_method=f"tcp://{r.host}:{r.port}",
                                    rank=r.rank, world_size=r.world,
                                    timeout=timedelta(seconds=self.timeout_s))  # fmt: skip
        except BaseException as exc:
            self._error = exc
            raise
        self._dist = dist
        return dist

    def close(self) -> None:
        if self._dist is not None:
            self._dist.destroy_process_group()
            self._dist = None
