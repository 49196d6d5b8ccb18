"""Servers on real sockets for the TLS and authentication tests, in this process.

:class:`Served` runs an ASGI app on uvicorn (a thread of this process) with the
gateway's own connection class (``GatewayHttpProtocol``, which puts the client
certificate's subject into the scope) and the gateway's TLS settings
(``security.tls.uvicorn_ssl``), so every request arrives as it would at a gateway.

:func:`whoami` is an app that answers ``{"principal": ..., "peer_subject": ...}`` or
the gateway's 401, so an ``Authenticator`` is tested on the scopes a real TLS
connection makes.
"""

from __future__ import annotations

import json
import threading
import types
from typing import Any

import uvicorn

from ingest_gateway.errors import NotAuthenticated
from ingest_gateway.http.errors import refusal
from ingest_gateway.http.http_protocol import protocol_class
from ingest_gateway.security import ANONYMOUS, tls
from jobs.gateway_process import free_port, wait_for

_NO_METRICS = types.SimpleNamespace(metrics=types.SimpleNamespace(rejected=lambda name: None))


async def _send_json(send: Any, status: int, doc: Any, headers: dict[str, str]) -> None:
    body = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            *((k.lower().encode(), v.encode()) for k, v in headers.items())]})
    await send({"type": "http.response.body", "body": body})


def whoami(authenticator: Any):
    """An ASGI app answering each request with its principal and peer subject, or 401."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        try:
            principal = ANONYMOUS if authenticator is None else \
                await authenticator.authenticate_async(scope)
        except NotAuthenticated as e:
            status, body, headers = refusal(_NO_METRICS, e)
            await _send_json(send, status, body, headers)
            return
        subject = scope.get(tls.PEER_SUBJECT)
        await _send_json(send, 200, {"principal": principal,
                                     "peer_subject": None if subject is None else
                                     [list(p) for p in subject]}, {})

    return app


class Served:
    """``app`` on ``settings``' listener (its host and scheme; a free port), in a thread."""

    def __init__(self, app: Any, settings: Any, *, lifespan: str = "off"):
        where = tls.check(settings)
        self.port = free_port()
        self.url = f"{where.scheme}://127.0.0.1:{self.port}"
        http = protocol_class(read_timeout_ms=30_000, max_connections=100)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, loop="asyncio",
                                http=http, ws="none", lifespan=lifespan, log_config=None,
                                log_level="warning", **tls.uvicorn_ssl(settings))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="served", daemon=True)

    def __enter__(self) -> "Served":
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive(), timeout=30,
                 what="the served app")
        assert self.server.started, "the server did not start"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(30)
