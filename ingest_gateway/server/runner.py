"""Run the gateway on uvicorn (httptools + uvloop).

Connection limits (``http_protocol``): ``request.read.timeout.ms`` for a request
to arrive whole, ``connections.max.idle.ms`` between requests, ``max.connections``.

SIGTERM and SIGINT start a graceful shutdown: uvicorn stops accepting
connections and lets open requests finish, then the app's lifespan closes the
batcher, which flushes every accepted record before the process exits.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Mapping
from typing import Any

import conf
from log_layout.opening import open_log_from_settings


def serve(settings: conf.Settings, *, storage_options: Mapping[str, Any] | None = None,
          log_level: str = "warning") -> None:
    """Serve every route until SIGTERM/SIGINT on ``gateway.host``:``gateway.port`` (blocking).

    The store is ``store.url`` (``storage_options`` override what the settings imply).
    """
    import uvicorn

    from ingest_gateway.http.app import create_app
    from ingest_gateway.http.http_protocol import protocol_class

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log_ = open_log_from_settings(settings, storage_options=storage_options)
    app = create_app(settings, log_)
    # Start-up objects (modules, settings) never die: keep them out of every collection,
    # and collect young objects less often (a produce request allocates many short-lived
    # ones; the default threshold of 700 runs gen-0 collections every few requests).
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    gw = settings.gateway
    # httptools, plus a read timeout per request and a cap on connections (http_protocol)
    http = protocol_class(read_timeout_ms=gw.request_read_timeout_ms,
                          max_connections=gw.max_connections)
    config = uvicorn.Config(app, host=gw.host, port=gw.port, loop="uvloop", http=http,
                            lifespan="on",
                            # no X-Forwarded-For rewriting: nothing here reads client addresses
                            proxy_headers=False,
                            timeout_keep_alive=gw.connections_max_idle_ms / 1000,
                            log_level=log_level, access_log=False, timeout_graceful_shutdown=30,
                            backlog=1024)
    server = uvicorn.Server(config)
    # a gateway replaced by a newer one in its slot stops serving (cluster_member)
    app.state.request_exit = lambda: setattr(server, "should_exit", True)
    server.run()
