"""``sparklog produce TOPIC``: produce stdin lines through a gateway.

Each line is a record's value; with ``--key-separator SEP`` the text before the
first SEP is its key (as ``kafka-console-producer --property parse.key=true``).
A progress line counts records on long inputs. Every record that fails (refused
by the gateway, over the topic's ``max.message.bytes``, undeliverable) is counted:
the command then ends with ``N of M records failed: <first errors>`` on stderr
and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from jobs.cli import integer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="produce lines from stdin through a gateway",
                       description="Read records from stdin, one per line, and produce them "
                                   "through the gateway with the idempotent Producer client. "
                                   "Exits 2, naming how many records failed and why, if the "
                                   "gateway refused any.")
    p.add_argument("topic")
    p.add_argument("--bootstrap-server", metavar="URL",
                   help="gateways to bootstrap from, comma-separated HOST:PORT or URLs "
                        "(default: http://gateway.host:gateway.port)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line into KEY SEP VALUE at the first SEP")
    p.add_argument("--partition", type=integer(0), help="produce every record to this partition")
    p.add_argument("--acks", default="all", choices=["0", "1", "all"])
    p.add_argument("--linger-ms", type=integer(0), default=5)
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    p.add_argument("--progress-every", type=integer(1), default=100_000, metavar="N",
                   help="when stderr is not a terminal, print a progress line every N records")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import time

    from rich.console import Console

    from conf.errors import ConfigError
    from ingest_gateway.client import Producer
    from jobs.cli import gateway_url, settings_from

    settings = settings_from(args)
    url = gateway_url(args, settings)
    console = Console(stderr=True)
    sep = args.key_separator.encode() if args.key_separator else None
    count = 0
    started = last = time.monotonic()
    show = not args.no_progress and console.is_terminal
    with Producer(url, acks=args.acks, linger_ms=args.linger_ms) as producer:
        if args.partition is not None and args.partition >= producer.partitions_for(args.topic):
            raise ConfigError("--partition", args.partition, f"topic {args.topic!r} has "
                              f"partitions 0..{producer.partitions_for(args.topic) - 1}")
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    key, value = None, line
            else:
                value = line
            # no handle is kept: the producer counts every record that fails
            producer.send(args.topic, value, key=key, partition=args.partition)
            count += 1
            if show and count % 10_000 == 0 and (now := time.monotonic()) - last >= 0.5:
                last = now
                console.print(f"\r{count:,} records, {count / (now - started):,.0f}/s",
                              end="", highlight=False)
            if not show and not args.no_progress and count % args.progress_every == 0:
                print(f"{count:,} records", file=sys.stderr, flush=True)
        producer.flush()
    elapsed = time.monotonic() - started
    failed = producer.records_failed
    console.print(("\r" if show else "") + f"produced {count - failed:,} records to {args.topic} "
                  f"in {elapsed:.1f} s", highlight=False)
    if failed:
        reasons = "; ".join(str(e) for e in producer.first_errors)
        print(f"sparklog: error: {failed:,} of {count:,} records failed: {reasons}",
              file=sys.stderr)
        return 2
    return 0
