"""The gateway's HTTP API: a Starlette app whose handlers validate and delegate.

Routes (the OpenAPI document at ``/openapi.json`` is the reference, see
``openapi``), one module per group of routes::

    POST   /topics/{topic}[/partitions/{partition}]   produce           (produce)
    GET    /topics ...  /v3/clusters ...  POST /v3/producers  topics, admin  (topics)
    GET    .../messages  .../offsets  POST /fetch           fetch             (fetch_routes)
    /groups/...                                             group protocol    (group_routes)
    /consumers/...                                          REST instances    (rest_consumers)
    /v3/.../configs  .../records  .../consumer-groups  .../replicas
                                          (v3_configs, v3_records, v3_groups, v3_replicas)
    /v3/transactions ...                                    transactions      (v3_transactions)
    /v3/clusters/{id}/acls  .../acls:batch                  ACLs              (v3_acls)
    GET    /healthz  /readyz  /metrics  /openapi.json       operations        (here)
    GET    /docs  /redoc                                    API pages         (docs)
    GET    /ui ...                                          web console       (console)
    /schema-registry/...  (gateway.schema.registry.path)    Schema Registry   (schema_registry)

:func:`create_app` mounts every route; the one error table is ``errors``. The
engine behind the handlers (batcher, codec, consumer hub, group coordinator) is
``ingest_gateway.server``; handlers reach it as ``request.app.state.batcher`` /
``.log`` and the hub through ``requests.hub_of``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

import conf
from conf.errors import SparklogError
from ingest_gateway.errors import ControlRequestTooLarge, RequestTooLarge, ShuttingDown
from ingest_gateway.http import (cluster_routes, console, docs, fetch_routes, group_routes,
                                 rest_consumers, schema_registry, topics, v3_acls, v3_configs,
                                 v3_groups, v3_records, v3_replicas, v3_transactions)
from ingest_gateway.http.errors import http_error, refusal, sparklog_error
from ingest_gateway.http.openapi import document
from ingest_gateway.http.produce import Produce, send_json
from ingest_gateway.http.topics import batcher_of, cluster_id
from ingest_gateway.server import codec_json, lifecycle
from ingest_gateway.server.metrics import CONTENT_TYPE_LATEST, Instrumented
from ingest_gateway.server.gateway import Gateway
from log_layout import Log


# -- operations -----------------------------------------------------------------------------
async def healthz(request: Request) -> Response:
    # the broker application's driver probes every slot here, and names the newest
    # assignment it wrote: the gateway reads it at once instead of polling the store
    # for it (cluster_member.ClusterMember.hint)
    name = request.query_params.get("assignment")
    cluster = request.app.state.cluster
    if name and cluster is not None:
        cluster.hint(name)
    return JSONResponse({"status": "ok", "gateway_id": batcher_of(request).id})


async def readyz(request: Request) -> Response:
    batcher = batcher_of(request)
    if batcher.closing:
        raise ShuttingDown()
    await cluster_id(request)  # the store answers
    return JSONResponse({"status": "ready", "buffered_bytes": batcher.buffered})


async def metrics(request: Request) -> Response:
    # off the loop: the partition, lag and maintenance metrics read the store
    body = await run_in_threadpool(request.app.state.metrics.render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return JSONResponse(document())


def routes() -> list[BaseRoute]:
    """Every route of the gateway, consumer routes first (as they were always mounted)."""
    return [
        *fetch_routes.routes(), *rest_consumers.routes(), *group_routes.routes(),
        Route("/topics/{topic}", Produce(), methods=["POST"]),
        Route("/topics/{topic}/partitions/{partition}", Produce(), methods=["POST"]),
        *topics.routes(), *v3_configs.routes(), *v3_records.routes(), *v3_groups.routes(),
        *v3_replicas.routes(), *v3_transactions.routes(), *v3_acls.routes(),
        *cluster_routes.routes(), *docs.routes(),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *console.routes(),
    ]


class GatewayApp:
    """The ASGI app: produce requests go straight to :class:`Produce`, the rest to Starlette.

    A one-record produce request is the gateway's hottest path. Through Starlette
    it would pass four middleware layers and a regular-expression match against
    every route (the consumer routes come first); here it costs one string split.
    ``state`` is the Starlette app's.
    """

    def __init__(self, app: Starlette):
        self.starlette = app
        self.state = app.state
        self._produce = Produce()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path.startswith("/topics/"):
                parts = path[8:].split("/")
                if len(parts) == 1 and parts[0]:
                    params = {"topic": parts[0]}
                elif len(parts) == 3 and parts[0] and parts[1] == "partitions" and parts[2]:
                    params = {"topic": parts[0], "partition": parts[2]}
                else:
                    params = None
                if params is not None:
                    scope["app"] = self.starlette
                    scope["path_params"] = params
                    await self._produce(scope, receive, send)
                    return
        if scope["type"] == "http" and await self._refused_by_length(scope, send):
            return
        await self.starlette(scope, receive, send)

    async def _refused_by_length(self, scope: Any, send: Any) -> bool:
        """Answer 413 (and True) if a request other than produce declares a body over
        ``max.control.request.size`` (a v3 produce: over ``max.request.size``, as a v2
        produce): before any route runs, so even a route that never
        reads its body cannot be made to wait for one. Chunked bodies declare no length;
        :func:`ingest_gateway.http.body.read_body` stops those."""
        gw = self.state.settings.gateway
        # v3 produce (.../records, .../records:batch) is produce: max.request.size bounds it
        produce = scope["path"].startswith("/v3/") and \
            scope["path"].endswith(("/records", "/records:batch"))
        limit = gw.max_request_size if produce else gw.max_control_request_size
        for name, value in scope["headers"]:
            # bytes.isdigit is ASCII only; httptools already refused a malformed length
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                error = RequestTooLarge(int(value), limit) if produce else \
                    ControlRequestTooLarge(int(value), limit)
                status, body, _ = refusal(self.state, error)
                await send_json(send, status, body, [(b"content-type", b"application/json")])
                return True
        return False


def _guarded(app: GatewayApp, settings: conf.Settings, parts: lifecycle.GatewayParts) -> Any:
    """``app`` behind the guard (``guard``: body types, authentication, ACLs, quotas,
    with ``parts``' authenticator, authorizer and quotas) and, if
    ``gateway.access.control.allow.origin`` names origins, CORS."""
    from ingest_gateway.http.guard import Guard

    guarded: Any = Guard(app, authenticator=parts.authenticator, authorizer=parts.authorizer,
                         quotas=parts.quotas)
    gw = settings.gateway
    origins = [o.strip() for o in gw.access_control_allow_origin.split(",") if o.strip()]
    if origins:
        from starlette.middleware.cors import CORSMiddleware

        state = guarded.state
        guarded = CORSMiddleware(
            guarded, allow_origins=origins,
            allow_methods=[m.strip() for m in gw.access_control_allow_methods.split(",")],
            allow_headers=[h.strip() for h in gw.access_control_allow_headers.split(",")],
            allow_credentials="*" not in origins)
        guarded.state = state
    return guarded


def create_app(settings: conf.Settings, log_: Log, *,
               parts: lifecycle.GatewayParts | None = None,
               gateway: Callable[..., AbstractAsyncContextManager[Gateway]] | None = None,
               gateway_id: str | None = None, flush_threads: int | None = None,
               now_ms: Callable[[], int] | None = None) -> GatewayApp | Instrumented:
    """The gateway app over ``log_``, every route mounted, serving the Gateway that
    ``gateway`` yields for the app's lifespan.

    ``parts`` (``server.lifecycle.gateway_parts``: metrics, authenticator, authorizer,
    quotas) are the composition root's, shared with the Kafka listener; without them
    the app builds its own (tests that run it alone). ``gateway(parts=)`` is the
    composition root's ``server.lifecycle.running_gateway`` (with the Kafka listener
    beside HTTP): it builds the Gateway, starts its background tasks and stops them
    when the app stops. Without it the app runs ``running_gateway`` itself, HTTP alone
    (tests), with ``gateway_id``,
    ``flush_threads`` and ``now_ms`` (the consumer hub's clock: group sessions, idle
    REST instances; default the wall clock). Handlers reach the services through
    ``request.app.state.gateway`` (``server.gateway.Gateway``; ``.batcher``, ``.log``,
    ``.settings`` and ``.metrics`` are on the state too). Every request is counted and
    timed (and logged if ``gateway.access.log``) by ``metrics.Instrumented``. Raises
    ConfigError for bad security settings (building ``parts``).
    """
    parts = parts or lifecycle.gateway_parts(settings, log_)
    metrics_ = parts.metrics
    running = gateway or functools.partial(
        lifecycle.running_gateway, settings, log_, gateway_id=gateway_id,
        flush_threads=flush_threads, now_ms=now_ms)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        async with running(parts=parts) as built:
            app.state.gateway = built
            app.state.batcher, app.state.cluster = built.batcher, built.cluster
            # off the loop and off the start-up path: readiness does not wait for it
            threading.Thread(target=codec_json.warm_up, name="sparklog-warm-up",
                             daemon=True).start()
            observer = console.Observer(app.state).start()  # throughput and lag history
            try:
                yield
            finally:
                observer.stop()

    # the Schema Registry first: its prefix must not fall to a route below
    app = Starlette(routes=[*schema_registry.mount(settings.gateway.schema_registry_path),
                            *routes()], lifespan=lifespan,
                    exception_handlers={SparklogError: sparklog_error,
                                        HTTPException: http_error})
    app.state.settings = settings
    app.state.log = log_
    app.state.metrics = metrics_
    app.state.cluster = None
    return Instrumented(_guarded(GatewayApp(app), settings, parts), metrics_,
                        log_requests=settings.gateway.access_log)
