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
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from devkit import REPO
from devkit.pg import PgServer
from devkit.procs import ServiceProcess
from services.api.routes import PUBLIC_DOCS, ROUTES

TENANT, WORKER = "fuzz-tenant-key", "fuzz-worker-token"
CLI = Path(sys.executable).with_name("st")

pytestmark = [pytest.mark.xdist_group("schema_fuzz"), pytest.mark.timeout(600)]


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


CONFIG = Path(__file__).with_name("schemathesis.toml")


async def _schemathesis(base_url: str, token: str, cwd: Path) -> tuple[int, str]:
    """`st run` on the served document with the settings of schemathesis.toml (seed, example
    count, phases, every check); returns its exit code and its output."""
    argv = [str(CLI), "--config-file", str(CONFIG), "run", f"{base_url}/openapi.json"]
    argv += ["--header", f"Authorization: Bearer {token}"]
    for variable, flag in (("QF_FUZZ_SEED", "--seed"), ("QF_FUZZ_EXAMPLES", "--max-examples")):
        if os.environ.get(variable):
            argv += [flag, os.environ[variable]]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.api.schema_fuzz_hooks", "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await proc.communicate()
    return await proc.wait(), output.decode(errors="replace")


@pytest.mark.parametrize("token", [TENANT, WORKER], ids=["tenant", "worker"])
async def test_every_answer_conforms_to_the_document(
    fuzz_server: ServiceProcess, token: str, tmp_path: Path
) -> None:
    code, output = await _schemathesis(fuzz_server.base_url, token, tmp_path)
    assert code == 0, output[-30000:]
    # Every operation was exercised, and many requests were made (the summary's "Test cases").
    operations = len(ROUTES) + len(PUBLIC_DOCS)
    assert f"Selected: {operations}/{operations}" in output and f"Tested: {operations}" in output, output[
        -3000:
    ]
    cases = re.search(r"Test cases:\s+(\d+) generated, (\d+) passed", output)
    assert cases is not None and int(cases[1]) == int(cases[2]) > operations * 10, output[-3000:]
    print(
        f"schema fuzzing with the {'tenant' if token == TENANT else 'worker'} token: {cases[0].split(':')[1].strip()}"
    )
