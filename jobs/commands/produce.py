"""``sparklog produce TOPIC``: produce stdin lines through a gateway.

Each line is a record's value; with ``--key-separator SEP`` the text before the
first SEP is its key (as ``kafka-console-producer --property parse.key=true``).
A progress line counts records on long inputs.
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="produce lines from stdin through a gateway",
                       description="Read records from stdin, one per line, and produce them "
                                   "through the gateway with the idempotent Producer client.")
    p.add_argument("topic")
    p.add_argument("--bootstrap-server", metavar="URL",
                   help="the gateway (default: http://gateway.host:gateway.port)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line into KEY SEP VALUE at the first SEP")
    p.add_argument("--partition", type=int, help="produce every record to this partition")
    p.add_argument("--acks", default="all", choices=["0", "1", "all"])
    p.add_argument("--linger-ms", type=float, default=5.0)
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    p.add_argument("--progress-every", type=int, default=100_000, metavar="N",
                   help="when stderr is not a terminal, print a progress line every N records")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import time

    from rich.console import Console

    from ingest_gateway.client import Producer
    from jobs.cli import settings_from

    settings = settings_from(args)
    url = args.bootstrap_server or f"http://{settings.gateway.host}:{settings.gateway.port}"
    console = Console(stderr=True)
    sep = args.key_separator.encode() if args.key_separator else None
    count = 0
    started = last = time.monotonic()
    handles = []
    show = not args.no_progress and console.is_terminal
    with Producer(url, acks=args.acks, linger_ms=args.linger_ms) as producer:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    key, value = None, line
            else:
                value = line
            h = producer.send(args.topic, value, key=key, partition=args.partition)
            count += 1
            if count % 10_000 == 0:
                handles.append(h)
                now = time.monotonic()
                if show and now - last >= 0.5:
                    last = now
                    console.print(f"\r{count:,} records, {count / (now - started):,.0f}/s",
                                  end="", highlight=False)
            if not show and not args.no_progress and count % args.progress_every == 0:
                print(f"{count:,} records", file=sys.stderr, flush=True)
            if handles and handles[0].done():
                handles.pop(0).result()  # surface a failure early
        producer.flush()
        if count:
            h.result()  # raises ProduceError if the last batch failed
    elapsed = time.monotonic() - started
    console.print(("\r" if show else "") + f"produced {count:,} records to {args.topic} in "
                  f"{elapsed:.1f} s", highlight=False)
    return 0
