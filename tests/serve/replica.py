"""A test replica: a real aiohttp server on 127.0.0.1 (a free port), in process on its own thread
or as a process (``python -m tests.serve.replica NAME [--hang]``, which prints its port).

Routes: ``/id`` (its name), ``/status/{code}``, ``/headers`` (what it received, as JSON, and a
response with hop-by-hop headers of its own), ``/hold/{key}`` (answers once ``/release/{key}``
is called), ``/sse`` (one event, then a second once ``/release/sse`` is called), ``/chunks``,
``/big`` (1 MiB of fixed length), ``POST /upload`` (reads the body chunk by chunk; ``/seen``
says how many bytes so far), and ``/slow?s=`` (sleeps). With ``--hang`` every route but
``/health`` hangs until the process dies.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import threading

from aiohttp import web


class App:
    def __init__(self, name: str, *, hang: bool = False) -> None:
        self.name = name
        self.hang = hang
        self.events: dict[str, asyncio.Event] = {}
        self.seen = 0
        self.served = 0

    def _event(self, key: str) -> asyncio.Event:
        return self.events.setdefault(key, asyncio.Event())

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_route("*", "/id", self.ident)
        app.router.add_get("/status/{code}", self.status)
        app.router.add_get("/headers", self.headers)
        app.router.add_route("*", "/hold/{key}", self.hold)
        app.router.add_get("/release/{key}", self.release)
        app.router.add_get("/sse", self.sse)
        app.router.add_get("/chunks", self.chunks)
        app.router.add_get("/big", self.big)
        app.router.add_post("/upload", self.upload)
        app.router.add_get("/seen", self.seen_bytes)
        app.router.add_get("/slow", self.slow)
        return app

    async def _maybe_hang(self) -> None:
        if self.hang:
            await asyncio.Event().wait()

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def ident(self, request: web.Request) -> web.Response:
        await self._maybe_hang()
        self.served += 1
        return web.Response(text=self.name)

    async def status(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text=self.name)

    async def headers(self, request: web.Request) -> web.Response:
        got: dict[str, list[str]] = {}
        for key, value in request.headers.items():
            got.setdefault(key.lower(), []).append(value)
        response = web.json_response(got)
        response.headers["Keep-Alive"] = "timeout=99"
        response.headers.add("Set-Cookie", "a=1")
        response.headers.add("Set-Cookie", "b=2")
        return response

    async def hold(self, request: web.Request) -> web.Response:
        await self._maybe_hang()
        await self._event(request.match_info["key"]).wait()
        return web.Response(text=self.name)

    async def release(self, request: web.Request) -> web.Response:
        self._event(request.match_info["key"]).set()
        return web.Response(text="released")

    async def sse(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: one\n\n")
        await self._event("sse").wait()
        await response.write(b"data: two\n\n")
        await response.write_eof()
        return response

    async def chunks(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b"alpha-", b"beta-", b"gamma"):
            await response.write(part)
        await response.write_eof()
        return response

    async def big(self, request: web.Request) -> web.Response:
        return web.Response(body=b"z" * (1 << 20))

    async def upload(self, request: web.Request) -> web.Response:
        digest = hashlib.sha256()
        async for chunk in request.content.iter_any():
            self.seen += len(chunk)
            digest.update(chunk)
        return web.json_response({"bytes": self.seen, "sha256": digest.hexdigest()})

    async def seen_bytes(self, request: web.Request) -> web.Response:
        return web.Response(text=str(self.seen))

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("s", "0.01")))
        self.served += 1
        return web.Response(text=self.name)


class Replica:
    """An in-process replica on its own thread and loop."""

    def __init__(self, name: str) -> None:
        self.app = App(name)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        self._thread.start()
        assert self._ready.wait(10), "replica did not start"
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._setup())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _setup(self) -> None:
        self._runner = web.AppRunner(self.app.build(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        runner = self._runner
        assert runner is not None
        asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def _serve_process(name: str, hang: bool) -> None:
    runner = web.AppRunner(App(name, hang=hang).build(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(json.dumps({"port": runner.addresses[0][1]}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve_process(sys.argv[1], "--hang" in sys.argv[2:]))
