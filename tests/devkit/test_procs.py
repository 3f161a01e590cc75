"""devkit.procs.ChildProcess: the one way the tests and the benchmark start and stop a child
(ServiceProcess builds on it; the server tests exercise that part)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devkit import REPO
from devkit.procs import ChildProcess, IgnoredSigterm

# Answers each line on stdin with it upper-cased; says "bye" on stderr and exits at "quit" or EOF.
ECHO = """
import sys
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    print(line.strip().upper(), flush=True)
print("bye", file=sys.stderr, flush=True)
"""
# Ignores SIGTERM, then sleeps.
STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring", flush=True)
time.sleep(60)
"""


async def test_a_piped_child_speaks_a_line_protocol_and_its_stderr_goes_to_the_log(tmp_path: Path) -> None:
    proc = ChildProcess([sys.executable, "-c", ECHO], tmp_path / "echo.log", name="echo", pipes=True).launch()
    try:
        assert await proc.read_line(10) == "ready"
        proc.send_line("hello")
        assert await proc.read_line(10) == "HELLO"
        proc.send_line("quit")
        assert await proc.wait(within=10) == 0
        assert proc.log_text().strip() == "bye"
        assert await proc.read_line(10) == ""  # closed
        proc.send_line("nobody listens")  # a child that has gone is not an error
    finally:
        await proc.terminate(grace=5)


async def test_output_goes_to_the_log_without_pipes(tmp_path: Path) -> None:
    proc = ChildProcess([sys.executable, "-c", "print('to the log')"], tmp_path / "out.log").launch()
    assert await proc.wait(within=10) == 0
    assert proc.log_text() == "to the log\n"
    with pytest.raises(RuntimeError, match="without pipes"):
        proc.send_line("x")


async def test_terminate_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    proc = ChildProcess(
        [sys.executable, "-c", STUBBORN],
        tmp_path / "stubborn.log",
        name="stubborn",
        own_session=True,
        pipes=True,
    ).launch()
    assert await proc.read_line(10) == "ignoring"
    with pytest.raises(IgnoredSigterm, match="stubborn ignored SIGTERM"):
        await proc.terminate(grace=0.5)
    assert proc.returncode == -9


def test_a_child_left_running_is_stopped_at_interpreter_exit(tmp_path: Path) -> None:
    """stop_all() runs at exit: a harness that dies without stopping its children leaves none."""
    parent = f"""
import sys
from devkit.procs import ChildProcess
proc = ChildProcess([sys.executable, "-c", "import time; time.sleep(60)"], {str(tmp_path / "left.log")!r})
print(proc.launch().pid, flush=True)
"""
    done = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    child = Path(f"/proc/{int(done.stdout)}/cmdline")
    # Stopped and reaped before its parent exited; a survivor would still be sleeping (pids are
    # not reused this fast, and a reused one would run something else).
    assert not child.exists() or "time.sleep(60)" not in child.read_text()


async def test_a_server_whose_port_was_taken_meanwhile_is_started_again_on_new_ports(
    database_url, tmp_path
) -> None:
    """free_port() answers a port that was free a moment ago; another process may bind it first.
    The server then exits at start (its metrics listener binds before the api answers /ready),
    and start() launches it again on new ports."""
    import socket

    from devkit.procs import ServiceProcess

    proc = ServiceProcess(database_url, mode="api", log_dir=tmp_path)
    taken = proc.metrics_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            await proc.start()
            assert proc.metrics_port != taken and f"--metrics-port {proc.metrics_port}" in " ".join(proc.argv)
            assert "address already in use" in proc.log_text()
        finally:
            await proc.terminate()


async def test_a_ready_answer_from_another_server_on_a_taken_port_is_not_taken_for_this_ones(
    database_url, tmp_path
) -> None:
    """Another server that took the port picked for this one answers /ready with 200 while this
    one is still starting. start() waits for this process's own listener: this one exits, unable
    to bind, and is launched again on new ports (a janitor replica of the topology test once came
    back 'started' from a port another test's server held, and was dead)."""
    from aiohttp import web

    from devkit.procs import ServiceProcess, listens_on

    proc = ServiceProcess(database_url, mode="janitor", log_dir=tmp_path)
    taken = proc.metrics_port

    async def ready(_: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    impostor = web.Application()
    impostor.router.add_get("/ready", ready)
    runner = web.AppRunner(impostor)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", taken).start()
    try:
        assert listens_on(os.getpid(), taken) and not listens_on(os.getpid(), proc.api_port)
        await proc.start()
        assert proc.metrics_port != taken and proc.returncode is None
        assert listens_on(proc.pid, proc.metrics_port) and not listens_on(proc.pid, taken)
        assert "address already in use" in proc.log_text()
    finally:
        await proc.terminate()
        await runner.cleanup()
