"""How bench.peers builds upstream's Rust server and bench.compare leaves it out when it could not
be built: no cargo run, no PostgreSQL (the binary is a stand-in script that prints a version)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from bench import compare, peers
from bench.peers import install


@pytest.fixture
def rust_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """bench/peers/rust moved to a temporary folder (install.py holds its own names for it)."""
    root = tmp_path / "rust"
    for module in (peers, install):
        monkeypatch.setattr(module, "RUST_ROOT", root)
        monkeypatch.setattr(module, "RUST_SERVER_NOTE", root / "not-built.txt")
    monkeypatch.setattr(peers, "RUST_SERVER", root / "bin" / "queueflow")
    return root


def fake_binary(root: Path, version: str) -> Path:
    binary = root / "bin" / "queueflow"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(f"#!/bin/sh\necho queueflow {version}\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def test_without_cargo_the_install_leaves_a_note_and_compare_skips_the_rust_server_with_it(
    rust_root: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(install, "_cargo", lambda: None)
    install.install_rust_server(force=False)  # not an error: the other peers still install
    note = (rust_root / "not-built.txt").read_text()
    assert "cargo is not on PATH" in note
    systems, binary, skipped = compare.with_rust_server([compare.QF, compare.UPSTREAM, "pg-boss"])
    assert systems == [compare.QF, "pg-boss"]
    assert binary is None
    assert skipped == {compare.UPSTREAM: note.strip()}


def test_a_binary_at_another_version_is_not_measured(rust_root: Path):
    fake_binary(rust_root, "0.5.9")
    with pytest.raises(FileNotFoundError, match="make bench-peers"):
        peers.rust_server()


def test_a_built_rust_server_is_measured_and_not_rebuilt(rust_root: Path, monkeypatch: pytest.MonkeyPatch):
    binary = fake_binary(rust_root, peers.RUST_SERVER_VERSION)
    ran: list[list[str]] = []
    monkeypatch.setattr(install, "_build", lambda argv: ran.append(argv) or 0)
    install.install_rust_server(force=False)
    assert ran == []  # cached: cargo is not called again
    systems, found, skipped = compare.with_rust_server([compare.UPSTREAM, compare.QF])
    assert (systems, found, skipped) == ([compare.UPSTREAM, compare.QF], binary, {})


def test_the_build_is_cargo_install_of_the_pinned_crate_into_the_gitignored_root(
    rust_root: Path, monkeypatch: pytest.MonkeyPatch
):
    ran: list[list[str]] = []
    monkeypatch.setattr(install, "_cargo", lambda: "/usr/bin/cargo")
    monkeypatch.setattr(install, "_build", lambda argv: ran.append(argv) or 101)
    install.install_rust_server(force=False)
    (argv,) = ran
    assert argv[:3] == ["/usr/bin/cargo", "install", "queueflow"]
    assert argv[argv.index("--version") + 1] == peers.RUST_SERVER_VERSION
    assert {"--locked", "--ignore-rust-version"} <= set(argv)
    assert argv[argv.index("--root") + 1] == str(rust_root)
    assert "exited with 101" in (rust_root / "not-built.txt").read_text()
