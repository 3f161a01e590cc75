"""Measurement probes of the benchmark: CPU seconds of a process, of the whole PostgreSQL cluster
(reaped backends included) and of the machine; peak and current RSS; established sockets; a
Prometheus gauge; the machine's durable-commit latency; what the machine and the cluster are (for
the results' metadata). All read /proc or ask the server, so they are Linux-only, like the harness.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from bench.harness import connect
from devkit.pg import PgServer

CLK_TCK = os.sysconf("SC_CLK_TCK")


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


async def prometheus_samples(http: aiohttp.ClientSession, url: str, name: str) -> list[tuple[str, float]]:
    """Every sample of `name` in the Prometheus text at `url`: (its label text, "" for an
    unlabelled sample, and its value)."""
    async with http.get(url) as resp:
        text = await resp.text()
    out = []
    for line in text.splitlines():
        rest = line[len(name) :] if line.startswith(name) else ""
        if rest[:1] in ("{", " "):
            labels, _, value = rest.rpartition(" ")
            out.append((labels.strip(), float(value)))
    return out


async def prometheus_value(http: aiohttp.ClientSession, url: str, name: str) -> float | None:
    """The value of the unlabelled sample `name` in the Prometheus text at `url`."""
    return next((value for labels, value in await prometheus_samples(http, url, name) if not labels), None)


PG_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "shared_buffers",
    "max_connections",
    "max_wal_size",
)


async def pg_settings(pg: PgServer) -> dict[str, str]:
    """The cluster's settings that the figures depend on, for the results' metadata."""
    return {n: str(await pg.fetchval("SELECT current_setting($1)", n)) for n in PG_SETTINGS}


def run_meta(started: float, quick: bool, runs: int) -> dict[str, object]:
    """What every results file records first about its invocation: when it finished, how long it
    took since `started` (time.monotonic()), whether it was --quick, runs per figure, the machine."""
    return {
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "elapsed_secs": round(time.monotonic() - started, 1),
        "quick": quick,
        "runs": runs,
        "machine": machine(),
    }


def machine() -> dict[str, object]:
    """The machine, for the results' metadata: cores, platform, Python, CPU model."""
    cpu_model = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
    }
