"""Bounds on what one request may make the server store: the size of a job's payload and metadata,
of a workflow's context and its steps' payloads, of a job's result, and of a failure's error text;
and how much of a refused input an error message quotes back.

A payload or a result is measured as the JSON the server stores and serves (compact UTF-8), so a
cap means the same whatever whitespace or escapes the client sent. The caps are settings
(--max-payload-bytes, --max-result-bytes); past one the request is a 413 naming the field.

An error text is never refused: a worker's failure report is all the operator will learn of the
failure, and refusing it would leave the job leased until its lease runs out. Past MAX_ERROR_BYTES
it is cut at a character boundary and ends with a marker saying how much was left out; it is the
text the job, its dead letter and its attempt keep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from shared.domain.errors import ContentTooLarge
from shared.domain.workflows import WorkflowDefinition

MAX_ERROR_BYTES = 64 * 1024  # a failure's error text, marker included (UTF-8)
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
DEFAULT_MAX_RESULT_BYTES = 1024 * 1024
QUOTED_CHARS = 64  # of a refused input, an error message quotes at most this much

_encode = msgspec.json.encode


def quoted(text: str, most: int = QUOTED_CHARS) -> str:
    """`text` as an error message quotes it: its repr, cut to its first `most` characters with
    the number left out, so that a huge input is never echoed back whole."""
    if len(text) <= most:
        return repr(text)
    return f"{text[:most]!r}... ({len(text) - most} more characters)"


def clipped(text: str, most: int = 2 * QUOTED_CHARS) -> str:
    """`text` (a parser's message, which may quote the input) cut to its first `most` characters."""
    return text if len(text) <= most else text[:most] + "..."


def truncated_error(text: str, most: int = MAX_ERROR_BYTES) -> str:
    """`text` if it takes at most `most` bytes of UTF-8; else its beginning and a marker saying how
    many bytes were left out, `most` bytes in all, cut at a character boundary."""
    if len(text) * 4 <= most:  # (a character takes at most 4 bytes)
        return text
    encoded = text.encode(errors="surrogatepass")
    if len(encoded) <= most:
        return text
    room = most - len(_marker(len(encoded)))  # no fewer digits than any count it may say
    kept = encoded[:room].decode(errors="ignore")
    return kept + _marker(len(encoded) - len(kept.encode(errors="surrogatepass")))


def _marker(left_out: int) -> str:
    return f"... [truncated: {left_out} more bytes]"


def check_size(field: str, value: Any, most: int) -> None:
    """ContentTooLarge when `value` (a payload, metadata or a result) takes more than `most` bytes
    of JSON; `most` 0 is no cap."""
    if not most or not value:
        return
    size = len(_encode(value))
    if size > most:
        raise ContentTooLarge(f"{field} takes {size} bytes of JSON; this server takes at most {most}")


def check_sizes(values: Sequence[Any], most: int, field_of: Callable[[int], str]) -> None:
    """check_size for each of `values` (the `n`th is the field `field_of(n)`), in one encoding of
    them all while they fit together: no value takes more than the list that holds it. (A batch of
    a thousand small payloads costs a third of a millisecond this way, against twice that one by one.)"""
    if not most or len(_encode(values)) <= most:
        return
    for n, value in enumerate(values):
        check_size(field_of(n), value, most)


def _workflow_parts(definition: WorkflowDefinition, where: str) -> Iterator[tuple[str, Any]]:
    yield f"{where}context", definition.context
    yield f"{where}metadata", definition.metadata
    for index, step in enumerate(definition.steps):
        yield f"{where}steps[{index}].payload", step.payload
        yield f"{where}steps[{index}].metadata", step.metadata
        if step.workflow is not None:
            yield from _workflow_parts(step.workflow, f"{where}steps[{index}].workflow.")


def check_workflow_sizes(definition: WorkflowDefinition, most: int, where: str = "") -> None:
    """check_size for a workflow's context and metadata and for each step's payload and
    metadata, sub-workflows' included (each becomes, or is copied into, a job's payload)."""
    if not most:
        return
    fields, values = zip(*_workflow_parts(definition, where), strict=True)
    check_sizes(values, most, fields.__getitem__)
