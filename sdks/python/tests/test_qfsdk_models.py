"""Models, error decoding, backoff, and the SSE parser: no server involved."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from unofficial_queueflow_client import errors
from unofficial_queueflow_client import models as m
from unofficial_queueflow_client.backoff import Backoff
from unofficial_queueflow_client.sse import parse_sse


def test_requests_leave_out_unset_fields():
    req = m.CreateJobRequest(task_name="t", config=m.JobConfigRequest(queue="q", priority=5))
    assert msgspec.json.decode(msgspec.json.encode(req)) == {"task_name": "t", "config": {"priority": 5, "queue": "q"}}
    assert msgspec.json.encode(m.LeaseJobsRequest(max_jobs=2)) == b'{"max_jobs":2}'


def test_config_limits_are_sent_only_when_set_and_decode_where_a_config_does():
    assert msgspec.json.encode(m.JobConfig(priority=1)) == b'{"priority":1}'
    step = m.WorkflowStep(name="a", task_name="t", config=m.JobConfig(limits=["customer:42"]))
    assert msgspec.json.decode(msgspec.json.encode(step))["config"] == {"limits": ["customer:42"]}
    cron = msgspec.json.decode(
        b'{"id":"c","name":"n","cron_expr":"* * * * *","task_name":"t","enabled":true,'
        b'"next_run_at":"2026-01-02T03:04:05Z","created_at":"2026-01-02T03:04:05Z",'
        b'"config":{"limits":["api:stripe","customer:*"]}}',
        type=m.CronSchedule,
    )
    assert cron.config == m.JobConfig(limits=["api:stripe", "customer:*"])


def test_step_condition_spells_not_as_on_the_wire():
    cond = m.StepCondition(not_=m.StepCondition(op="exists", path="a"))
    assert msgspec.json.decode(msgspec.json.encode(cond)) == {"not": {"op": "exists", "path": "a"}}
    leaf = m.StepCondition(op="eq", path="x", value=None)
    assert msgspec.json.decode(msgspec.json.encode(leaf)) == {"op": "eq", "path": "x", "value": None}


def test_job_decodes_times_and_ignores_unknown_fields():
    raw = (
        b'{"id":"j","queue_name":"q","task_name":"t","payload":{"a":1},"config":{"priority":5},'
        b'"status":"pending","retry_count":0,"delivery_count":0,"created_at":"2026-01-02T03:04:05Z",'
        b'"scheduled_at":"2026-01-02T03:04:05+00:00","metadata":{},"brand_new_field":true}'
    )
    job = msgspec.json.decode(raw, type=m.Job)
    assert job.created_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert job.payload == {"a": 1} and job.result is None and job.error_message is None


def test_a_wrong_status_is_a_validation_error():
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"status":"exploded"}', type=m.HeartbeatResponse)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, errors.BadRequest),
        (401, errors.Unauthorized),
        (403, errors.Forbidden),
        (404, errors.NotFound),
        (405, errors.MethodNotAllowed),
        (409, errors.Conflict),
        (413, errors.PayloadTooLarge),
        (500, errors.ServerError),
        (502, errors.ServerError),
        (503, errors.ServiceUnavailable),
        (418, errors.ApiError),
    ],
)
def test_errors_by_status_carry_the_decoded_body(status, cls):
    err = errors.error_for_status(status, b'{"error":"nope","timestamp":"2026-01-02T03:04:05Z"}')
    assert type(err) is cls and isinstance(err, errors.ApiError)
    assert err.status == status and err.message == "nope"
    assert err.body == m.ErrorBody(error="nope", timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert err.raw == {"error": "nope", "timestamp": "2026-01-02T03:04:05Z"}
    assert str(err) == f"HTTP {status}: nope"
    assert err.retryable is (status >= 500)


def test_an_error_without_the_usual_body_keeps_the_raw_text():
    err = errors.error_for_status(502, b"<html>bad gateway</html>")
    assert isinstance(err, errors.ServerError) and err.body is None and err.message is None
    assert err.raw == "<html>bad gateway</html>"
    assert errors.error_for_status(404, b"").raw is None


@pytest.mark.parametrize(
    ("status", "cls", "retryable"),
    [
        (409, errors.Conflict, False),
        (404, errors.NotFound, False),
        (503, errors.ServiceUnavailable, True),
        (500, errors.ServerError, True),
        (429, errors.ApiError, True),
    ],
)
def test_an_item_of_a_batch_answer_is_the_error_of_its_status(status, cls, retryable):
    err = errors.error_for_item(status, "lease is no longer held")
    assert type(err) is cls and err.status == status and err.retryable is retryable
    assert str(err) == f"HTTP {status}: lease is no longer held" and err.body is None
    assert str(errors.error_for_item(status, None)) == f"HTTP {status}: no body"


def test_a_completion_answer_decodes_and_says_whether_it_completed():
    raw = (
        b'{"results":[{"id":"a","outcome":"completed","status":204},'
        b'{"id":"b","outcome":"conflict","status":409,"error":"lease lost","later":1}]}'
    )
    answer = msgspec.json.decode(raw, type=m.CompleteJobsResponse)
    assert [(r.id, r.ok, r.error) for r in answer.results] == [("a", True, None), ("b", False, "lease lost")]
    item = m.CompletionItem(id="a", lease_token="t")
    assert msgspec.json.decode(msgspec.json.encode(m.CompleteJobsRequest(jobs=[item]))) == {
        "jobs": [{"id": "a", "lease_token": "t"}]
    }


def test_openapi_document_tolerates_odd_path_items():
    doc = msgspec.json.decode(b'{"paths":{"/a":{"post":{}},"/b":[],"/c":{"post":null}}}', type=m.OpenApiDocument)
    assert doc.offers("POST", "/a") and not doc.offers("POST", "/b") and not doc.offers("POST", "/c")
    assert not msgspec.json.decode(b"{}", type=m.OpenApiDocument).offers("POST", "/a")


def test_permanent_error_is_not_retryable():
    assert errors.PermanentError("x").retryable is False


def test_backoff_doubles_up_to_the_cap_and_resets():
    b = Backoff(initial=0.1, maximum=5.0, jitter=0.5, rng=lambda: 0.0)
    delays = [b.next() for _ in range(10)]
    assert delays[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert max(delays) == 5.0 and delays[-1] == 5.0
    b.reset()
    assert b.next() == pytest.approx(0.1)


def test_backoff_jitter_shrinks_each_delay_within_bounds():
    low = Backoff(initial=1.0, maximum=8.0, jitter=0.5, rng=lambda: 1.0)
    assert [low.next() for _ in range(3)] == pytest.approx([0.5, 1.0, 2.0])
    real = Backoff(initial=1.0, maximum=1.0, jitter=0.5)
    samples = {real.next() for _ in range(200)}
    assert all(0.5 <= s <= 1.0 for s in samples) and len(samples) > 100  # spread, not lockstep


@pytest.mark.parametrize("kwargs", [{"initial": 0}, {"initial": 2, "maximum": 1}, {"jitter": 1.5}, {"factor": 0.5}])
def test_backoff_rejects_nonsense(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)


async def _lines(*chunks: bytes):
    for chunk in chunks:
        yield chunk


async def test_sse_parser_skips_comments_and_joins_data():
    stream = _lines(
        b": keep-alive\n",
        b"\n",
        b"event: status\n",
        b'data: {"a":\n',
        b"data: 1}\n",
        b"\n",
        b"id: 7\n",
        b"data: plain\r\n",
        b"\r\n",
        b"event: status\n",
        b"data: tail\n",
    )
    events = [e async for e in parse_sse(stream)]
    assert [(e.event, e.data, e.id) for e in events] == [
        ("status", '{"a":\n1}', None),
        ("message", "plain", "7"),
        ("status", "tail", "7"),
    ]


def test_config_unique_is_sent_only_when_set_and_a_job_decodes_it():
    assert msgspec.json.encode(m.JobConfigRequest(priority=1)) == b'{"priority":1}'
    req = m.JobConfigRequest(unique=m.UniquePolicy(key="k", window_secs=30, on_conflict="replace"))
    assert msgspec.json.decode(msgspec.json.encode(req)) == {
        "unique": {"key": "k", "window_secs": 30, "on_conflict": "replace"}
    }
    job = msgspec.json.decode(
        b'{"id":"j","queue_name":"q","task_name":"t","payload":{},"status":"pending","retry_count":0,'
        b'"delivery_count":0,"created_at":"2026-01-02T03:04:05Z","scheduled_at":"2026-01-02T03:04:05Z",'
        b'"config":{"priority":0,"unique":{"key":"k","window_secs":30,"on_conflict":"skip"}}}',
        type=m.Job,
    )
    assert job.unique == m.UniquePolicy(key="k", window_secs=30, on_conflict="skip")
    assert msgspec.to_builtins(job)["config"]["unique"]["on_conflict"] == "skip"  # the raw config is kept
    broken = msgspec.structs.replace(job, config={"unique": {"key": "k"}})
    with pytest.raises(msgspec.ValidationError):
        _ = broken.unique
    assert msgspec.structs.replace(job, config={"priority": 0}).unique is None


def test_cron_timezone_is_sent_only_when_set_and_the_local_next_run_keeps_its_offset():
    plain = m.CreateCronRequest(name="n", cron_expr="0 9 * * *", task_name="t")
    assert msgspec.json.decode(msgspec.json.encode(plain)) == {"name": "n", "cron_expr": "0 9 * * *", "task_name": "t"}
    zoned = msgspec.structs.replace(plain, timezone="America/New_York")
    assert msgspec.json.decode(msgspec.json.encode(zoned))["timezone"] == "America/New_York"
    raw = (
        b'{"id":"c","name":"n","cron_expr":"0 9 * * *","task_name":"t","enabled":true,'
        b'"next_run_at":"2026-11-02T14:00:00Z","created_at":"2026-01-02T03:04:05Z"'
    )
    cron = msgspec.json.decode(
        raw + b',"timezone":"America/New_York","next_run_local":"2026-11-02T09:00:00-05:00"}', type=m.CronSchedule
    )
    assert cron.timezone == "America/New_York"
    assert cron.next_run_local is not None and cron.next_run_local.isoformat() == "2026-11-02T09:00:00-05:00"
    assert cron.next_run_local == datetime(2026, 11, 2, 14, tzinfo=UTC)
    bare = msgspec.json.decode(raw + b"}", type=m.CronSchedule)
    assert bare.timezone is None and bare.next_run_local is None
    assert "timezone" not in msgspec.to_builtins(bare) and "next_run_local" not in msgspec.to_builtins(bare)


def test_sleep_and_wait_step_helpers_check_what_the_server_would_refuse():
    assert m.sleep_step("a", 1).sleep_secs == 1 and m.sleep_step("a", m.MAX_SLEEP_SECS).sleep_secs == m.MAX_SLEEP_SECS
    for bad in (0, m.MAX_SLEEP_SECS + 1, 1.5, True, "5"):
        with pytest.raises(ValueError, match="sleep_secs"):
            m.sleep_step("a", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time zone"):
        m.sleep_until_step("a", datetime(2027, 1, 1))
    for bad_key in ("", "x" * 257, "é" * 129):
        with pytest.raises(ValueError, match="1 to 256 bytes"):
            m.wait_for_event_step("w", bad_key)
    with pytest.raises(ValueError, match="timeout_secs"):
        m.wait_for_event_step("w", "k", timeout_secs=0)
    assert msgspec.json.decode(msgspec.json.encode(m.wait_for_event_step("w", "k"))) == {
        "name": "w",
        "wait_for_event": {"key": "k"},
    }


def test_a_workflow_echoes_its_sleep_and_wait_steps_typed():
    raw = (
        b'{"id":"w","name":"n","status":"running","created_at":"2026-01-02T03:04:05Z","steps":['
        b'{"name":"nap","sleep_until":"2026-01-03T00:00:00+00:00","depends_on":[],"payload":{}},'
        b'{"name":"wait","wait_for_event":{"key":"k:{{context.id}}"},"timeout_secs":60}]}'
    )
    wf = msgspec.json.decode(raw, type=m.Workflow)
    nap, wait = wf.steps
    assert nap.sleep_until == datetime(2026, 1, 3, tzinfo=UTC) and nap.task_name is None
    assert wait.wait_for_event == m.WaitForEvent(key="k:{{context.id}}") and wait.timeout_secs == 60


# A workflow schedule as the server answers it (shared/domain/cron.py CronSchedule, its workflow
# stored normalised): no task_name, the defaults of each step filled in.
WORKFLOW_SCHEDULE = (
    b'{"id":"c1","name":"nightly","cron_expr":"0 2 * * *","enabled":true,'
    b'"next_run_at":"2026-12-04T02:00:00Z","created_at":"2026-12-03T00:00:00Z","workflow":{"name":"etl",'
    b'"steps":[{"name":"extract","task_name":"etl.extract","depends_on":[],"payload":{"full":true},'
    b'"config":{"priority":3},"on_failure":"halt","on_success":"continue","metadata":{},"queue":"etl"},'
    b'{"name":"nap","depends_on":["extract"],"payload":{},"on_failure":"halt","on_success":"continue",'
    b'"metadata":{},"sleep_secs":60},{"name":"load","task_name":"etl.load","depends_on":["nap"],"payload":{},'
    b'"on_failure":"halt","on_success":"continue","metadata":{},"when":{"op":"exists","path":"extract.rows"}}],'
    b'"context":{"day":"today"},"metadata":{}}}'
)


def test_a_workflow_schedule_decodes_with_its_workflow_typed_and_no_task_name():
    cron = msgspec.json.decode(WORKFLOW_SCHEDULE, type=m.CronSchedule)
    assert cron.task_name is None
    assert cron.workflow is not None and cron.workflow.name == "etl"
    assert cron.workflow.context == {"day": "today"} and cron.workflow.metadata == {}
    extract, nap, load = cron.workflow.steps
    assert extract.task_name == "etl.extract" and extract.queue == "etl" and extract.config == m.JobConfig(priority=3)
    assert extract.depends_on == [] and extract.on_failure == "halt" and extract.payload == {"full": True}
    assert nap.sleep_secs == 60 and nap.task_name is None and nap.depends_on == ["extract"]
    assert load.when == m.StepCondition(op="exists", path="extract.rows")
    # What was decoded encodes back to the server's answer.
    assert msgspec.to_builtins(cron) == msgspec.json.decode(WORKFLOW_SCHEDULE)
    # Unknown fields, at the schedule or inside its workflow, are ignored as everywhere else.
    newer = WORKFLOW_SCHEDULE[:-2] + b',"future":1},"future":2}'
    assert msgspec.json.decode(newer, type=m.CronSchedule) == cron


def test_a_task_schedule_decodes_with_no_workflow_and_a_schedule_request_sends_one_of_the_two():
    cron = msgspec.json.decode(
        b'{"id":"c2","name":"n","cron_expr":"* * * * *","task_name":"t","enabled":true,'
        b'"next_run_at":"2026-01-02T03:04:05Z","created_at":"2026-01-02T03:04:05Z"}',
        type=m.CronSchedule,
    )
    assert cron.task_name == "t" and cron.workflow is None
    assert "workflow" not in msgspec.to_builtins(cron)
    definition = m.CreateWorkflowRequest(name="etl", steps=[m.WorkflowStep(name="a", task_name="etl.a")])
    req = m.CreateCronRequest(name="nightly", cron_expr="0 2 * * *", workflow=definition, timezone="Europe/Berlin")
    assert msgspec.json.decode(msgspec.json.encode(req)) == {
        "name": "nightly",
        "cron_expr": "0 2 * * *",
        "workflow": {"name": "etl", "steps": [{"name": "a", "task_name": "etl.a"}]},
        "timezone": "Europe/Berlin",
    }
