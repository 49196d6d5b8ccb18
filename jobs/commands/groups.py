"""``sparklog groups list|describe``: consumer groups, like ``kafka-consumer-groups.sh``.

``describe GROUP`` prints one row per partition of the topics the group
committed or subscribes to: committed offset, log start, high watermark (log
end), lag = high watermark − committed, and the member that owns it. Offsets
and lag come from the store, so describe works without a gateway; members and
their assignment are shown only when the group's coordinator answers (found
through ``--bootstrap-server``, a comma-separated list of gateways), since
membership lives in the coordinator's memory. ``list`` adds the groups every
reachable gateway of the application holds.
"""

from __future__ import annotations

import argparse
import json

from conf.errors import SparklogError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="list consumer groups, describe their members and lag",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = actions.add_parser("list", help="group names (from the store and the gateway)")
    d = actions.add_parser("describe", help="members, assignment, offsets and lag per partition")
    d.add_argument("group")
    d.add_argument("--json", action="store_true", help="print the description as JSON")
    for parser in (p, lst, d):  # before or after the action, like --store
        parser.add_argument("--bootstrap-server", metavar="URL", default=argparse.SUPPRESS,
                            help="gateways to bootstrap from, comma-separated HOST:PORT or URLs "
                        "(default: http://gateway.host:gateway.port)")
    p.set_defaults(handler=run)


def _router(urls: str):
    """A ClusterRouter over ``urls`` with the CLI's short timeouts (an admin command
    should say "no gateway" within seconds, not wait like a client)."""
    from ingest_gateway.client.cluster import ClusterRouter
    from ingest_gateway.client.session import Session

    return ClusterRouter(urls, request_timeout_s=2.0, session_factory=lambda u: Session(
        u, connect_timeout_s=2.0, read_timeout_s=2.0))


def _json(session, path: str):
    """GET a JSON document; None if the gateway does not answer it (or 404), or
    something else listens there."""
    import urllib3

    try:
        r = session.send("GET", path, timeout_s=2.0)
    except (urllib3.exceptions.HTTPError, OSError):
        return None
    if r.status != 200:
        return None
    try:
        return json.loads(r.data)
    except ValueError:
        return None


def _live_groups(urls: str) -> set[str] | None:
    """The groups every reachable gateway holds (each knows those it coordinates);
    None if no gateway answered."""
    with _router(urls) as router:
        try:
            router.refresh()  # learns every gateway of the application
        except (OSError, SparklogError):
            pass
        docs = [_json(router.session(u), "/groups") for u in router.gateways()]
    docs = [d for d in docs if d is not None]
    return None if not docs else {g for d in docs for g in d["groups"]}


def _describe(urls: str, group: str):
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


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ingest_gateway.client.group_protocol import validate_group_id
    from ingest_gateway.server.groups.store import describe_from_store
    from jobs.cli import gateway_url, settings_from
    from log_layout import open_log_from_settings

    settings = settings_from(args)
    url = gateway_url(args, settings)
    lg = open_log_from_settings(settings)
    console = Console()
    if args.action == "list":
        names = set(lg.groups())
        names |= _live_groups(url) or set()
        for name in sorted(names):
            console.print(name, highlight=False)
        return 0
    group = validate_group_id(args.group)
    doc = _describe(url, group)
    if doc is None:
        doc = describe_from_store(lg, group).to_json()  # raises UnknownGroup
        doc["members_known"] = False
    else:
        doc["members_known"] = True
    if args.json:
        console.print_json(json.dumps(doc))
        return 0
    members = {m["member_id"]: m for m in doc["members"]}
    state = doc["state"] if doc["members_known"] else "unknown (no gateway answered)"
    console.print(f"group {group}: state {state}, generation {doc['generation']}, "
                  f"strategy {doc['strategy'] or '-'}, {len(members)} member(s)", highlight=False)
    table = Table("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-START", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "CLIENT-ID")
    for row in doc["partitions"]:
        owner = row["owner"]
        table.add_row(row["topic"], str(row["partition"]),
                      "-" if row["committed"] is None else str(row["committed"]),
                      str(row["log_start_offset"]), str(row["high_watermark"]),
                      "-" if row["lag"] is None else str(row["lag"]), owner or "-",
                      members[owner]["client_id"] if owner in members else "-")
    console.print(table)
    idle = [m for m in members.values() if not m["assignment"]]
    for m in idle:
        console.print(f"idle member {m['member_id']} ({m['client_id']}): no partition",
                      highlight=False)
    return 0
