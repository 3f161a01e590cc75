"""Real QueueFlow processes for end-to-end tests: `queueflow serve` on free ports, logs to a file."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp

from shared.pgembed import free_port

__all__ = ["ServiceProcess", "free_port"]

REPO = Path(__file__).resolve().parents[2]
# Modes whose process serves the REST API; the others answer /ready on the metrics port only.
API_MODES = ("all", "api")


class ServiceProcess:
    """`python -m services.cli serve --mode MODE` bound to 127.0.0.1 on two free ports.

    Create it, then `await proc.start()`, which returns once `/ready` answers 200. Output
    (stdout and stderr) goes to `log_path`; `log_text()` reads it.
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
    ) -> None:
        self.mode = mode
        self.cwd = Path(cwd)
        self.api_port = free_port()
        self.metrics_port = free_port()
        while self.metrics_port == self.api_port:
            self.metrics_port = free_port()
        # extra_args come last so that a test can override any flag set here (argparse: last wins).
        self.argv = [
            sys.executable,
            "-m",
            "services.cli",
            "serve",
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
        ]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        directory = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="qf-proc-"))
        self.log_path = directory / f"queueflow-{mode}-{self.api_port}.log"
        self._proc: asyncio.subprocess.Process | None = None

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
    def started(self) -> bool:
        return self._proc is not None

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has exited (and been waited for), else None."""
        return None if self._proc is None else self._proc.returncode

    @property
    def _process(self) -> asyncio.subprocess.Process:
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

    async def start(self, ready_within: float = 30.0) -> ServiceProcess:
        """Launch the process and return once its /ready endpoint answers 200."""
        if self._proc is not None:
            raise RuntimeError("the process was already started")
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
            )
        finally:
            os.close(log_fd)  # the child has its own copy
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ready_within
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while True:
                if self._proc.returncode is not None:
                    raise RuntimeError(
                        f"QueueFlow ({self.mode}) exited with {self._proc.returncode} before it was ready\n"
                        + self.describe()
                    )
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(self.ready_url) as response:
                        if response.status == 200:
                            return self
                if loop.time() > deadline:
                    await self.kill()
                    raise RuntimeError(
                        f"QueueFlow ({self.mode}) was not ready within {ready_within}s at {self.ready_url}\n"
                        + self.describe()
                    )
                await asyncio.sleep(0.05)

    async def wait(self, within: float = 30.0) -> int:
        """Wait for the process to exit on its own; return its exit status."""
        async with asyncio.timeout(within):
            return await self._process.wait()

    async def terminate(self, grace: float = 30.0) -> int:
        """SIGTERM, then wait for a graceful exit; past `grace`, SIGKILL and raise AssertionError."""
        proc = self._process
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # exited, not yet reaped
                proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await proc.wait()
            except TimeoutError:
                await self.kill()
                raise AssertionError(
                    f"QueueFlow ({self.mode}) ignored SIGTERM for {grace}s and was killed\n" + self.describe()
                ) from None
        assert proc.returncode is not None
        return proc.returncode

    async def kill(self) -> int:
        """SIGKILL (no graceful shutdown, like a crash); return the exit status once reaped."""
        proc = self._process
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        return await proc.wait()
