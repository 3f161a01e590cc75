"""Settings for every QueueFlow process, declared once and loaded once from flags and environment
variables.

Each field of `Settings` carries its flag, its environment variable, its default and its help in
one `option(...)`; the argument parser, the environment lookup and the defaults all come from those
declarations. Flags win over environment variables; the names follow the upstream server
(`--api-port` is `QUEUEFLOW_API_PORT`, `--database-url` is `DATABASE_URL`). Everything else
receives a `Settings`.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import ssl
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.domain.access import Role
from shared.domain.audit import DEFAULT_AUDIT_RETENTION_DAYS
from shared.domain.caps import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RESULT_BYTES
from shared.domain.errors import ValidationFailed
from shared.domain.jobs import Retention, check_queue_name, parse_queue_retention
from shared.domain.push import Network, parse_cidrs
from shared.domain.visibility import DEFAULT_JOB_LOG_MAX_BYTES
from shared.domain.workflows import DEFAULT_MAX_WORKFLOW_JOBS, MAX_FAN_OUT, WorkflowLimits

MODES = ("all", "api", "janitor", "workflow", "worker", "pusher")
# Where --dev binds when --host is not given: dev mode accepts any token, so never beyond this host.
DEV_HOST = "127.0.0.1"
# HS256 secrets shorter than the hash's output are refused (RFC 7518, section 3.2).
JWT_SECRET_MIN_BYTES = 32
# The placeholder of deploy/k8s/secret.example.yaml: a credential holding it was never filled in.
PLACEHOLDER = "REPLACE_ME"
MAKE_A_SECRET = "openssl rand -base64 48"


class ConfigError(Exception):
    """A setting is missing or malformed; `serve` exits non-zero with this message."""


@dataclass(frozen=True)
class ApiKey:
    token: str
    tenant: str
    role: Role = Role.ADMIN  # no suffix: read-write, as before roles (docs/access.md)

    @property
    def read_only(self) -> bool:
        return self.role is Role.VIEWER


# The third field of an --api-keys entry: a role, or upstream's `ro` (viewer).
_KEY_SUFFIXES = {"ro": Role.VIEWER, **{role.value: role for role in Role}}


def parse_api_keys(raw: str | None) -> tuple[ApiKey, ...]:
    """`token:tenant[:role],...`, the role `viewer`, `operator` or `admin` (or `ro`, upstream's
    read-only, which is viewer; none is admin); a malformed entry is a start-up error, which names
    the entry by its position and what is wrong with it, never by its text (it holds a token)."""
    if not raw:
        return ()
    keys = []
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    for number, entry in enumerate(entries, 1):
        parts = entry.split(":")
        role = Role.ADMIN
        if len(parts) == 3 and parts[2].strip() in _KEY_SUFFIXES:
            role = _KEY_SUFFIXES[parts[2].strip()]
            parts = parts[:2]
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise ConfigError(
                f"invalid --api-keys entry {number} of {len(entries)}: {_api_key_fault(parts)}"
                " (want token:tenant or token:tenant:ROLE, ROLE one of ro, viewer, operator, admin;"
                " the entry is not shown, it holds a token)"
            )
        keys.append(ApiKey(parts[0].strip(), parts[1].strip(), role))
    return tuple(keys)


def _api_key_fault(parts: list[str]) -> str:
    if len(parts) == 1:
        return "it has no ':'"
    if len(parts) > 2:
        why = "its third is not a role" if len(parts) == 3 else "at most three are allowed"
        return f"it has {len(parts)} ':'-separated fields and {why}"
    return "its token is empty" if not parts[0].strip() else "its tenant is empty"


ROLES = tuple(role.value for role in Role)  # the role names as text, lowest first


def parse_role_map(raw: str) -> dict[str, str]:
    """--oidc-role-map: `claim-value=role,...`, each role one of ROLES; the role names themselves
    always map to themselves. ValueError names a bad entry."""
    mapping = {role: role for role in ROLES}
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        value, sep, role = entry.rpartition("=")
        if not sep or not value.strip() or role.strip() not in ROLES:
            raise ValueError(f"entry {entry!r} is not value=viewer|operator|admin")
        mapping[value.strip()] = role.strip()
    return mapping


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {raw!r}")


def parse_csv(raw: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def option(
    flag: str,
    env: str,
    default: Any,
    help: str,
    *,
    at_least: float | None = None,
    switch: bool = False,
) -> Any:
    """Declare a setting: its flag, environment variable, default and help. `at_least` clamps the
    value from below; `switch` makes a boolean a bare flag (`--dev`) rather than `--flag true`."""
    meta = {"flag": flag, "env": env, "help": help, "at_least": at_least, "switch": switch}
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    mode: str = option("--mode", "QUEUEFLOW_MODE", "all", "all | api | janitor | workflow | worker | pusher")
    database_url: str = option("--database-url", "DATABASE_URL", "", "PostgreSQL connection URL")
    listen_database_url: str | None = option(
        "--listen-database-url",
        "QUEUEFLOW_LISTEN_DATABASE_URL",
        None,
        "direct PostgreSQL URL for the LISTEN connection and migrations (default: --database-url);"
        " set it when --database-url goes through a transaction pooler (without it, a process that"
        " finds one at start polls for work every second instead of listening)",
    )
    statement_cache_size: int = option(
        "--statement-cache-size",
        "QUEUEFLOW_STATEMENT_CACHE_SIZE",
        100,
        "prepared statements kept per pool connection; 0 prepares none that outlive a statement"
        " (PgBouncer before 1.21 in transaction mode; a transaction pooler found at start to lose"
        " them turns it off)",
        at_least=0,
    )
    host: str = option("--host", "QUEUEFLOW_HOST", "0.0.0.0", "bind address for the HTTP listeners")
    api_port: int = option("--api-port", "QUEUEFLOW_API_PORT", 8000, "REST API and worker protocol port")
    metrics_port: int = option(
        "--metrics-port", "QUEUEFLOW_METRICS_PORT", 9090, "/metrics, /health, /ready port (0: off)"
    )
    workers: int = option(
        "--workers", "QUEUEFLOW_WORKERS", 10, "concurrent in-process handlers per queue", at_least=1
    )
    queues: tuple[str, ...] = option(
        "--queues", "QUEUEFLOW_QUEUES", (), "queues the in-process workers drain (comma-separated)"
    )
    default_queue: str = option(
        "--default-queue", "QUEUEFLOW_DEFAULT_QUEUE", "default", "queue for jobs that name none"
    )
    handlers: tuple[str, ...] = option(
        "--handlers",
        "QUEUEFLOW_HANDLERS",
        (),
        "Python modules whose @task handlers the in-process workers run (comma-separated)",
    )
    worker_token: str | None = option(
        "--worker-token", "QUEUEFLOW_WORKER_TOKEN", None, "credential for the worker protocol routes"
    )
    jwt_secret: str | None = option(
        "--jwt-secret",
        "QUEUEFLOW_JWT_SECRET",
        None,
        f"HS256 secret for tenant JWTs, at least {JWT_SECRET_MIN_BYTES} bytes (`{MAKE_A_SECRET}`)",
    )
    allow_weak_jwt_secret: bool = option(
        "--allow-weak-jwt-secret",
        "QUEUEFLOW_ALLOW_WEAK_JWT_SECRET",
        False,
        f"start with a --jwt-secret under {JWT_SECRET_MIN_BYTES} bytes (warns at start): for a move"
        " from upstream, until the tokens are re-signed with a longer secret",
        switch=True,
    )
    jwt_audience: str | None = option(
        "--jwt-audience",
        "QUEUEFLOW_JWT_AUDIENCE",
        None,
        "when set, a tenant JWT needs an aud claim that names this audience",
    )
    jwt_issuer: str | None = option(
        "--jwt-issuer", "QUEUEFLOW_JWT_ISSUER", None, "when set, a tenant JWT needs this iss claim"
    )
    api_keys: tuple[ApiKey, ...] = option(
        "--api-keys",
        "QUEUEFLOW_API_KEYS",
        (),
        "tenant API keys: token:tenant[:role],... (role: viewer, operator or admin; ro is viewer; none is admin)",
    )
    cors_origins: tuple[str, ...] = option(
        "--cors-origins", "QUEUEFLOW_CORS_ORIGINS", (), "allowed CORS origins (comma-separated)"
    )
    max_db_connections: int = option(
        "--max-db-connections", "QUEUEFLOW_MAX_DB_CONNECTIONS", 50, "pool size per process", at_least=2
    )
    min_db_connections: int = option(
        "--min-db-connections",
        "QUEUEFLOW_MIN_DB_CONNECTIONS",
        2,
        "connections the pool keeps open",
        at_least=1,
    )
    retention_hours: float | None = option(
        "--retention-hours", "QUEUEFLOW_RETENTION_HOURS", None, "delete terminal rows older than this"
    )
    retention_interval_secs: float = option(
        "--retention-interval-secs", "QUEUEFLOW_RETENTION_INTERVAL_SECS", 3600.0, "retention cadence"
    )
    queue_retention: tuple[str, ...] = option(
        "--queue-retention",
        "QUEUEFLOW_QUEUE_RETENTION",
        (),
        "QUEUE=RETENTION,...: what becomes of completed jobs of these queues for every tenant that"
        " chose nothing of its own (PATCH /api/v1/queues/{queue}): keep (until --retention-hours) or"
        " remove_completed (deleted as they complete). Fleet-wide: api processes record it in the"
        " database at start",
    )
    removal_grace_secs: float = option(
        "--removal-grace-secs",
        "QUEUEFLOW_REMOVAL_GRACE_SECS",
        60.0,
        "how long a completed job of a remove_completed queue that was watched when it completed (an"
        " SSE stream, a poll while it ran) stays readable before the janitor deletes it",
        at_least=0,
    )
    lease_secs: int = option("--lease-secs", "QUEUEFLOW_LEASE_SECS", 30, "in-process claim lease")
    lease_grace_secs: int = option(
        "--lease-grace-secs", "QUEUEFLOW_LEASE_GRACE_SECS", 30, "headroom over an in-process job timeout"
    )
    worker_poll_secs: float = option(
        "--worker-poll-secs", "QUEUEFLOW_WORKER_POLL_SECS", 5.0, "longest idle wait (missed NOTIFY net)"
    )
    janitor_interval_secs: float = option(
        "--janitor-interval-secs", "QUEUEFLOW_JANITOR_INTERVAL_SECS", 1.0, "janitor sweep interval"
    )
    janitor_batch: int = option("--janitor-batch", "QUEUEFLOW_JANITOR_BATCH", 100, "rows per janitor sweep")
    reclaim_lease_secs: int = option(
        "--reclaim-lease-secs",
        "QUEUEFLOW_RECLAIM_LEASE_SECS",
        60,
        "no effect; kept for compatibility (a reclaim is one statement)",
    )
    limit_metrics_keys: int = option(
        "--limit-metrics-keys",
        "QUEUEFLOW_LIMIT_METRICS_KEYS",
        100,
        "limit keys labelled one by one on /metrics (the busiest of those with jobs running; the rest are summed as key _other)",
    )
    limit_key_idle_secs: float = option(
        "--limit-key-idle-secs",
        "QUEUEFLOW_LIMIT_KEY_IDLE_SECS",
        3600.0,
        "how long no job of a limit key may be granted before the janitor deletes the key's state row"
        " (the next claim of one of its jobs makes it again)",
        at_least=0,
    )
    event_retention_secs: float = option(
        "--event-retention-secs",
        "QUEUEFLOW_EVENT_RETENTION_SECS",
        86_400.0,
        "how long an event (POST /api/v1/events) is kept for workflow steps that start waiting later",
    )
    stats_retention_hours: float = option(
        "--stats-retention-hours",
        "QUEUEFLOW_STATS_RETENTION_HOURS",
        48.0,
        "how long the janitor keeps the per-minute stats rollup that the console's charts and"
        " GET /api/v1/stats/series read (at least the longest window, 24 h)",
        at_least=24,
    )
    audit_retention_days: float = option(
        "--audit-retention-days",
        "QUEUEFLOW_AUDIT_RETENTION_DAYS",
        DEFAULT_AUDIT_RETENTION_DAYS,
        "how long the janitor keeps audit log entries (docs/access.md), whatever the jobs'"
        " retention; 0 keeps them for ever",
        at_least=0,
    )
    job_log_max_bytes: int = option(
        "--job-log-max-bytes",
        "QUEUEFLOW_JOB_LOG_MAX_BYTES",
        DEFAULT_JOB_LOG_MAX_BYTES,
        "log bytes kept per job (POST /jobs/{id}/logs); lines past it are dropped and counted",
        at_least=0,
    )
    max_batch: int = option("--max-batch", "QUEUEFLOW_MAX_BATCH", 1000, "largest POST /jobs/batch")
    max_queues_per_tenant: int = option(
        "--max-queues-per-tenant",
        "QUEUEFLOW_MAX_QUEUES_PER_TENANT",
        1000,
        "distinct queues a tenant may have (409 past it; its existing queues keep working); 0: no cap."
        " Fleet-wide: api processes record it in the database at start",
        at_least=0,
    )
    metrics_tenant_ids: bool = option(
        "--metrics-tenant-ids",
        "QUEUEFLOW_METRICS_TENANT_IDS",
        False,
        "label /metrics series with tenant ids as they are (default: the first 12 hex digits of each id's SHA-256)",
    )
    max_body_bytes: int = option(
        "--max-body-bytes", "QUEUEFLOW_MAX_BODY_BYTES", 10 * 1024 * 1024, "largest request body (413)"
    )
    workflow_max_jobs: int = option(
        "--workflow-max-jobs",
        "QUEUEFLOW_WORKFLOW_MAX_JOBS",
        DEFAULT_MAX_WORKFLOW_JOBS,
        "most jobs one run of a workflow may create (task steps, fan-out children at their max_items,"
        " sub-workflows'); a definition that could create more is refused (400)",
        at_least=1,
    )
    workflow_max_fan_out: int = option(
        "--workflow-max-fan-out",
        "QUEUEFLOW_WORKFLOW_MAX_FAN_OUT",
        MAX_FAN_OUT,
        f"most children one fan-out step may spawn (at most {MAX_FAN_OUT}): a larger max_items is"
        " refused (400), a longer array fails the step",
        at_least=0,
    )
    tenant_max_running_workflows: int = option(
        "--tenant-max-running-workflows",
        "QUEUEFLOW_TENANT_MAX_RUNNING_WORKFLOWS",
        0,
        "unfinished top-level workflows one tenant may have; creating or retrying one more answers"
        " 429 with Retry-After (0: no quota)",
        at_least=0,
    )
    # Caps on what one caller can make a process keep or hold (docs/operations.md, "Request caps").
    max_payload_bytes: int = option(
        "--max-payload-bytes",
        "QUEUEFLOW_MAX_PAYLOAD_BYTES",
        DEFAULT_MAX_PAYLOAD_BYTES,
        "largest job payload or metadata, workflow context or step payload, as JSON (413; 0: no cap)",
        at_least=0,
    )
    max_result_bytes: int = option(
        "--max-result-bytes",
        "QUEUEFLOW_MAX_RESULT_BYTES",
        DEFAULT_MAX_RESULT_BYTES,
        "largest result a worker may complete a job with, as JSON (413; 0: no cap)",
        at_least=0,
    )
    max_streams: int = option(
        "--max-streams",
        "QUEUEFLOW_MAX_STREAMS",
        1000,
        "SSE streams open at once on one api process (503 past it; 0: no cap)",
        at_least=0,
    )
    max_tenant_streams: int = option(
        "--max-tenant-streams",
        "QUEUEFLOW_MAX_TENANT_STREAMS",
        100,
        "SSE streams one tenant may hold open at once on one api process (429 past it; 0: no cap)",
        at_least=0,
    )
    max_long_polls: int = option(
        "--max-long-polls",
        "QUEUEFLOW_MAX_LONG_POLLS",
        10_000,
        "lease long-polls parked at once on one api process (503 past it; 0: no cap)",
        at_least=0,
    )
    max_tenant_long_polls: int = option(
        "--max-tenant-long-polls",
        "QUEUEFLOW_MAX_TENANT_LONG_POLLS",
        1000,
        "lease long-polls one tenant's worker keys may park at once on one api process (429 past it; 0: no cap)",
        at_least=0,
    )
    unknown_worker_key_rate: float = option(
        "--unknown-worker-key-rate",
        "QUEUEFLOW_UNKNOWN_WORKER_KEY_RATE",
        5.0,
        "database lookups of unknown qfwk_ tokens one source address may cause a second (429 past it; 0: no limit)",
        at_least=0,
    )
    unknown_worker_key_burst: int = option(
        "--unknown-worker-key-burst",
        "QUEUEFLOW_UNKNOWN_WORKER_KEY_BURST",
        20,
        "such lookups a source address may cause at once before --unknown-worker-key-rate applies",
        at_least=1,
    )
    push_allow_cidrs: tuple[str, ...] = option(
        "--push-allow-cidrs",
        "QUEUEFLOW_PUSH_ALLOW_CIDRS",
        (),
        "address ranges push deliveries may reach although they are not public (comma-separated"
        " CIDRs, e.g. 10.0.0.0/8; cloud metadata addresses stay refused); read by the api (when an"
        " endpoint is created) and the pusher (at every connection)",
    )
    push_ca_file: str | None = option(
        "--push-ca-file",
        "QUEUEFLOW_PUSH_CA_FILE",
        None,
        "PEM file of CA certificates the pusher trusts for https endpoints, beside the system's",
    )
    push_connections: int = option(
        "--push-connections",
        "QUEUEFLOW_PUSH_CONNECTIONS",
        100,
        "open connections (kept alive between deliveries) one pusher process holds at most",
        at_least=1,
    )
    push_breaker_failures: int = option(
        "--push-breaker-failures",
        "QUEUEFLOW_PUSH_BREAKER_FAILURES",
        5,
        "retryable delivery failures in a row that open an endpoint's circuit breaker (0: never)",
        at_least=0,
    )
    push_breaker_secs: float = option(
        "--push-breaker-secs",
        "QUEUEFLOW_PUSH_BREAKER_SECS",
        5.0,
        "how long a breaker first stays open; each further failure doubles it, up to 300",
        at_least=0.1,
    )
    # Single sign-on (docs/access.md): the console signs in through this OpenID provider, and the
    # API takes its access tokens as bearer tokens beside the other credentials.
    oidc_issuer: str | None = option(
        "--oidc-issuer",
        "QUEUEFLOW_OIDC_ISSUER",
        None,
        "OpenID provider's issuer URL (its /.well-known/openid-configuration is read at start):"
        " the console signs in through it and the API accepts its access tokens",
    )
    oidc_client_id: str | None = option(
        "--oidc-client-id", "QUEUEFLOW_OIDC_CLIENT_ID", None, "the console's client id at the provider"
    )
    oidc_client_secret: str | None = option(
        "--oidc-client-secret",
        "QUEUEFLOW_OIDC_CLIENT_SECRET",
        None,
        "the client's secret, for a confidential client (without it: a public client, PKCE only)",
    )
    oidc_scopes: str = option(
        "--oidc-scopes",
        "QUEUEFLOW_OIDC_SCOPES",
        "openid profile email",
        "scopes the console asks for (space-separated; openid is added when missing)",
    )
    oidc_audience: str | None = option(
        "--oidc-audience",
        "QUEUEFLOW_OIDC_AUDIENCE",
        None,
        "the aud an access token must name to be taken by the API (default: --oidc-client-id)",
    )
    oidc_tenant_claim: str = option(
        "--oidc-tenant-claim", "QUEUEFLOW_OIDC_TENANT_CLAIM", "tenant", "the claim that names the tenant"
    )
    oidc_default_tenant: str | None = option(
        "--oidc-default-tenant",
        "QUEUEFLOW_OIDC_DEFAULT_TENANT",
        None,
        "the tenant of a token without the tenant claim (one-tenant set-ups; without it, such a"
        " token is refused)",
    )
    oidc_roles_claim: str = option(
        "--oidc-roles-claim",
        "QUEUEFLOW_OIDC_ROLES_CLAIM",
        "roles",
        "the claim that holds roles or group names (a string or a list)",
    )
    oidc_role_map: str = option(
        "--oidc-role-map",
        "QUEUEFLOW_OIDC_ROLE_MAP",
        "",
        "claim values to roles: name=viewer|operator|admin,... (viewer, operator and admin always"
        " map to themselves; the highest role found wins; none found: refused)",
    )
    public_url: str | None = option(
        "--public-url",
        "QUEUEFLOW_PUBLIC_URL",
        None,
        "the URL operators open the API at (e.g. https://queueflow.example.com): the sign-in's"
        " redirect is {public-url}/ui/auth/callback, and an https URL makes the session cookie Secure",
    )
    console_token_login: bool = option(
        "--console-token-login",
        "QUEUEFLOW_CONSOLE_TOKEN_LOGIN",
        False,
        "with --oidc-issuer, keep the console's token-paste sign-in as well",
        switch=True,
    )
    shutdown_grace_secs: float = option(
        "--shutdown-grace-secs", "QUEUEFLOW_SHUTDOWN_GRACE_SECS", 30.0, "drain time on SIGTERM"
    )
    log_level: str = option("--log-level", "QUEUEFLOW_LOG_LEVEL", "info", "debug | info | warning | error")
    dev: bool = option(
        "--dev",
        "QUEUEFLOW_DEV",
        False,
        "development mode: any token is tenant 'tenant1' and a worker; binds 127.0.0.1 and refuses"
        " a non-loopback --host, any configured credential and Kubernetes",
        switch=True,
    )
    auto_migrate: bool = option("--auto-migrate", "QUEUEFLOW_AUTO_MIGRATE", True, "apply migrations at start")

    @property
    def workflow_limits(self) -> WorkflowLimits:
        return WorkflowLimits(
            self.workflow_max_jobs,
            min(self.workflow_max_fan_out, MAX_FAN_OUT),
            self.tenant_max_running_workflows,
        )

    @property
    def queue_retention_defaults(self) -> dict[str, Retention]:
        """--queue-retention as a map (checked when the settings were loaded)."""
        return parse_queue_retention(self.queue_retention)

    @property
    def push_allowed(self) -> tuple[Network, ...]:
        """--push-allow-cidrs as networks (checked when the settings were loaded)."""
        return parse_cidrs(self.push_allow_cidrs)

    @property
    def worker_queues(self) -> tuple[str, ...]:
        return self.queues or (self.default_queue,)

    @property
    def direct_database_url(self) -> str:
        """The URL of a session of its own, for LISTEN (and the migrations): never a pooler's
        transaction-mode port (where a process finds one at start it polls instead of listening,
        shared/db/pooler.py)."""
        return self.listen_database_url or self.database_url

    def runs(self, service: str) -> bool:
        """Whether this process runs `service` (api, janitor, workflow, worker or pusher)."""
        return self.mode in ("all", service)

    @property
    def weak_jwt_secret(self) -> bool:
        """A JWT secret under the minimum, which --allow-weak-jwt-secret let through."""
        return 0 < len((self.jwt_secret or "").encode()) < JWT_SECRET_MIN_BYTES

    def check_credentials(self) -> None:
        """Fail closed: api and all modes need a worker token and a tenant credential unless --dev;
        no credential may be the example Secret's placeholder, nor the JWT secret too short."""
        self._check_secrets()
        self.check_oidc()
        if self.dev or not self.runs("api"):
            return
        missing = []
        if not self.worker_token:
            missing.append("--worker-token (QUEUEFLOW_WORKER_TOKEN)")
        if not self.api_keys and not self.jwt_secret and not self.oidc_issuer:
            missing.append(
                "--api-keys (QUEUEFLOW_API_KEYS), --jwt-secret (QUEUEFLOW_JWT_SECRET)"
                " or --oidc-issuer (QUEUEFLOW_OIDC_ISSUER)"
            )
        if missing:
            raise ConfigError(
                "refusing to start without credentials; missing: "
                + ", ".join(missing)
                + " (or pass --dev for a local development server)"
            )

    def check_oidc(self) -> None:
        """--oidc-issuer needs a client id and the public URL (the sign-in's redirect), and a role
        map whose entries each name a role."""
        if not self.oidc_issuer:
            return
        missing = [
            name
            for name, value in (
                ("--oidc-client-id (QUEUEFLOW_OIDC_CLIENT_ID)", self.oidc_client_id),
                ("--public-url (QUEUEFLOW_PUBLIC_URL)", self.public_url),
            )
            if not value
        ]
        if missing:
            raise ConfigError(f"--oidc-issuer (QUEUEFLOW_OIDC_ISSUER) needs {' and '.join(missing)}")
        if not (self.public_url or "").startswith(("http://", "https://")):
            raise ConfigError("--public-url (QUEUEFLOW_PUBLIC_URL) must be an http:// or https:// URL")
        try:
            parse_role_map(self.oidc_role_map)
        except ValueError as error:
            raise ConfigError(f"--oidc-role-map (QUEUEFLOW_OIDC_ROLE_MAP): {error}") from None

    def _check_secrets(self) -> None:
        given = {
            "--worker-token (QUEUEFLOW_WORKER_TOKEN)": [self.worker_token or ""],
            "--api-keys (QUEUEFLOW_API_KEYS)": [f"{k.token}:{k.tenant}" for k in self.api_keys],
            "--jwt-secret (QUEUEFLOW_JWT_SECRET)": [self.jwt_secret or ""],
            "--oidc-client-secret (QUEUEFLOW_OIDC_CLIENT_SECRET)": [self.oidc_client_secret or ""],
        }
        unfilled = [name for name, values in given.items() if any(PLACEHOLDER in v for v in values)]
        if unfilled:
            raise ConfigError(
                f"{', '.join(unfilled)} still holds the placeholder {PLACEHOLDER} of"
                " deploy/k8s/secret.example.yaml: put a real secret in its place (for example"
                f" `{MAKE_A_SECRET}`; an API key is token:tenant with such a token)"
            )
        if self.weak_jwt_secret and not self.allow_weak_jwt_secret:
            size = len((self.jwt_secret or "").encode())
            raise ConfigError(
                f"--jwt-secret (QUEUEFLOW_JWT_SECRET) is {size} bytes; an HS256 secret needs at least"
                f" {JWT_SECRET_MIN_BYTES}: make one with `{MAKE_A_SECRET}` and sign the tenants' tokens"
                " with it, or pass --allow-weak-jwt-secret (QUEUEFLOW_ALLOW_WEAK_JWT_SECRET) to start"
                " with this one anyway (a warning at every start)"
            )


