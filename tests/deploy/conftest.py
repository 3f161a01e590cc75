"""Fixtures for the offline checks of deploy/ (Dockerfile, Kubernetes manifests, Helm chart).

Nothing here needs PostgreSQL, Docker or a cluster. The Kubernetes overlays are rendered with
the pinned kustomize that deploy/tools/install-kustomize.sh installs, the Helm chart with the
pinned Helm of deploy/tools/install-helm.sh (test_deploy_helm.py has its own fixtures); without
them those tests skip locally and fail under CI (CI=true), where `make tools` installs them first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from qf_deploy_helpers import (  # noqa: E402
    Rendered,
    kustomize_or_skip,
    load_secret_example,
    overlay_names,
    render_overlay,
)


@pytest.fixture(scope="session")
def kustomize_bin() -> str:
    return kustomize_or_skip()


@pytest.fixture(scope="session")
def rendered_overlays(kustomize_bin: str) -> dict[str, Rendered]:
    """Every overlay a user applies, rendered once per test process."""
    return {name: render_overlay(kustomize_bin, name) for name in overlay_names()}


@pytest.fixture(params=overlay_names())
def overlay(request: pytest.FixtureRequest, rendered_overlays: dict[str, Rendered]) -> Rendered:
    return rendered_overlays[request.param]


@pytest.fixture(scope="session")
def secret_example() -> dict[str, Any]:
    return load_secret_example()
