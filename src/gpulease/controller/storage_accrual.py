"""Storage accrual: the cost ledger's ``storage`` rows — what the managed jobs' checkpoint stores
cost to keep — written through :mod:`gpulease.state.ledger`, once per cluster-loop pass.

Each managed job has a checkpoint store (``Job.task["checkpoint"]["store"]``); the jobs are
learnt incrementally (new job ids each pass, and any of the last few ids not seen yet: a job
committed after a later one), a store URL standing for the latest job that uses it. A store
whose scheme is priced (:class:`~gpulease.storage.pricing.StoragePricing`, the config's
``cost:``) is measured — its bytes counted, :meth:`CheckpointStore.total_bytes` —
when this server has not measured it yet, then every ``measure_every_s``. A measurement is I/O
(an S3 listing), so it runs on a background worker thread; a pass only submits the stores that
are due and applies the results that are in, and never waits on I/O. A failed measurement is
logged once per store and tried again after a jittered backoff; the open row advances as it was.

Rows (``kind`` ``storage``, ``subject`` the store URL, ``quantity`` the GB = bytes / 1e9,
``price_per_hour`` = GB × $/GB-month / 730):

- a measurement of a store without an open row opens one at the measurement's instant (the
  bytes before the first measurement are unknown, so they are not billed);
- a measurement with another byte count (or another owner job) closes the open row at the
  measurement's instant and opens the next there; one of 0 bytes closes it (billing stops);
- between measurements each pass advances the open row's end to now (at most every
  :data:`~gpulease.controller.accrual.ADVANCE_EVERY_S`; a row just opened at once), so a server
  down for an hour bills that hour at its first pass back, once;
- a scheme priced at 0 (``local`` by default) writes no rows, and is not measured.

Finished jobs' stores keep being measured: the cloud bills the bytes until they are deleted.
After a restart the open rows are found again by their subject. Times are the server's clock
(never a simulated market clock). Moves no statuses; writes only ledger rows.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpulease.backoff import backoff_delay
from gpulease.billing import HOURS_PER_MONTH
from gpulease.clock import Clock
from gpulease.controller.accrual import ADVANCE_EVERY_S, os_user
from gpulease.state import session_scope
from gpulease.state.ledger import EntryFacts, advance_open_rows, close, entry_subject, open_entry
from gpulease.state.models import Job, LedgerEntry
from gpulease.storage.pricing import StoragePricing, scheme_of
from gpulease.storage.store import store_from_url

log = logging.getLogger("gpulease.controller.storage_accrual")

BILLING = "second"  # storage is billed by the second of the measured bytes
RESCAN_IDS = 8  # ids this far below the newest seen are read again while not seen yet
RETRY_BASE_S = 60.0
_MAX_SUBJECT = 200  # entry_key is 255 characters: a longer URL is keyed by its hash


def measure_store(url: str) -> int:
    """The bytes the store at ``url`` holds (I/O: runs on the worker thread)."""
    return store_from_url(url).total_bytes()


def store_subject(url: str) -> str:
    """The ledger subject of a store: its URL, or ``sha256:…`` of a URL too long for a key."""
    if len(url) <= _MAX_SUBJECT:
        return url
    return "sha256:" + hashlib.sha256(url.encode()).hexdigest()


def normal_url(url: str) -> str:
    """One spelling per store: a plain path is ``local://PATH``; no trailing ``/``."""
    if "://" not in url:
        url = f"local://{url}"
    head, _, rest = url.partition("://")
    return f"{head}://{rest.rstrip('/') or rest}"


@dataclass
class _Store:
    """What the accrual knows of one store between passes."""

    url: str
    job_id: int | None = None
    task_name: str | None = None
    row: tuple[Any, ...] | None = None  # open row: (id, started, run, billing, price, qty, job)
    row_end: float = 0.0
    due_at: float = 0.0  # the next measurement may start then (0: at once)
    failures: int = 0
    pending: Future[tuple[int, float]] | None = None


