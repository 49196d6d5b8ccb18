"""``sparklog groups list|describe``: consumer groups, like ``kafka-consumer-groups.sh``.

``describe GROUP`` prints one row per partition of the topics the group
committed or subscribes to: committed offset, log start, high watermark (log
end), lag = high watermark − committed, and the member that owns it. Offsets
and lag come from the store, so describe works without a gateway; members and
their assignment are shown only when a gateway (``--bootstrap-server``)
answers, since membership lives in the coordinator's memory.
"""

from __future__ import annotations

import argparse


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
                            help="the gateway (default: http://gateway.host:gateway.port)")
    p.set_defaults(handler=run)


def _gateway_json(url: str, path: str):
    """GET a JSON document from the gateway; None if it does not answer (or 404)."""
    import json

    import urllib3

    try:
        r = urllib3.PoolManager(retries=False).request("GET", url + path, timeout=2.0)
    except urllib3.exceptions.HTTPError:
        return None
    if r.status != 200:
        return None
    try:
        return json.loads(r.data)
    except ValueError:  # something else listens there: treat it as no gateway
        return None


def run(args: argparse.Namespace) -> int:
    import json

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
        live = _gateway_json(url, "/groups")
        if live is not None:
            names |= set(live["groups"])
        for name in sorted(names):
            console.print(name, highlight=False)
        return 0
    group = validate_group_id(args.group)
    doc = _gateway_json(url, f"/groups/{group}")
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
