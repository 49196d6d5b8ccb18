"""The ``sparklog`` command line.

Sub-commands live in ``jobs/commands/`` (one module per group). Common flags:
``--store URL`` (default ``store.url`` from the settings) and ``--set KEY=VALUE``
for any setting. A sparklog error ends the command with its message and exit
status 2, never with a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import conf
from conf.errors import SparklogError

import jobs.commands


def _parse_set(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparklog",
        description="sparklog: a Kafka-style commit log whose brokers are a Spark application.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'sparklog COMMAND --help' for a command's options.",
    )
    parser.add_argument("--store", metavar="URL",
                        help="the log's store: a folder, file://, s3://bucket/prefix or memory:// "
                             "(default: store.url, ./sparklog-data)")
    parser.add_argument("--set", metavar="KEY=VALUE", type=_parse_set, action="append",
                        default=[], help="override any setting, e.g. --set gateway.linger.ms=10")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(jobs.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"jobs.commands.{info.name}")
        module.register(sub)
    return parser


def settings_from(args: argparse.Namespace, **more: object) -> conf.Settings:
    """Settings with ``--set`` pairs, ``--store`` and command flags (``more``) applied."""
    overrides: dict[str, object] = dict(args.set)
    overrides["store.url"] = args.store
    overrides.update(more)
    return conf.load(overrides)


def open_log_from(settings: conf.Settings):
    """The log named by the settings' store (storage options for S3 endpoints)."""
    from log_layout import open_log

    options = {}
    if settings.store.s3_endpoint_url:
        options = {"client_kwargs": {"endpoint_url": settings.store.s3_endpoint_url}}
    return open_log(settings.store.url, storage_options=options or None,
                    fsync=settings.store.fsync,
                    manifest_versions_retained=settings.store.manifest_versions_retained)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 1
    try:
        return int(args.handler(args) or 0)
    except SparklogError as e:
        print(f"sparklog: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
