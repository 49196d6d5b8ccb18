"""SASL logins on the Kafka listener: SaslHandshake (v0-1) then SaslAuthenticate (v0-2),
and KIP-368 re-authentication.

Mechanisms (Kafka's names), from ``authentication.method``:

PLAIN (RFC 4616), with ``basic``
    ``authzid NUL authcid NUL password``, checked against the gateway's one password
    file, the one HTTP Basic checks too (``security.authentication.PasswordFile``:
    argon2id, one cache of successes, re-read when it changes). Argon2 runs on this module's own threads, off the event
    loop, as the HTTP side does. An authzid other than the authcid is refused.
SCRAM-SHA-256, SCRAM-SHA-512 (RFC 5802/7677), with ``scram``
    two round trips against the credentials in the store (``security.scram``; managed
    by ``sparklog users`` and AlterUserScramCredentials).
OAUTHBEARER (RFC 7628), with ``bearer``
    the client's first message ``n,,\\x01auth=Bearer <jwt>\\x01\\x01``; the JWT is checked
    as an HTTP bearer token, by the same verifier (``security.bearer``).

The password file, the JWT verifier and the SCRAM credentials are the gateway's
``security.authentication.Verifiers``, built once by the composition root
(``server.lifecycle.gateway_parts``) and shared with HTTP's authenticator.

The principal is ``User:<name>``. The order is Kafka's: SaslHandshake names one of the
mechanisms offered (else UNSUPPORTED_SASL_MECHANISM, 33), then SaslAuthenticate until
the mechanism is done (one for PLAIN and OAUTHBEARER, two for SCRAM; another handshake
or an authenticate out of turn: ILLEGAL_SASL_STATE, 34). A login that fails is answered
SASL_AUTHENTICATION_FAILED (58) with a fixed reason, never repeating what the client
sent, and the connection is closed after the answer.

SaslHandshake v0 (Kafka before 1.0, and librdkafka against such a broker): the
mechanism's tokens then come as bare size-prefixed frames, no request header, and the
answers go back the same way (:meth:`Session.raw_token`; PLAIN's answer is an empty
frame). A failure closes the connection without an answer, as Kafka does.

Re-authentication (KIP-368, ``gateway.kafka.connections.max.reauth.ms``, Kafka's
``connections.max.reauth.ms``; 0: off): a successful SaslAuthenticate (v1+) tells the
client its session's lifetime; the client logs in again on the same connection
(SaslHandshake v1 with the same mechanism, then SaslAuthenticate) before it runs out.
An OAUTHBEARER session also ends with its token's ``exp``, re-authentication on or off
(Kafka's: the sooner of the two is the lifetime told).
A request other than those arriving after the session expired closes the connection
(Kafka's ``serverAuthenticationSessionExpired``), whatever the client's version. A
re-authentication must prove the same principal (else SASL_AUTHENTICATION_FAILED and
closed) with the same mechanism (else UNSUPPORTED_SASL_MECHANISM and closed). With
re-authentication off, a second SaslHandshake is ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import time
from collections.abc import Callable
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from conf.errors import ConfigError
from ingest_gateway.errors import NotAuthenticated
from ingest_gateway.kafka.wire import Header, ProtocolError, error, make
from ingest_gateway.security.authentication import PasswordFile, Verifiers

UNSUPPORTED_SASL_MECHANISM = ErrorCode.unsupported_sasl_mechanism
ILLEGAL_SASL_STATE = ErrorCode.illegal_sasl_state
SASL_AUTHENTICATION_FAILED = ErrorCode.sasl_authentication_failed

API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE = 17, 36
#: APIs served before a SASL login (ApiVersions, the SASL ones)
BEFORE_LOGIN = frozenset({18, API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE})
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

#: a SASL message longer than this is refused unread (a JWT is a few KiB)
MAX_AUTH_BYTES = 64 << 10


@dataclasses.dataclass(frozen=True)
class Who:
    """The principal and client address of a request."""

    principal: str
    host: str


class _OneStep:
    """PLAIN and OAUTHBEARER: one message proves the principal. ``expires_s``: when the
    credential ends (an OAUTHBEARER token's ``exp``, wall-clock seconds; None: never)."""

    def __init__(self, mechanism: str):
        self.mechanism = mechanism
        self.expires_s: float | None = None


class Login:
    """The SASL mechanisms a listener offers and their checks. ``scram`` is a
    ``security.scram.ScramUsers`` (None: SCRAM off); ``reauth_ms`` is
    ``connections.max.reauth.ms`` (0: sessions never expire)."""

    def __init__(self, users: PasswordFile | None, bearer: Any, scram: Any = None, *,
                 reauth_ms: int = 0):
        self.users, self.bearer, self.scram, self.reauth_ms = users, bearer, scram, reauth_ms
        self.mechanisms = tuple(m for m, on in (("PLAIN", users),
                                                *((m, scram) for m in SCRAM_MECHANISMS),
                                                ("OAUTHBEARER", bearer))
                                if on is not None)
        # argon2 (~50 ms a check) and the SCRAM credentials' store reads off the event
        # loop, two at most: a flood of wrong passwords costs these threads' CPU, not
        # every other request's latency
        self._verifiers = concurrent.futures.ThreadPoolExecutor(
            2, thread_name_prefix="sparklog-kafka-sasl")

    @classmethod
    def from_settings(cls, settings: Any, verifiers: Verifiers | None) -> "Login":
        """The login over the gateway's ``verifiers`` (``security.authentication.
        Verifiers``, built once by the composition root and shared with HTTP's
        authenticator: the same password file, JWT verifier and SCRAM credentials).
        Raises ConfigError naming ``authentication.method`` when none of ``basic``,
        ``scram`` and ``bearer`` is on (no mechanism to offer), or when ``scram`` is on
        without the store its credentials are kept in."""
        a = settings.authentication
        methods = set(verifiers.methods) if verifiers is not None else set()
        if verifiers is None or not methods & {"basic", "bearer", "scram"}:
            raise ConfigError("authentication.method", a.method, "a SASL Kafka listener needs "
                              "basic (SASL PLAIN), scram (SASL SCRAM-SHA-256/512) or bearer "
                              "(SASL OAUTHBEARER)")
        if "scram" in methods and verifiers.scram is None:
            raise ConfigError("authentication.method", a.method,
                              "SCRAM needs the store its credentials are kept in")
        return cls(verifiers.users, verifiers.bearer, verifiers.scram,
                   reauth_ms=int(getattr(settings.gateway, "kafka_connections_max_reauth_ms",
                                         0)))

    def exchange(self, mechanism: str) -> Any:
        """A new login by ``mechanism`` (one of :attr:`mechanisms`)."""
        if mechanism in SCRAM_MECHANISMS:
            from ingest_gateway.security.scram import ScramExchange

            return ScramExchange(mechanism, self.scram)
        return _OneStep(mechanism)

    async def step(self, exchange: Any, message: bytes) -> tuple[bytes, str | None]:
        """(the server's answer, the principal once proven, else None) to ``message`` in
        ``exchange``; raises NotAuthenticated."""
        if len(message) > MAX_AUTH_BYTES:
            raise NotAuthenticated("the SASL message is too long")
        if not isinstance(exchange, _OneStep):  # SCRAM: its credentials may need a LIST
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._verifiers, exchange.step, message)
        if exchange.mechanism == "OAUTHBEARER" and self.bearer is not None:
            if len(message) > MAX_AUTH_BYTES:
                raise NotAuthenticated("the SASL message is too long")
            name, exchange.expires_s = self.bearer.verify_until(_oauthbearer(message))
            return b"", f"User:{name}"
        return b"", await self.check(exchange.mechanism, message)

    async def check(self, mechanism: str, message: bytes) -> str:
        """The principal ``message`` proves with a one-step ``mechanism`` (PLAIN,
        OAUTHBEARER); raises NotAuthenticated."""
        if len(message) > MAX_AUTH_BYTES:
            raise NotAuthenticated("the SASL message is too long")
        if mechanism == "PLAIN" and self.users is not None:
            name, password = _plain(message)
            principal, key = self.users.lookup(message)
            if principal is not None and principal == f"User:{name}":
                return principal
            users, generation = self.users, self.users.generation
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._verifiers, users.check, key, name,
                                              password, generation)
        if mechanism == "OAUTHBEARER" and self.bearer is not None:
            return f"User:{self.bearer.verify(_oauthbearer(message))}"
        raise NotAuthenticated("no such mechanism")

    def close(self) -> None:
        self._verifiers.shutdown(wait=False)


