"""`queueflow serve` refusing to start, run for real: --dev where others could reach it or beside
real credentials or in a Kubernetes pod, the example Secret's REPLACE_ME, and a malformed API key
reported without its token. Each exits 2 with a message that says what to change, before the
database is opened. And what --dev does instead: bind 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from devkit.procs import SERVER_ARGV

NOWHERE = "postgresql://nowhere.invalid/none"  # every refusal comes before the database is opened
SECRET = "a-real-secret-of-at-least-32-bytes-0123456789"
DEV_REFUSED = "refusing --dev (QUEUEFLOW_DEV), which accepts any bearer token"


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVER_ARGV, "--database-url", NOWHERE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def refused(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    return out.stderr


DEV_CASES = {
    "all interfaces": (
        ("--dev", "--host", "0.0.0.0"),
        {},
        "--host '0.0.0.0' (QUEUEFLOW_HOST) is not a loopback address: leave --host out",
    ),
    "a host from the environment": (
        (),
        {"QUEUEFLOW_DEV": "1", "QUEUEFLOW_HOST": "192.168.1.10"},
        "--host '192.168.1.10' (QUEUEFLOW_HOST) is not a loopback address",
    ),
    "a worker token": (
        ("--dev", "--worker-token", "w"),
        {},
        "--worker-token (QUEUEFLOW_WORKER_TOKEN) configured: credentials mean a real deployment",
    ),
    "api keys from the environment": (
        (),
        {"QUEUEFLOW_DEV": "true", "QUEUEFLOW_API_KEYS": "k:acme"},
        "--api-keys (QUEUEFLOW_API_KEYS) configured",
    ),
    "a jwt secret": (("--dev", "--jwt-secret", SECRET), {}, "--jwt-secret (QUEUEFLOW_JWT_SECRET) configured"),
    "a kubernetes pod": (
        ("--dev",),
        {"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
        "KUBERNETES_SERVICE_HOST is set, so this runs in a Kubernetes pod: drop --dev",
    ),
    "worker mode on all interfaces": (
        ("--mode", "worker", "--dev", "--host", "::"),
        {},
        "is not a loopback address",
    ),
}


@pytest.mark.parametrize(("args", "env", "message"), DEV_CASES.values(), ids=DEV_CASES.keys())
def test_serve_refuses_dev_mode_that_others_could_reach(args, env, message):
    stderr = refused(serve(*args, env=env))
    assert DEV_REFUSED in stderr and message in stderr


def test_serve_names_every_reason_it_refuses_dev_mode():
    stderr = refused(serve("--dev", "--host", "0.0.0.0", "--worker-token", "w"))
    assert (
        "not a loopback address" in stderr and "--worker-token (QUEUEFLOW_WORKER_TOKEN) configured" in stderr
    )


PLACEHOLDERS = {
    "worker token": (
        ("--worker-token", "REPLACE_ME", "--api-keys", "k:acme"),
        "--worker-token (QUEUEFLOW_WORKER_TOKEN) still holds the placeholder REPLACE_ME",
    ),
    "api key": (
        ("--worker-token", "w", "--api-keys", "REPLACE_ME_TOKEN:REPLACE_ME_TENANT"),
        "--api-keys (QUEUEFLOW_API_KEYS) still holds the placeholder REPLACE_ME",
    ),
    "jwt secret, even with the escape flag": (
        ("--worker-token", "w", "--jwt-secret", "REPLACE_ME", "--allow-weak-jwt-secret"),
        "--jwt-secret (QUEUEFLOW_JWT_SECRET) still holds the placeholder REPLACE_ME",
    ),
    "oidc client secret": (
        (
            "--worker-token",
            "w",
            "--oidc-issuer",
            "https://id.example.com",
            "--oidc-client-id",
            "qf",
            "--public-url",
            "https://qf.example.com",
            "--oidc-client-secret",
            "REPLACE_ME",
        ),
        "--oidc-client-secret (QUEUEFLOW_OIDC_CLIENT_SECRET) still holds the placeholder REPLACE_ME",
    ),
}


@pytest.mark.parametrize(("args", "message"), PLACEHOLDERS.values(), ids=PLACEHOLDERS.keys())
def test_serve_refuses_the_example_secrets_placeholder(args, message):
    stderr = refused(serve("--mode", "api", *args))
    assert message in stderr and "openssl rand -base64 48" in stderr


def test_serve_refuses_a_short_jwt_secret_and_says_how_to_make_one():
    stderr = refused(serve("--mode", "api", "--worker-token", "w", "--jwt-secret", "too-short"))
    assert "--jwt-secret (QUEUEFLOW_JWT_SECRET) is 9 bytes; an HS256 secret needs at least 32" in stderr
    assert "`openssl rand -base64 48`" in stderr and "--allow-weak-jwt-secret" in stderr


def test_serve_reports_a_malformed_api_key_without_its_token():
    stderr = refused(
        serve("--mode", "api", "--worker-token", "w", "--api-keys", "ok:acme,tok-9f8e7d6c5b4a;globex")
    )
    assert "invalid --api-keys entry 2 of 2: it has no ':'" in stderr
    assert "tok-9f8e7d6c5b4a" not in stderr and "globex" not in stderr


async def test_dev_mode_without_a_host_binds_loopback(database_url, service):
    proc = await service(database_url, mode="api", start=False)
    at = proc.argv.index("--host")
    del proc.argv[at : at + 2]  # ServiceProcess passes --host 127.0.0.1; here the default decides
    await proc.start()
    events = [json.loads(line) for line in proc.log_text().splitlines() if line.startswith("{")]
    (started,) = [e for e in events if e.get("event") == "queueflow_started"]
    assert started["host"] == "127.0.0.1"
