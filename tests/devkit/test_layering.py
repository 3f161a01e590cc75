"""devkit is development tooling: the runtime packages must work without it (the wheel and the
container image ship only shared/ and services/)."""

from __future__ import annotations

import ast
from pathlib import Path

from devkit import REPO

RUNTIME_PACKAGES = ("shared", "services")


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_no_runtime_module_imports_devkit() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for package in RUNTIME_PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if any(name == "devkit" or name.startswith("devkit.") for name in _imported_modules(path))
    ]
    assert offenders == []
