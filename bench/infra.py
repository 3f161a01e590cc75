"""Processes and PostgreSQL for the benchmarks: start, probe, and always clean up.

- `Cluster`: one embedded PostgreSQL (durable settings, fsync on) per harness invocation, with a
  fresh database per measured run (`async with cluster.database("w1a") as dsn`).
- `Server`: one real `queueflow serve` process on free ports, started in its own session so a
  terminal Ctrl-C reaches only the harness, which then stops every child it started.
- Probes: CPU seconds of a process (and of the whole PostgreSQL cluster, reaped backends
  included), peak RSS, Prometheus gauges, established sockets.

Every child process is recorded in `_CHILDREN`; `kill_children()` (registered with atexit and
called by `bench.__main__` on the way out) stops whatever is still running.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from shared.pgembed import EmbeddedPostgres, free_port

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "bench" / "out"
BENCH_APP = "queueflow-bench"  # application_name of the harness's own connections
CLK_TCK = os.sysconf("SC_CLK_TCK")

_CHILDREN: list[subprocess.Popen[bytes]] = []


# --- child processes -------------------------------------------------------------------------------


def spawn(
    argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None, pipes: bool = False
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session with output to `log_path`; it is stopped at exit for sure.
    With `pipes`, its stdin and stdout are pipes to the caller (stderr still goes to the log)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else log,
            stderr=log if pipes else subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            start_new_session=True,
        )
    _CHILDREN.append(proc)
    return proc


def _forget(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ValueError):
        _CHILDREN.remove(proc)


UNCLEAN_EXITS: list[str] = []  # servers that ignored SIGTERM and were killed (reported in the results)


async def terminate(proc: subprocess.Popen[bytes], grace: float = 5.0, name: str = "") -> int:
    """SIGTERM, wait up to `grace` seconds for a graceful exit, then SIGKILL. The process leaves the
    clean-up registry only once it is known to be dead, so an interrupted stop is finished at exit."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(proc.wait, grace)
        if proc.poll() is None:
            UNCLEAN_EXITS.append(name or " ".join(proc.args[:6]))  # type: ignore[index]
            print(f"[bench] {name or proc.pid} ignored SIGTERM for {grace:.0f}s; killed", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.to_thread(proc.wait, 10)
    _forget(proc)
    return proc.returncode


def kill_children() -> None:
    """Last resort (atexit, Ctrl-C): SIGTERM every child still running, SIGKILL after 5 s."""
    live = [p for p in _CHILDREN if p.poll() is None]
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    for proc in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
    _CHILDREN.clear()


atexit.register(kill_children)


# --- the QueueFlow server ----------------------------------------------------------------------------


class Server:
    """`queueflow serve --mode MODE --dev` on 127.0.0.1, two free ports, logs under `log_dir`.

    With `profile_dir` set, the process runs under cProfile and writes `<mode>-<port>.prof` there
    when it exits (only the event-loop thread is profiled).
    """

    def __init__(
        self, dsn: str, mode: str, log_dir: Path, extra: Sequence[str] = (), profile_dir: Path | None = None
    ) -> None:
        self.mode = mode
        self.api_port = free_port()
        self.metrics_port = free_port()
        while self.metrics_port == self.api_port:
            self.metrics_port = free_port()
        prefix = [sys.executable]
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True)
            self.profile_path: Path | None = profile_dir / f"{mode}-{self.api_port}.prof"
            prefix += ["-m", "cProfile", "-o", str(self.profile_path)]
        else:
            self.profile_path = None
        self.argv = [
            *prefix,
            "-m",
            "shared.cli",
            "serve",
            "--mode",
            mode,
            "--database-url",
            dsn,
            "--api-port",
            str(self.api_port),
            "--metrics-port",
            str(self.metrics_port),
            "--host",
            "127.0.0.1",
            "--dev",
            *extra,
        ]
        self.log_path = log_dir / f"{mode}-{self.api_port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, within: float = 60.0) -> Server:
        """Launch and return once /ready answers 200 (the API port in api/all modes, else metrics)."""
        self.proc = spawn(self.argv, self.log_path)
        ready = (self.base_url if self.mode in ("api", "all") else self.metrics_url) + "/ready"
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"queueflow {self.mode} exited with {self.proc.returncode}; "
                        f"see {self.log_path}:\n{self.log_tail()}"
                    )
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(ready) as resp:
                        if resp.status == 200:
                            return self
                if time.monotonic() > deadline:
                    await self.stop()
                    raise RuntimeError(
                        f"queueflow {self.mode} not ready within {within}s; see {self.log_path}"
                    )
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.proc is not None:
            await terminate(self.proc, name=f"queueflow serve --mode {self.mode}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@contextlib.asynccontextmanager
async def servers(*specs: Server) -> AsyncIterator[tuple[Server, ...]]:
    """Start the servers in order (the first one migrates the database); stop them in reverse."""
    started: list[Server] = []
    try:
        for srv in specs:
            await srv.start()
            started.append(srv)
        yield specs
    finally:
        for srv in reversed(started):
            await srv.stop()


# --- PostgreSQL ------------------------------------------------------------------------------------


class Cluster:
    """The embedded PostgreSQL for one harness invocation (durable: fsync and synchronous_commit on)."""

    def __init__(self, data_dir: Path) -> None:
        self.pg = EmbeddedPostgres(data_dir, fsync=True)
        self._names = itertools.count(1)
        self.admin_dsn = ""

    def start(self) -> None:
        self.admin_dsn = self.pg.start()

    def stop(self) -> None:
        self.pg.stop()

    @property
    def bindir(self) -> Path:
        return self.pg.bindir

    @property
    def port(self) -> int:
        return self.pg.port

    def dsn(self, dbname: str) -> str:
        return self.pg.dsn(dbname)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.pg.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    async def admin(self, sql: str) -> None:
        conn = await connect(self.admin_dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    async def setting(self, name: str) -> str:
        conn = await connect(self.admin_dsn)
        try:
            return str(await conn.fetchval("SELECT current_setting($1)", name))
        finally:
            await conn.close()

    @contextlib.asynccontextmanager
    async def database(self, tag: str) -> AsyncIterator[str]:
        """A brand-new empty database for one run, dropped afterwards; yields its DSN.

        A CHECKPOINT right before the run makes a timed checkpoint inside the measurement less likely.
        """
        name = f"bench_{re.sub(r'[^a-z0-9]', '_', tag.lower())}_{os.getpid()}_{next(self._names)}"
        await self.admin(f'CREATE DATABASE "{name}"')
        try:
            await self.admin("CHECKPOINT")
            yield self.dsn(name)
        finally:
            with contextlib.suppress(Exception):
                await self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def connect(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, server_settings={"application_name": BENCH_APP})


async def wait_for_count(
    conn: asyncpg.Connection,
    sql: str,
    target: int,
    timeout: float,
    interval: float = 0.2,
    watch: Sequence[asyncio.Task[Any]] = (),
) -> float:
    """Poll `sql` (a count) until it reaches `target`; returns the monotonic time it was seen.
    A task in `watch` that fails ends the wait with its exception (a client loop that broke)."""
    deadline = time.monotonic() + timeout
    while True:
        for task in watch:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        n = await conn.fetchval(sql)
        if n >= target:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {n} of {target} after {timeout:.0f}s: {sql}")
        await asyncio.sleep(interval)


# --- probes ----------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    # Fields after the parenthesised command name: state is [0], ppid [1], utime [11], stime [12],
    # cutime [13], cstime [14].
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int, with_children: bool = False) -> float:
    """User + system CPU of `pid`; with `with_children`, also of its exited, reaped children."""
    try:
        f = _stat_fields(pid)
    except OSError:
        return 0.0
    ticks = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if with_children else 0)
    return ticks / CLK_TCK


