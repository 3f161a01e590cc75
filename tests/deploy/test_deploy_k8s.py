"""Offline checks of deploy/k8s: every overlay a user applies is rendered with the pinned
kustomize, validated against the Kubernetes JSON schemas (kubernetes-validate, fixed version),
linted with yamllint, and checked for consistency with the server: its modes, its CLI, the
environment variables it reads, its ports and its shutdown drain.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from qf_deploy_helpers import (
    DEPLOY,
    EXTERNAL_SECRET,
    K8S,
    KUBERNETES_VERSION,
    KUSTOMIZE_VERSION,
    REPO,
    SCHEMAS,
    SECRET_EXAMPLE,
    Rendered,
    cli_parser,
    component,
    container_env,
    containers,
    env_names,
    invocation,
    known_env_names,
    overlay_names,
    parse_cli,
    pod_spec,
    serve_option_parser,
)

UID = 10001
# Kinds that are not part of Kubernetes itself, each with a local schema in tests/deploy/schemas.
CRD_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json"}
CLUSTER_SCOPED = {"Namespace"}


def settings_of(rendered: Rendered, owner: dict[str, Any], container: dict[str, Any], secret: dict[str, Any]):
    """The server's own Settings for this container: its serve flags plus its environment."""
    from shared.config import settings_from

    argv = invocation(container)
    serve_args = argv[1:] if argv[:1] == ["serve"] else []
    options = serve_option_parser().parse_args(serve_args)
    return settings_from(options, container_env(rendered, container, secret))


def serve_containers(rendered: Rendered):
    for deployment in rendered.deployments():
        for container in containers(deployment):
            yield deployment, container


def prestop_seconds(container: dict[str, Any]) -> int:
    pre_stop = container.get("lifecycle", {}).get("preStop")
    assert pre_stop, f"{container['name']}: no preStop hook"
    if "sleep" in pre_stop:
        return int(pre_stop["sleep"]["seconds"])
    command = pre_stop["exec"]["command"]
    assert command[0] in ("sleep", "/bin/sleep") and len(command) == 2, command
    return int(command[1])


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


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


def schema_errors(doc: dict[str, Any]) -> str | None:
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


def test_overlay_validates_against_the_kubernetes_schemas(overlay: Rendered) -> None:
    errors = {f"{d['kind']}/{d['metadata']['name']}": schema_errors(d) for d in overlay.docs}
    assert {k: v for k, v in errors.items() if v} == {}


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
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and "bin" not in p.parts)


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


def test_invocations_are_valid_serve_options(overlay: Rendered) -> None:
    from shared.config import MODES

    for owner in overlay.pod_owners():
        for container in containers(owner):
            argv = invocation(container)
            assert argv and argv[0] in ("serve", "migrate"), argv
            if argv[0] == "serve":
                options = parse_cli(serve_option_parser(), argv[1:])
                assert options.mode in MODES
                assert not options.dev, "no --dev in a deployment"


def test_invocations_parse_with_the_real_cli(overlay: Rendered) -> None:
    parser = cli_parser()
    for owner in overlay.pod_owners():
        for container in containers(owner):
            argv = invocation(container)
            parsed = parse_cli(parser, argv)
            if getattr(parsed, "command", None) is not None:
                assert parsed.command == argv[0]
            if argv[0] == "serve":
                assert parsed.mode == component(owner)


def test_env_names_are_read_by_the_server(overlay: Rendered) -> None:
    known = known_env_names()
    for owner in overlay.pod_owners():
        for container in containers(owner):
            unknown = env_names(overlay, container) - known
            assert not unknown, f"{owner['metadata']['name']}: the server does not read {sorted(unknown)}"


