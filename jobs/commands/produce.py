"""``sparklog produce TOPIC``: produce stdin lines through a gateway.

Each line is a record's value; with ``--key-separator SEP`` the text before the
first SEP is its key (as ``kafka-console-producer --property parse.key=true``).
With ``--property parse.headers=true`` each line starts with its headers,
``h1:v1,h2:v2`` then a tab (kafka-console-producer; ``headers.delimiter``,
``headers.separator`` and ``headers.key.separator`` change the three marks, and
``parse.key=true`` / ``key.separator`` are ``--key-separator``); ``--header
NAME=VALUE`` (kcat ``-H``, repeatable) adds a header to every record.
A progress bar counts records on long inputs. Every record that fails (refused
by the gateway, over the topic's ``max.message.bytes``, undeliverable) is counted:
the command then ends with ``N of M records failed: <first errors>`` on stderr
and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from jobs.cli import integer
from jobs.client_options import add_client_flags


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
    p.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                   help="a header on every record, like kcat -H (repeatable)")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="kafka-console-producer's parse.key, key.separator, parse.headers, "
                        "headers.delimiter, headers.separator, headers.key.separator")
    p.add_argument("--acks", default="all", choices=["0", "1", "all"])
    p.add_argument("--linger-ms", type=integer(0), default=5)
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    p.add_argument("--progress-every", type=integer(1), default=100_000, metavar="N",
                   help="when stderr is not a terminal, print a progress line every N records")
    add_client_flags(p)
    p.set_defaults(handler=run)


_PRODUCER_PROPS = {"parse.key": "false", "key.separator": None, "parse.headers": "false",
                   "headers.delimiter": "\t", "headers.separator": ",",
                   "headers.key.separator": ":"}


def line_parser(args: argparse.Namespace):
    """A function of one input line (bytes, no line end) -> (key, value, headers), from
    --key-separator, --header and --property. Raises ConfigError for an unknown property,
    a bad boolean, an empty separator or a --header without ``=``."""
    from conf.errors import ConfigError

    props = dict(_PRODUCER_PROPS)
    for pair in args.property:
        name, eq, value = pair.partition("=")
        name = name.strip()
        if not eq or name not in props:
            raise ConfigError("--property", pair, "expected KEY=VALUE with KEY one of "
                              + ", ".join(props))
        if name.startswith("parse.") and value.strip().lower() not in ("true", "false"):
            raise ConfigError(name, value, "expected true or false")
        if not name.startswith("parse.") and not value:
            raise ConfigError(name, value, "a separator cannot be empty")
        props[name] = value.strip().lower() if name.startswith("parse.") else value
    static = []
    for pair in args.header:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise ConfigError("--header", pair, "expected NAME=VALUE")
        static.append((name, value.encode()))
    key_sep = args.key_separator or props["key.separator"] or \
        ("\t" if props["parse.key"] == "true" else None)
    ksep = key_sep.encode() if key_sep else None
    with_headers = props["parse.headers"] == "true"
    hdelim, hsep, hkey = (props[k].encode() for k in ("headers.delimiter", "headers.separator",
                                                        "headers.key.separator"))

    def parse(line: bytes):
        headers = list(static)
        if with_headers:
            head, found, line = line.partition(hdelim)
            if not found:  # Kafka: a line without the delimiter has no headers
                head, line = b"", head
            for item in head.split(hsep) if head else ():
                name, has_value, value = item.partition(hkey)
                headers.append((name.decode("utf-8", "replace"), value if has_value else None))
        key = None
        if ksep is not None:
            key, found, value = line.partition(ksep)
            if not found:
                key, value = None, line
        else:
            value = line
        return key, value, headers or None

    return parse


def run(args: argparse.Namespace) -> int:
    import time

    from conf.errors import ConfigError
    from ingest_gateway.client import Producer
    from jobs.cli import gateway_url, settings_from
    from jobs.cli_output import console as make_console, plural
    from jobs.client_options import client_kwargs

    settings = settings_from(args)
    security = client_kwargs(args)
    url = gateway_url(args, settings)
    parse = line_parser(args)
    console = make_console(stderr=True)
    count = 0
    started = time.monotonic()
    show = not args.no_progress and console.is_terminal
    progress = _progress(console) if show else None
    with Producer(url, acks=args.acks, linger_ms=args.linger_ms, **security) as producer:
        if args.partition is not None and args.partition >= producer.partitions_for(args.topic):
            raise ConfigError("--partition", args.partition, f"topic {args.topic!r} has "
                              f"partitions 0..{producer.partitions_for(args.topic) - 1}")
        task = progress.add_task("producing", total=None) if progress else None
        try:
            for line in sys.stdin.buffer:
                key, value, headers = parse(line.rstrip(b"\r\n"))
                # no handle is kept: the producer counts every record that fails
                producer.send(args.topic, value, key=key, partition=args.partition,
                              headers=headers)
                count += 1
                if progress is not None and count % 1000 == 0:
                    progress.update(task, completed=count)
                if not show and not args.no_progress and count % args.progress_every == 0:
                    print(f"{count:,} records", file=sys.stderr, flush=True)
            producer.flush()
        finally:
            if progress is not None:
                progress.stop()
    elapsed = time.monotonic() - started
    failed = producer.records_failed
    console.print(f"produced {plural(count - failed, 'record')} to {args.topic} "
                  f"in {elapsed:.1f} s")
    if failed:
        reasons = "; ".join(str(e) for e in producer.first_errors)
        print(f"sparklog: error: {failed:,} of {count:,} records failed: {reasons}",
              file=sys.stderr)
        return 2
    return 0


def _progress(console):
    """A live rich progress line on the terminal: records sent and the rate."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), TextColumn("{task.completed:,} records"),
                        TimeElapsedColumn(), console=console, transient=True)
    progress.start()
    return progress
