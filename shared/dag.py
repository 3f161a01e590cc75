"""Workflow definitions: validation before anything is stored, the stored (normalised) step shape,
and the Mermaid diagram. Pure functions; the advancer (services/workflow) executes the DAG."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from shared import wire
from shared.domain import MAX_WORKFLOW_DEPTH, MAX_WORKFLOW_STEPS, InvalidWorkflow


def validate(request: wire.CreateWorkflowRequest, depth: int = 0) -> None:
    """Raise InvalidWorkflow naming the first problem: no steps, duplicate names, unknown
    dependencies, a cycle (naming the steps on it), a step with neither or both of task_name and
    workflow, a malformed condition or fan-out, or sub-workflows nested too deep."""
    where = f"sub-workflow '{request.name}': " if depth else ""
    if not request.name.strip():
        raise InvalidWorkflow(f"{where}name is required")
    if not request.steps:
        raise InvalidWorkflow(f"{where}a workflow needs at least one step")
    if len(request.steps) > MAX_WORKFLOW_STEPS:
        raise InvalidWorkflow(f"{where}a workflow has at most {MAX_WORKFLOW_STEPS} steps")
    names: set[str] = set()
    for step in request.steps:
        if not step.name.strip():
            raise InvalidWorkflow(f"{where}a step needs a name")
        if step.name in names:
            raise InvalidWorkflow(f"{where}duplicate step name: {step.name}")
        names.add(step.name)
    for step in request.steps:
        for dep in step.depends_on or ():
            if dep not in names:
                raise InvalidWorkflow(f"{where}step '{step.name}' depends on unknown step '{dep}'")
            if dep == step.name:
                raise InvalidWorkflow(f"{where}workflow has a dependency cycle involving: {step.name}")
        has_task = bool(step.task_name and step.task_name.strip())
        if has_task == (step.workflow is not None):
            raise InvalidWorkflow(f"{where}step '{step.name}' needs exactly one of task_name or workflow")
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
    stuck = _cycle_members(request.steps)
    if stuck:
        raise InvalidWorkflow(f"{where}workflow has a dependency cycle involving: {', '.join(sorted(stuck))}")


def _validate_condition(step: str, cond: wire.StepCondition, where: str) -> None:
    shapes = [cond.path is not None, cond.all is not None, cond.any is not None, cond.not_ is not None]
    if sum(shapes) != 1:
        raise InvalidWorkflow(f"{where}step '{step}': when: exactly one of path, all, any or not must be set")
    if cond.path is not None:
        if not cond.path.strip():
            raise InvalidWorkflow(f"{where}step '{step}': when: path must not be empty")
        op = cond.op or ("exists" if cond.value is msgspec.UNSET else "eq")
        if op not in ("exists",) and cond.value is msgspec.UNSET:
            raise InvalidWorkflow(f"{where}step '{step}': when: op '{op}' needs a value")
        if op == "in" and not isinstance(cond.value, list):
            raise InvalidWorkflow(f"{where}step '{step}': when: op 'in' needs a list value")
        return
    if cond.op is not None or cond.value is not msgspec.UNSET:
        raise InvalidWorkflow(f"{where}step '{step}': when: op and value belong to a path condition")
    for member in (cond.all or []) + (cond.any or []) + ([cond.not_] if cond.not_ else []):
        _validate_condition(step, member, where)


def _cycle_members(steps: list[wire.WorkflowStep]) -> set[str]:
    """Kahn's algorithm: whatever cannot be ordered sits on (or behind) a cycle."""
    indegree = {s.name: len(set(s.depends_on or ())) for s in steps}
    dependents: dict[str, list[str]] = {s.name: [] for s in steps}
    for s in steps:
        for dep in set(s.depends_on or ()):
            dependents[dep].append(s.name)
    ready = [name for name, n in indegree.items() if n == 0]
    while ready:
        name = ready.pop()
        for child in dependents[name]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    return {name for name, n in indegree.items() if n > 0}


def normalise_step(step: wire.WorkflowStep) -> dict[str, Any]:
    """The stored definition: defaults echoed (payload, depends_on, on_failure, on_success,
    metadata), absent optional fields left out, as upstream echoes them."""
    out: dict[str, Any] = {"name": step.name}
    if step.task_name is not None:
        out["task_name"] = step.task_name
    out["depends_on"] = list(step.depends_on or [])
    out["payload"] = step.payload or {}
    if step.config is not None:
        out["config"] = msgspec.to_builtins(step.config)
    out["on_failure"] = step.on_failure or "halt"
    out["on_success"] = step.on_success or "continue"
    out["metadata"] = step.metadata or {}
    for key in ("queue", "when", "fan_out"):
        value = getattr(step, key)
        if value is not None:
            out[key] = msgspec.to_builtins(value)
    if step.workflow is not None:
        out["workflow"] = normalise_request(step.workflow)
    return out


def normalise_request(request: wire.CreateWorkflowRequest) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": request.name,
        "steps": [normalise_step(s) for s in request.steps],
        "context": request.context or {},
        "metadata": request.metadata or {},
    }
    if request.timeout_secs is not None:
        out["timeout_secs"] = request.timeout_secs
    return out


_NON_ALNUM = re.compile(r"[^A-Za-z0-9]")


def node_id(name: str) -> str:
    ident = _NON_ALNUM.sub("_", name)
    return "n" + ident if not ident or ident[0].isdigit() else ident


def mermaid(steps: list[dict[str, Any]]) -> str:
    """`graph TD`, one node line per step in declaration order, then one line per edge."""
    lines = ["graph TD"]
    lines += [f'    {node_id(s["name"])}["{s["name"].replace(chr(34), chr(39))}"]' for s in steps]
    lines += [
        f"    {node_id(dep)} --> {node_id(s['name'])}" for s in steps for dep in s.get("depends_on", [])
    ]
    return "".join(line + "\n" for line in lines)