def check_dev_mode(settings: Settings, environ: Mapping[str, str]) -> None:
    """--dev accepts any bearer token as a tenant and as a worker, so it runs only where nobody
    else can reach it and nothing real is configured: on loopback, without credentials, and
    outside Kubernetes. Anything else is a start-up error that says what to change."""
    if not settings.dev:
        return
    faults = []
    if not is_loopback(settings.host):
        faults.append(
            f"--host {settings.host!r} (QUEUEFLOW_HOST) is not a loopback address: leave --host"
            f" out (--dev binds {DEV_HOST}) or set it to 127.0.0.1, ::1 or localhost"
        )
    configured = [
        name
        for name, value in (
            ("--worker-token (QUEUEFLOW_WORKER_TOKEN)", settings.worker_token),
            ("--api-keys (QUEUEFLOW_API_KEYS)", settings.api_keys),
            ("--jwt-secret (QUEUEFLOW_JWT_SECRET)", settings.jwt_secret),
            ("--oidc-issuer (QUEUEFLOW_OIDC_ISSUER)", settings.oidc_issuer),
        )
        if value
    ]
    if configured:
        faults.append(
            f"{', '.join(configured)} configured: credentials mean a real deployment, so drop"
            " --dev to enforce them, or unset them for a local development server"
        )
    if environ.get("KUBERNETES_SERVICE_HOST"):
        faults.append(
            "KUBERNETES_SERVICE_HOST is set, so this runs in a Kubernetes pod: drop --dev and give"
            " the api its credentials from a Secret (docs/deployment.md)"
        )
    if faults:
        raise ConfigError(
            "refusing --dev (QUEUEFLOW_DEV), which accepts any bearer token as a tenant and a"
            " worker: " + "; ".join(faults)
        )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


