"""Settings from flags and environment variables, API-key parsing, the fail-closed start-up
check (API-NOTES sections 10 and 13), and what --dev and the credentials refuse at start."""

from __future__ import annotations

import pytest

from services.cli import build_parser
from shared.config import ApiKey, ConfigError, Settings, parse_api_keys, settings_from
from shared.domain.access import Role

DB = "postgresql://u:p@db:5432/qf"
SECRET = "a-jwt-secret-of-forty-bytes-0123456789ab"


def settings(*flags: str, env: dict[str, str] | None = None) -> Settings:
    args = build_parser().parse_args(["serve", *flags])
    return settings_from(args, env or {})


def test_api_keys_are_split_on_commas_and_trimmed():
    assert parse_api_keys(" k1:acme , k2:globex ") == (ApiKey("k1", "acme"), ApiKey("k2", "globex"))


def test_an_api_key_with_the_ro_suffix_is_a_viewer_and_one_without_a_suffix_an_admin():
    keys = parse_api_keys("k1:acme:ro,k2:globex")
    assert keys == (ApiKey("k1", "acme", Role.VIEWER), ApiKey("k2", "globex", Role.ADMIN))
    assert keys[0].read_only and not keys[1].read_only


def test_an_api_key_may_name_its_role():
    keys = parse_api_keys("k1:acme:viewer,k2:acme:operator,k3:acme:admin")
    assert [k.role for k in keys] == [Role.VIEWER, Role.OPERATOR, Role.ADMIN]


@pytest.mark.parametrize("raw", [None, ""])
def test_no_api_keys(raw):
    assert parse_api_keys(raw) == ()


@pytest.mark.parametrize(
    "raw", ["nocolon", ":acme", "k1:", " : ", "k1:acme,broken", "k:t:rw", "k:t:Operator", "k:t:admin:x"]
)
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
        ("--jwt-secret", SECRET),
    ],
)
def test_one_credential_class_alone_is_not_enough(flags):
    with pytest.raises(ConfigError):
        settings("--database-url", DB, "--mode", "api", *flags).check_credentials()


@pytest.mark.parametrize(
    "flags",
    [
        ("--worker-token", "w", "--api-keys", "k:acme"),
        ("--worker-token", "w", "--jwt-secret", SECRET),
        ("--dev",),
        ("--mode", "worker"),
        ("--mode", "janitor"),
    ],
)
def test_configured_dev_or_api_less_processes_start(flags):
    settings("--database-url", DB, *flags).check_credentials()


def test_queueflow_dev_in_the_environment_allows_a_credential_less_start():
    settings(env={"DATABASE_URL": DB, "QUEUEFLOW_DEV": "true"}).check_credentials()


@pytest.mark.parametrize(
    ("raw", "fault"),
    [
        ("s3cr3t-token-no-colon", "entry 1 of 1: it has no ':'"),
        ("ok:acme,s3cr3t-token:", "entry 2 of 2: its tenant is empty"),
        (":s3cr3t-tenant", "entry 1 of 1: its token is empty"),
        ("s3cr3t-token:acme:rw", "entry 1 of 1: it has 3 ':'-separated fields"),
        ("s3cr3t-token:acme;other:globex", "entry 1 of 1: it has 3 ':'-separated fields"),
    ],
)
def test_a_malformed_api_key_is_reported_by_position_without_its_text(raw, fault):
    with pytest.raises(ConfigError) as err:
        parse_api_keys(raw)
    assert fault in str(err.value)
    assert "s3cr3t" not in str(err.value)


# --- development mode ----------------------------------------------------------------------------


def test_dev_binds_loopback_unless_a_host_is_given():
    assert settings("--database-url", DB, "--dev").host == "127.0.0.1"
    assert settings("--database-url", DB).host == "0.0.0.0"
    assert settings("--database-url", DB, "--dev", "--host", "::1").host == "::1"
    assert settings("--database-url", DB, "--dev", "--host", "localhost").host == "localhost"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "", "example.com"])
def test_dev_refuses_a_non_loopback_host(host):
    with pytest.raises(ConfigError, match="--dev") as err:
        settings("--database-url", DB, "--dev", "--host", host)
    assert "not a loopback address" in str(err.value) and "leave --host out" in str(err.value)


