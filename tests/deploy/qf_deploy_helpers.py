"""Helpers for the offline checks of deploy/ (Dockerfile, Kubernetes manifests, Helm chart).

The `check_*` functions hold the checks that the kustomize overlays (test_deploy_k8s.py) and the
Helm chart (test_deploy_helm.py) share: each takes one rendered set of objects and raises
AssertionError on the first problem.

Imported by conftest.py and the test modules in this directory (conftest.py puts the directory
on sys.path, so this works in any pytest import mode). The name is unique on purpose: several
directories of the suite have a conftest.py, so `from conftest import ...` would be ambiguous.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
# Where `make tools` (deploy/tools/install-*.sh) puts kustomize, Helm and Toxiproxy: git-ignored,
# so a fresh clone has no such folder until the tools are installed.
TOOLS_BIN = DEPLOY / "tools" / "bin"
K8S = DEPLOY / "k8s"
OVERLAYS_DIR = K8S / "overlays"
SECRET_EXAMPLE = K8S / "secret.example.yaml"
HELM_CHART = DEPLOY / "helm" / "queueflow"
SCHEMAS = Path(__file__).resolve().parent / "schemas"

# The Kubernetes release whose JSON schemas the manifests are validated against (bundled in the
# pinned kubernetes-validate). Everything used here is stable in 1.25+; 1.30 is the floor we
# promise in docs/deployment.md.
KUBERNETES_VERSION = "1.30.0"
KUSTOMIZE_VERSION = "v5.7.1"  # keep in step with deploy/tools/install-kustomize.sh
HELM_VERSION = "v3.19.5"  # keep in step with deploy/tools/install-helm.sh

# The Secret the manifests reference but never create (see deploy/k8s/secret.example.yaml).
EXTERNAL_SECRET = "queueflow"

POD_OWNERS = {"Deployment", "Job", "StatefulSet", "DaemonSet"}
UID = 10001
# Kinds that are not part of Kubernetes itself, each with a local schema in tests/deploy/schemas.
CRD_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json"}


def overlay_names() -> list[str]:
    return sorted(p.parent.name for p in OVERLAYS_DIR.glob("*/kustomization.yaml"))


def find_tool(name: str, env_var: str) -> str | None:
    """$<env_var>, then the repo-local install (deploy/tools/bin), then PATH."""
    explicit = os.environ.get(env_var)
    if explicit:
        return shutil.which(explicit)  # a path or a name on PATH; None if it is neither
    local = TOOLS_BIN / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def find_kustomize() -> str | None:
    return find_tool("kustomize", "KUSTOMIZE")


def tool_or_skip(name: str, env_var: str, how: str) -> str:
    """The tool's path; without it, skip locally and fail under CI (where `make tools` ran)."""
    found = find_tool(name, env_var)
    if found is None:
        message = f"{name} is not installed: run `bash deploy/tools/install-{name}.sh` ({how})"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run must install it before the tests", pytrace=False)
        pytest.skip(message)
    return found


@dataclass
class Rendered:
    """One overlay rendered by `kustomize build` (what `kubectl apply -k` would send), or the
    chart rendered by `helm template`. `external` holds objects the pods reference that the
    user creates beside the render (a Secret, a ConfigMap), for lookups only."""

    name: str
    docs: list[dict[str, Any]]
    external: list[dict[str, Any]] = field(default_factory=list)

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

    def lookup(self, kind: str, name: str) -> dict[str, Any]:
        """A rendered object, else an external one: what the cluster would resolve a reference to."""
        for doc in [*self.docs, *self.external]:
            if doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc
        raise AssertionError(f"{self.name}: a reference to {kind} {name!r}, which nothing creates")

    @property
    def namespace(self) -> str:
        (ns,) = self.of_kind("Namespace")
        return ns["metadata"]["name"]

    def component(self, name: str) -> list[dict[str, Any]]:
        """Every object labelled with this app.kubernetes.io/component."""
        return [
            d for d in self.docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == name
        ]

    def deployments(self) -> list[dict[str, Any]]:
        return self.of_kind("Deployment")

    def pod_owners(self) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] in POD_OWNERS]


def kustomize_or_skip() -> str:
    return tool_or_skip(
        "kustomize", "KUSTOMIZE", "go install of sigs.k8s.io/kustomize/kustomize/v5, ~1 min cold"
    )


def load_secret_example() -> dict[str, Any]:
    import yaml  # test-only dependency, imported lazily so collection never breaks on it

    docs = [d for d in yaml.safe_load_all(SECRET_EXAMPLE.read_text()) if d]
    assert len(docs) == 1, "secret.example.yaml holds exactly one Secret"
    return docs[0]


