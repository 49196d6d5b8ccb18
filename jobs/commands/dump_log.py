"""``sparklog dump-log TOPIC/PARTITION[/SEGMENT]``: a partition's segments as its
manifest names them, like ``kafka-dump-log.sh``.

One line per segment: base and last offset, record count, size, the time range of
its records and its CRC-32; ``--print-data-log`` adds one line per record (offset,
timestamp, key and value sizes, header names, key and value as text). A segment
file name limits the dump to that segment (``F.arrow``, or ``_log/F.json`` for one
carried by its manifest version's file on S3 and HDFS); a path to it
(``<store>/T/P/F.arrow``) works too. Reads through ``log_layout`` (the checksum is
verified), never around it.
"""

from __future__ import annotations

import argparse

from jobs.cli import integer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dump-log", help="a partition's segments and records (kafka-dump-log)",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("where", metavar="TOPIC/PARTITION[/SEGMENT]")
    p.add_argument("--print-data-log", action="store_true", help="print every record too")
    p.add_argument("--max-records", type=integer(1), metavar="N",
                   help="with --print-data-log, at most N records per segment")
    p.add_argument("--bytes", action="store_true", help="sizes as exact byte counts")
    p.set_defaults(handler=run)


def _where(text: str) -> tuple[str, int, str | None]:
    """``T/P`` or ``T/P/FILE`` (the last three parts of a longer path) -> (topic,
    partition, file or None). Raises ConfigError."""
    from conf.errors import ConfigError

    parts = [p for p in text.strip().split("/") if p]
    if len(parts) > 2 and parts[-1].endswith(".arrow"):
        topic, partition, file = parts[-3:]
    elif len(parts) > 3 and parts[-2] == "_log" and parts[-1].endswith(".json"):
        # a segment carried by its manifest version's file (S3, HDFS)
        topic, partition, file = parts[-4], parts[-3], "/".join(parts[-2:])
    elif len(parts) == 2:
        (topic, partition), file = parts, None
    else:
        raise ConfigError("dump-log", text, "expected TOPIC/PARTITION or "
                                            "TOPIC/PARTITION/SEGMENT.arrow (or "
                                            "TOPIC/PARTITION/_log/SEGMENT.json)")
    if not (partition.isascii() and partition.isdigit()):
        raise ConfigError("dump-log", text, f"partition {partition!r} is not an integer >= 0")
    return topic, int(partition), file


def run(args: argparse.Namespace) -> int:
    import sys

    from conf.errors import ConfigError
    from jobs.cli import settings_from
    from jobs.cli_output import iso_ms, plural, size
    from jobs.record_format import text
    from log_layout import open_log_from_settings

    topic, partition, file = _where(args.where)
    plog = open_log_from_settings(settings_from(args)).partition(topic, partition)
    m = plog.snapshot()
    segments = [s for s in m.segments if file is None or s.file == file]
    if file is not None and not segments:
        raise ConfigError("dump-log", args.where, f"{file} is not a segment of {topic}-"
                                                  f"{partition}'s newest manifest (version "
                                                  f"{m.version})")
    w = sys.stdout.write
    w(f"Dumping {topic}-{partition}: manifest version {m.version}, leader epoch "
      f"{m.leader_epoch}, log start {m.log_start_offset}, high watermark {m.next_offset}, "
      f"{plural(len(m.segments), 'segment')}\n")
    if m.hot_journal is not None:
        w(f"hot journal: {m.hot_journal}, next entry {m.hot_from} (segments named "
          f"_hot/...@position are in its shared objects)\n")
    for s in segments:
        at = f"@{s.position}" if s.position else ""
        w(f"segment: {s.file}{at} baseOffset: {s.base_offset} lastOffset: {s.last_offset} "
          f"count: {s.count} size: {size(s.bytes, args.bytes)} minTimestamp: "
          f"{iso_ms(s.min_ts)} maxTimestamp: {iso_ms(s.max_ts)} crc32: {s.crc32:#010x}\n")
        if not args.print_data_log:
            continue
        records = plog.read_segment(s, version=m.version).slice(0, args.max_records)
        # ms from the Arrow column: a naive datetime's .timestamp() would apply local time
        times = records.column("timestamp").cast("int64").to_pylist()
        for r, us in zip(records.to_pylist(), times):
            key, value = r["key"], r["value"]
            deleted = " (deleted: below the log start)" if r["offset"] < m.log_start_offset \
                else ""
            ms = None if us is None else us // 1000
            names = [h["key"] for h in r["headers"] or ()]
            w(f"| offset: {r['offset']} CreateTime: {iso_ms(ms)} keySize: "
              f"{-1 if key is None else len(key)} valueSize: "
              f"{-1 if value is None else len(value)} headerKeys: {names} key: "
              f"{text(key, 'null')} payload: {text(value, 'null')}{deleted}\n")
    return 0