OPTIONS = dataclasses.fields(Settings)
_HINTS = typing.get_type_hints(Settings)


def _parser_for(name: str) -> Callable[[str], Any]:
    """How a flag's or variable's text becomes the field's type, from its annotation."""
    hint = _HINTS[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) and len(args) == 1:
        hint = args[0]
    if hint is bool:
        return parse_bool
    if typing.get_origin(hint) is tuple:
        return parse_api_keys if typing.get_args(hint)[0] is ApiKey else parse_csv
    if hint in (int, float, str):
        return typing.cast(Callable[[str], Any], hint)
    raise TypeError(f"no parser for setting {name}: {hint!r}")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """One argument per setting; a flag left out is None, so the environment can fill it."""
    for f in OPTIONS:
        meta = f.metadata
        text = f"{meta['help']} [{meta['env']}, default {f.default!r}]"
        if meta["switch"]:
            parser.add_argument(meta["flag"], dest=f.name, action="store_true", default=None, help=text)
        else:
            parser.add_argument(meta["flag"], dest=f.name, default=None, metavar=f.name.upper(), help=text)


def check_ca_file(path: str) -> None:
    """--push-ca-file must be a readable PEM bundle with a certificate in it: loaded here, before
    the database is opened, as the pusher loads it when it starts."""
    where = f"--push-ca-file (QUEUEFLOW_PUSH_CA_FILE) {path!r}"
    try:
        ssl.create_default_context().load_verify_locations(cafile=path)
    except OSError as err:
        if isinstance(err, ssl.SSLError):
            raise ConfigError(
                f"{where} holds no PEM certificate the pusher can trust ({err.reason})"
            ) from None
        raise ConfigError(f"{where} cannot be read: {err.strerror or err}") from None


