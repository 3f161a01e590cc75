"""The most jobs one run of a definition can create, and the checks on it (shared/domain/workflows.py):
a task step is one job, a fan-out its max_items bounded by the server's, a sub-workflow its own
most, a sleep or a wait none; the settings reach the limits."""

from __future__ import annotations

import msgspec
import pytest

from shared.config import Settings
from shared.domain.errors import InvalidWorkflow, QuotaExceeded
from shared.domain.workflows import (
    MAX_FAN_OUT,
    FanOut,
    WorkflowDefinition,
    WorkflowLimits,
    check_budget,
    check_running_quota,
    fan_out_limit,
    most_jobs,
)


def _definition(steps: list[dict]) -> WorkflowDefinition:
    return msgspec.convert({"name": "wf", "steps": steps}, WorkflowDefinition)


MIXED = _definition(
    [
        {"name": "task", "task_name": "t"},
        {"name": "fan", "task_name": "t", "fan_out": {"path": "xs", "max_items": 7}},
        {"name": "wide", "task_name": "t", "fan_out": {"path": "xs"}},
        {"name": "nap", "sleep_secs": 60},
        {"name": "wait", "wait_for_event": {"key": "k"}},
        {
            "name": "sub",
            "workflow": {
                "name": "inner",
                "steps": [
                    {"name": "a", "task_name": "t"},
                    {"name": "deeper", "workflow": {"name": "d", "steps": [{"name": "b", "task_name": "t"}]}},
                ],
            },
        },
    ]
)


def test_a_task_is_one_job_a_fan_out_its_bound_a_sub_workflow_its_own_and_a_sleep_or_wait_none():
    assert most_jobs(MIXED, WorkflowLimits(max_fan_out=100)) == 1 + 7 + 100 + 0 + 0 + 2
    assert most_jobs(MIXED, WorkflowLimits(max_fan_out=5)) == 1 + 5 + 5 + 2  # the server's bound wins


def test_a_fan_outs_limit_is_its_max_items_at_most_the_servers():
    limits = WorkflowLimits(max_fan_out=50)
    assert fan_out_limit(FanOut(path="xs"), limits) == 50
    assert fan_out_limit(FanOut(path="xs", max_items=3), limits) == 3
    assert fan_out_limit(FanOut(path="xs", max_items=80), limits) == 50


def test_a_definition_at_the_job_cap_passes_and_one_over_it_is_invalid():
    check_budget(MIXED, WorkflowLimits(max_jobs=110, max_fan_out=100))
    with pytest.raises(InvalidWorkflow, match=r"up to 110 jobs.*limit of 109 \(--workflow-max-jobs\)"):
        check_budget(MIXED, WorkflowLimits(max_jobs=109, max_fan_out=100))


def test_a_max_items_over_the_servers_fan_out_bound_is_invalid_even_in_a_sub_workflow():
    nested = _definition(
        [
            {
                "name": "sub",
                "workflow": {
                    "name": "inner",
                    "steps": [{"name": "f", "task_name": "t", "fan_out": {"path": "xs", "max_items": 9}}],
                },
            }
        ]
    )
    with pytest.raises(
        InvalidWorkflow, match=r"sub-workflow 'inner': step 'f': fan_out max_items 9 .* limit of 8"
    ):
        check_budget(nested, WorkflowLimits(max_fan_out=8))


def test_the_running_quota_refuses_at_the_quota_and_zero_means_none():
    check_running_quota(1, WorkflowLimits(max_running=2))
    check_running_quota(10**6, WorkflowLimits(max_running=0))
    with pytest.raises(QuotaExceeded) as refused:
        check_running_quota(2, WorkflowLimits(max_running=2))
    assert refused.value.retry_after_secs is not None and refused.value.retry_after_secs > 0


def test_settings_give_the_limits_and_the_fan_out_bound_never_passes_the_contracts():
    settings = Settings(
        database_url="postgresql://x",
        workflow_max_jobs=7,
        workflow_max_fan_out=50_000,
        tenant_max_running_workflows=3,
    )
    assert settings.workflow_limits == WorkflowLimits(max_jobs=7, max_fan_out=MAX_FAN_OUT, max_running=3)
    assert Settings(database_url="postgresql://x").workflow_limits == WorkflowLimits()
