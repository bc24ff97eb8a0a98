"""The request path: one client request → a backend → the response streamed back.

Owns what happens to a request between the balancer's socket and a replica's: the headers it
carries (hop-by-hop ones dropped both ways, ``X-Forwarded-For`` / ``-Proto`` / ``-Host``
added), the body streamed to the replica as it arrives (never buffered), the one retry on another
replica, the response streamed back chunk by chunk (chunked responses and server-sent events pass
through as the replica writes them), and the balancer's own answers: 503 when no replica came
within the queue timeout, 502 with a JSON error body when every try failed. A request moves

    queued ──backend picked──▶ sent ──response headers──▶ streaming ──body ended──▶ done
                                 └─connection failed─▶ retried once on another replica, or 502

and each step lands in the backend pool's counters (``finish`` per replica try, ``record`` per
client request).

Retry rule: a try whose connection failed before any response (refused, reset, the connect
timing out) is retried once on another routable replica when the replica cannot have acted on it:
the connection was never made, or the method is idempotent (GET, HEAD, OPTIONS, PUT, DELETE,
TRACE) or the request has a body none of which was sent yet; a body partly sent is never
replayed (it is not buffered). The failed replica is ejected for a moment (see
:mod:`gpulease.serve.proxy.backends`). A replica answering **503** (it refuses work: draining
after a preemption notice, not ready) gets the same treatment for an idempotent request whose
body, if any, was not sent yet: once more on another replica; any other answer is relayed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from gpulease.serve.proxy.backends import BackendPool, Slot

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
# the proxy sets Host from the replica's URL and answers 100-continue itself
_NOT_FORWARDED = frozenset({"host", "expect"})
log = logging.getLogger("gpulease.serve")
_NEVER_CONNECTED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
_BROKEN_BEFORE_RESPONSE = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


def _dropped(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> frozenset[str]:
    """Hop-by-hop headers: the fixed ones and those the Connection header names."""
    named = {
        token.strip().lower()
        for value in headers.getall("Connection", [])
        for token in value.split(",")
        if token.strip()
    }
    return HOP_BY_HOP | named


def request_headers(request: web.BaseRequest) -> CIMultiDict[str]:
    """The headers sent to the replica."""
    drop = _dropped(request.headers) | _NOT_FORWARDED
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in request.headers.items():
        if name.lower() not in drop:
            out.add(name, value)
    peer = request.remote
    if peer:
        prior = request.headers.get("X-Forwarded-For")
        out["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
    out["X-Forwarded-Proto"] = request.scheme
    out["X-Forwarded-Host"] = request.host
    return out


def response_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The replica's response headers sent back to the client."""
    drop = _dropped(headers)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in drop:
            out.add(name, value)
    return out


def error_response(status: int, code: str, message: str) -> web.Response:
    """The balancer's own answer, in the project's ``{"error": {...}}`` shape."""
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


class Body:
    """A request body streamed to the replica as it arrives; ``started`` once a chunk went."""

    def __init__(self, reader: aiohttp.StreamReader) -> None:
        self._reader = reader
        self.started = False

    async def chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._reader.iter_any():
            self.started = True
            yield chunk


def may_retry(method: str, exc: BaseException, body: Body | None) -> bool:
    """Whether a try that failed with ``exc`` before any response may go to another replica."""
    if body is not None and body.started:
        return False
    if isinstance(exc, _NEVER_CONNECTED):
        return True
    if isinstance(exc, _BROKEN_BEFORE_RESPONSE):
        return method in IDEMPOTENT or body is not None
    return False


