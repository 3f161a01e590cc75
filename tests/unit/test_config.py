"""Settings from flags and environment variables, API-key parsing, and the fail-closed start-up
check (API-NOTES sections 10 and 13)."""

from __future__ import annotations

import pytest

from services.cli import build_parser
from shared.config import ApiKey, ConfigError, Settings, parse_api_keys, settings_from

DB = "postgresql://u:p@db:5432/qf"


def settings(*flags: str, env: dict[str, str] | None = None) -> Settings:
    args = build_parser().parse_args(["serve", *flags])
    return settings_from(args, env or {})


def test_api_keys_are_split_on_commas_and_trimmed():
    assert parse_api_keys(" k1:acme , k2:globex ") == (ApiKey("k1", "acme"), ApiKey("k2", "globex"))


def test_an_api_key_with_the_ro_suffix_is_read_only():
    assert parse_api_keys("k1:acme:ro,k2:globex") == (ApiKey("k1", "acme", True), ApiKey("k2", "globex"))


@pytest.mark.parametrize("raw", [None, ""])
def test_no_api_keys(raw):
    assert parse_api_keys(raw) == ()


@pytest.mark.parametrize("raw", ["nocolon", ":acme", "k1:", " : ", "k1:acme,broken", "k:t:rw"])
def test_a_malformed_api_key_entry_is_a_startup_error(raw):
    with pytest.raises(ConfigError):
        parse_api_keys(raw)


def test_defaults_follow_the_upstream_flags():
    s = settings("--database-url", DB)
    assert (s.mode, s.api_port, s.metrics_port, s.workers, s.default_queue) == (
        "all",
        8000,
        9090,
        10,
        "default",
    )
    assert (s.lease_secs, s.lease_grace_secs, s.worker_poll_secs) == (30, 30, 5.0)
    assert (s.janitor_batch, s.reclaim_lease_secs, s.max_batch) == (100, 60, 1000)
    assert s.retention_hours is None and s.retention_interval_secs == 3600.0
    assert s.auto_migrate is True and s.dev is False
    assert s.worker_queues == ("default",)


def test_environment_variables_are_read_and_flags_win_over_them():
    env = {
        "DATABASE_URL": DB,
        "QUEUEFLOW_API_PORT": "8100",
        "QUEUEFLOW_WORKERS": "4",
        "QUEUEFLOW_QUEUES": "a, b,,c",
        "QUEUEFLOW_DEV": "1",
        "QUEUEFLOW_AUTO_MIGRATE": "false",
        "QUEUEFLOW_RETENTION_HOURS": "48",
        "QUEUEFLOW_MODE": "worker",
    }
    s = settings(env=env)
    assert (s.database_url, s.api_port, s.workers, s.queues) == (DB, 8100, 4, ("a", "b", "c"))
    assert (s.dev, s.auto_migrate, s.retention_hours, s.mode) == (True, False, 48.0, "worker")

    s = settings("--api-port", "8200", "--mode", "api", "--auto-migrate", "true", env=env)
    assert (s.api_port, s.mode, s.auto_migrate) == (8200, "api", True)


def test_a_database_url_is_required():
    with pytest.raises(ConfigError, match="database-url"):
        settings()


def test_an_unknown_mode_is_refused():
    with pytest.raises(ConfigError, match="mode"):
        settings("--database-url", DB, "--mode", "everything")


def test_a_malformed_number_in_the_environment_is_a_startup_error():
    with pytest.raises(ConfigError, match="QUEUEFLOW_WORKERS"):
        settings(env={"DATABASE_URL": DB, "QUEUEFLOW_WORKERS": "many"})


@pytest.mark.parametrize("mode", ["api", "all"])
def test_api_modes_refuse_to_start_without_credentials(mode):
    with pytest.raises(ConfigError) as err:
        settings("--database-url", DB, "--mode", mode).check_credentials()
    assert "--worker-token" in str(err.value) and "--api-keys" in str(err.value)


@pytest.mark.parametrize(
    "flags",
    [
        ("--worker-token", "w"),
        ("--api-keys", "k:acme"),
        ("--jwt-secret", "s"),
    ],
)
def test_one_credential_class_alone_is_not_enough(flags):
    with pytest.raises(ConfigError):
        settings("--database-url", DB, "--mode", "api", *flags).check_credentials()


@pytest.mark.parametrize(
    "flags",
    [
        ("--worker-token", "w", "--api-keys", "k:acme"),
        ("--worker-token", "w", "--jwt-secret", "s"),
        ("--dev",),
        ("--mode", "worker"),
        ("--mode", "janitor"),
    ],
)
def test_configured_dev_or_api_less_processes_start(flags):
    settings("--database-url", DB, *flags).check_credentials()


def test_queueflow_dev_in_the_environment_allows_a_credential_less_start():
    settings(env={"DATABASE_URL": DB, "QUEUEFLOW_DEV": "true"}).check_credentials()
