"""Who a request comes from: HTTP Basic, a JWT bearer token, or the client certificate.

``authentication.method`` lists the methods a client may use (``basic``, ``bearer``,
``mtls``, ``scram``; empty: none, every request is ``User:ANONYMOUS``). The principal is Kafka's
``User:<name>``. Which method a request uses: an ``Authorization`` header decides
(``Basic`` or ``Bearer``, RFC 9110's case-insensitive scheme); without one, the client
certificate if ``mtls`` is on and one was verified; else 401 naming the schemes.

basic (RFC 7617)
    ``base64(name ":" password)`` in UTF-8, checked against the argon2id password file
    (``security.passwords``). Argon2 costs ~50 ms a check *by design*, so a success is
    remembered in memory, keyed by an HMAC (a random key made per process) of the
    header's credentials, never the credentials themselves; a produce request of a
    known client pays one HMAC and a dict lookup. At most :data:`CACHE_SIZE` entries
    (the oldest go first). The file's size, mtime and inode are looked at at most once
    a second; when they change it is read again and every remembered success is
    forgotten (a changed or removed password stops working within a second). A
    failure is never remembered. An unknown name costs the same 50 ms as a wrong
    password (a check against a dummy hash), so timing does not tell which names exist.
bearer (RFC 6750)
    a JWT checked with PyJWT against ``jwt.public.key.file`` (a PEM public key or
    certificate) with the algorithms of ``jwt.algorithms`` that fit the key's type
    (``none`` and the HS* shared-secret algorithms are refused at start-up: a public
    key used as an HMAC secret would let anyone sign), ``iss``/``aud`` when
    ``jwt.issuer``/``jwt.audience`` are set; ``exp`` is required, ``exp``, ``nbf`` and
    ``iat`` are checked with :data:`LEEWAY_S` of clock skew. The user is the claim
    ``jwt.principal.claim`` (a non-empty string).
scram
    SASL SCRAM-SHA-256/512 on the Kafka listener only (``kafka.sasl``, credentials in
    the store: ``security.scram``); HTTP has no SCRAM scheme, so an HTTP client needs
    another method beside it.
mtls
    the verified client certificate's subject (``scope["sparklog.peer_subject"]``,
    ``security.tls``): its most specific CN (``mtls.principal=CN``) or the whole RFC
    4514 DN (``dn``, as Kafka's default principal mapping). Needs an https listener
    with ``ssl.client.auth`` requested or required.

A refusal raises ``NotAuthenticated(reason, realm, schemes)``; the reason is one of a
few fixed sentences and never holds a password, a token or a name from the request.
Hostile input (bad base64, no colon, not UTF-8, control characters, several
Authorization headers, one over :data:`MAX_HEADER_BYTES`) is a 401, never a 500.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import dataclasses
import hmac
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from conf.errors import ConfigError
from ingest_gateway.errors import NotAuthenticated
from ingest_gateway.security import ANONYMOUS, passwords
from ingest_gateway.security.bearer import BearerVerifier
from ingest_gateway.security.tls import PEER_SUBJECT

METHODS = ("basic", "bearer", "mtls", "scram")
#: the scope key the principal is left under for the routes (the guard's)
PRINCIPAL = "sparklog.principal"
#: remembered Basic successes, at most
CACHE_SIZE = 4096
#: an Authorization header longer than this is refused unread
MAX_HEADER_BYTES = 16 << 10
#: the password file is looked at (stat) at most this often
RECHECK_S = 1.0
#: clock skew allowed on a token's exp, nbf and iat
LEEWAY_S = 30

_log = logging.getLogger("sparklog.auth")
_NO_CREDENTIALS = "no credentials: send an Authorization header or a client certificate"


def host_of(scope: Any) -> str:
    """The client's address as ACLs name hosts (``*`` when the server does not know it)."""
    client = scope.get("client")
    return client[0] if client else "*"


def principal_of(scope: Any) -> str:
    """The principal an earlier :meth:`Authenticator.authenticate` left in ``scope``
    (``User:ANONYMOUS`` if none did): a dict lookup, for the hot path."""
    return scope.get(PRINCIPAL, ANONYMOUS)


def _header(scope: Any, name: bytes) -> bytes | None:
    """The one ``name`` header of the request (None if absent); NotAuthenticated if it
    is given more than once or is over MAX_HEADER_BYTES."""
    found = None
    for key, value in scope.get("headers") or ():
        if key == name:
            if found is not None:
                raise NotAuthenticated("more than one Authorization header")
            found = value
    if found is not None and len(found) > MAX_HEADER_BYTES:
        raise NotAuthenticated(f"the Authorization header is over {MAX_HEADER_BYTES} bytes")
    return found


