"""Security of the Kafka listener: its scheme (Kafka's names), who a connection is, and
whether that principal may do what a request asks.

``gateway.kafka.listeners`` names one listener, ``SCHEME://host:port`` with Kafka's
schemes:

PLAINTEXT
    no TLS, no login. Refused (ConfigError) when ``authentication.method`` is set: a
    plain listener would let a client in without the login HTTP asks for. With the
    authorizer on and no authentication, every connection is ``User:ANONYMOUS`` and the
    ACLs apply to it (as a Kafka PLAINTEXT listener does: no bypass).
SSL
    TLS with the gateway's ``[ssl]`` certificate and ``ssl.client.auth``. The principal
    is the verified client certificate's, mapped as for HTTP mTLS
    (``authentication.mtls.principal``: CN or the whole DN), else ``User:ANONYMOUS``.
    With ``authentication.method`` set, ``ssl.client.auth=required`` is needed (else a
    client without a certificate would be in without a login).
SASL_PLAINTEXT, SASL_SSL
    a SASL login first (``kafka.sasl``): PLAIN against the HTTP Basic password file
    (``authentication.method`` holds ``basic``), SCRAM-SHA-256/512 against the
    credentials in the store (``scram``), OAUTHBEARER with the HTTP bearer JWT
    checks (``bearer``). Before it only ApiVersions, SaslHandshake and
    SaslAuthenticate are served; anything else closes the connection (Kafka's rule).

Authorization: handlers call :func:`allowed` (or :func:`refused`, for Kafka's error code
of a denial) with Kafka's operation and resource type
("Operations and Resources on Protocols"); the principal and client address of the
request being handled are in a context variable set by the listener per request, so
handlers keep their ``(ctx, head, request)`` signature. Without the authorizer,
everything is allowed.
"""

from __future__ import annotations

import contextvars
import ssl
from typing import Any
from urllib.parse import urlsplit

from conf.errors import ConfigError
from ingest_gateway.kafka.codes import AUTHORIZATION_FAILED
from ingest_gateway.kafka.sasl import API_SASL_AUTHENTICATE, API_SASL_HANDSHAKE, Login, Who
from ingest_gateway.security import ANONYMOUS
from ingest_gateway.security.authentication import subject_dn
from ingest_gateway.security.tls import peer_subject, server_context
from ingest_gateway.server.acl_admin import CLUSTER_NAME

SCHEMES = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: Kafka's error code of a denial, by the type of the resource refused
CODES = AUTHORIZATION_FAILED
TOPIC_AUTHORIZATION_FAILED = CODES["Topic"]
GROUP_AUTHORIZATION_FAILED = CODES["Group"]
CLUSTER_AUTHORIZATION_FAILED = CODES["Cluster"]
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = CODES["TransactionalId"]

#: the SASL APIs' versions offered on SASL listeners (SaslHandshake v0 is followed by
#: bare SASL tokens: ``kafka.sasl``)
SASL_OFFERED = {API_SASL_HANDSHAKE: (0, 1), API_SASL_AUTHENTICATE: (0, 2)}


#: set by the listener for each request it handles
CURRENT: contextvars.ContextVar[Who] = contextvars.ContextVar(
    "sparklog_kafka_who", default=Who(ANONYMOUS, ""))


def parse_listener(text: str) -> tuple[str, str, int]:
    """(scheme, host, port) of one ``SCHEME://host:port`` (schemes: :data:`SCHEMES`);
    raises ConfigError naming ``gateway.kafka.listeners`` for anything else."""
    expected = "expected one PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL://host:port"
    # urlsplit takes no "_" in a scheme (SASL_SSL): the scheme is split off first
    scheme, sep, rest = text.strip().partition("://")
    scheme = scheme.upper()
    try:
        parts = urlsplit("//" + rest)
        port = parts.port
    except ValueError as e:
        raise ConfigError("gateway.kafka.listeners", text, f"{expected} ({e})") from None
    if not sep:
        raise ConfigError("gateway.kafka.listeners", text, expected)
    if scheme not in SCHEMES or not parts.hostname or port is None \
            or parts.path not in ("", "/") or "," in text:
        raise ConfigError("gateway.kafka.listeners", text, expected)
    return scheme, parts.hostname, port


