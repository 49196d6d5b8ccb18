"""``sparklog gateway``: run the ingest gateway (HTTP produce + topic admin)."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gateway", help="run the ingest gateway (HTTP produce and topic admin)",
                       description="Serve the ingest gateway on uvicorn until SIGTERM/SIGINT; "
                                   "shutdown flushes every accepted record. The hot tier "
                                   "(--set gateway.hot.enable=true|false|auto; default: on "
                                   "for S3 and HDFS, off for local) writes each flush of "
                                   "every partition as one shared object; the start-up line "
                                   "says whether it is on.")
    p.add_argument("--store", metavar="URL", default=argparse.SUPPRESS,
                   help="the log's store (default: store.url)")
    p.add_argument("--host", help="address to bind (default: gateway.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to bind (default: gateway.port, 8082)")
    p.add_argument("--listeners", metavar="URL",
                   help="where to listen, http://HOST:PORT or https://HOST:PORT (Kafka's "
                        "listeners; https uses ssl.certfile, ssl.keyfile, ssl.cafile and "
                        "ssl.client.auth, given with --set; default: gateway.listeners, "
                        "else http://--host:--port)")
    p.add_argument("--storage-options", metavar="JSON",
                   help="fsspec storage options as JSON, e.g. for an S3 endpoint and keys")
    p.add_argument("--log-level", default="info",
                   choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", choices=["text", "json"],
                   help="log lines as text or one JSON object a line (default: "
                        "gateway.log.format, text); the access log is gateway.access.log")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from conf.errors import ConfigError
    from ingest_gateway.runner import serve
    from jobs.cli import settings_from

    # only the flags given: a None would replace a --set of the same key
    flags = {k: v for k, v in (("gateway.host", args.host), ("gateway.port", args.port),
                               ("gateway.listeners", args.listeners),
                               ("gateway.log.format", args.log_format)) if v is not None}
    settings = settings_from(args, **flags)
    options = None
    if args.storage_options:
        try:
            options = json.loads(args.storage_options)
        except ValueError as e:
            raise ConfigError("--storage-options", args.storage_options, f"not JSON: {e}") from None
        if not isinstance(options, dict):
            raise ConfigError("--storage-options", args.storage_options, "expected a JSON object")
    serve(settings, storage_options=options, log_level=args.log_level)
    return 0
