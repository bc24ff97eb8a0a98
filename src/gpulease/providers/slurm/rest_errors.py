"""slurmrestd's error bodies, classified by Slurm's error number rather than by their text.

slurmrestd (openapi v0.0.38, Slurm 22.05) answers a failed call with ``{"errors": [{
"error_number": N, "error": "<slurm_strerror(N)>", "description": "...", "source": "..."}]}``.
The number is one of ``slurm/slurm_errno.h``; the text is for people and changes between
versions (and a description may quote anything, a node name or a user's comment included), so
only the number decides:

- no room for the job (the partition cannot hold it, its nodes are busy, down or drained, the
  partition is down or inactive) → :class:`CapacityError` (another offer may fit);
- slurmctld not reachable, timing out or too busy, slurmdbd down → :class:`ProviderUnavailable`
  (retried with backoff);
- anything else → :class:`ProviderError`.

A call may *accept* numbers that are not failures for it: a cancel of a job that already ended
(``ESLURM_ALREADY_DONE``, ``ESLURM_INVALID_JOB_ID`` once slurmctld forgot it), a submit queued
behind a busy partition. Only an error without a number (0, -1 or none: older plugins, a
generic failure) falls back to the text rules the commands' stderr uses
(:func:`gpulease.providers.slurm.commands.classify`). Every message names the number, Slurm's
name for it when known, and the text. Moves no states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpulease.errors import GpuleaseError
from gpulease.providers.base import CapacityError, ProviderError, ProviderUnavailable
from gpulease.providers.slurm.commands import classify

# slurm/slurm_errno.h (slurm_err_t); the values are fixed across releases.
EAGAIN = 11  # a plain errno: "Resource temporarily unavailable" (slurmctld too busy)
ETIMEDOUT = 110
SLURM_COMMUNICATIONS_CONNECTION_ERROR = 1001
SLURM_COMMUNICATIONS_SEND_ERROR = 1002
SLURM_COMMUNICATIONS_RECEIVE_ERROR = 1003
SLURM_COMMUNICATIONS_SHUTDOWN_ERROR = 1004
SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR = 1800
SLURMCTLD_COMMUNICATIONS_SEND_ERROR = 1801
SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR = 1802
SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR = 1803
SLURMCTLD_COMMUNICATIONS_BACKOFF = 1804
SLURMCTLD_COMMUNICATIONS_HARD_DROP = 1805
ESLURM_INVALID_PARTITION_NAME = 2000
ESLURM_ACCESS_DENIED = 2002
ESLURM_TOO_MANY_REQUESTED_CPUS = 2005
ESLURM_INVALID_NODE_COUNT = 2006
ESLURM_MAX_JOB_COUNT = 2007
ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014
ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE = 2015
ESLURM_NODES_BUSY = 2016
ESLURM_INVALID_JOB_ID = 2017
ESLURM_ALREADY_DONE = 2021
ESLURM_IN_STANDBY_MODE = 2027
ESLURM_NODE_NOT_AVAIL = 2068
ESLURM_PARTITION_NOT_AVAIL = 2070
ESLURM_PARTITION_DOWN = 2101
ESLURM_IN_STANDBY_USE_BACKUP = 2131
SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT = 5004
SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT = 5005
ESLURM_DB_CONNECTION = 7000

#: Slurm's names of the numbers above, for messages
NAMES: dict[int, str] = {
    value: name for name, value in dict(globals()).items() if name.isupper() and type(value) is int
}

#: the job cannot get nodes there now (or ever): CapacityError, the caller tries another offer
NO_ROOM = frozenset({
    ESLURM_TOO_MANY_REQUESTED_CPUS, ESLURM_INVALID_NODE_COUNT,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE, ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE,
    ESLURM_NODES_BUSY, ESLURM_NODE_NOT_AVAIL, ESLURM_PARTITION_NOT_AVAIL, ESLURM_PARTITION_DOWN,
})  # fmt: skip
#: slurmctld (or slurmdbd) is not there, not answering in time, or too busy: retry later
UNREACHABLE = frozenset({
    EAGAIN, ETIMEDOUT,
    SLURM_COMMUNICATIONS_CONNECTION_ERROR, SLURM_COMMUNICATIONS_SEND_ERROR,
    SLURM_COMMUNICATIONS_RECEIVE_ERROR, SLURM_COMMUNICATIONS_SHUTDOWN_ERROR,
    SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR, SLURMCTLD_COMMUNICATIONS_SEND_ERROR,
    SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR, SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR,
    SLURMCTLD_COMMUNICATIONS_BACKOFF, SLURMCTLD_COMMUNICATIONS_HARD_DROP,
    ESLURM_MAX_JOB_COUNT, ESLURM_IN_STANDBY_MODE, ESLURM_IN_STANDBY_USE_BACKUP,
    SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT, SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT,
    ESLURM_DB_CONNECTION,
})  # fmt: skip
#: a cancel of a job that already ended, or that slurmctld no longer knows: done, not failed
GONE = frozenset({ESLURM_ALREADY_DONE, ESLURM_INVALID_JOB_ID})
#: the same, for an error without a number (the texts of those numbers)
GONE_TEXT = ("invalid job id", "already completing or completed", "job/step already")


@dataclass(frozen=True, slots=True)
class Accept:
    """What a call does not count as a failure: error numbers, and texts for errors without a
    number."""

    numbers: frozenset[int] = frozenset()
    texts: tuple[str, ...] = ()

    def covers(self, error: RestError) -> bool:
        if error.number is not None:
            return error.number in self.numbers
        return any(t in error.text.lower() for t in self.texts)


NOTHING = Accept()
CANCEL = Accept(GONE, GONE_TEXT)
#: a submit that comes back with a job id and "partition configuration not available now" was
#: queued (pending), as sbatch does
SUBMIT = Accept(frozenset({ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE}), ("not available now",))


@dataclass(frozen=True, slots=True)
class RestError:
    """One entry of ``errors``: Slurm's number (None when absent, 0 or negative) and text."""

    number: int | None
    text: str

    def describe(self) -> str:
        if self.number is None:
            return self.text or "failed"
        name = NAMES.get(self.number)
        label = f"Slurm error {self.number}" + (f" {name}" if name else "")
        return f"{self.text} ({label})" if self.text else label


