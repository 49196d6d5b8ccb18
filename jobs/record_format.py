"""How ``sparklog consume`` prints a record: the default tab-separated line, a kcat
format string (``-f``), or kafka-console-consumer's ``--property print.*`` layout.

**Format strings** (kcat ``-f``): ``%t`` topic, ``%p`` partition, ``%o`` offset,
``%k`` key, ``%v`` or ``%s`` value, ``%K`` / ``%S`` key / value length in bytes (-1
for null), ``%T`` timestamp, ``%h`` headers as ``name=value,...``, ``%%`` a percent
sign; ``\\n``, ``\\t``, ``\\r`` and ``\\\\`` are escapes. A format without ``\\n``
gets one at the end (kcat prints none: a forgotten ``\\n`` gave one long line).

**Properties** (kafka-console-consumer): ``print.timestamp``, ``print.partition``,
``print.offset``, ``print.headers``, ``print.key``, ``print.value`` (``true`` /
``false``), ``key.separator`` (default tab), ``line.separator`` (default newline),
``headers.separator`` (``,``), ``headers.key.separator`` (``:``),
``null.literal`` (``null``). The fields print in Kafka's order: ``CreateTime:T``,
``Partition:P``, ``Offset:O``, the headers (``NO_HEADERS`` when none), key, value.

Timestamps print as ISO 8601 in UTC (``--time-format iso``, the default) or as ms
since the epoch (``--time-format ms``, what kcat and Kafka print).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from conf.errors import ConfigError

_TOKEN = re.compile(r"%(.)|\\(.)|%$|\\$", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
_BOOL_PROPS = ("print.timestamp", "print.partition", "print.offset", "print.headers",
               "print.key", "print.value")
_TEXT_PROPS = {"key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
               "headers.key.separator": ":", "null.literal": "null"}

Field = Callable[[Any], str]


def text(b: bytes | None, null: str = "") -> str:
    return null if b is None else b.decode("utf-8", "replace")


def _time(iso: bool) -> Callable[[int], str]:
    from jobs.cli_output import iso_ms

    return iso_ms if iso else str


def compile_format(fmt: str, *, iso: bool) -> Callable[[Any], str]:
    """A kcat format string as a function of a record. Raises ConfigError naming
    ``--format`` for an unknown ``%x`` or ``\\x`` or a dangling ``%`` / ``\\``."""
    ts = _time(iso)
    fields: dict[str, Field] = {
        "t": lambda r: r.topic, "p": lambda r: str(r.partition), "o": lambda r: str(r.offset),
        "k": lambda r: text(r.key), "v": lambda r: text(r.value), "s": lambda r: text(r.value),
        "K": lambda r: str(-1 if r.key is None else len(r.key)),
        "S": lambda r: str(-1 if r.value is None else len(r.value)),
        "T": lambda r: ts(r.timestamp),
        "h": lambda r: ",".join(f"{k}={text(v)}" for k, v in r.headers or ()),
        "%": lambda r: "%"}
    parts: list[str | Field] = []
    pos = 0
    for m in _TOKEN.finditer(fmt):
        parts.append(fmt[pos:m.start()])
        pos = m.end()
        pct, esc = m.group(1), m.group(2)
        if pct is not None and pct in fields:
            parts.append(fields[pct])
        elif esc is not None and esc in _ESCAPES:
            parts.append(_ESCAPES[esc])
        else:
            raise ConfigError("--format", fmt, f"{m.group(0)!r} is not a format token "
                                               "(%t %p %o %k %v %s %K %S %T %h %% \\n \\t)")
    parts.append(fmt[pos:])
    if not any(p == "\n" for p in parts) and "\n" not in fmt:
        parts.append("\n")
    return lambda r: "".join(p if isinstance(p, str) else p(r) for p in parts)


def parse_properties(pairs: Sequence[str]) -> dict[str, str]:
    """``--property KEY=VALUE`` pairs, checked. Raises ConfigError naming the property."""
    props: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("--property", pair, "expected KEY=VALUE, e.g. print.key=true")
        if key in _BOOL_PROPS:
            if value.strip().lower() not in ("true", "false"):
                raise ConfigError(key, value, "expected true or false")
            value = value.strip().lower()
        elif key not in _TEXT_PROPS:
            raise ConfigError("--property", pair, "unknown property; known: "
                              + ", ".join((*_BOOL_PROPS, *_TEXT_PROPS)))
        props[key] = value
    return props


def compile_properties(props: Mapping[str, str], *, iso: bool) -> Callable[[Any], str]:
    """kafka-console-consumer's layout for ``props`` (see the module docstring)."""
    ts = _time(iso)
    on = {k: props.get(k, "true" if k == "print.value" else "false") == "true"
          for k in _BOOL_PROPS}
    sep, end, hsep, hkey, null = (props.get(k, d) for k, d in _TEXT_PROPS.items())

    def line(r) -> str:
        cells = []
        if on["print.timestamp"]:
            cells.append(f"CreateTime:{ts(r.timestamp)}")
        if on["print.partition"]:
            cells.append(f"Partition:{r.partition}")
        if on["print.offset"]:
            cells.append(f"Offset:{r.offset}")
        if on["print.headers"]:
            cells.append(hsep.join(f"{k}{hkey}{text(v, null)}" for k, v in r.headers or ())
                         or "NO_HEADERS")
        if on["print.key"]:
            cells.append(text(r.key, null))
        if on["print.value"]:
            cells.append(text(r.value, null))
        return sep.join(cells) + end

    return line


def default_line(*, iso: bool) -> Callable[[Any], str]:
    """``partition offset timestamp key value``, tab-separated (null value: ``null``)."""
    ts = _time(iso)
    return lambda r: (f"{r.partition}\t{r.offset}\t{ts(r.timestamp)}\t{text(r.key)}\t"
                      f"{text(r.value, 'null')}\n")


def json_line(r) -> str:
    import json

    return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                       "timestamp": r.timestamp, "key": text(r.key, None),
                       "value": text(r.value, None),
                       "headers": [[k, text(v, None)] for k, v in r.headers or ()]}) + "\n"
