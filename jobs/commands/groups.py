"""``sparklog groups``: consumer groups, like ``kafka-consumer-groups.sh``.

``describe GROUP`` (or ``--all-groups``) prints one row per partition of the topics
the group committed or subscribes to: committed offset, log start, log end (the
high watermark), lag = log end - committed, and the member that owns it;
``--members`` prints the members and their assignment instead, ``--state`` the
group's state. Offsets and lag come from the store, so describe works without a
gateway; members are known only when the group's coordinator answers (found
through ``--bootstrap-server``, a comma-separated list of gateways), since
membership lives in the coordinator's memory. ``list`` adds the groups every
reachable gateway holds.

``reset-offsets GROUP --topic T[:P,...] | --all-topics`` with one of
``--to-earliest``, ``--to-latest``, ``--to-datetime``, ``--to-offset``,
``--shift-by`` prints the plan (``--dry-run``, the default) or commits it
(``--execute``). ``delete GROUP`` deletes the group and its offsets,
``delete-offsets GROUP --topic T`` one topic's offsets. Like Kafka, these refuse a
group with active members; ``--execute`` and the deletes ask for confirmation
(``--yes`` skips it; without a terminal they refuse unless ``--yes``).
"""

from __future__ import annotations

import argparse
import json

from conf.errors import SparklogError
from jobs.cli import integer
from jobs.client_options import Gateways, add_client_flags

#: reset-offsets' flags (their argparse names) -> how ``group_admin.reset_plan`` resets
_HOW = {"to_earliest": "earliest", "to_latest": "latest", "to_datetime": "datetime",
        "to_offset": "offset", "shift_by": "shift"}


