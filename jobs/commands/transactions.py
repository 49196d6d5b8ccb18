"""``sparklog transactions``: transactions in the store, like ``kafka-transactions.sh``.

  list                          every transactional id: producer id, epoch, state,
                                partitions in its transaction, when it began
  describe --transactional-id ID
                                one id: its state, timeout and the partitions and
                                group offsets of its transaction
  describe-producers --topic T --partition P
                                the producers the partition keeps state for: epoch,
                                last sequence, and where their open transaction began
  find-hanging [--topic T ...] [--max-transaction-timeout MIN]
                                transactions open in a partition that nothing will
                                end (they stall read_committed consumers there)
  abort --transactional-id ID   abort its ongoing transaction (fencing its producer,
                                as the timeout would) or finish a decided one
  abort --topic T --partition P --producer-id PID
                                write an ABORT marker for a hanging transaction

Reads and writes the store (``--store``); no gateway is needed. The aborts ask for
confirmation (``--yes`` skips it; without a terminal they refuse unless ``--yes``).

Examples:
  sparklog transactions list
  sparklog transactions describe --transactional-id etl-1
  sparklog transactions find-hanging --max-transaction-timeout 15
  sparklog transactions abort --topic clicks --partition 0 --producer-id 5172063455912837641
"""

from __future__ import annotations

import argparse

from jobs.cli import integer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transactions", help="list, describe, find hanging and abort "
                                            "transactions (like kafka-transactions.sh)",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="every transactional id and its state")
    d = actions.add_parser("describe", help="one transactional id")
    d.add_argument("--transactional-id", required=True, metavar="ID")
    dp = actions.add_parser("describe-producers", help="the producers of one partition")
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", required=True, type=integer(0))
    fh = actions.add_parser("find-hanging", help="transactions open that nothing will end")
    fh.add_argument("--topic", action="append", help="only this topic (repeatable)")
    fh.add_argument("--max-transaction-timeout", type=integer(1), default=15, metavar="MIN",
                    help="minutes after which an ongoing transaction hangs (default 15, "
                         "Kafka's transaction.max.timeout.ms)")
    a = actions.add_parser("abort", help="abort a transactional id's transaction, or a "
                                         "hanging one in a partition")
    a.add_argument("--transactional-id", metavar="ID")
    a.add_argument("--topic")
    a.add_argument("--partition", type=integer(0))
    a.add_argument("--producer-id", type=integer(0), metavar="PID")
    a.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=run, txn_parser=a)


def run(args: argparse.Namespace) -> int:
    from jobs.cli import settings_from
    from log_layout import open_log_from_settings

    log = open_log_from_settings(settings_from(args))
    return {"list": _list, "describe": _describe, "describe-producers": _producers,
            "find-hanging": _hanging, "abort": _abort}[args.action](log, args)


def _list(log, args) -> int:
    from jobs.cli_output import console, iso_ms, table
    from log_layout import transactions

    tids = transactions.list_transactions(log)
    if not tids:
        console().print("no transactional ids")
        return 0
    t = table("TRANSACTIONAL_ID", "PRODUCER_ID", "EPOCH", "STATE", "PARTITIONS", "STARTED",
              left=("TRANSACTIONAL_ID", "STATE", "STARTED"))
    for tid in tids:
        doc = transactions.describe(log, tid)
        if doc:
            t.add_row(tid, str(doc["producer_id"]), str(doc["epoch"]), doc["state"],
                      str(len(doc["partitions"])),
                      iso_ms(doc["started_ms"]) if doc["started_ms"] >= 0 else "-")
    t.print()
    return 0


def _describe(log, args) -> int:
    from conf.errors import SparklogError
    from jobs.cli_output import console, iso_ms, plural
    from log_layout import transactions

    doc = transactions.describe(log, args.transactional_id)
    if not doc:
        raise SparklogError(f"transactional id {args.transactional_id!r} was never used "
                            "(no init_transactions)")
    out = console()
    parts = [f"{t}-{p}" for t, p in doc["partitions"]]
    groups = {g: sum(len(ps) for ps in topics.values()) for g, topics in doc["offsets"].items()}
    for label, value in (
            ("transactional id", args.transactional_id),
            ("producer id", doc["producer_id"]), ("epoch", doc["epoch"]),
            ("state", doc["state"]), ("timeout", f"{doc['timeout_ms']} ms"),
            ("started", iso_ms(doc["started_ms"]) if doc["started_ms"] >= 0 else "-"),
            ("updated", iso_ms(doc["updated_ms"])),
            ("partitions", f"{plural(len(parts), 'partition')}: {', '.join(parts) or '-'}"),
            ("group offsets", ", ".join(f"{g} ({plural(n, 'partition')})"
                                        for g, n in sorted(groups.items())) or "-")):
        out.print(f"{label + ':':<18}{value}")
    return 0


def _producers(log, args) -> int:
    from jobs.cli_output import console, table
    from log_layout.txn_admin import describe_producers

    found = describe_producers(log, args.topic, args.partition)
    if not found:
        console().print(f"{args.topic}-{args.partition} keeps no producer state")
        return 0
    t = table("PRODUCER_ID", "EPOCH", "LAST_SEQUENCE", "LAST_OFFSET", "CURRENT_TXN_START_OFFSET")
    for s in found:
        t.add_row(str(s.producer_id), str(s.epoch), str(s.last_sequence), str(s.last_offset),
                  str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "-")
    t.print()
    return 0


def _hanging(log, args) -> int:
    from jobs.cli_output import console, table
    from log_layout.txn_admin import find_hanging

    found = find_hanging(log, args.topic, max_timeout_ms=args.max_transaction_timeout * 60_000)
    if not found:
        console().print("no hanging transactions")
        return 0
    t = table("TOPIC", "PARTITION", "PRODUCER_ID", "EPOCH", "START_OFFSET",
              "TRANSACTIONAL_ID", "WHY", left=("TOPIC", "TRANSACTIONAL_ID", "WHY"))
    for h in found:
        t.add_row(h.topic, str(h.partition), str(h.producer_id), str(h.epoch),
                  str(h.start_offset), h.transactional_id or "-", h.reason)
    t.print()
    return 0


def _abort(log, args) -> int:
    from jobs.cli_output import confirm, console
    from log_layout import transactions
    from log_layout.txn_admin import abort_hanging

    by_id = args.transactional_id is not None
    by_partition = (args.topic, args.partition, args.producer_id)
    if by_id == any(x is not None for x in by_partition) or \
            (not by_id and None in by_partition):
        args.txn_parser.error("abort needs --transactional-id, or all of --topic, "
                              "--partition and --producer-id")
    out = console()
    if by_id:
        confirm(f"abort the transaction of {args.transactional_id!r} and fence its producer?",
                yes=args.yes)
        state = transactions.abort(log, args.transactional_id)
        out.print(f"{args.transactional_id}: {state or 'never used'}")
        return 0
    confirm(f"write an ABORT marker into {args.topic}-{args.partition} for producer "
            f"{args.producer_id}?", yes=args.yes)
    offset = abort_hanging(log, args.topic, args.partition, args.producer_id)
    out.print(f"aborted producer {args.producer_id}'s transaction in {args.topic}-"
              f"{args.partition} (ABORT marker at offset {offset})")
    return 0
