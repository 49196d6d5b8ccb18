"""Numbers a client writes in a path or a query string, parsed strictly.

Python's ``int()`` is lenient in ways a wire protocol must not be: it accepts
surrounding whitespace (``" 1"``), a plus sign (``"+1"``), digit-group
underscores (``"1_0"``) and any Unicode decimal digit (``"١"``, Arabic-Indic
one). Two spellings of one number would be two cache keys, two log lines that
do not grep alike, and a way past a proxy's filter. Here a number is ASCII
only: an optional ``-`` then 1 to 40 digits, matched in full.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

from ingest_gateway.errors import BadRequest
from log_layout import UnknownPartition

#: the whole text: re.fullmatch, never match (``$`` would let a trailing newline by);
#: 40 digits are more than any bound here needs, and keep int() of a huge string off the loop
_INT = re.compile(r"-?[0-9]{1,40}")


def parse_int(raw: str) -> int:
    """``raw`` as an int if it is ``-?[0-9]{1,40}`` in full, ASCII digits only.

    Raises ValueError otherwise (whitespace, ``+``, ``_``, non-ASCII digits, empty).
    """
    if not isinstance(raw, str) or _INT.fullmatch(raw) is None:
        raise ValueError(f"not a plain decimal integer: {raw!r}")
    return int(raw)


def int_param(name: str, raw: str | None, *, lo: int, hi: int) -> int | None:
    """The number parameter ``name`` (None if absent) within ``lo``..``hi``.

    Raises BadRequest naming the parameter and what was given.
    """
    if raw is None:
        return None
    try:
        value = parse_int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer (ASCII digits), not {raw!r}") from None
    if not lo <= value <= hi:
        raise BadRequest(f"{name} must be between {lo} and {hi}, not {value}")
    return value


def partition_param(topic: str, raw: str) -> int:
    """A partition number from a path; raises UnknownPartition for anything else,
    as Kafka answers for a partition it does not have."""
    try:
        value = parse_int(raw)
    except ValueError:
        raise UnknownPartition(topic, raw, 0) from None
    if value < 0:
        raise UnknownPartition(topic, value, 0)
    return value


def query_dict(raw: str) -> dict[str, str]:
    """The query string ``raw`` as a dict; a parameter given twice is a BadRequest.

    (``?acks=0&acks=all``: which one wins differs between proxies and servers,
    so a request that says two things is refused rather than half-obeyed.)
    """
    out: dict[str, str] = {}
    for name, value in parse_qsl(raw, keep_blank_values=True):
        if name in out:
            raise BadRequest(f"query parameter {name!r} is given more than once")
        out[name] = value
    return out


def query_param(request, name: str) -> str | None:
    """The query parameter ``name`` of a Starlette ``request`` (None if absent).

    Raises BadRequest when it is given more than once.
    """
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise BadRequest(f"query parameter {name!r} is given more than once")
    return values[0] if values else None
