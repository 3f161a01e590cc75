"""Settings for every QueueFlow process, loaded once from flags and environment variables.

Flags win over environment variables; the names follow the upstream server (`--api-port` is
`QUEUEFLOW_API_PORT`, `--database-url` is `DATABASE_URL`). Everything else receives a `Settings`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

MODES = ("all", "api", "janitor", "workflow", "worker")


class ConfigError(Exception):
    """A setting is missing or malformed; `serve` exits non-zero with this message."""


@dataclass(frozen=True)
class ApiKey:
    token: str
    tenant: str
    read_only: bool = False


@dataclass(frozen=True)
class Settings:
    mode: str = "all"
    database_url: str = ""
    host: str = "0.0.0.0"
    api_port: int = 8000
    metrics_port: int = 9090
    workers: int = 10
    queues: tuple[str, ...] = ()
    handlers: tuple[str, ...] = ()  # modules whose @task functions the in-process workers run
    default_queue: str = "default"
    dev: bool = False
    worker_token: str | None = None
    jwt_secret: str | None = None
    api_keys: tuple[ApiKey, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_db_connections: int = 50
    min_db_connections: int = 2
    auto_migrate: bool = True
    retention_hours: float | None = None
    retention_interval_secs: float = 3600.0
    lease_secs: int = 30
    lease_grace_secs: int = 30
    worker_poll_secs: float = 5.0
    janitor_interval_secs: float = 1.0
    janitor_batch: int = 100
    reclaim_lease_secs: int = 60
    max_batch: int = 1000
    max_body_bytes: int = 10 * 1024 * 1024
    shutdown_grace_secs: float = 30.0
    log_level: str = "info"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def worker_queues(self) -> tuple[str, ...]:
        return self.queues or (self.default_queue,)

    def runs(self, service: str) -> bool:
        """Whether this process runs `service` (api, janitor, workflow or worker)."""
        return self.mode == "all" or self.mode == service

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


def _bool(raw: str | bool | None) -> bool:
    if isinstance(raw, bool):
        return raw
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {raw!r}")


def _csv(raw: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (raw or "").split(",") if p.strip())


# (flag, env, type, default, help)
_SERVE_OPTIONS: list[tuple[str, str, object, object, str]] = [
    ("--mode", "QUEUEFLOW_MODE", str, "all", "all | api | janitor | workflow | worker"),
    ("--database-url", "DATABASE_URL", str, "", "PostgreSQL connection URL"),
    ("--host", "QUEUEFLOW_HOST", str, "0.0.0.0", "bind address for the HTTP listeners"),
    ("--api-port", "QUEUEFLOW_API_PORT", int, 8000, "REST API and worker protocol port"),
    ("--metrics-port", "QUEUEFLOW_METRICS_PORT", int, 9090, "/metrics, /health, /ready port (0: off)"),
    ("--workers", "QUEUEFLOW_WORKERS", int, 10, "concurrent in-process handlers per queue"),
    ("--queues", "QUEUEFLOW_QUEUES", str, "", "queues the in-process workers drain (comma-separated)"),
    ("--default-queue", "QUEUEFLOW_DEFAULT_QUEUE", str, "default", "queue for jobs that name none"),
    (
        "--handlers",
        "QUEUEFLOW_HANDLERS",
        str,
        "",
        "Python modules whose @task handlers the in-process workers run (comma-separated)",
    ),
    ("--worker-token", "QUEUEFLOW_WORKER_TOKEN", str, None, "credential for the worker protocol routes"),
    ("--jwt-secret", "QUEUEFLOW_JWT_SECRET", str, None, "HS256 secret for tenant JWTs"),
    ("--api-keys", "QUEUEFLOW_API_KEYS", str, None, "tenant API keys: token:tenant[:ro],..."),
    ("--cors-origins", "QUEUEFLOW_CORS_ORIGINS", str, "", "allowed CORS origins (comma-separated)"),
    ("--max-db-connections", "QUEUEFLOW_MAX_DB_CONNECTIONS", int, 50, "pool size per process"),
    ("--min-db-connections", "QUEUEFLOW_MIN_DB_CONNECTIONS", int, 2, "connections the pool keeps open"),
    ("--retention-hours", "QUEUEFLOW_RETENTION_HOURS", float, None, "delete terminal rows older than this"),
    ("--retention-interval-secs", "QUEUEFLOW_RETENTION_INTERVAL_SECS", float, 3600.0, "retention cadence"),
    ("--lease-secs", "QUEUEFLOW_LEASE_SECS", int, 30, "in-process claim lease"),
    ("--lease-grace-secs", "QUEUEFLOW_LEASE_GRACE_SECS", int, 30, "headroom over an in-process job timeout"),
    ("--worker-poll-secs", "QUEUEFLOW_WORKER_POLL_SECS", float, 5.0, "longest idle wait (missed NOTIFY net)"),
    ("--janitor-interval-secs", "QUEUEFLOW_JANITOR_INTERVAL_SECS", float, 1.0, "janitor sweep interval"),
    ("--janitor-batch", "QUEUEFLOW_JANITOR_BATCH", int, 100, "rows per janitor sweep"),
    (
        "--reclaim-lease-secs",
        "QUEUEFLOW_RECLAIM_LEASE_SECS",
        int,
        60,
        "no effect; kept for compatibility (a reclaim is one statement)",
    ),
    ("--max-batch", "QUEUEFLOW_MAX_BATCH", int, 1000, "largest POST /jobs/batch"),
    ("--max-body-bytes", "QUEUEFLOW_MAX_BODY_BYTES", int, 10 * 1024 * 1024, "largest request body (413)"),
    ("--shutdown-grace-secs", "QUEUEFLOW_SHUTDOWN_GRACE_SECS", float, 30.0, "drain time on SIGTERM"),
    ("--log-level", "QUEUEFLOW_LOG_LEVEL", str, "info", "debug | info | warning | error"),
]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, env, typ, default, help_text in _SERVE_OPTIONS:
        parser.add_argument(flag, type=typ, default=None, help=f"{help_text} [{env}, default {default!r}]")
    parser.add_argument(
        "--dev",
        action="store_true",
        default=None,
        help="development mode: any token is tenant 'tenant1' and a worker [QUEUEFLOW_DEV]",
    )
    parser.add_argument(
        "--auto-migrate",
        type=_bool,
        default=None,
        help="apply migrations at start [QUEUEFLOW_AUTO_MIGRATE, default true]",
    )


def settings_from(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for flag, env_name, typ, default, _ in _SERVE_OPTIONS:
        attr = flag[2:].replace("-", "_")
        raw = getattr(args, attr, None)
        if raw is None and env.get(env_name) not in (None, ""):
            try:
                raw = typ(env[env_name])  # type: ignore[operator]
            except ValueError as err:
                raise ConfigError(f"{env_name}: {err}") from err
        values[attr] = default if raw is None else raw
    dev = args.dev if getattr(args, "dev", None) is not None else _bool(env.get("QUEUEFLOW_DEV"))
    auto = getattr(args, "auto_migrate", None)
    if auto is None:
        auto = _bool(env.get("QUEUEFLOW_AUTO_MIGRATE", "true"))
    mode = str(values.pop("mode"))
    if mode not in MODES:
        raise ConfigError(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not values["database_url"]:
        raise ConfigError("--database-url (DATABASE_URL) is required")
    return Settings(
        mode=mode,
        database_url=str(values["database_url"]),
        host=str(values["host"]),
        api_port=int(values["api_port"]),  # type: ignore[arg-type]
        metrics_port=int(values["metrics_port"]),  # type: ignore[arg-type]
        workers=max(1, int(values["workers"])),  # type: ignore[arg-type]
        queues=_csv(values["queues"]),  # type: ignore[arg-type]
        handlers=_csv(values["handlers"]),  # type: ignore[arg-type]
        default_queue=str(values["default_queue"]),
        dev=bool(dev),
        worker_token=values["worker_token"] or None,  # type: ignore[arg-type]
        jwt_secret=values["jwt_secret"] or None,  # type: ignore[arg-type]
        api_keys=parse_api_keys(values["api_keys"]),  # type: ignore[arg-type]
        cors_origins=_csv(values["cors_origins"]),  # type: ignore[arg-type]
        max_db_connections=max(2, int(values["max_db_connections"])),  # type: ignore[arg-type]
        min_db_connections=max(1, int(values["min_db_connections"])),  # type: ignore[arg-type]
        auto_migrate=bool(auto),
        retention_hours=values["retention_hours"],  # type: ignore[arg-type]
        retention_interval_secs=float(values["retention_interval_secs"]),  # type: ignore[arg-type]
        lease_secs=int(values["lease_secs"]),  # type: ignore[arg-type]
        lease_grace_secs=int(values["lease_grace_secs"]),  # type: ignore[arg-type]
        worker_poll_secs=float(values["worker_poll_secs"]),  # type: ignore[arg-type]
        janitor_interval_secs=float(values["janitor_interval_secs"]),  # type: ignore[arg-type]
        janitor_batch=int(values["janitor_batch"]),  # type: ignore[arg-type]
        reclaim_lease_secs=int(values["reclaim_lease_secs"]),  # type: ignore[arg-type]
        max_batch=int(values["max_batch"]),  # type: ignore[arg-type]
        max_body_bytes=int(values["max_body_bytes"]),  # type: ignore[arg-type]
        shutdown_grace_secs=float(values["shutdown_grace_secs"]),  # type: ignore[arg-type]
        log_level=str(values["log_level"]),
    )
