"""requirements.lock (`make lock`), which the image installs with --require-hashes: it pins every
dependency pyproject.toml declares and the build backend the image builds the project with, each
version exactly and every one with the hashes of its files, and each pin satisfies its declaration."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from qf_deploy_helpers import REPO

LOCK = REPO / "requirements.lock"
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Pin:
    line: str
    requirement: Requirement
    hashes: tuple[str, ...]

    @property
    def version(self) -> str:
        (spec,) = self.requirement.specifier
        return spec.version


def parse_lock(text: str) -> dict[str, Pin]:
    """Each entry of a pip requirements file with hashes: continuation lines joined, comments dropped."""
    entries, current = [], ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        current += line.removesuffix("\\").strip() + " "
        if not line.endswith("\\"):
            entries.append(current.strip())
            current = ""
    assert not current, "a dangling line continuation at the end of the lock"
    pins = {}
    for entry in entries:
        options = [w for w in entry.split() if w.startswith("--")]
        requirement = Requirement(entry.split(" --", 1)[0])
        assert all(HASH.fullmatch(o) for o in options), f"{entry[:80]}: only sha256 hashes may follow"
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{name} is pinned twice"
        pins[name] = Pin(entry, requirement, tuple(options))
    return pins


@pytest.fixture(scope="module")
def pins() -> dict[str, Pin]:
    return parse_lock(LOCK.read_text())


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def declared(pyproject: dict) -> list[Requirement]:
    """The server's runtime dependencies and its build backend: what the image installs."""
    return [
        Requirement(r) for r in pyproject["project"]["dependencies"] + pyproject["build-system"]["requires"]
    ]


def test_the_lock_is_made_by_make_lock() -> None:
    head = LOCK.read_text().splitlines()[:2]
    assert head[1].strip() == "#    make lock", head


def test_every_pin_is_one_exact_version_with_hashes(pins: dict[str, Pin]) -> None:
    assert len(pins) > 20  # aiohttp alone brings half a dozen
    for name, pin in pins.items():
        (spec,) = pin.requirement.specifier
        assert spec.operator == "==" and "*" not in spec.version, f"{name}: {pin.requirement}"
        assert pin.hashes, f"{name} has no hash: pip --require-hashes would refuse the lock"
        assert not pin.requirement.extras and pin.requirement.url is None, f"{name}: {pin.requirement}"


def test_the_lock_pins_every_declared_dependency_within_its_range(
    pins: dict[str, Pin], pyproject: dict
) -> None:
    for requirement in declared(pyproject):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"pyproject.toml declares {requirement} and the lock lacks it: run `make lock`"
        pin = pins[name]
        assert requirement.specifier.contains(pin.version, prereleases=True), (
            f"the lock pins {name}=={pin.version}, outside pyproject.toml's {requirement}: run `make lock`"
        )


def test_a_platform_marker_is_kept_with_its_pin(pins: dict[str, Pin], pyproject: dict) -> None:
    """A dependency declared for some platforms only stays so in the lock (uvloop: not on Windows)."""
    marked = [r for r in declared(pyproject) if r.marker is not None]
    assert marked, "pyproject.toml declares uvloop for non-Windows platforms"
    for requirement in marked:
        pin = pins[canonicalize_name(requirement.name)]
        assert pin.requirement.marker is not None, f"{pin.requirement}: the marker was lost"
        for platform in ("linux", "darwin", "win32"):
            env = {"sys_platform": platform, "python_version": "3.11", "python_full_version": "3.11.2"}
            assert pin.requirement.marker.evaluate(env) == requirement.marker.evaluate(env), platform


def test_the_lock_installs_on_the_images_python(pins: dict[str, Pin]) -> None:
    """Every pin applies on Linux with the image's Python 3.11 unless its marker says otherwise."""
    linux = {"sys_platform": "linux", "python_version": "3.11", "python_full_version": "3.11.2"}
    applying = {
        n for n, p in pins.items() if p.requirement.marker is None or p.requirement.marker.evaluate(linux)
    }
    assert {"aiohttp", "asyncpg", "uvloop", "setuptools"} <= applying
