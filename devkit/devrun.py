"""`make run`: QueueFlow in development mode, with an embedded PostgreSQL unless DATABASE_URL is set.

The embedded cluster keeps its data in `<repo>/.qfdata/pg`, so jobs survive restarts. This process
prints where to point curl, runs `queueflow serve --mode all --dev --host 127.0.0.1` as a child
(dev mode accepts any token, so it listens on loopback only), forwards Ctrl-C and SIGTERM to it,
and stops the embedded PostgreSQL once the server has exited.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

from devkit import REPO
from devkit.pg import EmbeddedPostgres, PgEmbedError
from devkit.ports import port_is_free
from devkit.procs import SERVER_ARGV

DATA_DIR = REPO / ".qfdata" / "pg"
DEV_PG_PORT = 55432
DATABASE = "queueflow"
DEV_TOKEN = "dev"
DEV_HOST = "127.0.0.1"


def banner(api_url: str, database: str) -> str:
    auth = f"-H 'Authorization: Bearer {DEV_TOKEN}'"
    body = '{"task_name":"echo","payload":{"hello":"world"}}'
    return "\n".join(
        [
            "",
            "QueueFlow (development mode)",
            f"  API        {api_url}",
            f"  token      {DEV_TOKEN}   (in --dev mode any bearer token is accepted)",
            f"  database   {database}",
            "",
            "Enqueue an echo job:",
            f"  curl -s -X POST {api_url}/api/v1/jobs {auth} -H 'Content-Type: application/json' -d '{body}'",
            "Fetch it, with the job_id from that reply:",
            f"  curl -s {api_url}/api/v1/jobs/<id> {auth}",
            "",
            "Ctrl-C stops QueueFlow"
            + (" and the embedded PostgreSQL." if database.startswith("embedded") else "."),
            "",
        ]
    )


def run_server(env: dict[str, str]) -> int:
    """Run the server in the foreground until it exits; return its exit status."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []  # signals that arrived before the child existed

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)
        elif child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # Its own process group: a terminal Ctrl-C reaches only us and we forward it exactly once,
        # so the server sees one SIGINT (a second one would cut its graceful shutdown short).
        child = subprocess.Popen(
            [*SERVER_ARGV, "--mode", "all", "--dev", "--host", DEV_HOST],
            env=env,
            cwd=REPO,
            process_group=0,
        )
        for signum in pending:
            child.send_signal(signum)
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code if code >= 0 else 128 - code  # killed by signal N: the shell's 128 + N


def main() -> int:
    env = dict(os.environ)
    api_url = f"http://{DEV_HOST}:{env.get('QUEUEFLOW_API_PORT') or 8000}"
    if env.get("DATABASE_URL"):
        print(banner(api_url, "from DATABASE_URL"), flush=True)
        return run_server(env)

    port = DEV_PG_PORT if port_is_free(DEV_PG_PORT) else None
    pg = EmbeddedPostgres(DATA_DIR, port=port, fsync=True)
    try:
        print(f"Starting the embedded PostgreSQL in {DATA_DIR.relative_to(REPO)} ...", flush=True)
        pg.start()
        env["DATABASE_URL"] = pg.ensure_database(DATABASE)
        print(banner(api_url, f"embedded, {env['DATABASE_URL']}"), flush=True)
        return run_server(env)
    except PgEmbedError as err:
        print(f"devrun: {err}", file=sys.stderr)
        return 1
    finally:
        pg.stop()


if __name__ == "__main__":
    sys.exit(main())
