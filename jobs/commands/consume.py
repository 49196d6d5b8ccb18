"""``sparklog consume TOPIC``: print records, like ``kafka-console-consumer`` and kcat.

Without ``--group`` the consumer assigns itself every partition (or
``--partition P``, optionally from ``--offset O``) and reads segments straight
from the store (``--store``): no gateway needed. ``--from-timestamp MS`` or
``--from-datetime ISO`` starts each partition at its first record at or after that
time (found in the store). With ``--group G`` it joins the group through the
gateway (``--bootstrap-server``), reads the partitions the group gives it, and
commits what it printed (auto-commit, and on exit). Add ``--via-gateway`` to read
records through the gateway's long-poll fetch instead of the store (implied by
``--user``, ``--token``, ``--ca-file`` or a client certificate: the gateway's ACLs
then apply).

Each record prints as ``partition offset timestamp key value`` (tab-separated,
the timestamp in ISO 8601 UTC; ``--time-format ms`` for ms since the epoch);
``--format json`` prints one JSON object per line, ``--format '%k %v %T\\n'`` a kcat
format string (tokens: ``%t %p %o %k %v %s %K %S %T %h %%``), and
``--property print.key=true`` (``print.timestamp``, ``print.headers``,
``key.separator``...) kafka-console-consumer's layout. Ends after
``--max-messages N`` records, after ``--timeout-ms`` without a record, or on
Ctrl-C.
"""

from __future__ import annotations

import argparse

from jobs.cli import integer
from jobs.client_options import add_client_flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print a topic's records (from the store or a gateway)",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topic")
    p.add_argument("--group", help="consumer group to join (through the gateway)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the log start where nothing is committed (default: the end)")
    p.add_argument("--from-timestamp", metavar="MS",
                   help="start at the first record at or after this time (ms since the epoch)")
    p.add_argument("--from-datetime", metavar="ISO",
                   help="start at the first record at or after this ISO 8601 time (UTC if "
                        "no zone is given)")
    p.add_argument("--partition", type=integer(0), help="read only this partition (no group)")
    p.add_argument("--offset", type=integer(0), help="start offset in --partition")
    p.add_argument("--max-messages", type=integer(1), help="exit after this many records")
    p.add_argument("--timeout-ms", type=integer(1),
                   help="exit when no record arrives for this long (default: wait forever)")
    p.add_argument("--bootstrap-server", metavar="URL",
                   help="gateways to bootstrap from, comma-separated HOST:PORT or URLs "
                        "(default: http://gateway.host:gateway.port)")
    p.add_argument("--via-gateway", action="store_true",
                   help="fetch records through the gateway instead of reading the store "
                        "(implied by --user, --token, --ca-file, --cert-file)")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                   default="read_uncommitted",
                   help="read_committed: only committed transactions' records, up to the "
                        "last stable offset (kafka-console-consumer's --isolation-level)")
    p.add_argument("--format", default="text", metavar="FORMAT",
                   help="text (default), json, or a kcat format string such as "
                        "'%%p %%o %%T %%k %%v\\n'")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="kafka-console-consumer's print.key, print.timestamp, print.headers, "
                        "print.partition, print.offset, print.value, key.separator... "
                        "(repeatable)")
    p.add_argument("--time-format", choices=["iso", "ms"], default="iso",
                   help="timestamps as ISO 8601 UTC (default) or ms since the epoch")
    add_client_flags(p)
    p.set_defaults(handler=run)


def _printer(args: argparse.Namespace):
    """The function that turns a record into its output line (see ``record_format``).
    Raises ConfigError for a bad --format or --property."""
    from conf.errors import ConfigError
    from jobs import record_format as rf

    iso = args.time_format == "iso"
    if args.property:
        if args.format != "text":
            raise ConfigError("--property", args.property[0], "--property and --format "
                                                              "exclude each other")
        return rf.compile_properties(rf.parse_properties(args.property), iso=iso)
    if args.format == "json":
        return rf.json_line
    if args.format == "text":
        return rf.default_line(iso=iso)
    if "%" not in args.format:
        raise ConfigError("--format", args.format, "expected text, json or a format string "
                                                   "with %-tokens, e.g. '%k %v'")
    return rf.compile_format(args.format, iso=iso)


def _start_time(args: argparse.Namespace) -> int | None:
    """The --from-timestamp / --from-datetime time in ms, or None; raises ConfigError."""
    from conf.errors import ConfigError
    from jobs.cli_output import parse_time_ms

    given = [(f, v) for f, v in (("--from-timestamp", args.from_timestamp),
                                 ("--from-datetime", args.from_datetime)) if v is not None]
    if not given:
        return None
    if len(given) > 1 or args.offset is not None or args.from_beginning or args.group:
        raise ConfigError(given[0][0], given[0][1], "a start time excludes --from-beginning, "
                          "--offset, --group and the other start time")
    flag, value = given[0]
    if flag == "--from-timestamp" and not (value.isascii() and value.isdigit()):
        raise ConfigError(flag, value, "expected milliseconds since the epoch (an integer "
                                       ">= 0); use --from-datetime for a date")
    return parse_time_ms(value, flag)


def run(args: argparse.Namespace) -> int:
    import sys
    import time

    from conf.errors import ConfigError
    from ingest_gateway.client import Consumer
    from jobs.cli import gateway_url, settings_from
    from jobs.cli_output import plural
    from jobs.client_options import client_kwargs
    from log_layout import open_log_from_settings

    if args.offset is not None and args.partition is None:
        raise ConfigError("--offset", args.offset, "--offset needs --partition")
    if args.group and args.partition is not None:
        raise ConfigError("--partition", args.partition, "--partition and --group exclude each "
                          "other (the group assigns partitions)")
    line = _printer(args)
    start_ms = _start_time(args)
    settings = settings_from(args)
    gateway = gateway_url(args, settings)
    security = client_kwargs(args)
    kw = dict(auto_offset_reset="earliest" if args.from_beginning else "latest",
              client_id="sparklog-console-consumer", fetch_max_wait_ms=200,
              isolation_level=args.isolation_level, **security)
    # credentials or a CA are for a gateway: read through it, where its ACLs apply
    via_gateway = args.via_gateway or bool(security)
    lg = open_log_from_settings(settings) if not via_gateway or start_ms is not None \
        else None
    if via_gateway:
        consumer = Consumer(gateway=gateway, group_id=args.group, **kw)
    else:
        consumer = Consumer(log=lg, gateway=gateway if args.group else None,
                            group_id=args.group, **kw)
    out = sys.stdout
    count = 0
    with consumer:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            tps = [(args.topic, args.partition)] if args.partition is not None \
                else consumer.partitions_for(args.topic)
            consumer.assign(tps)
            if args.offset is not None:
                consumer.seek((args.topic, args.partition), args.offset)
            if start_ms is not None:
                for topic, p in tps:
                    plog = lg.partition(topic, p)
                    found = plog.offset_for_timestamp(start_ms)
                    consumer.seek((topic, p), plog.high_watermark() if found is None else found)
        last = time.monotonic()
        try:
            while args.max_messages is None or count < args.max_messages:
                want = 500 if args.max_messages is None else min(500, args.max_messages - count)
                records = consumer.poll(0.2, max_records=want)
                if not records:
                    if args.timeout_ms and (time.monotonic() - last) * 1000 >= args.timeout_ms:
                        break
                    continue
                last = time.monotonic()
                out.write("".join(map(line, records)))
                count += len(records)
                out.flush()
        except KeyboardInterrupt:
            pass
    print(f"Processed a total of {plural(count, 'message')}", file=sys.stderr)
    return 0
