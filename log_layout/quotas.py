"""Client quotas, kept in the store so every gateway throttles alike.

Kafka's user quotas (``kafka-configs.sh --entity-type users``): a byte rate per
principal for producing (``producer_byte_rate``) and for fetching
(``consumer_byte_rate``), in bytes per second. An entry belongs to one user
(``User:alice``) or to every user without an entry of their own (``<default>``,
Kafka's default entity). Precedence is Kafka's: a user's own value, else the
default's, else no quota; each config is looked up on its own, so a user who set
only ``producer_byte_rate`` still gets the default ``consumer_byte_rate``. A
default quota is each user's own limit, not one shared by all.

**Storage.** One document, kept as numbered versions under ``_security/quotas/``
by ``versioned_doc`` (exclusive create per version, a lost race re-applies its
change on the winner's document, old versions pruned; a reader finds the current
one with one LIST and reads it only when its number changed)::

    _security/quotas/<version:020d>.json
    {"version": 3,
     "written_ms": 1764115200000,
     "quotas": {"User:alice": {"producer_byte_rate": 1048576},
                "<default>": {"producer_byte_rate": 10485760,
                              "consumer_byte_rate": 20971520}}}

Values are whole numbers of bytes per second, at least 1 (Kafka's throttle time is
``(rate - quota) / quota`` of the window: a quota of 0 would divide by zero). An
entity with no config left is removed. A document with a value that does not
validate (written by hand) is CorruptDocument as a whole.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

from conf.errors import ConfigError
from log_layout.acls import SECURITY_FOLDER, parse_principal
from log_layout.errors import CorruptDocument, InvalidAcl
from log_layout.store import Store
from log_layout.versioned_doc import Version, VersionedDoc, version_name

QUOTAS_FOLDER = f"{SECURITY_FOLDER}/quotas"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
CONFIGS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
#: Kafka's name of the default entity
DEFAULT = "<default>"
#: Kafka's largest quota (``Long.MAX_VALUE``)
MAX_RATE = (1 << 63) - 1


def entity(value: object) -> str:
    """``User:<name>`` or ``<default>``; raises ConfigError naming the entity."""
    if value == DEFAULT:
        return DEFAULT
    try:
        who = parse_principal(value)
    except InvalidAcl:
        who = None
    if who is None or who == "User:*":
        raise ConfigError("quota entity", value, f"expected User:<name>, or {DEFAULT} for the "
                                                 "default of every user")
    return who


def rate(key: str, value: object) -> int:
    """A quota value: a whole number of bytes per second, at least 1. Accepts a decimal
    string (the command line). Raises ConfigError naming the config ``key``."""
    if key not in CONFIGS:
        raise ConfigError(key, value, f"not a quota config: expected one of {', '.join(CONFIGS)}")
    if isinstance(value, str) and value.isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RATE:
        raise ConfigError(key, value, "expected a whole number of bytes per second, at least 1")
    return value


@dataclasses.dataclass(frozen=True)
class Quotas:
    """The store's quotas at one version (0: none ever written): entity -> config -> value."""

    version: int
    entries: Mapping[str, Mapping[str, int]]

    def quota(self, principal: str, config: str) -> int | None:
        """The ``config`` quota of ``principal``: its own, else the default's, else None."""
        own = self.entries.get(principal)
        if own is not None and config in own:
            return own[config]
        default = self.entries.get(DEFAULT)
        return None if default is None else default.get(config)


def _docs(store: Store) -> VersionedDoc:
    return VersionedDoc(store, QUOTAS_FOLDER)


def _decode(version: int, doc: Mapping[str, Any]) -> Quotas:
    path = f"{QUOTAS_FOLDER}/{version_name(version)}"
    raw = doc.get("quotas", {})
    try:
        if not isinstance(raw, dict):
            raise ConfigError("quotas", raw, "expected an object")
        entries = {entity(who): {key: rate(key, v) for key, v in configs.items()}
                   for who, configs in raw.items()}
    except (ConfigError, AttributeError) as e:
        raise CorruptDocument(path, f"a quota does not validate: {e}") from None
    return Quotas(version, {who: c for who, c in entries.items() if c})


def load(store: Store, *, known: int | None = None) -> Quotas | None:
    """The current quotas; None if their version is ``known`` (one LIST, no read). Raises
    CorruptDocument, OSError when the store cannot be reached."""
    found = _docs(store).newest(known=known)
    return None if found is None else _decode(found.number, found.doc)


def describe(store: Store) -> Quotas:
    """The current quotas. Raises CorruptDocument, OSError."""
    found = load(store)
    assert found is not None
    return found


def alter_quotas(store: Store, who: str, *, add: Mapping[str, object] | None = None,
                 delete: Iterable[str] = (), now_ms: int | None = None) -> Quotas:
    """Set the ``add`` configs of entity ``who`` and remove the ``delete`` ones
    (``kafka-configs.sh --alter --add-config/--delete-config``); returns the quotas after.
    Never loses a concurrent change (see the module doc). Raises ConfigError for a bad
    entity, config name or value (before anything is written), CorruptDocument, OSError.
    """
    who = entity(who)
    added = {key: rate(key, value) for key, value in (add or {}).items()}
    removed = set(delete)
    for key in removed:
        if key not in CONFIGS:
            raise ConfigError(key, None, f"not a quota config: expected one of "
                                         f"{', '.join(CONFIGS)}")
        if key in added:
            raise ConfigError(key, added[key], "both added and deleted")
    result: Quotas | None = None

    def change(current: Version) -> dict[str, Any] | None:
        nonlocal result
        quotas = _decode(current.number, current.doc)
        entries = {w: dict(c) for w, c in quotas.entries.items()}
        mine = {k: v for k, v in entries.get(who, {}).items() if k not in removed}
        mine.update(added)
        entries[who] = mine
        entries = {w: c for w, c in entries.items() if c}
        result = Quotas(current.number + 1, entries)
        if entries == {w: dict(c) for w, c in quotas.entries.items()}:
            result = quotas
            return None
        return {"version": current.number + 1,
                "written_ms": time.time_ns() // 1_000_000 if now_ms is None else now_ms,
                "quotas": entries}

    _docs(store).update(change)
    assert result is not None
    return result
