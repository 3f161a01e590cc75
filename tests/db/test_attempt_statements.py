"""Every statement that changes a job's status either writes the ended attempt's history row
(queueflow.job_attempts, docs/visibility.md) or is one of the few that end no attempt that the job
row would not still describe: a new statement that moves a job out of `running` cannot forget it."""

from __future__ import annotations

import re

from shared.db.queries import Q

# Statements that set a job's status without ending a running attempt that the row loses:
#   claim_jobs starts an attempt (from pending or retrying);
#   complete_jobs ends one that the job row keeps describing (the drain writes no row), and so
#   does complete_jobs_traced, the same write in a process that exports traces;
#   retry_jobs runs a failed or cancelled job again: its attempt was recorded when it ended.
ENDS_NO_ATTEMPT = {"claim_jobs", "complete_jobs", "complete_jobs_traced", "retry_jobs"}

SETS_JOB_STATUS = re.compile(r"UPDATE\s+queueflow\.jobs\b[^;]*?\bSET\s+status\s*=", re.IGNORECASE | re.DOTALL)


def test_every_statement_that_sets_a_jobs_status_records_the_attempt_it_ends():
    setting = {name for name, sql in Q.items() if SETS_JOB_STATUS.search(sql)}
    assert {"fail_job", "reclaim_expired", "cancel_job", "release_jobs", "cancel_workflow_jobs"} <= setting
    missing = {
        name for name in setting - ENDS_NO_ATTEMPT if "INSERT INTO queueflow.job_attempts" not in Q[name]
    }
    assert missing == set()
    assert setting >= ENDS_NO_ATTEMPT  # the allow-list names statements that exist
