"""A real :class:`~gpulease.agent.service.Agent` behind the real HTTP server, served from a
thread of the test process, so a test can look at what the agent holds in memory (a registry
login) after talking to it over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpulease.agent.client import AgentClient
from gpulease.agent.http import AgentHTTPServer
from gpulease.agent.service import Agent

TOKEN = "node-token-for-the-in-process-agent"


@contextmanager
def served_agent(node_dir: Path) -> Iterator[tuple[Agent, AgentClient]]:
    """The agent and a client for it; on exit its task (if any) is cancelled and it stops."""
    agent = Agent(node_dir, node_rank=0)
    server = AgentHTTPServer(("127.0.0.1", 0), agent, TOKEN.encode())
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    client = AgentClient(f"http://127.0.0.1:{server.server_address[1]}", TOKEN)
    try:
        yield agent, client
    finally:
        client.close()
        agent.shutdown(cancel_task=True, grace_s=2.0)
        server.shutdown()
        server.server_close()
        thread.join(5)