def filled_secret_example() -> dict[str, Any]:
    """The example Secret as a user fills it in: each REPLACE_ME replaced by a random-looking value
    long enough for a JWT secret (the server refuses the placeholder itself at start)."""
    example = load_secret_example()
    filler = "qf7Hq2xLw9Zr4Tn8Vb3Mk6Pd1Sg5Yc0J"  # 32 bytes
    data = {key: value.replace("REPLACE_ME", filler) for key, value in example["stringData"].items()}
    return {**example, "stringData": data}


def render_overlay(kustomize: str, name: str) -> Rendered:
    return render_kustomization(kustomize, OVERLAYS_DIR / name, name)


def render_kustomization(kustomize: str, directory: Path, name: str) -> Rendered:
    import yaml

    proc = subprocess.run(
        [kustomize, "build", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        shown = directory.relative_to(REPO) if directory.is_relative_to(REPO) else directory
        pytest.fail(f"kustomize build {shown} failed:\n{proc.stderr}", pytrace=False)
    return Rendered(name, [d for d in yaml.safe_load_all(proc.stdout) if d])


def helm_or_skip() -> str:
    return tool_or_skip("helm", "HELM", "go install of helm.sh/helm/v3, a few minutes cold")


def helm_template(
    helm: str,
    values: Iterable[Path] = (),
    sets: Iterable[str] = (),
    release: str = "queueflow",
    namespace: str = "queueflow",
) -> subprocess.CompletedProcess[str]:
    """`helm template` of deploy/helm/queueflow for the Kubernetes version the schemas are for."""
    argv = [helm, "template", release, str(HELM_CHART), "--namespace", namespace]
    argv += ["--kube-version", KUBERNETES_VERSION]
    for path in values:
        argv += ["--values", str(path)]
    for item in sets:
        argv += ["--set", item]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def render_chart(
    helm: str, name: str, values: Iterable[Path] = (), sets: Iterable[str] = (), **kw: str
) -> Rendered:
    import yaml

    proc = helm_template(helm, values, sets, **kw)
    if proc.returncode != 0:
        pytest.fail(f"helm template ({name}) failed:\n{proc.stderr}", pytrace=False)
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


def secret_data(secret: dict[str, Any]) -> dict[str, str]:
    decoded = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
    return {**decoded, **secret.get("stringData", {})}


def container_env(
    rendered: Rendered, container: dict[str, Any], secret: dict[str, Any] | None = None
) -> dict[str, str]:
    """The environment the container would see. Secrets and ConfigMaps come from the render or
    its external objects; `secret` (the example Secret) stands in for one the user creates."""

    def secret_values(name: str) -> dict[str, str]:
        if secret is not None and secret["metadata"]["name"] == name:
            return secret_data(secret)
        return secret_data(rendered.lookup("Secret", name))

    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(rendered.lookup("ConfigMap", source["configMapRef"]["name"]).get("data", {}))
        elif "secretRef" in source:
            env.update(secret_values(source["secretRef"]["name"]))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        ref = item.get("valueFrom", {})
        if "secretKeyRef" in ref:
            key_ref = ref["secretKeyRef"]
            values = secret_values(key_ref["name"])
            if key_ref["key"] in values:
                env[item["name"]] = values[key_ref["key"]]
            else:
                assert key_ref.get("optional"), f"{item['name']}: required key {key_ref['key']} missing"
        elif "configMapKeyRef" in ref:
            key_ref = ref["configMapKeyRef"]
            env[item["name"]] = rendered.lookup("ConfigMap", key_ref["name"])["data"][key_ref["key"]]
    return env


def env_names(rendered: Rendered, container: dict[str, Any]) -> set[str]:
    """Every variable name a container is given, including the keys an envFrom pulls in."""
    names = {item["name"] for item in container.get("env", [])}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            names |= set(rendered.lookup("ConfigMap", source["configMapRef"]["name"]).get("data", {}))
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


def sign_on_env_names() -> set[str]:
    """The api-only single sign-on settings (--oidc-* and --console-token-login), from shared.config."""
    from shared.config import OPTIONS

    return {
        f.metadata["env"]
        for f in OPTIONS
        if f.metadata["flag"].startswith("--oidc-") or f.metadata["flag"] == "--console-token-login"
    }


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


# --- checks shared by the kustomize overlays and the Helm chart -------------------------------


def schema_errors(doc: dict[str, Any]) -> str | None:
    """Strict validation against the Kubernetes JSON schemas (or a CRD's local schema)."""
    # Test-only dependencies (pyproject's `test` extra), imported here so that a missing one
    # fails these tests rather than the collection of the whole suite.
    import jsonschema
    import kubernetes_validate

    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SCHEMAS:
        schema = json.loads((SCHEMAS / CRD_SCHEMAS[key]).read_text())
        try:
            jsonschema.Draft202012Validator(schema).validate(doc)
        except jsonschema.ValidationError as err:
            return f"{'.'.join(map(str, err.path))}: {err.message}"
        return None
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        return f"{'.'.join(map(str, err.path))}: {err.message}"
    except kubernetes_validate.SchemaNotFoundError as err:
        return f"{err.message} (a CRD? add a schema to tests/deploy/schemas and CRD_SCHEMAS)"
    return None


def check_schemas(rendered: Rendered) -> None:
    errors = {f"{d['kind']}/{d['metadata']['name']}": schema_errors(d) for d in rendered.docs}
    assert {k: v for k, v in errors.items() if v} == {}, rendered.name


def serve_containers(rendered: Rendered) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for deployment in rendered.deployments():
        for container in containers(deployment):
            yield deployment, container


def settings_of(
    rendered: Rendered, owner: dict[str, Any], container: dict[str, Any], secret: dict[str, Any] | None = None
) -> Any:
    """The server's own Settings for this container: its serve flags plus its environment."""
    from shared.config import settings_from

    argv = invocation(container)
    serve_args = argv[1:] if argv[:1] == ["serve"] else []
    options = serve_option_parser().parse_args(serve_args)
    return settings_from(options, container_env(rendered, container, secret))


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def prestop_seconds(container: dict[str, Any]) -> int:
    pre_stop = container.get("lifecycle", {}).get("preStop")
    assert pre_stop, f"{container['name']}: no preStop hook"
    if "sleep" in pre_stop:
        return int(pre_stop["sleep"]["seconds"])
    command = pre_stop["exec"]["command"]
    assert command[0] in ("sleep", "/bin/sleep") and len(command) == 2, command
    return int(command[1])


def check_invocations(rendered: Rendered) -> None:
    """Every container runs `serve` or `migrate`, valid for `queueflow serve`'s own options and
    for the real `queueflow` parser, in the mode its component label names, never --dev."""
    from shared.config import MODES

    parser = cli_parser()
    for owner in rendered.pod_owners():
        for container in containers(owner):
            argv = invocation(container)
            assert argv and argv[0] in ("serve", "migrate"), argv
            if argv[0] == "serve":
                options = parse_cli(serve_option_parser(), argv[1:])
                assert options.mode in MODES
                assert not options.dev, "no --dev in a deployment"
            parsed = parse_cli(parser, argv)
            if getattr(parsed, "command", None) is not None:
                assert parsed.command == argv[0]
            if argv[0] == "serve":
                assert parsed.mode == component(owner)


def check_env_names(rendered: Rendered) -> None:
    known = known_env_names()
    for owner in rendered.pod_owners():
        for container in containers(owner):
            unknown = env_names(rendered, container) - known
            assert not unknown, f"{owner['metadata']['name']}: the server does not read {sorted(unknown)}"


def check_no_dev_mode(rendered: Rendered) -> None:
    for config_map in rendered.of_kind("ConfigMap"):
        assert config_map.get("data", {}).get("QUEUEFLOW_DEV", "false").lower() in (
            "",
            "0",
            "false",
            "no",
            "off",
        )
    for owner in rendered.pod_owners():
        for container in containers(owner):
            assert "--dev" not in invocation(container)
            for item in container.get("env", []):
                assert item["name"] != "QUEUEFLOW_DEV", "dev mode accepts any token"


def check_ports(rendered: Rendered, secret: dict[str, Any] | None = None) -> None:
    for deployment, container in serve_containers(rendered):
        settings = settings_of(rendered, deployment, container, secret)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        expected = {"metrics": settings.metrics_port}
        if settings.runs("api"):
            expected["http"] = settings.api_port
        assert ports == expected, deployment["metadata"]["name"]


def check_probes(rendered: Rendered) -> None:
    """/health and /ready: the api on its http port, the other modes on metrics."""
    for deployment, container in serve_containers(rendered):
        port = "http" if component(deployment) == "api" else "metrics"
        assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": port}
        assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": port}
        names = {p["name"] for p in container["ports"]}
        assert port in names
        live = container["livenessProbe"]
        # Liveness must not be stricter than readiness: a pod leaves the Service before it restarts.
        assert (
            live["periodSeconds"] * live["failureThreshold"]
            >= container["readinessProbe"]["periodSeconds"] * container["readinessProbe"]["failureThreshold"]
        )


def check_grace_periods(rendered: Rendered, secret: dict[str, Any] | None = None) -> None:
    for deployment, container in serve_containers(rendered):
        settings = settings_of(rendered, deployment, container, secret)
        grace = pod_spec(deployment)["terminationGracePeriodSeconds"]
        needed = prestop_seconds(container) + settings.shutdown_grace_secs + 5
        assert grace >= needed, f"{deployment['metadata']['name']}: {grace} s < {needed} s"
        if component(deployment) == "api":
            assert prestop_seconds(container) >= 5, "give load balancers time to drop the pod"


def check_pod_security(rendered: Rendered, preexisting_accounts: Iterable[str] = ()) -> None:
    """Restricted-profile pods: non-root uid 10001, read-only root fs with /tmp an emptyDir, no
    capabilities, no token. Every pod's ServiceAccount is rendered or named in
    `preexisting_accounts` (one that exists before the objects, e.g. "default")."""
    for owner in rendered.pod_owners():
        name = owner["metadata"]["name"]
        spec = pod_spec(owner)
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["enableServiceLinks"] is False, f"{name}: service links would clobber QUEUEFLOW_API_PORT"
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == UID and pod["runAsGroup"] == UID, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        tmp_volumes = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for container in containers(owner):
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True and sc.get("runAsUser", UID) == UID, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc.get("privileged", False) is False, name
            assert sc["capabilities"] == {"drop": ["ALL"]}, name
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert mounts.get("/tmp") in tmp_volumes, f"{name}: /tmp must be an emptyDir"
            assert "resources" in container and {"cpu", "memory"} <= set(container["resources"]["requests"])
            assert "memory" in container["resources"]["limits"], name
            assert container.get("imagePullPolicy") == "IfNotPresent"
    for account in rendered.of_kind("ServiceAccount"):
        assert account["automountServiceAccountToken"] is False
    service_accounts = {a["metadata"]["name"] for a in rendered.of_kind("ServiceAccount")}
    service_accounts |= set(preexisting_accounts)
    for owner in rendered.pod_owners():
        assert pod_spec(owner)["serviceAccountName"] in service_accounts, owner["metadata"]["name"]


def check_services(rendered: Rendered) -> None:
    """Each Service selects exactly one Deployment, through ports it has; every Deployment's
    metrics port has a Service; all ClusterIP."""
    for service in rendered.of_kind("Service"):
        selector = service["spec"]["selector"]
        matched = [
            d
            for d in rendered.deployments()
            if selector_matches(selector, d["spec"]["template"]["metadata"]["labels"])
        ]
        assert len(matched) == 1, f"Service {service['metadata']['name']} selects {len(matched)} Deployments"
        (deployment,) = matched
        port_names = {p["name"] for c in containers(deployment) for p in c.get("ports", [])}
        service_ports = {p["name"]: p for p in service["spec"]["ports"]}
        for port in service_ports.values():
            assert port["targetPort"] in port_names, port
        expected = {"http", "metrics"} if component(deployment) == "api" else {"metrics"}
        assert set(service_ports) == expected, service["metadata"]["name"]
        assert service["spec"].get("type", "ClusterIP") == "ClusterIP", "expose the API through an Ingress"
    covered = {component(s) for s in rendered.of_kind("Service")}
    assert covered == {component(d) for d in rendered.deployments()}, (
        "every Deployment's metrics get a Service"
    )


def check_deployment_selectors(rendered: Rendered) -> None:
    for deployment in rendered.deployments():
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector_matches(selector, deployment["spec"]["template"]["metadata"]["labels"])
        assert "app.kubernetes.io/component" in selector
        others = [
            d
            for d in rendered.deployments()
            if d is not deployment and selector_matches(selector, d["spec"]["template"]["metadata"]["labels"])
        ]
        assert not others, "Deployment selectors must not overlap"


def check_pools(rendered: Rendered, secret: dict[str, Any] | None = None) -> None:
    """Every in-process handler can reach the database at once, plus two for the claim loop and
    the probes; every advancer consumer and timer lane can hold a connection for its transaction, plus two for
    /health, /ready and /metrics (probes time out after 2 s waiting for one)."""
    from services.workflow.advancer import CONSUMERS
    from services.workflow.timers import LANES

    for deployment, container in serve_containers(rendered):
        settings = settings_of(rendered, deployment, container, secret)
        name = deployment["metadata"]["name"]
        assert settings.min_db_connections <= settings.max_db_connections, name
        if settings.runs("worker"):
            handlers = settings.workers * len(settings.worker_queues)
            assert settings.max_db_connections >= handlers + 2, name
        if settings.runs("workflow"):
            assert settings.max_db_connections >= CONSUMERS + LANES + 2, name


def hpa_for(rendered: Rendered, deployment: dict[str, Any]) -> dict[str, Any] | None:
    for hpa in rendered.of_kind("HorizontalPodAutoscaler"):
        if hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]:
            return hpa
    return None


def max_replicas(rendered: Rendered, deployment: dict[str, Any]) -> int:
    hpa = hpa_for(rendered, deployment)
    return int(hpa["spec"]["maxReplicas"] if hpa else deployment["spec"].get("replicas", 1))


def min_replicas(rendered: Rendered, deployment: dict[str, Any]) -> int:
    hpa = hpa_for(rendered, deployment)
    return int(hpa["spec"]["minReplicas"] if hpa else deployment["spec"].get("replicas", 1))


def surge(deployment: dict[str, Any], replicas: int) -> int:
    rolling = deployment["spec"].get("strategy", {}).get("rollingUpdate", {})
    value = rolling.get("maxSurge", "25%")
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(replicas * int(value[:-1]) / 100)
    return int(value)


def worst_case_connections(rendered: Rendered, secret: dict[str, Any] | None = None) -> int:
    """Every Deployment at its largest size plus surge, every pool full, one LISTEN connection
    per process, plus the migrations Job's one connection (docs/deployment.md, "Sizing")."""
    total = 0
    for deployment, container in serve_containers(rendered):
        settings = settings_of(rendered, deployment, container, secret)
        pods = max_replicas(rendered, deployment)
        pods += surge(deployment, pods)
        total += pods * (settings.max_db_connections + 1)
    for job in rendered.of_kind("Job"):
        # `queueflow migrate` opens a single connection (shared/db/migrate.py), no pool.
        total += job["spec"].get("parallelism", 1)
    return total


# What the egress policy lets out by default: DNS, PostgreSQL, OTLP/HTTP. Nothing else.
DEFAULT_EGRESS_PORTS = {(53, "UDP"), (53, "TCP"), (5432, "TCP"), (4318, "TCP")}
KUBE_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}


