"""The state package's public surface, its imports (layering), module sizes and docstrings."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from gpulease import state

PACKAGE = Path(state.__file__).parent
GPULEASE_ALLOWED = {
    "gpulease.spec",
    "gpulease.errors",
    "gpulease.config",
    "gpulease.clock",
    "gpulease.billing",  # the billing rules the ledger applies (a base module)
    "gpulease.units",
    "gpulease.state",
}
THIRD_PARTY_ALLOWED = {"sqlalchemy", "alembic", "pydantic"}
MAX_LINES = 400

PUBLIC_API = {
    # machines
    "ClusterStatus",
    "NodeState",
    "IntentStatus",
    "JobStatus",
    "PoolStatus",
    "ServiceStatus",
    "Status",
    "TRANSITIONS",
    "TRANSIENT_TIMEOUTS",
    "INITIAL",
    "FINAL",
    "Timeout",
    "InvalidTransition",
    # models
    "Base",
    "Cluster",
    "Node",
    "Pool",
    "Service",
    "LaunchIntent",
    "StatusChange",
    "ServerIdentity",
    "Job",
    # managed jobs
    "create_job",
    "get_job",
    "list_jobs",
    "job_clusters",
    "add_event",
    # ledger
    "entry_subject",
    # db and migrations
    "database_url",
    "make_engine",
    "session_scope",
    "open_database",
    "DatabaseBusy",
    "upgrade",
    "current_revision",
    "head_revision",
    # status
    "set_status",
    "history",
    "timed_out",
    "list_timed_out",
    # claims
    "Claim",
    "LostRace",
    "check_held",
    "claim",
    "claim_next",
    "renew",
    "release",
    # repository, nodes, intents, tokens
    "LaunchTarget",
    "ClusterExists",
    "create_cluster",
    "get_cluster",
    "get_cluster_by_name",
    "list_clusters",
    "get_intent",
    "open_intents",
    "fail_over",
    "append_failover",
    "record_activity",
    "server_owner_id",
    "new_request_id",
    "current_target",
    "ensure_node",
    "list_nodes",
    "issue_agent_token",
    "record_heartbeat",
    "record_missed_heartbeat",
    "record_exit_code",
    "submit_intent",
    "IntentView",
    "IntentClosed",
    "new_token",
    "verify_token",
    "hash_token",
}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "gpulease":
            names.update(f"gpulease.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_all_is_the_curated_public_api() -> None:
    assert set(state.__all__) == PUBLIC_API
    assert len(state.__all__) == len(set(state.__all__))
    for name in state.__all__:
        assert getattr(state, name) is not None


def test_state_imports_only_its_layers_and_the_standard_library() -> None:
    for path in _modules():
        for name in _imports(path):
            top = name.split(".")[0]
            if top == "gpulease":
                prefix = ".".join(name.split(".")[:2])
                assert prefix in GPULEASE_ALLOWED, f"{path.name} imports {name}"
            else:
                assert (
                    top in THIRD_PARTY_ALLOWED
                    or top in sys.stdlib_module_names
                    or top in {"__future__"}
                ), f"{path.name} imports {name}"


def test_modules_are_small_and_say_what_they_own() -> None:
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) < MAX_LINES, path.name
        assert ast.get_docstring(ast.parse(text)), f"{path.name} has no module docstring"
