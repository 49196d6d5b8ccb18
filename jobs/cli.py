"""The ``sparklog`` command line.

Sub-commands live in ``jobs/commands/`` (one module per group). Common flags,
accepted before or after the command name (``sparklog --store d topics list``
and ``sparklog topics list --store d`` mean the same): ``--store URL`` (default
``store.url`` from the settings) and ``--set KEY=VALUE`` for any setting. A
sparklog error, an unreachable gateway or store (``OSError``) and a bad flag end
the command with a one-line message and exit status 2, never with a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit

import conf
from conf.durations import parse_duration_ms
from conf.errors import ConfigError, SparklogError
from pipeline.errors import spark_failure_message

import jobs.commands


def _parse_set(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def integer(minimum: int):
    """An argparse type: a decimal integer of at least ``minimum`` (ASCII digits only,
    so ``+1``, `` 1``, ``1_0`` and other scripts' digits are refused)."""

    def parse(text: str) -> int:
        digits = text[1:] if text.startswith("-") else text
        if not digits.isascii() or not digits.isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return int(text)

    parse.__name__ = f"integer >= {minimum}"  # argparse names the type in some messages
    return parse


def duration(minimum: int):
    """An argparse type: a duration in ms of at least ``minimum`` ms (``conf.durations``:
    ``500ms``, ``10s``, ``5m``, ``1h``, ``2d``; a bare number is milliseconds)."""

    def parse(text: str) -> int:
        try:
            return parse_duration_ms(text, key="duration", minimum=minimum)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e.reason}") from None

    parse.__name__ = "duration"  # argparse names the type in some messages
    return parse


class _AppendSet(argparse.Action):
    """``--set`` after a command name: appends to a list of its own parser level.

    argparse copies a sub-command's namespace over its parent's, so a plain
    ``append`` there would replace the ``--set`` pairs given before the command.
    """

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), values])


def _command_parsers(parser: argparse.ArgumentParser,
                     depth: int = 1) -> Iterator[tuple[int, argparse.ArgumentParser]]:
    """Every sub-command parser below ``parser`` (with its depth), each once."""
    seen: set[int] = set()
    for action in parser._actions:  # argparse has no public walk of its sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if id(child) not in seen:  # aliases map to the same parser
                    seen.add(id(child))
                    yield depth, child
                    yield from _command_parsers(child, depth + 1)


def _add_common_flags(parser: argparse.ArgumentParser) -> None:
    """Give every sub-command ``--store`` and ``--set`` too (values given later win)."""
    for depth, child in _command_parsers(parser):
        if "--store" not in child._option_string_actions:
            # SUPPRESS: not given here leaves the value given before the command
            child.add_argument("--store", metavar="URL", default=argparse.SUPPRESS,
                               help="the log's store (default: store.url)")
        if "--set" not in child._option_string_actions:
            child.add_argument("--set", metavar="KEY=VALUE", type=_parse_set, action=_AppendSet,
                               dest=f"set_{depth}", default=argparse.SUPPRESS,
                               help="override any setting (repeatable)")
        if "--verbose" not in child._option_string_actions:
            child.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                               help="show Spark's own output (log4j, Ivy, progress bars)")


_MARKUP = re.compile(r":[a-z]+:`~?([^`]+)`|``([^`]+)``")


def _plain(text: str | None) -> str | None:
    """Docstring markup out of a help text: ``x`` and :func:`x` read as x in a terminal."""
    return text if not text else _MARKUP.sub(lambda m: m.group(1) or m.group(2), text)


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip RST markup from every description and help text (command modules write
    them from their docstrings, which are RST)."""
    for _depth, child in [(0, parser), *_command_parsers(parser)]:
        child.description, child.epilog = _plain(child.description), _plain(child.epilog)
        for action in child._actions:
            action.help = _plain(action.help)
            for choice in getattr(action, "_choices_actions", ()):  # sub-command summaries
                choice.help = _plain(choice.help)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparklog",
        description="sparklog: a Kafka-style commit log whose brokers are a Spark application.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'sparklog COMMAND --help' for a command's options.",
    )
    parser.add_argument("--store", metavar="URL",
                        help="the log's store: a folder, file://, s3://bucket/prefix, "
                             "hdfs://namenode:8020/path or memory:// "
                             "(default: store.url, ./sparklog-data)")
    parser.add_argument("--verbose", action="store_true",
                        help="show Spark's own output: log4j, Ivy's resolution, progress bars "
                             "(hidden by default)")
    parser.add_argument("--set", metavar="KEY=VALUE", type=_parse_set, action="append",
                        default=[], help="override any setting, e.g. --set gateway.linger.ms=10")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(jobs.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"jobs.commands.{info.name}")
        module.register(sub)
    _add_common_flags(parser)
    _plain_help(parser)
    return parser


def settings_from(args: argparse.Namespace, **more: object) -> conf.Settings:
    """Settings with ``--set`` pairs, ``--store`` and command flags (``more``) applied."""
    late = sorted((k, v) for k, v in vars(args).items() if re.fullmatch(r"set_\d+", k))
    overrides: dict[str, object] = dict(args.set)
    for _depth, pairs in late:  # the outer command's pairs first, the innermost win
        overrides.update(pairs)
    overrides["store.url"] = args.store
    overrides.update(more)
    return conf.load(overrides)


def gateway_url(args: argparse.Namespace, settings: conf.Settings) -> str:
    """``--bootstrap-server``, a comma-separated list of gateways as Kafka's tools take
    it (``HOST:PORT`` means ``http://HOST:PORT``), as ``http://a:1,http://b:2``; else
    the settings' gateway. Raises ConfigError naming an entry that is not an http(s)
    URL with a host, or for a list that names none."""
    given = getattr(args, "bootstrap_server", None)
    if not given:
        return f"http://{settings.gateway.host}:{settings.gateway.port}"
    urls = [_gateway_address(item.strip(), given) for item in given.split(",") if item.strip()]
    if not urls:
        raise ConfigError("--bootstrap-server", given, "names no gateway")
    return ",".join(dict.fromkeys(urls))


def _gateway_address(item: str, given: str) -> str:
    """One entry of ``--bootstrap-server`` as a URL; raises ConfigError naming it."""
    url = item if "://" in item else f"http://{item}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as e:
        raise ConfigError("--bootstrap-server", given, f"{item!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("--bootstrap-server", given,
                          f"{item!r}: expected an http(s) URL or HOST:PORT, "
                          "e.g. http://127.0.0.1:8082")
    return url.rstrip("/")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 1
    if getattr(args, "verbose", False):
        os.environ["SPARKLOG_VERBOSE"] = "1"  # read where Spark starts (pipeline.quiet)
    try:
        return int(args.handler(args) or 0)
    except (SparklogError, OSError) as e:
        # OSError: the gateway or the store cannot be reached, a file cannot be read;
        # facts about the environment, which the message states, not a bug to trace
        print(f"sparklog: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:
        # a Spark job that failed: its real reason, in one line, not Spark's pages
        message = spark_failure_message(e)
        if message is None:
            raise
        print(f"sparklog: error: {_one_line(message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
