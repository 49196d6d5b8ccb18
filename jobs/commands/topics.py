"""``sparklog topics create|list|describe|alter|delete``: topic admin on the store.

Talks to the log directly (``--store``), like ``kafka-topics.sh`` against a
cluster; a running gateway notices changes within its topic cache (1 s).
With ``--bootstrap-server`` (a comma-separated list of gateways), ``describe``
also shows which gateway leads each partition, as the gateways' metadata says.
"""

from __future__ import annotations

import argparse

from conf.errors import SparklogError
from jobs.cli import integer


def _config(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter or delete topics",
                       description="Topic admin directly on the store (Kafka config names).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = actions.add_parser("create", help="create a topic")
    c.add_argument("name")
    c.add_argument("--partitions", type=integer(1), help="partition count (default: topic.partitions)")
    c.add_argument("--config", type=_config, action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config, e.g. --config cleanup.policy=compact (repeatable)")
    c.add_argument("--if-not-exists", action="store_true", help="no error if it exists")
    actions.add_parser("list", help="list topic names")
    d = actions.add_parser("describe", help="configs and per-partition offsets and sizes")
    d.add_argument("name")
    a = actions.add_parser("alter", help="change configs (partitions may only grow)")
    a.add_argument("name")
    a.add_argument("--partitions", type=integer(1))
    a.add_argument("--config", type=_config, action="append", default=[], metavar="KEY=VALUE")
    x = actions.add_parser("delete", help="delete a topic and all its data")
    x.add_argument("name")
    for parser in (p, d):  # before or after the action, like --store
        parser.add_argument("--bootstrap-server", metavar="URL", default=argparse.SUPPRESS,
                            help="gateways to ask which one leads each partition "
                                 "(comma-separated HOST:PORT or URLs)")
    p.set_defaults(handler=run)


def _leaders(args: argparse.Namespace, settings, topic: str) -> dict[int, str]:
    """Partition -> the URL of the gateway leading it, from the metadata of the gateways
    given with --bootstrap-server ({} without it, or if none answers)."""
    from ingest_gateway.client.cluster import ClusterRouter
    from ingest_gateway.client.session import Session
    from jobs.cli import gateway_url

    if not getattr(args, "bootstrap_server", None):
        return {}
    urls = gateway_url(args, settings)
    with ClusterRouter(urls, request_timeout_s=2.0, session_factory=lambda u: Session(
            u, connect_timeout_s=2.0, read_timeout_s=2.0)) as router:
        try:
            n = router.partition_count(topic)
        except (OSError, SparklogError):
            return {}
        leaders = {p: router.leader(topic, p) for p in range(n)}
    return {p: s.base for p, s in leaders.items() if s is not None}


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    import conf
    from jobs.cli import settings_from
    from log_layout import TopicExists, open_log_from_settings

    settings = settings_from(args)
    lg = open_log_from_settings(settings)
    console = Console()
    if args.action == "list":
        for name in lg.topics():
            console.print(name, highlight=False)
        return 0
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
        console.print(f"created topic {info.name} with {info.partitions} partitions",
                      highlight=False)
        return 0
    if args.action == "alter":
        configs = dict(args.config)
        if args.partitions is not None:
            configs["partitions"] = args.partitions
        if not configs:
            raise conf.ConfigError("--config", None, "nothing to alter: give --config or --partitions")
        info = lg.alter_topic(args.name, configs)
        console.print(f"altered topic {info.name}: "
                      + ", ".join(f"{k}={v}" for k, v in configs.items()), highlight=False)
        return 0
    if args.action == "delete":
        lg.delete_topic(args.name)
        console.print(f"deleted topic {args.name}", highlight=False)
        return 0
    info = lg.topic(args.name, refresh=True)
    defaults = conf.TopicConfig().to_kafka()
    configs = Table(title=f"topic {info.name} (topic id {info.topic_id or '-'}): configs")
    configs.add_column("config")
    configs.add_column("value")
    configs.add_column("source")
    for k, v in info.config.to_kafka().items():
        configs.add_row(k, v, "default" if defaults.get(k) == v else "topic")
    console.print(configs)
    gateways = _leaders(args, settings, info.name)
    parts = Table(title=f"topic {info.name}: partitions")
    columns = ["partition", "leader", "epoch", "log start", "high watermark", "records",
               "bytes", "segments"] + (["gateway"] if gateways else [])
    for col in columns:
        parts.add_column(col, justify="left" if col in ("leader", "gateway") else "right")
    for plog in lg.partitions(info.name):
        m = plog.snapshot()
        parts.add_row(str(m.partition), m.leader or "-", str(m.leader_epoch),
                      str(m.log_start_offset), str(m.next_offset), str(m.record_count),
                      str(m.size_bytes), str(len(m.segments)),
                      *([gateways.get(m.partition, "-")] if gateways else []))
    console.print(parts)
    return 0
