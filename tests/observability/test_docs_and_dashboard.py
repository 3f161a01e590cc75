"""The Grafana dashboard, the metrics table, the alert rules and the log events in
docs/operations.md agree with the code: every metric, label and event they name exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.observability.catalog import (
    DASHBOARD,
    OPERATIONS_DOC,
    REPO,
    check_expr,
    defined_metrics,
    documented_metrics,
    fenced_blocks,
)

DASHBOARD_JSON = json.loads(DASHBOARD.read_text())
PANELS = [p for p in DASHBOARD_JSON["panels"] if p["type"] != "row"]
DOC = OPERATIONS_DOC.read_text()


def code_text() -> str:
    return "\n".join(
        p.read_text() for folder in ("services", "shared") for p in sorted((REPO / folder).rglob("*.py"))
    )


# --- the dashboard -------------------------------------------------------------------------------


def test_dashboard_is_a_grafana_dashboard_model():
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time", "refresh", "tags"):
        assert key in DASHBOARD_JSON, key
    assert DASHBOARD_JSON["id"] is None  # importable into any Grafana
    assert isinstance(DASHBOARD_JSON["schemaVersion"], int) and DASHBOARD_JSON["schemaVersion"] >= 36
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", DASHBOARD_JSON["uid"])
    ids = [p["id"] for p in DASHBOARD_JSON["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_dashboard_panels_fit_the_24_column_grid_without_overlapping():
    taken: set[tuple[int, int]] = set()
    for panel in DASHBOARD_JSON["panels"]:
        g = panel["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_every_dashboard_query_uses_existing_metrics_and_labels():
    problems = []
    for panel in PANELS:
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            problems += [f"{panel['title']}: {p}" for p in check_expr(target["expr"])]
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")):
                if label not in set(check_labels_of(target["expr"])):
                    problems.append(f"{panel['title']}: legend uses {label!r}, not grouped by it")
    assert problems == []


def check_labels_of(expr: str) -> list[str]:
    grouped = re.findall(r"\bby \(([^)]*)\)", expr)
    return [n.strip() for g in grouped for n in g.split(",")]


def test_dashboard_variables_are_defined_and_panels_use_the_datasource_variable():
    defined = {v["name"] for v in DASHBOARD_JSON["templating"]["list"]}
    assert {"datasource", "queue"} <= defined
    text = DASHBOARD.read_text()
    used = set(re.findall(r"\$\{?(\w+)", text)) - {"__rate_interval", "__interval", "__range"}
    assert used <= defined
    for panel in PANELS:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_dashboard_covers_backlog_age_throughput_latency_http_waiters_and_store():
    exprs = " ".join(t["expr"] for p in PANELS for t in p["targets"])
    for needed in (
        "queueflow_queue_pending_jobs",
        "queueflow_queue_oldest_pending_age_seconds",
        "queueflow_jobs_completed_total",
        "queueflow_jobs_failed_total",
        "queueflow_jobs_retried_total",
        "queueflow_jobs_dead_lettered_total",
        "queueflow_handler_duration_seconds_bucket",
        "queueflow_job_queue_wait_seconds_bucket",
        "queueflow_http_requests_total",
        "queueflow_http_request_duration_seconds_bucket",
        "queueflow_long_poll_waiters",
        "queueflow_store_up",
    ):
        assert needed in exprs, needed
    assert exprs.count("histogram_quantile") >= 7


# --- docs/operations.md --------------------------------------------------------------------------


def test_the_metrics_table_lists_every_metric_with_its_type_and_labels():
    documented = documented_metrics()
    defined = {name: (m.type, m.labels) for name, m in defined_metrics().items()}
    assert documented == defined


def test_every_metric_named_anywhere_in_operations_md_exists():
    defined = defined_metrics()
    index = {s for m in defined.values() for s in m.series} | set(defined)
    index |= {name.removesuffix("_total") for name in defined}  # a counter's name in the code
    # Log events and NOTIFY channels share the prefix; metric names are the ones in metric contexts.
    mentioned = set(re.findall(r"\b(queueflow_\w+?)(?:\{|\[|`| |\)|$)", DOC, re.M))
    events = set(re.findall(r"^\| `(\w+)` \| (?:debug|info|warning|error)", DOC, re.M))
    channels = {"queueflow_work", "queueflow_delayed", "queueflow_job_events"}
    assert mentioned - events - channels <= index


def test_the_alert_rules_parse_and_use_existing_metrics_and_labels():
    [rules_yaml] = fenced_blocks("yaml")
    doc = yaml.safe_load(rules_yaml)
    rules = [r for group in doc["groups"] for r in group["rules"]]
    names = {r["alert"] for r in rules}
    assert {
        "QueueFlowOldestPendingJobTooOld",
        "QueueFlowDatabaseUnreachable",
        "QueueFlowJobsDeadLettered",
        "QueueFlowHTTPServerErrors",
        "QueueFlowNoHealthyJanitor",
    } <= names
    problems = []
    for rule in rules:
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        problems += [f"{rule['alert']}: {p}" for p in check_expr(rule["expr"])]
        templated = set(re.findall(r"\$labels\.(\w+)", json.dumps(rule["annotations"])))
        assert templated <= set(check_labels_of(rule["expr"])) | {"job", "instance"}, rule["alert"]
    assert problems == []
    oldest = next(r for r in rules if r["alert"] == "QueueFlowOldestPendingJobTooOld")
    assert oldest["expr"].endswith("> 300")


def test_every_documented_log_event_is_emitted_by_the_code():
    documented = re.findall(r"^\| `(\w+)` \| (?:debug|info|warning|error)", DOC, re.M)
    code = code_text()
    assert len(documented) > 20
    assert [e for e in documented if f'"{e}"' not in code] == []


def test_the_events_the_brief_names_are_documented():
    documented = set(re.findall(r"^\| `(\w+)` \|", DOC, re.M))
    assert {"job_failed", "lease_reclaimed", "request_served", "job_handler_cancelled"} <= documented


def test_docs_link_to_files_that_exist():
    for doc in ("operations.md", "handlers.md", "enqueue.md"):
        text = (REPO / "docs" / doc).read_text()
        for target in re.findall(r"\]\(([^)#:]+)\)", text):
            assert (REPO / "docs" / target).resolve().exists(), f"{doc} links to missing {target}"
        for path in re.findall(r"`((?:deploy|examples|tests|shared|services)/[\w./-]+)`", text):
            assert Path(REPO / path.split("::")[0]).exists(), f"{doc} names missing {path}"
