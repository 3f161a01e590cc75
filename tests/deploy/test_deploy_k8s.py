"""Offline checks of deploy/k8s: every overlay a user applies is rendered with the pinned
kustomize, validated against the Kubernetes JSON schemas (kubernetes-validate, fixed version),
linted with yamllint, and checked for consistency with the server: its modes, its CLI, the
environment variables it reads, its ports and its shutdown drain.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from qf_deploy_helpers import (
    DEPLOY,
    EXTERNAL_SECRET,
    K8S,
    KUSTOMIZE_VERSION,
    REPO,
    SECRET_EXAMPLE,
    TOOLS_BIN,
    Rendered,
    check_deployment_selectors,
    check_disruption_budgets,
    check_egress,
    check_env_names,
    check_grace_periods,
    check_invocations,
    check_no_dev_mode,
    check_pod_security,
    check_pools,
    check_ports,
    check_probes,
    check_schemas,
    check_services,
    component,
    container_env,
    containers,
    env_names,
    filled_secret_example,
    hpa_for,
    invocation,
    min_replicas,
    overlay_names,
    pod_spec,
    render_kustomization,
    schema_errors,
    selector_matches,
    serve_containers,
    settings_of,
    sign_on_env_names,
    worst_case_connections,
)

CLUSTER_SCOPED = {"Namespace"}


# --- rendering and schemas ----------------------------------------------------------------------


def test_overlays_exist() -> None:
    assert {"dev", "prod"} <= set(overlay_names())


def test_kustomize_is_the_pinned_version(kustomize_bin: str) -> None:
    import subprocess

    out = subprocess.run([kustomize_bin, "version"], capture_output=True, text=True, timeout=30, check=True)
    script = (DEPLOY / "tools" / "install-kustomize.sh").read_text()
    assert f"KUSTOMIZE_VERSION:-{KUSTOMIZE_VERSION}" in script
    if out.stdout.strip() != KUSTOMIZE_VERSION:
        pytest.skip(f"kustomize {out.stdout.strip()} found, {KUSTOMIZE_VERSION} pinned; results may differ")


def test_overlay_renders_the_whole_deployment(overlay: Rendered) -> None:
    kinds = {d["kind"] for d in overlay.docs}
    assert {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Deployment",
        "Service",
        "Job",
        "NetworkPolicy",
    } <= kinds
    assert "Secret" not in kinds, "overlays never ship the Secret (see secret.example.yaml)"
    names = [(d["kind"], d["metadata"]["name"]) for d in overlay.docs]
    assert len(names) == len(set(names)), "duplicate objects"


def test_overlay_validates_against_the_kubernetes_schemas(overlay: Rendered) -> None:
    check_schemas(overlay)


def test_secret_example_validates(secret_example: dict[str, Any]) -> None:
    assert schema_errors(secret_example) is None


def test_the_validator_rejects_mistakes(rendered_overlays: dict[str, Rendered]) -> None:
    """Guard the guard: a misspelt field and a wrong type must both fail (strict schemas)."""
    deployment = copy.deepcopy(rendered_overlays["prod"].get("Deployment", "queueflow-api"))
    assert schema_errors(deployment) is None
    pod_spec(deployment)["containers"][0]["livenesProbe"] = {}
    assert schema_errors(deployment)
    deployment = copy.deepcopy(rendered_overlays["prod"].get("Deployment", "queueflow-api"))
    deployment["spec"]["replicas"] = "two"
    assert schema_errors(deployment)
    monitor = copy.deepcopy(rendered_overlays["prod"].get("ServiceMonitor", "queueflow"))
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    assert schema_errors(monitor)


# --- yamllint -----------------------------------------------------------------------------------


def deploy_yaml_files() -> list[Path]:
    """The YAML under deploy/, without the Helm chart's templates (Go templates, for helm lint)."""
    return sorted(
        p
        for p in DEPLOY.rglob("*")
        if p.suffix in (".yaml", ".yml") and "bin" not in p.parts and p.parent.name != "templates"
    )


def test_yamllint() -> None:
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    config = YamlLintConfig(file=str(DEPLOY / ".yamllint.yaml"))
    files = deploy_yaml_files()
    assert len(files) >= 10
    problems = [
        f"{path.relative_to(REPO)}:{p.line}:{p.column}: [{p.level}] {p.desc} ({p.rule})"
        for path in files
        for p in linter.run(path.read_text(), config, str(path))
    ]
    assert problems == []