def _user(name: str) -> str:
    return f"User:{name}"


class PasswordFile:
    """The Basic users (name -> argon2id hash) of a password file, read again when it
    changes (see the module doc), with the cache of successful checks."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.monotonic):
        self.path, self.clock = path, clock
        self._key = secrets.token_bytes(32)  # per process: the cache's keys mean nothing outside
        self._ok: dict[bytes, str] = {}  # HMAC of the credentials -> principal
        # the event loop reads and clears the cache, verifying threads fill it
        self._lock = threading.Lock()
        #: the file's version: a check that began before a change is not remembered after it
        self.generation = 0
        self._stamp: tuple[int, int, int] | None = None
        self._users: dict[str, str] = {}
        self._checked = float("-inf")
        self._dummy = passwords.hash_password(secrets.token_urlsafe(16))
        self._reload(self._stat())  # a missing or malformed file fails at start-up

    def _stat(self) -> tuple[int, int, int]:
        st = os.stat(self.path)
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _reload(self, stamp: tuple[int, int, int]) -> None:
        users = passwords.read(self.path)
        self._forget(users, stamp)

    def _forget(self, users: dict[str, str], stamp: tuple[int, int, int] | None) -> None:
        with self._lock:
            self._users, self._stamp = users, stamp
            self.generation += 1
            self._ok.clear()

    def _fresh(self) -> None:
        """Read the file again if it changed (looked at at most once a RECHECK_S). A file
        that is gone or malformed now lets nobody in (fail closed) until it is fixed."""
        now = self.clock()
        if now - self._checked < RECHECK_S:
            return
        self._checked = now
        try:
            stamp = self._stat()
            if stamp != self._stamp:
                self._reload(stamp)
        except (OSError, ConfigError) as e:
            was_good = self._stamp is not None  # said once, not every second it stays broken
            self._forget({}, None)
            if was_good:
                _log.error("password file %s unusable, refusing every Basic login: %s",
                           self.path, getattr(e, "reason", None) or type(e).__name__)

    def lookup(self, token: bytes) -> tuple[str | None, bytes]:
        """(the principal remembered for these credentials or None, the cache key)."""
        self._fresh()
        key = hmac.digest(self._key, token, "sha256")
        return self._ok.get(key), key

    def check(self, key: bytes, name: str, password: str, generation: int) -> str:
        """Verify ``name``'s ``password`` against the file (~50 ms); remember a success
        under ``key`` unless the file changed since ``generation`` (when the check was
        asked for). Raises NotAuthenticated."""
        hashed = self._users.get(name)
        # an unknown name is checked against a dummy hash: the same 50 ms as a known one
        ok = passwords.verify(hashed or self._dummy, password) and hashed is not None
        if not ok:
            raise NotAuthenticated("wrong user name or password")
        principal = _user(name)
        with self._lock:
            if generation == self.generation:
                if len(self._ok) >= CACHE_SIZE:
                    del self._ok[next(iter(self._ok))]  # the oldest entry
                self._ok[key] = principal
        return principal


def _decode_basic(token: bytes) -> tuple[str, str]:
    """(name, password) of RFC 7617 credentials; NotAuthenticated for anything else."""
    try:
        raw = base64.b64decode(token, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        raise NotAuthenticated("Basic credentials are not base64 of UTF-8 text") from None
    name, sep, password = text.partition(":")
    if not sep:
        raise NotAuthenticated("Basic credentials are not user:password")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):  # RFC 7617: no control characters
        raise NotAuthenticated("Basic credentials hold control characters")
    if not passwords.NAME.fullmatch(name) or not password:
        raise NotAuthenticated("wrong user name or password")
    return name, password


class _Pending:
    """A Basic check that needs argon2 (well-formed credentials not remembered): run by
    :meth:`finish`, on a verifying thread in ``authenticate_async``."""

    __slots__ = ("users", "key", "name", "password", "generation")

    def __init__(self, users: PasswordFile, key: bytes, token: bytes):
        # parsed here, on the event loop: malformed credentials are refused at once
        self.name, self.password = _decode_basic(token)
        self.users, self.key, self.generation = users, key, users.generation

    def finish(self) -> str:
        return self.users.check(self.key, self.name, self.password, self.generation)


class Authenticator:
    """Authenticates requests with the methods configured (module doc). Build it with
    :meth:`from_settings`; thread-safe for the event loop and a verifying thread."""

    def __init__(self, methods: tuple[str, ...], *, realm: str = "sparklog",
                 users: PasswordFile | None = None, bearer: BearerVerifier | None = None,
                 mtls_principal: str = "CN", verify_threads: int = 2):
        self.methods, self.realm = methods, realm
        self.users, self.bearer, self.mtls_principal = users, bearer, mtls_principal
        #: the schemes a 401 names in WWW-Authenticate
        self.schemes = tuple(s for m, s in (("basic", "Basic"), ("bearer", "Bearer"))
                             if m in methods)
        # argon2 checks off the event loop, at most this many at once: a flood of wrong
        # passwords costs these threads' CPU, not every other request's latency
        self._verifiers = concurrent.futures.ThreadPoolExecutor(
            verify_threads, thread_name_prefix="sparklog-auth")

    @classmethod
    def from_settings(cls, settings: Any, *, verifiers: "Verifiers | None" = None,
                      clock: Callable[[], float] = time.monotonic) -> "Authenticator | None":
        """The authenticator of ``[authentication]``; None when ``method`` is empty.
        ``verifiers``: the gateway's (:class:`Verifiers`, shared with the Kafka
        listener's SASL login); built from ``settings`` (with ``clock``) when not given.

        Raises ConfigError naming the key: what :meth:`Verifiers.from_settings` raises;
        mtls without an https listener whose ``ssl.client.auth`` is requested or
        required; ``mtls.principal`` not CN or dn.
        """
        if verifiers is None:
            verifiers = Verifiers.from_settings(settings, clock=clock)
        if verifiers is None:
            return None
        a = settings.authentication
        if "mtls" in verifiers.methods:
            _check_mtls(settings)
        return cls(verifiers.methods, realm=a.realm, users=verifiers.users,
                   bearer=verifiers.bearer, mtls_principal=a.mtls_principal.lower())

    # -- per request ----------------------------------------------------------------------
    def authenticate(self, scope: Any) -> str:
        """``User:<name>`` of the request in ``scope`` (left in it as
        ``scope["sparklog.principal"]`` too); raises NotAuthenticated. A Basic login not
        remembered runs argon2 here (~50 ms): on an event loop prefer
        :meth:`authenticate_async`."""
        verdict = self._decide(scope)
        principal = self._finish(verdict) if isinstance(verdict, _Pending) else verdict
        scope[PRINCIPAL] = principal
        return principal

    async def authenticate_async(self, scope: Any) -> str:
        """:meth:`authenticate`, with an argon2 check (if any) on the authenticator's
        own threads so the event loop serves other requests meanwhile."""
        verdict = self._decide(scope)
        if isinstance(verdict, _Pending):
            loop = asyncio.get_running_loop()
            verdict = await loop.run_in_executor(self._verifiers, self._finish, verdict)
        scope[PRINCIPAL] = verdict
        return verdict

    def _finish(self, pending: _Pending) -> str:
        try:
            return pending.finish()
        except NotAuthenticated as e:
            raise NotAuthenticated(e.reason, self.realm, self.schemes) from None

    def _decide(self, scope: Any) -> str | _Pending:
        """The principal, or the Basic check still to run; raises NotAuthenticated."""
        try:
            header = _header(scope, b"authorization")
            if header is not None:
                return self._from_header(header)
            if "mtls" in self.methods:
                subject = scope.get(PEER_SUBJECT)
                if subject:
                    return self._from_subject(subject)
                if not self.schemes:
                    raise NotAuthenticated("no verified client certificate was presented")
            raise NotAuthenticated(_NO_CREDENTIALS)
        except NotAuthenticated as e:  # every refusal names this realm and its schemes
            raise NotAuthenticated(e.reason, self.realm, self.schemes) from None

    def _from_header(self, header: bytes) -> str | _Pending:
        scheme, _, rest = header.strip().partition(b" ")
        scheme, credentials = scheme.lower(), rest.strip()
        if scheme == b"basic" and self.users is not None:
            principal, key = self.users.lookup(credentials)
            return principal if principal is not None else _Pending(self.users, key, credentials)
        if scheme == b"bearer" and self.bearer is not None:
            return _user(self.bearer.verify(credentials))
        raise NotAuthenticated("this Authorization scheme is not accepted here")

    def _from_subject(self, subject: tuple[tuple[str, str], ...]) -> str:
        if self.mtls_principal == "dn":
            return _user(subject_dn(subject))
        for attr, value in subject:  # most specific first
            if attr == "CN" and value:
                return _user(value)
        raise NotAuthenticated("the client certificate's subject has no CN")

    def close(self) -> None:
        self._verifiers.shutdown(wait=False)


@dataclasses.dataclass(frozen=True, eq=False)
class Verifiers:
    """The credential checks of ``[authentication]``, built once per gateway (by the
    composition root, ``server.lifecycle.gateway_parts``) and shared by both protocols:
    HTTP's :class:`Authenticator` (Basic, Bearer) and the Kafka listener's SASL login
    (``kafka.sasl.Login``: PLAIN, OAUTHBEARER, SCRAM). One password file (and its cache
    of successes), one JWT verifier, one SCRAM credential cache per gateway.

    ``methods``: ``authentication.method``'s, in order, lower case; ``users``: the
    password file (``basic``); ``bearer``: the JWT verifier (``bearer``); ``scram``: the
    store's SCRAM credentials (``security.scram.ScramUsers``; ``scram`` with a store).
    """

    methods: tuple[str, ...]
    users: PasswordFile | None = None
    bearer: BearerVerifier | None = None
    scram: Any = None

    @classmethod
    def from_settings(cls, settings: Any, store: Any = None, *,
                      clock: Callable[[], float] = time.monotonic) -> "Verifiers | None":
        """The verifiers of ``[authentication]`` (None when ``method`` is empty);
        ``store`` (the log's) holds the SCRAM credentials (None: no SCRAM verifier).
        Raises ConfigError naming the key: an unknown method; basic without a readable,
        well-formed ``password.file``; bearer without a usable ``jwt.public.key.file``
        or with ``none``/HS* algorithms."""
        a = settings.authentication
        methods = tuple(dict.fromkeys(m.strip().lower() for m in a.method.split(",")
                                      if m.strip()))
        if not methods:
            return None
        for m in methods:
            if m not in METHODS:
                raise ConfigError("authentication.method", a.method,
                                  f"unknown method {m!r}: expected basic, bearer, mtls "
                                  "or scram")
        users = _password_file(a.password_file, clock) if "basic" in methods else None
        bearer = BearerVerifier.from_settings(a, leeway_s=LEEWAY_S) \
            if "bearer" in methods else None
        scram = None
        if "scram" in methods and store is not None:
            from ingest_gateway.security.scram import ScramUsers

            scram = ScramUsers(store, int(settings.authorizer.refresh_ms))
        return cls(methods, users, bearer, scram)


def subject_dn(subject: tuple[tuple[str, str], ...]) -> str:
    """An RFC 4514 string of (attribute, value) pairs, most specific first, with the
    special characters of each value escaped (``CN=a\\,b,O=acme``)."""
    def escape(value: str) -> str:
        last = len(value) - 1
        return "".join("\\00" if c == "\0" else "\\" + c if c in ',+"\\<>;'
                       or (i == 0 and c in " #") or (i == last and c == " ") else c
                       for i, c in enumerate(value))

    return ",".join(f"{attr}={escape(value)}" for attr, value in subject)


def _password_file(path: str, clock: Callable[[], float]) -> PasswordFile:
    """The password file of ``basic``; ConfigError naming it if unreadable or malformed."""
    if not path:
        raise ConfigError("authentication.password.file", "", "basic authentication needs "
                          "a password file (sparklog passwords add)")
    try:
        return PasswordFile(path, clock=clock)
    except FileNotFoundError:
        raise ConfigError("authentication.password.file", path, "no such file") from None
    except OSError as e:
        raise ConfigError("authentication.password.file", path,
                          f"cannot be read: {e.strerror or e}") from None


def _check_mtls(settings: Any) -> None:
    """mtls needs verified client certificates; ConfigError naming the key if not."""
    from ingest_gateway.security.tls import listener

    where = listener(settings)
    if where.scheme != "https":
        raise ConfigError("gateway.listeners", settings.gateway.listeners or where.url,
                          "authentication.method mtls needs an https:// listener")
    if settings.ssl.client_auth == "none":
        raise ConfigError("ssl.client.auth", "none", "authentication.method mtls needs "
                          "client certificates: requested or required")
    if settings.authentication.mtls_principal.lower() not in ("cn", "dn"):
        raise ConfigError("authentication.mtls.principal", settings.authentication.mtls_principal,
                          "expected CN or dn")
