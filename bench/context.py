"""What every scenario receives (`Context`) and what every scenario module exports (`Scenario`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from bench import harness
from bench.probes import commit_probe
from bench.report import Figure
from devkit.pg import EmbeddedPostgres, PgServer
from devkit.procs import ServiceProcess


class Unsupported(Exception):
    """The server under test lacks what a measurement needs (a route, a setting): that figure is
    skipped with this note rather than failed."""


@dataclass
class Context:
    pg: PgServer  # the harness's embedded cluster (pg.embedded is set)
    quick: bool
    log_dir: Path
    out_dir: Path
    profile_dir: Path | None = None  # set by --profile: servers run under cProfile
    drain_workers: tuple[int, ...] = (4, 16)  # W1b: --workers values, one figure each
    drain_untuned: bool = False  # W1b: also `--mode all` with no tuning flag (figures default_*)
    drain_removing: bool = False  # W1b: on a queue that removes finished jobs (figures remove_*)
    remote_loops: int = 8  # W1a: concurrent remote worker loops (per process with remote_processes)
    remote_batch: int = 50  # W1a: max_jobs per lease
    remote_processes: int = 0  # W1a: 0 = the loops run in the harness; N = in N client processes
    # W1a: raw loops acknowledge per job, the calls of one lease sent together ("each") or one
    # after another, each answer awaited ("sequential"), or per lease ("batch")
    remote_ack: str = "each"
    remote_client: str = "raw"  # W1a: "raw", or an SDK loop ("sdk", "go-sdk", "rust-sdk"; processes)
    latency_loops: int = 4  # W2: remote loops parked in long-poll
    latency_max_jobs: int = 1  # W2: max_jobs of their lease calls
    latency_slow_phase: bool = True  # W2: also the light phase (one job per 50 ms)
    push_concurrency: tuple[int, ...] = (300, 10)  # P: endpoint concurrency values, one drain each
    # Upstream's Rust server's binary: W1a, W1b, W2 and E run it in place of QueueFlow's servers
    # (bench.compare's row for it); None is QueueFlow.
    upstream: Path | None = None
    notes: list[str] = field(default_factory=list)

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def server(
        self, dsn: str, mode: str, *extra: str, env: Mapping[str, str] | None = None, dev: bool = True
    ) -> ServiceProcess:
        if self.upstream is not None:
            return harness.UpstreamServer(self.upstream, dsn, mode, self.log_dir, extra, env)
        return harness.server(dsn, mode, self.log_dir, extra, self.profile_dir, env, dev)

    def api_side(self, dsn: str) -> Sequence[ServiceProcess]:
        """What serves remote workers, the api first: QueueFlow's `--mode api` and `--mode janitor`
        processes; the Rust server's one `--mode api` (which runs its janitor itself)."""
        if self.upstream is not None:
            return (self.server(dsn, "api"),)
        return (self.server(dsn, "api"), self.server(dsn, "janitor"))

    def database(self, tag: str) -> AbstractAsyncContextManager[str]:
        """A brand-new database for one run (see harness.database); yields its DSN."""
        return harness.database(self.pg, tag)

    @property
    def cluster(self) -> EmbeddedPostgres:
        assert self.pg.embedded is not None, "the harness always runs its own cluster"
        return self.pg.embedded

    @property
    def postmaster(self) -> int | None:
        return self.cluster.postmaster_pid()


RunFn = Callable[[Context, int], Awaitable[dict[str, float]]]


@dataclass(frozen=True)
class Scenario:
    """`run(ctx, run_no)` performs one complete, independent run (fresh database, fresh server
    processes) and returns {figure key: value}; the harness repeats it and summarises."""

    name: str
    title: str
    figures: Callable[[Context], list[Figure]]
    run: RunFn


# --- figures most scenarios share ----------------------------------------------------------------------

PROBE_FIGURES = [
    Figure("commit_p50_ms", "machine: durable 1-row commit p50 (probe before the run)", "ms"),
    Figure("commit_p90_ms", "machine: durable 1-row commit p90 (probe before the run)", "ms"),
]


async def probe_commits(dsn: str, prefix: str = "") -> dict[str, float]:
    p = await commit_probe(dsn)
    return {f"{prefix}commit_p50_ms": p["p50"], f"{prefix}commit_p90_ms": p["p90"]}


def cpu_figures(prefix: str, during: str, server: str | None = "server", client: bool = True) -> list[Figure]:
    """CPU figures for a window: client (harness), server processes, PostgreSQL, other processes."""
    figs = []
    if client:
        figs.append(Figure(f"{prefix}cpu_client", f"CPU {during}: client (harness)", "% core"))
    if server:
        figs.append(Figure(f"{prefix}cpu_server", f"CPU {during}: {server}", "% core"))
    figs += [
        Figure(f"{prefix}cpu_postgres", f"CPU {during}: PostgreSQL", "% core"),
        Figure(f"{prefix}cpu_other", f"CPU {during}: other processes on the machine", "% core"),
    ]
    return figs


def cpu_values(prefix: str, cpu: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}cpu_{k}": v for k, v in cpu.items() if k != "machine"}
