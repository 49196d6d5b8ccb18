"""``sparklog metadata``: the cluster at a glance, like ``kcat -L``.

Lists the gateways (those the ``--bootstrap-server`` gateways' metadata names; none
if no gateway answers), then every topic (or ``--topic T``, repeatable) with its
partitions: the gateway leading each (when a gateway answered), the leader and
leader epoch the manifest records, log start and high watermark. Reads the store
(``--store``); ``--json`` prints one JSON document.
"""

from __future__ import annotations

import argparse

from jobs.client_options import Gateways, add_client_flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metadata", help="gateways, topics, partitions and leaders (kcat -L)",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", "-t", action="append", metavar="T", help="only this topic")
    p.add_argument("--bootstrap-server", metavar="URL",
                   help="gateways to ask for leaders, comma-separated HOST:PORT or URLs "
                        "(default: http://gateway.host:gateway.port)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    add_client_flags(p)
    p.set_defaults(handler=run)


def _gateway_metadata(url: Gateways, topics: list[str]) -> tuple[dict | None, str | None]:
    """(the metadata of ``topics`` from any gateway of ``url``, that gateway's URL);
    (None, None) if none answered."""
    from conf.errors import SparklogError
    from ingest_gateway.protocol.connection_security import AUTH_ERRORS
    from jobs.commands.groups import _router

    with _router(url) as router:
        try:
            doc = router.refresh(topics=topics)
        except AUTH_ERRORS:
            raise  # wrong credentials are not "no gateway answered"
        except (OSError, SparklogError):
            return None, None
        return doc, router.gateways()[0]


def describe(lg, url: Gateways, names: list[str] | None) -> dict:
    """The metadata document ``run`` prints. Raises UnknownTopic for a topic named."""
    topics = names or lg.topics()
    infos = [lg.topic(t, refresh=True) for t in topics]
    gw, answered = _gateway_metadata(url, topics)
    leaders: dict[tuple[str, int], str | None] = {}
    for t in (gw or {}).get("topics", ()):
        for p in t.get("partitions", ()):
            lead = p.get("leader")
            # a standalone gateway leads everything: it answers with no url of its own
            leaders[(t["topic"], p["partition"])] = None if lead is None else \
                lead.get("url") or answered
    doc = {"store": lg.url, "cluster_id": lg.cluster_id(),
           "gateways": [{"slot": g["slot"], "url": g["url"] or answered, "live": g["live"]}
                        for g in (gw or {}).get("gateways", ())],
           "topics": []}
    from jobs.cli_output import progress

    for info in progress(infos, "reading partitions", total=len(infos)):
        parts = []
        for plog in lg.partitions(info.name):
            m = plog.snapshot()
            parts.append({"partition": m.partition,
                          "gateway": leaders.get((info.name, m.partition)),
                          "leader": m.leader, "leader_epoch": m.leader_epoch,
                          "log_start_offset": m.log_start_offset,
                          "high_watermark": m.next_offset})
        doc["topics"].append({"topic": info.name, "topic_id": info.topic_id,
                              "partitions": parts})
    return doc


def run(args: argparse.Namespace) -> int:
    import json

    from jobs.cli import settings_from
    from jobs.client_options import gateways
    from jobs.cli_output import console, plural
    from log_layout import open_log_from_settings

    settings = settings_from(args)
    lg = open_log_from_settings(settings)
    doc = describe(lg, gateways(args, settings), args.topic)
    out = console()
    if args.json:
        out.print_json(json.dumps(doc))
        return 0
    scope = "all topics" if not args.topic else "topic " + ", ".join(args.topic)
    out.print(f"Metadata for {scope} (store {doc['store']}, cluster id {doc['cluster_id']}):")
    out.print(f" {plural(len(doc['gateways']), 'gateway')}"
              + (":" if doc["gateways"] else " (none answered)"))
    for g in doc["gateways"]:
        slot = "standalone" if g["slot"] is None else f"slot {g['slot']}"
        out.print(f"  gateway {g['url']} ({slot}{'' if g['live'] else ', down'})")
    out.print(f" {plural(len(doc['topics']), 'topic')}:")
    for t in doc["topics"]:
        out.print(f'  topic "{t["topic"]}" with {plural(len(t["partitions"]), "partition")}:')
        for p in t["partitions"]:
            out.print(f"    partition {p['partition']}, gateway {p['gateway'] or '-'}, "
                      f"leader {p['leader'] or '-'}, epoch {p['leader_epoch']}, "
                      f"log start {p['log_start_offset']}, "
                      f"high watermark {p['high_watermark']}")
    return 0
