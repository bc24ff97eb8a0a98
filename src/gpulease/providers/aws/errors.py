"""EC2 error classification BY CODE (never by message text), and the bounded retry loop.

:func:`classify` maps a botocore ``ClientError`` (or a connection failure) to the provider
error types of :mod:`gpulease.providers.base`; :func:`call` runs one EC2 call, retrying only
:class:`ProviderUnavailable` (throttling, outage) with the jittered backoff of
:mod:`gpulease.backoff`, a bounded number of times. Moves no states.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from gpulease.backoff import backoff_delay
from gpulease.errors import GpuleaseError
from gpulease.providers.base import CapacityError, ProviderError, ProviderUnavailable, QuotaError

T = TypeVar("T")

CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientHostCapacity", "Unsupported",
    "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded", "InsufficientCapacity",
})  # fmt: skip
QUOTA_CODES = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded", "PendingVerification"})
UNAVAILABLE_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "ServiceUnavailable",
    "Unavailable", "InternalError", "InternalFailure", "RequestTimeout",
})  # fmt: skip
#: Everything else (AuthFailure, UnauthorizedOperation, InvalidParameterValue, InvalidAMIID.*,
#: …) is a :class:`ProviderError`: retrying will not help.


class ExpectedError(Exception):
    """An EC2 error the caller said it expects (``expected=``): ``code`` says which."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def error_code(exc: BaseException) -> str:
    """The EC2 error code of a botocore ClientError ('' for anything else)."""
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str((response.get("Error") or {}).get("Code") or "")


def classify(
    exc: BaseException, *, action: str, region: str | None = None, zone: str | None = None
) -> GpuleaseError:
    """The gpulease error for ``exc`` raised by EC2 ``action`` in ``region``/``zone``."""
    code = error_code(exc)
    where = f"{region or '?'}{'/' + zone if zone else ''}"
    message = f"EC2 {action} in {where}: {code or type(exc).__name__}"
    error: GpuleaseError
    if code in CAPACITY_CODES:
        error = CapacityError(message, region=region, zone=zone)
    elif code in QUOTA_CODES:
        error = QuotaError(message)
    elif code in UNAVAILABLE_CODES or (not code and _is_connection_error(exc)):
        error = ProviderUnavailable(message, delay=0.0)
    else:
        error = ProviderError(message)
    if code:  # the EC2 code, for /metrics' gpulease_provider_api_errors_total{code}
        setattr(error, "code", code)  # noqa: B010 - an attribute the error types do not declare
    return error


def _is_connection_error(exc: BaseException) -> bool:
    from botocore.exceptions import BotoCoreError

    return isinstance(exc, BotoCoreError | ConnectionError | TimeoutError)


def call(
    fn: Callable[[], T],
    *,
    action: str,
    region: str | None = None,
    zone: str | None = None,
    attempts: int = 5,
    base: float = 0.5,
    cap: float = 8.0,
    sleep: Callable[[float], None] = time.sleep,
    expected: frozenset[str] = frozenset(),
) -> T:
    """``fn()``, its failures classified; only :class:`ProviderUnavailable` is retried, at most
    ``attempts`` times in all, sleeping the jittered capped backoff between tries. A ClientError
    whose code is in ``expected`` raises :class:`ExpectedError`, for the caller to handle."""
    from botocore.exceptions import BotoCoreError, ClientError

    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except (ClientError, BotoCoreError, ConnectionError, TimeoutError) as exc:
            if error_code(exc) in expected:
                raise ExpectedError(error_code(exc)) from exc
            error = classify(exc, action=action, region=region, zone=zone)
            if not isinstance(error, ProviderUnavailable) or attempt == attempts:
                raise error from exc
            sleep(backoff_delay(attempt, base=base, cap=cap))
    raise AssertionError("unreachable")  # pragma: no cover
