"""devkit.pg: the embedded PostgreSQL behind `make run`, the test suite and the benchmark."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from devkit.pg import EmbeddedPostgres, PgEmbedError


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: that tree is private to root, and the server may run as `postgres`.
    base = Path(tempfile.mkdtemp(prefix="qf-devkit-pg-"))
    yield base / "data"
    shutil.rmtree(base, ignore_errors=True)


def _postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])


async def test_started_cluster_accepts_connections_on_its_dsn(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir)
    dsn = await asyncio.to_thread(pg.start)
    try:
        assert dsn == f"postgresql://postgres@127.0.0.1:{pg.port}/postgres"
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT current_user") == "postgres"
            # The throwaway settings: speed over durability, room for many pools.
            assert await conn.fetchval("SHOW fsync") == "off"
            assert await conn.fetchval("SHOW max_connections") == "400"
        finally:
            await conn.close()
    finally:
        await asyncio.to_thread(pg.stop)
    assert not (data_dir / "postmaster.pid").exists()


def test_restart_over_an_existing_data_dir_keeps_its_databases(data_dir: Path) -> None:
    with EmbeddedPostgres(data_dir, fsync=True) as pg:
        assert pg.psql("SHOW fsync").strip() == "on"
        assert pg.psql("SHOW max_connections").strip() == "200"
        dsn = pg.ensure_database("kept")
        assert dsn.endswith("/kept")
        pg.psql("CREATE TABLE marker (note text); INSERT INTO marker VALUES ('survived')", dbname="kept")

    with EmbeddedPostgres(data_dir, fsync=True) as pg:
        assert pg.ensure_database("kept").endswith("/kept")  # already there: no error
        assert pg.psql("SELECT note FROM marker", dbname="kept").strip() == "survived"


def test_settings_go_to_the_server_over_the_chosen_ones(data_dir: Path) -> None:
    settings = {"max_connections": "150", "shared_preload_libraries": "pg_stat_statements"}
    with EmbeddedPostgres(data_dir, fsync=True, settings=settings) as pg:
        assert pg.psql("SHOW max_connections").strip() == "150"  # over the durable default of 200
        assert pg.psql("SHOW shared_preload_libraries").strip() == "pg_stat_statements"
        assert pg.psql("SHOW fsync").strip() == "on"


def test_start_recovers_after_the_postmaster_was_killed(data_dir: Path) -> None:
    killed = EmbeddedPostgres(data_dir)
    killed.start()
    os.kill(_postmaster_pid(data_dir), signal.SIGKILL)  # leaves postmaster.pid behind

    with EmbeddedPostgres(data_dir) as pg:
        assert pg.psql("SELECT 1").strip() == "1"
    killed.stop()  # nothing left to stop: harmless


def test_start_ignores_a_pid_file_naming_an_unrelated_live_process(data_dir: Path) -> None:
    with EmbeddedPostgres(data_dir):
        pass
    # PostgreSQL itself would refuse to start over a pid file whose PID is alive.
    (data_dir / "postmaster.pid").write_text(f"{os.getpid()}\n{data_dir}\n")

    with EmbeddedPostgres(data_dir) as pg:
        assert pg.psql("SELECT 1").strip() == "1"
        assert _postmaster_pid(data_dir) != os.getpid()


def test_start_stops_a_leftover_server_of_the_same_data_dir(data_dir: Path) -> None:
    leftover = EmbeddedPostgres(data_dir)
    leftover.start()  # never stopped, like a server whose `make run` was killed
    old_pid = _postmaster_pid(data_dir)

    with EmbeddedPostgres(data_dir) as pg:
        assert _postmaster_pid(data_dir) != old_pid
        assert pg.psql("SELECT 1").strip() == "1"
    leftover.stop()


def test_start_refuses_a_directory_that_is_not_a_cluster(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "notes.txt").write_text("mine")

    with pytest.raises(PgEmbedError, match="neither empty nor a PostgreSQL data directory"):
        EmbeddedPostgres(data_dir).start()
    assert (data_dir / "notes.txt").read_text() == "mine"
