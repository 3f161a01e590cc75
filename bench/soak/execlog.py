"""The soak's execution log: one line per handler start, written by every process that runs jobs.

A line is `job_id pid role wall_time delivery_count`. The file is opened with O_APPEND and each line
is one write(2): a line written before a SIGKILL is in the file (the kernel holds it), and lines from
several processes never interleave. The soak counts executions per job from these lines.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "SOAK_EXEC_LOG"
_fd: int | None = None


def record(job_id: str, role: str, delivery: int) -> None:
    global _fd
    if _fd is None:
        _fd = os.open(os.environ[ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, f"{job_id} {os.getpid()} {role} {time.time():.6f} {delivery}\n".encode())


@dataclass(frozen=True)
class Execution:
    job_id: str
    pid: int
    role: str
    at: float  # wall clock, seconds
    delivery: int


def read(path: Path) -> list[Execution]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:  # a torn last line (none expected: one write per line) is skipped
            out.append(Execution(parts[0], int(parts[1]), parts[2], float(parts[3]), int(parts[4])))
    return out