def egress_ports(policy: dict[str, Any]) -> set[tuple[int, str]]:
    return {(p["port"], p.get("protocol", "TCP")) for rule in policy["spec"]["egress"] for p in rule["ports"]}


def check_egress(rendered: Rendered, policy: dict[str, Any], secret: dict[str, Any] | None = None) -> None:
    """The egress policy selects every pod (the migrations Job's too), restricts egress only, and
    opens DNS to the cluster DNS alone, the database URL's port and OTLP/HTTP's port: every rule
    names its ports (a rule without ports would open every port)."""
    from urllib.parse import urlsplit

    spec = policy["spec"]
    assert spec["policyTypes"] == ["Egress"], "ingress stays with the other policy"
    for owner in rendered.pod_owners():
        labels = pod_spec_labels(owner)
        assert selector_matches(spec["podSelector"]["matchLabels"], labels), owner["metadata"]["name"]
    assert all(rule.get("ports") for rule in spec["egress"]), "every egress rule names its ports"
    (dns,) = [r for r in spec["egress"] if {p["port"] for p in r["ports"]} == {53}]
    assert dns["to"] == [KUBE_DNS], "DNS only to the cluster's DNS"
    assert {p.get("protocol") for p in dns["ports"]} == {"UDP", "TCP"}
    assert egress_ports(policy) == DEFAULT_EGRESS_PORTS
    for owner in rendered.pod_owners():
        for container in containers(owner):
            url = container_env(rendered, container, secret)["DATABASE_URL"]
            assert ((urlsplit(url).port or 5432), "TCP") in egress_ports(policy), "the database's port"


def pod_spec_labels(owner: dict[str, Any]) -> dict[str, str]:
    return owner["spec"]["template"]["metadata"].get("labels", {})


def check_disruption_budgets(rendered: Rendered) -> None:
    """Each PodDisruptionBudget covers one Deployment and never blocks a node drain."""
    for pdb in rendered.of_kind("PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        (deployment,) = [
            d
            for d in rendered.deployments()
            if selector_matches(selector, d["spec"]["template"]["metadata"]["labels"])
        ]
        replicas = min_replicas(rendered, deployment)
        if "minAvailable" in pdb["spec"]:
            assert pdb["spec"]["minAvailable"] < replicas, (
                f"{pdb['metadata']['name']} would block node drains"
            )
        else:
            assert pdb["spec"]["maxUnavailable"] >= 1
