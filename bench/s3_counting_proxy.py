"""A counting HTTP proxy in front of an S3 endpoint: how many requests of each kind.

``bench/idle_requests.py`` puts it between the broker application and the SeaweedFS
server, so the figures are counted where S3 bills them. Each request is forwarded
unchanged, the ``Host`` header included (SigV4 signs it, so the server checks the
signature the client made for the proxy's address), and counted by kind:

* ``LIST``: a GET of the bucket (``ListObjectsV2``: no key, or a ``list-type`` /
  ``prefix`` query);
* ``GET``, ``HEAD``, ``PUT``, ``DELETE``, ``POST`` (multi-object delete): by method.

``by_path`` counts them by key too, with the store's prefix and every run of digits
folded (``t/0/00000000000000000012.json`` -> ``t/#/#.json``), to see who polls what.
Loopback only.
"""

from __future__ import annotations

import http.client
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

#: response headers http.client has already acted on (the body is sent whole)
_HOP = {"transfer-encoding", "connection", "keep-alive"}


def kind_of(method: str, target: str) -> str:
    """The S3 request kind of ``method target`` (path-style addressing)."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    key = parts.path.lstrip("/").partition("/")[2]
    if method == "GET" and (not key or "list-type" in query or "prefix" in query):
        return "LIST"
    return method


class CountingProxy:
    """Forwards to ``upstream`` (``http://host:port``) on 127.0.0.1:``port`` (0: any)."""

    def __init__(self, upstream: str, port: int = 0):
        up = urlsplit(upstream)
        self.upstream_host, self.upstream_port = up.hostname, up.port or 80
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.by_path: Counter[str] = Counter()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                body = None
                length = self.headers.get("Content-Length")
                if length is not None:
                    body = self.rfile.read(int(length))
                elif self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = _read_chunked(self.rfile)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() != "transfer-encoding"}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                proxy.count(self.command, self.path)
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port,
                                                  timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                if self.command == "HEAD":
                    self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = _QuietServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="s3-counting-proxy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def count(self, method: str, target: str) -> None:
        kind = kind_of(method, target)
        parts = urlsplit(target)
        what = parts.path if kind != "LIST" else \
            "?prefix=" + (parse_qs(parts.query).get("prefix", [""])[0])
        what = re.sub(r"[0-9a-f]{32}", "<store>", what)
        what = re.sub(r"[0-9]+", "#", what)
        with self.lock:
            self.counts[kind] += 1
            self.by_path[f"{kind} {what}"] += 1

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.by_path.clear()

    def snapshot(self) -> tuple[Counter, Counter]:
        with self.lock:
            return Counter(self.counts), Counter(self.by_path)

    def __enter__(self) -> "CountingProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a client gone is no news


def _read_chunked(rfile) -> bytes:
    out = bytearray()
    while True:
        size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(out)
        out += rfile.read(size)
        rfile.readline()
