"""Durations: the one grammar for every duration sparklog reads.

A duration is ASCII digits, then optionally a unit (case-insensitive, spaces
allowed around it): ``500ms``, ``10s``, ``15m`` (or ``15min``), ``1h``, ``2d``.
A bare number is **milliseconds**, as in Spark's ``timeStringAsMs`` and
Kafka's ``*.ms`` keys, so ``5`` means 5 ms wherever a duration is read: the
settings' ``*.ms`` keys, ``sparklog maintain --every``, ``sparklog materialize
--trigger`` and the source option ``maxTriggerDelay``. No sign, fraction,
``_`` separator or non-ASCII digit is accepted (Python's ``int()`` would take
``+1``, ``1_0`` and ``١``).
"""

from __future__ import annotations

import re
from typing import Any

from conf.errors import ConfigError

#: unit -> milliseconds ("" = a bare number)
UNITS_MS = {"": 1, "ms": 1, "s": 1_000, "m": 60_000, "min": 60_000, "h": 3_600_000,
            "d": 86_400_000}
#: the largest duration: what a Java long (Spark, Kafka) holds
MAX_MS = 2**63 - 1
# at most 19 digits: enough for MAX_MS, and int() of a huge digit string is refused anyway
_DURATION = re.compile(r"\s*(-?)([0-9]{1,19})\s*([a-z]*)\s*", re.ASCII | re.IGNORECASE)
EXAMPLES = "500ms, 10s, 15m, 1h or 2d (a bare number is milliseconds)"


def parse_duration_ms(raw: Any, *, key: str, minimum: int = 0) -> int:
    """``raw`` (text, or an int of milliseconds) in milliseconds.

    Raises ConfigError naming ``key`` and ``raw`` if it is not a duration of
    this grammar, is below ``minimum`` ms or above :data:`MAX_MS`.
    """
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        match = _DURATION.fullmatch(raw) if isinstance(raw, str) else None
        if match is None or match.group(3).lower() not in UNITS_MS:
            raise ConfigError(key, raw, f"expected a duration such as {EXAMPLES}")
        sign, digits, unit = match.groups()
        value = int(digits) * UNITS_MS[unit.lower()] * (-1 if sign else 1)
    if value < minimum:
        raise ConfigError(key, raw, "must not be negative" if minimum == 0
                          else f"must be at least {minimum} ms")
    if value > MAX_MS:
        raise ConfigError(key, raw, f"must be at most {MAX_MS} ms")
    return value