# --- the server's modes, CLI and settings -------------------------------------------------------


def test_every_service_mode_has_a_deployment(overlay: Rendered) -> None:
    from shared.config import MODES

    modes = {}
    for deployment in overlay.deployments():
        (container,) = pod_spec(deployment)["containers"]
        argv = invocation(container)
        assert argv[:2] == ["serve", "--mode"], f"{deployment['metadata']['name']}: {argv}"
        modes[argv[2]] = deployment
        assert component(deployment) == argv[2]
        assert deployment["metadata"]["name"] == f"queueflow-{argv[2]}"
    assert set(modes) == set(MODES) - {"all"}, (
        "each service mode needs its own Deployment (copy deploy/k8s/base/worker.yaml; "
        "see docs/deployment.md, 'Adding a service')"
    )


def test_invocations_parse_with_the_real_cli(overlay: Rendered) -> None:
    """`serve` or `migrate`, valid for serve's own options and the real `queueflow` parser."""
    check_invocations(overlay)


def test_env_names_are_read_by_the_server(overlay: Rendered) -> None:
    check_env_names(overlay)


def test_every_deployment_loads_valid_settings(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    """Run the server's own settings code on each Deployment's flags and environment, with the
    example Secret filled in; as it is, with its placeholders, the api refuses to start."""
    from shared.config import ConfigError

    for deployment, container in serve_containers(overlay):
        settings = settings_of(overlay, deployment, container, filled_secret_example())
        assert settings.mode == component(deployment)
        assert settings.auto_migrate is False, "the migrations Job migrates, not the servers"
        assert settings.dev is False
        settings.check_credentials()  # api refuses to start without credentials
        if component(deployment) == "api":
            with pytest.raises(ConfigError, match="placeholder REPLACE_ME"):
                settings_of(overlay, deployment, container, secret_example).check_credentials()


def test_only_the_api_gets_credentials(overlay: Rendered) -> None:
    credentials = {"QUEUEFLOW_WORKER_TOKEN", "QUEUEFLOW_API_KEYS", "QUEUEFLOW_JWT_SECRET"}
    for owner in overlay.pod_owners():
        for container in containers(owner):
            given = env_names(overlay, container) & credentials
            if component(owner) == "api":
                assert given == credentials
            else:
                assert not given, f"{owner['metadata']['name']} does not need {sorted(given)}"
            assert "DATABASE_URL" in env_names(overlay, container)


def test_secrets_come_from_the_secret_only(overlay: Rendered) -> None:
    secret_like = {"DATABASE_URL", "QUEUEFLOW_WORKER_TOKEN", "QUEUEFLOW_API_KEYS", "QUEUEFLOW_JWT_SECRET"}
    for config_map in overlay.of_kind("ConfigMap"):
        assert not secret_like & set(config_map.get("data", {})), config_map["metadata"]["name"]
    for owner in overlay.pod_owners():
        for container in containers(owner):
            for item in container.get("env", []):
                if item["name"] in secret_like:
                    ref = item["valueFrom"]["secretKeyRef"]
                    assert ref["name"] == EXTERNAL_SECRET and ref["key"] == item["name"]


def test_secret_example_has_only_placeholders(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    assert secret_example["metadata"]["name"] == EXTERNAL_SECRET
    assert "data" not in secret_example, "stringData only, so nothing hides behind base64"
    values = secret_example["stringData"]
    for key, value in values.items():
        assert "REPLACE_ME" in value, f"{key} must be an obvious placeholder"
    referenced = {
        item["valueFrom"]["secretKeyRef"]["key"]
        for owner in overlay.pod_owners()
        for container in containers(owner)
        for item in container.get("env", [])
        if "secretKeyRef" in item.get("valueFrom", {})
    }
    assert set(values) == referenced
    assert "REPLACE_ME" in SECRET_EXAMPLE.read_text()


def test_no_manifest_carries_a_secret_value() -> None:
    import yaml

    for path in deploy_yaml_files():
        if path == SECRET_EXAMPLE:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                assert doc.get("kind") != "Secret", f"{path}: Secrets belong in your secret store"


# --- ports, probes, shutdown --------------------------------------------------------------------


def test_ports_match_the_settings(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    check_ports(overlay, secret_example)


def test_probes(overlay: Rendered) -> None:
    check_probes(overlay)


def test_grace_period_covers_prestop_and_drain(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    check_grace_periods(overlay, secret_example)


# --- security -----------------------------------------------------------------------------------


def test_pod_security(overlay: Rendered) -> None:
    check_pod_security(overlay)


def test_namespace_enforces_the_restricted_profile(overlay: Rendered) -> None:
    (namespace,) = overlay.of_kind("Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for doc in overlay.docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"].get("namespace") == overlay.namespace, (
                f"{doc['kind']}/{doc['metadata']['name']}"
            )


def test_images(overlay: Rendered) -> None:
    images = {c["image"] for owner in overlay.pod_owners() for c in containers(owner)}
    assert len(images) == 1, f"one image for every service and the Job: {images}"
    (image,) = images
    name, _, tag = image.rpartition(":")
    assert name and "/" in name and tag, image
    if overlay.name == "prod":
        assert tag != "latest" and re.fullmatch(r"\d+\.\d+\.\d+", tag), f"pin a release in prod: {image}"


def test_no_dev_mode_anywhere(overlay: Rendered) -> None:
    check_no_dev_mode(overlay)


# --- services, scaling, disruption --------------------------------------------------------------


def test_services_select_one_deployment_each(overlay: Rendered) -> None:
    check_services(overlay)


def test_deployment_selectors_match_their_templates(overlay: Rendered) -> None:
    check_deployment_selectors(overlay)


def test_autoscaling(overlay: Rendered) -> None:
    for hpa in overlay.of_kind("HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment"
        deployment = overlay.get("Deployment", target["name"])
        assert component(deployment) == "api", "only the stateless api is autoscaled on CPU"
        assert "replicas" not in deployment["spec"], "the HPA owns replicas; an applied count would reset it"
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
        for container in containers(deployment):
            assert "cpu" in container["resources"]["requests"], "CPU utilisation needs a CPU request"
    if overlay.name == "prod":
        assert hpa_for(overlay, overlay.get("Deployment", "queueflow-api")) is not None


def test_disruption_budgets_never_block_drains(overlay: Rendered) -> None:
    check_disruption_budgets(overlay)


def test_postgres_connection_budget(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    """The worst case (docs/deployment.md, "Sizing") must fit the Namespace's declared budget."""
    (namespace,) = overlay.of_kind("Namespace")
    budget = int(namespace["metadata"]["annotations"]["queueflow.io/postgres-connection-budget"])
    total = worst_case_connections(overlay, secret_example)
    assert total <= budget, f"{overlay.name}: up to {total} connections, budget {budget}"


def test_pools_fit_their_concurrency(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    """Worker pools fit their handlers, advancer pools their consumers (and the probes)."""
    check_pools(overlay, secret_example)


def test_every_overlay_runs_the_advancer(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    runs = [settings_of(overlay, d, c, secret_example).runs("workflow") for d, c in serve_containers(overlay)]
    assert any(runs), "no Deployment runs the workflow advancer"


def test_replicated_services_have_disruption_budgets(rendered_overlays: dict[str, Rendered]) -> None:
    """In prod every Deployment that runs more than one pod keeps some of them through node drains;
    the workflow advancer runs two, so workflows keep advancing while one is evicted."""
    prod = rendered_overlays["prod"]
    assert min_replicas(prod, prod.get("Deployment", "queueflow-workflow")) >= 2
    for deployment in prod.deployments():
        if min_replicas(prod, deployment) < 2:
            continue
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        budgets = [
            p
            for p in prod.of_kind("PodDisruptionBudget")
            if selector_matches(p["spec"]["selector"]["matchLabels"], labels)
        ]
        assert len(budgets) == 1, f"{deployment['metadata']['name']}: {len(budgets)} PodDisruptionBudgets"
    # dev runs one pod of each and drops the budgets (they would block drains or protect nothing).
    assert not rendered_overlays["dev"].of_kind("PodDisruptionBudget")
    for deployment in rendered_overlays["dev"].deployments():
        assert min_replicas(rendered_overlays["dev"], deployment) == 1, deployment["metadata"]["name"]


def test_mode_all_runs_every_service() -> None:
    """The image's default command (`serve --mode all`) runs every service mode, the new ones too."""
    from shared.config import MODES, Settings

    assert all(Settings(mode="all").runs(mode) for mode in MODES if mode != "all")


# --- migrations -------------------------------------------------------------------------------


def test_migrations_job(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    (job,) = overlay.of_kind("Job")
    assert component(job) == "migrate"
    (container,) = pod_spec(job)["containers"]
    assert invocation(container) == ["migrate"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1 and job["spec"]["activeDeadlineSeconds"] > 0
    assert set(container_env(overlay, container, secret_example)) == {"DATABASE_URL"}


def test_the_migrate_phase_selects_what_the_job_needs(overlay: Rendered) -> None:
    """`kubectl apply -k <overlay> -l queueflow.io/phase=migrate` runs before the rollout."""
    phase = [
        d for d in overlay.docs if d["metadata"].get("labels", {}).get("queueflow.io/phase") == "migrate"
    ]
    (job,) = overlay.of_kind("Job")
    expected = {
        ("Namespace", overlay.namespace),
        ("ServiceAccount", pod_spec(job)["serviceAccountName"]),
        ("Job", job["metadata"]["name"]),
    }
    assert {(d["kind"], d["metadata"]["name"]) for d in phase} == expected
    (container,) = pod_spec(job)["containers"]
    assert "envFrom" not in container, "the Job must not need a ConfigMap outside its phase"


# --- network policy and monitoring ------------------------------------------------------------


def test_network_policy_keeps_metrics_in_cluster(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    policy = overlay.get("NetworkPolicy", "queueflow")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    for deployment in overlay.deployments():
        assert selector_matches(
            spec["podSelector"]["matchLabels"], deployment["spec"]["template"]["metadata"]["labels"]
        )
    api = overlay.get("Deployment", "queueflow-api")
    api_settings = settings_of(overlay, api, pod_spec(api)["containers"][0], secret_example)
    open_ports, guarded = set(), {}
    for rule in spec["ingress"]:
        ports = {p["port"] for p in rule["ports"]}
        if "from" in rule:
            for port in ports:
                guarded[port] = rule["from"]
        else:
            open_ports |= ports
    assert open_ports == {api_settings.api_port}, "only the api port is open to everyone"
    sources = guarded[api_settings.metrics_port]
    assert {"podSelector": {}} in sources, "same-namespace pods reach the metrics port"
    assert any("namespaceSelector" in s and "podSelector" not in s for s in sources), (
        "and the monitoring namespace"
    )
    assert all(s != {} for s in sources)
    for deployment, container in serve_containers(overlay):
        settings = settings_of(overlay, deployment, container, secret_example)
        assert settings.metrics_port in guarded


def test_egress_is_dns_the_database_and_otlp_only(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    assert {p["metadata"]["name"] for p in overlay.of_kind("NetworkPolicy")} == {
        "queueflow",
        "queueflow-egress",
        "queueflow-pusher-egress",
    }
    check_egress(overlay, overlay.get("NetworkPolicy", "queueflow-egress"), secret_example)


def test_only_the_pusher_reaches_public_http_and_never_the_private_ranges(overlay: Rendered) -> None:
    """docs/push.md: the pusher's own egress is 80 and 443 to public addresses; the ranges its
    SSRF defence refuses (private, loopback, link-local with the metadata address) are left out."""
    policy = overlay.get("NetworkPolicy", "queueflow-pusher-egress")["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "pusher"
    (rule,) = policy["egress"]
    assert {(p["port"], p["protocol"]) for p in rule["ports"]} == {(443, "TCP"), (80, "TCP")}
    blocks = {b["ipBlock"]["cidr"]: set(b["ipBlock"]["except"]) for b in rule["to"]}
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8"} <= blocks[
        "0.0.0.0/0"
    ]
    assert {"fc00::/7", "fe80::/10", "::1/128"} <= blocks["::/0"]


def test_service_monitor(rendered_overlays: dict[str, Rendered]) -> None:
    prod = rendered_overlays["prod"]
    (monitor,) = prod.of_kind("ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [s for s in prod.of_kind("Service") if selector_matches(selector, s["metadata"]["labels"])]
    assert {component(s) for s in selected} == {component(d) for d in prod.deployments()}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    for service in selected:
        assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
    # Without the Prometheus Operator's CRDs `kubectl apply` would reject the kind.
    assert not rendered_overlays["dev"].of_kind("ServiceMonitor")


# --- single sign-on (components/oidc) -------------------------------------------------------------

OIDC_COMPONENT = K8S / "components" / "oidc"
OIDC_SETTINGS = sign_on_env_names() | {"QUEUEFLOW_PUBLIC_URL"}
FILLED_OIDC = {
    "QUEUEFLOW_OIDC_ISSUER=REPLACE_ME": "QUEUEFLOW_OIDC_ISSUER=https://keycloak.example.com/realms/ops",
    "QUEUEFLOW_OIDC_CLIENT_ID=REPLACE_ME": "QUEUEFLOW_OIDC_CLIENT_ID=queueflow",
    "QUEUEFLOW_PUBLIC_URL=REPLACE_ME": "QUEUEFLOW_PUBLIC_URL=https://queueflow.example.com",
    "QUEUEFLOW_OIDC_ROLE_MAP=": "QUEUEFLOW_OIDC_ROLE_MAP=qf-operators=operator,qf-admins=admin",
}


def render_prod_with_oidc(kustomize: str, directory: Path, oidc_env: str) -> Rendered:
    """What the component's instructions make of overlays/prod: an overlay of it that includes
    deploy/k8s/components/oidc and generates queueflow-oidc from its own oidc.env."""
    import yaml

    k8s = Path(os.path.relpath(K8S, directory))
    (directory / "oidc.env").write_text(oidc_env)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "queueflow",
        "resources": [str(k8s / "overlays" / "prod")],
        "components": [str(k8s / "components" / "oidc")],
        "configMapGenerator": [{"name": "queueflow-oidc", "envs": ["oidc.env"]}],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return render_kustomization(kustomize, directory, "prod+oidc")


def filled_oidc_env() -> str:
    text = (OIDC_COMPONENT / "oidc.env.example").read_text()
    for placeholder, value in FILLED_OIDC.items():
        assert f"\n{placeholder}\n" in text, placeholder
        text = text.replace(f"\n{placeholder}\n", f"\n{value}\n")
    return text


def sso_only_secret() -> dict[str, Any]:
    """The example Secret filled in for single sign-on: the client's secret uncommented, the API
    keys and the JWT secret deleted."""
    secret = filled_secret_example()
    data = {
        k: v
        for k, v in secret["stringData"].items()
        if k not in {"QUEUEFLOW_API_KEYS", "QUEUEFLOW_JWT_SECRET"}
    }
    return {**secret, "stringData": {**data, "QUEUEFLOW_OIDC_CLIENT_SECRET": "oidc-client-secret"}}


def test_the_oidc_component_configures_the_api_alone(kustomize_bin: str, tmp_path: Path) -> None:
    """The api reads the settings from queueflow-oidc and the client's secret from the Secret
    "queueflow" (optional), starts with single sign-on as its only tenant credential, and alone
    may reach the provider; every other pod and policy is what overlays/prod renders."""
    rendered = render_prod_with_oidc(kustomize_bin, tmp_path, filled_oidc_env())
    check_schemas(rendered)
    check_env_names(rendered)
    check_pod_security(rendered)
    secret = sso_only_secret()
    api = rendered.get("Deployment", "queueflow-api")
    (container,) = pod_spec(api)["containers"]
    settings = settings_of(rendered, api, container, secret)
    assert (settings.oidc_issuer, settings.oidc_client_id, settings.public_url) == (
        "https://keycloak.example.com/realms/ops",
        "queueflow",
        "https://queueflow.example.com",
    )
    assert settings.oidc_client_secret == "oidc-client-secret"
    assert settings.oidc_role_map == "qf-operators=operator,qf-admins=admin"
    assert (settings.oidc_scopes, settings.oidc_tenant_claim, settings.oidc_roles_claim) == (
        "openid profile email",
        "tenant",
        "roles",
    )
    assert (settings.api_keys, settings.jwt_secret, settings.console_token_login) == ((), None, False)
    settings.check_credentials()
    (item,) = [e for e in container["env"] if e["name"] == "QUEUEFLOW_OIDC_CLIENT_SECRET"]
    assert item["valueFrom"]["secretKeyRef"] == {
        "name": EXTERNAL_SECRET,
        "key": "QUEUEFLOW_OIDC_CLIENT_SECRET",
        "optional": True,
    }
    for config_map in rendered.of_kind("ConfigMap"):
        assert "QUEUEFLOW_OIDC_CLIENT_SECRET" not in config_map.get("data", {})
    for owner in rendered.pod_owners():
        if owner is not api:
            for other in containers(owner):
                assert not OIDC_SETTINGS & env_names(rendered, other), owner["metadata"]["name"]
    policy = rendered.get("NetworkPolicy", "queueflow-oidc-egress")["spec"]
    assert policy["policyTypes"] == ["Egress"]
    assert policy["egress"] == [{"ports": [{"port": 443, "protocol": "TCP"}]}]
    selected = [
        component(owner)
        for owner in rendered.pod_owners()
        if selector_matches(
            policy["podSelector"]["matchLabels"], owner["spec"]["template"]["metadata"]["labels"]
        )
    ]
    assert selected == ["api"]
    check_egress(rendered, rendered.get("NetworkPolicy", "queueflow-egress"), secret)


def test_the_oidc_components_placeholders_keep_the_api_from_starting(
    kustomize_bin: str, tmp_path: Path
) -> None:
    from shared.config import ConfigError

    text = (OIDC_COMPONENT / "oidc.env.example").read_text()
    rendered = render_prod_with_oidc(kustomize_bin, tmp_path, text)
    api = rendered.get("Deployment", "queueflow-api")
    settings = settings_of(rendered, api, pod_spec(api)["containers"][0], sso_only_secret())
    with pytest.raises(ConfigError, match="QUEUEFLOW_PUBLIC_URL"):
        settings.check_credentials()


def test_overlays_leave_single_sign_on_off(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    """Without the component no pod reads a single sign-on setting, and the example Secret only
    mentions the client's secret, commented out, under the key the component reads."""
    for owner in overlay.pod_owners():
        for container in containers(owner):
            assert not OIDC_SETTINGS & env_names(overlay, container), owner["metadata"]["name"]
            assert settings_of(overlay, owner, container, filled_secret_example()).oidc_issuer is None
    assert "QUEUEFLOW_OIDC_CLIENT_SECRET" not in secret_example["stringData"]
    assert '# QUEUEFLOW_OIDC_CLIENT_SECRET: "REPLACE_ME"' in SECRET_EXAMPLE.read_text()


# --- documentation ------------------------------------------------------------------------------


def test_docs_describe_every_service_mode() -> None:
    """The services table and the rollout command in docs/deployment.md name every mode."""
    from shared.config import MODES

    doc = (REPO / "docs" / "deployment.md").read_text()
    for mode in set(MODES) - {"all"}:
        assert f"`queueflow serve --mode {mode}`" in doc, f"docs/deployment.md: no row for --mode {mode}"
        assert f"deployment/queueflow-{mode}" in doc, (
            f"docs/deployment.md: the rollout skips queueflow-{mode}"
        )


def clone_paths() -> set[str] | None:
    """What a clone of this checkout holds: each tracked file and the folders on its path (None
    outside a git checkout)."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True)
    if listed.returncode != 0:
        return None
    held = set()
    for name in filter(None, listed.stdout.split("\0")):
        parts = name.split("/")
        held.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return held


def test_docs_point_at_real_paths() -> None:
    """Each deploy/ path docs/deployment.md names is in a fresh clone (tracked, whatever this
    checkout has built or installed), except the tools' folder, which the paragraph naming it must
    say an install makes."""
    doc = (REPO / "docs" / "deployment.md").read_text()
    for overlay in re.findall(r"deploy/k8s/overlays/([a-z0-9-]+)", doc):
        assert overlay in overlay_names(), f"docs mention overlays/{overlay}"
    held = clone_paths()
    problems = []
    for paragraph in doc.split("\n\n"):
        for path in sorted(set(re.findall(r"`(deploy/[A-Za-z0-9_./-]+)`", paragraph))):
            if (REPO / path).is_relative_to(TOOLS_BIN):
                if not re.search(r"`make tools`|deploy/tools/install-[a-z]+\.sh", paragraph):
                    problems.append(f"{path}, without the install that makes it")
            elif not (path.rstrip("/") in held if held is not None else (REPO / path).exists()):
                problems.append(f"{path}, which a clone does not have")
    assert not problems, "docs/deployment.md mentions " + "; ".join(problems)
    assert (K8S / "secret.example.yaml").exists()