def test_dev_from_the_environment_refuses_a_host_from_the_environment():
    env = {"DATABASE_URL": DB, "QUEUEFLOW_DEV": "1", "QUEUEFLOW_HOST": "0.0.0.0"}
    with pytest.raises(ConfigError, match="QUEUEFLOW_DEV"):
        settings(env=env)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--worker-token", "w"), "--worker-token"),
        (("--api-keys", "k:acme"), "--api-keys"),
        (("--jwt-secret", SECRET), "--jwt-secret"),
    ],
)
def test_dev_refuses_any_configured_credential(flags, named):
    with pytest.raises(ConfigError) as err:
        settings("--database-url", DB, "--dev", *flags)
    assert named in str(err.value) and "drop --dev to enforce them" in str(err.value)


def test_dev_refuses_to_run_in_kubernetes():
    env = {"DATABASE_URL": DB, "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST is set"):
        settings("--dev", env=env)
    assert settings(env=env).dev is False  # without --dev the variable changes nothing


# --- credentials -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--worker-token", "REPLACE_ME", "--api-keys", "k:acme"), "--worker-token"),
        (("--worker-token", "w", "--api-keys", "REPLACE_ME_TOKEN:REPLACE_ME_TENANT"), "--api-keys"),
        (("--worker-token", "w", "--jwt-secret", "REPLACE_ME"), "--jwt-secret"),
        (("--worker-token", "w", "--jwt-secret", "REPLACE_ME", "--allow-weak-jwt-secret"), "--jwt-secret"),
        (("--mode", "worker", "--worker-token", "REPLACE_ME"), "--worker-token"),
    ],
)
def test_the_example_secrets_placeholder_is_always_refused(flags, named):
    with pytest.raises(ConfigError, match="placeholder REPLACE_ME") as err:
        settings("--database-url", DB, "--mode", "api", *flags).check_credentials()
    assert named in str(err.value) and "openssl rand" in str(err.value)


def test_a_jwt_secret_under_32_bytes_is_refused_with_how_to_make_one():
    weak = "x" * 31
    with pytest.raises(ConfigError) as err:
        settings("--database-url", DB, "--worker-token", "w", "--jwt-secret", weak).check_credentials()
    assert "31 bytes" in str(err.value) and "openssl rand -base64 48" in str(err.value)
    assert "--allow-weak-jwt-secret" in str(err.value)
    ok = settings("--database-url", DB, "--worker-token", "w", "--jwt-secret", "x" * 32)
    ok.check_credentials()
    assert not ok.weak_jwt_secret


def test_a_jwt_secret_is_measured_in_bytes():
    three_bytes_each = "€" * 11  # 11 characters, 33 bytes
    settings(
        "--database-url", DB, "--worker-token", "w", "--jwt-secret", three_bytes_each
    ).check_credentials()


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        (("--allow-weak-jwt-secret",), {}),
        ((), {"QUEUEFLOW_ALLOW_WEAK_JWT_SECRET": "true"}),
    ],
)
def test_the_escape_flag_lets_a_weak_jwt_secret_start(flags, env):
    s = settings("--worker-token", "w", "--jwt-secret", "upstream", *flags, env={"DATABASE_URL": DB, **env})
    s.check_credentials()
    assert s.weak_jwt_secret  # what the start-up warning reads


def test_jwt_audience_and_issuer_are_read():
    s = settings(
        "--database-url", DB, "--jwt-audience", "queueflow", env={"QUEUEFLOW_JWT_ISSUER": "https://idp"}
    )
    assert (s.jwt_audience, s.jwt_issuer) == ("queueflow", "https://idp")
    assert settings("--database-url", DB).jwt_audience is None


def test_queue_retention_is_read_as_queue_to_retention():
    s = settings(
        "--database-url",
        DB,
        "--dev",
        env={"QUEUEFLOW_QUEUE_RETENTION": "thumbnails=remove_completed, a=b=keep"},
    )
    assert s.queue_retention_defaults == {"thumbnails": "remove_completed", "a=b": "keep"}
    assert settings("--database-url", DB, "--dev").queue_retention_defaults == {}


@pytest.mark.parametrize(
    ("raw", "fault"),
    [
        ("thumbnails", "'thumbnails' is not QUEUE=RETENTION"),
        ("thumbnails=forever", "'thumbnails=forever' is not QUEUE=RETENTION"),
        ("=keep", "queue name must be 1 to 128 bytes"),
        ("a=keep,a=remove_completed", "queue 'a' is named twice"),
    ],
)
def test_a_malformed_queue_retention_is_a_startup_error(raw, fault):
    with pytest.raises(ConfigError, match=f"--queue-retention: {fault}"):
        settings("--database-url", DB, "--dev", "--queue-retention", raw)
