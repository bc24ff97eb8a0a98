"""Child processes for the train tests (run as ``python -m tests.train.child MODE ...``).

Modes:
- ``train DIR STEPS OUT [KILL_AT]``: train STEPS steps (resuming from DIR), checkpoint every 2
  steps, write final weights to OUT; with KILL_AT, SIGKILL itself one step after the durable
  checkpoint at KILL_AT.
- ``forkserver DIR MB``: import torch, then for each ``start`` line on stdin fork a worker that
  saves an MB-sized state in a loop (printing its pid); ``reap`` waits for it and prints status.
- ``dist DIR``: one rank of a gloo group (env RANK, WORLD_SIZE, MASTER_ADDR/PORT): save, restore.
- ``preempt DIR``: install the SIGTERM handler, train until ``should_stop()``, save, exit 75.
"""

from __future__ import annotations

import os
import signal
import sys

import torch

from gpulease.train import CheckpointManager, exit_preempted, on_preemption, should_stop
from tests.train.helpers import make, train_step


def train(directory: str, steps: int, out: str, kill_at: int | None) -> None:
    model, opt, sched = make()
    mgr = CheckpointManager(directory, keep=2)
    start = mgr.restore(model=model, opt=opt, sched=sched) or 0
    for step in range(start + 1, steps + 1):
        train_step(model, opt, sched)
        if step % 2 == 0:
            mgr.save(step, model=model, opt=opt, sched=sched, extra={"step": step})
            if kill_at is not None and step == kill_at:
                mgr.wait()
        if kill_at is not None and step == kill_at + 1:
            os.kill(os.getpid(), signal.SIGKILL)
    mgr.wait()
    torch.save(model.state_dict(), out)


class Big:
    """A large state whose every element equals the step it was saved at."""

    def __init__(self, mb: int) -> None:
        self.tensor = torch.zeros(mb * (1 << 20) // 4)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"t": self.tensor}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.tensor = state["t"]


def save_forever(directory: str, mb: int) -> None:
    big = Big(mb)
    mgr = CheckpointManager(directory, keep=2)
    step = (mgr.latest() or 0) + 1
    while True:
        big.tensor.fill_(float(step))
        mgr.save(step, big=big, extra={"step": step})
        step += 1


def forkserver(directory: str, mb: int) -> None:
    pid = 0
    for line in sys.stdin:
        if line.strip() == "start":
            pid = os.fork()
            if pid == 0:
                try:
                    save_forever(directory, mb)
                finally:
                    os._exit(1)
            print(pid, flush=True)
        elif line.strip() == "reap":
            _, status = os.waitpid(pid, 0)
            print(status, flush=True)


def preempt(directory: str) -> None:
    on_preemption()
    model, opt, sched = make()
    mgr = CheckpointManager(directory)
    print("ready", flush=True)
    step = 0
    while not should_stop():
        step += 1
        train_step(model, opt, sched)
    mgr.save(step, model=model, opt=opt, extra={"preempted": True})
    mgr.wait()
    exit_preempted()


def dist(directory: str) -> None:
    import torch.distributed as td

    td.init_process_group("gloo")
    model, opt, _ = make()
    mgr = CheckpointManager(directory)
    mgr.save(1, model=model, opt=opt, extra={"rank": td.get_rank()})
    wrote = mgr._thread is not None
    mgr.wait()
    td.barrier()
    fresh, fresh_opt, _ = make(seed=3)
    step = mgr.restore(model=fresh, opt=fresh_opt)
    print(f"rank={td.get_rank()} wrote={wrote} step={step} extra={mgr.extra}", flush=True)
    td.destroy_process_group()


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "train":
        kill_at = int(argv[4]) if len(argv) > 4 else None
        train(argv[1], int(argv[2]), argv[3], kill_at)
    elif mode == "forkserver":
        forkserver(argv[1], int(argv[2]))
    elif mode == "dist":
        dist(argv[1])
    elif mode == "preempt":
        preempt(argv[1])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
