"""Helpers for the offline checks of deploy/ (Dockerfile, Kubernetes manifests).

Imported by conftest.py and the test modules in this directory (conftest.py puts the directory
on sys.path, so this works in any pytest import mode). The name is unique on purpose: several
directories of the suite have a conftest.py, so `from conftest import ...` would be ambiguous.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
OVERLAYS_DIR = K8S / "overlays"
SECRET_EXAMPLE = K8S / "secret.example.yaml"
SCHEMAS = Path(__file__).resolve().parent / "schemas"

# The Kubernetes release whose JSON schemas the manifests are validated against (bundled in the
# pinned kubernetes-validate). Everything used here is stable in 1.25+; 1.30 is the floor we
# promise in docs/deployment.md.
KUBERNETES_VERSION = "1.30.0"
KUSTOMIZE_VERSION = "v5.7.1"  # keep in step with deploy/tools/install-kustomize.sh

# The Secret the manifests reference but never create (see deploy/k8s/secret.example.yaml).
EXTERNAL_SECRET = "queueflow"

POD_OWNERS = {"Deployment", "Job", "StatefulSet", "DaemonSet"}


def overlay_names() -> list[str]:
    return sorted(p.parent.name for p in OVERLAYS_DIR.glob("*/kustomization.yaml"))


def find_kustomize() -> str | None:
    """$KUSTOMIZE, then the repo-local install, then PATH."""
    explicit = os.environ.get("KUSTOMIZE")
    if explicit:
        return shutil.which(explicit)  # a path or a name on PATH; None if it is neither
    local = DEPLOY / "tools" / "bin" / "kustomize"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("kustomize")


@dataclass
class Rendered:
    """One overlay rendered by `kustomize build`: what `kubectl apply -k` would send."""

    name: str
    docs: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        for doc in self.of_kind(kind):
            if doc["metadata"]["name"] == name:
                return doc
        raise KeyError(f"{self.name}: no {kind} named {name!r}")

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            return self.get(kind, name)
        except KeyError:
            return None

    @property
    def namespace(self) -> str:
        (ns,) = self.of_kind("Namespace")
        return ns["metadata"]["name"]

    def deployments(self) -> list[dict[str, Any]]:
        return self.of_kind("Deployment")

    def pod_owners(self) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] in POD_OWNERS]


def kustomize_or_skip() -> str:
    found = find_kustomize()
    if found is None:
        message = (
            "kustomize is not installed: run `bash deploy/tools/install-kustomize.sh` "
            "(go install of sigs.k8s.io/kustomize/kustomize/v5, ~1 min cold)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run must install it before the tests", pytrace=False)
        pytest.skip(message)
    return found


def load_secret_example() -> dict[str, Any]:
    import yaml  # test-only dependency, imported lazily so collection never breaks on it

    docs = [d for d in yaml.safe_load_all(SECRET_EXAMPLE.read_text()) if d]
    assert len(docs) == 1, "secret.example.yaml holds exactly one Secret"
    return docs[0]


def render_overlay(kustomize: str, name: str) -> Rendered:
    import yaml

    proc = subprocess.run(
        [kustomize, "build", str(OVERLAYS_DIR / name)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"kustomize build overlays/{name} failed:\n{proc.stderr}", pytrace=False)
    return Rendered(name, [d for d in yaml.safe_load_all(proc.stdout) if d])


# --- pod templates ---------------------------------------------------------------------------


def pod_spec(owner: dict[str, Any]) -> dict[str, Any]:
    return owner["spec"]["template"]["spec"]


def containers(owner: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = pod_spec(owner)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def component(doc: dict[str, Any]) -> str:
    return doc["metadata"]["labels"]["app.kubernetes.io/component"]


def container_env(rendered: Rendered, container: dict[str, Any], secret: dict[str, Any]) -> dict[str, str]:
    """The environment the container would see, with Secret values taken from the example."""
    secret_data: dict[str, str] = secret.get("stringData", {})
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(rendered.get("ConfigMap", source["configMapRef"]["name"]).get("data", {}))
        elif "secretRef" in source:
            assert source["secretRef"]["name"] == EXTERNAL_SECRET
            env.update(secret_data)
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        ref = item.get("valueFrom", {})
        if "secretKeyRef" in ref:
            key_ref = ref["secretKeyRef"]
            assert key_ref["name"] == EXTERNAL_SECRET, key_ref
            if key_ref["key"] in secret_data:
                env[item["name"]] = secret_data[key_ref["key"]]
            else:
                assert key_ref.get("optional"), f"{item['name']}: required key {key_ref['key']} missing"
        elif "configMapKeyRef" in ref:
            key_ref = ref["configMapKeyRef"]
            env[item["name"]] = rendered.get("ConfigMap", key_ref["name"])["data"][key_ref["key"]]
    return env


def env_names(rendered: Rendered, container: dict[str, Any]) -> set[str]:
    """Every variable name a container is given, including the keys an envFrom pulls in."""
    names = {item["name"] for item in container.get("env", [])}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            names |= set(rendered.get("ConfigMap", source["configMapRef"]["name"]).get("data", {}))
        else:
            raise AssertionError(f"envFrom {source}: only ConfigMaps (secrets go key by key)")
    return names


# --- the server's own configuration code ------------------------------------------------------


def serve_option_parser() -> argparse.ArgumentParser:
    """`queueflow serve`'s options, straight from shared.config (exists from day one)."""
    from shared.config import add_serve_arguments

    parser = argparse.ArgumentParser(prog="queueflow serve", exit_on_error=False)
    add_serve_arguments(parser)
    return parser


def known_env_names() -> set[str]:
    from shared.config import OPTIONS

    return {f.metadata["env"] for f in OPTIONS}


def cli_parser() -> argparse.ArgumentParser:
    """The real `queueflow` parser from services/cli/__init__.py."""
    from services.cli import build_parser

    return build_parser()


def parse_cli(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parse_args that reports instead of exiting."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(
            f"`queueflow {' '.join(argv)}` is not a valid invocation (exit {exc.code})"
        ) from None
    except argparse.ArgumentError as exc:
        raise AssertionError(f"`queueflow {' '.join(argv)}`: {exc}") from None


def invocation(container: dict[str, Any]) -> list[str]:
    """The argv after the `queueflow` entrypoint (the image's ENTRYPOINT unless overridden)."""
    command = container.get("command")
    if command is not None:
        assert command == ["queueflow"], f"command {command}: leave the image's ENTRYPOINT (queueflow)"
    return list(container.get("args", []))
