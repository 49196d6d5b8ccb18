"""The web console at ``/ui``: server-rendered pages over the gateway's own engine, in the
manner of Kafka UI, AKHQ or Redpanda Console. No build step, nothing fetched at run time:
the pages are HTML with inline SVG charts, styled by ``console_static/console.css``
(one small script, ``console.js``, only keeps an optional auto-refresh).

Pages::

    GET  /ui                                   overview: throughput charts, topics, groups
    GET  /ui/topics                            topics: partitions, records, bytes, segments
    GET  /ui/topics/{topic}                    partitions (log start / end, bytes, segments),
                                               configs, produce form
    GET  /ui/topics/{topic}/messages           browser: ?partition=&offset=|timestamp=
                                               &count=&format=text|json|hex
    POST /ui/topics/{topic}/produce            the produce form (urlencoded), then 303 to
                                               the browser at the new record
    GET  /ui/groups    /ui/groups/{group}      groups; members, assignment, lag, lag chart
    GET  /ui/maintenance                       maintenance history (newest first)
    GET  /ui/schemas[?subject=&version=&from=&to=]  Schema Registry subjects, a subject's
                                               versions, schemas and diffs
                                               (``console_schemas``)
    GET  /ui/static/{name}                     the console's CSS and script

A page's store reads run on the consumer hub's threads. Errors (an unknown topic, an
offset out of range) are shown as an HTML page with the status of the gateway's one
error table (``http.errors``). :class:`Observer` samples the throughput history every
second and the lag of live groups every LAG_SAMPLE_S while the app runs.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import importlib.resources
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from conf.errors import SparklogError
from conf.topic import validate_topic_name
from ingest_gateway.errors import BadRequest
from ingest_gateway.http import console_data as data
from ingest_gateway.http import console_pages as pages
from ingest_gateway.http import console_schemas as schemas
from ingest_gateway.http.body import read_body
from ingest_gateway.http.console_render import esc, page
from ingest_gateway.http.errors import status_of
from ingest_gateway.http.params import partition_param
from ingest_gateway.http.produce import produce
from ingest_gateway.http.requests import hub_of
from ingest_gateway.server.metrics import HISTORY_INTERVAL_S

logger = logging.getLogger("sparklog.console")

#: seconds between two lag samples of the groups this gateway coordinates
LAG_SAMPLE_S = 5.0
#: most records one browser page shows
MAX_BROWSE = 500
_STATIC = {"console.css": "text/css; charset=utf-8",
           "console.js": "text/javascript; charset=utf-8"}
#: every console page: its own files only (an injected script or style could not run, a
#: form could not post elsewhere), never in a frame (the produce form cannot be clickjacked)
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin"}


def _page(handler: Any) -> Any:
    """A console route: SparklogErrors become an HTML error page with their status."""
    async def route(request: Request) -> Response:
        try:
            response = await handler(request)
        except SparklogError as exc:
            request.app.state.metrics.rejected(getattr(exc, "code", "error"))
            status = status_of(exc)[0]
            body = (f'<p class=error id=error>{esc(exc)}</p>'
                    '<p><a href="/ui">Back to the overview</a></p>')
            response = HTMLResponse(page(f"Error {status}", body), status_code=status)
        response.headers.update(SECURITY_HEADERS)
        return response
    return route


async def _off_loop(request: Request, fn: Any, *args: Any) -> Any:
    hub = hub_of(request)
    return await hub.run(fn, *args)


# -- pages -----------------------------------------------------------------------------------
async def overview(request: Request) -> Response:
    state = request.app.state
    topics = await _off_loop(request, data.topic_rows, state.gateway.metadata)
    groups = await _off_loop(request, data.describe_groups, state)
    return HTMLResponse(pages.overview(state, topics, groups))


async def topics_page(request: Request) -> Response:
    topics = await _off_loop(request, data.topic_rows, request.app.state.gateway.metadata)
    return HTMLResponse(pages.topics(topics))


async def topic_page(request: Request) -> Response:
    state = request.app.state
    topic = validate_topic_name(request.path_params["topic"])
    rows = await _off_loop(request, data.partition_rows, state.gateway.metadata, topic)
    configs = await _off_loop(request, data.topic_configs, state.gateway.metadata, topic,
                              state.settings.topic)
    leader = state.cluster.leader if state.cluster is not None else None
    leaders = {p.partition: leader(topic, p.partition) for p in rows} if leader else {}
    subjects = await schemas.topic_subjects(request, topic)
    return HTMLResponse(pages.topic(topic, rows, configs, leaders,
                                    state.metrics.history.rates(topic), subjects))


def _int_query(request: Request, name: str, lo: int, hi: int) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.lstrip("-").isdigit() or not lo <= int(raw) <= hi:
        raise BadRequest(f"{name} must be a whole number from {lo} to {hi}, not {raw!r}")
    return int(raw)


def _timestamp_query(raw: str) -> int | None:
    """``2026-11-25T20:49`` or ``...:27`` (UTC, as a datetime-local input sends it) or epoch
    milliseconds -> milliseconds; raises BadRequest."""
    raw = raw.strip()
    if not raw:
        return None
    if raw.isascii() and raw.isdigit():
        return int(raw)
    try:
        dt = datetime.datetime.fromisoformat(raw)
    except ValueError:
        raise BadRequest(f"timestamp must be a UTC date and time (2026-11-25T20:49) or "
                         f"epoch milliseconds, not {raw!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp() * 1000)


async def messages_page(request: Request) -> Response:
    """The message browser: records of one partition from an offset or a timestamp."""
    state = request.app.state
    topic = validate_topic_name(request.path_params["topic"])
    rows = await _off_loop(request, data.partition_rows, state.gateway.metadata, topic)
    q = request.query_params
    partition = partition_param(topic, q.get("partition") or "0")
    if partition >= len(rows):
        # UnknownPartition
        await _off_loop(request, state.gateway.metadata.partition, topic, partition)
    count = _int_query(request, "count", 1, MAX_BROWSE) or 20
    fmt = q.get("format", "text") if q.get("format") in ("text", "json", "hex") else "text"
    row = rows[partition]
    ts = _timestamp_query(q.get("timestamp", ""))
    offset = _int_query(request, "offset", 0, 2**63 - 1)
    if ts is not None:
        # a time before 1970 is the first record (-1 and -2 would ask for the log's ends)
        found = await _off_loop(request, state.gateway.metadata.list_offset, topic,
                                partition, max(ts, 0))
        offset = row.log_end if found.offset < 0 else found.offset
    elif offset is None:
        offset = max(row.log_start, row.log_end - count)  # the newest records
    records: list[dict[str, Any]] = []
    if offset < row.log_end:
        hub = hub_of(request)
        got, errors = await hub.fetch({(topic, partition): offset}, max_records=count,
                                      max_bytes=8 << 20, wait_ms=0, min_bytes=0)
        if errors:
            raise next(iter(errors.values()))
        for _, batch, _ in got:
            records.extend(batch.to_pylist())
    # the notice is built here from numbers, never taken from the query as text
    notice = f"Produced to partition {partition} at offset {offset}" if "produced" in q else ""
    return HTMLResponse(pages.messages(topic, rows, partition, offset, count, fmt, ts,
                                       records[:count], notice=notice))


async def groups_page(request: Request) -> Response:
    hub_of(request)  # the coordinator: live members, not only the store's documents
    groups = await _off_loop(request, data.describe_groups, request.app.state)
    return HTMLResponse(pages.groups(groups))


async def group_page(request: Request) -> Response:
    state = request.app.state
    hub_of(request)
    group = request.path_params["group"]
    d = await _off_loop(request, data.describe_group, state, group)
    return HTMLResponse(pages.group(d, state.metrics.history.lags(group)))


async def maintenance_page(request: Request) -> Response:
    runs = await _off_loop(request, data.maintenance_runs, request.app.state.gateway.metadata,
                           100)
    return HTMLResponse(pages.maintenance(runs))


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    body = (importlib.resources.files("ingest_gateway.http") / "console_static" / name).read_bytes()
    return Response(body, media_type=_STATIC[name],
                    headers={"Cache-Control": "max-age=300"})


# -- the produce form ------------------------------------------------------------------------
def _form_headers(raw: str) -> list[dict[str, str]]:
    """``key: value`` or ``key=value`` lines -> REST Proxy binary headers; raises BadRequest."""
    out = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        sep = min((i for i in (line.find(":"), line.find("=")) if i > 0), default=-1)
        if sep < 0:
            raise BadRequest(f"header line {n} must be key: value, not {line!r}")
        out.append({"key": line[:sep].strip(),
                    "value": base64.b64encode(line[sep + 1:].strip().encode()).decode()})
    return out


def _cross_site(request: Request) -> bool:
    """Did another site's page send this form? A form can be posted across sites without
    CORS (unlike REST Proxy's own content types), so the browser's word is checked:
    ``Sec-Fetch-Site``, else an ``Origin`` that is not this host."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    return origin is not None and origin.split("://", 1)[-1] != request.headers.get("host")


async def produce_form(request: Request) -> Response:
    """One record from the topic page's form, through the same path as REST Proxy's
    binary produce; then the browser at the record (303). A form sent from another
    site is refused (403), so a page elsewhere cannot write through an operator's
    browser."""
    topic = validate_topic_name(request.path_params["topic"])
    if _cross_site(request):
        return HTMLResponse(page("Error 403", '<p class=error id=error>This form was sent from '
                                 'another site: refused.</p>'), status_code=403)
    body = await read_body(request)
    form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", errors="replace"),
                                          keep_blank_values=True).items()}
    record: dict[str, Any] = {
        "value": None if form.get("null_value") else
        base64.b64encode(form.get("value", "").encode()).decode()}
    if form.get("key"):
        record["key"] = base64.b64encode(form["key"].encode()).decode()
    headers = _form_headers(form.get("headers", ""))
    if headers:
        record["headers"] = headers
    if form.get("partition", "").strip():
        record["partition"] = partition_param(topic, form["partition"].strip())
    doc = json.dumps({"records": [record]}).encode()

    async def read() -> bytes:
        return doc

    _media, answer = await produce(request.app.state, topic, None,
                                   "application/vnd.kafka.binary.v2+json", {}, None, read)
    result = json.loads(answer) if isinstance(answer, bytes) else answer
    first = result["offsets"][0]
    if first.get("error"):
        raise BadRequest(f"the record was not written: {first['error']}")
    p, offset = int(first["partition"]), int(first["offset"])
    target = pages.messages_url(topic, partition=p, offset=offset, count=1, produced=1)
    return RedirectResponse(target, status_code=303)


