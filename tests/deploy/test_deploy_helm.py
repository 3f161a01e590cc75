"""Offline checks of the Helm chart deploy/helm/queueflow: `helm lint --strict` and `helm template`
with the pinned Helm (deploy/tools/install-helm.sh), for the default values, a values file with
every feature on (deploy/helm/queueflow/ci/full-values.yaml) and variants set on the command
line. Every rendered object is validated against the Kubernetes JSON schemas, and the pods are
checked with the same code as the kustomize overlays (qf_deploy_helpers): the server's own CLI
parser and settings code, the environment variables it reads, probes, grace periods, security
contexts, Services, selectors, pools and disruption budgets. Then what is particular to the
chart: credentials from existing Secrets or the chart's own, the migrations hook, switching
services, autoscalers and budgets off, values the schema or the templates refuse, and that the
defaults run exactly what deploy/k8s/base runs.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from qf_deploy_helpers import (
    HELM_CHART,
    HELM_VERSION,
    K8S,
    KUBERNETES_VERSION,
    REPO,
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
    egress_ports,
    env_names,
    filled_secret_example,
    helm_or_skip,
    helm_template,
    hpa_for,
    invocation,
    kustomize_or_skip,
    load_secret_example,
    pod_spec,
    render_chart,
    render_kustomization,
    selector_matches,
    serve_containers,
    settings_of,
    sign_on_env_names,
    worst_case_connections,
)

SERVICES = ("api", "janitor", "workflow", "worker", "pusher")
FULL_VALUES = HELM_CHART / "ci" / "full-values.yaml"
OIDC_VALUES = HELM_CHART / "ci" / "oidc-values.yaml"
CREDENTIALS = {
    "QUEUEFLOW_WORKER_TOKEN",
    "QUEUEFLOW_API_KEYS",
    "QUEUEFLOW_JWT_SECRET",
    "QUEUEFLOW_OIDC_CLIENT_SECRET",
}
HOOK = "helm.sh/hook"
JWT_SECRET = "jwt-secret-of-more-than-32-bytes-0123"
HOOK_WEIGHT = "helm.sh/hook-weight"


def external_secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}


@dataclass(frozen=True)
class Variant:
    """One way to install the chart: values files, --set items, and what the user creates beside
    it (the Secrets and ConfigMaps its pods reference without rendering them)."""

    values: tuple[Path, ...] = ()
    sets: tuple[str, ...] = ()
    release: str = "queueflow"
    namespace: str = "queueflow"
    external: tuple[dict[str, Any], ...] = field(default=())
    migration: bool = True


VARIANTS = {
    # Credentials from the Secret "queueflow" of deploy/k8s/secret.example.yaml (filled in), as
    # the overlays.
    "default": Variant(external=(filled_secret_example(),)),
    # Everything on; credentials in the chart's own Secret; a ConfigMap of the user's in envFrom.
    "full": Variant(
        values=(FULL_VALUES,),
        release="r1",
        namespace="qf",
        external=(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "queueflow-site-settings"},
                "data": {"QUEUEFLOW_RETENTION_INTERVAL_SECS": "600"},
            },
        ),
    ),
    # Two existing Secrets with keys of their own naming; the JWT secret key is absent (optional).
    "existing-secret": Variant(
        sets=(
            "database.existingSecret=pg-credentials",
            "database.existingSecretKey=url",
            "auth.existingSecret=qf-auth",
            "auth.existingSecretKeys.workerToken=worker-token",
            "auth.existingSecretKeys.apiKeys=api-keys",
            "auth.existingSecretKeys.jwtSecret=jwt",
        ),
        external=(
            external_secret("pg-credentials", {"url": "postgresql://qf:pw@pg.invalid:5432/qf"}),
            external_secret("qf-auth", {"worker-token": "w-token", "api-keys": "k1:tenant-a"}),
        ),
    ),
    # Single sign-on only (ci/oidc-values.yaml): the Secret "queueflow" holds no API keys and no
    # JWT secret, only the worker token and the OIDC client's secret.
    "oidc": Variant(
        values=(OIDC_VALUES,),
        external=(
            external_secret(
                "queueflow",
                {
                    "DATABASE_URL": "postgresql://qf:pw@pg.invalid:5432/qf",
                    "QUEUEFLOW_WORKER_TOKEN": "w-token",
                    "QUEUEFLOW_OIDC_CLIENT_SECRET": "oidc-client-secret",
                },
            ),
        ),
    ),
    # No hook: the servers migrate at start; the database URL from "queueflow", the api's
    # credentials (a worker token and a JWT secret only) from the chart's Secret.
    "no-migration": Variant(
        sets=(
            "migration.enabled=false",
            "auth.existingSecret=",
            "auth.workerToken=w-token",
            f"auth.jwtSecret={JWT_SECRET}",
        ),
        external=(filled_secret_example(),),
        migration=False,
    ),
}


@pytest.fixture(scope="session")
def helm_bin() -> str:
    return helm_or_skip()


def render(helm: str, name: str, variant: Variant) -> Rendered:
    rendered = render_chart(
        helm, name, variant.values, variant.sets, release=variant.release, namespace=variant.namespace
    )
    rendered.external = list(variant.external)
    return rendered


@pytest.fixture(scope="session")
def rendered_variants(helm_bin: str) -> dict[str, Rendered]:
    return {name: render(helm_bin, name, variant) for name, variant in VARIANTS.items()}


@pytest.fixture(params=sorted(VARIANTS))
def chart(request: pytest.FixtureRequest, rendered_variants: dict[str, Rendered]) -> Rendered:
    return rendered_variants[request.param]


def render_with(helm: str, *sets: str) -> Rendered:
    """The default variant plus some --set items."""
    base = VARIANTS["default"]
    return render(helm, "+".join(sets), Variant(sets=sets, external=base.external))


def refuse(helm: str, *sets: str) -> str:
    """Rendering must fail; returns helm's error output."""
    proc = helm_template(helm, sets=sets)
    assert proc.returncode != 0, f"helm template {' '.join(sets)} rendered:\n{proc.stdout[:2000]}"
    return proc.stderr


