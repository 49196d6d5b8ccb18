"""Tiny HTTP servers on 127.0.0.1 that answer like gateways, for the clients' routing tests.

Each :class:`FakeGateway` is a real ``http.server`` on a real socket; a test gives it
handlers by method and path prefix (``gw.on("GET", "/metadata", fn)``), where
``fn(request)`` returns ``(status, json_doc)``, and reads back what it was asked
(``gw.requests``). Nothing here imports the gateway's server code.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple, Self
from urllib.parse import parse_qs, urlsplit


class Request(NamedTuple):
    method: str
    path: str
    query: dict[str, str]
    body: bytes


Handler = Callable[[Request], tuple[int, Any]]


class FakeGateway:
    """``with FakeGateway() as gw: gw.url``; unknown routes answer 404 like a gateway."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, str, Handler]] = []
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the clients' pools expect

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                request = Request(self.command, parts.path, query, body)
                with fake.lock:
                    fake.requests.append(request)
                    handler = next((fn for m, prefix, fn in reversed(fake.routes)
                                    if m == self.command and parts.path.startswith(prefix)), None)
                status, doc = handler(request) if handler else (
                    404, {"error_code": 40400, "error": "not_found", "message": parts.path})
                data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def on(self, method: str, prefix: str, fn: Handler) -> None:
        """Answer ``method`` requests whose path starts with ``prefix`` with ``fn``
        (the latest registration wins)."""
        with self.lock:
            self.routes.append((method, prefix, fn))

    def asked(self, method: str, prefix: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.method == method and r.path.startswith(prefix)]

    def stop(self) -> None:
        """Close the listening socket: new connections are refused from now on."""
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        except OSError:
            pass


def endpoint(gw: FakeGateway | None, slot: int | None = None) -> dict[str, Any] | None:
    """A leader/coordinator address as the metadata gives it (None gateway: standalone)."""
    if gw is None:
        return {"slot": None, "url": None}
    return {"slot": slot, "url": gw.url}


def metadata(topics: dict[str, list[dict | None]] | None = None,
             groups: dict[str, dict | None] | None = None, *,
             gateways: list[FakeGateway] = (), generation: int | None = 1) -> Handler:
    """A ``/metadata`` handler: of the topics and groups asked about, ``topics`` gives
    each partition's leader (any other topic is unknown), ``groups`` each coordinator
    (any other group has none)."""
    topics, groups = topics or {}, groups or {}

    def answer(request: Request) -> tuple[int, Any]:
        asked_topics = [t for t in request.query.get("topics", "").split(",") if t]
        asked_groups = [g for g in request.query.get("groups", "").split(",") if g]
        return 200, {
            "cluster_id": "fake", "generation": generation,
            "gateways": [{"slot": i, "url": g.url, "live": True} for i, g in enumerate(gateways)],
            "topics": [{"topic": t, "partitions": [{"partition": p, "leader": lead}
                                                   for p, lead in enumerate(topics[t])]}
                       if t in topics else {"topic": t, "error": "unknown_topic"}
                       for t in asked_topics],
            "groups": [{"group": g, "coordinator": groups.get(g)} for g in asked_groups]}
    return answer


def topic_doc(topic: str, partitions: int) -> Handler:
    """``GET /topics/{topic}`` as a gateway answers it (what the producer reads)."""
    def answer(request: Request) -> tuple[int, Any]:
        return 200, {"name": topic, "configs": {},
                     "partitions": [{"partition": p} for p in range(partitions)]}
    return answer


def produce_ok(offsets: dict[int, int] | None = None) -> Handler:
    """A produce route that accepts every batch (count from the query: the fake does not
    parse Arrow; the test passes the batch size as ``count``)."""
    next_offset = offsets if offsets is not None else {}

    def answer(request: Request) -> tuple[int, Any]:
        p = int(request.path.rsplit("/", 1)[1])
        base = next_offset.get(p, 0)
        next_offset[p] = base + 1
        return 200, {"offsets": [{"partition": p, "base_offset": base, "count": 1,
                                  "error_code": None}]}
    return answer


def not_leader(leader: dict | None) -> Handler:
    def answer(request: Request) -> tuple[int, Any]:
        return 503, {"error_code": 50301, "error": "not_leader", "message": "moved",
                     "leader": leader}
    return answer


def not_coordinator(coordinator: dict | None) -> Handler:
    def answer(request: Request) -> tuple[int, Any]:
        return 503, {"error_code": 50305, "error": "not_coordinator", "message": "elsewhere",
                     "coordinator": coordinator}
    return answer
