"""``sparklog records delete TOPIC --partition P --before OFFSET``: delete the records
before an offset, like ``kafka-delete-records.sh``.

Moves the partition's log start offset to OFFSET (``log_layout.delete_records``):
every reader, the gateway's consumers included, then starts at OFFSET at the
earliest; the segments wholly below it are deleted by vacuum after
``file.delete.delay.ms``. ``--before latest`` deletes everything up to the high
watermark. Talks to the store (``--store``); asks for confirmation (``--yes``
skips it; without a terminal it refuses unless ``--yes``).
"""

from __future__ import annotations

import argparse

from jobs.cli import integer


def _before(text: str) -> int:
    """``latest`` (-1, Kafka's "the high watermark") or an offset >= 0."""
    return -1 if text == "latest" else integer(0)(text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("records", help="delete a partition's records before an offset",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    d = actions.add_parser("delete", help="move the log start offset forward")
    d.add_argument("topic")
    d.add_argument("--partition", type=integer(0), action="append", required=True,
                   help="the partition (repeatable)")
    d.add_argument("--before", type=_before, required=True, metavar="OFFSET",
                   help="the new log start offset, or 'latest' for the high watermark")
    d.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from jobs.cli import settings_from
    from jobs.cli_output import confirm, progress, table
    from log_layout import open_log_from_settings
    from log_layout.delete_records import delete_records
    from log_layout.errors import OffsetOutOfRange

    lg = open_log_from_settings(settings_from(args))
    plogs = [lg.partition(args.topic, p) for p in dict.fromkeys(args.partition)]
    for plog in plogs:  # every partition checked before any is changed
        m = plog.snapshot()
        if args.before > m.next_offset:
            raise OffsetOutOfRange(plog.topic, plog.partition, args.before,
                                   m.log_start_offset, m.next_offset)
    where = ", ".join(f"{args.topic}-{plog.partition}" for plog in plogs)
    target = "the high watermark" if args.before == -1 else f"offset {args.before}"
    confirm(f"Delete the records of {where} before {target}?", yes=args.yes)
    t = table("TOPIC", "PARTITION", "LOW-WATERMARK", "HIGH-WATERMARK", left=("TOPIC",))
    for plog in progress(plogs, "deleting records", total=len(plogs)):
        m = delete_records(plog, args.before)
        t.add_row(plog.topic, str(plog.partition), str(m.log_start_offset), str(m.next_offset))
    t.print()
    return 0
