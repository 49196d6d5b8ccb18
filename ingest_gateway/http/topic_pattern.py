"""``topic_pattern``: a REST consumer instance's regular expression over topic names,
checked before it is ever run.

Kafka matches a pattern subscription against every topic name
(``Pattern.matcher(topic).matches()``, a whole-name match); here too, at every
sync of the instance. Python's ``re`` backtracks, so a client's pattern could
make one match take exponential time and hold a gateway thread: ``(a+)+$``,
``((a*))*b``, ``(a|aa)+$`` against a name of a hundred ``a``. A pattern is refused
(BadRequest, 400) unless, in its parsed form, no repetition of more than one
occurrence holds another such repetition or an alternation, and it uses no
backreference, the shapes that backtrack without bound; and it has at most
``MAX_REPEATS`` repetitions of more than one occurrence in all, since each one
multiplies the work by up to a name's length (measured on a 249-character name:
three take 3 ms a name, four 0.2 to 0.5 s, five about a minute). That refuses a
few harmless patterns too (``(ab|cd)*``); a pattern subscription is usually a
prefix (``clicks-.*``), and those pass. At most ``MAX_PATTERN`` characters.
"""

from __future__ import annotations

import re
from typing import Any

from ingest_gateway.errors import BadRequest

try:  # the parser ``re`` itself uses (3.11+ names it re._parser)
    from re import _constants as _c
    from re import _parser as _sre
except ImportError:  # pragma: no cover - Python before 3.11
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _sre  # type: ignore[no-redef]

MAX_PATTERN = 1000
MAX_REPEATS = 3
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}


def _backtracks(items: Any, repeated: bool) -> bool:
    """Whether the parsed ``items`` hold a repetition or alternation under a repetition
    (``repeated``: we are inside one), or a backreference."""
    for op, av in items:
        if op in _REPEATS:
            _lo, hi, sub = av
            many = hi == _c.MAXREPEAT or hi > 1
            if (repeated and many) or _backtracks(sub, repeated or many):
                return True
        elif op is _c.SUBPATTERN:
            if _backtracks(av[-1], repeated):
                return True
        elif op is _c.BRANCH:
            if repeated or any(_backtracks(b, repeated) for b in av[1]):
                return True
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            if _backtracks(av[1], repeated):
                return True
        elif op in (_c.GROUPREF, getattr(_c, "GROUPREF_EXISTS", _c.GROUPREF)):
            return True
    return False


def _repeats(items: Any) -> int:
    """How many repetitions of more than one occurrence the parsed ``items`` hold."""
    n = 0
    for op, av in items:
        if op in _REPEATS:
            n += (av[1] == _c.MAXREPEAT or av[1] > 1) + _repeats(av[2])
        elif op is _c.SUBPATTERN:
            n += _repeats(av[-1])
        elif op is _c.BRANCH:
            n += sum(_repeats(b) for b in av[1])
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            n += _repeats(av[1])
    return n


def compile_topic_pattern(raw: Any) -> re.Pattern[str]:
    """``raw`` compiled; raises BadRequest for a non-string, an empty or too long one, one
    that is not a regular expression, or one that could backtrack without bound."""
    if not isinstance(raw, str) or not 0 < len(raw) <= MAX_PATTERN:
        raise BadRequest(f"topic_pattern must be a regular expression of 1 to {MAX_PATTERN} "
                         "characters")
    try:
        parsed = _sre.parse(raw)
        pattern = re.compile(raw)
    except (re.error, RecursionError, OverflowError) as e:
        raise BadRequest(f"topic_pattern {raw[:100]!r} is not a regular expression: {e}") \
            from None
    if _backtracks(parsed, False):
        raise BadRequest(f"topic_pattern {raw[:100]!r} repeats a repetition or an "
                         "alternation, or uses a backreference (catastrophic backtracking); "
                         "write it without")
    if _repeats(parsed) > MAX_REPEATS:
        raise BadRequest(f"topic_pattern {raw[:100]!r} has more than {MAX_REPEATS} "
                         "repetitions (*, +, {n,m}): each multiplies the matching work")
    return pattern
