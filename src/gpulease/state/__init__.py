"""gpulease.state: the state DB — the desired state the reconcile loops drive toward.

SQLite (``<home>/state.db``) by default, PostgreSQL when ``$GPULEASE_DB_URL`` says so. Modules
(private unless re-exported here):

- ``machines``    status enums, transition tables, transient timeouts (pure)
- ``models``      the tables (SQLAlchemy 2, typed)
- ``db``          URL, engine, ``session_scope``, ``open_database``
- ``migrate``     alembic migrations run programmatically (``migrations/``)
- ``status``      ``set_status``: table-checked compare-and-set with history; timeouts
- ``claims``      reconcile claims (lock token + expiry) on cluster and job rows; LostRace
- ``repository``  clusters, launch intents, failover, the server's owner id
- ``nodes``       node rows, agent tokens, heartbeats
- ``intents``     ``submit_intent``: intent committed before the side effect
- ``jobs``        managed-job rows and their bookkeeping
- ``tokens``      random tokens stored as sha256 hashes
- ``bench``       ``bench_runs``: one row per node per cluster bench run (history)
- ``secret_sets`` ``secret_sets``: tasks' secrets as the server's vault sealed them (no crypto
                  here, never a value in clear)
- ``ledger``      the cost ledger's writer (the only one): open, advance, close, price splits;
                  ``entry_subject`` reads the subject back from a row's ``entry_key``

See docs/state.md. Imports only :mod:`gpulease.errors`, :mod:`gpulease.config`,
:mod:`gpulease.billing` and :mod:`gpulease.clock` of gpulease, plus SQLAlchemy, alembic and
pydantic.
"""

from gpulease.state.claims import (
    Claim,
    LostRace,
    check_held,
    claim,
    claim_next,
    release,
    renew,
)
from gpulease.state.db import (
    DatabaseBusy,
    database_url,
    make_engine,
    open_database,
    session_scope,
)
from gpulease.state.intents import IntentClosed, IntentView, submit_intent
from gpulease.state.jobs import add_event, create_job, get_job, job_clusters, list_jobs
from gpulease.state.ledger import entry_subject
from gpulease.state.machines import (
    FINAL,
    INITIAL,
    TRANSIENT_TIMEOUTS,
    TRANSITIONS,
    ClusterStatus,
    IntentStatus,
    InvalidTransition,
    JobStatus,
    NodeState,
    PoolStatus,
    ServiceStatus,
    Status,
    Timeout,
)
from gpulease.state.migrate import current_revision, head_revision, upgrade
from gpulease.state.models import (
    Base,
    Cluster,
    Job,
    LaunchIntent,
    Node,
    Pool,
    ServerIdentity,
    Service,
    StatusChange,
)
from gpulease.state.nodes import (
    ensure_node,
    issue_agent_token,
    list_nodes,
    record_exit_code,
    record_heartbeat,
    record_missed_heartbeat,
)
from gpulease.state.repository import (
    ClusterExists,
    LaunchTarget,
    append_failover,
    create_cluster,
    current_target,
    fail_over,
    get_cluster,
    get_cluster_by_name,
    get_intent,
    list_clusters,
    new_request_id,
    open_intents,
    record_activity,
    server_owner_id,
)
from gpulease.state.status import history, list_timed_out, set_status, timed_out
from gpulease.state.tokens import hash_token, new_token, verify_token

__all__ = [
    "FINAL",
    "INITIAL",
    "TRANSIENT_TIMEOUTS",
    "TRANSITIONS",
    "Base",
    "Claim",
    "Cluster",
    "ClusterExists",
    "ClusterStatus",
    "DatabaseBusy",
    "IntentClosed",
    "IntentStatus",
    "IntentView",
    "InvalidTransition",
    "Job",
    "JobStatus",
    "LaunchIntent",
    "LaunchTarget",
    "LostRace",
    "Node",
    "NodeState",
    "Pool",
    "PoolStatus",
    "ServerIdentity",
    "Service",
    "ServiceStatus",
    "Status",
    "StatusChange",
    "Timeout",
    "add_event",
    "append_failover",
    "check_held",
    "claim",
    "claim_next",
    "create_cluster",
    "create_job",
    "current_revision",
    "current_target",
    "database_url",
    "ensure_node",
    "entry_subject",
    "fail_over",
    "get_cluster",
    "get_cluster_by_name",
    "get_intent",
    "get_job",
    "hash_token",
    "head_revision",
    "history",
    "issue_agent_token",
    "job_clusters",
    "list_clusters",
    "list_jobs",
    "list_nodes",
    "list_timed_out",
    "make_engine",
    "new_request_id",
    "new_token",
    "open_database",
    "open_intents",
    "record_activity",
    "record_exit_code",
    "record_heartbeat",
    "record_missed_heartbeat",
    "release",
    "renew",
    "server_owner_id",
    "session_scope",
    "set_status",
    "submit_intent",
    "timed_out",
    "upgrade",
    "verify_token",
]
