"""The @task decorator and the registry a worker builds from --handlers modules (no processes)."""

from __future__ import annotations

import argparse
import importlib.util
import types
import uuid
from datetime import UTC, datetime

import pytest

from services.worker import Job, JobConfig, JobContext, JobStatus, TaskSpec, task
from services.worker.registry import Registry, import_handler_modules, spec_of
from services.worker.runtime import build_registry
from shared.config import ConfigError, add_serve_arguments, settings_from
from tests.handlers import qf_handler_tasks
from tests.handlers.helpers import BUILTINS, EXAMPLES, TEST_TASKS


def module_with(name: str, **attrs: object) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def test_task_decorator_returns_the_function_unchanged_and_records_a_frozen_spec():
    async def resize(ctx: JobContext) -> dict[str, object]:
        return {}

    marked = task("resize-image", concurrency=4, timeout_secs=60)(resize)

    assert marked is resize
    assert spec_of(resize) == TaskSpec("resize-image", concurrency=4, timeout_secs=60)
    with pytest.raises(AttributeError):
        spec_of(resize).name = "other"  # type: ignore[misc, union-attr]


@pytest.mark.parametrize(
    ("kwargs", "complaint"),
    [
        ({"name": "  "}, "non-blank name"),
        ({"name": "x", "concurrency": 0}, "concurrency must be a positive integer"),
        ({"name": "x", "concurrency": True}, "concurrency must be a positive integer"),
        ({"name": "x", "timeout_secs": 0}, "timeout_secs must be an integer from 1 to 86400"),
        ({"name": "x", "timeout_secs": 86_401}, "timeout_secs must be an integer from 1 to 86400"),
        ({"name": "x", "timeout_secs": 1.5}, "timeout_secs must be an integer from 1 to 86400"),
    ],
)
def test_task_decorator_rejects_out_of_range_settings_at_import_time(kwargs, complaint):
    with pytest.raises(ValueError, match=complaint):
        task(**kwargs)


def test_a_function_can_be_one_task_only():
    @task("first")
    def handler(ctx: JobContext) -> None:
        return None

    with pytest.raises(TypeError, match="already task 'first'"):
        task("second")(handler)


def test_registry_holds_builtins_first_then_the_module_tasks_with_their_limits():
    registry = build_registry((TEST_TASKS,))

    assert set(BUILTINS) < set(registry.names())
    assert registry.get("echo").source == "built-in"  # type: ignore[union-attr]
    solo = registry.get("t-solo")
    assert solo is not None and solo.concurrency == 1 and solo.is_async and solo.source == TEST_TASKS
    slow = registry.get("t-slow-sync")
    assert slow is not None and slow.timeout_secs == 1 and not slow.is_async
    assert registry.get("t-double").handler is qf_handler_tasks.double  # type: ignore[union-attr]


def test_a_user_task_may_not_shadow_a_builtin():
    registry = build_registry()
    rogue = module_with("rogue", echo=task("echo")(lambda ctx: {}))

    with pytest.raises(
        ConfigError, match="task 'echo' of module 'rogue' is already registered as a built-in"
    ):
        registry.register_module(rogue)


def test_two_modules_defining_the_same_task_name_is_a_start_up_error():
    registry = Registry()
    registry.register_module(module_with("billing", charge=task("charge")(lambda ctx: {})))

    with pytest.raises(
        ConfigError,
        match="task 'charge' of module 'shop' is already registered as a task of module 'billing'",
    ):
        registry.register_module(module_with("shop", charge=task("charge")(lambda ctx: {})))


def test_a_task_re_exported_by_a_second_module_is_registered_once():
    @task("shared-task")
    async def handler(ctx: JobContext) -> None:
        return None

    registry = Registry()
    registry.register_module(module_with("pkg.impl", handler=handler))
    registry.register_module(module_with("pkg", handler=handler, alias=handler))

    assert registry.names() == ["shared-task"]
    assert registry.get("shared-task").source == "pkg.impl"  # type: ignore[union-attr]


def test_a_module_without_tasks_is_a_start_up_error_naming_it():
    with pytest.raises(ConfigError, match="module 'plain' defines no @task functions"):
        Registry().register_module(module_with("plain", helper=lambda ctx: {}))


def test_an_unimportable_module_is_a_start_up_error_naming_it():
    with pytest.raises(
        ConfigError, match=r"cannot import module 'tests\.handlers\.nope': ModuleNotFoundError"
    ):
        import_handler_modules(Registry(), ["tests.handlers.nope"])


def test_an_async_callable_object_is_detected_as_async():
    class Resizer:
        async def __call__(self, ctx: JobContext) -> None:
            return None

    registry = Registry()
    registry.register("resize", Resizer())

    assert registry.get("resize").is_async  # type: ignore[union-attr]


def parse(argv: list[str], env: dict[str, str]) -> tuple[str, ...]:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return settings_from(parser.parse_args(argv), {"DATABASE_URL": "postgresql://x/y", **env}).handlers


def test_handlers_come_from_the_flag_or_queueflow_handlers_and_the_flag_wins():
    assert parse([], {}) == ()
    assert parse([], {"QUEUEFLOW_HANDLERS": "a.tasks, b.more ,"}) == ("a.tasks", "b.more")
    assert parse(["--handlers", "c.tasks"], {"QUEUEFLOW_HANDLERS": "a.tasks"}) == ("c.tasks",)


def load_example_module() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("qf_example_tasks", EXAMPLES / "qf_example_tasks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_ctx(payload: dict[str, object]) -> JobContext:
    now = datetime.now(UTC)
    return JobContext(
        Job(
            id=uuid.uuid4(),
            queue_name="default",
            task_name="word-count",
            payload=payload,
            config=JobConfig(),
            status=JobStatus.RUNNING,
            retry_count=0,
            delivery_count=1,
            created_at=now,
            scheduled_at=now,
            metadata={},
        )
    )


def test_example_handlers_can_be_called_directly_as_docs_handlers_md_shows():
    examples = load_example_module()

    assert examples.word_count(make_ctx({"text": "a b a"}))["top"] == ["a", "b"]
    registry = Registry()
    assert sorted(t.name for t in registry.register_module(examples)) == [
        "fingerprint",
        "notify-customer",
        "word-count",
    ]
    assert registry.get("fingerprint").concurrency == 2  # type: ignore[union-attr]


def test_abandoning_a_context_sets_both_cancellation_signals():
    ctx = make_ctx({"text": "a"})
    assert not ctx.is_cancelled and not ctx.cancelled.is_set() and ctx.wait_cancelled(0) is False

    ctx.abandon()

    assert ctx.is_cancelled and ctx.cancelled.is_set() and ctx.wait_cancelled(0) is True
    assert load_example_module().word_count(ctx) == {}  # the example stops early once cancelled
