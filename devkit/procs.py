"""Real processes for the tests and the benchmark: `queueflow serve` on free ports, and others.

A `ChildProcess` is any child program with its output appended to a log file (or, with `pipes`,
its stdin and stdout connected to the caller for a line protocol); `terminate()` is SIGTERM and
then SIGKILL past a grace period; `kill()` is a crash. A `ServiceProcess` is one `serve --mode
MODE` child bound to 127.0.0.1 on two free ports; its `start()` returns once /ready answers 200.
Every launched process is remembered until it is known to be dead, and `stop_all()`, which also
runs at interpreter exit, stops whatever is left, so an interrupted test run or benchmark leaves no
process behind.

The children are `subprocess.Popen` objects waited on by polling rather than asyncio subprocesses,
so that they belong to no particular event loop (the benchmark runs more than one) and can still be
stopped from atexit.

`CLI_ARGV` is the one place that says how the `queueflow` command is run from the source tree.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

import aiohttp

from devkit import REPO
from devkit.ports import free_port

# The `queueflow` console script's equivalent from the source tree, and its server subcommand.
CLI_ARGV: tuple[str, ...] = (sys.executable, "-m", "services.cli")
SERVER_ARGV: tuple[str, ...] = (*CLI_ARGV, "serve")
# Modes whose process serves the REST API; the others answer /ready on the metrics port only.
API_MODES = ("all", "api")
_POLL_SECS = 0.02

_LIVE: list[subprocess.Popen[bytes]] = []  # started and not yet seen dead


class IgnoredSigterm(AssertionError):
    """A process did not exit within its grace period after SIGTERM and was killed."""


class ChildProcess:
    """A child program whose output (stdout and stderr) is appended to `log_path`.

    `launch()` starts it; `terminate()` is SIGTERM and then SIGKILL past a grace period; `kill()`
    is a crash; `wait()` waits for it to exit on its own. `argv` may be edited before the launch.
    With `own_session`, the child runs in a session of its own, so a terminal's Ctrl-C reaches only
    this process, which then stops the child itself. With `pipes`, its stdin and stdout are pipes
    to this process instead (`send_line()`, `read_line()`: a line protocol) and only its stderr goes
    to the log. `name` is how messages call it.
    """

    def __init__(
        self,
        argv: Sequence[str],
        log_path: str | os.PathLike[str],
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] = REPO,
        own_session: bool = False,
        pipes: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.name = name or " ".join(self.argv[:4])
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.cwd = Path(cwd)
        self.own_session = own_session
        self.pipes = pipes
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def started(self) -> bool:
        return self._proc is not None

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has exited, else None (also before the start)."""
        return None if self._proc is None else _poll(self._proc)

    @property
    def _process(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError("the process has not been started")
        return self._proc

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def describe(self, tail_chars: int = 4000) -> str:
        """The command line and the end of the log, for failure messages."""
        return f"$ {' '.join(self.argv)}\n--- {self.log_path} (tail) ---\n{self.log_text()[-tail_chars:]}"

    def launch(self) -> Self:
        """Start the process (once); it is remembered until it is seen dead, for `stop_all()`."""
        if self._proc is not None:
            raise RuntimeError("the process was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE if self.pipes else subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.pipes else log,
                stderr=log if self.pipes else subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=self.own_session,
            )
        _LIVE.append(self._proc)
        return self

    async def wait(self, within: float | None = 30.0) -> int:
        """Wait for the process to exit on its own (`within` None: however long); its exit status."""
        async with asyncio.timeout(within):
            return await _reaped(self._process)

    async def terminate(self, grace: float = 30.0) -> int:
        """SIGTERM, then wait for a graceful exit; past `grace`, SIGKILL and raise IgnoredSigterm."""
        proc = self._process
        if _poll(proc) is None:
            with contextlib.suppress(ProcessLookupError):  # exited, not yet reaped
                proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await _reaped(proc)
            except TimeoutError:
                await self.kill()
                raise IgnoredSigterm(
                    f"{self.name} ignored SIGTERM for {grace}s and was killed\n" + self.describe()
                ) from None
        self._close_pipes()
        return proc.returncode

    async def kill(self) -> int:
        """SIGKILL (no graceful shutdown, like a crash); return the exit status once reaped."""
        proc = self._process
        if _poll(proc) is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        code = await _reaped(proc)
        self._close_pipes()
        return code

    def send_line(self, text: str) -> None:
        """Write one line to the child's stdin (`pipes`); a child that has gone is not an error."""
        stdin = self._process.stdin
        if stdin is None:
            raise RuntimeError(f"{self.name} was started without pipes")
        with contextlib.suppress(BrokenPipeError, OSError):
            stdin.write(text.encode() + b"\n")
            stdin.flush()

    async def read_line(self, within: float) -> str:
        """The next line of the child's stdout (`pipes`), stripped; "" once it is closed."""
        stdout = self._process.stdout
        if stdout is None:
            raise RuntimeError(f"{self.name} was started without pipes")
        # A blocking read in a thread: the pipe belongs to no event loop, like the process itself.
        raw = await asyncio.wait_for(asyncio.to_thread(stdout.readline), within)
        return raw.decode(errors="replace").strip()

    def _close_pipes(self) -> None:
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class ServiceProcess(ChildProcess):
    """`queueflow serve --mode MODE` bound to 127.0.0.1 on two free ports.

    Create it, then `await proc.start()`, which returns once `/ready` answers 200. Output (stdout
    and stderr) goes to `log_path`; `log_text()` reads it. `argv` may be edited before the start
    (a later flag overrides an earlier one). With `own_session`, the child runs in a session of its
    own, so a terminal's Ctrl-C reaches only this process, which then stops the child itself.
    """

    def __init__(
        self,
        database_url: str,
        mode: str = "all",
        dev: bool = True,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        cwd: str | os.PathLike[str] = REPO,
        own_session: bool = False,
    ) -> None:
        self.mode = mode
        self.api_port, self.metrics_port = _two_free_ports()
        self._log_offset = 0
        directory = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="qf-proc-"))
        # extra_args come last so that a caller can override any flag set here (argparse: last wins).
        super().__init__(
            [
                *SERVER_ARGV,
                "--mode",
                mode,
                "--database-url",
                database_url,
                "--api-port",
                str(self.api_port),
                "--metrics-port",
                str(self.metrics_port),
                "--host",
                "127.0.0.1",
                *(["--dev"] if dev else []),
                *extra_args,
            ],
            directory / f"queueflow-{mode}-{self.api_port}.log",
            name=f"QueueFlow ({mode})",
            env=env,
            cwd=cwd,
            own_session=own_session,
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def ready_url(self) -> str:
        return f"{self.base_url if self.mode in API_MODES else self.metrics_url}/ready"

    @property
    def ready_port(self) -> int:
        return self.api_port if self.mode in API_MODES else self.metrics_port

    async def start(self, ready_within: float = 30.0) -> ServiceProcess:
        """Launch the process and return once its /ready endpoint answers 200. A port picked here
        can be taken by another process before the server binds it: then the server exits at
        start, and it is launched again on new ports (up to twice)."""
        for attempt in range(3):
            try:
                return await self._start_once(ready_within)
            except _PortTaken:
                if attempt == 2:
                    raise
                self._proc = None
                self._pick_ports()
        raise AssertionError("unreachable")

    def _pick_ports(self) -> None:
        """New free ports, written into the argv where __init__ put them, and into any argument
        that names the old base URL (a --public-url added by a caller)."""
        old = {"--api-port": str(self.api_port), "--metrics-port": str(self.metrics_port)}
        old_url = self.base_url
        self.api_port, self.metrics_port = _two_free_ports()
        new = {"--api-port": str(self.api_port), "--metrics-port": str(self.metrics_port)}
        for flag in old:
            at = self.argv.index(flag)
            assert self.argv[at + 1] == old[flag]
            self.argv[at + 1] = new[flag]
        self.argv = [arg.replace(old_url, self.base_url) for arg in self.argv]

    async def _start_once(self, ready_within: float) -> ServiceProcess:
        self._log_offset = len(self.log_text())  # this launch's own lines start here
        self.launch()
        deadline = time.monotonic() + ready_within
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while not await self._is_ready(http):
                if time.monotonic() > deadline:
                    await self.kill()
                    raise RuntimeError(
                        f"{self.name} was not ready within {ready_within}s at {self.ready_url}\n"
                        + self.describe()
                    )
                await asyncio.sleep(0.05)
        return self

    async def _is_ready(self, http: aiohttp.ClientSession) -> bool:
        """Whether /ready answers 200; raises RuntimeError when the process has exited instead."""
        code = _poll(self._process)
        if code is not None:
            if "address already in use" in self.log_text()[self._log_offset :].lower():
                raise _PortTaken(self.describe())
            raise RuntimeError(f"{self.name} exited with {code} before it was ready\n" + self.describe())
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with http.get(self.ready_url) as response:
                # Only this process's answer counts: a port picked for it and taken meanwhile by
                # another server answers 200 too, while this one is still starting (it then exits,
                # unable to bind, and is launched again on new ports).
                return response.status == 200 and listens_on(self.pid, self.ready_port)
        return False


class _PortTaken(RuntimeError):
    """The server exited at start because a port picked for it was taken meanwhile."""


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds a TCP socket listening on `port` (Linux's /proc). True where
    /proc cannot say (another system): the caller then trusts the answer on the port alone."""
    inodes: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    if not readable:
        return True
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:[") and target[len("socket:[") : -1] in inodes:
                return True
    return False


def _two_free_ports() -> tuple[int, int]:
    first, second = free_port(), free_port()
    while second == first:
        second = free_port()
    return first, second


def _poll(proc: subprocess.Popen[bytes]) -> int | None:
    """`proc.poll()`; a process seen dead leaves the registry of live children."""
    code = proc.poll()
    if code is not None:
        with contextlib.suppress(ValueError):
            _LIVE.remove(proc)
    return code


async def _reaped(proc: subprocess.Popen[bytes]) -> int:
    """Wait, without blocking the event loop, until `proc` has exited; return its exit status."""
    # A Popen's exit is not an awaitable event (and SIGCHLD belongs to asyncio's child watcher): poll.
    while (code := _poll(proc)) is None:  # noqa: ASYNC110
        await asyncio.sleep(_POLL_SECS)
    return code


def stop_all(grace: float = 5.0) -> None:
    """Last resort (interpreter exit, Ctrl-C): SIGTERM every child still running, SIGKILL past `grace`."""
    live = [proc for proc in _LIVE if _poll(proc) is None]
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        _poll(proc)


atexit.register(stop_all)
