"""What the soak samples: each process's RSS and which PostgreSQL connections it holds.

Every QueueFlow process labels its pool `queueflow` and its LISTEN connection `queueflow-listener`,
so `application_name` alone does not say which process a backend serves. The servers connect over
TCP to 127.0.0.1, so each backend's `client_port` is a local socket, and the socket's inode
(/proc/net/tcp) is among the open descriptors (/proc/PID/fd) of exactly one process: that process
holds the connection. A sample is therefore: per process, its RSS and its backends counted by
application_name.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

ACTIVITY = """
SELECT application_name, client_port FROM pg_stat_activity
WHERE datname = current_database() AND client_port IS NOT NULL AND client_port > 0"""


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _socket_inodes(pid: int) -> set[int]:
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(fd.path)
                if target.startswith("socket:["):
                    found.add(int(target[8:-1]))
    return found


def _local_port_inodes(pg_port: int) -> dict[int, int]:
    """{local port: socket inode} of the TCP connections whose remote end is PostgreSQL's port."""
    out: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                local, remote, inode = cols[1], cols[2], int(cols[9])
                if int(remote.rsplit(":", 1)[1], 16) == pg_port and inode:
                    out[int(local.rsplit(":", 1)[1], 16)] = inode
    return out


async def connections_by_process(
    conn: asyncpg.Connection, pg_port: int, pids: dict[str, int]
) -> tuple[dict[str, dict[str, int]], int]:
    """{process name: {application_name: backends}} for the processes in `pids` ({name: pid}), and
    the number of this database's backends that none of them holds."""
    rows = await conn.fetch(ACTIVITY)
    port_inode = _local_port_inodes(pg_port)
    owner: dict[int, str] = {}
    for name, pid in pids.items():
        for inode in _socket_inodes(pid):
            owner[inode] = name
    counts: dict[str, Counter[str]] = {name: Counter() for name in pids}
    unattributed = 0
    for row in rows:
        name = owner.get(port_inode.get(row["client_port"], -1))
        if name is None:
            unattributed += 1
        else:
            counts[name][row["application_name"]] += 1
    return {name: dict(c) for name, c in counts.items()}, unattributed


def postgres_backends(postmaster: int | None) -> dict[str, Any]:
    """How many processes the postmaster has (backends and its own helpers)."""
    if postmaster is None:
        return {}
    children = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = Path(f"/proc/{entry.name}/stat").read_text()
                    if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                        children += 1
    return {"postmaster_children": children, "postmaster_rss_mb": rss_mb(postmaster)}
