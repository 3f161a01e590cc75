"""What the benchmark adds to devkit's PostgreSQL and server processes.

devkit starts the cluster and the `queueflow serve` processes for the tests and the harness alike;
this module holds the harness's own rules on top: servers, and the client programs the harness
starts (remote worker processes, the peers' workloads), run in a session of their own (a
terminal's Ctrl-C reaches only the harness, which stops them), get 5 s to exit on SIGTERM and are
recorded when they ignore it; servers can run under cProfile; each measured run gets a brand-new
database with a CHECKPOINT before it; the harness's connections are labelled `BENCH_APP`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import re
import resource
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg

from devkit import REPO
from devkit.pg import PgServer, throwaway_cluster
from devkit.procs import ChildProcess, IgnoredSigterm, ServiceProcess, stop_all

OUT_DIR = REPO / "bench" / "out"
BENCH_APP = "queueflow-bench"  # application_name of the harness's own connections
STOP_GRACE_SECS = 5.0
READY_WITHIN_SECS = 60.0

UNCLEAN_EXITS: list[str] = []  # processes that ignored SIGTERM and were killed (reported in the results)
_DATABASE_NUMBERS = itertools.count(1)


def begin(log_dir: Path) -> int:
    """What a harness command (`python -m bench`, `python -m bench.compare`) does before it measures:
    SIGTERM and SIGINT raise KeyboardInterrupt, the one clean-up path; the open-files limit is
    lifted (returned: see raise_nofile_limit); `log_dir` is emptied for this invocation's logs."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    nofile = raise_nofile_limit()
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    return nofile


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # the same clean-up path as Ctrl-C


@contextlib.contextmanager
def cluster(prefix: str, settings: Mapping[str, str] | None = None) -> Iterator[PgServer]:
    """The embedded PostgreSQL of one harness invocation (durable: fsync and synchronous_commit on)
    in a new temporary directory, with `settings` (server settings) on top. On the way out, however
    it is left, every process the harness started is stopped first, then the cluster, and its
    directory is removed."""
    print("[bench] starting an embedded PostgreSQL (fsync on) ...", file=sys.stderr, flush=True)
    with throwaway_cluster(prefix, fsync=True, application_name=BENCH_APP, settings=settings) as pg:
        try:
            yield pg
        finally:
            stop_all()


def server(
    dsn: str,
    mode: str,
    log_dir: Path,
    extra: Sequence[str] = (),
    profile_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    dev: bool = True,
) -> ServiceProcess:
    """`queueflow serve --mode MODE --dev` on free ports, logging under `log_dir` (without --dev
    when `dev` is false: a server given credentials, which --dev refuses).

    With `profile_dir` set, the process runs under cProfile and writes `<mode>-<port>.prof` there
    when it exits (only the event-loop thread is profiled).
    """
    proc = ServiceProcess(dsn, mode, dev, extra_args=extra, env=env, log_dir=log_dir, own_session=True)
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        profile = profile_dir / f"{mode}-{proc.api_port}.prof"
        # argv[0] is the interpreter: its own options go right after it.
        proc.argv[1:1] = ["-m", "cProfile", "-o", str(profile)]
    return proc


