"""What the observability tests compare: the metrics shared/metrics.py defines, the ones
docs/operations.md documents, and the metric and label names a PromQL expression uses."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from shared import metrics

REPO = Path(__file__).resolve().parents[2]
OPERATIONS_DOC = REPO / "docs" / "operations.md"
DASHBOARD = REPO / "deploy" / "grafana" / "queueflow-overview.json"
# Labels Prometheus itself attaches to every scraped series, and the histogram bucket label.
TARGET_LABELS = {"job", "instance"}


@dataclass(frozen=True)
class MetricDef:
    name: str  # as exposed in `# TYPE` lines: counters with `_total`, histograms by base name
    type: str
    labels: tuple[str, ...]
    series: frozenset[str]  # every sample name it can expose


def defined_metrics() -> dict[str, MetricDef]:
    """Every metric object in shared/metrics.py, keyed by its exposed name."""
    out = {}
    for value in vars(metrics).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        base, kind = value._name, value._type  # prometheus_client keeps them private; stable for years
        labels = tuple(value._labelnames)
        if kind == "counter":
            exposed, series = f"{base}_total", {f"{base}_total", f"{base}_created"}
        elif kind == "histogram":
            exposed, series = base, {f"{base}_bucket", f"{base}_sum", f"{base}_count", f"{base}_created"}
        else:
            exposed, series = base, {base}
        out[exposed] = MetricDef(exposed, kind, labels, frozenset(series))
    return out


def series_index() -> dict[str, MetricDef]:
    """Sample name (queueflow_x_total, queueflow_y_bucket, ...) -> its metric."""
    return {s: m for m in defined_metrics().values() for s in m.series}


_ROW = re.compile(r"^\| `(queueflow_\w+)` \| (counter|gauge|histogram|summary) \|([^|]*)\| .+ \|$", re.M)


def documented_metrics(text: str | None = None) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The metrics table of docs/operations.md: name -> (type, labels)."""
    text = OPERATIONS_DOC.read_text() if text is None else text
    return {m[1]: (m[2], tuple(re.findall(r"`(\w+)`", m[3]))) for m in _ROW.finditer(text)}


def fenced_blocks(language: str, text: str | None = None) -> list[str]:
    text = OPERATIONS_DOC.read_text() if text is None else text
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


_IDENT = re.compile(r"\b(queueflow_[a-z0-9_]+)\b")
_SELECTOR = re.compile(r"\{([^{}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def metric_names(expr: str) -> set[str]:
    return set(_IDENT.findall(expr))


def label_names(expr: str) -> set[str]:
    """Labels named in selectors and in by/without/on/ignoring clauses."""
    names = {m for sel in _SELECTOR.findall(expr) for m in _MATCHER.findall(sel)}
    names |= {n.strip() for group in _GROUPING.findall(expr) for n in group.split(",") if n.strip()}
    return names


def check_expr(expr: str, allowed_labels: Iterable[str] = ()) -> list[str]:
    """Problems with one PromQL expression: unknown metric names, labels none of its metrics has,
    unbalanced brackets, histogram_quantile over anything but buckets grouped by `le`."""
    index = series_index()
    problems = []
    used = metric_names(expr)
    if not used:
        problems.append(f"no queueflow metric in {expr!r}")
    unknown = sorted(n for n in used if n not in index)
    problems += [f"unknown metric {n!r} in {expr!r}" for n in unknown]
    labels = set(TARGET_LABELS) | set(allowed_labels)
    for name in used - set(unknown):
        labels |= set(index[name].labels)
        if name.endswith("_bucket"):
            labels.add("le")
    problems += [
        f"label {n!r} belongs to none of {sorted(used)} in {expr!r}"
        for n in sorted(label_names(expr) - labels)
    ]
    for opening, closing in ("()", "[]", "{}"):
        if expr.count(opening) != expr.count(closing):
            problems.append(f"unbalanced {opening}{closing} in {expr!r}")
    if "histogram_quantile" in expr and (
        not all(n.endswith("_bucket") for n in used) or not re.search(r"by \([^)]*\ble\b", expr)
    ):
        problems.append(f"histogram_quantile needs _bucket series grouped by le: {expr!r}")
    return problems
