"""The vendored npm files are exactly what the pinned package contains, with its licence and version.

The byte-for-byte check fetches the pinned tarball with `npm pack` (the npm registry is reachable
wherever the suite runs: the TypeScript SDK's tests install from it too), checks it against the
lockfile's integrity hash, and compares every vendored file with the tarball's copy.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from services.api.console import HERE

VENDOR = HERE / "vendor"
PACKAGE = json.loads((HERE / "package.json").read_text())
LOCK = json.loads((HERE / "package-lock.json").read_text())


def pinned() -> list[tuple[str, str, list[str]]]:
    """(package, version, files to vendor) for each package of package.json's "vendor" table."""
    out = []
    for name, files in PACKAGE["vendor"].items():
        version = PACKAGE["dependencies"][name]
        out.append((name, version, files))
    return out


def test_every_vendored_package_is_pinned_exactly_and_locked_at_that_version():
    for name, version, _ in pinned():
        assert version.count(".") == 2 and version[0].isdigit(), f"{name}: {version} is not an exact version"
        locked = LOCK["packages"][f"node_modules/{name}"]
        assert locked["version"] == version
        assert locked["integrity"].startswith("sha512-")


def test_vendored_files_are_the_listed_ones_with_licence_and_recorded_version():
    for name, version, files in pinned():
        folder = VENDOR / name
        assert sorted(p.name for p in folder.iterdir()) == sorted(files)
        assert "LICENSE" in files
        licence = (folder / "LICENSE").read_text()
        assert len(licence) > 500 and "License" in licence
        recorded = json.loads((folder / "package.json").read_text())
        assert (recorded["name"], recorded["version"]) == (name, version)
        # Only packages whose licence allows redistribution with the notice kept.
        assert recorded["license"] in {"Apache-2.0", "MIT", "BSD-2-Clause", "BSD-3-Clause", "ISC"}
    assert sorted(p.name for p in VENDOR.iterdir()) == sorted(PACKAGE["vendor"])


@pytest.mark.timeout(300)
def test_vendored_files_are_byte_identical_to_the_pinned_npm_package(tmp_path: Path):
    npm = shutil.which("npm")
    assert npm, "npm is needed to fetch the pinned package (the SDK tests need it too)"
    for name, version, files in pinned():
        done = subprocess.run(
            [
                npm,
                "pack",
                f"{name}@{version}",
                "--pack-destination",
                str(tmp_path),
                "--json",
                "--ignore-scripts",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        tarball = tmp_path / json.loads(done.stdout)[0]["filename"]
        digest = base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
        assert f"sha512-{digest}" == LOCK["packages"][f"node_modules/{name}"]["integrity"]
        with tarfile.open(tarball) as archive:
            for file in files:
                member = archive.extractfile(f"package/{file}")
                assert member is not None, f"{name}@{version} has no {file}"
                assert member.read() == (VENDOR / name / file).read_bytes(), f"vendor/{name}/{file} differs"
