"""The load balancer of one service: its own thread, asyncio loop, listening socket and pool of
keep-alive connections to the replicas.

Owns the balancer's lifecycle, ``new ──start()──▶ serving ──stop()──▶ stopped``: ``start``
runs an event loop on a daemon thread, binds the socket there and returns the port; ``stop``
answers the queued requests 503, closes the socket, lets the requests in progress end (up to
``shutdown_timeout_s``), closes the connections to replicas and joins the thread. Everything
else is the backend pool's (:mod:`~gpulease.serve.proxy.backends`) and the request path's
(:mod:`~gpulease.serve.proxy.forward`); ``set_backends``, ``drain``, ``drained`` and ``stats``
are safe to call from any thread (the gpulease server's loop thread calls them).

Clocks: the injected ``clock`` stamps the stats windows (per-second buckets); latencies and the
queue timeout are durations on the event loop's monotonic clock.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import aiohttp
from aiohttp import web

from gpulease.clock import Clock, SystemClock
from gpulease.errors import GpuleaseError
from gpulease.serve.proxy.backends import Backend, BackendPool
from gpulease.serve.proxy.forward import Forwarder
from gpulease.serve.proxy.stats import LoadStats

# under the idle timeout of common replica servers (uvicorn's 5 s), so that the pool rarely
# sends on a connection the replica is closing
KEEPALIVE_S = 4.0
_START_TIMEOUT_S = 30.0


class LoadBalancer:
    """One service's reverse proxy (see the package docstring of :mod:`gpulease.serve.proxy`)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        clock: Clock | None = None,
        queue_timeout_s: float = 120.0,
        connect_timeout_s: float = 5.0,
        eject_s: float = 2.0,
        shutdown_timeout_s: float = 10.0,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> None:
        self.host = host
        self._port = port
        self.queue_timeout_s = queue_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._loop_factory = loop_factory or asyncio.new_event_loop
        self._pool = BackendPool(clock or SystemClock(), eject_s=eject_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.ServerRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._bound: int | None = None

    @property
    def port(self) -> int:
        if self._bound is None:
            raise GpuleaseError("the load balancer is not started")
        return self._bound

    def start(self) -> int:
        """Serve on a daemon thread; returns the bound port (``port=0``: a free one).
        A port that cannot be bound (taken, no permission) raises ``OSError`` saying which."""
        if self._thread is not None:
            return self.port
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = self._loop_factory()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._run, args=(loop, ready, failure), name="gpulease-lb", daemon=True
        )
        self._thread.start()
        if not ready.wait(_START_TIMEOUT_S):
            raise GpuleaseError(f"the load balancer did not start in {_START_TIMEOUT_S:g} s")
        if failure:
            self._thread.join()
            self._thread = None
            exc = failure[0]
            where = f"the load balancer could not listen on {self.host}:{self._port}"
            if isinstance(exc, OSError):
                raise OSError(exc.errno, f"{where}: {exc.strerror or exc}") from exc
            raise GpuleaseError(f"{where}: {exc}") from exc
        return self.port

    def stop(self) -> None:
        """Stop listening, let requests in progress end, close replica connections."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._close(), loop)
        try:
            future.result(self._shutdown_timeout_s + 5.0)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            self._thread = None

    def set_backends(self, backends: Sequence[Backend]) -> None:
        """The ready replicas now; one left out drains (its requests in flight finish)."""
        self._pool.set_backends(backends)

    def drain(self, backend_id: int) -> None:
        """No new requests to this backend; those in flight finish."""
        self._pool.drain(backend_id)

    def drained(self, backend_id: int) -> bool:
        """Nothing in flight at this backend any more (an unknown one is drained)."""
        return self._pool.drained(backend_id)

    def stats(self, window_s: float = 60.0) -> LoadStats:
        """In flight and queued now, totals, and QPS / latency over the last ``window_s``."""
        return self._pool.stats(window_s)

    # --- the loop's thread ---------------------------------------------------------------------

    def _run(
        self,
        loop: asyncio.AbstractEventLoop,
        ready: threading.Event,
        failure: list[BaseException],
    ) -> None:
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._setup())
            except (OSError, aiohttp.ClientError) as exc:
                failure.append(exc)
                return
            finally:
                ready.set()
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _setup(self) -> None:
        self._pool.bind(asyncio.get_running_loop())
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        )
        forwarder = Forwarder(self._pool, self._session, queue_timeout_s=self.queue_timeout_s)
        # a client that goes away cancels its request: the replica's connection is released
        server = web.Server(forwarder.handle, access_log=None, handler_cancellation=True)
        self._runner = web.ServerRunner(server, shutdown_timeout=self._shutdown_timeout_s)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await self._close()
            raise
        self._bound = int(self._runner.addresses[0][1])

    async def _close(self) -> None:
        self._pool.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
