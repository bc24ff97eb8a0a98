"""The services' load balancer: an asynchronous HTTP reverse proxy (aiohttp) in front of a
service's ready replicas.

One :class:`LoadBalancer` per service, on its own thread and event loop; the gpulease server
tells it the ready replicas (``set_backends``), drains one before removing it (``drain`` /
``drained``) and reads what the autoscaler needs (``stats`` → :class:`LoadStats`, and
``LoadStats.sample`` → ``serve.autoscale.LoadSample``). Each request goes to the routable
replica with the fewest in flight (ties: round robin) over kept-alive connections, its body and
the response streamed both ways; an idempotent request whose replica's connection failed is
retried once on another; while no replica is ready requests wait up to ``queue_timeout_s``
(scale to zero), then get 503.

Modules: ``balancer`` (thread, loop, socket, lifecycle), ``backends`` (the pool: choice,
draining, ejection, the queue), ``forward`` (the request path: headers, retry, streaming,
the balancer's own error answers), ``stats`` (sliding windows and their snapshots).
"""

from gpulease.serve.proxy.backends import Backend
from gpulease.serve.proxy.balancer import LoadBalancer
from gpulease.serve.proxy.stats import LoadStats, ReplicaStats

__all__ = ["Backend", "LoadBalancer", "LoadStats", "ReplicaStats"]
