"""A create request's policy becomes a JobConfig once per distinct policy (shared/wire.py), and its
stored form is encoded once (shared/db/jobs.py): repeated policies share one frozen config, and
what is remembered never changes what a request gets or lets a bad policy through."""

from __future__ import annotations

import msgspec
import pytest

from shared import wire
from shared.db import jobs as jobs_db
from shared.domain.errors import ValidationFailed
from shared.domain.jobs import DEFAULT_CONFIG, JobConfig


def _config(body: dict) -> JobConfig:
    return msgspec.json.decode(msgspec.json.encode(body), type=wire.JobConfigRequest).to_config()


def test_a_repeated_policy_gives_one_config_equal_to_a_fresh_one() -> None:
    first = _config({"limits": ["customer:7"], "priority": 3, "timeout": 30})
    again = _config({"limits": ["customer:7"], "priority": 3, "timeout": 30})
    assert again is first
    assert first == JobConfig.of({"limits": ["customer:7"], "priority": 3, "timeout_secs": 30})
    other = _config({"limits": ["customer:8"], "priority": 3, "timeout": 30})
    assert other.limits == ("customer:8",) and other is not first
    assert _config({}) is DEFAULT_CONFIG


def test_a_bad_policy_fails_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValidationFailed, match="names a key twice"):
            _config({"limits": ["a", "a"]})
        with pytest.raises(ValidationFailed, match="no whitespace"):
            _config({"limits": ["a b"]})


def test_the_stored_form_of_a_remembered_config_is_its_own() -> None:
    a = _config({"limits": ["k:1"], "max_retries": 0})
    b = _config({"limits": ["k:2"], "max_retries": 0})
    decode = msgspec.json.decode
    assert decode(jobs_db._stored_config(a)) == {"timeout_secs": 300, "max_retries": 0, "limits": ["k:1"]}
    assert decode(jobs_db._stored_config(b)) == {"timeout_secs": 300, "max_retries": 0, "limits": ["k:2"]}
    assert jobs_db._stored_config(a) is jobs_db._stored_config(a)
    # a config built in code with a list (unhashable) is encoded all the same
    listed = JobConfig(limits=["k:3"])  # type: ignore[arg-type]
    assert decode(jobs_db._stored_config(listed)) == {"timeout_secs": 300, "limits": ["k:3"]}
