"""``sparklog broker-app``: the gateways as a supervised Spark application (``jobs.broker_app``)."""

from __future__ import annotations

import argparse
import json
import os
import re

from jobs.cli import integer

DESCRIPTION = """\
Run the ingest gateway as a long-running Spark application: each gateway slot is a
single-task Spark job whose task hosts the gateway in its own Python process, and a
driver thread per slot submits the job again whenever it fails or ends. Kill the
task's Python or its executor and Spark runs the gateway again (on a spare core when
the executor is gone). Slot S listens on port BASE+S of its executor's host; the
driver prints each slot's address when it changes (and keeps it in --addresses-file).

The driver assigns every partition (and every consumer group's coordinator) to one
live slot and keeps the assignment in the store; a slot silent for --failover-ms loses
its partitions to the others, which claim them with a higher leader epoch, fencing the
silent gateway. Clients given any gateway (or a list) find the leaders through
GET /metadata. With --kafka-port (or gateway.kafka.listeners set) slot S is also Kafka
broker S on port BASE+S: Kafka clients bootstrap from any slot, and Metadata names
every live slot and the leaders the driver assigned. `sparklog cluster status` shows
it all. Keep one executor's worth of
cores spare, so a lost executor's gateway has somewhere to go. Run the driver under a
supervisor (systemd, Kubernetes): a restarted driver takes the application over by
its higher driver epoch. SIGTERM or SIGINT stops the application.

The gateways write through the hot tier (one object per flush for all their
partitions) as gateway.hot.enable says (default: on for S3 and HDFS, off for local;
--set gateway.hot.enable=false turns it off)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("broker-app", help="run the gateway as a supervised Spark application",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gateways", type=integer(1), default=1, metavar="N",
                   help="gateway slots, each one Spark task (default 1)")
    p.add_argument("--failover-ms", type=integer(100), default=3000, metavar="MS",
                   help="a slot whose gateway does not answer for this long loses its "
                        "partitions to the live slots (default 3000)")
    p.add_argument("--no-maintenance", dest="maintenance", action="store_false",
                   help="do not run compaction, retention and roll-up from this application "
                        "(default: every maintenance.interval.ms, as `sparklog maintain`)")
    p.add_argument("--master", metavar="URL",
                   help="Spark master, e.g. spark://host:7077 (default: local[N+1] "
                        "with task retries)")
    p.add_argument("--port", type=integer(1), metavar="BASE",
                   help="slot S listens on BASE+S (default: gateway.port, 8082)")
    p.add_argument("--kafka-port", type=integer(1), metavar="BASE",
                   help="slot S also listens for Kafka clients on BASE+S, a broker with node "
                        "id S (default: the port of gateway.kafka.listeners, if set; its "
                        "scheme is kept)")
    p.add_argument("--bind-host", metavar="HOST",
                   help="address the gateway binds on its executor (default: the "
                        "executor's SPARK_LOCAL_IP, else 0.0.0.0)")
    p.add_argument("--storage-options", metavar="JSON",
                   help="fsspec storage options as JSON, passed to every gateway; they "
                        "override what the store.* settings imply (store.s3.endpoint.url, "
                        "store.hdfs.*), which every process reads anyway")
    p.add_argument("--addresses-file", metavar="PATH",
                   help="keep each slot's address and state in this JSON file (on the driver)")
    p.add_argument("--log-level", default="warning",
                   choices=["debug", "info", "warning", "error"], help="the gateways' log level")
    p.set_defaults(handler=run)


def _override_pairs(args: argparse.Namespace) -> dict[str, str]:
    """Every ``--set`` pair, before and after the command name (the later win)."""
    pairs = dict(args.set)
    for _key, late in sorted((k, v) for k, v in vars(args).items() if re.fullmatch(r"set_\d+", k)):
        pairs.update(late)
    return pairs


def run(args: argparse.Namespace) -> int:
    from conf.errors import ConfigError
    from jobs import broker_app
    from jobs.cli import settings_from

    broker_app.check_gateways(args.gateways)  # before Spark starts: a one-line refusal
    settings = settings_from(args)  # a bad --set fails here, not in every task
    if args.storage_options:
        try:
            if not isinstance(json.loads(args.storage_options), dict):
                raise ValueError("expected a JSON object")
        except ValueError as e:
            raise ConfigError("--storage-options", args.storage_options, str(e)) from None
    store = settings.store.url
    if "://" not in store:
        store = os.path.abspath(store)  # executors run in their worker's own folder
    base = args.port or settings.gateway.port
    if base + args.gateways - 1 > 65535:
        raise ConfigError("--port", base, f"slots up to {base + args.gateways - 1} exceed 65535")
    scheme, kafka_base = _kafka_listener(settings.gateway.kafka_listeners, args.kafka_port)
    if kafka_base and kafka_base + args.gateways - 1 > 65535:
        raise ConfigError("--kafka-port", kafka_base,
                          f"slots up to {kafka_base + args.gateways - 1} exceed 65535")
    pairs = task_settings(settings, _override_pairs(args))
    task = broker_app.GatewayTask(store_url=store, base_port=base,
                                  settings=tuple(sorted(pairs.items())),
                                  bind_host=args.bind_host, storage_options=args.storage_options,
                                  log_level=args.log_level, kafka_base_port=kafka_base,
                                  kafka_scheme=scheme)
    return broker_app.run(task, args.gateways, master=args.master,
                          addresses_file=args.addresses_file, failover_ms=args.failover_ms,
                          maintenance=args.maintenance, settings=settings)


#: settings each slot sets for itself (jobs.broker_app.GatewayTask.argv)
PER_SLOT = {"store.url", "gateway.broker.id", "gateway.advertised.listeners",
            "gateway.kafka.listeners", "gateway.kafka.advertised.listeners"}


def task_settings(settings, overrides: dict[str, str]) -> dict[str, str]:
    """The ``--set`` pairs every gateway task runs with: the driver's ``SPARKLOG_*``
    variables and ``--set`` pairs (an executor on another host has neither), and the
    resolved ``store.*`` settings, so every process opens the store the driver opened.
    Slot-specific keys are left to each slot."""
    import conf
    from log_layout.opening import store_setting_pairs

    pairs = {**conf.settings.env_overrides(os.environ), **overrides,
             **store_setting_pairs(settings)}
    return {k: str(v) for k, v in pairs.items() if k not in PER_SLOT}


def _kafka_listener(configured: str, base: int | None) -> tuple[str, int]:
    """(scheme, base port) of the slots' Kafka listeners: ``--kafka-port`` with the
    configured listener's scheme (PLAINTEXT if none), else the configured listener's
    own port as the base; (scheme, 0) for none. Raises ConfigError for a bad listener."""
    from ingest_gateway.kafka.security import parse_listener

    if not configured.strip():
        return "PLAINTEXT", base or 0
    scheme, _host, port = parse_listener(configured)
    return scheme, base or port
