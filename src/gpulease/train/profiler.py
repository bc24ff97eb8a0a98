"""Profiling a few training steps: :func:`profile` (``gpulease.train.profile``), over
``torch.profiler``.

``with profile(steps=20) as prof: for batch in loader: ...; prof.step()`` skips ``wait`` steps,
warms up for ``warmup`` more, records ``steps`` steps (CPU activity, and CUDA when available),
then writes, into ``$GPULEASE_WORK_DIR/profile/rank-<R>/`` (or ``out``):

- ``trace.json.gz``: the Chrome trace (``chrome://tracing``, Perfetto, TensorBoard);
- ``summary.json``: the top operators by self time and the split of step time into compute,
  communication, data wait and other (how each is derived: :mod:`.profile_summary`).

Both are written atomically (a temp name, fsync, rename), the summary last: a reader that finds
``summary.json`` finds the trace of the same run. ``R`` is this process's own rank
(``torch.distributed`` when initialised, else ``RANK``, else ``GPULEASE_NODE_RANK``, else 0), and
the profiler sees only this process, so every rank writes its own data. Once the recorded
steps are written, the profiler is stopped: later ``prof.step()`` calls cost a counter
increment. A loop that ends before the last recorded step still gets its files (of the steps
it made) when the ``with`` block ends. ``gpulease profile CLUSTER --rank R`` fetches them.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulease.atomic import atomic_file, temp_path, write_json_atomic
from gpulease.errors import UserInputError
from gpulease.train.profile_summary import Span, summarise

if TYPE_CHECKING:
    from types import TracebackType

    import torch.profiler

log = logging.getLogger("gpulease.train")

WORK_DIR_ENV = "GPULEASE_WORK_DIR"
SUMMARY_FILE = "summary.json"
TRACE_FILE = "trace.json.gz"
FORMAT = "gpulease-profile"


class Profiler:
    """What :func:`profile` returns; call :meth:`step` once per training step."""

    def __init__(self, steps: int, *, wait: int, warmup: int, out: Path, rank: int) -> None:
        self.steps, self.wait, self.warmup = steps, wait, warmup
        self.out = out
        self.rank = rank
        self.step_num = 0
        self.summary: dict[str, Any] | None = None  # set once the files are written
        self.error: str | None = None  # set when writing them failed (the loop goes on)
        self._torch: torch.profiler.profile | None = None
        self._closing = False  # the last ProfilerStep span is the unfinished one after step()

    @property
    def done(self) -> bool:
        """The window is over: its files are written (or writing them failed)."""
        return self.summary is not None or self.error is not None

    def __enter__(self) -> Profiler:
        import torch
        from torch.profiler import ProfilerActivity, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._torch = torch.profiler.profile(
            activities=activities,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.steps, repeat=1),
            on_trace_ready=self._write,
        )
        self._torch.__enter__()  # type: ignore[no-untyped-call]
        return self

    def step(self) -> None:
        """The end of one training step (put it last in the loop body: the time until the next
        step's first operator counts as waiting for data)."""
        self.step_num += 1
        if self._torch is None:
            return
        self._torch.step()
        if self.done:
            self._stop()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        """Stop the torch profiler (a window still recording is written)."""
        profiler, self._torch = self._torch, None
        if profiler is not None:
            self._closing = True
            profiler.__exit__(None, None, None)  # type: ignore[no-untyped-call]

    def _write(self, prof: torch.profiler.profile) -> None:
        """torch's ``on_trace_ready``: a failure is logged and kept in :attr:`error`, never
        raised into the training loop (a profile is not worth a run)."""
        try:
            self._write_files(prof)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("profile: writing rank %d's files into %s failed", self.rank, self.out)

    def _write_files(self, prof: torch.profiler.profile) -> None:
        summary = summarise(_spans(prof), drop_last_step=self._closing)
        if not summary["steps"]:
            log.warning("profile: no step was recorded (call prof.step() once per step)")
        self.out.mkdir(parents=True, exist_ok=True)
        _write_trace(prof, self.out / TRACE_FILE)
        summary = {
            "format": FORMAT,
            "version": 1,
            "rank": self.rank,
            "node_rank": _env_int("GPULEASE_NODE_RANK"),
            "task_id": os.environ.get("GPULEASE_TASK_ID") or None,
            "created_at": time.time(),
            "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.steps},
            "trace": TRACE_FILE,
            **summary,
        }
        write_json_atomic(self.out / SUMMARY_FILE, summary)
        self.summary = summary
        log.info("profile: %d steps of rank %d written to %s", summary["steps"], self.rank,
                 self.out)  # fmt: skip


def profile(steps: int = 10, *, wait: int = 1, warmup: int = 1, out: str | os.PathLike[str] |
            None = None) -> Profiler:  # fmt: skip
    """A profiler of ``steps`` training steps after ``wait`` skipped and ``warmup`` warm-up
    steps; its files go to ``out``, default ``$GPULEASE_WORK_DIR/profile/rank-<R>/`` (without
    the variable: ``./profile/rank-<R>/``). Use it as a context manager."""
    for name, value, least in (("steps", steps, 1), ("wait", wait, 0), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UserInputError(f"profile({name}={value!r}): must be an integer >= {least}")
    rank = process_rank()
    target = Path(out) if out is not None else default_dir(rank)
    return Profiler(steps, wait=wait, warmup=warmup, out=target, rank=rank)


def default_dir(rank: int) -> Path:
    base = os.environ.get(WORK_DIR_ENV) or "."
    return Path(base) / "profile" / f"rank-{rank}"


def process_rank() -> int:
    """This process's rank: ``torch.distributed``'s when initialised, else ``RANK``, else
    ``GPULEASE_NODE_RANK`` (one process per node), else 0."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    for name in ("RANK", "GPULEASE_NODE_RANK"):
        value = _env_int(name)
        if value is not None:
            return value
    return 0


def _env_int(name: str) -> int | None:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def _spans(prof: torch.profiler.profile) -> list[Span]:
    spans = []
    for event in prof.events() or []:  # type: ignore[no-untyped-call]
        parents: list[str] = []
        parent = event.cpu_parent
        while parent is not None:
            parents.append(parent.name)
            parent = parent.cpu_parent
        cpu = getattr(event.device_type, "name", "") == "CPU"
        spans.append(
            Span(
                name=event.name,
                start_us=float(event.time_range.start),
                end_us=float(event.time_range.end),
                device="cpu" if cpu else "cuda",
                annotation=bool(getattr(event, "is_user_annotation", False)),
                parents=tuple(reversed(parents)),
                self_cpu_us=float(event.self_cpu_time_total) if cpu else 0.0,
                self_device_us=float(event.self_device_time_total) if cpu else 0.0,
            )
        )
    return spans


def _write_trace(prof: torch.profiler.profile, path: Path) -> None:
    """The Chrome trace, gzipped, atomically: torch writes it under a temp name, then it is
    compressed into the target's own temp file and renamed."""
    plain = temp_path(path.with_suffix(""))
    try:
        prof.export_chrome_trace(str(plain))
        with (
            open(plain, "rb") as source,
            atomic_file(path) as fh,
            gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6, mtime=0) as gz,
        ):
            shutil.copyfileobj(source, gz, 1 << 20)
    finally:
        plain.unlink(missing_ok=True)


def read_summary(directory: Path) -> dict[str, Any]:
    """The summary a profile run wrote into ``directory`` (``FileNotFoundError`` when none)."""
    data: dict[str, Any] = json.loads((directory / SUMMARY_FILE).read_text())
    return data