def _signed(text: str) -> int:
    """An argparse type: a decimal integer, negative or not (``-5``, ``12``)."""
    digits = text[1:] if text.startswith("-") else text
    if not digits.isascii() or not digits.isdigit() or abs(int(text)) >= 2**63:
        raise argparse.ArgumentTypeError(f"expected an integer such as -5 or 12, got {text!r}")
    return int(text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="list, describe, reset or delete consumer groups",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = actions.add_parser("list", help="group names (from the store and the gateway)")
    d = actions.add_parser("describe", help="offsets and lag per partition, members or state")
    d.add_argument("group", nargs="?")
    d.add_argument("--all-groups", action="store_true", help="describe every group")
    view = d.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="members and their assignment")
    view.add_argument("--state", action="store_true", help="state, generation, strategy")
    d.add_argument("--json", action="store_true", help="print the description as JSON")
    r = actions.add_parser("reset-offsets", help="reset committed offsets (dry run by default)")
    r.add_argument("group")
    which = r.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", metavar="T[:P,...]",
                       help="a topic, or some of its partitions (repeatable)")
    which.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the log start offset")
    how.add_argument("--to-latest", action="store_true", help="the log end (high watermark)")
    how.add_argument("--to-datetime", metavar="ISO",
                     help="the first record at or after this time (ISO 8601; UTC if no "
                          "zone is given; or ms since the epoch)")
    how.add_argument("--to-offset", type=integer(0), metavar="N",
                     help="this offset (clamped to the log start..log end)")
    how.add_argument("--shift-by", type=_signed, metavar="N",
                     help="the committed offset plus N (N may be negative)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    x = actions.add_parser("delete", help="delete a group and its committed offsets")
    x.add_argument("group")
    o = actions.add_parser("delete-offsets", help="delete a group's offsets of some topics")
    o.add_argument("group")
    o.add_argument("--topic", action="append", required=True, metavar="T[:P,...]",
                   help="a topic, or some of its partitions (repeatable)")
    for parser in (r, x, o):
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for parser in (p, lst, d, r, x, o):  # before or after the action, like --store
        parser.add_argument("--bootstrap-server", metavar="URL", default=argparse.SUPPRESS,
                            help="gateways to bootstrap from, comma-separated HOST:PORT or URLs "
                                 "(default: http://gateway.host:gateway.port)")
        add_client_flags(parser)
    p.set_defaults(handler=run)


def _router(gw: Gateways):
    """A ClusterRouter over ``gw`` (its URLs, TLS files and credentials) with the CLI's
    short timeouts (an admin command should say "no gateway" within seconds, not wait
    like a client)."""
    from ingest_gateway.client.cluster import ClusterRouter

    return ClusterRouter(gw.urls, request_timeout_s=2.0,
                         session_factory=lambda u: gw.session(u, timeout_s=2.0))


def _json(session, path: str):
    """GET a JSON document; None if the gateway does not answer it (or 404), or
    something else listens there."""
    import urllib3

    from ingest_gateway.protocol.connection_security import auth_error

    try:
        r = session.send("GET", path, timeout_s=2.0)
    except (urllib3.exceptions.HTTPError, OSError):
        return None
    try:
        doc = json.loads(r.data)
    except ValueError:
        return None
    denied = auth_error(r.status, doc if isinstance(doc, dict) else {})
    if denied is not None:  # refused credentials are not "no gateway here": say so
        raise denied
    return doc if r.status == 200 else None


def _live_groups(urls: Gateways) -> set[str] | None:
    """The groups every reachable gateway holds (each knows those it coordinates);
    None if no gateway answered. Raises NotAuthenticated / NotAuthorized."""
    from ingest_gateway.protocol.connection_security import AUTH_ERRORS

    with _router(urls) as router:
        try:
            router.refresh()  # learns every gateway of the application
        except AUTH_ERRORS:
            raise  # wrong credentials are not "no gateway answered"
        except (OSError, SparklogError):
            pass
        docs = [_json(router.session(u), "/groups") for u in router.gateways()]
    docs = [d for d in docs if d is not None]
    return None if not docs else {g for d in docs for g in d["groups"]}


def _describe(urls: Gateways, group: str):
    """The group's description from its coordinator (which knows its members); None if
    no gateway answered."""
    with _router(urls) as router:
        coordinator = router.coordinator(group)
        doc = _json(coordinator, f"/groups/{group}") if coordinator is not None else None
        if doc is None:  # any gateway describes it from the store, without members
            for u in router.gateways():
                doc = _json(router.session(u), f"/groups/{group}")
                if doc is not None:
                    break
        return doc


def _commit_via_coordinator(url: Gateways, group: str, offsets: dict) -> bool:
    """Commit ``offsets`` ({(topic, partition): offset}) as a member-less commit at the
    group's coordinator, which refuses it if a member has joined meanwhile (the check and
    the commit are one step there). False if no coordinator answered. Raises GroupNotEmpty
    for that refusal, GatewayError for any other."""
    import urllib3

    from ingest_gateway.protocol.connection_security import auth_error
    from ingest_gateway.errors import GatewayError
    from jobs.group_admin import GroupNotEmpty

    body = json.dumps({"offsets": [{"topic": t, "partition": p, "offset": o}
                                   for (t, p), o in offsets.items()],
                       "metadata": "sparklog groups reset-offsets"}).encode()
    with _router(url) as router:
        coordinator = router.coordinator(group)
        if coordinator is None:
            return False
        try:
            r = coordinator.send("POST", f"/groups/{group}/offsets", body,
                                 {"Content-Type": "application/json"}, timeout_s=10.0)
        except (urllib3.exceptions.HTTPError, OSError):
            return False
    if r.status == 204:
        return True
    try:
        doc = json.loads(r.data)
    except ValueError:
        doc = {}
    denied = auth_error(r.status, doc)
    if denied is not None:
        raise denied
    if doc.get("error") == "unknown_member_id":
        raise GroupNotEmpty(group, "reset offsets of", ["a member that joined just now"],
                            "as its coordinator says")
    raise GatewayError(r.status, str(doc.get("error", "?")), str(doc.get("message", r.data)))


def _description(url: Gateways, lg, group: str) -> dict:
    """The coordinator's description, else the store's (``members_known`` False).
    Raises UnknownGroup."""
    from ingest_gateway.server.groups.store import describe_from_store

    doc = _describe(url, group)
    if doc is None:
        doc = describe_from_store(lg, group).to_json()  # raises UnknownGroup
        doc["members_known"] = False
    else:
        doc["members_known"] = True
    return doc


def run(args: argparse.Namespace) -> int:
    from ingest_gateway.protocol.groups import validate_group_id
    from jobs.cli import settings_from
    from jobs.cli_output import console
    from jobs.client_options import gateways
    from log_layout import open_log_from_settings

    settings = settings_from(args)
    url = gateways(args, settings)
    lg = open_log_from_settings(settings)
    out = console()
    if args.action == "list":
        names = set(lg.groups())
        names |= _live_groups(url) or set()
        for name in sorted(names):
            out.print(name)
        return 0
    if args.action == "describe":
        return _run_describe(args, url, lg, out)
    group = validate_group_id(args.group)
    if args.action == "reset-offsets":
        return _run_reset(args, url, lg, group, out)
    return _run_delete(args, url, lg, group, out)


def _run_describe(args, url: Gateways, lg, out) -> int:
    from conf.errors import ConfigError
    from ingest_gateway.protocol.groups import validate_group_id

    if args.all_groups == (args.group is not None):
        raise ConfigError("--all-groups", args.group, "give either a GROUP or --all-groups")
    names = sorted(set(lg.groups()) | (_live_groups(url) or set())) if args.all_groups \
        else [validate_group_id(args.group)]
    docs = [_description(url, lg, g) for g in names]
    if args.json:
        out.print_json(json.dumps(docs if args.all_groups else docs[0]))
        return 0
    for i, doc in enumerate(docs):
        if i:
            out.print()
        if args.state:
            _print_state(doc, out)
        elif args.members:
            _print_members(doc, out)
        else:
            _print_offsets(doc, out)
    return 0


def _state_text(doc: dict) -> str:
    return doc["state"] if doc["members_known"] else "unknown (no gateway answered)"


def _print_state(doc: dict, out) -> None:
    from jobs.cli_output import table

    t = table("GROUP", "TYPE", "STATE", "GENERATION", "ASSIGNMENT-STRATEGY", "#MEMBERS",
              left=("GROUP", "TYPE", "STATE", "ASSIGNMENT-STRATEGY"))
    t.add_row(doc["group"], _type(doc), _state_text(doc), str(doc["generation"]),
              doc["strategy"] or "-", str(len(doc["members"])))
    t.print()


def _type(doc: dict) -> str:
    """Kafka's group type: consumer (KIP-848 members, alone or beside classic ones)."""
    return doc.get("type") or "classic"


def _partitions(pairs) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted((a["topic"], a["partition"])
                                                     for a in pairs)) or "-"


