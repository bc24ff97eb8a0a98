"""Counting the server's calls into its providers, for ``gpulease_provider_api_calls_total`` and
``gpulease_provider_api_errors_total`` (docs/metrics.md).

Owns :class:`ProviderCalls` (thread-safe counts per ``(provider, operation)`` and per
``(provider, operation, code)``, kept in memory: they restart at 0 with the server, like the
reconcile pass durations) and :func:`count_calls`, which wraps the interface methods of each
provider object IN PLACE (instance attributes over the class's methods): the object stays the
same, so ``isinstance`` checks of its capabilities (``SupportsSpot``, ``SupportsSpotMarket``, …)
and every other attribute behave as before, and what a call returns or raises passes through
unchanged. Labels are bounded: ``operation`` is one of :data:`OPERATIONS`; ``code`` is the
error's own ``code`` (an EC2 error code) when it is a short identifier, else its class name, and
at most :data:`MAX_CODES` distinct codes per provider and operation (then ``other``). Its
``watchers`` are told every call's outcome (``answered`` / ``failed``):
:mod:`gpulease.server.provider_outages` persists the API's outages so. Moves no states.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gpulease.providers.base import Provider

#: the provider methods counted (the Provider interface and its capability mixins)
OPERATIONS = (
    "launch",
    "terminate",
    "list_instances",
    "poll_events",
    "stop",
    "start",
    "spot_available",
    "spot_price",
    "offers",
    "spot_price_history",  # aws: the one API call behind spot_price_changes (throttled)
)
MAX_CODES = 20
OTHER_CODE = "other"
_CODE = re.compile(r"^[A-Za-z][A-Za-z0-9_.]{0,63}$")


def error_code(exc: BaseException) -> str:
    """The label of a provider error: its ``code`` attribute when it is a short identifier (the
    cloud's error code), else its class name (``CapacityError``, ``ProviderUnavailable``)."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and _CODE.match(code):
        return code
    return type(exc).__name__


class CallWatcher(Protocol):
    """Told each call's outcome (``server/provider_outages.py`` persists API outages)."""

    def answered(self, provider: str, operation: str) -> None: ...

    def failed(self, provider: str, operation: str, exc: BaseException) -> None: ...


class ProviderCalls:
    """Calls and errors per provider and operation since the server started; ``watchers`` are
    told each call's outcome."""

    def __init__(self, watchers: Sequence[CallWatcher] = ()) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], int] = {}
        self._errors: dict[tuple[str, str, str], int] = {}
        self._watchers = tuple(watchers)

    def answered(self, provider: str, operation: str) -> None:
        for watcher in self._watchers:
            watcher.answered(provider, operation)

    def called(self, provider: str, operation: str) -> None:
        with self._lock:
            key = (provider, operation)
            self._calls[key] = self._calls.get(key, 0) + 1

    def failed(self, provider: str, operation: str, exc: BaseException) -> None:
        for watcher in self._watchers:
            watcher.failed(provider, operation, exc)
        code = error_code(exc)
        with self._lock:
            known = {c for p, o, c in self._errors if (p, o) == (provider, operation)}
            if code not in known and len(known) >= MAX_CODES:
                code = OTHER_CODE
            key = (provider, operation, code)
            self._errors[key] = self._errors.get(key, 0) + 1

    def calls(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._calls)

    def errors(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self._errors)


def _counted(
    calls: ProviderCalls, provider: str, operation: str, method: Callable[..., Any]
) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        calls.called(provider, operation)
        try:
            result = method(*args, **kwargs)
        except BaseException as exc:
            if isinstance(exc, Exception):
                calls.failed(provider, operation, exc)
            raise
        calls.answered(provider, operation)
        return result

    call.__gpulease_counted__ = True  # type: ignore[attr-defined]
    return call


def count_calls(providers: Mapping[str, Provider], calls: ProviderCalls) -> None:
    """Wrap every counted method each provider has (in place; once: a second call is a no-op)."""
    for name, provider in providers.items():
        for operation in OPERATIONS:
            method = getattr(provider, operation, None)
            if not callable(method) or getattr(method, "__gpulease_counted__", False):
                continue
            setattr(provider, operation, _counted(calls, name, operation, method))