def routes() -> list[BaseRoute]:
    """The console's routes (mounted by ``app.routes``)."""
    return [
        Route("/ui", _page(overview), methods=["GET"]),
        Route("/ui/", _page(overview), methods=["GET"]),
        Route("/ui/topics", _page(topics_page), methods=["GET"]),
        Route("/ui/topics/{topic}", _page(topic_page), methods=["GET"]),
        Route("/ui/topics/{topic}/messages", _page(messages_page), methods=["GET"]),
        Route("/ui/topics/{topic}/produce", _page(produce_form), methods=["POST"]),
        Route("/ui/groups", _page(groups_page), methods=["GET"]),
        Route("/ui/groups/{group}", _page(group_page), methods=["GET"]),
        Route("/ui/maintenance", _page(maintenance_page), methods=["GET"]),
        Route("/ui/schemas", _page(schemas.schemas_page), methods=["GET"]),
        Route("/ui/static/{name}", static, methods=["GET"]),
    ]


class Observer:
    """While the app runs: a throughput sample every HISTORY_INTERVAL_S (on the loop: it
    reads four ints) and the lag of the groups this gateway coordinates every
    LAG_SAMPLE_S (off the loop); registers the store-read metrics (``console_data``)."""

    def __init__(self, state: Any):
        self.state = state
        self._timer: asyncio.TimerHandle | None = None
        self._lag_at = 0.0
        self._lagging: Any = None
        maintenance = data.MaintenanceTotals()
        state.metrics.add_collector(lambda: data.collect(state, maintenance))

    def start(self) -> "Observer":
        self._tick()
        return self

    def _tick(self) -> None:
        self.state.metrics.history.sample()
        now = time.monotonic()
        hub = self.state.gateway.started_hub
        if hub is not None and now - self._lag_at >= LAG_SAMPLE_S and \
                (self._lagging is None or self._lagging.done()):
            self._lag_at = now
            self._lagging = asyncio.get_running_loop().run_in_executor(
                hub.executor, data.sample_live_lags, self.state)
            self._lagging.add_done_callback(_log_failure)
        self._timer = asyncio.get_running_loop().call_later(HISTORY_INTERVAL_S, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _log_failure(fut: asyncio.Future) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        logger.warning("sampling group lags failed: %r", fut.exception())
