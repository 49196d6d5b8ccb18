"""The gateway's composition root: its services, both protocols on them, uvicorn, its logs.

:func:`serve` opens the store and composes the gateway: what both protocols use at
their door (``server.lifecycle.gateway_parts``: metrics, authenticator, authorizer,
quotas), the services and their
background tasks (``server.lifecycle.running_gateway``: the ``server.gateway.Gateway``,
the batcher, the cluster membership, the transaction aborter) with the Kafka listener
beside HTTP on them (``kafka.listener.serving``), handed to the HTTP app, which enters
them for its lifespan, and runs it on uvicorn (httptools + uvloop). The one place that
knows both adapters: ``server/`` imports neither, and neither imports the other
(``tests/test_architecture.py``).

Connection limits (``http_protocol``): ``request.read.timeout.ms`` for a request
to arrive whole, ``connections.max.idle.ms`` between requests, ``max.connections``.

SIGTERM and SIGINT start a graceful shutdown: uvicorn stops accepting
connections and lets open requests finish, then the app's lifespan stops the gateway
(the Kafka listener, the background tasks, then the batcher, which flushes every
accepted record) before the process exits. The gateway runs inside the lifespan, not
around uvicorn's serving: uvicorn raises a captured SIGTERM again as soon as it has
served, which would end the process before a batcher closed after it had flushed.

Logs go to stderr, as text or (``gateway.log.format=json``, ``--log-format json``) one
JSON object a line with ``ts``, ``level``, ``logger``, ``message`` and a record's extra
fields (an access-log line's ``client``, ``method``, ``path``, ``status``, ``bytes``,
``duration_ms``, ``request``). At INFO, start-up says where the gateway listens and
which store it uses; the ``sparklog.access`` logger writes one line per request
(``gateway.access.log``); the coordinator logs joins, leaves and rebalances.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

import conf
from conf.errors import ConfigError
from log_layout.opening import open_log_from_settings

LOG_FORMATS = ("text", "json")
#: the LogRecord attributes every record has; anything else was given as ``extra``
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName", "color_message"}  # uvicorn's message with ANSI colours


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts`` (UTC, ISO 8601 with ms), ``level``, ``logger``,
    ``message``, a record's extra fields, and ``exc`` (the traceback) if any."""

    def format(self, record: logging.LogRecord) -> str:
        ms = int(record.created * 1000) % 1000
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z",
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for k, v in vars(record).items():
            if k not in _STANDARD and k not in doc:
                doc[k] = v
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def setup_logging(level: str, fmt: str = "text") -> None:
    """Send every log line to stderr at ``level`` in ``fmt`` (``text`` or ``json``),
    replacing the root logger's handlers; raises ConfigError for another format."""
    if fmt not in LOG_FORMATS:
        raise ConfigError("gateway.log.format", fmt, f"expected one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


def serve(settings: conf.Settings, *, storage_options: Mapping[str, Any] | None = None,
          log_level: str = "info") -> None:
    """Serve every route until SIGTERM/SIGINT on ``gateway.listeners`` (else
    ``gateway.host``:``gateway.port``, plain HTTP) (blocking); an https listener uses
    ``[ssl]`` (``ingest_gateway.security.tls``).

    The store is ``store.url`` (``storage_options`` override what the settings imply).
    Raises ConfigError for a bad ``gateway.log.format``, listener or ``[ssl]`` setting
    (checked before the store is opened), or what opening the store raises.
    """
    import uvicorn

    from ingest_gateway.http.app import create_app
    from ingest_gateway.http.http_protocol import protocol_class
    from ingest_gateway.kafka.listener import serving
    from ingest_gateway.security import tls
    from ingest_gateway.server.lifecycle import gateway_parts, running_gateway

    setup_logging(log_level, settings.gateway.log_format)
    where = tls.check(settings)
    ssl_kwargs = tls.uvicorn_ssl(settings)
    log_ = open_log_from_settings(settings, storage_options=storage_options)
    server: uvicorn.Server | None = None

    def stop_serving() -> None:  # a newer gateway took this one's slot (cluster_member)
        if server is not None:
            server.should_exit = True

    # what both protocols use at their door (metrics, the credential verifiers both logins
    # check with, the HTTP authenticator, authorizer, quotas): built once here, handed to
    # the HTTP app and, in the Gateway, to the Kafka listener
    parts = gateway_parts(settings, log_)
    # the Gateway: built, its background tasks and the Kafka listener started, when the
    # HTTP app starts; all stopped (the batcher flushed last) when it stops
    app = create_app(settings, log_, parts=parts, gateway=functools.partial(
        running_gateway, settings, log_, parts=parts, beside=(serving,),
        on_replaced=stop_serving))
    # Start-up objects (modules, settings) never die: keep them out of every collection,
    # and collect young objects less often (a produce request allocates many short-lived
    # ones; the default threshold of 700 runs gen-0 collections every few requests).
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    gw = settings.gateway
    # httptools, plus a read timeout per request and a cap on connections (http_protocol)
    http = protocol_class(read_timeout_ms=gw.request_read_timeout_ms,
                          max_connections=gw.max_connections, metrics=parts.metrics)
    config = uvicorn.Config(app, host=where.host, port=where.port, loop="uvloop", http=http,
                            lifespan="on",
                            # no X-Forwarded-For rewriting: nothing here reads client addresses
                            proxy_headers=False,
                            timeout_keep_alive=gw.connections_max_idle_ms / 1000,
                            # our handlers and format (log_config=None); our own access log
                            log_config=None, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=30, backlog=1024, **ssl_kwargs)
    server = uvicorn.Server(config)
    parts.metrics.watch_connections(lambda: len(server.server_state.connections))
    logging.getLogger("sparklog.gateway").info(
        "listening on %s (console %s/ui, metrics /metrics), store %s, hot tier %s "
        "(gateway.hot.enable), access log %s, client certificates %s", where.url, where.url,
        log_.url, "on" if gw.hot_enable else "off", "on" if gw.access_log else "off",
        settings.ssl.client_auth if where.scheme == "https" else "none")
    server.run()