class UpstreamServer(ServiceProcess):
    """Upstream's Rust server (`queueflow serve`, the binary bench.peers builds from crates.io) in
    place of QueueFlow's, on free ports in --dev mode, started and stopped like one. It binds every
    interface (it has no --host) and has no janitor mode: each of its servers runs the janitor."""

    def __init__(
        self,
        binary: Path,
        dsn: str,
        mode: str,
        log_dir: Path,
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        if mode not in ("api", "all"):
            raise ValueError(f"the Rust server has no --mode {mode} (its servers run the janitor themselves)")
        super().__init__(dsn, mode, True, extra, env, log_dir, own_session=True)
        self.argv = [
            str(binary),
            "serve",
            "--mode",
            mode,
            "--database-url",
            dsn,
            "--api-port",
            str(self.api_port),
            "--metrics-port",
            str(self.metrics_port),
            "--dev",
            *extra,
        ]
        self.log_path = log_dir / f"upstream-{mode}-{self.api_port}.log"
        self.name = f"upstream Rust server ({mode})"


def client(
    argv: Sequence[str], log_path: Path, name: str, pipes: bool = False, env: Mapping[str, str] | None = None
) -> ChildProcess:
    """Launch a client program of the harness (a remote worker process, a peer's workload) in a
    session of its own, output to `log_path`; with `pipes`, its stdin and stdout are the caller's
    (ChildProcess.send_line / read_line). Stop it with `stop()`."""
    return ChildProcess(argv, log_path, name=name, env=env, own_session=True, pipes=pipes).launch()


async def stop(proc: ChildProcess, grace: float = STOP_GRACE_SECS) -> int | None:
    """SIGTERM, then SIGKILL after `grace`; a process that needed the SIGKILL is recorded.
    Returns the exit status (None when it had to be killed)."""
    try:
        return await proc.terminate(grace=grace)
    except IgnoredSigterm:
        UNCLEAN_EXITS.append(proc.name)
        print(f"[bench] {proc.name} ignored SIGTERM for {grace:.0f}s; killed", file=sys.stderr)
        return None


# Set by `--py-spy DIR`: every server gets a py-spy sampler attached once it is ready, which writes
# `<mode>-<port>.svg` (a flame graph of all its threads, idle time left out) when the server exits.
# Sampling costs the server a few per cent; figures from such a run are for reading, not comparing.
FLAMEGRAPH_DIR: Path | None = None
PY_SPY = Path(sys.executable).parent / "py-spy"


def _attach_py_spy(proc: ServiceProcess) -> ChildProcess | None:
    if FLAMEGRAPH_DIR is None:
        return None
    FLAMEGRAPH_DIR.mkdir(parents=True, exist_ok=True)
    svg = FLAMEGRAPH_DIR / f"{proc.mode}-{proc.api_port}.svg"
    argv = [
        str(PY_SPY),
        "record",
        "--pid",
        str(proc.pid),
        "--rate",
        "200",
        "--nonblocking",
        "--output",
        str(svg),
    ]
    return client(argv, FLAMEGRAPH_DIR / f"{svg.stem}.log", name=f"py-spy {svg.name}")


@contextlib.asynccontextmanager
async def servers(*procs: ServiceProcess) -> AsyncIterator[tuple[ServiceProcess, ...]]:
    """Start the servers in order (the first one migrates the database); stop them in reverse."""
    started: list[ServiceProcess] = []
    samplers: list[ChildProcess] = []
    try:
        for proc in procs:
            await proc.start(ready_within=READY_WITHIN_SECS)
            started.append(proc)
            sampler = _attach_py_spy(proc)
            if sampler is not None:
                samplers.append(sampler)
        yield procs
    finally:
        for proc in reversed(started):
            await stop(proc)
        for sampler in samplers:  # each ends, writing its flame graph, when its server has exited
            with contextlib.suppress(Exception):
                await sampler.wait(within=30)


@contextlib.asynccontextmanager
async def database(pg: PgServer, tag: str) -> AsyncIterator[str]:
    """A brand-new empty database for one run, dropped afterwards; yields its DSN.

    A CHECKPOINT right before the run makes a timed checkpoint inside the measurement less likely.
    """
    name = f"bench_{re.sub(r'[^a-z0-9]', '_', tag.lower())}_{os.getpid()}_{next(_DATABASE_NUMBERS)}"
    dsn = await pg.create_database(name)
    try:
        await pg.execute("CHECKPOINT")
        yield dsn
    finally:
        with contextlib.suppress(Exception):
            await pg.drop_database(name)


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


def source_digest() -> str:
    """A short digest of the server's source (services/, shared/: .py and .sql). The working tree
    can change while a long run goes on; comparing the digest at start and end tells."""
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
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
