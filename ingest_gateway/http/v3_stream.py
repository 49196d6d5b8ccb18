"""REST Proxy v3 streamed produce: records and their delivery reports on one connection.

Confluent's streaming mode: a client sends ``POST /v3/clusters/{c}/topics/{t}/records``
with ``Transfer-Encoding: chunked`` and writes records, concatenated JSON objects,
for as long as it keeps the connection open; the server answers each with its
delivery report, in order, on the same response, as soon as it is written, so a
client may wait for one record's report before it writes the next (Confluent's own
``examples/produce_v3`` do). A body that declares its ``Content-Length`` is not a
stream: ``v3_records`` answers it whole.

Here the response (200, ``application/json``) starts with the first records that
arrive whole; each read's whole records are produced together (one batch, acks=all,
through ``v3_records``), and their reports, one JSON object a line, are sent before
the next read. A record is refused by its own report (bad base64, an unknown
partition, ...) and the stream goes on. What ends it, with one last error report:
text that is not a JSON object between records (the stream cannot be resynchronised),
one record past ``max.request.size``, nesting past ``max.json.nesting.depth``, bytes
that are not UTF-8, or the body ending inside a record. The silence of the connection
is bounded by ``request.read.timeout.ms`` (``http_protocol``: a duplex stream).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import StreamingResponse

from conf.errors import SparklogError
from ingest_gateway.errors import BadRequest, RequestTooLarge

_SPECIAL = re.compile(r'[{}"\\]')
_NON_SPACE = re.compile(r"[^ \t\r\n]")


class Splitter:
    """Cuts a stream of text into whole top-level JSON objects, across reads.

    ``feed`` returns the objects completed by a piece of text (as text; parsing is
    the caller's). What makes the rest of the stream unreadable is kept in ``broken``
    (the objects completed before it are still returned): BadRequest for text that is
    not an object between objects or objects nested past ``max_depth``,
    RequestTooLarge for one past ``max_size`` characters."""

    def __init__(self, *, max_depth: int, max_size: int):
        self.max_depth, self.max_size = max_depth, max_size
        self.parts: list[str] = []  # the current object's text from earlier reads
        self.size = 0
        self.depth = 0
        self.in_string = False
        self.escaped = False  # a backslash ended the last read inside a string
        self.broken: SparklogError | None = None

    @property
    def inside(self) -> bool:
        """Whether a record has begun and not ended."""
        return self.depth > 0

    def feed(self, text: str) -> list[str]:
        out: list[str] = []
        try:
            self._scan(text, out)
        except (BadRequest, RequestTooLarge) as e:
            self.broken = e
        return out

    def _scan(self, text: str, out: list[str]) -> None:
        pos, start = 0, 0
        if self.escaped:
            pos, self.escaped = 1, False
        while pos < len(text):
            if self.depth == 0:
                m = _NON_SPACE.search(text, pos)
                if m is None:
                    return
                if text[m.start()] != "{":
                    raise BadRequest(f"a streamed record must be a JSON object, not text "
                                     f"starting {text[m.start():m.start() + 20]!r}")
                start = pos = m.start()
            m = _SPECIAL.search(text, pos)
            if m is None:
                break
            ch, i = m.group(), m.start()
            pos = i + 1
            if self.in_string:
                if ch == "\\":
                    pos = i + 2
                    self.escaped = pos > len(text)
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch == "{":
                self.depth += 1
                if self.depth > self.max_depth:
                    raise BadRequest(f"a record is nested deeper than {self.max_depth}")
            elif ch == "}":
                self.depth -= 1
                if self.depth == 0:
                    out.append("".join(self.parts) + text[start:pos])
                    self.parts, self.size = [], 0
        if self.depth > 0:
            piece = text[start:]
            self.size += len(piece)
            if self.size > self.max_size:
                raise RequestTooLarge(self.size, self.max_size)
            self.parts.append(piece)


class DuplexResponse(StreamingResponse):
    """A streaming response sent while the request's body is still being read.

    Starlette's StreamingResponse reads the request's messages while it streams, to
    notice a disconnect, and would swallow the body still arriving; here the body is
    read by the response's own iterator, which sees a disconnect itself."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.stream_response(send)


def _line(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


async def reports(request: Request, run: Any, refused: Any) -> AsyncIterator[bytes]:
    """The delivery reports of the records streamed in ``request``'s body, as they are
    written. ``run(docs, label)`` produces parsed records (``v3_records._run``'s
    answers: a report or the SparklogError refusing each); ``refused(exc)`` is the
    report of a refusal."""
    settings = request.app.state.settings.gateway
    splitter = Splitter(max_depth=settings.max_json_nesting_depth,
                        max_size=settings.max_request_size)
    decode = codecs.getincrementaldecoder("utf-8")().decode
    count = 0
    try:
        async for chunk in request.stream():
            texts = splitter.feed(decode(chunk))
            if texts:
                docs: list[Any] = []
                for text in texts:
                    try:
                        docs.append(json.loads(text))
                    except (ValueError, RecursionError) as e:
                        docs.append(BadRequest(f"record {count + len(docs)} is not JSON: "
                                               f"{str(e)[:200]}"))
                first = count
                out = await run(docs, lambda i, _d: f"record {first + i}")
                count += len(docs)
                yield b"".join(_line(refused(r) if isinstance(r, SparklogError) else r)
                               for r in out)
            if splitter.broken is not None:
                raise splitter.broken
        if splitter.inside:
            raise BadRequest(f"the body ended inside record {count}")
    except ClientDisconnect:
        return
    except UnicodeDecodeError:
        yield _line(refused(BadRequest("the body is not UTF-8 JSON")))
    except SparklogError as e:  # the stream cannot go on (module doc)
        yield _line(refused(e))
