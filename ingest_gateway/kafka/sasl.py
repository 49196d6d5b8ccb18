"""SASL logins on the Kafka listener: SaslHandshake (v1) then SaslAuthenticate (v0-2).

Mechanisms (Kafka's names), from ``authentication.method``:

PLAIN (RFC 4616), with ``basic``
    ``authzid NUL authcid NUL password``, checked against the HTTP Basic password file
    (``security.authentication.PasswordFile``: argon2id, the same cache of successes,
    re-read when it changes). Argon2 runs on this module's own threads, off the event
    loop, as the HTTP side does. An authzid other than the authcid is refused.
OAUTHBEARER (RFC 7628), with ``bearer``
    the client's first message ``n,,\\x01auth=Bearer <jwt>\\x01\\x01``; the JWT is checked
    as an HTTP bearer token (``security.bearer``).

The principal is ``User:<name>``. The order is Kafka's: SaslHandshake names one of the
mechanisms offered (else UNSUPPORTED_SASL_MECHANISM, 33), then one SaslAuthenticate
(another handshake or an authenticate out of turn: ILLEGAL_SASL_STATE, 34). A login that
fails is answered SASL_AUTHENTICATION_FAILED (58) with a fixed reason, never repeating
what the client sent, and the connection is closed after the answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import time
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from conf.errors import ConfigError
from ingest_gateway.errors import NotAuthenticated
from ingest_gateway.kafka.wire import Header, ProtocolError, error, make
from ingest_gateway.security.authentication import LEEWAY_S, PasswordFile, _password_file

UNSUPPORTED_SASL_MECHANISM = ErrorCode.unsupported_sasl_mechanism
ILLEGAL_SASL_STATE = ErrorCode.illegal_sasl_state
SASL_AUTHENTICATION_FAILED = ErrorCode.sasl_authentication_failed

API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE = 17, 36
#: APIs served before a SASL login (ApiVersions, the SASL ones)
BEFORE_LOGIN = frozenset({18, API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE})

#: a SASL message longer than this is refused unread (a JWT is a few KiB)
MAX_AUTH_BYTES = 64 << 10


@dataclasses.dataclass(frozen=True)
class Who:
    """The principal and client address of a request."""

    principal: str
    host: str


class Login:
    """The SASL mechanisms a listener offers and their checks."""

    def __init__(self, users: PasswordFile | None, bearer: Any):
        self.users, self.bearer = users, bearer
        self.mechanisms = tuple(m for m, on in (("PLAIN", users), ("OAUTHBEARER", bearer))
                                if on is not None)
        # argon2 (~50 ms a check) off the event loop, two at most: a flood of wrong
        # passwords costs these threads' CPU, not every other request's latency
        self._verifiers = concurrent.futures.ThreadPoolExecutor(
            2, thread_name_prefix="sparklog-kafka-sasl")

    @classmethod
    def from_settings(cls, settings: Any, methods: set[str]) -> "Login":
        """Raises ConfigError naming ``authentication.method`` when neither ``basic``
        nor ``bearer`` is on (no mechanism to offer), or as the HTTP authenticator does
        for a bad password file or JWT key."""
        a = settings.authentication
        if not methods & {"basic", "bearer"}:
            raise ConfigError("authentication.method", a.method, "a SASL Kafka listener needs "
                              "basic (SASL PLAIN) or bearer (SASL OAUTHBEARER)")
        users = _password_file(a.password_file, time.monotonic) if "basic" in methods else None
        bearer = None
        if "bearer" in methods:
            from ingest_gateway.security.bearer import BearerVerifier

            bearer = BearerVerifier.from_settings(a, leeway_s=LEEWAY_S)
        return cls(users, bearer)

    async def check(self, mechanism: str, message: bytes) -> str:
        """The principal ``message`` proves with ``mechanism``; raises NotAuthenticated."""
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
    """One connection's login state: who it is, and whether it must close after the
    answer being sent (a failed login)."""

    def __init__(self, login: Login | None, principal: str, host: str):
        self.login = login
        #: the principal once logged in (before: ANONYMOUS, or a certificate's)
        self.who = Who(principal, host)
        self.logged_in = login is None  # no SASL on this listener: nothing to wait for
        self.mechanism: str | None = None
        self.closing = False

    def gate(self, api_key: int) -> Who:
        """Who a request comes from; raises ProtocolError (the connection closes, as
        Kafka's) for an API other than ApiVersions and SASL's before the login."""
        if not self.logged_in and api_key not in BEFORE_LOGIN:
            raise ProtocolError(f"API {api_key} before the SASL login")
        return self.who

    async def answer(self, head: Header, req: Any) -> Any:
        """The SaslHandshake or SaslAuthenticate answer to ``req``."""
        cls = load_response_schema(head.api_key, head.api_version)
        if self.login is None:  # not a SASL listener: Kafka answers ILLEGAL_SASL_STATE
            self.closing = True
            return _reply(cls, ILLEGAL_SASL_STATE, "SASL is not enabled on this listener")
        if head.api_key == API_SASL_HANDSHAKE:
            if self.logged_in or self.mechanism is not None:
                self.closing = True
                return _reply(cls, ILLEGAL_SASL_STATE, "unexpected SaslHandshake")
            if req.mechanism not in self.login.mechanisms:
                self.closing = True
                return _reply(cls, UNSUPPORTED_SASL_MECHANISM, None,
                              mechanisms=self.login.mechanisms)
            self.mechanism = req.mechanism
            return _reply(cls, 0, None, mechanisms=self.login.mechanisms)
        if self.mechanism is None or self.logged_in:
            self.closing = True
            return _reply(cls, ILLEGAL_SASL_STATE, "SaslAuthenticate out of turn")
        try:
            principal = await self.login.check(self.mechanism, req.auth_bytes)
        except NotAuthenticated as e:
            self.closing = True
            return _reply(cls, SASL_AUTHENTICATION_FAILED,
                          f"Authentication failed: {e.reason}")
        self.who = Who(principal, self.who.host)
        self.logged_in = True
        return _reply(cls, 0, None)


def _reply(cls: type, code: int, message: str | None, **more: Any) -> Any:
    values = {"mechanisms": (), **more}
    return make(cls, error_code=error(code), error_message=message, auth_bytes=b"",
                session_lifetime=datetime.timedelta(0), **values)