def components_of(rendered: Rendered, kind: str) -> set[str]:
    return {component(d) for d in rendered.of_kind(kind)}


def deployment(rendered: Rendered, name: str) -> dict[str, Any]:
    (found,) = [d for d in rendered.deployments() if component(d) == name]
    return found


def hooks(doc: dict[str, Any]) -> dict[str, str]:
    annotations = doc["metadata"].get("annotations", {})
    return {k: v for k, v in annotations.items() if k.startswith("helm.sh/hook")}


# --- the tool, lint, schemas ---------------------------------------------------------------------


def test_helm_is_the_pinned_version(helm_bin: str) -> None:
    out = subprocess.run(
        [helm_bin, "version", "--template", "{{.Version}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    script = (REPO / "deploy" / "tools" / "install-helm.sh").read_text()
    assert f"HELM_VERSION:-{HELM_VERSION}" in script
    if out.stdout.strip() != HELM_VERSION:
        pytest.skip(f"helm {out.stdout.strip()} found, {HELM_VERSION} pinned; results may differ")


@pytest.mark.parametrize("values", [(), (FULL_VALUES,), (OIDC_VALUES,)], ids=["default", "full", "oidc"])
def test_lint_is_clean(helm_bin: str, values: tuple[Path, ...]) -> None:
    """`helm lint --strict` passes with nothing but the icon hint (the chart has no icon). In lint
    mode a template's `fail` is only logged, so the output is checked for it too."""
    argv = [helm_bin, "lint", "--strict", "--kube-version", KUBERNETES_VERSION, str(HELM_CHART)]
    for path in values:
        argv += ["--values", str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    findings = [line.strip() for line in output.splitlines() if re.search(r"\[(INFO|WARNING|ERROR)\]", line)]
    assert findings == ["[INFO] Chart.yaml: icon is recommended"], output
    assert "1 chart(s) linted, 0 chart(s) failed" in output


def test_renders_validate_against_the_kubernetes_schemas(chart: Rendered) -> None:
    check_schemas(chart)


def test_every_object_is_namespaced_and_unique(chart: Rendered) -> None:
    """The chart creates no Namespace (`helm install --create-namespace` or your own, labelled for
    the restricted Pod Security profile) and puts everything in the release's."""
    namespace = VARIANTS[chart.name].namespace
    assert "Namespace" not in {d["kind"] for d in chart.docs}
    for doc in chart.docs:
        assert doc["metadata"]["namespace"] == namespace, f"{doc['kind']}/{doc['metadata']['name']}"
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == VARIANTS[chart.name].release
    names = [(d["kind"], d["metadata"]["name"]) for d in chart.docs]
    assert len(names) == len(set(names)), "duplicate objects"


def test_values_schema_rejects_mistakes(helm_bin: str) -> None:
    """values.schema.json: unknown keys and wrong types fail before anything renders."""
    assert "replica" in refuse(helm_bin, "api.replica=3")
    assert "logLevel" in refuse(helm_bin, "config.logLevel=verbose")
    assert "workers" in refuse(helm_bin, "config.workers=0")
    assert "port" in refuse(helm_bin, "service.port=http")
    assert "queueRetention" in refuse(helm_bin, "config.queueRetention.thumbnails=forever")


# --- consistency with the server (the checks the overlays get) ----------------------------------


def test_invocations_parse_with_the_real_cli(chart: Rendered) -> None:
    check_invocations(chart)
    modes = {invocation(c)[2] for _, c in serve_containers(chart)}
    assert modes == set(SERVICES)


def test_env_names_are_read_by_the_server(chart: Rendered) -> None:
    check_env_names(chart)


def test_every_deployment_loads_valid_settings(chart: Rendered) -> None:
    """The server's own settings code accepts each Deployment's flags and environment, with the
    credentials the api needs, and auto-migration off exactly when the hook migrates."""
    migration = VARIANTS[chart.name].migration
    assert bool(chart.of_kind("Job")) is migration
    for owner, container in serve_containers(chart):
        settings = settings_of(chart, owner, container)
        assert settings.mode == component(owner)
        assert settings.auto_migrate is not migration
        assert settings.dev is False
        settings.check_credentials()


def test_only_the_api_gets_credentials(chart: Rendered) -> None:
    for owner in chart.pod_owners():
        for container in containers(owner):
            given = env_names(chart, container) & CREDENTIALS
            if component(owner) == "api":
                assert "QUEUEFLOW_WORKER_TOKEN" in given and given & {
                    "QUEUEFLOW_API_KEYS",
                    "QUEUEFLOW_JWT_SECRET",
                }
            else:
                assert not given, f"{owner['metadata']['name']} does not need {sorted(given)}"
            assert "DATABASE_URL" in env_names(chart, container)


def test_ports_match_the_settings(chart: Rendered) -> None:
    check_ports(chart)


def test_probes(chart: Rendered) -> None:
    check_probes(chart)


def test_grace_period_covers_prestop_and_drain(chart: Rendered) -> None:
    check_grace_periods(chart)


def test_pod_security(chart: Rendered) -> None:
    """The migrations hook runs before the release's ServiceAccount exists: it uses "default"."""
    check_pod_security(chart, preexisting_accounts={"default"})


def test_no_dev_mode_anywhere(chart: Rendered) -> None:
    check_no_dev_mode(chart)


def test_services_select_one_deployment_each(chart: Rendered) -> None:
    check_services(chart)


def test_deployment_selectors_match_their_templates(chart: Rendered) -> None:
    check_deployment_selectors(chart)


def test_pools_fit_their_concurrency(chart: Rendered) -> None:
    check_pools(chart)


def test_disruption_budgets_never_block_drains(chart: Rendered) -> None:
    check_disruption_budgets(chart)


def test_images(chart: Rendered) -> None:
    import yaml

    images = {c["image"] for owner in chart.pod_owners() for c in containers(owner)}
    assert len(images) == 1, f"one image for every service and the Job: {images}"
    app_version = yaml.safe_load((HELM_CHART / "Chart.yaml").read_text())["appVersion"]
    expected = {
        "full": "registry.example.com/team/queueflow:0.6.1",
    }.get(chart.name, f"registry.example.com/queueflow:{app_version}")
    assert images == {expected}


# --- the defaults are the kustomize base ----------------------------------------------------------


def test_defaults_run_what_the_kustomize_base_runs(rendered_variants: dict[str, Rendered]) -> None:
    """With the default values each service runs with exactly the settings, pod shape, replicas,
    autoscaler and budget of deploy/k8s/base, and the worst-case connection count is the same."""
    base = render_kustomization(kustomize_or_skip(), K8S / "base", "base")
    chart = rendered_variants["default"]
    secret = filled_secret_example()
    for name in SERVICES:
        ours, theirs = deployment(chart, name), deployment(base, name)
        (our_container,) = pod_spec(ours)["containers"]
        (their_container,) = pod_spec(theirs)["containers"]
        assert settings_of(chart, ours, our_container) == settings_of(
            base, theirs, their_container, secret
        ), name
        for key in (
            "args",
            "ports",
            "livenessProbe",
            "readinessProbe",
            "lifecycle",
            "resources",
            "securityContext",
        ):
            assert our_container[key] == their_container[key], f"{name}: {key}"
        for key in (
            "terminationGracePeriodSeconds",
            "securityContext",
            "volumes",
            "automountServiceAccountToken",
        ):
            assert pod_spec(ours)[key] == pod_spec(theirs)[key], f"{name}: {key}"
        assert ours["spec"]["strategy"] == theirs["spec"]["strategy"]
        assert ours["spec"].get("replicas") == theirs["spec"].get("replicas"), name
        our_hpa, their_hpa = hpa_for(chart, ours), hpa_for(base, theirs)
        assert (our_hpa is None) is (their_hpa is None), name
        if our_hpa and their_hpa:
            assert our_hpa["spec"]["minReplicas"] == their_hpa["spec"]["minReplicas"]
            assert our_hpa["spec"]["maxReplicas"] == their_hpa["spec"]["maxReplicas"]
            assert our_hpa["spec"]["metrics"] == their_hpa["spec"]["metrics"]
        our_pdbs = [p["spec"] for p in chart.of_kind("PodDisruptionBudget") if component(p) == name]
        their_pdbs = [p["spec"] for p in base.of_kind("PodDisruptionBudget") if component(p) == name]
        assert [{k: v for k, v in p.items() if k != "selector"} for p in our_pdbs] == [
            {k: v for k, v in p.items() if k != "selector"} for p in their_pdbs
        ], name
    (our_job,) = chart.of_kind("Job")
    (their_job,) = base.of_kind("Job")
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert our_job["spec"][key] == their_job["spec"][key], key
    assert pod_spec(our_job)["containers"][0]["args"] == pod_spec(their_job)["containers"][0]["args"]
    assert worst_case_connections(chart) == worst_case_connections(base, secret)


# --- values reach the server ------------------------------------------------------------------------


def test_full_values_reach_the_server(rendered_variants: dict[str, Rendered]) -> None:
    """Each value of ci/full-values.yaml arrives in the settings of the services it is for."""
    chart = rendered_variants["full"]
    settings = {component(d): settings_of(chart, d, c) for d, c in serve_containers(chart)}
    for name, s in settings.items():
        assert s.default_queue == "emails", name
        assert s.cors_origins == ("https://ops.example.com", "http://localhost:5173"), name
        assert s.retention_hours == 168, name
        assert s.queue_retention_defaults == {"audit": "keep", "thumbnails": "remove_completed"}, name
        assert s.log_level == "debug", name
        assert s.shutdown_grace_secs == 45, name
        assert (s.api_port, s.metrics_port) == (8080, 9100), name
        assert (s.lease_grace_secs, s.janitor_batch) == (45, 200), name  # config.extraArgs
        assert s.worker_poll_secs == 2, name  # config.extraEnv
        assert s.retention_interval_secs == 600, name  # config.extraEnvFrom (the user's ConfigMap)
        assert s.database_url.startswith("postgresql://queueflow:ci-only@"), name
    # Pools: the service's own value, else config.maxDbConnections.
    assert {n: s.max_db_connections for n, s in settings.items()} == {
        "api": 16,
        "janitor": 8,
        "workflow": 9,  # its own (the global 8 is too few for it)
        "worker": 20,
        "pusher": 8,
    }
    assert settings["pusher"].push_allow_cidrs == ("10.40.0.0/16",)  # pusher.allowCidrs
    assert settings["api"].max_batch == 500  # api.extraArgs only
    assert {s.max_batch for n, s in settings.items() if n != "api"} == {1000}
    worker = settings["worker"]
    assert (worker.workers, worker.queues, worker.handlers) == (8, ("emails", "reports"), ("myapp.tasks",))
    assert worker.lease_secs == 60  # worker.extraEnv
    assert {s.lease_secs for n, s in settings.items() if n != "worker"} == {30}
    api = settings["api"]
    assert api.worker_token == "ci-worker-token" and api.jwt_secret == "ci-jwt-secret-of-at-least-32-bytes"
    assert [(k.token, k.tenant, k.read_only) for k in api.api_keys] == [
        ("ci-key", "tenant-a", False),
        ("ci-reader", "tenant-a", True),
    ]
    # Single sign-on: every oidc value, for the api only; the client's secret from the chart's Secret.
    assert (api.oidc_issuer, api.oidc_client_id, api.oidc_client_secret) == (
        "https://keycloak.example.com/realms/ops",
        "queueflow",
        "ci-oidc-client-secret",
    )
    assert api.oidc_scopes == "openid profile email offline_access"
    assert (api.oidc_audience, api.oidc_tenant_claim, api.oidc_default_tenant) == (
        "api://queueflow",
        "org.tenant",
        "tenant-a",
    )
    assert api.oidc_roles_claim == "realm_access.roles"
    assert api.oidc_role_map == "qf-admins=admin,qf-operators=operator,qf-viewers=viewer"
    assert api.console_token_login is True
    assert {n: s.oidc_issuer for n, s in settings.items() if n != "api"} == dict.fromkeys(
        set(settings) - {"api"}
    )
    assert {s.public_url for s in settings.values()} == {"https://queueflow.example.com"}
    assert settings["janitor"].audit_retention_days == 400  # config.auditRetentionDays
    # Scheduling and metadata values land on the pods they are for.
    api_pod = deployment(chart, "api")["spec"]["template"]
    assert api_pod["metadata"]["annotations"]["example.com/team"] == "platform"
    assert api_pod["metadata"]["labels"]["example.com/tier"] == "api"
    assert api_pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert api_pod["spec"]["tolerations"][0]["key"] == "dedicated"
    assert "podAntiAffinity" in pod_spec(deployment(chart, "worker"))["affinity"]
    for owner in chart.pod_owners():
        assert pod_spec(owner)["imagePullSecrets"] == [{"name": "registry-credentials"}]
    (account,) = chart.of_kind("ServiceAccount")
    assert account["metadata"]["annotations"] == {"example.com/owner": "platform"}


def test_config_changes_roll_the_pods(helm_bin: str, rendered_variants: dict[str, Rendered]) -> None:
    """The pods carry the ConfigMap's checksum, so a changed setting rolls them on upgrade."""
    before = rendered_variants["default"]
    after = render_with(helm_bin, "config.logLevel=debug")
    assert after.get("ConfigMap", "queueflow-config")["data"]["QUEUEFLOW_LOG_LEVEL"] == "debug"
    for name in SERVICES:
        old = deployment(before, name)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        new = deployment(after, name)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        assert old != new, name
    again = render_with(helm_bin, "config.logLevel=info")
    for name in SERVICES:
        template = deployment(again, name)["spec"]["template"]
        assert template == deployment(before, name)["spec"]["template"], "rendering is deterministic"


# --- credentials ------------------------------------------------------------------------------------


def secret_refs(rendered: Rendered) -> dict[str, set[tuple[str, str]]]:
    """Environment variable -> every (Secret, key) it is taken from, over all pods."""
    refs: dict[str, set[tuple[str, str]]] = {}
    for owner in rendered.pod_owners():
        for container in containers(owner):
            assert not any("secretRef" in s for s in container.get("envFrom", [])), "secrets go key by key"
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.setdefault(item["name"], set()).add((ref["name"], ref["key"]))
    return refs


def test_default_reads_the_secret_the_overlays_read(rendered_variants: dict[str, Rendered]) -> None:
    """No Secret rendered; every key of deploy/k8s/secret.example.yaml read from "queueflow"."""
    chart = rendered_variants["default"]
    assert not chart.of_kind("Secret")
    refs = secret_refs(chart)
    example = load_secret_example()
    assert refs == {key: {("queueflow", key)} for key in example["stringData"]}


def test_existing_secret_mode(rendered_variants: dict[str, Rendered]) -> None:
    """Named Secrets with their own key names: referenced, never rendered; the keys the api can
    do without are optional, the worker token and the database URL are not."""
    chart = rendered_variants["existing-secret"]
    assert not chart.of_kind("Secret")
    assert secret_refs(chart) == {
        "DATABASE_URL": {("pg-credentials", "url")},
        "QUEUEFLOW_WORKER_TOKEN": {("qf-auth", "worker-token")},
        "QUEUEFLOW_API_KEYS": {("qf-auth", "api-keys")},
        "QUEUEFLOW_JWT_SECRET": {("qf-auth", "jwt")},
    }
    for owner in chart.pod_owners():
        for container in containers(owner):
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    optional = item["name"] in {"QUEUEFLOW_API_KEYS", "QUEUEFLOW_JWT_SECRET"}
                    assert ref.get("optional", False) is optional, item
    (job,) = chart.of_kind("Job")
    env = container_env(chart, pod_spec(job)["containers"][0])
    assert env == {"DATABASE_URL": "postgresql://qf:pw@pg.invalid:5432/qf"}


def test_chart_secret_mode(rendered_variants: dict[str, Rendered]) -> None:
    """Without existing Secrets the chart renders one, holding exactly what the pods read from
    it, as a hook that exists before the migrations Job runs."""
    chart = rendered_variants["full"]
    (secret,) = chart.of_kind("Secret")
    assert secret["metadata"]["name"] == "qf-credentials" and secret["type"] == "Opaque"
    refs = secret_refs(chart)
    assert set(secret["stringData"]) == set(refs) == {"DATABASE_URL", *CREDENTIALS}
    assert all(sources == {("qf-credentials", key)} for key, sources in refs.items())
    (job,) = chart.of_kind("Job")
    assert hooks(secret)[HOOK] == hooks(job)[HOOK] == "pre-install,pre-upgrade"
    assert int(hooks(secret)[HOOK_WEIGHT]) < int(hooks(job)[HOOK_WEIGHT])
    api = deployment(chart, "api")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/secret" in api, "a changed credential rolls the pods"


def test_chart_secret_holds_only_the_credentials_given(rendered_variants: dict[str, Rendered]) -> None:
    """Database URL from an existing Secret, the api's credentials from the chart's: the Secret
    holds the two given (no API keys), is an ordinary object without the hook, and the api
    starts with them."""
    chart = rendered_variants["no-migration"]
    (secret,) = chart.of_kind("Secret")
    assert secret["stringData"] == {"QUEUEFLOW_WORKER_TOKEN": "w-token", "QUEUEFLOW_JWT_SECRET": JWT_SECRET}
    assert not hooks(secret)
    refs = secret_refs(chart)
    assert refs["DATABASE_URL"] == {("queueflow", "DATABASE_URL")}
    assert "QUEUEFLOW_API_KEYS" not in refs
    api = deployment(chart, "api")
    settings = settings_of(chart, api, pod_spec(api)["containers"][0])
    assert (settings.worker_token, settings.jwt_secret, settings.api_keys) == ("w-token", JWT_SECRET, ())


def test_missing_credentials_are_refused(helm_bin: str) -> None:
    """The chart fails rather than render pods that could not start."""
    assert "database: set existingSecret" in refuse(helm_bin, "database.existingSecret=")
    assert "workerToken" in refuse(helm_bin, "auth.existingSecret=", "auth.apiKeys=k:t")
    assert "apiKeys and/or jwtSecret" in refuse(helm_bin, "auth.existingSecret=", "auth.workerToken=w")
    # Without the api nothing needs the api's credentials.
    chart = render_with(helm_bin, "api.enabled=false", "auth.existingSecret=")
    assert not chart.of_kind("Secret")
    assert not CREDENTIALS & set(secret_refs(chart))


# --- switching things on and off ----------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_disabled_services_render_nothing(helm_bin: str, service: str) -> None:
    chart = render_with(helm_bin, f"{service}.enabled=false")
    assert chart.component(service) == []
    assert {component(d) for d in chart.deployments()} == set(SERVICES) - {service}
    assert components_of(chart, "Service") == set(SERVICES) - {service}
    check_schemas(chart)
    check_services(chart)


def test_autoscalers_and_budgets_only_when_enabled(
    helm_bin: str, rendered_variants: dict[str, Rendered]
) -> None:
    default, full = rendered_variants["default"], rendered_variants["full"]
    assert components_of(default, "HorizontalPodAutoscaler") == {"api"}
    assert components_of(default, "PodDisruptionBudget") == {"api", "workflow", "worker", "pusher"}
    assert components_of(full, "HorizontalPodAutoscaler") == {"api", "workflow"}
    assert components_of(full, "PodDisruptionBudget") == set(SERVICES)
    off = [f"{s}.{what}.enabled=false" for s in SERVICES for what in ("autoscaling", "podDisruptionBudget")]
    bare = render_with(helm_bin, *off)
    assert not bare.of_kind("HorizontalPodAutoscaler") and not bare.of_kind("PodDisruptionBudget")
    for chart in (default, full, bare):
        for d in chart.deployments():
            # The HPA owns the count: an applied replicas field would reset it on every upgrade.
            assert ("replicas" in d["spec"]) is (hpa_for(chart, d) is None), d["metadata"]["name"]
    assert deployment(bare, "api")["spec"]["replicas"] == 2
    assert deployment(full, "worker")["spec"]["replicas"] == 3
    hpa = hpa_for(full, deployment(full, "api"))
    assert hpa is not None and (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 10)
    # A budget takes exactly one of its bounds.
    (pdb,) = [p for p in full.of_kind("PodDisruptionBudget") if component(p) == "janitor"]
    assert pdb["spec"]["minAvailable"] == 1 and "maxUnavailable" not in pdb["spec"]
    assert "exactly one" in refuse(helm_bin, "api.podDisruptionBudget.maxUnavailable=1")
    assert "exactly one" in refuse(helm_bin, "workflow.podDisruptionBudget.maxUnavailable=")


# --- the migrations hook ----------------------------------------------------------------------------


def test_migrations_hook(chart: Rendered) -> None:
    jobs = chart.of_kind("Job")
    if not VARIANTS[chart.name].migration:
        assert jobs == []
        return
    (job,) = jobs
    assert component(job) == "migrate"
    assert hooks(job) == {
        HOOK: "pre-install,pre-upgrade",
        HOOK_WEIGHT: "0",
        # The next upgrade replaces the finished Job (its pod template is immutable).
        "helm.sh/hook-delete-policy": "before-hook-creation",
    }
    (container,) = pod_spec(job)["containers"]
    assert invocation(container) == ["migrate"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1 and job["spec"]["activeDeadlineSeconds"] > 0
    assert set(container_env(chart, container)) == {"DATABASE_URL"}
    assert "envFrom" not in container, "the hook runs before the ConfigMap exists"
    # It runs before the release's ServiceAccount exists too.
    assert pod_spec(job)["serviceAccountName"] == "default"
    for doc in chart.docs:
        if doc is not job and HOOK in hooks(doc):
            assert doc["kind"] == "Secret", f"{doc['kind']} would not be part of the release"


def test_migrations_hook_uses_an_existing_service_account(helm_bin: str) -> None:
    chart = render_with(helm_bin, "serviceAccount.create=false", "serviceAccount.name=queueflow-runner")
    assert not chart.of_kind("ServiceAccount")
    for owner in chart.pod_owners():
        assert pod_spec(owner)["serviceAccountName"] == "queueflow-runner"
    check_pod_security(chart, preexisting_accounts={"queueflow-runner"})


# --- network policy, monitoring, releases side by side ----------------------------------------------


def test_network_policy(chart: Rendered) -> None:
    (policy,) = [p for p in chart.of_kind("NetworkPolicy") if "Ingress" in p["spec"]["policyTypes"]]
    spec = policy["spec"]
    for d in chart.deployments():
        assert selector_matches(
            spec["podSelector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"]
        )
    api = deployment(chart, "api")
    settings = settings_of(chart, api, pod_spec(api)["containers"][0])
    open_rule, metrics_rule = spec["ingress"]
    assert open_rule == {"ports": [{"port": settings.api_port, "protocol": "TCP"}]}
    assert metrics_rule["ports"] == [{"port": settings.metrics_port, "protocol": "TCP"}]
    assert metrics_rule["from"] and all(source != {} for source in metrics_rule["from"])


def test_egress_policy(chart: Rendered) -> None:
    """Every variant: DNS, the database and OTLP only (the full values widen it, below)."""
    (policy,) = [
        p
        for p in chart.of_kind("NetworkPolicy")
        if p["metadata"]["name"].endswith("-egress")
        and not p["metadata"]["name"].endswith(("-pusher-egress", "-oidc-egress"))
    ]
    if chart.name == "full":
        assert (6432, "TCP") in egress_ports(policy)
        return
    check_egress(chart, policy)


def test_default_egress_is_the_kustomize_bases(rendered_variants: dict[str, Rendered]) -> None:
    base = render_kustomization(kustomize_or_skip(), K8S / "base", "base")
    for suffix in ("-egress", "-pusher-egress"):
        theirs = base.get("NetworkPolicy", f"queueflow{suffix}")["spec"]
        (ours,) = [
            p["spec"]
            for p in rendered_variants["default"].of_kind("NetworkPolicy")
            if p["metadata"]["name"].endswith(suffix)
            and (suffix != "-egress" or "-pusher-" not in p["metadata"]["name"])
        ]
        assert ours["egress"] == theirs["egress"] and ours["policyTypes"] == theirs["policyTypes"], suffix


def test_egress_ports_and_destinations_come_from_the_values(rendered_variants: dict[str, Rendered]) -> None:
    """full-values.yaml: the database on two ports and one subnet, OTLP to a collector's pods, DNS
    on the default port, and one extra rule for what the handlers call."""
    (policy,) = [
        p for p in rendered_variants["full"].of_kind("NetworkPolicy") if p["metadata"]["name"] == "qf-egress"
    ]
    rules = policy["spec"]["egress"]
    database = next(r for r in rules if {p["port"] for p in r["ports"]} == {5432, 6432})
    assert database["to"] == [{"ipBlock": {"cidr": "10.20.0.0/24"}}]
    otlp = next(r for r in rules if {p["port"] for p in r["ports"]} == {4318})
    assert otlp["to"] == [
        {"ipBlock": {"cidr": "10.30.0.5/32"}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}},
    ]
    assert rules[-1] == {
        "to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}],
        "ports": [{"port": 443, "protocol": "TCP"}],
    }
    assert all(rule.get("ports") for rule in rules)


def test_egress_policy_can_be_switched_off(helm_bin: str) -> None:
    names = {
        p["metadata"]["name"]
        for p in render_with(helm_bin, "networkPolicy.egress.enabled=false").of_kind("NetworkPolicy")
    }
    assert names == {"queueflow"}, "the ingress policy stays"
    assert not render_with(helm_bin, "networkPolicy.enabled=false").of_kind("NetworkPolicy")


def test_values_schema_rejects_egress_mistakes(helm_bin: str) -> None:
    assert "ports" in refuse(helm_bin, "networkPolicy.egress.database.ports={http}")
    assert "ports" in refuse(helm_bin, "networkPolicy.egress.otlp.ports={70000}")
    assert "cidrs" in refuse(helm_bin, "networkPolicy.egress.database.cidrs={db.example.com}")
    assert "cidr" in refuse(helm_bin, "networkPolicy.egress.database.cidr=10.0.0.0/8")


def test_service_monitor(rendered_variants: dict[str, Rendered]) -> None:
    assert not rendered_variants["default"].of_kind("ServiceMonitor"), "off unless the CRDs exist"
    full = rendered_variants["full"]
    (monitor,) = full.of_kind("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selected = [
        s
        for s in full.of_kind("Service")
        if selector_matches(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert {component(s) for s in selected} == set(SERVICES)
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("metrics", "/metrics", "15s")


def test_two_releases_share_a_namespace(helm_bin: str) -> None:
    """Names and selectors carry the release, so a second release never adopts the first's pods."""
    base = VARIANTS["default"]
    one = render(helm_bin, "one", Variant(release="one", external=base.external))
    two = render(helm_bin, "two", Variant(release="two", external=base.external))
    names_one = {(d["kind"], d["metadata"]["name"]) for d in one.docs}
    names_two = {(d["kind"], d["metadata"]["name"]) for d in two.docs}
    assert not names_one & names_two
    for d in one.deployments():
        selector = d["spec"]["selector"]["matchLabels"]
        for other in two.deployments():
            assert not selector_matches(selector, other["spec"]["template"]["metadata"]["labels"])
    for s in one.of_kind("Service"):
        for other in two.deployments():
            assert not selector_matches(
                s["spec"]["selector"], other["spec"]["template"]["metadata"]["labels"]
            )


# --- single sign-on and the audit log's retention ---------------------------------------------------

OIDC_SETTINGS = sign_on_env_names()
SSO = ("oidc.enabled=true", "oidc.issuer=https://id.example.com", "oidc.clientId=queueflow")
PUBLIC_URL = "config.publicUrl=https://queueflow.example.com"


def oidc_egress(rendered: Rendered) -> list[dict[str, Any]]:
    return [p for p in rendered.of_kind("NetworkPolicy") if p["metadata"]["name"].endswith("-oidc-egress")]


def test_oidc_settings_reach_the_api_alone(rendered_variants: dict[str, Rendered]) -> None:
    """ci/oidc-values.yaml: the api gets the QUEUEFLOW_OIDC_* settings from the ConfigMap
    <fullname>-oidc and the client's secret from the Secret "queueflow" (optional: a public client
    has none), and starts with single sign-on as its only tenant credential; no other pod gets
    any of it."""
    chart = rendered_variants["oidc"]
    config_map = chart.get("ConfigMap", "queueflow-oidc")
    assert config_map["data"] == {
        "QUEUEFLOW_OIDC_ISSUER": "https://login.example.com/oauth2/default",
        "QUEUEFLOW_OIDC_CLIENT_ID": "0oa1queueflow",
        "QUEUEFLOW_OIDC_SCOPES": "openid profile email",
        "QUEUEFLOW_OIDC_TENANT_CLAIM": "tenant",
        "QUEUEFLOW_OIDC_ROLES_CLAIM": "groups",
        "QUEUEFLOW_OIDC_ROLE_MAP": "qf-admins=admin,qf-operators=operator",
        "QUEUEFLOW_CONSOLE_TOKEN_LOGIN": "false",
    }
    assert not OIDC_SETTINGS & set(chart.get("ConfigMap", "queueflow-config")["data"])
    api = deployment(chart, "api")
    (container,) = pod_spec(api)["containers"]
    assert {"configMapRef": {"name": "queueflow-oidc"}} in container["envFrom"]
    (secret_item,) = [e for e in container["env"] if e["name"] == "QUEUEFLOW_OIDC_CLIENT_SECRET"]
    assert secret_item["valueFrom"]["secretKeyRef"] == {
        "name": "queueflow",
        "key": "QUEUEFLOW_OIDC_CLIENT_SECRET",
        "optional": True,
    }
    settings = settings_of(chart, api, container)
    assert settings.oidc_issuer == "https://login.example.com/oauth2/default"
    assert settings.oidc_client_id == "0oa1queueflow"
    assert settings.oidc_client_secret == "oidc-client-secret"
    assert (settings.oidc_roles_claim, settings.oidc_role_map) == (
        "groups",
        "qf-admins=admin,qf-operators=operator",
    )
    assert settings.public_url == "https://queueflow.example.com"
    assert (settings.api_keys, settings.jwt_secret) == ((), None)
    settings.check_credentials()  # single sign-on is enough beside the worker token
    assert "checksum/oidc" in api["spec"]["template"]["metadata"]["annotations"]
    for owner in chart.pod_owners():
        if component(owner) == "api":
            continue
        for other in containers(owner):
            assert not OIDC_SETTINGS & env_names(chart, other), owner["metadata"]["name"]
            assert settings_of(chart, owner, other).oidc_issuer is None
        assert "checksum/oidc" not in owner["spec"]["template"]["metadata"].get("annotations", {})


def test_the_janitor_gets_the_audit_retention(rendered_variants: dict[str, Rendered]) -> None:
    """config.auditRetentionDays reaches the janitor, which prunes the audit log; unset, the
    server's default (90 days) holds."""
    expected = {"oidc": 365.0, "full": 400.0, "default": 90.0}
    for name, days in expected.items():
        chart = rendered_variants[name]
        janitor = deployment(chart, "janitor")
        (container,) = pod_spec(janitor)["containers"]
        assert ("QUEUEFLOW_AUDIT_RETENTION_DAYS" in env_names(chart, container)) is (name != "default")
        assert settings_of(chart, janitor, container).audit_retention_days == days, name


def test_oidc_egress_lets_only_the_api_reach_the_provider(
    helm_bin: str, rendered_variants: dict[str, Rendered]
) -> None:
    """networkPolicy.egress.oidc: a policy of its own selecting the api pods alone, on the ports
    and to the destinations of the values (as the database and OTLP rules); the shared egress
    policy stays DNS, PostgreSQL and OTLP."""
    for name, fullname, rule in (
        (
            "oidc",
            "queueflow",
            {"ports": [{"port": 443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "198.51.100.0/24"}}]},
        ),
        (
            "full",
            "qf",
            {
                "ports": [{"port": 443, "protocol": "TCP"}, {"port": 8443, "protocol": "TCP"}],
                "to": [
                    {"ipBlock": {"cidr": "203.0.113.0/24"}},
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keycloak"}}},
                ],
            },
        ),
    ):
        chart = rendered_variants[name]
        (policy,) = oidc_egress(chart)
        assert policy["metadata"]["name"] == f"{fullname}-oidc-egress"
        spec = policy["spec"]
        assert spec["policyTypes"] == ["Egress"] and spec["egress"] == [rule], name
        selected = [
            component(owner)
            for owner in chart.pod_owners()
            if selector_matches(
                spec["podSelector"]["matchLabels"], owner["spec"]["template"]["metadata"]["labels"]
            )
        ]
        assert selected == ["api"], name
        shared = chart.get("NetworkPolicy", f"{fullname}-egress")
        assert rule not in shared["spec"]["egress"], "the other pods stay off the provider"
        if name == "oidc":
            assert (443, "TCP") not in egress_ports(shared)
    # Neither cidrs nor to: any address on 443.
    chart = render_with(helm_bin, *SSO, PUBLIC_URL)
    (policy,) = oidc_egress(chart)
    assert policy["spec"]["egress"] == [{"ports": [{"port": 443, "protocol": "TCP"}]}]
    assert not oidc_egress(render_with(helm_bin, *SSO, PUBLIC_URL, "networkPolicy.egress.enabled=false"))


@pytest.mark.parametrize("variant", ["default", "existing-secret", "no-migration"])
def test_without_oidc_nothing_of_it_renders(rendered_variants: dict[str, Rendered], variant: str) -> None:
    chart = rendered_variants[variant]
    assert not any(c["metadata"]["name"].endswith("-oidc") for c in chart.of_kind("ConfigMap"))
    assert not oidc_egress(chart)
    assert "QUEUEFLOW_OIDC_CLIENT_SECRET" not in secret_refs(chart)
    for owner in chart.pod_owners():
        for container in containers(owner):
            assert not OIDC_SETTINGS & env_names(chart, container), owner["metadata"]["name"]
            assert "QUEUEFLOW_PUBLIC_URL" not in env_names(chart, container)
        assert "checksum/oidc" not in owner["spec"]["template"]["metadata"].get("annotations", {})
    for secret in chart.of_kind("Secret"):
        assert "QUEUEFLOW_OIDC_CLIENT_SECRET" not in secret["stringData"]


def test_oidc_values_do_nothing_until_enabled(helm_bin: str, rendered_variants: dict[str, Rendered]) -> None:
    """Filled in but not enabled, or enabled without an api: nothing of single sign-on renders,
    and the client's secret stays out of the chart's Secret."""
    filled = ("oidc.issuer=https://id.example.com", "oidc.clientId=queueflow", "auth.oidcClientSecret=s3cret")
    default = rendered_variants["default"]
    assert render_with(helm_bin, *filled).docs == default.docs
    no_api = render_with(
        helm_bin, *SSO, PUBLIC_URL, "api.enabled=false", "auth.existingSecret=", "auth.oidcClientSecret=s"
    )
    assert not oidc_egress(no_api) and not no_api.find("ConfigMap", "queueflow-oidc")
    assert not no_api.of_kind("Secret")


def test_sso_only_credentials_in_the_chart_secret(helm_bin: str) -> None:
    """From the chart's own Secret: a worker token and the client's secret suffice (no API keys,
    no JWT secret); without a client secret (a public client) the api gets none."""
    chart = render_with(
        helm_bin,
        *SSO,
        PUBLIC_URL,
        "auth.existingSecret=",
        "auth.workerToken=w",
        "auth.oidcClientSecret=s3cret",
    )
    (secret,) = chart.of_kind("Secret")
    assert secret["stringData"] == {"QUEUEFLOW_WORKER_TOKEN": "w", "QUEUEFLOW_OIDC_CLIENT_SECRET": "s3cret"}
    api = deployment(chart, "api")
    settings = settings_of(chart, api, pod_spec(api)["containers"][0])
    assert (settings.oidc_client_secret, settings.api_keys, settings.jwt_secret) == ("s3cret", (), None)
    settings.check_credentials()
    public = render_with(helm_bin, *SSO, PUBLIC_URL, "auth.existingSecret=", "auth.workerToken=w")
    (secret,) = public.of_kind("Secret")
    assert secret["stringData"] == {"QUEUEFLOW_WORKER_TOKEN": "w"}
    assert "QUEUEFLOW_OIDC_CLIENT_SECRET" not in secret_refs(public)


def test_oidc_changes_roll_the_api_alone(helm_bin: str) -> None:
    before = render_with(helm_bin, *SSO, PUBLIC_URL)
    after = render_with(helm_bin, *SSO, PUBLIC_URL, "oidc.rolesClaim=groups")
    assert after.get("ConfigMap", "queueflow-oidc")["data"]["QUEUEFLOW_OIDC_ROLES_CLAIM"] == "groups"
    for name in SERVICES:
        old, new = deployment(before, name)["spec"]["template"], deployment(after, name)["spec"]["template"]
        assert (old != new) is (name == "api"), name


def test_oidc_needs_its_settings(helm_bin: str) -> None:
    """The chart fails rather than render an api that refuses to start."""
    assert "oidc.issuer" in refuse(helm_bin, "oidc.enabled=true", "oidc.clientId=qf", PUBLIC_URL)
    assert "oidc.clientId" in refuse(
        helm_bin, "oidc.enabled=true", "oidc.issuer=https://id.example.com", PUBLIC_URL
    )
    assert "config.publicUrl" in refuse(helm_bin, *SSO)


def test_values_schema_rejects_oidc_mistakes(helm_bin: str) -> None:
    assert "issuerUrl" in refuse(helm_bin, "oidc.issuerUrl=https://id.example.com")
    assert "issuer" in refuse(helm_bin, "oidc.issuer=http://id.example.com")
    assert "issuer" in refuse(helm_bin, "oidc.issuer=id.example.com")
    assert "enabled" in refuse(helm_bin, "oidc.enabled=yes please")
    assert "consoleTokenLogin" in refuse(helm_bin, "oidc.consoleTokenLogin=sometimes")
    assert "scopes" in refuse(helm_bin, "oidc.scopes=openid profile")
    assert "roleMap" in refuse(helm_bin, "oidc.roleMap.qf-admins=root")
    assert "publicUrl" in refuse(helm_bin, "config.publicUrl=queueflow.example.com")
    assert "auditRetentionDays" in refuse(helm_bin, "config.auditRetentionDays=-1")
    assert "oidcClientSecret" in refuse(helm_bin, "auth.existingSecretKeys.oidcClientSecret=")
    assert "ports" in refuse(helm_bin, "networkPolicy.egress.oidc.ports={https}")
    assert "cidrs" in refuse(helm_bin, "networkPolicy.egress.oidc.cidrs={id.example.com}")
    assert "cidr" in refuse(helm_bin, "networkPolicy.egress.oidc.cidr=10.0.0.0/8")


# --- documentation ---------------------------------------------------------------------------------

# Values whose content is free-form Kubernetes (documented as one row each).
OPAQUE = {
    "resources",
    "podAnnotations",
    "podLabels",
    "nodeSelector",
    "tolerations",
    "affinity",
    "annotations",
    "labels",
}


def value_paths(values: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in OPAQUE:
            paths |= value_paths(value, path + ".")
        else:
            paths.add(path)
    return paths


def test_docs_describe_every_value() -> None:
    """docs/deployment.md's values table names every value (per-service ones as `<service>.x`)."""
    import yaml

    values = yaml.safe_load((HELM_CHART / "values.yaml").read_text())
    doc = (REPO / "docs" / "deployment.md").read_text()
    shared = set.intersection(*(value_paths(values[s]) for s in SERVICES))
    paths = set()
    for path in value_paths(values):
        head, _, rest = path.partition(".")
        paths.add(f"<service>.{rest}" if head in SERVICES and rest in shared else path)
    assert "worker.queues" in paths and "<service>.replicas" in paths
    missing = sorted(p for p in paths if f"`{p}`" not in doc)
    assert missing == [], f"docs/deployment.md, Helm values: no row for {missing}"
