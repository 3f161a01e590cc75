"""A minimal remote worker, standard library only, for the crash-safety tests.

    python remote_worker.py BASE QUEUE hold LEASE_SECS   lease one job, print it, never report
    python remote_worker.py BASE QUEUE work LEASE_SECS   lease one job (long-poll), complete it

An optional fifth argument names the worker (the lease's `worker_id`, docs/visibility.md).

Prints one JSON line: {"job_id", "lease_token", "delivery_count", "retry_count"} and, in `work`
mode, the HTTP status of the complete call.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request


def call(base: str, path: str, body: dict) -> tuple[int, dict | None]:
    req = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": "Bearer dev", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)


def main() -> None:
    base, queue, mode, lease_secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    body = {"max_jobs": 1, "lease_secs": lease_secs, "wait_secs": 10}
    if len(sys.argv) > 5:
        body["worker_id"] = sys.argv[5]
    while True:
        _, leased = call(base, f"/api/v1/queues/{queue}/lease", body)
        if leased and leased["jobs"]:
            break
    item = leased["jobs"][0]
    out = {
        "job_id": item["job"]["id"],
        "lease_token": item["lease_token"],
        "delivery_count": item["job"]["delivery_count"],
        "retry_count": item["job"]["retry_count"],
    }
    if mode == "hold":
        print(json.dumps(out), flush=True)
        while True:  # "mid-job": the handler runs and never heartbeats; the test kills us
            time.sleep(60)
    status, _ = call(
        base,
        f"/api/v1/jobs/{out['job_id']}/complete",
        {"lease_token": out["lease_token"], "result": {"worker": "second"}},
    )
    print(json.dumps({**out, "complete_status": status}), flush=True)


if __name__ == "__main__":
    main()