def cluster_cpu_seconds(postmaster: int | None) -> float:
    """CPU of the whole PostgreSQL cluster: the postmaster, its live children, and (through the
    postmaster's cutime/cstime) every backend that has already exited."""
    if postmaster is None:
        return 0.0
    total = cpu_seconds(postmaster, with_children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            f = _stat_fields(int(entry.name))
        except (OSError, IndexError):
            continue
        if f[1] == str(postmaster):
            total += (int(f[11]) + int(f[12])) / CLK_TCK
    return total


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot (everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK  # user..steal, minus idle, iowait


@dataclass
class CpuMeter:
    """CPU used over a window by the harness (client), the given server processes, this cluster's
    PostgreSQL, and everything else on the machine ("other": other sessions' tests and servers
    share these cores too). `percent()` gives % of one core; the machine has os.cpu_count().
    `client_pids`: client processes the harness started (remote workers); they count as client."""

    server_pids: Sequence[int]
    postmaster: int | None
    client_pids: Sequence[int] = ()

    def __post_init__(self) -> None:
        self._start = self._sample()

    def _sample(self) -> tuple[float, ...]:
        return (
            time.monotonic(),
            time.process_time() + sum(cpu_seconds(p) for p in self.client_pids),
            sum(cpu_seconds(p) for p in self.server_pids),
            cluster_cpu_seconds(self.postmaster),
            machine_busy_seconds(),
        )

    def percent(self) -> dict[str, float]:
        end = self._sample()
        wall = max(1e-9, end[0] - self._start[0])
        out = {
            name: 100.0 * (end[i] - self._start[i]) / wall
            for i, name in ((1, "client"), (2, "server"), (3, "postgres"), (4, "machine"))
        }
        out["other"] = max(0.0, out["machine"] - out["client"] - out["server"] - out["postgres"])
        return out


async def commit_probe(dsn: str, commits: int = 200) -> dict[str, float]:
    """Round trips of `commits` one-row UPDATE commits on one connection (each waits for the WAL
    flush): the machine's durable-commit latency right now, in ms (p50, p90). On this VM it moves
    by several times from one minute to the next, and every figure here depends on it."""
    conn = await connect(dsn)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS public.bench_probe (id int PRIMARY KEY, v int);"
            " INSERT INTO public.bench_probe VALUES (1, 0) ON CONFLICT DO NOTHING"
        )
        times = []
        for _ in range(commits):
            t = time.perf_counter()
            await conn.execute("UPDATE public.bench_probe SET v = v + 1 WHERE id = 1")
            times.append(1000 * (time.perf_counter() - t))
    finally:
        await conn.close()
    times.sort()
    return {"p50": times[len(times) // 2], "p90": times[int(len(times) * 0.9)]}


def vm_kib(pid: int, field: str = "VmHWM") -> int:
    """A /proc/<pid>/status memory field in KiB (VmHWM is the peak resident set size)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def established_sockets(local_port: int) -> int:
    """TCP connections in ESTABLISHED state whose local end is `local_port` (the server side)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == local_port:
                    count += 1
    return count


async def prometheus_value(http: aiohttp.ClientSession, url: str, name: str) -> float | None:
    """The value of an unlabelled sample `name` in the Prometheus text at `url`."""
    async with http.get(url) as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def source_digest() -> str:
    """A short digest of the server's source (services/, shared/: .py and .sql). The working tree
    can change while a long run goes on; comparing the digest at start and end tells."""
    import hashlib

    h = hashlib.sha256()
    for top in ("services", "shared"):
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in (".py", ".sql") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(REPO)).encode())
                with contextlib.suppress(OSError):
                    h.update(path.read_bytes())
    return h.hexdigest()[:12]


def raise_nofile_limit() -> int:
    """Lift the soft open-files limit to the hard one (2,000 client sockets need it); returns it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
