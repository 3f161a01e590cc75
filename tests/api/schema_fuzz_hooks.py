"""Schemathesis hooks for tests/api/test_schema_fuzz.py (loaded through SCHEMATHESIS_HOOKS).

They help the generator with what JSON Schema cannot say, and only there: a generated workflow's
step names are made unique and its dependencies made to name earlier steps (so there is no cycle
and no unknown name; the document says both in words), in a workflow or a cron schedule's, whose
fan-outs are shrunk when it could create more jobs than the server's --workflow-max-jobs (the
document says so in words), a worker key's `expires_at` is moved
into the future (the document says so in words), and a push endpoint's `url` is made one whose
host is public (the document says so in words). Only valid (positive) cases are repaired: an
invalid case must stay invalid.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis


def repair_workflow(definition: Any) -> None:
    """Make step names unique and point each dependency at an earlier step, in place and
    recursively; anything not shaped like a workflow is left as it is."""
    if not isinstance(definition, dict) or not isinstance(definition.get("steps"), list):
        return
    earlier: list[str] = []
    for index, step in enumerate(definition["steps"]):
        if not isinstance(step, dict) or not isinstance(step.get("name"), str):
            continue
        if step["name"] in earlier:
            step["name"] = f"{step['name'][:240]}~{index}"
        deps = step.get("depends_on")
        if isinstance(deps, list):
            # Deterministic (no hash randomisation), so that a seed replays the same requests.
            step["depends_on"] = (
                [earlier[zlib.crc32(str(d).encode()) % len(earlier)] for d in deps] if earlier else []
            )
        earlier.append(step["name"])
        repair_workflow(step.get("workflow"))


MAX_JOBS, MAX_FAN_OUT = 100_000, 10_000  # the fuzzed server's --workflow-max-jobs and -max-fan-out


def _fan_outs(definition: Any) -> list[dict[str, Any]]:
    if not isinstance(definition, dict) or not isinstance(definition.get("steps"), list):
        return []
    found: list[dict[str, Any]] = []
    for step in definition["steps"]:
        if isinstance(step, dict):
            if isinstance(step.get("fan_out"), dict):
                found.append(step["fan_out"])
            found += _fan_outs(step.get("workflow"))
    return found


def fit_budget(definition: Any) -> None:
    """Every fan-out's `max_items` set to 0 when the fan-outs alone could exceed the job budget."""
    fan_outs = _fan_outs(definition)
    most = sum(f["max_items"] if isinstance(f.get("max_items"), int) else MAX_FAN_OUT for f in fan_outs)
    if most > MAX_JOBS - 10_000:  # room for every task step a body can hold
        for fan_out in fan_outs:
            fan_out["max_items"] = 0


def repair_expiry(body: Any) -> None:
    """A worker key's `expires_at`, when given, a day from now."""
    if isinstance(body, dict) and isinstance(body.get("expires_at"), str):
        body["expires_at"] = (datetime.now(UTC) + timedelta(days=1)).isoformat()


STEP_SECS = {"1m": 60, "5m": 300, "10m": 600, "15m": 900, "30m": 1800, "1h": 3600}
WINDOW_SECS = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400}


def fit_step(query: Any) -> None:
    """A series' `step` left out (so the window's default) when it does not divide its `window`
    (the document says so in words)."""
    if not isinstance(query, dict) or query.get("step") not in STEP_SECS:
        return
    window = WINDOW_SECS.get(query.get("window", "1h"), 0)
    if not window or window % STEP_SECS[query["step"]] or STEP_SECS[query["step"]] > window:
        del query["step"]


def repair_push_url(body: Any) -> None:
    """A push endpoint's `url`, when given, one on a public host (a name that does not resolve in
    the test's sandbox is accepted, and so is one that resolves to a public address)."""
    if isinstance(body, dict) and isinstance(body.get("url"), str):
        body["url"] = "https://push.example.com/queueflow"


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    meta = case.meta
    if meta is not None and meta.generation.mode.is_positive:
        if case.operation.path.startswith("/api/v1/push-endpoints"):
            repair_push_url(case.body)
        if case.operation.path == "/api/v1/workflows":
            repair_workflow(case.body)
            fit_budget(case.body)
        elif case.operation.path == "/api/v1/stats/series":
            fit_step(case.query)
        elif case.operation.path == "/api/v1/cron" and isinstance(case.body, dict):
            repair_workflow(case.body.get("workflow"))  # a schedule that starts a workflow
            fit_budget(case.body.get("workflow"))
        elif case.operation.path == "/api/v1/worker-keys" and case.operation.method.upper() == "POST":
            repair_expiry(case.body)
    return case