def rest_errors(data: Mapping[str, Any]) -> list[RestError]:
    """The entries of a body's ``errors`` list (anything that is not an entry is skipped)."""
    found = []
    for entry in data.get("errors") or []:
        if not isinstance(entry, Mapping):
            continue
        number = entry.get("error_number")
        known = number if isinstance(number, int) and not isinstance(number, bool) else None
        parts = [str(entry.get(k) or "").strip() for k in ("error", "description")]
        text = ": ".join(dict.fromkeys(p for p in parts if p))  # each said once
        known = known if known is not None and known > 0 else None  # 0 and -1: no number
        if known is not None or text:
            found.append(RestError(known, text))
    return found


def classify_errors(
    what: str, errors: Sequence[RestError], *, partition: str | None = None
) -> GpuleaseError:
    """The typed error for the failed ``errors`` of one answer (at least one): unavailable if
    any says so, else no room if any says so, else a plain provider error."""
    message = f"{what}: " + "; ".join(e.describe() for e in errors)
    kinds = {_kind(e) for e in errors}
    if ProviderUnavailable in kinds:
        return ProviderUnavailable(message, delay=0.5)
    if CapacityError in kinds:
        return CapacityError(message, zone=partition)
    return ProviderError(message)


def _kind(error: RestError) -> type[GpuleaseError]:
    if error.number is None:  # no number: the commands' text rules
        return type(classify("slurmrestd", error.text))
    if error.number in UNREACHABLE:
        return ProviderUnavailable
    if error.number in NO_ROOM:
        return CapacityError
    return ProviderError