class Forwarder:
    """The balancer's request handler over a backend pool and a client session."""

    def __init__(
        self, pool: BackendPool, session: aiohttp.ClientSession, *, queue_timeout_s: float
    ) -> None:
        self.pool = pool
        self.session = session
        self.queue_timeout_s = queue_timeout_s

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        try:
            response, failed = await self._serve(request, arrived)
        except BaseException:  # cancelled: the client went away; not a failure of ours
            self.pool.record(loop.time() - arrived, failed=False)
            raise
        self.pool.record(loop.time() - arrived, failed=failed)
        return response

    async def _serve(
        self, request: web.BaseRequest, arrived: float
    ) -> tuple[web.StreamResponse, bool]:
        slot = await self.pool.wait_pick(arrived + self.queue_timeout_s)
        if slot is None:
            message = (
                "the endpoint is stopping"
                if self.pool.closed
                else f"no ready replica within the queue timeout ({self.queue_timeout_s:g} s)"
            )
            return error_response(503, "no_replica", message), True
        body = Body(request.content) if request.body_exists else None
        if body is not None:
            try:
                await _continue(request)
            except BaseException:  # the client went away
                self.pool.finish(slot, 0.0, failed=False)
                raise
        headers = request_headers(request)
        tried: list[int] = []
        loop = asyncio.get_running_loop()
        while True:
            sent = loop.time()
            try:
                upstream = await self._send(request, slot, headers, body)
            except aiohttp.ClientError as exc:
                self.pool.finish(slot, loop.time() - sent, failed=True)
                self.pool.eject(slot)
                tried.append(slot.backend.id)
                retry = len(tried) < 2 and may_retry(request.method, exc, body)
                next_slot = self.pool.pick(exclude=tried) if retry else None
                log.warning(
                    "replica %d: %s %s failed: %r", tried[-1], request.method, request.path, exc
                )
                if next_slot is None:  # the client learns which replicas, not their addresses
                    where = ", ".join(str(i) for i in tried)
                    message = f"replica {where} failed: {type(exc).__name__}"
                    return error_response(502, "bad_gateway", message), True
                slot = next_slot
                continue
            except BaseException:  # cancelled (the client went away) while waiting
                self.pool.finish(slot, loop.time() - sent, failed=False)
                raise
            other = self._after_unavailable(request, slot, upstream, body, tried)
            if other is not None:  # a replica saying 503 (draining, e.g. after a preemption
                self.pool.finish(slot, loop.time() - sent, failed=True)  # notice): once more
                upstream.release()
                self.pool.eject(slot)
                tried.append(slot.backend.id)
                slot = other
                continue
            return await self._relay(request, slot, upstream, sent)

    def _after_unavailable(
        self,
        request: web.BaseRequest,
        slot: Slot,
        upstream: aiohttp.ClientResponse,
        body: Body | None,
        tried: list[int],
    ) -> Slot | None:
        """Another replica for an idempotent request that a replica answered 503 (it refuses
        work: draining, not ready), once; None to relay the answer as it is."""
        if upstream.status != 503 or tried or request.method not in IDEMPOTENT:
            return None
        if body is not None and body.started:
            return None
        return self.pool.pick(exclude=[slot.backend.id])

    async def _send(
        self, request: web.BaseRequest, slot: Slot, headers: CIMultiDict[str], body: Body | None
    ) -> aiohttp.ClientResponse:
        url = URL(slot.backend.url.rstrip("/") + request.raw_path, encoded=True)
        return await self.session.request(
            request.method,
            url,
            headers=headers,
            data=body.chunks() if body is not None else None,
            allow_redirects=False,
        )

    async def _relay(
        self,
        request: web.BaseRequest,
        slot: Slot,
        upstream: aiohttp.ClientResponse,
        sent: float,
    ) -> tuple[web.StreamResponse, bool]:
        """Stream the replica's response back; a replica that breaks off mid-body breaks the
        client's connection too (the client sees a truncated response, never a wrong one)."""
        fixed = upstream.content_length is not None  # headers go with the first bytes
        out = (_FixedLengthResponse if fixed else web.StreamResponse)(
            status=upstream.status,
            reason=upstream.reason,
            headers=response_headers(upstream.headers),
        )
        failed = upstream.status >= 500
        broken = False
        try:
            await out.prepare(request)
            broken = await _pump(upstream, out)
            if broken and request.transport is not None:
                request.transport.close()
        except ConnectionError:  # the client went away: aiohttp closes its connection
            upstream.close()
        except asyncio.CancelledError:  # likewise, noticed while waiting for the replica
            upstream.close()
            raise
        finally:
            upstream.release()
            elapsed = asyncio.get_running_loop().time() - sent
            self.pool.finish(slot, elapsed, failed=failed or broken)
        return out, failed or broken


async def _continue(request: web.BaseRequest) -> None:
    """Answer ``Expect: 100-continue`` once a replica is picked (aiohttp's low-level server,
    unlike its router, leaves it to the handler); the body then streams on as it comes."""
    if request.version == aiohttp.HttpVersion11 and (
        request.headers.get("Expect", "").lower() == "100-continue"
    ):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the response proper has not started


class _FixedLengthResponse(web.StreamResponse):
    """A streamed response whose headers leave with its first body bytes (one write, not two,
    for the common small answer); others send them at once (server-sent events: the client
    sees the response open before the first event)."""

    _send_headers_immediately = False  # aiohttp ≥ 3.11 (earlier: ignored, two writes)


async def _pump(upstream: aiohttp.ClientResponse, out: web.StreamResponse) -> bool:
    """Copy the body as it comes; True when the replica broke off (ConnectionError: the
    client went away)."""
    while True:
        try:
            chunk = await upstream.content.readany()
        except (aiohttp.ClientError, TimeoutError):
            upstream.close()
            return True
        if not chunk:
            break
        await out.write(chunk)
    await out.write_eof()
    return False
