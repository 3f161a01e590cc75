"""`python -m bench.peers.install`: install the peers that `python -m bench.compare` measures.

1. `npm ci` in bench/peers: graphile-worker and pg-boss at the versions package-lock.json pins.
   When the Node on PATH is older than 22.18 (v20 on this machine), the lockfile's optional
   dependency `node` (the npm registry's Node 22 package) is installed too and the JS peers run on
   node_modules/node/bin/node; otherwise it is omitted and the system Node runs them.
2. A venv at bench/peers/.venv, from the interpreter running this script (the same Python that runs
   QueueFlow), with requirements-pgqueuer.txt: PgQueuer and every dependency, pinned.

Each step is skipped when its inputs have not changed since it last succeeded (a stamp file holds
a digest of the lockfile or requirements file). `--force` redoes both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import venv
from pathlib import Path

from bench.peers import (
    BUNDLED_NODE,
    NODE_MODULES,
    PEERS_DIR,
    PGQUEUER_REQUIREMENTS,
    VENV,
    VENV_PYTHON,
    node_binary,
    node_version,
    system_node,
)

NPM_STAMP = NODE_MODULES / ".queueflow-installed"
VENV_STAMP = VENV / ".queueflow-installed"


def _digest(*paths: Path, extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def _run(argv: list[str], cwd: Path) -> None:
    print(f"[bench.peers] {' '.join(argv)}", file=sys.stderr, flush=True)
    subprocess.run(argv, cwd=cwd, check=True)


def install_npm(force: bool) -> None:
    bundled = system_node() is None
    digest = _digest(PEERS_DIR / "package.json", PEERS_DIR / "package-lock.json", extra=f"bundled={bundled}")
    if not force and NPM_STAMP.is_file() and NPM_STAMP.read_text() == digest:
        return
    argv = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    if not bundled:
        argv.append("--omit=optional")  # the system Node is new enough: no Node 22 download
    _run(argv, PEERS_DIR)
    if bundled:
        # The `node` package fetches its platform binary from its own preinstall script; an
        # optional dependency whose script fails is skipped silently, so check the result.
        version = node_version(BUNDLED_NODE)
        if version is None or version[0] != 22:
            raise SystemExit(f"[bench.peers] {BUNDLED_NODE} is missing or not Node 22 after npm ci")
    NPM_STAMP.write_text(digest)


def install_venv(force: bool) -> None:
    digest = _digest(PGQUEUER_REQUIREMENTS, extra=sys.version)
    if not force and VENV_STAMP.is_file() and VENV_STAMP.read_text() == digest:
        return
    print(f"[bench.peers] creating {VENV} ({sys.executable})", file=sys.stderr, flush=True)
    venv.EnvBuilder(clear=True, with_pip=True).create(VENV)
    pip = [str(VENV_PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, "-r", str(PGQUEUER_REQUIREMENTS)], PEERS_DIR)
    VENV_STAMP.write_text(digest)


def installed_versions() -> dict[str, str]:
    """What is installed now: the Node that will run the JS peers, each peer's version."""
    out: dict[str, str] = {}
    node = node_binary()
    out["node"] = f"{'.'.join(map(str, node_version(node) or ()))} ({node})"
    for name in ("graphile-worker", "pg-boss"):
        out[name] = json.loads((NODE_MODULES / name / "package.json").read_text())["version"]
    out["pgqueuer"] = subprocess.run(
        [str(VENV_PYTHON), "-c", "import importlib.metadata as m; print(m.version('pgqueuer'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers.install", description=__doc__)
    p.add_argument("--force", action="store_true", help="reinstall even when nothing changed")
    args = p.parse_args(argv)
    install_npm(args.force)
    install_venv(args.force)
    for name, version in installed_versions().items():
        print(f"[bench.peers] {name}: {version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
