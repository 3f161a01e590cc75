"""`python -m bench.peers.install`: install the peers that `python -m bench.compare` measures.

1. `npm ci` in bench/peers: graphile-worker and pg-boss at the versions package-lock.json pins.
   When the Node on PATH is older than 22.18 (v20 on this machine), the lockfile's optional
   dependency `node` (the npm registry's Node 22 package) is installed too and the JS peers run on
   node_modules/node/bin/node; otherwise it is omitted and the system Node runs them.
2. A venv at bench/peers/.venv, from the interpreter running this script (the same Python that runs
   QueueFlow), with requirements-pgqueuer.txt: PgQueuer and every dependency, pinned.
3. Upstream's Rust server: `cargo install queueflow --version 0.6.0 --locked --ignore-rust-version
   --root bench/peers/rust` (the crate asks for Rust 1.96; --ignore-rust-version lets an older
   toolchain try, and 1.95 builds it). The first build compiles a whole server (several minutes on
   two cores); cargo keeps its work in bench/peers/rust/target, so a failed build resumes, and the
   folder is removed once the binary is installed. A machine without cargo, or a build that fails,
   is not an error: the reason goes to bench/peers/rust/not-built.txt and bench.compare skips the
   server with that note.

Each step is skipped when its inputs have not changed since it last succeeded (a stamp file holds
a digest of the lockfile or requirements file; the Rust server, when its binary answers
`--version` with the pinned version). `--force` redoes all three.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from bench.peers import (
    BUNDLED_NODE,
    NODE_MODULES,
    PEERS_DIR,
    PGQUEUER_REQUIREMENTS,
    RUST_ROOT,
    RUST_SERVER_CRATE,
    RUST_SERVER_NOTE,
    RUST_SERVER_VERSION,
    VENV,
    VENV_PYTHON,
    node_binary,
    node_version,
    rust_server,
    rust_server_version,
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


def install_rust_server(force: bool) -> None:
    """Build upstream's Rust server from crates.io, or leave the reason it could not be built."""
    if not force and rust_server_version() == RUST_SERVER_VERSION:
        return
    RUST_ROOT.mkdir(parents=True, exist_ok=True)
    RUST_SERVER_NOTE.unlink(missing_ok=True)
    name = f"upstream's Rust server ({RUST_SERVER_CRATE} {RUST_SERVER_VERSION})"
    cargo = _cargo()
    if cargo is None:
        _not_built(f"{name} was not built: cargo is not on PATH (install Rust from https://rustup.rs)")
        return
    target = RUST_ROOT / "target"
    argv = [
        cargo,
        "install",
        RUST_SERVER_CRATE,
        "--version",
        RUST_SERVER_VERSION,
        "--locked",
        "--ignore-rust-version",  # it asks for Rust 1.96; older toolchains build it too (1.95 does)
        "--root",
        str(RUST_ROOT),
        "--target-dir",
        str(target),  # kept across a failed build, so the next attempt resumes
    ]
    if force:
        argv.append("--force")
    print(
        f"[bench.peers] building {name}: the first build takes several minutes", file=sys.stderr, flush=True
    )
    print(f"[bench.peers] {' '.join(argv)}", file=sys.stderr, flush=True)
    try:
        code = _build(argv)
    except OSError as exc:
        _not_built(f"{name} was not built: {exc}")
        return
    if code != 0 or rust_server_version() != RUST_SERVER_VERSION:
        _not_built(f"{name} was not built: `cargo install` exited with {code} (its output is above)")
        return
    shutil.rmtree(target, ignore_errors=True)  # a gigabyte of build products the binary no longer needs


def _cargo() -> str | None:
    return shutil.which("cargo")


def _build(argv: list[str]) -> int:
    return subprocess.run(argv, cwd=RUST_ROOT).returncode


def _not_built(why: str) -> None:
    RUST_SERVER_NOTE.write_text(why + "\n")
    print(f"[bench.peers] {why}; bench-compare skips it", file=sys.stderr, flush=True)


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
    try:
        out["queueflow (Rust)"] = f"{RUST_SERVER_VERSION} ({rust_server()})"
    except FileNotFoundError as exc:
        out["queueflow (Rust)"] = f"not available: {exc}"
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers.install", description=__doc__)
    p.add_argument("--force", action="store_true", help="reinstall even when nothing changed")
    args = p.parse_args(argv)
    install_npm(args.force)
    install_venv(args.force)
    install_rust_server(args.force)
    for name, version in installed_versions().items():
        print(f"[bench.peers] {name}: {version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
