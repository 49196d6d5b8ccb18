"""``sparklog consume TOPIC``: print records, like ``kafka-console-consumer``.

Without ``--group`` the consumer assigns itself every partition (or
``--partition P``, optionally from ``--offset O``) and reads segments straight
from the store (``--store``): no gateway needed. With ``--group G`` it joins the
group through the gateway (``--bootstrap-server``), reads the partitions the
group gives it, and commits what it printed (auto-commit, and on exit). Add
``--via-gateway`` to read records through the gateway's long-poll fetch instead
of the store. Each record prints as ``partition offset timestamp key value``
(tab-separated; ``--format json`` prints one JSON object per line). Ends after
``--max-messages N`` records, after ``--timeout-ms`` without a record, or on
Ctrl-C.
"""

from __future__ import annotations

import argparse

from jobs.cli import integer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print a topic's records (from the store or a gateway)",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topic")
    p.add_argument("--group", help="consumer group to join (through the gateway)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the log start where nothing is committed (default: the end)")
    p.add_argument("--partition", type=integer(0), help="read only this partition (no group)")
    p.add_argument("--offset", type=integer(0), help="start offset in --partition")
    p.add_argument("--max-messages", type=integer(1), help="exit after this many records")
    p.add_argument("--timeout-ms", type=integer(1),
                   help="exit when no record arrives for this long (default: wait forever)")
    p.add_argument("--bootstrap-server", metavar="URL",
                   help="gateways to bootstrap from, comma-separated HOST:PORT or URLs "
                        "(default: http://gateway.host:gateway.port)")
    p.add_argument("--via-gateway", action="store_true",
                   help="fetch records through the gateway instead of reading the store")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(handler=run)


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    import time

    from conf.errors import ConfigError
    from ingest_gateway.client import Consumer
    from jobs.cli import gateway_url, settings_from
    from log_layout import open_log_from_settings

    if args.offset is not None and args.partition is None:
        raise ConfigError("--offset", args.offset, "--offset needs --partition")
    if args.group and args.partition is not None:
        raise ConfigError("--partition", args.partition, "--partition and --group exclude each "
                          "other (the group assigns partitions)")
    settings = settings_from(args)
    gateway = gateway_url(args, settings)
    kw = dict(auto_offset_reset="earliest" if args.from_beginning else "latest",
              client_id="sparklog-console-consumer", fetch_max_wait_ms=200)
    if args.via_gateway:
        consumer = Consumer(gateway=gateway, group_id=args.group, **kw)
    else:
        consumer = Consumer(log=open_log_from_settings(settings),
                            gateway=gateway if args.group else None, group_id=args.group, **kw)
    out = sys.stdout
    count = 0
    with consumer:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            consumer.assign([(args.topic, args.partition)] if args.partition is not None
                            else consumer.partitions_for(args.topic))
            if args.offset is not None:
                consumer.seek((args.topic, args.partition), args.offset)
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
                for r in records:
                    if args.format == "json":
                        out.write(json.dumps({"topic": r.topic, "partition": r.partition,
                                              "offset": r.offset, "timestamp": r.timestamp,
                                              "key": _text(r.key), "value": _text(r.value)}) + "\n")
                    else:
                        out.write(f"{r.partition}\t{r.offset}\t{r.timestamp}\t"
                                  f"{_text(r.key) if r.key is not None else ''}\t"
                                  f"{_text(r.value) if r.value is not None else 'null'}\n")
                count += len(records)
                out.flush()
        except KeyboardInterrupt:
            pass
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
