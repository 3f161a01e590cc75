"""Figures, their summaries over runs (median, min, max), the stdout table and results.json."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Figure:
    """One reported number. `ref` names the pgbench (scenario L) figure printed beside it."""

    key: str
    label: str
    unit: str
    ref: str | None = None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        return math.nan
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": list(values)}


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dataclass
class ScenarioResult:
    name: str
    title: str
    figures: list[Figure]
    runs: list[dict[str, float]]
    meta: dict[str, Any]

    def summary(self) -> dict[str, dict[str, Any]]:
        out = {}
        for fig in self.figures:
            values = [r[fig.key] for r in self.runs if fig.key in r]
            if values:
                out[fig.key] = {
                    "label": fig.label,
                    "unit": fig.unit,
                    "reference": fig.ref,
                    **summarize(values),
                }
        return out

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "meta": self.meta, "figures": self.summary()}


def reference_lookup(results: dict[str, dict[str, Any]]) -> dict[str, tuple[str, float, str]]:
    """'L.<key>' -> (label, median, unit) from a scenario-L entry of results.json, if any."""
    entry = results.get("L")
    if not entry:
        return {}
    return {f"L.{k}": (v["label"], v["median"], v["unit"]) for k, v in entry["figures"].items()}


def table(
    results: Sequence[ScenarioResult], refs: dict[str, tuple[str, float, str]], ref_note: str | None
) -> str:
    header = ("id", "figure", "median", "min", "max", "unit", "pgbench reference (median)")
    rows: list[tuple[str, ...]] = []
    for res in results:
        summary = res.summary()
        first = True
        for fig in res.figures:
            s = summary.get(fig.key)
            if s is None:
                continue
            ref = "-"
            if fig.ref:
                found = refs.get(fig.ref)
                ref = f"{found[0]}: {fmt(found[1])} {found[2]}" if found else "(run L)"
            rows.append(
                (
                    res.name if first else "",
                    fig.label,
                    fmt(s["median"]),
                    fmt(s["min"]),
                    fmt(s["max"]),
                    fig.unit,
                    ref,
                )
            )
            first = False
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    right = {2, 3, 4}

    def line(r: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)
        ).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    prev = None
    for r in rows:
        if r[0] and prev is not None:
            out.append("")
        out.append(line(r))
        prev = r
    if ref_note:
        out += ["", ref_note]
    return "\n".join(out)


def load_results(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_results(path: Path, meta: dict[str, Any], results: Sequence[ScenarioResult]) -> dict[str, Any]:
    """Merge this invocation's scenarios into `path` (others from earlier invocations stay, each
    with its own meta saying when and how it ran)."""
    data = load_results(path)
    scenarios = dict(data.get("scenarios", {}))
    for res in results:
        scenarios[res.name] = res.to_json()
    data = {"meta": meta, "scenarios": scenarios}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return data


def markdown(data: dict[str, Any]) -> str:
    """results.json as a Markdown table (median, min, max, pgbench reference) for docs/benchmarks.md."""
    scenarios = data.get("scenarios", {})
    refs = reference_lookup(scenarios)
    lines = [
        "| id | figure | median | min | max | unit | pgbench reference (median) |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for name, entry in scenarios.items():
        for i, fig in enumerate(entry["figures"].values()):
            ref = "-"
            if fig.get("reference"):
                found = refs.get(fig["reference"])
                ref = f"{found[0]}: {fmt(found[1])} {found[2]}" if found else "-"
            lines.append(
                f"| {name if i == 0 else ''} | {fig['label']} | {fmt(fig['median'])} | {fmt(fig['min'])} | "
                f"{fmt(fig['max'])} | {fig['unit']} | {ref} |"
            )
    return "\n".join(lines)