@dataclass
class StorageAccrual:
    """Writes the checkpoint stores' ``storage`` rows; one per server, in its loop thread."""

    engine: Engine
    pricing: StoragePricing
    clock: Clock
    user: str = field(default_factory=os_user)
    measure: Callable[[str], int] = measure_store
    rng: random.Random = field(default_factory=random.Random)
    _stores: dict[str, _Store] = field(default_factory=dict)  # subject → store
    _last_job: int = 0
    _recent: set[int] = field(default_factory=set)  # ids in (last - RESCAN_IDS, last] read
    _loaded: bool = False
    _pool: ThreadPoolExecutor | None = None

    def run(self) -> int:
        """One pass: learn new jobs' stores, apply finished measurements, advance open rows,
        submit the measurements that are due. The number of ledger rows written."""
        now = self.clock.now()
        try:
            with session_scope(self.engine) as session:
                moved = 0
                if self.pricing.bills_anything:
                    moved += self._learn(session, now)
                if not self._loaded:  # after the jobs: a hashed subject needs its job's URL
                    moved += self._load_open_rows(session, now)
                    self._loaded = True
                if not self.pricing.bills_anything:
                    return moved
                moved += self._apply(session, now)
                moved += self._advance(session, now)
        except BaseException:  # rolled back: read the open rows again on the next pass
            self._loaded = False
            for store in self._stores.values():
                store.row = None
            raise
        self._submit(now)
        return moved

    def wait_idle(self, timeout: float | None = None) -> None:
        """Wait for the measurements in flight (tests; a pass never calls it)."""
        for store in list(self._stores.values()):
            if store.pending is not None:
                store.pending.exception(timeout)

    def close(self) -> None:
        """Stop the worker thread (measurements not started are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # ---- learning the stores ----------------------------------------------------------------

    def _load_open_rows(self, session: Session, now: float) -> int:
        """The open ``storage`` rows in the DB (an earlier server's, or this one's before a
        rolled-back pass): they go on from where they ended."""
        e = LedgerEntry
        stmt = select(e).where(e.kind == "storage", e.closed.is_(False)).order_by(e.id)
        moved = 0
        seen: set[str] = set()
        for row in session.scalars(stmt):
            subject = entry_subject(row.entry_key)
            known = self._stores.get(subject)
            url = known.url if known else None if subject.startswith("sha256:") else subject
            if url is None or self.pricing.price_of(url) <= 0 or subject in seen:
                # unpriced now, or a second open row of one store: billing stops where it was
                moved += close(row, row.ended_at, now=now)
                continue
            seen.add(subject)
            store = known or _Store(url, job_id=row.job_id, task_name=row.task_name)
            self._remember(store, row)
            self._stores[subject] = store
            if store.job_id is not None and row.job_id != store.job_id:  # taken over meanwhile
                moved += self._reopen(session, subject, store, row.quantity or 0.0, now)
        return moved

    def _learn(self, session: Session, now: float) -> int:
        """Read the jobs not seen yet — past the newest id seen, and any of the last few ids
        that was not committed yet when it was passed; a store goes with its latest job."""
        low = max(0, self._last_job - RESCAN_IDS)
        self._recent = {i for i in self._recent if i > low}
        stmt = select(Job.id, Job.task).where(Job.id > low).order_by(Job.id)
        if self._recent:
            stmt = stmt.where(Job.id.not_in(sorted(self._recent)))
        moved = 0
        for job_id, task in session.execute(stmt):
            self._last_job = max(self._last_job, job_id)
            self._recent.add(job_id)
            url = _store_url(task)
            if url is None or self.pricing.price_of(url) <= 0:
                continue
            subject = store_subject(url)
            store = self._stores.setdefault(subject, _Store(url))
            if store.job_id is not None and store.job_id >= job_id:
                continue
            store.job_id, store.task_name = job_id, _task_name(task)
            if store.row is not None and store.row[6] != job_id:  # a new owner: split here
                moved += self._reopen(session, subject, store, store.row[5], now)
        return moved

    # ---- measurements -----------------------------------------------------------------------

    def _submit(self, now: float) -> None:
        for store in self._stores.values():
            if store.pending is None and now >= store.due_at:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="gl-storage")
                store.pending = self._pool.submit(self._measure, store.url)

    def _measure(self, url: str) -> tuple[int, float]:
        at = self.clock.now()
        return self.measure(url), at

    def _apply(self, session: Session, now: float) -> int:
        moved = 0
        for subject, store in self._stores.items():
            done = store.pending
            if done is None or not done.done():
                continue
            store.pending = None
            try:
                count, at = done.result()
            except Exception as exc:  # any error of the store: retried, the row goes on
                self._failed(store, exc, now)
                continue
            if store.failures:
                log.info("checkpoint store %s measured again", store.url)
            store.failures = 0
            store.due_at = at + self.pricing.measure_every_s
            moved += self._measured(session, subject, store, count / 1e9, at)
        return moved

    def _failed(self, store: _Store, exc: BaseException, now: float) -> None:
        store.failures += 1
        if store.failures == 1:  # once per store until it is measured again
            log.warning("cannot measure checkpoint store %s (retrying): %s", store.url, exc)
        cap = max(RETRY_BASE_S, self.pricing.measure_every_s)
        store.due_at = now + backoff_delay(store.failures, base=RETRY_BASE_S, cap=cap,
                                           rng=self.rng)  # fmt: skip

    def _measured(self, session: Session, subject: str, store: _Store, gb: float, at: float) -> int:
        if store.row is None:
            if gb <= 0:
                return 0
            self._open(session, subject, store, gb, at)
            return 1
        at = max(at, store.row_end)  # an end never goes back
        if gb <= 0:
            return self._close(session, store, at)
        if gb != store.row[5] or self._price(store, gb) != store.row[4]:
            return self._reopen(session, subject, store, gb, at)
        return 0

    # ---- rows -------------------------------------------------------------------------------

    def _price(self, store: _Store, gb: float) -> float:
        return gb * self.pricing.price_of(store.url) / HOURS_PER_MONTH

    def _open(self, session: Session, subject: str, store: _Store, gb: float, at: float) -> None:
        facts = EntryFacts(
            kind="storage",
            subject=subject,
            user=self.user,
            provider="aws" if scheme_of(store.url) == "s3" else "local",
            pricing="on_demand",
            price_per_hour=self._price(store, gb),
            billing=BILLING,
            job_id=store.job_id,
            task_name=store.task_name,
            quantity=gb,
        )
        self._remember(store, open_entry(session, facts, started_at=at, now=at))

    def _close(self, session: Session, store: _Store, at: float) -> int:
        assert store.row is not None
        row = session.get(LedgerEntry, store.row[0])
        store.row = None
        return 0 if row is None else int(close(row, at, now=at))

    def _reopen(self, session: Session, subject: str, store: _Store, gb: float, at: float) -> int:
        """Close the open row at ``at`` and open the next there, at ``gb``."""
        at = max(at, store.row_end)
        moved = self._close(session, store, at)
        self._open(session, subject, store, gb, at)
        return moved + 1

    def _remember(self, store: _Store, row: LedgerEntry) -> None:
        store.row = (row.id, row.started_at, row.run_started_at, row.billing,
                     row.price_per_hour, row.quantity, row.job_id)  # fmt: skip
        store.row_end = row.ended_at

    def _advance(self, session: Session, now: float) -> int:
        """Every open row to now, in one batch, once ``ADVANCE_EVERY_S`` has passed — a row just
        opened (its end at its start) at once, from its measurement to now."""
        batch = []
        for store in self._stores.values():
            if store.row is None or now <= store.row_end:
                continue
            if now - store.row_end >= ADVANCE_EVERY_S or store.row_end <= store.row[1]:
                row_id, started, run, billing, price, _gb, _job = store.row
                batch.append((row_id, now, started, run, billing, price))
                store.row_end = now
        return advance_open_rows(session, batch)


def _store_url(task: Any) -> str | None:
    checkpoint = task.get("checkpoint") if isinstance(task, dict) else None
    store = checkpoint.get("store") if isinstance(checkpoint, dict) else None
    return normal_url(store) if isinstance(store, str) and store else None


def _task_name(task: Any) -> str | None:
    spec = task.get("spec") if isinstance(task, dict) else None
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else None