def settings_from(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from parsed flags, then the environment, then the declared defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in OPTIONS:
        meta = f.metadata
        raw = getattr(args, f.name, None)
        source = meta["flag"]
        if raw is None and env.get(meta["env"]) not in (None, ""):
            raw, source = env[meta["env"]], meta["env"]
        if raw is None:
            continue
        try:
            value = raw if isinstance(raw, bool) else _parser_for(f.name)(raw)
        except (ValueError, argparse.ArgumentTypeError) as err:
            raise ConfigError(f"{source}: {err}") from err
        if value == "" and f.default is None:
            value = None  # an empty optional credential is no credential
        if meta["at_least"] is not None:
            value = max(meta["at_least"], value)
        values[f.name] = value
    if values.get("dev") and "host" not in values:
        values["host"] = DEV_HOST
    settings = Settings(**values)
    if settings.mode not in MODES:
        raise ConfigError(f"--mode must be one of {', '.join(MODES)}, not {settings.mode!r}")
    if not settings.database_url:
        raise ConfigError("--database-url (DATABASE_URL) is required")
    for queue in (settings.default_queue, *settings.queues):
        try:
            check_queue_name(queue)
        except ValidationFailed as err:
            raise ConfigError(
                f"--default-queue / --queues: {err.message.removeprefix('validation error: ')}"
            ) from None
    try:
        parse_queue_retention(settings.queue_retention)
    except ValidationFailed as err:
        raise ConfigError(f"--queue-retention: {err.message.removeprefix('validation error: ')}") from None
    try:
        parse_cidrs(settings.push_allow_cidrs)
    except ValueError as err:
        raise ConfigError(f"--push-allow-cidrs (QUEUEFLOW_PUSH_ALLOW_CIDRS): {err}") from None
    if settings.push_ca_file and settings.runs("pusher"):
        check_ca_file(settings.push_ca_file)
    check_dev_mode(settings, env)
    return settings