def _print_members(doc: dict, out) -> None:
    from jobs.cli_output import iso_ms, plural, table

    out.print(f"group {doc['group']} ({_type(doc)}): state {_state_text(doc)}, "
              f"{plural(len(doc['members']), 'member')}")
    # KIP-848 members: their epoch and target (what the assignor gives them; the
    # assignment moves towards it once the partitions are released)
    t = table("CONSUMER-ID", "CLIENT-ID", "PROTOCOL", "EPOCH", "#PARTITIONS", "LAST-HEARTBEAT",
              "ASSIGNMENT", "TARGET", left=("CONSUMER-ID", "CLIENT-ID", "PROTOCOL",
                                             "LAST-HEARTBEAT", "ASSIGNMENT", "TARGET"))
    for m in doc["members"]:
        consumer = m.get("protocol") == "consumer"
        t.add_row(m["member_id"], m["client_id"] or "-", m.get("protocol") or "classic",
                  str(m["member_epoch"]) if consumer else "-", str(len(m["assignment"])),
                  iso_ms(m.get("last_heartbeat_ms")),  # only the coordinator knows it
                  _partitions(m["assignment"]), _partitions(m["target"]) if consumer else "-")
    t.print()


def _print_offsets(doc: dict, out) -> None:
    from jobs.cli_output import plural, table

    members = {m["member_id"]: m for m in doc["members"]}
    out.print(f"group {doc['group']} ({_type(doc)}): state {_state_text(doc)}, generation "
              f"{doc['generation']}, strategy {doc['strategy'] or '-'}, "
              f"{plural(len(members), 'member')}")
    t = table("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-START", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "CLIENT-ID", left=("TOPIC", "CONSUMER-ID", "CLIENT-ID"))
    for row in doc["partitions"]:
        owner = row["owner"]
        t.add_row(row["topic"], str(row["partition"]),
                  "-" if row["committed"] is None else str(row["committed"]),
                  str(row["log_start_offset"]), str(row["high_watermark"]),
                  "-" if row["lag"] is None else str(row["lag"]), owner or "-",
                  members[owner]["client_id"] if owner in members else "-")
    t.print()
    for m in members.values():
        if not m["assignment"]:
            out.print(f"idle member {m['member_id']} ({m['client_id']}): no partition")


