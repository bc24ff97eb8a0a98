"""gpulease.server: the FastAPI server — REST API (``/v1``, bearer token from ``<home>/
server.token``), the state DB, and the background thread that runs the controller's reconcile
loops. Started by the client on first use (``python -m gpulease.server run``), or in the
foreground by ``gpulease server run``.

Modules: ``main`` (the process: lock, DB, providers, loop, uvicorn, ``server.json``), ``api``
(routes), ``service`` (cluster operations), ``views`` (cluster JSON), ``planning`` (catalog +
local offers + optimizer → launch targets), ``agents`` (the controller's agent port over the
agent's HTTP client), ``keys`` (API token, ``server.key``, derived agent tokens), ``providers``
(which providers run), ``runtime`` (the loop thread), ``vault`` (tasks' secrets sealed in the
state DB, the keyring beside ``server.key``). See docs/server.md.
"""
