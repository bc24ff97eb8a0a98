"""The dashboard's logins: one-time login links and the browser sessions they open.

:class:`Logins` hands out a login token (``POST /v1/dashboard/login``, API token needed): random,
single use, valid for :data:`LINK_TTL_S`. Visiting ``/ui/login?t=TOKEN`` trades it for a session
id, which the browser keeps in an HttpOnly, SameSite=Strict cookie for :data:`SESSION_TTL_S`.
Both are kept only as their sha256, in this server process's memory: a server restart logs every
browser out, and nothing on disk or in the DB ever holds them. The states of a link: issued →
used (or expired); of a session: open → expired. Moves no DB states.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass

from gpulease.clock import Clock, SystemClock

LINK_TTL_S = 120.0
SESSION_TTL_S = 12 * 3600.0
#: at most this many unused links and open sessions are kept (the oldest go first)
MAX_KEPT = 256
#: how long a used or expired link is remembered, to say so
REMEMBER_S = 3600.0


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class LoginLink:
    token: str
    expires_at: float


class LoginRefused(Exception):
    """A login token that is unknown, used or expired; the message says which."""


class Logins:
    """Login links and sessions, hashed, in memory; thread-safe."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        link_ttl_s: float = LINK_TTL_S,
        session_ttl_s: float = SESSION_TTL_S,
    ) -> None:
        self.clock = clock or SystemClock()
        self.link_ttl_s = link_ttl_s
        self.session_ttl_s = session_ttl_s
        self._lock = threading.Lock()
        self._links: dict[str, float] = {}  # digest -> expires_at
        self._used: dict[str, float] = {}  # digest -> when it was used (to say "already used")
        self._sessions: dict[str, float] = {}  # digest -> expires_at

    def issue(self) -> LoginLink:
        """A new one-time login token."""
        token = secrets.token_urlsafe(32)
        expires = self.clock.now() + self.link_ttl_s
        with self._lock:
            self._prune()
            self._links[_digest(token)] = expires
        return LoginLink(token, expires)

    def redeem(self, token: str) -> tuple[str, float]:
        """Trade a login token for a new session: (session id, expires_at); each token once.
        :class:`LoginRefused` for an unknown, used or expired one."""
        key, now = _digest(token), self.clock.now()
        with self._lock:
            expires = self._links.pop(key, None)
            if expires is None:
                used = key in self._used
                raise LoginRefused(
                    "this login link was already used" if used else "this login link is not valid"
                )
            self._used[key] = now
            if expires <= now:
                raise LoginRefused("this login link has expired")
            session = secrets.token_urlsafe(32)
            until = now + self.session_ttl_s
            self._sessions[_digest(session)] = until
            self._prune()
        return session, until

    def valid_session(self, session: str | None) -> bool:
        if not session:
            return False
        with self._lock:
            expires = self._sessions.get(_digest(session))
            return expires is not None and expires > self.clock.now()

    def _prune(self) -> None:
        """Forget sessions past their end, and links (used or not) an hour past theirs (until
        then a visit says "expired" or "already used" rather than "not valid")."""
        now = self.clock.now()
        for table, grace in ((self._sessions, 0.0), (self._links, REMEMBER_S),
                             (self._used, REMEMBER_S)):  # fmt: skip
            for key in [k for k, at in table.items() if at + grace <= now]:
                del table[key]
        for table in (self._links, self._used, self._sessions):
            while len(table) > MAX_KEPT:
                del table[min(table, key=table.__getitem__)]
