"""Workflows: definitions (a DAG of steps) and their validation, the statuses, and the rules that
decide what runs next and how a workflow ends.

Failure policies (shared/reference/README.md): `halt` cancels every unfinished step, running jobs
and sub-workflows included, and fails the workflow; `skip` skips the failed step's transitive
dependents and lets unrelated branches run; `continue` still runs the dependents. A false `when`
skips the step (`condition not met`) and its dependents proceed. A finished workflow with a
problem step (failed, cancelled, or skipped by a policy) is `partially_failed`, or `failed` when
no step completed. These rules are written here once; the advancer and the retry route use them.

The definition types are frozen msgspec Structs that forbid unknown fields: the API decodes a
request straight into them, they are stored normalised (`normalise`), and echoed back as stored.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from shared.domain.errors import InvalidWorkflow, QuotaExceeded, ValidationFailed
from shared.domain.jobs import MAX_DELAY_SECS, MAX_NAME_BYTES, Object, PartialJobConfig, check_queue_name
from shared.domain.traces import TraceContext

MAX_FAN_OUT = 10_000  # elements one fan-out step may spawn (FanOut.max_items defaults to it)
MAX_WORKFLOW_DEPTH = 8  # sub-workflows nest at most this deep
MAX_WORKFLOW_STEPS = 1000
DEFAULT_MAX_WORKFLOW_JOBS = 100_000  # --workflow-max-jobs' default: ten full fan-outs
QUOTA_RETRY_AFTER_SECS = 5  # Retry-After of a 429 for the running-workflows quota

Name = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_BYTES)]


class WorkflowStatus(enum.StrEnum):
    CREATED = "created"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    PARTIALLY_FAILED = "partially_failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_WORKFLOW_STATUSES

    @property
    def retryable(self) -> bool:
        """Only a workflow that ended without completing can be retried."""
        return self in (WorkflowStatus.FAILED, WorkflowStatus.PARTIALLY_FAILED, WorkflowStatus.CANCELLED)


TERMINAL_WORKFLOW_STATUSES = frozenset(
    {
        WorkflowStatus.COMPLETED,
        WorkflowStatus.FAILED,
        WorkflowStatus.PARTIALLY_FAILED,
        WorkflowStatus.CANCELLED,
    }
)


class StepStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STEP_STATUSES


TERMINAL_STEP_STATUSES = frozenset(
    {StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED, StepStatus.SKIPPED}
)


class FailurePolicy(enum.StrEnum):
    HALT = "halt"
    SKIP = "skip"
    CONTINUE = "continue"


class SkipKind(enum.StrEnum):
    CONDITION = "condition"  # its `when` was false: dependents still run
    POLICY = "policy"  # an upstream failure skipped it: a problem step


class OutboxKind(enum.StrEnum):
    START = "start"
    JOB = "job"
    CHILD = "child"
    RETRY = "retry"
    HEAL = "heal"
    TIMER = "timer"  # a sleeping or waiting step's wake-up came (migration 15)
    EVENT = "event"  # an event arrived for a waiting step (its payload in `result`)


HALTED = "workflow halted by an upstream failure"
EVENT_TIMEOUT = "event_timeout"  # a wait-for-event step's reason when its time-out came first
CANCELLED_BY_USER = "workflow cancelled"
CONDITION_NOT_MET = "condition not met"

# --- definitions ---------------------------------------------------------------------------------

ConditionOp = Literal["eq", "ne", "gt", "gte", "lt", "lte", "exists", "contains", "in"]


class StepCondition(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A leaf (`path` compared with `value` by `op`) or a combination (`all`, `any`, `not`)."""

    op: ConditionOp | None = None
    path: str | None = None
    value: Any | UnsetType = UNSET
    all: list[StepCondition] | None = None
    any: list[StepCondition] | None = None
    not_: StepCondition | None = msgspec.field(default=None, name="not")