class ListenerSecurity:
    """What a listener's scheme asks of its connections: the TLS context (None for
    plain), the SASL mechanisms (empty: no login) and the authorizer (None: off).
    ``verifiers``: the gateway's credential checks (``security.authentication.
    Verifiers``, shared with HTTP; None: ``authentication.method`` empty)."""

    def __init__(self, scheme: str, settings: Any, authorizer: Any, verifiers: Any = None):
        self.scheme, self.authorizer = scheme, authorizer
        self.mtls_principal = settings.authentication.mtls_principal.lower()
        self.ssl_context: ssl.SSLContext | None = None
        self.login: Login | None = None  # on SASL listeners
        methods = {m.strip().lower() for m in settings.authentication.method.split(",")
                   if m.strip()}
        text = settings.gateway.kafka_listeners
        if methods and scheme == "PLAINTEXT":
            raise ConfigError("gateway.kafka.listeners", text, "authentication.method is set: "
                              "a PLAINTEXT listener would let clients in without a login; "
                              "use SASL_SSL, SASL_PLAINTEXT or SSL")
        if scheme in ("SSL", "SASL_SSL"):
            if not settings.ssl.certfile:
                raise ConfigError("ssl.certfile", "", f"the {scheme} Kafka listener needs "
                                  "the gateway's certificate (PEM)")
            self.ssl_context = server_context(settings)
        if scheme == "SSL" and methods and settings.ssl.client_auth != "required":
            raise ConfigError("ssl.client.auth", settings.ssl.client_auth,
                              "authentication.method is set: the SSL Kafka listener needs "
                              "client certificates required (or use SASL_SSL)")
        if scheme.startswith("SASL_"):
            self.login = Login.from_settings(settings, verifiers)

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self.login.mechanisms if self.login is not None else ()

    def principal_of(self, transport: Any) -> str:
        """The principal a connection has before any login: its verified client
        certificate's (SSL listeners), else ``User:ANONYMOUS``."""
        subject = peer_subject(transport) if self.ssl_context is not None else None
        if not subject:
            return ANONYMOUS
        if self.mtls_principal == "dn":
            return f"User:{subject_dn(subject)}"
        for attr, value in subject:  # most specific first
            if attr == "CN" and value:
                return f"User:{value}"
        return ANONYMOUS

    def close(self) -> None:
        if self.login is not None:
            self.login.close()


def allowed(ctx: Any, operation: str, resource_type: str, name: str) -> bool:
    """Whether the request being handled (:data:`CURRENT`) may do ``operation`` on the
    ``resource_type`` named ``name`` (names as ``log_layout.acls``: ``Write``,
    ``Topic``); True when the gateway has no authorizer."""
    authorizer = ctx.gateway.authorizer
    if authorizer is None:
        return True
    who = CURRENT.get()
    return authorizer.authorize(who.principal, who.host, operation, resource_type, name)


class Denied(PermissionError):
    """A resource the request's principal may not act on: carries Kafka's code
    (``error_code``, which ``codes.code_of`` answers) and Kafka's message."""

    def __init__(self, resource_type: str):
        self.error_code = CODES[resource_type]
        super().__init__(f"{resource_type.replace('Id', ' Id')} authorization failed.")


def check(ctx: Any, operation: str, resource_type: str, name: str = CLUSTER_NAME) -> None:
    """Raises :class:`Denied` unless :func:`allowed`."""
    if not allowed(ctx, operation, resource_type, name):
        raise Denied(resource_type)


def refused(ctx: Any, operation: str, resource_type: str, name: str = CLUSTER_NAME) -> int:
    """0 when :func:`allowed`, else Kafka's error code of a denial on ``resource_type``
    (:data:`CODES`: TOPIC_AUTHORIZATION_FAILED for a Topic, ...); ``name`` defaults to
    the cluster's."""
    return 0 if allowed(ctx, operation, resource_type, name) else CODES[resource_type]
