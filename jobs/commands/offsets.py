"""``sparklog offsets TOPIC [--time T]``: offsets of a topic's partitions, like
``kafka-get-offsets.sh`` and ``kcat -Q``.

``--time latest`` (the default) gives each partition's log end (high watermark),
``--time earliest`` its log start, and a time (ms since the epoch, or an ISO 8601
date-time; UTC when no zone is given) the offset of the first record whose
timestamp is at or after it: the log end when there is none (where a consumer
started there would wait for the next record). Reads the store (``--store``).
"""

from __future__ import annotations

import argparse

from jobs.cli import integer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("offsets", help="offsets per partition at a time, earliest or latest",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topic")
    p.add_argument("--time", default="latest", metavar="T",
                   help="earliest, latest, ms since the epoch or an ISO 8601 date-time")
    p.add_argument("--partition", type=integer(0), action="append",
                   help="only this partition (repeatable)")
    p.add_argument("--json", action="store_true", help="one JSON object per partition")
    p.set_defaults(handler=run)


def offsets_at(plog, time: str, time_ms: int | None) -> tuple[int, int | None]:
    """(offset, timestamp of the record there or None) for ``--time``."""
    m = plog.snapshot()
    if time == "earliest":
        return m.log_start_offset, None
    if time == "latest":
        return m.next_offset, None
    found = plog.offset_for_timestamp(time_ms, manifest=m)
    if found is None:
        return m.next_offset, None
    row = plog.read_table(found, found + 1, manifest=m)
    ts = row.column("timestamp").cast("int64")[0].as_py() // 1000 if row.num_rows else None
    return found, ts


def run(args: argparse.Namespace) -> int:
    import json

    from jobs.cli import settings_from
    from jobs.cli_output import console, iso_ms, parse_time_ms, table
    from log_layout import open_log_from_settings

    time = args.time.strip().lower()
    time_ms = None if time in ("earliest", "latest") else parse_time_ms(args.time, "--time")
    lg = open_log_from_settings(settings_from(args))
    plogs = [lg.partition(args.topic, p) for p in dict.fromkeys(args.partition)] \
        if args.partition else lg.partitions(args.topic)
    out = console()
    t = table("TOPIC", "PARTITION", "OFFSET", "TIMESTAMP", left=("TOPIC", "TIMESTAMP"))
    for plog in plogs:
        offset, ts = offsets_at(plog, time, time_ms)
        if args.json:
            out.print(json.dumps({"topic": plog.topic, "partition": plog.partition,
                                  "offset": offset, "timestamp": ts}), soft_wrap=True)
        else:
            t.add_row(plog.topic, str(plog.partition), str(offset), iso_ms(ts))
    if not args.json:
        t.print()
    return 0