def _plain(message: bytes) -> tuple[str, str]:
    """(name, password) of a PLAIN message; NotAuthenticated if malformed."""
    try:
        authzid, name, password = message.decode("utf-8").split("\0")
    except (UnicodeDecodeError, ValueError):
        raise NotAuthenticated("not a SASL PLAIN message") from None
    if not name or not password or (authzid and authzid != name):
        raise NotAuthenticated("wrong user name or password")
    return name, password


def _oauthbearer(message: bytes) -> bytes:
    """The token of an OAUTHBEARER client first message; NotAuthenticated if none."""
    for part in message.split(b"\x01")[1:]:
        key, _, value = part.partition(b"=")
        if key == b"auth" and value[:7].lower() == b"bearer " and value[7:].strip():
            return value[7:].strip()
    raise NotAuthenticated("not a SASL OAUTHBEARER message with a bearer token")


class Session:
    """One connection's login state: who it is, the login in progress, when the session
    expires, and whether the connection must close after the answer being sent (a
    failed login). ``clock`` is in seconds."""

    def __init__(self, login: Login | None, principal: str, host: str, *,
                 clock: Callable[[], float] = time.monotonic):
        self.login, self.clock = login, clock
        #: the principal once logged in (before: ANONYMOUS, or a certificate's)
        self.who = Who(principal, host)
        self.logged_in = login is None  # no SASL on this listener: nothing to wait for
        self.mechanism: str | None = None
        self.exchange: Any = None  # the login in progress
        #: SaslHandshake v0: the tokens come as bare frames (module doc)
        self.raw = False
        #: the principal a re-authentication must prove again (None: a first login)
        self.reauth_of: str | None = None
        #: when the session ends (the clock's seconds; None: never)
        self.expires_at: float | None = None
        self.closing = False

    def gate(self, api_key: int) -> Who:
        """Who a request comes from; raises ProtocolError (the connection closes, as
        Kafka's) for an API other than ApiVersions and SASL's before the login, and for
        any request once the session has expired."""
        if not self.logged_in and api_key not in BEFORE_LOGIN:
            raise ProtocolError(f"API {api_key} before the SASL login")
        if self.expires_at is not None and self.clock() >= self.expires_at \
                and not (self.exchange is not None and api_key == API_SASL_AUTHENTICATE):
            raise ProtocolError("the SASL session expired (connections.max.reauth.ms) "
                                "without a re-authentication")
        return self.who

    async def answer(self, head: Header, req: Any) -> Any:
        """The SaslHandshake or SaslAuthenticate answer to ``req``."""
        cls = load_response_schema(head.api_key, head.api_version)
        if self.login is None:  # not a SASL listener: Kafka answers ILLEGAL_SASL_STATE
            return self._fail(cls, ILLEGAL_SASL_STATE, "SASL is not enabled on this listener")
        if head.api_key == API_SASL_HANDSHAKE:
            return self._handshake(cls, head, req)
        if self.exchange is None or self.raw:
            return self._fail(cls, ILLEGAL_SASL_STATE, "SaslAuthenticate out of turn")
        try:
            challenge, principal = await self.login.step(self.exchange, req.auth_bytes)
        except NotAuthenticated as e:
            return self._fail(cls, SASL_AUTHENTICATION_FAILED, f"Authentication failed: "
                                                               f"{e.reason}")
        if principal is None:
            return _reply(cls, 0, None, auth_bytes=challenge)
        lifetime_ms = self._lifetime_ms()
        if not self._done(principal, lifetime_ms):
            return self._fail(cls, SASL_AUTHENTICATION_FAILED,
                              "Cannot change principals during re-authentication")
        return _reply(cls, 0, None, auth_bytes=challenge,
                      session_lifetime=datetime.timedelta(milliseconds=lifetime_ms or 0))

    def _lifetime_ms(self) -> int | None:
        """The session's lifetime (Kafka's ``calcCompletionTimesAndReturnSessionLifetimeMs``):
        ``connections.max.reauth.ms`` and the credential's own end, the sooner; None when
        neither bounds it."""
        assert self.login is not None
        bounds = [self.login.reauth_ms] if self.login.reauth_ms > 0 else []
        expires_s = getattr(self.exchange, "expires_s", None)
        if expires_s is not None:
            bounds.append(max(0, int((expires_s - time.time()) * 1000)))
        return min(bounds) if bounds else None

    def _handshake(self, cls: type, head: Header, req: Any) -> Any:
        assert self.login is not None
        if self.exchange is not None:
            return self._fail(cls, ILLEGAL_SASL_STATE, "unexpected SaslHandshake")
        if self.logged_in:  # a re-authentication (KIP-368), if sessions expire
            if self.expires_at is None or head.api_version < 1:
                return self._fail(cls, ILLEGAL_SASL_STATE, "unexpected SaslHandshake")
            if req.mechanism != self.mechanism:
                return self._fail(cls, UNSUPPORTED_SASL_MECHANISM, None,
                                  mechanisms=self.login.mechanisms)
            self.reauth_of = self.who.principal
        elif req.mechanism not in self.login.mechanisms:
            return self._fail(cls, UNSUPPORTED_SASL_MECHANISM, None,
                              mechanisms=self.login.mechanisms)
        self.mechanism = req.mechanism
        self.exchange = self.login.exchange(req.mechanism)
        self.raw = head.api_version == 0
        return _reply(cls, 0, None, mechanisms=self.login.mechanisms)

    async def raw_token(self, token: bytes) -> bytes:
        """The bare answer to a bare token after SaslHandshake v0 (module doc); raises
        ProtocolError (the connection closes unanswered) when the login fails."""
        assert self.login is not None and self.exchange is not None
        try:
            challenge, principal = await self.login.step(self.exchange, token)
        except NotAuthenticated as e:
            raise ProtocolError(f"SASL login failed: {e.reason}") from None
        if principal is not None:
            self._done(principal, self._lifetime_ms())
        return challenge

    def _done(self, principal: str, lifetime_ms: int | None) -> bool:
        """End the exchange as ``principal``, the session lasting ``lifetime_ms`` (None:
        for ever); False (nothing changed) when a re-authentication proved another one."""
        self.exchange, self.raw = None, False
        if self.reauth_of is not None and principal != self.reauth_of:
            return False
        self.reauth_of = None
        self.who = Who(principal, self.who.host)
        self.logged_in = True
        self.expires_at = None if lifetime_ms is None else self.clock() + lifetime_ms / 1000
        return True

    def _fail(self, cls: type, code: int, message: str | None, **more: Any) -> Any:
        """The refusal ``code``, after which the connection closes."""
        self.closing = True
        return _reply(cls, code, message, **more)


def _reply(cls: type, code: int, message: str | None, **more: Any) -> Any:
    values = {"mechanisms": (), "auth_bytes": b"", "session_lifetime": datetime.timedelta(0),
              **more}
    return make(cls, error_code=error(code), error_message=message, **values)