def _run_reset(args, url: Gateways, lg, group: str, out) -> int:
    from ingest_gateway.protocol.group_offsets import commit_to_store
    from jobs import group_admin
    from jobs.cli_output import confirm, parse_time_ms, plural, table

    how = next(h for h in _HOW if getattr(args, h) not in (None, False))
    value = getattr(args, how)
    if how == "to_datetime":
        value = parse_time_ms(value, "--to-datetime")
    parts = group_admin.selected_partitions(lg, group, None if args.all_topics else args.topic)
    rows = group_admin.reset_plan(lg, group, parts, _HOW[how], value)
    t = table("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START",
              "LOG-END-OFFSET", left=("GROUP", "TOPIC"))
    for row in rows:
        t.add_row(group, row.topic, str(row.partition),
                  "-" if row.current is None else str(row.current), str(row.new),
                  str(row.log_start), str(row.high_watermark))
    t.print()
    if not args.execute:
        out.print("dry run: nothing changed (add --execute to commit these offsets)")
        return 0
    group_admin.check_empty(_describe(url, group), lg, group, "reset offsets of")
    confirm(f"Reset {plural(len(rows), 'offset')} of consumer group {group!r}?", yes=args.yes)
    offsets = {(r.topic, r.partition): r.new for r in rows}
    if not _commit_via_coordinator(url, group, offsets):
        # no gateway: nobody holds the group in memory to overwrite the store's document
        commit_to_store(lg, group, offsets, metadata="sparklog groups reset-offsets")
    out.print(f"reset {plural(len(rows), 'offset')} of consumer group {group}")
    return 0


def _run_delete(args, url: Gateways, lg, group: str, out) -> int:
    """``delete`` / ``delete-offsets``: the gateway's own operation
    (``ingest_gateway.server.groups.deletes``, what Kafka's DeleteGroups and OffsetDelete
    run) on the store, once the coordinator (or the document) says the group is empty."""
    from ingest_gateway.errors import UnknownGroup
    from ingest_gateway.server.groups import deletes
    from ingest_gateway.server.groups.table import GroupTable
    from jobs import group_admin
    from jobs.cli_output import confirm, plural
    from log_layout import wall_clock_ms

    doc = lg.read_group_offsets(group)
    if doc is None:
        raise UnknownGroup(group)
    description = _describe(url, group)
    # whose members count: the coordinator's when one answered (a standalone gateway's
    # restart forgets the members its document still names), else the document's
    table = GroupTable(lg, wall_clock_ms, load_members=description is None)
    if args.action == "delete":
        group_admin.check_empty(description, lg, group, "delete")
        confirm(f"Delete consumer group {group!r} and its committed offsets?", yes=args.yes)
        deletes.delete_group(table, group)
        out.print(f"deleted consumer group {group}")
        return 0
    group_admin.check_empty(description, lg, group, "delete offsets of")
    gone = [tp for tp in group_admin.selected_partitions(lg, group, args.topic)
            if str(tp[1]) in doc.get("offsets", {}).get(tp[0], {})]
    if not gone:
        out.print(f"consumer group {group} has no committed offset there: nothing to delete")
        return 0
    confirm(f"Delete {plural(len(gone), 'committed offset')} of consumer group {group!r}?",
            yes=args.yes)
    kept = [tp for tp, why in deletes.delete_offsets(table, group, gone).items() if why]
    if kept:  # a member joined since the check and reads these topics
        raise group_admin.GroupNotEmpty(group, "delete offsets of",
                                        ["a member that joined just now"],
                                        "as its store document says")
    out.print(f"deleted {plural(len(gone), 'committed offset')} of consumer group {group}")
    return 0
