"""Building each SDK once per test session, and the command that runs its conformance runner.

Builds are serialised with a lock file, so pytest-xdist workers share one build per language.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SDKS = REPO / "sdks"
LANGUAGES = ["python", "typescript", "go", "rust"]

# language -> (working directory, build commands, runner argv, extra environment)
_SPECS: dict[str, tuple[Path, list[list[str]], list[str], dict[str, str]]] = {
    "python": (
        SDKS / "python",
        [],
        [sys.executable, str(SDKS / "python" / "conformance" / "runner.py")],
        {"PYTHONPATH": str(SDKS / "python" / "src")},
    ),
    "typescript": (
        SDKS / "typescript",
        [["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], ["npm", "run", "build"]],
        ["node", str(SDKS / "typescript" / "dist" / "conformance" / "runner.js")],
        {},
    ),
    "go": (
        SDKS / "go",
        [["go", "build", "-o", "bin/conformance", "./cmd/conformance"]],
        [str(SDKS / "go" / "bin" / "conformance")],
        {},
    ),
    "rust": (
        SDKS / "rust",
        [["cargo", "build", "--quiet", "--example", "conformance"]],
        [str(SDKS / "rust" / "target" / "debug" / "examples" / "conformance")],
        {},
    ),
}


def runner_command(language: str) -> tuple[list[str], dict[str, str]]:
    _, _, argv, env = _SPECS[language]
    return argv, env


def build(language: str) -> None:
    """Build the SDK (idempotent; the toolchains cache their own work). Raises with the tool's
    output when a build fails."""
    cwd, commands, _, _ = _SPECS[language]
    if not commands or language in _built:
        return
    with locked(language):  # the second xdist worker waits, then finds nothing to do
        for command in commands:
            run_build_step(language, command, cwd)
    _built.add(language)


@contextlib.contextmanager
def locked(language: str) -> Iterator[None]:
    """Hold the language's build lock (any test that writes into an SDK's build output, across
    pytest-xdist workers)."""
    lock_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"queueflow-build-sdk-{language}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run_build_step(language: str, command: Sequence[str], cwd: Path) -> None:
    """Run one build command; raises with the tool's output when it fails."""
    done = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(
            f"{language} build failed: {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


_built: set[str] = set()