def test_every_deployment_loads_valid_settings(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    """Run the server's own settings code on each Deployment's flags and environment."""
    for deployment, container in serve_containers(overlay):
        settings = settings_of(overlay, deployment, container, secret_example)
        assert settings.mode == component(deployment)
        assert settings.auto_migrate is False, "the migrations Job migrates, not the servers"
        assert settings.dev is False
        settings.check_credentials()  # api refuses to start without credentials


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
    for deployment, container in serve_containers(overlay):
        settings = settings_of(overlay, deployment, container, secret_example)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        expected = {"metrics": settings.metrics_port}
        if settings.runs("api"):
            expected["http"] = settings.api_port
        assert ports == expected, deployment["metadata"]["name"]


def test_probes(overlay: Rendered) -> None:
    for deployment, container in serve_containers(overlay):
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


def test_grace_period_covers_prestop_and_drain(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    for deployment, container in serve_containers(overlay):
        settings = settings_of(overlay, deployment, container, secret_example)
        grace = pod_spec(deployment)["terminationGracePeriodSeconds"]
        needed = prestop_seconds(container) + settings.shutdown_grace_secs + 5
        assert grace >= needed, f"{deployment['metadata']['name']}: {grace} s < {needed} s"
    api = overlay.get("Deployment", "queueflow-api")
    assert prestop_seconds(pod_spec(api)["containers"][0]) >= 5, "give load balancers time to drop the pod"


# --- security -----------------------------------------------------------------------------------


def test_pod_security(overlay: Rendered) -> None:
    for owner in overlay.pod_owners():
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
    for account in overlay.of_kind("ServiceAccount"):
        assert account["automountServiceAccountToken"] is False
    service_accounts = {a["metadata"]["name"] for a in overlay.of_kind("ServiceAccount")}
    for owner in overlay.pod_owners():
        assert pod_spec(owner)["serviceAccountName"] in service_accounts


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
    for config_map in overlay.of_kind("ConfigMap"):
        assert config_map.get("data", {}).get("QUEUEFLOW_DEV", "false").lower() in (
            "",
            "0",
            "false",
            "no",
            "off",
        )
    for owner in overlay.pod_owners():
        for container in containers(owner):
            assert "--dev" not in invocation(container)
            for item in container.get("env", []):
                assert item["name"] != "QUEUEFLOW_DEV", "dev mode accepts any token"


# --- services, scaling, disruption --------------------------------------------------------------


def test_services_select_one_deployment_each(overlay: Rendered) -> None:
    for service in overlay.of_kind("Service"):
        selector = service["spec"]["selector"]
        matched = [
            d
            for d in overlay.deployments()
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
    covered = {component(s) for s in overlay.of_kind("Service")}
    assert covered == {component(d) for d in overlay.deployments()}, (
        "every Deployment's metrics get a Service"
    )


def test_deployment_selectors_match_their_templates(overlay: Rendered) -> None:
    for deployment in overlay.deployments():
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector_matches(selector, deployment["spec"]["template"]["metadata"]["labels"])
        assert "app.kubernetes.io/component" in selector
        others = [
            d
            for d in overlay.deployments()
            if d is not deployment and selector_matches(selector, d["spec"]["template"]["metadata"]["labels"])
        ]
        assert not others, "Deployment selectors must not overlap"


def hpa_for(overlay: Rendered, deployment: dict[str, Any]) -> dict[str, Any] | None:
    for hpa in overlay.of_kind("HorizontalPodAutoscaler"):
        if hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]:
            return hpa
    return None


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


def max_replicas(overlay: Rendered, deployment: dict[str, Any]) -> int:
    hpa = hpa_for(overlay, deployment)
    return hpa["spec"]["maxReplicas"] if hpa else deployment["spec"].get("replicas", 1)


def min_replicas(overlay: Rendered, deployment: dict[str, Any]) -> int:
    hpa = hpa_for(overlay, deployment)
    return hpa["spec"]["minReplicas"] if hpa else deployment["spec"].get("replicas", 1)


def test_disruption_budgets_never_block_drains(overlay: Rendered) -> None:
    for pdb in overlay.of_kind("PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        (deployment,) = [
            d
            for d in overlay.deployments()
            if selector_matches(selector, d["spec"]["template"]["metadata"]["labels"])
        ]
        replicas = min_replicas(overlay, deployment)
        if "minAvailable" in pdb["spec"]:
            assert pdb["spec"]["minAvailable"] < replicas, (
                f"{pdb['metadata']['name']} would block node drains"
            )
        else:
            assert pdb["spec"]["maxUnavailable"] >= 1


def surge(deployment: dict[str, Any], replicas: int) -> int:
    rolling = deployment["spec"].get("strategy", {}).get("rollingUpdate", {})
    value = rolling.get("maxSurge", "25%")
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(replicas * int(value[:-1]) / 100)
    return int(value)


def test_postgres_connection_budget(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    """Worst case: every Deployment at its largest size plus surge, every pool full, one LISTEN
    connection per process, plus the migrations Job's one connection. Must fit the Namespace's
    declared budget."""
    (namespace,) = overlay.of_kind("Namespace")
    budget = int(namespace["metadata"]["annotations"]["queueflow.io/postgres-connection-budget"])
    total = 0
    for deployment, container in serve_containers(overlay):
        settings = settings_of(overlay, deployment, container, secret_example)
        pods = max_replicas(overlay, deployment)
        pods += surge(deployment, pods)
        total += pods * (settings.max_db_connections + 1)
        assert settings.min_db_connections <= settings.max_db_connections
    for job in overlay.of_kind("Job"):
        # `queueflow migrate` opens a single connection (shared/db/migrate.py), no pool.
        total += job["spec"].get("parallelism", 1)
    assert total <= budget, f"{overlay.name}: up to {total} connections, budget {budget}"


def test_worker_pools_fit_their_handlers(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    """Every in-process handler can reach the database at once, plus headroom for the claim loop."""
    for deployment, container in serve_containers(overlay):
        settings = settings_of(overlay, deployment, container, secret_example)
        if settings.runs("worker"):
            handlers = settings.workers * len(settings.worker_queues)
            assert settings.max_db_connections >= handlers + 2, deployment["metadata"]["name"]


def test_workflow_pools_fit_their_consumers(overlay: Rendered, secret_example: dict[str, Any]) -> None:
    """Every advancer consumer can hold a connection for its transaction, with two to spare for
    /health, /ready and /metrics (probes time out after 2 s waiting for one)."""
    from services.workflow.advancer import CONSUMERS

    seen = False
    for deployment, container in serve_containers(overlay):
        settings = settings_of(overlay, deployment, container, secret_example)
        if settings.runs("workflow"):
            seen = True
            assert settings.max_db_connections >= CONSUMERS + 2, deployment["metadata"]["name"]
    assert seen, "no Deployment runs the workflow advancer"


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
    (policy,) = overlay.of_kind("NetworkPolicy")
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


def test_docs_point_at_real_paths() -> None:
    doc = (REPO / "docs" / "deployment.md").read_text()
    for overlay in re.findall(r"deploy/k8s/overlays/([a-z0-9-]+)", doc):
        assert overlay in overlay_names(), f"docs mention overlays/{overlay}"
    for path in set(re.findall(r"`(deploy/[A-Za-z0-9_./-]+)`", doc)):
        assert (REPO / path).exists(), f"docs mention {path}"
    assert (K8S / "secret.example.yaml").exists()
