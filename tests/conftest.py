"""Fixtures for the whole suite: a real PostgreSQL, a migrated database per test, real processes.

PostgreSQL: one embedded cluster per pytest-xdist worker (fsync off), or the server named by
QUEUEFLOW_TEST_DATABASE_URL. The schema is migrated once per session into a template database;
each test that asks for `database_url` (or `db`) gets a fresh copy of it, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path

import asyncpg
import pytest

from devkit.pg import PgServer, throwaway_cluster
from devkit.procs import ServiceProcess
from shared.db.pool import init_connection


def pytest_configure(config: pytest.Config) -> None:
    """Under `--dist loadgroup` (make test), refuse a pytest that ignores xdist's groups: the tests
    of a group (a PostgreSQL stopped under them, a browser, busy processes) would share the
    machine with each other. pytest 9.2 broke the mechanism (xdist's nodeid suffix no longer takes
    effect: pytest-dev/pytest-xdist#1386), hence pyproject's pin."""
    if getattr(config.option, "dist", None) == "loadgroup" and _version(pytest.__version__) >= (9, 2):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} ignores xdist_group marks under --dist loadgroup: `make install`"
            " installs the version pyproject.toml pins"
        )


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


# Read before the environment is scrubbed: the one QUEUEFLOW_* variable meant for the tests.
EXTERNAL_DSN = os.environ.get("QUEUEFLOW_TEST_DATABASE_URL") or None
TEMPLATE = "qf_template"

ServiceFactory = Callable[..., Awaitable[ServiceProcess]]

pytest_plugins = ["tests.support.api"]


@pytest.fixture(scope="session", autouse=True)
def _scrub_environment() -> Iterator[None]:
    """No QUEUEFLOW_* or DATABASE_URL from the developer's shell leaks into settings or children,
    nor KUBERNETES_SERVICE_HOST from a CI pod: the tests' --dev servers run on loopback, and --dev
    refuses to start where that variable says it runs in Kubernetes."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("QUEUEFLOW_") or name in ("DATABASE_URL", "KUBERNETES_SERVICE_HOST"):
                patch.delenv(name)
        yield


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgServer]:
    """The PostgreSQL server of this session (of this xdist worker)."""
    if EXTERNAL_DSN:
        yield PgServer(EXTERNAL_DSN)
        return
    with throwaway_cluster("qf-test-pg-", fsync=False) as server:
        yield server


@pytest.fixture(scope="session")
async def template_database(pg_cluster: PgServer, worker_id: str) -> AsyncIterator[str]:
    """Name of a database holding the migrated schema, to clone per test."""
    # Imported here so that this file imports even while the schema code is being written.
    from shared.db.migrate import apply_migrations

    # A shared external server is used by every xdist worker at once: one template each.
    name = TEMPLATE if pg_cluster.embedded is not None else f"{TEMPLATE}_{worker_id}"
    await pg_cluster.drop_database(name)
    await apply_migrations(await pg_cluster.create_database(name))
    yield name
    if pg_cluster.embedded is None:
        await pg_cluster.drop_database(name)


@pytest.fixture
async def database_url(pg_cluster: PgServer, template_database: str) -> AsyncIterator[str]:
    """DSN of a fresh, migrated database of this test's own, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex}"
    url = await pg_cluster.create_database(name, template=template_database)
    try:
        yield url
    finally:
        await pg_cluster.drop_database(name)


@pytest.fixture
async def empty_database(pg_cluster: PgServer) -> AsyncIterator[str]:
    """DSN of a database with no schema at all (the usual test databases are cloned pre-migrated),
    dropped afterwards."""
    name = f"t_{uuid.uuid4().hex}"
    url = await pg_cluster.create_database(name)
    try:
        yield url
    finally:
        await pg_cluster.drop_database(name)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to this test's database."""
    conn = await asyncpg.connect(database_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A small pool on this test's database whose connections decode JSON as the server's do."""
    p = await asyncpg.create_pool(database_url, min_size=1, max_size=4, init=init_connection)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[ServiceFactory]:
    """Start real QueueFlow processes: `proc = await service(database_url, mode="api")`.

    Keyword arguments are ServiceProcess's (dev, extra_args, env); `start=False` returns the
    process unstarted. Every process is terminated (SIGTERM, then SIGKILL) after the test, and
    its log tail is printed so that a failing test shows it.
    """
    procs: list[ServiceProcess] = []

    async def launch(
        database_url: str,
        mode: str = "all",
        *,
        dev: bool = True,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        start: bool = True,
    ) -> ServiceProcess:
        proc = ServiceProcess(
            database_url, mode=mode, dev=dev, extra_args=extra_args, env=env, log_dir=tmp_path
        )
        procs.append(proc)
        return await proc.start() if start else proc

    yield launch

    errors: list[BaseException] = []
    for proc in reversed(procs):
        if not proc.started:
            continue
        try:
            await proc.terminate(grace=15.0)
        except Exception as exc:  # keep cleaning up the others, report afterwards
            errors.append(exc)
        print(proc.describe())
    if errors:
        raise errors[0]
