"""The soak's checks and its report: what the database, the execution log and the samples show.

- **Lost jobs**: a job the api acknowledged (201, an id) that is missing from the table, or that is
  neither terminal nor running under a live lease once the backlog has drained. Must be 0. Jobs
  the soak did not enqueue itself (workflow steps, cron firings) are held to the same rule.
- **Executed more than once**: jobs with more than one line in the execution log. Each execution
  but the last is explained when the process that ran it was SIGKILLed after it started (its lease
  died with it, the janitor reclaimed the job, another delivery ran it); any other is unexplained.
- **Completed without an execution**: a completed soak job no handler ever started (must be 0).
- **Latency**: enqueue (the row's created_at) to the first execution start, per 5-minute window of
  created_at, in percentiles.
- **Per process**: RSS and PostgreSQL connections (by application_name) over the samples, per
  incarnation (a killed process's successor is a new incarnation).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

from bench.report import percentile
from bench.soak.execlog import Execution

TERMINAL = {"completed", "failed", "cancelled"}
WINDOW_SECS = 300


def analyse(state: Any, executions: list[Execution], opts: Any) -> dict[str, Any]:
    jobs = {j["id"]: j for j in state.db["jobs"]}
    runs: dict[str, list[Execution]] = defaultdict(list)
    for e in sorted(executions, key=lambda e: e.at):
        runs[e.job_id].append(e)
    killed = {k["pid"]: k for k in state.kills}
    return {
        "options": {k: (str(v) if k == "out_dir" else v) for k, v in vars(opts).items()},
        "load_secs": round(state.load_ended - state.t0, 1),
        "drain": state.drain,
        "enqueued": _enqueued(state, jobs),
        "lost": _lost(state, jobs),
        "completed_without_execution": [
            i
            for i, j in jobs.items()
            if j["status"] == "completed" and j["task_name"] == "soak-work" and i not in runs
        ],
        "statuses": dict(Counter(j["status"] for j in jobs.values())),
        "dead_letters": state.db["dead_letters"],
        "duplicates": _duplicates(runs, killed),
        "latency_windows": _latency(state, jobs, runs),
        "workflows": _workflows(state),
        "cron": _cron(state, jobs),
        "sse": {k: v for k, v in state.counts.items() if k.startswith("sse_")},
        "client_retries": {k: v for k, v in state.counts.items() if not k.startswith("sse_")},
        "remote_worker": state.remote,
        "kills": state.kills,
        "processes": _processes(state),
        "samples": state.samples,
    }


def _enqueued(state: Any, jobs: dict[str, Any]) -> dict[str, int]:
    kinds = Counter(r["kind"] for r in state.jobs.values() if r["id"])
    return {
        "single": kinds["single"],
        "batch": kinds["batch"],
        "unacknowledged_at_stop": sum(1 for r in state.jobs.values() if not r["id"]),
        "workflow_step_jobs": sum(1 for j in jobs.values() if j["workflow_id"]),
        "cron_jobs": sum(1 for j in jobs.values() if j["cron_id"]),
        "rows_in_table": len(jobs),
    }


def _lost(state: Any, jobs: dict[str, Any]) -> dict[str, Any]:
    acked = {r["id"]: key for key, r in state.jobs.items() if r["id"]}
    missing = sorted(key for job_id, key in acked.items() if job_id not in jobs)
    stuck = sorted(
        i
        for i, j in jobs.items()
        if j["status"] not in TERMINAL and not (j["status"] == "running" and j["live_lease"])
    )
    in_flight = sorted(i for i, j in jobs.items() if j["status"] == "running" and j["live_lease"])
    return {
        "count": len(missing) + len(stuck),
        "missing_acknowledged": missing,
        "not_terminal": stuck,
        "in_flight_with_live_lease": in_flight,
    }


def _duplicates(runs: dict[str, list[Execution]], killed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    explained: list[dict[str, Any]] = []
    unexplained: list[dict[str, Any]] = []
    by_kill: Counter[str] = Counter()
    for job_id, execs in runs.items():
        if len(execs) < 2:
            continue
        causes = []
        for e in execs[:-1]:
            kill = killed.get(e.pid)
            causes.append(kill if kill is not None and kill["at"] >= e.at else None)
        record = {
            "job_id": job_id,
            "executions": [
                {"pid": e.pid, "role": e.role, "at": round(e.at, 3), "delivery": e.delivery} for e in execs
            ],
            "killed_holder": [
                None if c is None else {"role": c["role"], "pid": c["pid"], "t": c["t"]} for c in causes
            ],
        }
        if all(c is not None for c in causes):
            explained.append(record)
            for c in causes:
                by_kill[f"{c['role']} pid {c['pid']} at t={c['t']}s"] += 1
        else:
            unexplained.append(record)
    return {
        "count": len(explained) + len(unexplained),
        "explained_by_kill": len(explained),
        "per_kill": dict(by_kill),
        "unexplained": unexplained,
        "explained": explained,
    }


def _latency(state: Any, jobs: dict[str, Any], runs: dict[str, list[Execution]]) -> list[dict[str, Any]]:
    """Per window: every job, and apart the jobs delivered more than once (a holder died: they
    wait for their lease to expire, which for an in-process claim is the job's timeout plus the
    grace, so they dominate the tail of any window with a kill)."""
    windows: dict[int, list[tuple[float, bool, str]]] = defaultdict(list)
    for job_id, execs in runs.items():
        job = jobs.get(job_id)
        if job is None:
            continue
        window = int((job["created"] - state.t0) // WINDOW_SECS)
        latency = 1000 * max(0.0, execs[0].at - job["created"])
        windows[window].append((latency, job["delivery_count"] > 1, execs[0].role))
    out = []
    for w in sorted(windows):
        ms = [m for m, _, _ in windows[w]]
        once = [m for m, again, _ in windows[w] if not again]
        by_role = {
            role: [m for m, again, r in windows[w] if r == role and not again]
            for role in ("worker", "remote")
        }
        out.append(
            {
                "window": f"{w * WINDOW_SECS // 60}-{(w + 1) * WINDOW_SECS // 60} min",
                "jobs": len(ms),
                "p50_ms": round(percentile(ms, 50), 1),
                "p90_ms": round(percentile(ms, 90), 1),
                "p99_ms": round(percentile(ms, 99), 1),
                "max_ms": round(max(ms), 1),
                "redelivered": len(ms) - len(once),
                "first_delivery_p99_ms": round(percentile(once, 99), 1) if once else None,
                "first_delivery_max_ms": round(max(once), 1) if once else None,
                **{
                    f"{role}_{q}_ms": round(percentile(v, q), 1) if v else None
                    for role, v in by_role.items()
                    for q in (50, 99)
                },
                "kills_in_window": [
                    k["role"] for k in state.kills if w * WINDOW_SECS <= k["t"] < (w + 1) * WINDOW_SECS
                ],
            }
        )
    return out


def _workflows(state: Any) -> dict[str, Any]:
    in_db = {w["id"]: w["status"] for w in state.db["workflows"]}
    acked = {w["id"] for w in state.workflows}
    return {
        "acknowledged": len(acked),
        "in_table": len(in_db),
        "created_without_answer": len(set(in_db) - acked),
        "missing": sorted(acked - set(in_db)),
        "statuses": dict(Counter(in_db.values())),
    }


def _cron(state: Any, jobs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for cron_id, cron in state.crons.items():
        fired = [j["cron_due_at"] for j in jobs.values() if j["cron_id"] == cron_id]
        period = 10 if cron["expr"].startswith("*/10") else 60
        expected = int(cron["deleted"] // period - cron["created"] // period)
        out[cron["name"]] = {
            "expected_occurrences": expected,
            "fired": len(fired),
            "duplicate_occurrences": len(fired) - len(set(fired)),
            "missed_occurrences": max(0, expected - len(set(fired))),
        }
    return out


def _processes(state: Any) -> dict[str, Any]:
    """Per incarnation: RSS first/last/max and its drift, connections per application_name (min..max)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    series: dict[tuple[str, int], list[tuple[float, float, dict[str, int]]]] = defaultdict(list)
    for s in state.samples:
        for name, p in s["processes"].items():
            if p["rss_mb"] is not None:
                series[(name, p["pid"])].append((s["t"], p["rss_mb"], p["connections"]))
    for (name, pid), points in series.items():
        rss = [r for _, r, _ in points]
        apps = sorted({a for _, _, c in points for a in c})
        quarter = max(1, len(rss) // 4)
        out[name].append(
            {
                "pid": pid,
                "from_t": points[0][0],
                "to_t": points[-1][0],
                "samples": len(points),
                "rss_first_mb": round(rss[0], 1),
                "rss_last_mb": round(rss[-1], 1),
                "rss_max_mb": round(max(rss), 1),
                "rss_first_quarter_median_mb": round(statistics.median(rss[:quarter]), 1),
                "rss_last_quarter_median_mb": round(statistics.median(rss[-quarter:]), 1),
                "connections": {
                    a: [min(c.get(a, 0) for _, _, c in points), max(c.get(a, 0) for _, _, c in points)]
                    for a in apps
                },
                "connections_last": points[-1][2],
            }
        )
    return dict(out)


def _timeline(samples: list[dict[str, Any]], every_secs: float = 150.0) -> list[str]:
    """RSS and connections of each process at the sample nearest every `every_secs`; a process
    restarted since the previous row (a new pid) is marked with *."""
    if not samples:
        return []
    names = list(samples[0]["processes"])
    picked = []
    target = 0.0
    while target <= samples[-1]["t"] + every_secs / 2:
        picked.append(min(samples, key=lambda s: abs(s["t"] - target)))
        target += every_secs
    if picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    rows = [
        "## RSS (MB) / PostgreSQL connections over time (* = restarted since the row above)",
        "",
        "| t (s) | " + " | ".join(names) + " | connections held by no process above | PostgreSQL processes |",
        "| ---: | " + " | ".join("---:" for _ in names) + " | ---: | ---: |",
    ]
    last_pid: dict[str, int] = {}
    for s in picked:
        cells = []
        for name in names:
            p = s["processes"].get(name)
            if p is None or p["rss_mb"] is None:
                cells.append("-")
                continue
            mark = "*" if name in last_pid and last_pid[name] != p["pid"] else ""
            last_pid[name] = p["pid"]
            cells.append(f"{p['rss_mb']:.1f} / {sum(p['connections'].values())}{mark}")
        pg = s.get("postgres", {}).get("postmaster_children", "-")
        rows.append(f"| {s['t']:.0f} | " + " | ".join(cells) + f" | {s['unattributed_connections']} | {pg} |")
    return rows


# --- the Markdown report -------------------------------------------------------------------------------


def markdown(r: dict[str, Any]) -> str:
    o = r["options"]
    lines = [
        "# QueueFlow soak",
        "",
        (
            f"{r['load_secs'] / 60:.1f} min of load; a SIGKILL every {o['kill_secs']:g} s; samples every "
            f"{o['sample_secs']:g} s; seed {o['seed']}. Client, servers and PostgreSQL share one busy 2-core machine."
        ),
        "",
        "## Verdict",
        "",
        (
            f"- jobs lost: **{r['lost']['count']}** (acknowledged but missing: {len(r['lost']['missing_acknowledged'])}; "
            f"not terminal after the drain: {len(r['lost']['not_terminal'])}; in flight with a live lease: "
            f"{len(r['lost']['in_flight_with_live_lease'])})"
        ),
        (
            f"- jobs executed more than once: **{r['duplicates']['count']}** ({r['duplicates']['explained_by_kill']} "
            f"held by a process that was SIGKILLed; unexplained: **{len(r['duplicates']['unexplained'])}**)"
        ),
        f"- completed jobs no handler started: **{len(r['completed_without_execution'])}**",
        f"- drain after the load: {r['drain']}",
        f"- job statuses: {r['statuses']}; dead letters: {r['dead_letters']}",
        f"- enqueued: {r['enqueued']}",
        (
            f"- workflows: {r['workflows']['statuses']} ({r['workflows']['acknowledged']} acknowledged, "
            f"{r['workflows']['created_without_answer']} created by a call whose answer was lost)"
        ),
        f"- cron: {r['cron']}",
        f"- SSE streams: {r['sse']}",
        f"- client retries (the api down): {r['client_retries']}",
        f"- remote worker: {r['remote_worker'].get('counts', {})}; loop errors: {r['remote_worker'].get('loop_errors')}",
        "",
        "## Kills",
        "",
        "| t (s) | role | pid | new pid | ready after (s) | duplicates it explains |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    per_kill = r["duplicates"]["per_kill"]
    for k in r["kills"]:
        n = per_kill.get(f"{k['role']} pid {k['pid']} at t={k['t']}s", 0)
        lines.append(
            f"| {k['t']:.0f} | {k['role']} | {k['pid']} | {k['new_pid']} | {k['ready_after_secs']} | {n} |"
        )
    lines += [
        "",
        "## Enqueue-to-start latency per 5-minute window (ms)",
        "",
        (
            "| window | jobs | p50 | p90 | p99 | max | redelivered | p99 / max without them "
            "| in-process p50 / p99 | remote p50 / p99 | kills in window |"
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for w in r["latency_windows"]:
        lines.append(
            f"| {w['window']} | {w['jobs']} | {w['p50_ms']} | {w['p90_ms']} | {w['p99_ms']} | {w['max_ms']} | "
            f"{w.get('redelivered', '-')} | {w.get('first_delivery_p99_ms', '-')} / {w.get('first_delivery_max_ms', '-')} | "
            f"{w.get('worker_50_ms', '-')} / {w.get('worker_99_ms', '-')} | "
            f"{w.get('remote_50_ms', '-')} / {w.get('remote_99_ms', '-')} | "
            f"{', '.join(w['kills_in_window']) or '-'} |"
        )
    lines += [
        "",
        "## Processes: RSS (MB) and PostgreSQL connections per incarnation",
        "",
        "| process | pid | alive (s) | samples | RSS first | RSS last | RSS max | first-quarter median | last-quarter median | connections min..max |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, incs in r["processes"].items():
        for i in incs:
            conns = ", ".join(f"{a} {lo}..{hi}" for a, (lo, hi) in i["connections"].items()) or "-"
            lines.append(
                f"| {name} | {i['pid']} | {i['from_t']:.0f}-{i['to_t']:.0f} | {i['samples']} | {i['rss_first_mb']} | "
                f"{i['rss_last_mb']} | {i['rss_max_mb']} | {i['rss_first_quarter_median_mb']} | "
                f"{i['rss_last_quarter_median_mb']} | {conns} |"
            )
    lines += ["", *_timeline(r["samples"])]
    if r["duplicates"]["unexplained"]:
        lines += ["", "## Unexplained duplicate executions", ""]
        for d in r["duplicates"]["unexplained"][:20]:
            lines.append(f"- {d}")
    if r["lost"]["count"]:
        lines += [
            "",
            "## Lost jobs",
            "",
            f"- missing: {r['lost']['missing_acknowledged'][:20]}",
            f"- not terminal: {r['lost']['not_terminal'][:20]}",
        ]
    return "\n".join(lines) + "\n"
