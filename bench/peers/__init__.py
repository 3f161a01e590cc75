"""The peer job queues that `python -m bench.compare` runs beside QueueFlow, and where they live.

- graphile-worker and pg-boss: npm packages pinned in package.json / package-lock.json, installed
  by `npm ci` into bench/peers/node_modules; their workloads are graphile.mjs and pgboss.mjs.
- Node 22: both need it (graphile-worker 0.18 asks for >= 22.18, pg-boss 12 for >= 22.12). A system
  Node that new is used as it is; otherwise the npm registry's `node` package (an optional
  dependency in package.json) brings one, under node_modules/node/bin/node.
- PgQueuer: a PyPI package, installed into its own venv, bench/peers/.venv, from
  requirements-pgqueuer.txt; its workload is pgqueuer_peer.py.
- Upstream's Rust server: crates.io `queueflow` RUST_SERVER_VERSION, built from source by `cargo
  install` into bench/peers/rust (gitignored; nothing of it is committed). It speaks the same REST
  API and worker protocol as QueueFlow, so bench.compare measures it with QueueFlow's own scenarios
  (bench/scenarios), its binary in place of `queueflow serve`. Where it cannot be built, the
  install leaves the reason in RUST_SERVER_NOTE and bench.compare skips it, saying why.

`python -m bench.peers.install` (or `make bench-peers`) installs all four.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

PEERS_DIR = Path(__file__).resolve().parent
NODE_MODULES = PEERS_DIR / "node_modules"
BUNDLED_NODE = NODE_MODULES / "node" / "bin" / "node"
VENV = PEERS_DIR / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
PGQUEUER_REQUIREMENTS = PEERS_DIR / "requirements-pgqueuer.txt"
MIN_NODE = (22, 18, 0)  # the higher of graphile-worker's and pg-boss's engines.node
RUST_SERVER_CRATE, RUST_SERVER_VERSION = "queueflow", "0.6.0"
RUST_ROOT = PEERS_DIR / "rust"  # cargo install --root: bin/queueflow, and .crates.toml
RUST_SERVER = RUST_ROOT / "bin" / "queueflow"
RUST_SERVER_NOTE = RUST_ROOT / "not-built.txt"  # why the last install could not build it


def node_version(node: str | Path) -> tuple[int, ...] | None:
    """`node --version` as a tuple, or None when it cannot be run."""
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.(\d+)\.(\d+)", out.strip())
    return tuple(int(x) for x in m.groups()) if m else None


def system_node() -> str | None:
    """The Node on PATH when it is new enough for both packages, else None."""
    found = shutil.which("node")
    if found is None:
        return None
    version = node_version(found)
    return found if version is not None and version >= MIN_NODE else None


def node_binary() -> Path:
    """The Node that runs the JS peers: the system one if new enough, else the bundled Node 22."""
    found = system_node()
    if found is not None:
        return Path(found)
    if BUNDLED_NODE.is_file():
        return BUNDLED_NODE
    raise FileNotFoundError(
        f"no Node >= {'.'.join(map(str, MIN_NODE))}: run `make bench-peers` (python -m bench.peers.install)"
    )


# Each system's workload program; bench.compare adds the arguments (see its docstring).
PROGRAMS = {
    "graphile-worker": PEERS_DIR / "graphile.mjs",
    "pg-boss": PEERS_DIR / "pgboss.mjs",
    "PgQueuer": PEERS_DIR / "pgqueuer_peer.py",
}


def command(system: str) -> list[str]:
    """argv prefix that runs `system`'s workload program."""
    program = PROGRAMS[system]
    if program.suffix == ".mjs":
        return [str(node_binary()), str(program)]
    if not VENV_PYTHON.is_file():
        raise FileNotFoundError(f"{VENV_PYTHON} is missing: run `make bench-peers`")
    return [str(VENV_PYTHON), str(program)]


def rust_server_version(binary: Path | None = None) -> str | None:
    """`queueflow --version`'s version number (of RUST_SERVER by default), or None when the binary
    cannot be run."""
    try:
        argv = [str(binary or RUST_SERVER), "--version"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else None


def rust_server() -> Path:
    """The upstream Rust server's binary at RUST_SERVER_VERSION; FileNotFoundError saying why
    not (the install's note when it tried and failed)."""
    if rust_server_version() == RUST_SERVER_VERSION:
        return RUST_SERVER
    why = f"{RUST_SERVER} is missing or not {RUST_SERVER_VERSION}: run `make bench-peers`"
    if RUST_SERVER_NOTE.is_file():
        why = RUST_SERVER_NOTE.read_text().strip().splitlines()[0]
    raise FileNotFoundError(why)
