"""``sparklog topics create|list|describe|alter|delete``: topic admin on the store.

Talks to the log directly (``--store``), like ``kafka-topics.sh`` against a
cluster; a running gateway notices changes within its topic cache (1 s).
With ``--bootstrap-server`` (a comma-separated list of gateways), ``describe``
also shows which gateway leads each partition, as the gateways' metadata says.

``alter`` (or ``alter-config``) sets configs with ``--config KEY=VALUE`` and removes
an override with ``--delete-config KEY`` or ``--config KEY=`` (kafka-configs'
``--delete-config``): the key goes back to the default (the ``topic.*`` setting).
``list --long`` shows each topic's partitions, size and overrides,
``list --topics-with-overrides`` only the topics that have some. ``delete`` asks
for confirmation (``--yes`` skips it; without a terminal it refuses unless ``--yes``).
"""

from __future__ import annotations

import argparse

from conf.errors import SparklogError
from jobs.cli import integer
from jobs.client_options import add_client_flags


def _config(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter or delete topics",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = actions.add_parser("create", help="create a topic")
    c.add_argument("name")
    c.add_argument("--partitions", type=integer(1),
                   help="partition count (default: topic.partitions)")
    c.add_argument("--config", type=_config, action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config, e.g. --config cleanup.policy=compact (repeatable)")
    c.add_argument("--if-not-exists", action="store_true", help="no error if it exists")
    lst = actions.add_parser("list", help="list topics (names, or --long with overrides)")
    lst.add_argument("--long", "-l", action="store_true",
                     help="partitions, records, size and config overrides of each topic")
    lst.add_argument("--topics-with-overrides", action="store_true",
                     help="only topics with config overrides (implies --long)")
    d = actions.add_parser("describe", help="configs and per-partition offsets and sizes")
    d.add_argument("name")
    a = actions.add_parser("alter", aliases=["alter-config"],
                           help="change or remove configs (partitions may only grow)")
    a.add_argument("name")
    a.add_argument("--partitions", type=integer(1))
    a.add_argument("--config", type=_config, action="append", default=[], metavar="KEY=VALUE",
                   help="set a config; KEY= (no value) removes its override")
    a.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="remove an override: back to the default (repeatable)")
    x = actions.add_parser("delete", help="delete a topic and all its data")
    x.add_argument("name")
    x.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for parser in (lst, d):
        parser.add_argument("--bytes", action="store_true",
                            help="sizes as exact byte counts (default: 4.5 MiB)")
    for parser in (p, d):  # before or after the action, like --store
        parser.add_argument("--bootstrap-server", metavar="URL", default=argparse.SUPPRESS,
                            help="gateways to ask which one leads each partition "
                                 "(comma-separated HOST:PORT or URLs)")
        add_client_flags(parser)
    p.set_defaults(handler=run)


def _leaders(args: argparse.Namespace, settings, topic: str) -> dict[int, str]:
    """Partition -> the URL of the gateway leading it, from the metadata of the gateways
    given with --bootstrap-server ({} without it, or if none answers). Raises
    NotAuthenticated / NotAuthorized if a gateway refuses the credentials."""
    from ingest_gateway.client.cluster import ClusterRouter
    from ingest_gateway.protocol.connection_security import AUTH_ERRORS
    from jobs.client_options import gateways

    if not getattr(args, "bootstrap_server", None):
        return {}
    gw = gateways(args, settings)
    with ClusterRouter(gw.urls, request_timeout_s=2.0,
                       session_factory=lambda u: gw.session(u, timeout_s=2.0)) as router:
        try:
            n = router.partition_count(topic)
        except AUTH_ERRORS:
            raise  # wrong credentials are not "no gateway answered"
        except (OSError, SparklogError):
            return {}
        leaders = {p: router.leader(topic, p) for p in range(n)}
    return {p: s.base for p, s in leaders.items() if s is not None}


def overrides(info, defaults: dict[str, str]) -> dict[str, str]:
    """The topic's configs that differ from ``defaults`` (partitions aside)."""
    return {k: v for k, v in info.config.to_kafka().items()
            if k != "partitions" and defaults.get(k) != v}


def run(args: argparse.Namespace) -> int:
    import conf
    from jobs.cli import settings_from
    from jobs.cli_output import console, plural
    from log_layout import TopicExists, open_log_from_settings

    settings = settings_from(args)
    lg = open_log_from_settings(settings)
    out = console()
    if args.action == "list":
        return _list(args, lg, settings.topic.to_kafka(), out)
    if args.action == "create":
        configs = dict(args.config)
        if args.partitions is not None:
            configs["partitions"] = args.partitions
        try:
            info = lg.create_topic(args.name, conf.TopicConfig.from_kafka(configs,
                                                                          base=settings.topic))
        except TopicExists:
            if args.if_not_exists:
                return 0
            raise
        out.print(f"created topic {info.name} with {plural(info.partitions, 'partition')}")
        return 0
    if args.action in ("alter", "alter-config"):
        return _alter(args, lg, settings, out)
    if args.action == "delete":
        from jobs.cli_output import confirm

        lg.topic(args.name, refresh=True)  # raises UnknownTopic before asking
        confirm(f"Delete topic {args.name!r} and all its data?", yes=args.yes)
        lg.delete_topic(args.name)
        out.print(f"deleted topic {args.name}")
        return 0
    return _describe(args, lg, settings, out)


def _list(args, lg, defaults: dict[str, str], out) -> int:
    from jobs.cli_output import progress, size, table

    if not (args.long or args.topics_with_overrides):
        for name in lg.topics():
            out.print(name)
        return 0
    t = table("TOPIC", "PARTITIONS", "RECORDS", "SIZE", "OVERRIDES",
              left=("TOPIC", "OVERRIDES"))
    names = lg.topics()
    for name in progress(names, "reading topics", total=len(names)):
        info = lg.topic(name, refresh=True)
        changed = overrides(info, defaults)
        if args.topics_with_overrides and not changed:
            continue
        snaps = [plog.snapshot() for plog in lg.partitions(name)]
        t.add_row(name, info.partitions, sum(m.record_count for m in snaps),
                  size(sum(m.size_bytes for m in snaps), args.bytes),
                  ",".join(f"{k}={v}" for k, v in changed.items()) or "-")
    t.print()
    return 0


def _alter(args, lg, settings, out) -> int:
    import conf

    defaults = settings.topic.to_kafka()
    configs = {k: v for k, v in args.config if v != ""}
    removed = [k for k, v in args.config if v == ""] + [k.strip() for k in args.delete_config]
    for key in removed:
        if key == "partitions" or key not in defaults:
            raise conf.ConfigError("--delete-config", key, "not a topic config with a default; "
                                   "known: " + ", ".join(k for k in defaults
                                                        if k != "partitions"))
        if key in configs:
            raise conf.ConfigError("--delete-config", key, "is also set with --config")
        configs[key] = defaults[key]
    if args.partitions is not None:
        configs["partitions"] = args.partitions
    if not configs:
        raise conf.ConfigError("--config", None,
                               "nothing to alter: give --config, --delete-config or --partitions")
    info = lg.alter_topic(args.name, configs)
    shown = [f"{k}={v}" for k, v in configs.items() if k not in removed] \
        + [f"{k} (back to the default {defaults[k]})" for k in removed]
    out.print(f"altered topic {info.name}: " + ", ".join(shown))
    return 0


def _describe(args, lg, settings, out) -> int:
    from jobs.cli_output import iso_ms, plural, size, table

    info = lg.topic(args.name, refresh=True)
    defaults = settings.topic.to_kafka()
    configs = table("CONFIG", "VALUE", "SOURCE", left=("CONFIG", "VALUE", "SOURCE"),
                    title=f"topic {info.name} (topic id {info.topic_id or '-'}, "
                          f"{plural(info.partitions, 'partition')}, created "
                          f"{iso_ms(info.created_ms)}): configs")
    for k, v in info.config.to_kafka().items():
        configs.add_row(k, v, "default" if defaults.get(k) == v else "topic")
    configs.print()
    out.print()
    gateways = _leaders(args, settings, info.name)
    parts = table("PARTITION", "LEADER", "EPOCH", "LOG-START", "HIGH-WATERMARK", "RECORDS",
                  "SIZE", "SEGMENTS", "LAST-COMMIT", *(["GATEWAY"] if gateways else []),
                  left=("LEADER", "LAST-COMMIT", "GATEWAY"), title=f"topic {info.name}: partitions")
    for plog in lg.partitions(info.name):
        m = plog.snapshot()
        parts.add_row(m.partition, m.leader or "-", m.leader_epoch, m.log_start_offset,
                      m.next_offset, m.record_count, size(m.size_bytes, args.bytes),
                      len(m.segments), iso_ms(m.committed_ms or None),
                      *([gateways.get(m.partition, "-")] if gateways else []))
    parts.print()
    return 0
