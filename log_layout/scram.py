"""SCRAM credentials (RFC 5802), kept in the store so every gateway logs the same users in.

Kafka's SCRAM users (``kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[...]'
--entity-type users``, or the AlterUserScramCredentials API): per user and mechanism
(``SCRAM-SHA-256``, ``SCRAM-SHA-512``) the salt, the iteration count and the two keys
the server needs: ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``. The password and the salted
password are never kept, so a copy of this document does not log anyone in (it gives
an offline guess per password and salt, ``iterations`` hashes each).

**Storage.** One document, kept as numbered versions under ``_security/scram/`` by
``versioned_doc`` (exclusive create per version, a lost race re-applies its change on
the winner's document, old versions pruned; a reader finds the current one with one
LIST and reads it only when its number changed)::

    _security/scram/<version:020d>.json
    {"version": 2,
     "written_ms": 1764115200000,
     "users": {"alice": {"SCRAM-SHA-256": {"salt": "<base64>", "iterations": 4096,
                                           "stored_key": "<base64>",
                                           "server_key": "<base64>"}}}}

User names are as Kafka takes them (any non-empty string; ``,`` and ``=`` are escaped
only on the wire, by the SASL exchange). Iterations are Kafka's bounds: 4096 to 16384.
A document whose entries do not validate (written by hand) is CorruptDocument as a
whole.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

from log_layout.acls import SECURITY_FOLDER
from log_layout.errors import CorruptDocument
from log_layout.store import Store
from log_layout.versioned_doc import Version, VersionedDoc, version_name

SCRAM_FOLDER = f"{SECURITY_FOLDER}/scram"
#: Kafka's SCRAM mechanisms: name -> (type byte of the admin APIs, digest size in bytes)
MECHANISMS = {"SCRAM-SHA-256": (1, 32), "SCRAM-SHA-512": (2, 64)}
#: Kafka's ScramMechanism minIterations and ScramControlManager.MAX_ITERATIONS
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
#: a salt's size bounds (Kafka generates 64 bytes; RFC 5802 names none)
MAX_SALT_BYTES = 1024


@dataclasses.dataclass(frozen=True)
class Credential:
    """One user's credential for one mechanism (module doc)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # keys are secrets: never printed or logged
        return f"Credential(iterations={self.iterations}, salt=<hidden>, keys=<hidden>)"


@dataclasses.dataclass(frozen=True)
class Credentials:
    """The store's credentials at one version (0: none ever written): user -> mechanism ->
    Credential."""

    version: int
    users: Mapping[str, Mapping[str, Credential]]

    def get(self, user: str, mechanism: str) -> Credential | None:
        return self.users.get(user, {}).get(mechanism)


def check(mechanism: str, credential: Credential) -> None:
    """Raises ValueError saying what is wrong with ``credential`` for ``mechanism``."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}: expected one of "
                         f"{', '.join(MECHANISMS)}")
    size = MECHANISMS[mechanism][1]
    if isinstance(credential.iterations, bool) or not isinstance(credential.iterations, int) \
            or not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}, not "
                         f"{credential.iterations!r}")
    if not 1 <= len(credential.salt) <= MAX_SALT_BYTES:
        raise ValueError(f"a salt is 1 to {MAX_SALT_BYTES} bytes")
    if len(credential.stored_key) != size or len(credential.server_key) != size:
        raise ValueError(f"{mechanism} keys are {size} bytes")


def _encode(credential: Credential) -> dict[str, Any]:
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return {"salt": b64(credential.salt), "iterations": credential.iterations,
            "stored_key": b64(credential.stored_key), "server_key": b64(credential.server_key)}


def _decode_one(raw: Any) -> Credential:
    unb64 = lambda s: base64.b64decode(s.encode("ascii"), validate=True)  # noqa: E731
    return Credential(unb64(raw["salt"]), raw["iterations"], unb64(raw["stored_key"]),
                      unb64(raw["server_key"]))


def _decode(version: int, doc: Mapping[str, Any]) -> Credentials:
    path = f"{SCRAM_FOLDER}/{version_name(version)}"
    raw = doc.get("users", {})
    try:
        users = {}
        for user, mechanisms in raw.items():
            if not isinstance(user, str) or not user:
                raise ValueError("a user name is a non-empty string")
            users[user] = {}
            for mechanism, value in mechanisms.items():
                credential = _decode_one(value)
                check(mechanism, credential)
                users[user][mechanism] = credential
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error,
            UnicodeEncodeError) as e:
        raise CorruptDocument(path, f"a SCRAM credential does not validate: {e}") from None
    return Credentials(version, {u: m for u, m in users.items() if m})


def _docs(store: Store) -> VersionedDoc:
    return VersionedDoc(store, SCRAM_FOLDER)


def load(store: Store, *, known: int | None = None) -> Credentials | None:
    """The current credentials; None if their version is ``known`` (one LIST, no read).
    Raises CorruptDocument, OSError when the store cannot be reached."""
    found = _docs(store).newest(known=known)
    return None if found is None else _decode(found.number, found.doc)


def describe(store: Store) -> Credentials:
    """The current credentials. Raises CorruptDocument, OSError."""
    found = load(store)
    assert found is not None
    return found


def alter(store: Store, *, upsert: Mapping[tuple[str, str], Credential] | None = None,
          delete: Iterable[tuple[str, str]] = (), now_ms: int | None = None
          ) -> tuple[Credentials, set[tuple[str, str]]]:
    """Set the ``upsert`` credentials and remove the ``delete`` ones, each keyed by
    (user, mechanism), in one version; returns (the credentials after, the deletions
    that found nothing to delete, which change nothing). Never loses a concurrent
    change. Raises ValueError for a bad user, mechanism or credential (before anything
    is written), CorruptDocument, OSError."""
    upsert = dict(upsert or {})
    delete = set(delete)
    for (user, mechanism), credential in upsert.items():
        if not isinstance(user, str) or not user:
            raise ValueError("a user name is a non-empty string")
        check(mechanism, credential)
    for user, mechanism in delete:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    result: Credentials | None = None
    missing: set[tuple[str, str]] = set()

    def change(current: Version) -> dict[str, Any] | None:
        nonlocal result, missing
        found = _decode(current.number, current.doc)
        users = {u: dict(m) for u, m in found.users.items()}
        missing = {key for key in delete if key[1] not in users.get(key[0], {})}
        for user, mechanism in delete - missing:
            del users[user][mechanism]
        for (user, mechanism), credential in upsert.items():
            users.setdefault(user, {})[mechanism] = credential
        users = {u: m for u, m in users.items() if m}
        if not upsert and not delete - missing:
            result = found
            return None
        result = Credentials(current.number + 1, users)
        return {"version": current.number + 1,
                "written_ms": time.time_ns() // 1_000_000 if now_ms is None else now_ms,
                "users": {u: {m: _encode(c) for m, c in ms.items()} for u, ms in users.items()}}

    _docs(store).update(change)
    assert result is not None
    return result, missing
