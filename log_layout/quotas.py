"""Client quotas, kept in the store so every gateway throttles alike.

Kafka's client quotas (``kafka-configs.sh --entity-type users`` and ``clients``): a
byte rate for producing (``producer_byte_rate``) and for fetching
(``consumer_byte_rate``), in bytes per second, and the share of request handling time
(``request_percentage``: percent of one thread, over the window; 200 is two threads'
worth). An entry belongs to an entity, named as Kafka's ``/config`` paths:

    User:alice                  users/alice
    <default>                   users/<default> (every user without its own)
    User:alice/Client:app       users/alice/clients/app
    User:alice/Client:<default> users/alice/clients/<default>
    <default>/Client:app        users/<default>/clients/app
    <default>/Client:<default>  users/<default>/clients/<default>
    Client:app                  clients/app
    Client:<default>            clients/<default>

Precedence is Kafka's (``ClientQuotaManager``), in the order above; each config is
looked up on its own, so a user who set only ``producer_byte_rate`` still gets the
default ``consumer_byte_rate``. :meth:`Quotas.find` also names whose traffic a
matched quota counts together (Kafka's metric tags): a ``<default>`` quota is each
user's or client's own limit; ``Client:app`` is one limit shared by every user of the
client id ``app``.

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
import math
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
REQUEST_PERCENTAGE = "request_percentage"
CONFIGS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
#: Kafka's name of the default entity
DEFAULT = "<default>"
CLIENT = "Client:"
#: the entity of each precedence level, from (user principal, client id), and whose
#: traffic its quota counts together: (counts by user, counts by client id)
_LEVELS = (
    (lambda u, c: f"{u}/{CLIENT}{c}", True, True),
    (lambda u, c: f"{u}/{CLIENT}{DEFAULT}", True, True),
    (lambda u, c: u, True, False),
    (lambda u, c: f"{DEFAULT}/{CLIENT}{c}", True, True),
    (lambda u, c: f"{DEFAULT}/{CLIENT}{DEFAULT}", True, True),
    (lambda u, c: DEFAULT, True, False),
    (lambda u, c: f"{CLIENT}{c}", False, True),
    (lambda u, c: f"{CLIENT}{DEFAULT}", False, True),
)
#: Kafka's largest quota (``Long.MAX_VALUE``)
MAX_RATE = (1 << 63) - 1


def entity(value: object) -> str:
    """One of the module doc's entity names; raises ConfigError naming the entity."""
    expected = (f"expected User:<name> or {DEFAULT}, Client:<client id> or "
                f"Client:{DEFAULT}, or a user and a client joined by '/'")
    if not isinstance(value, str):
        raise ConfigError("quota entity", value, expected)
    user, sep, client = value.partition(f"/{CLIENT}")
    if not sep and value.startswith(CLIENT):
        user, client = "", value[len(CLIENT):]
    if sep or not user:
        if not client or len(client) > 255 or any(ord(ch) < 32 for ch in client):
            raise ConfigError("quota entity", value, expected)
        client = f"{CLIENT}{client}"
    if not user:
        return client
    if user != DEFAULT:
        try:
            who = parse_principal(user)
        except InvalidAcl:
            who = None
        if who is None or who == "User:*":
            raise ConfigError("quota entity", value, expected)
        user = who
    return f"{user}/{client}" if sep else user


def rate(key: str, value: object) -> int | float:
    """A quota value: a whole number of bytes per second, at least 1; for
    ``request_percentage`` a number above 0. Accepts a decimal string (the command
    line). Raises ConfigError naming the config ``key``."""
    if key not in CONFIGS:
        raise ConfigError(key, value, f"not a quota config: expected one of {', '.join(CONFIGS)}")
    if key == REQUEST_PERCENTAGE:
        try:
            number = float(value) if isinstance(value, (str, int, float)) \
                and not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None or not math.isfinite(number) or not 0 < number <= MAX_RATE:
            raise ConfigError(key, value, "expected a percentage above 0 (of one thread)")
        return int(number) if number == int(number) else number
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)  # the quota APIs carry every value as a double
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

    def quota(self, principal: str, config: str, client_id: str = "") -> int | float | None:
        """The ``config`` quota of ``principal`` with ``client_id`` (Kafka's precedence,
        module doc), None if none applies."""
        found = self.find(principal, client_id, config)
        return None if found is None else found[0]

    def find(self, principal: str, client_id: str, config: str
             ) -> tuple[int | float, tuple[str, str]] | None:
        """(the quota, whose traffic it counts together: (principal or "", client id or
        "")) of the most specific entity with ``config`` (module doc), None if none."""
        for name, by_user, by_client in _LEVELS:
            values = self.entries.get(name(principal, client_id))
            if values is not None and config in values:
                return values[config], (principal if by_user else "",
                                        client_id if by_client else "")
        return None


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
