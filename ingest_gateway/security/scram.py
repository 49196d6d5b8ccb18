"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ``ScramSaslServer``.

Credentials live in the store (``log_layout.scram``: salt, iterations, StoredKey,
ServerKey per user and mechanism), written by ``sparklog users`` or Kafka's
AlterUserScramCredentials. :func:`credential` derives one from a password as Kafka's
``ScramFormatter`` does (PBKDF2-HMAC over the password's UTF-8 bytes, no SASLprep, a
random 64-byte salt); :func:`from_salted_password` from what AlterUserScramCredentials
carries (the client salts the password; the server never sees it).

The exchange (:class:`ScramExchange`) is scramp's server (a well-kept RFC 5802
implementation: message grammar, ``=2C``/``=3D`` user names, nonce and proof checks,
constant-time comparison) over the stored keys:

1. client-first ``n,,n=<user>,r=<client nonce>``: answered with server-first
   ``r=<client nonce + server nonce>,s=<salt>,i=<iterations>``;
2. client-final ``c=biws,r=<nonce>,p=<proof>``: the nonce must be the combined one and
   the proof must match StoredKey; answered with server-final ``v=<server signature>``.

A user without a credential for the mechanism gets a made-up salt and iteration count
(a keyed hash of the name, stable across attempts) and fails at the proof like a wrong
password, so the exchange does not tell which users exist (RFC 5802 section 9). Channel
binding (``-PLUS``) and Kafka's ``tokenauth`` extension (delegation tokens) are not
offered; a client-first message asking for either fails. Every failure raises
NotAuthenticated with a fixed reason; nothing the client sent is repeated.

:class:`ScramUsers` holds the store's credentials for a listener: read when first
needed and again when older than ``authorizer.refresh.ms`` (one LIST; the document is
read only when its version changed), and at once after this gateway changed them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import scramp
from scramp.utils import ScramException

from ingest_gateway.errors import NotAuthenticated
from log_layout import scram as scram_format
from log_layout.scram import MAX_SALT_BYTES, MECHANISMS, MIN_ITERATIONS, Credential, Credentials

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's ScramFormatter salt size
SALT_BYTES = 64


def keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of ``salted_password`` (RFC 5802 section 3)."""
    name = _HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return hashlib.new(name, client_key).digest(), server_key


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 over the password's UTF-8 bytes, as Kafka's client
    computes it (no SASLprep: Kafka's Java client does none)."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode("utf-8"), salt, iterations)


def from_salted_password(mechanism: str, salted: bytes, salt: bytes,
                         iterations: int) -> Credential:
    """The stored credential of an AlterUserScramCredentials upsertion. Raises ValueError
    for an unknown mechanism or out-of-bounds values (``log_layout.scram.check``)."""
    if mechanism not in _HASHES:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    if not 1 <= len(salted) <= MAX_SALT_BYTES:  # Kafka takes any length: HMAC keys
        raise ValueError(f"a salted password is 1 to {MAX_SALT_BYTES} bytes")
    stored_key, server_key = keys(mechanism, salted)
    credential = Credential(bytes(salt), iterations, stored_key, server_key)
    scram_format.check(mechanism, credential)
    return credential


def credential(mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
               salt: bytes | None = None) -> Credential:
    """A new credential for ``password`` (a random salt unless given). Raises ValueError
    for an empty password, an unknown mechanism or iterations out of bounds."""
    if not password:
        raise ValueError("a password cannot be empty")
    if mechanism not in _HASHES:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}: expected one of "
                         f"{', '.join(_HASHES)}")
    scram_format.check(mechanism, Credential(b"x", iterations, b"\0" * MECHANISMS[mechanism][1],
                                             b"\0" * MECHANISMS[mechanism][1]))
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return from_salted_password(mechanism, salted_password(mechanism, password, salt,
                                                           iterations), salt, iterations)


class ScramUsers:
    """The store's SCRAM credentials, read again when older than ``refresh_ms`` (module
    doc). ``get`` does blocking store I/O when a refresh is due: call it off the event
    loop. ``clock`` is in seconds."""

    def __init__(self, store: Any, refresh_ms: int, *,
                 clock: Callable[[], float] = time.monotonic):
        self._store, self._refresh_s, self._clock = store, refresh_ms / 1000, clock
        self._credentials: Credentials | None = None
        self._read_at = -float("inf")
        self._lock = threading.Lock()
        #: keys the made-up credentials of unknown users (per process)
        self._secret = secrets.token_bytes(32)

    def invalidate(self) -> None:
        """Read the store again at the next lookup (this gateway changed it)."""
        self._read_at = -float("inf")

    def current(self) -> Credentials:
        """The credentials, read again if due. Raises CorruptDocument, OSError (the first
        read only: later failures keep the credentials loaded)."""
        with self._lock:
            if self._clock() - self._read_at >= self._refresh_s:
                known = None if self._credentials is None else self._credentials.version
                try:
                    found = scram_format.load(self._store, known=known)
                except Exception:
                    if self._credentials is None:
                        raise
                    found = None  # a store blip keeps the credentials loaded
                if found is not None:
                    self._credentials = found
                self._read_at = self._clock()
            assert self._credentials is not None
            return self._credentials

    def lookup(self, user: str, mechanism: str) -> tuple[bytes, bytes, bytes, int]:
        """(salt, StoredKey, ServerKey, iterations) of ``user`` for ``mechanism``; for an
        unknown user made-up values that no proof matches (module doc)."""
        found = self.current().get(user, mechanism)
        if found is not None:
            return found.salt, found.stored_key, found.server_key, found.iterations
        digest = hmac.new(self._secret, f"{mechanism}\0{user}".encode("utf-8", "replace"),
                          "sha512").digest()
        size = MECHANISMS[mechanism][1]
        # random keys: no proof can match, whatever the salt
        return digest[:SALT_BYTES], os.urandom(size), os.urandom(size), MIN_ITERATIONS


class ScramExchange:
    """One SCRAM login in progress (module doc): ``step(token)`` twice. ``users`` is a
    :class:`ScramUsers`; steps do no store I/O except through it."""

    def __init__(self, mechanism: str, users: ScramUsers):
        self.mechanism = mechanism
        self._user: str | None = None
        self._failed = False

        def auth(user: str) -> tuple[bytes, bytes, bytes, int]:
            self._user = user
            return users.lookup(user, mechanism)

        self._server = scramp.ScramMechanism(mechanism).make_server(auth)
        self._stage = 0

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        """(the server's answer, the principal once proven, else None). Raises
        NotAuthenticated (malformed message, wrong nonce or proof, a third step)."""
        if self._failed or self._stage >= 2:
            raise NotAuthenticated("the SCRAM exchange is over")
        try:
            text = token.decode("utf-8")
            if self._stage == 0:
                self._server.set_client_first(text)
                self._stage = 1
                return self._server.get_server_first().encode("utf-8"), None
            self._server.set_client_final(text)
            final = self._server.get_server_final()
            self._stage = 2
        except (ScramException, UnicodeDecodeError, ValueError, TypeError, IndexError,
                KeyError, AttributeError) as e:
            self._failed = True
            reason = "invalid credentials" if "proof" in str(e) or "keys" in str(e) \
                else "a malformed SCRAM message"
            raise NotAuthenticated(f"{reason} with SASL mechanism {self.mechanism}") from None
        assert self._user is not None
        return final.encode("utf-8"), f"User:{self._user}"
