"""Schema fuzzing: Schemathesis generates requests for every operation of the /openapi.json that a
real server process serves, valid ones and invalid ones, and sends them with a tenant token and
with the worker token. No answer may be a 5xx; every answer must be one the document declares
(status code, content type, body schema, headers, `Allow` on a 405); a request valid by the
document must not be refused as malformed (400), and an invalid one must not succeed.

The seed is fixed and the example count bounded, so a run is repeatable (docs/operations.md,
"Schema fuzzing"); QF_FUZZ_SEED and QF_FUZZ_EXAMPLES vary or widen a run by hand. Schemathesis runs
as its command-line tool (its pytest plugin does not support this pytest), with the hooks of
tests/api/schema_fuzz_hooks.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from devkit.pg import PgServer
from devkit import REPO
from devkit.procs import ServiceProcess

SEED = int(os.environ.get("QF_FUZZ_SEED", "20261203"))
EXAMPLES = int(os.environ.get("QF_FUZZ_EXAMPLES", "15"))
TENANT, WORKER = "fuzz-tenant-key", "fuzz-worker-token"
CLI = Path(sys.executable).with_name("st")

pytestmark = [pytest.mark.xdist_group("schema_fuzz"), pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
async def fuzz_server(pg_cluster: PgServer, template_database: str) -> AsyncIterator[ServiceProcess]:
    """One API process for the module, on a database of its own, with strict credentials."""
    name = "fuzz_" + os.urandom(6).hex()
    url = await pg_cluster.create_database(name, template=template_database)
    proc = ServiceProcess(
        url, mode="api", dev=False, extra_args=["--worker-token", WORKER, "--api-keys", f"{TENANT}:acme"]
    )
    try:
        yield await proc.start()
    finally:
        await proc.terminate(grace=15.0)
        await pg_cluster.drop_database(name)


async def _schemathesis(base_url: str, token: str, out: Path) -> tuple[int, str, dict]:
    """`st run` against the served document; returns its exit code, its output and its JSON report."""
    report = out / "report.json"
    argv = [
        str(CLI),
        "run",
        f"{base_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--seed",
        str(SEED),
        "--max-examples",
        str(EXAMPLES),
        # Examples, boundary values and random data, per operation; the stateful phase is left out
        # (it would open event streams on jobs that never finish in an API-only server).
        "--phases",
        "examples,coverage,fuzzing",
        "--checks",
        "all",
        "--continue-on-failure",
        "--request-timeout",
        "30",
        "--generation-database",
        "none",
        "--workers",
        "1",
        "--no-color",
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.api.schema_fuzz_hooks", "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=out, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await proc.communicate()
    code = await proc.wait()
    return code, output.decode(errors="replace"), json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize("token", [TENANT, WORKER], ids=["tenant", "worker"])
async def test_every_answer_conforms_to_the_document(fuzz_server: ServiceProcess, token: str, tmp_path: Path) -> None:
    code, output, report = await _schemathesis(fuzz_server.base_url, token, tmp_path)
    print(output[-3000:])
    assert code == 0, output[-20000:]
    summary = output[output.rfind("Test cases:") :].splitlines()[1] if "Test cases:" in output else ""
    print(f"schema fuzzing ({'tenant' if token == TENANT else 'worker'} token): {summary.strip()}")
    assert "40/40" in output or report, output
