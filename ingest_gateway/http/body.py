"""Request bodies of every route but produce: read within a limit, parsed as JSON.

Those bodies are small (a topic's configs, a group join, a commit), so one limit
serves them all, ``max.control.request.size`` (1 MiB). A body is refused with
413 as soon as its declared ``Content-Length`` or the bytes received so far
pass the limit: nothing past the limit is kept, also for a chunked body, which
declares no length. (uvicorn discards what the client still sends after the
answer; ``request.read.timeout.ms`` bounds how long that may take.)

JSON: RFC 8259 only (``NaN``/``Infinity`` are refused), nested at most
``max.json.nesting.depth`` arrays/objects deep (400 NestingTooDeep; without the
bound, ``json.loads`` raises RecursionError near 1000 levels, a 500). A body
over :data:`PARSE_INLINE_BYTES` is parsed on a worker thread so the event loop
keeps answering other clients meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from starlette.requests import ClientDisconnect, Request

from ingest_gateway.errors import BadRequest, ControlRequestTooLarge, NestingTooDeep
from ingest_gateway.http.params import parse_int

#: bodies up to this size are parsed on the event loop: json.loads of 64 KiB takes about
#: 0.5 ms here, a thread hop about 65 us; above it, parsing would stall other clients longer
PARSE_INLINE_BYTES = 64 * 1024


async def read_body(request: Request, *, limit: int | None = None) -> bytes:
    """The whole body, at most ``limit`` bytes (default ``max.control.request.size``).

    Raises ControlRequestTooLarge (413) once the declared length or the bytes
    received pass the limit, BadRequest if the client disconnects midway.
    """
    if limit is None:
        limit = request.app.state.settings.gateway.max_control_request_size
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = parse_int(declared)
        except ValueError:
            raise BadRequest(f"Content-Length must be a number, not {declared!r}") from None
        if size > limit:
            raise ControlRequestTooLarge(size, limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ControlRequestTooLarge(size, limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise BadRequest("the client disconnected before sending the whole body") from None
    return b"".join(chunks)


async def read_json(request: Request, *, empty: Any = None) -> Any:
    """The body parsed as JSON (see the module doc for the bounds).

    An empty body answers ``empty``, or raises BadRequest when ``empty`` is None.
    Raises ControlRequestTooLarge, NestingTooDeep or BadRequest (not JSON).
    """
    body = await read_body(request)
    if not body.strip():
        if empty is None:
            raise BadRequest("the request needs a JSON body")
        return empty
    max_depth = request.app.state.settings.gateway.max_json_nesting_depth
    if len(body) <= PARSE_INLINE_BYTES:
        return parse_json(body, max_depth=max_depth)
    return await asyncio.to_thread(parse_json, body, max_depth=max_depth)


def _refuse_constant(name: str) -> Any:
    raise BadRequest(f"the body is not valid JSON: {name} is not a JSON number")


def parse_json(body: bytes, *, max_depth: int) -> Any:
    """``body`` as JSON, nested at most ``max_depth`` deep.

    Raises NestingTooDeep past ``max_depth``, BadRequest for anything not JSON.
    """
    try:
        doc = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:  # thousands deep: far past any sane max_depth
        raise NestingTooDeep(max_depth) from None
    except (ValueError, UnicodeDecodeError) as e:
        if isinstance(e, BadRequest):
            raise
        raise BadRequest(f"the body is not valid JSON: {e}") from None
    # Counting brackets (C speed) bounds the depth from above: walk only when it might be over.
    if body.count(b"[") + body.count(b"{") > max_depth and json_depth(doc) > max_depth:
        raise NestingTooDeep(max_depth)
    # A lone surrogate can only come from a \uD800-\uDFFF escape (UTF-8 cannot carry one):
    # walk the strings only when the body has such an escape.
    if _SURROGATE_ESCAPE.search(body) and _has_lone_surrogate(doc):
        raise BadRequest("the body is not valid JSON text: a string holds a lone UTF-16 "
                         "surrogate (\\ud800-\\udfff), which no UTF-8 text can carry")
    return doc


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(doc: Any) -> bool:
    """Whether any string or object key in ``doc`` holds a lone surrogate (no recursion)."""
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return False


def json_depth(doc: Any) -> int:
    """Levels of nested lists and objects in ``doc`` (0 for a scalar), without recursion."""
    depth, level = 0, [doc] if isinstance(doc, (dict, list)) else []
    while level:
        depth += 1
        inner: list[Any] = []
        for x in level:
            inner.extend(x.values() if isinstance(x, dict) else x)
        level = [x for x in inner if isinstance(x, (dict, list))]
    return depth