class FanOut(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Run the step's task once per element of the context array at `path`. Each child's payload
    is the step's payload plus the element under `item_key` and its position under `_index` (not
    the workflow context). `max_items` may not exceed the server's --workflow-max-fan-out (default
    10,000), which also bounds a fan-out that declares none."""

    path: Annotated[str, Meta(min_length=1)]
    item_key: Annotated[str, Meta(min_length=1)] | None = None
    max_items: Annotated[int, Meta(ge=0, le=MAX_FAN_OUT)] | None = None


MAX_SLEEP_SECS = 31_536_000  # a year: a sleep's and a wait's time-out bound
MAX_EVENT_KEY_BYTES = 256
SleepSecs = Annotated[int, Meta(ge=1, le=MAX_SLEEP_SECS)]
# `{{context.a.b}}` in an event key: the value at path `a.b` of the workflow context.
_PLACEHOLDER = re.compile(r"\{\{\s*context\.([^{}\s]+)\s*\}\}")


class WaitForEvent(Struct, frozen=True, forbid_unknown_fields=True):
    """A wait-for-event step's event: `key`, 1 to 256 bytes, may hold `{{context.path}}`
    placeholders, resolved from the workflow context when the step starts."""

    key: Annotated[str, Meta(min_length=1)]


class WorkflowStep(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """One step as declared. Optional fields are None when absent; `normalise` fills in the
    defaults that are echoed back (depends_on, payload, on_failure, on_success, metadata).

    A step does one of four things: runs a job (`task_name`, optionally fanned out), runs a
    sub-workflow (`workflow`), sleeps (`sleep_secs` or `sleep_until`), or waits for an event
    (`wait_for_event`, with an optional `timeout_secs`). The last two are extensions (issue 15)."""

    name: Name
    task_name: str | None = None
    depends_on: list[str] | None = None
    payload: Object | None = None
    config: PartialJobConfig | None = None
    on_failure: FailurePolicy | None = None
    on_success: Literal["continue"] | None = None
    metadata: Object | None = None
    queue: str | None = None
    when: StepCondition | None = None
    fan_out: FanOut | None = None
    workflow: WorkflowDefinition | None = None
    sleep_secs: SleepSecs | None = None
    sleep_until: datetime | None = None
    wait_for_event: WaitForEvent | None = None
    timeout_secs: SleepSecs | None = None

    @property
    def sleeps(self) -> bool:
        return self.sleep_secs is not None or self.sleep_until is not None

    @property
    def dependencies(self) -> list[str]:
        return self.depends_on or []

    @property
    def policy(self) -> FailurePolicy:
        return self.on_failure or FailurePolicy.HALT


class WorkflowDefinition(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """A workflow as submitted (the body of POST /api/v1/workflows, or a step's sub-workflow)."""

    name: Name
    steps: list[WorkflowStep]
    context: Object | None = None
    metadata: Object | None = None
    timeout_secs: Annotated[int, Meta(ge=1, le=MAX_DELAY_SECS)] | None = None


def validate(definition: WorkflowDefinition, depth: int = 0) -> None:
    """Raise InvalidWorkflow naming the first problem: no steps, duplicate names, unknown
    dependencies, a cycle (naming the steps on it), a step with neither or both of task_name and
    workflow, a malformed condition or fan-out, or sub-workflows nested too deep."""
    where = f"sub-workflow '{definition.name}': " if depth else ""
    if not definition.name.strip():
        raise InvalidWorkflow(f"{where}name is required")
    if not definition.steps:
        raise InvalidWorkflow(f"{where}a workflow needs at least one step")
    if len(definition.steps) > MAX_WORKFLOW_STEPS:
        raise InvalidWorkflow(f"{where}a workflow has at most {MAX_WORKFLOW_STEPS} steps")
    names: set[str] = set()
    for step in definition.steps:
        if not step.name.strip():
            raise InvalidWorkflow(f"{where}a step needs a name")
        if step.name in names:
            raise InvalidWorkflow(f"{where}duplicate step name: {step.name}")
        names.add(step.name)
    for step in definition.steps:
        _validate_step(step, names, where, depth)
    stuck = _cycle_members(definition.steps)
    if stuck:
        raise InvalidWorkflow(f"{where}workflow has a dependency cycle involving: {', '.join(sorted(stuck))}")


def _validate_step(step: WorkflowStep, names: set[str], where: str, depth: int) -> None:
    for dep in step.dependencies:
        if dep not in names:
            raise InvalidWorkflow(f"{where}step '{step.name}' depends on unknown step '{dep}'")
        if dep == step.name:
            raise InvalidWorkflow(f"{where}workflow has a dependency cycle involving: {step.name}")
    if step.queue is not None:
        try:
            check_queue_name(step.queue)
        except ValidationFailed as err:
            raise InvalidWorkflow(
                f"{where}step '{step.name}': {err.message.removeprefix('validation error: ')}"
            ) from None
    has_task = bool(step.task_name and step.task_name.strip())
    kinds = [has_task, step.workflow is not None, step.sleeps, step.wait_for_event is not None]
    if sum(kinds) != 1:
        raise InvalidWorkflow(
            f"{where}step '{step.name}' needs exactly one of task_name, workflow, sleep_secs or sleep_until,"
            " or wait_for_event"
        )
    if step.sleep_secs is not None and step.sleep_until is not None:
        raise InvalidWorkflow(f"{where}step '{step.name}': sleep_secs and sleep_until exclude each other")
    if step.timeout_secs is not None and step.wait_for_event is None:
        raise InvalidWorkflow(f"{where}step '{step.name}': timeout_secs belongs to a wait_for_event step")
    if (step.sleeps or step.wait_for_event is not None) and step.fan_out is not None:
        raise InvalidWorkflow(f"{where}step '{step.name}': fan_out needs a task_name")
    if step.wait_for_event is not None:
        problem = event_key_problem(step.wait_for_event.key)
        if problem:
            raise InvalidWorkflow(f"{where}step '{step.name}': wait_for_event: {problem}")
    if step.workflow is not None and step.fan_out is not None:
        raise InvalidWorkflow(f"{where}step '{step.name}': fan_out needs a task_name, not a workflow")
    if step.when is not None:
        _validate_condition(step.name, step.when, where)
    if step.workflow is not None:
        if depth + 1 >= MAX_WORKFLOW_DEPTH:
            raise InvalidWorkflow(
                f"{where}step '{step.name}': sub-workflows nest at most {MAX_WORKFLOW_DEPTH} deep"
            )
        validate(step.workflow, depth + 1)


@dataclass(frozen=True)
class WorkflowLimits:
    """What this server lets one workflow ask for (the --workflow-max-jobs, --workflow-max-fan-out
    and --tenant-max-running-workflows settings)."""

    max_jobs: int = DEFAULT_MAX_WORKFLOW_JOBS  # jobs one run of a definition may create
    max_fan_out: int = MAX_FAN_OUT  # children one fan-out step may spawn
    max_running: int = 0  # unfinished top-level workflows a tenant may have (0: no quota)


def fan_out_limit(spec: FanOut, limits: WorkflowLimits) -> int:
    """The most children a fan-out step may spawn: its `max_items`, at most the server's bound."""
    return limits.max_fan_out if spec.max_items is None else min(spec.max_items, limits.max_fan_out)


def most_jobs(definition: WorkflowDefinition, limits: WorkflowLimits) -> int:
    """The most jobs one run of `definition` can create, whatever its context holds: one per task
    step, a fan-out step's limit, and a sub-workflow's own most (sleeps and waits run none)."""
    total = 0
    for step in definition.steps:
        if step.workflow is not None:
            total += most_jobs(step.workflow, limits)
        elif step.fan_out is not None:
            total += fan_out_limit(step.fan_out, limits)
        elif step.task_name is not None:
            total += 1
    return total


def check_budget(definition: WorkflowDefinition, limits: WorkflowLimits) -> None:
    """Raise InvalidWorkflow when a (valid) definition asks for more than this server allows: a
    fan-out `max_items` over --workflow-max-fan-out, or more jobs in one run (the most it can
    create, `most_jobs`) than --workflow-max-jobs. Each run (the first, and each retry) is bounded
    by it, so no request can make the server create more."""
    _check_fan_outs(definition, limits.max_fan_out, "")
    most = most_jobs(definition, limits)
    if most > limits.max_jobs:
        raise InvalidWorkflow(
            f"the workflow can create up to {most} jobs (one per task step, a fan-out's max_items,"
            f" or {limits.max_fan_out} when it has none, and its sub-workflows' jobs), more than"
            f" this server's limit of {limits.max_jobs} (--workflow-max-jobs); declare smaller"
            " max_items or split the workflow"
        )


def _check_fan_outs(definition: WorkflowDefinition, most: int, where: str) -> None:
    for step in definition.steps:
        if step.fan_out is not None and step.fan_out.max_items is not None and step.fan_out.max_items > most:
            raise InvalidWorkflow(
                f"{where}step '{step.name}': fan_out max_items {step.fan_out.max_items} is more than"
                f" this server's limit of {most} (--workflow-max-fan-out)"
            )
        if step.workflow is not None:
            _check_fan_outs(step.workflow, most, f"{where}sub-workflow '{step.workflow.name}': ")


def check_running_quota(running: int, limits: WorkflowLimits) -> None:
    """Raise QuotaExceeded when a tenant that already has `running` unfinished top-level workflows
    may not start (or retry) another."""
    if limits.max_running and running >= limits.max_running:
        raise QuotaExceeded(
            f"this tenant already has {limits.max_running} unfinished workflows, the most this server"
            " allows one tenant (--tenant-max-running-workflows); retry once one has finished",
            QUOTA_RETRY_AFTER_SECS,
        )


def _validate_condition(step: str, cond: StepCondition, where: str) -> None:
    shapes = [cond.path is not None, cond.all is not None, cond.any is not None, cond.not_ is not None]
    if sum(shapes) != 1:
        raise InvalidWorkflow(f"{where}step '{step}': when: exactly one of path, all, any or not must be set")
    if cond.path is not None:
        if not cond.path.strip():
            raise InvalidWorkflow(f"{where}step '{step}': when: path must not be empty")
        op = cond.op or ("exists" if cond.value is UNSET else "eq")
        if op != "exists" and cond.value is UNSET:
            raise InvalidWorkflow(f"{where}step '{step}': when: op '{op}' needs a value")
        if op == "in" and not isinstance(cond.value, list):
            raise InvalidWorkflow(f"{where}step '{step}': when: op 'in' needs a list value")
        return
    if cond.op is not None or cond.value is not UNSET:
        raise InvalidWorkflow(f"{where}step '{step}': when: op and value belong to a path condition")
    for member in (cond.all or []) + (cond.any or []) + ([cond.not_] if cond.not_ else []):
        _validate_condition(step, member, where)


def event_key_problem(key: str, *, template: bool = True) -> str | None:
    """What is wrong with an event key, or None; a `template` (a wait's key) also has its
    placeholders checked (an event's posted key is taken as it is)."""
    if not 1 <= len(key.encode(errors="surrogateescape")) <= MAX_EVENT_KEY_BYTES:
        return f"key must be 1 to {MAX_EVENT_KEY_BYTES} bytes"
    if "\x00" in key:
        return "key must not contain NUL"
    if (template and "{{" in _PLACEHOLDER.sub("", key)) or "}}" in _PLACEHOLDER.sub("", key):
        return "a placeholder is written {{context.path}}"
    return None


def resolve_event_key(template: str, context: Object) -> str:
    """The key a waiting step waits for: each `{{context.path}}` replaced by the context's value
    there (a string as it is, anything else as JSON). A ValueError names a missing path or a
    resolved key out of bounds."""

    def value(match: re.Match[str]) -> str:
        found = lookup(context, match.group(1))
        if is_missing(found):
            raise ValueError(f"event key placeholder {match.group(0)} has no value in the context")
        return found if isinstance(found, str) else msgspec.json.encode(found).decode()

    key = _PLACEHOLDER.sub(value, template)
    problem = event_key_problem(key) if key else f"key must be 1 to {MAX_EVENT_KEY_BYTES} bytes"
    if problem:
        raise ValueError(f"event key {key!r}: {problem}")
    return key


def _cycle_members(steps: list[WorkflowStep]) -> set[str]:
    """Kahn's algorithm: whatever cannot be ordered sits on (or behind) a cycle."""
    indegree = {s.name: len(set(s.dependencies)) for s in steps}
    dependents: dict[str, list[str]] = {s.name: [] for s in steps}
    for s in steps:
        for dep in set(s.dependencies):
            dependents[dep].append(s.name)
    ready = [name for name, n in indegree.items() if n == 0]
    while ready:
        name = ready.pop()
        for child in dependents[name]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    return {name for name, n in indegree.items() if n > 0}


def later_queues(definition: WorkflowDefinition, default_queue: str) -> set[str] | None:
    """Every queue the workflow's jobs may go to (its task steps' and, nested, its sub-workflows'),
    or None when they are all its root steps', whose jobs are written as it starts."""
    every: set[str] = set()
    roots: set[str] = set()
    pending = [(definition, True)]
    while pending:
        current, top = pending.pop()
        for step in current.steps:
            if step.workflow is not None:
                pending.append((step.workflow, False))
            elif step.task_name:
                every.add(step.queue or default_queue)
                if top and not step.dependencies:
                    roots.add(step.queue or default_queue)
    return None if every <= roots else every


def normalise(definition: WorkflowDefinition) -> WorkflowDefinition:
    """The stored definition: the defaults upstream echoes (a step's depends_on, payload,
    on_failure, on_success and metadata; the workflow's context and metadata) filled in."""
    return msgspec.structs.replace(
        definition,
        steps=[_normalise_step(s) for s in definition.steps],
        context=definition.context or {},
        metadata=definition.metadata or {},
    )


def _normalise_step(step: WorkflowStep) -> WorkflowStep:
    return msgspec.structs.replace(
        step,
        depends_on=list(step.dependencies),
        payload=step.payload or {},
        on_failure=step.policy,
        on_success=step.on_success or "continue",
        metadata=step.metadata or {},
        workflow=None if step.workflow is None else normalise(step.workflow),
    )


_NON_ALNUM = re.compile(r"[^A-Za-z0-9]")


def _node_id(name: str) -> str:
    ident = _NON_ALNUM.sub("_", name)
    return "n" + ident if not ident or ident[0].isdigit() else ident


def mermaid(steps: Iterable[WorkflowStep]) -> str:
    """`graph TD`, one node line per step in declaration order, then one line per edge."""
    steps = list(steps)
    lines = ["graph TD"]
    lines += [f'    {_node_id(s.name)}["{s.name.replace(chr(34), chr(39))}"]' for s in steps]
    lines += [f"    {_node_id(dep)} --> {_node_id(s.name)}" for s in steps for dep in s.dependencies]
    return "".join(line + "\n" for line in lines)


# --- conditions ----------------------------------------------------------------------------------

_MISSING = object()


def lookup(context: Any, path: str) -> Any:
    """The value at a dotted path (`validate.ok` is key `ok` of step `validate`'s result); list
    elements are addressed by index (`items.0`). A missing path gives a private sentinel."""
    value = context
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def is_missing(value: Any) -> bool:
    return value is _MISSING


def _comparable(a: Any, b: Any) -> bool:
    def number(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    return (number(a) and number(b)) or (isinstance(a, str) and isinstance(b, str))


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, while 1 and 1.0 are the same number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def holds(cond: StepCondition, context: Object) -> bool:
    """Whether `cond` is true of the workflow context. A missing path satisfies only `ne` (and
    `not exists`); ordering compares numbers with numbers and strings with strings."""
    if cond.all is not None:
        return all(holds(c, context) for c in cond.all)
    if cond.any is not None:
        return any(holds(c, context) for c in cond.any)
    if cond.not_ is not None:
        return not holds(cond.not_, context)
    actual = lookup(context, cond.path or "")
    op = cond.op or ("exists" if cond.value is UNSET else "eq")
    expected = None if cond.value is UNSET else cond.value
    if op == "exists":
        return actual is not _MISSING
    if actual is _MISSING:
        return op == "ne"
    return _compare(op, actual, expected)


def _compare(op: str, actual: Any, expected: Any) -> bool:
    if op == "eq":
        return _json_equal(actual, expected)
    if op == "ne":
        return not _json_equal(actual, expected)
    if op in ("gt", "gte", "lt", "lte"):
        if not _comparable(actual, expected):
            return False
        return bool(
            {
                "gt": actual > expected,
                "gte": actual >= expected,
                "lt": actual < expected,
                "lte": actual <= expected,
            }[op]
        )
    if op == "contains":
        if isinstance(actual, str | dict):
            return isinstance(expected, str) and expected in actual
        if isinstance(actual, list):
            return expected in actual
        return False
    if op == "in":
        return isinstance(expected, list) and actual in expected
    return False


# --- running workflows ---------------------------------------------------------------------------


@dataclass(slots=True)
class StepRun:
    """A step while the advancer holds its workflow's lock: mutable, written back as it changes."""

    name: str
    definition: WorkflowStep
    depends_on: list[str]
    on_failure: FailurePolicy
    status: StepStatus
    skip_kind: SkipKind | None = None
    attempt: int = 0
    job_id: uuid.UUID | None = None
    child_workflow_id: str | None = None
    fan_total: int | None = None
    fan_completed: int = 0
    fan_failed: int = 0

    @property
    def satisfied(self) -> bool:
        """May its dependents run?"""
        return (
            self.status is StepStatus.COMPLETED
            or (self.status is StepStatus.SKIPPED and self.skip_kind is SkipKind.CONDITION)
            or (self.status is StepStatus.FAILED and self.on_failure is FailurePolicy.CONTINUE)
        )

    @property
    def problem(self) -> bool:
        """Did it fail to do its work? (failed, cancelled, or skipped because of a failure)"""
        return self.status in (StepStatus.FAILED, StepStatus.CANCELLED) or (
            self.status is StepStatus.SKIPPED and self.skip_kind is SkipKind.POLICY
        )

    def scheduled(
        self,
        attempt: int,
        *,
        job_id: uuid.UUID | None = None,
        child_workflow_id: str | None = None,
        fan_total: int | None = None,
    ) -> None:
        self.status, self.attempt = StepStatus.RUNNING, attempt
        self.job_id, self.child_workflow_id, self.fan_total = job_id, child_workflow_id, fan_total
        self.fan_completed = self.fan_failed = 0


def blocker(step: StepRun, steps: Mapping[str, StepRun]) -> StepRun | None:
    """The first dependency that keeps `step` from running, once all its dependencies are
    terminal; None when it may run."""
    return next((steps[d] for d in step.depends_on if not steps[d].satisfied), None)


def ready(step: StepRun, steps: Mapping[str, StepRun]) -> bool:
    """A pending step whose dependencies have all ended."""
    return step.status is StepStatus.PENDING and all(steps[d].status.terminal for d in step.depends_on)


def steps_to_rerun(steps: Iterable[StepRun]) -> list[str]:
    """What a retry re-runs: every problem step and everything downstream of one; completed
    upstream steps keep their results."""
    steps = list(steps)
    rerun = {s.name for s in steps if s.problem}
    grew = True
    while grew:
        grew = False
        for s in steps:
            if s.name not in rerun and rerun.intersection(s.depends_on):
                rerun.add(s.name)
                grew = True
    return sorted(rerun)


def settlement(steps: Iterable[StepRun], halted: bool) -> tuple[WorkflowStatus, str | None]:
    """How a workflow whose steps have all ended finishes: its status and error message."""
    steps = list(steps)
    if halted:
        return WorkflowStatus.FAILED, None  # the halt recorded its reason
    problems = [s for s in steps if s.problem]
    if not problems:
        return WorkflowStatus.COMPLETED, None
    names = ", ".join(s.name for s in problems)
    completed = any(s.status is StepStatus.COMPLETED for s in steps)
    status = WorkflowStatus.PARTIALLY_FAILED if completed else WorkflowStatus.FAILED
    return status, f"steps did not complete: {names}"


@dataclass(slots=True)
class WorkflowRun:
    """A live workflow's head while the advancer holds its lock."""

    id: str
    tenant_id: str | None
    status: WorkflowStatus
    context: Object = field(default_factory=dict)
    halted: bool = False
    depth: int = 0
    parent_workflow_id: str | None = None
    parent_step_name: str | None = None
    steps: dict[str, StepRun] = field(default_factory=dict)
    name: str | None = None
    # The W3C trace context the workflow was created in: its steps' jobs and children inherit it.
    traceparent: str | None = None
    tracestate: str | None = None

    @property
    def trace(self) -> TraceContext | None:
        return None if self.traceparent is None else TraceContext(self.traceparent, self.tracestate)


class OutboxEvent(Struct, frozen=True, kw_only=True):
    """One thing that happened to a workflow, for the advancer: it was created or retried, a step's
    job ended (with its result or error), a sub-workflow ended, or the janitor asks for a re-check."""

    id: int
    workflow_id: str
    kind: OutboxKind
    attempts: int = 0
    step_name: str | None = None
    job_id: uuid.UUID | None = None
    step_attempt: int | None = None
    outcome: str | None = None
    result: Object | None = None
    error_message: str | None = None
    child_workflow_id: str | None = None


# --- records -------------------------------------------------------------------------------------


class Workflow(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A workflow as stored; its JSON is the API's `Workflow` (steps as normalised)."""

    id: str
    name: str
    status: WorkflowStatus
    steps: list[WorkflowStep]
    created_at: datetime
    context: Object
    metadata: Object
    retry_count: int
    started_at: datetime | None = None
    completed_at: datetime | None = None
    tenant_id: str | None = None
    timeout_secs: int | None = None
    deadline_at: datetime | None = None
    error_message: str | None = None
    parent_workflow_id: str | None = None
    parent_step_name: str | None = None


class FanOutProgress(Struct, frozen=True):
    total: int
    completed: int
    failed: int


class WorkflowStepState(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A step's live state as the API shows it."""

    name: str
    status: StepStatus
    job_id: uuid.UUID | None = None
    error: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    child_workflow_id: str | None = None
    fan_out: FanOutProgress | None = None
    # Extensions (issue 15), while a sleep or a wait runs: when it wakes (the sleep's end, the
    # wait's time-out) and the event key it waits for.
    wake_at: datetime | None = None
    event_key: str | None = None
