"""A real PgBouncer (Debian's `pgbouncer` package) in front of the test cluster, for the tests of
QueueFlow through a transaction pooler. Without the binary the tests skip locally and fail under CI
(CI=true), where .ci/run installs it first."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from devkit.ports import free_port

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def pgbouncer_or_skip() -> str:
    if os.path.exists(BINARY):
        return BINARY
    if os.environ.get("CI"):
        pytest.fail("pgbouncer is missing: .ci/run installs Debian's pgbouncer package")
    pytest.skip("pgbouncer is not installed (apt install pgbouncer)")


@dataclass
class Bouncer:
    port: int
    log_path: Path

    def url_for(self, database_url: str) -> str:
        """`database_url` with its host and port replaced by the bouncer's."""
        parts = urlsplit(database_url)
        user = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@contextlib.contextmanager
def pgbouncer(database_url: str, pool_mode: str = "transaction", pool_size: int = 10) -> Iterator[Bouncer]:
    """PgBouncer on a free port, every database of `database_url`'s server behind it (trust auth)."""
    binary = pgbouncer_or_skip()
    target = urlsplit(database_url)
    user = target.username or "postgres"
    directory = Path(tempfile.mkdtemp(prefix="qf-pgbouncer-"))
    port = free_port()
    log_path = directory / "pgbouncer.log"
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "\n".join(
            [
                "[databases]",
                f"* = host={target.hostname} port={target.port}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {directory / 'users.txt'}",
                f"pool_mode = {pool_mode}",
                f"default_pool_size = {pool_size}",
                "max_client_conn = 1000",
                "ignore_startup_parameters = extra_float_digits",
                f"logfile = {log_path}",
                f"pidfile = {directory / 'pgbouncer.pid'}",
                "",
            ]
        )
    )
    argv = [binary, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        account = pwd.getpwnam("postgres")
        os.chmod(directory, 0o755)
        for path in [directory, *directory.iterdir()]:
            os.chown(path, account.pw_uid, account.pw_gid)
        argv = ["runuser", "-u", "postgres", "--", *argv]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 10
        while "listening on" not in (log_path.read_text() if log_path.exists() else ""):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"pgbouncer did not start:\n{log_path.read_text() if log_path.exists() else ''}"
                )
            time.sleep(0.05)
        yield Bouncer(port, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


def version() -> str:
    out = subprocess.run([pgbouncer_or_skip(), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split("\n", 1)[0]
