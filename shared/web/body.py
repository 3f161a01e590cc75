"""Request bodies in, JSON out: msgspec decoders built once per type, with the contract's limits on
what a body may hold (nesting depth, NUL characters) checked before anything else sees it."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from aiohttp import http_exceptions, web

from shared.domain.errors import DomainError, ValidationFailed

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}

# Deeper JSON than this is refused: it is never needed, and every layer below (PostgreSQL's jsonb
# encoding, the workflow engine's conditions and context merges) would otherwise have to survive
# recursion limits.
MAX_JSON_DEPTH = 100


class UnreadableBody(ValidationFailed):
    """A 400 after which the connection closes: what is left of the body cannot be parsed."""


class PayloadTooLarge(DomainError):
    """The body is over --max-body-bytes (413)."""


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encoder.encode(body), status=status, content_type="application/json")


def _validation_detail(err: msgspec.MsgspecError) -> str:
    """msgspec's message, to follow a colon: "Expected `int`..." as "expected `int`...", but an
    initialism kept ("JSON is malformed: ...", which follows "malformed JSON: " without it)."""
    text = str(err).removeprefix("JSON is malformed: ")
    if text[1:2].isupper():
        return text
    return text[0].lower() + text[1:] if text else "malformed body"


async def decode(request: web.Request, typ: type[T]) -> T:
    """The request body as `typ`: malformed JSON, wrong types, unknown fields, out-of-range values
    and nesting deeper than MAX_JSON_DEPTH are a 400 naming the problem, and so is a missing body
    (every route with a body requires one; `{}` is the body whose fields all take their defaults)."""
    decoder = _decoders.get(typ)
    if decoder is None:
        decoder = _decoders[typ] = msgspec.json.Decoder(typ)
    try:
        raw = await request.read()
    except (http_exceptions.HttpProcessingError, web.RequestPayloadError):
        # Typically a Content-Encoding the body does not match (a truncated or plain gzip body).
        # The rest of it cannot be read either: aiohttp must not try to after the answer, and the
        # connection closes with it.
        request.content.feed_eof()
        encoding = request.headers.get("Content-Encoding")
        raise UnreadableBody(
            f"the body is not valid {encoding} data" if encoding else "the body could not be read"
        ) from None
    if not raw.strip():
        raise ValidationFailed("a JSON body is required")
    if nested_deeper_than(raw, MAX_JSON_DEPTH):
        raise ValidationFailed(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value: T = decoder.decode(raw)
    except msgspec.ValidationError as err:
        value = _with_integral_floats(raw, typ, err)
    except msgspec.DecodeError as err:
        raise ValidationFailed(f"malformed JSON: {_validation_detail(err)}") from None
    except RecursionError:  # not valid JSON, so not measured above
        raise ValidationFailed(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    if b"\\u0000" in raw and _has_nul(msgspec.to_builtins(value)):
        raise ValidationFailed("NUL characters (\\u0000) cannot be stored")
    return value


def _integral(literal: str) -> int | float:
    number = float(literal)
    return int(number) if number.is_integer() else number


_integral_decoder = msgspec.json.Decoder(float_hook=_integral)


def _with_integral_floats(raw: bytes, typ: type[T], err: msgspec.ValidationError) -> T:
    """JSON Schema, and so the OpenAPI document, counts 55.0 as an integer: a body refused only for
    an integral float where an integer belongs is read again with integral floats as integers (the
    rarely taken path, so the usual decode stays one pass). Otherwise `err` is the 400."""
    if "got `float`" in str(err):
        try:
            return msgspec.convert(_integral_decoder.decode(raw), typ)
        except msgspec.ValidationError:
            pass
    raise ValidationFailed(_validation_detail(err)) from None


# Square brackets read as braces (the depth does not care which kind: malformed JSON is refused
# by the decoder anyway); every byte but brackets and quotes is deleted first.
_SKELETON = bytes({ord("["): ord("{"), ord("]"): ord("}")}.get(b, b) for b in range(256))
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'{}[]"')


def nested_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether JSON `raw` nests objects and arrays more than `limit` deep, found without recursion
    and before decoding: drop the escapes that involve a quote or a backslash, keep only brackets
    and quotes, drop what lies between quotes, then peel the innermost pairs off once per level.
    (For malformed JSON the answer is a guess, but such a body is refused either way.)"""
    if raw.count(b"{") + raw.count(b"[") <= limit:
        return False  # too few brackets to nest that deep
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = raw.translate(_SKELETON, _NOT_STRUCTURE)
    # Two quotes with nothing between close one string and open the next, or hold an empty one:
    # dropping them leaves what lies outside the strings as it was. Most bodies keep no quote then.
    skeleton = skeleton.replace(b'""', b"")
    if b'"' in skeleton:
        skeleton = b"".join(skeleton.split(b'"')[::2])  # the even pieces lie outside strings
    for _ in range(limit):
        if not skeleton:
            return False
        skeleton = skeleton.replace(b"{}", b"")  # one level: the scan never rereads what it joined
    return bool(skeleton)


def _has_nul(value: Any) -> bool:
    """PostgreSQL text and jsonb cannot hold U+0000: look for it anywhere in a decoded body."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):  # (to_builtins keeps a Struct's tuple fields as tuples)
        return any(_has_nul(v) for v in value)
    return False


def is_utf8(text: str) -> bool:
    """False for a header value that was not UTF-8 (aiohttp hands such bytes over as surrogate
    escapes, which neither hashing nor PostgreSQL accepts)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
