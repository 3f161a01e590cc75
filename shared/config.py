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
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.domain.errors import ValidationFailed
from shared.domain.jobs import check_queue_name
from shared.domain.visibility import DEFAULT_JOB_LOG_MAX_BYTES

MODES = ("all", "api", "janitor", "workflow", "worker")


class ConfigError(Exception):
    """A setting is missing or malformed; `serve` exits non-zero with this message."""


@dataclass(frozen=True)
class ApiKey:
    token: str
    tenant: str
    read_only: bool = False


def parse_api_keys(raw: str | None) -> tuple[ApiKey, ...]:
    """`token:tenant[,token:tenant:ro ...]`; a malformed entry is a start-up error."""
    if not raw:
        return ()
    keys = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        parts = entry.split(":")
        read_only = False
        if len(parts) == 3 and parts[2] == "ro":
            read_only = True
            parts = parts[:2]
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise ConfigError(f"invalid --api-keys entry (want token:tenant or token:tenant:ro): {entry!r}")
        keys.append(ApiKey(parts[0].strip(), parts[1].strip(), read_only))
    return tuple(keys)


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
    mode: str = option("--mode", "QUEUEFLOW_MODE", "all", "all | api | janitor | workflow | worker")
    database_url: str = option("--database-url", "DATABASE_URL", "", "PostgreSQL connection URL")
    listen_database_url: str | None = option(
        "--listen-database-url",
        "QUEUEFLOW_LISTEN_DATABASE_URL",
        None,
        "direct PostgreSQL URL for the LISTEN connection and migrations (default: --database-url);"
        " set it when --database-url goes through a transaction pooler",
    )
    statement_cache_size: int = option(
        "--statement-cache-size",
        "QUEUEFLOW_STATEMENT_CACHE_SIZE",
        100,
        "prepared statements kept per pool connection; 0 prepares none that outlive a statement"
        " (PgBouncer before 1.21 in transaction mode)",
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
        "--jwt-secret", "QUEUEFLOW_JWT_SECRET", None, "HS256 secret for tenant JWTs"
    )
    api_keys: tuple[ApiKey, ...] = option(
        "--api-keys", "QUEUEFLOW_API_KEYS", (), "tenant API keys: token:tenant[:ro],..."
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
    shutdown_grace_secs: float = option(
        "--shutdown-grace-secs", "QUEUEFLOW_SHUTDOWN_GRACE_SECS", 30.0, "drain time on SIGTERM"
    )
    log_level: str = option("--log-level", "QUEUEFLOW_LOG_LEVEL", "info", "debug | info | warning | error")
    dev: bool = option(
        "--dev",
        "QUEUEFLOW_DEV",
        False,
        "development mode: any token is tenant 'tenant1' and a worker",
        switch=True,
    )
    auto_migrate: bool = option("--auto-migrate", "QUEUEFLOW_AUTO_MIGRATE", True, "apply migrations at start")

    @property
    def worker_queues(self) -> tuple[str, ...]:
        return self.queues or (self.default_queue,)

    @property
    def direct_database_url(self) -> str:
        """The URL of a session of its own (LISTEN, migrations' advisory lock): never a pooler's
        transaction-mode port."""
        return self.listen_database_url or self.database_url

    def runs(self, service: str) -> bool:
        """Whether this process runs `service` (api, janitor, workflow or worker)."""
        return self.mode in ("all", service)

    def check_credentials(self) -> None:
        """Fail closed: api and all modes need a worker token and a tenant credential unless --dev."""
        if self.dev or not self.runs("api"):
            return
        missing = []
        if not self.worker_token:
            missing.append("--worker-token (QUEUEFLOW_WORKER_TOKEN)")
        if not self.api_keys and not self.jwt_secret:
            missing.append("--api-keys (QUEUEFLOW_API_KEYS) or --jwt-secret (QUEUEFLOW_JWT_SECRET)")
        if missing:
            raise ConfigError(
                "refusing to start without credentials; missing: "
                + ", ".join(missing)
                + " (or pass --dev for a local development server)"
            )


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
    return settings
