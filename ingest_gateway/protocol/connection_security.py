"""TLS and credentials of the clients' connections, under kafka-python's names.

``Producer``, ``Consumer`` and ``Session`` take, as keyword arguments:

``ssl_cafile``
    PEM CA certificates that an ``https://`` gateway's certificate must chain to
    (default: the system's trust store). The gateway's name or IP address is checked
    against its certificate.
``ssl_certfile`` / ``ssl_keyfile``
    the client certificate (PEM) and its key (``ssl_keyfile`` may be omitted when the
    certificate file holds the key), for gateways that ask for one
    (``ssl.client.auth``, and ``mtls`` authentication).
``sasl_plain_username`` / ``sasl_plain_password``
    sent as HTTP Basic credentials (kafka-python's SASL/PLAIN names).
``sasl_oauth_token``
    a bearer token: a string, or a callable returning one, called for every request
    (it should cache its token and refresh it before it expires). kafka-python's
    ``sasl_oauth_token_provider`` fills the same role.

TLS settings apply to ``https://`` gateways; credentials go to every gateway (over
plain ``http://`` only behind a proxy that adds TLS). A 401 or 403 answer is an error
of the credentials, not of the moment: it is raised as
:class:`~ingest_gateway.errors.NotAuthenticated` or
:class:`~ingest_gateway.errors.NotAuthorized` and never retried.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ingest_gateway.errors import NotAuthenticated, NotAuthorized

#: the keyword arguments this module reads (Producer and Consumer pass them through)
KWARGS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "sasl_plain_username",
          "sasl_plain_password", "sasl_oauth_token")
AUTH_ERRORS = (NotAuthenticated, NotAuthorized)
_DENIED = re.compile(r"(\S+) is not authorized to (\S+) (\S+) '(.*)'", re.S)


@dataclasses.dataclass(frozen=True)
class ConnectionSecurity:
    """The TLS files and credentials of a client (module doc); raises ValueError for
    a file that is not there, a user without a password or with a ``:``, or both
    Basic credentials and a token."""

    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = dataclasses.field(default=None, repr=False)
    sasl_oauth_token: str | Callable[[], str] | None = dataclasses.field(default=None,
                                                                         repr=False)

    def __post_init__(self) -> None:
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"{name}: no such file {path!r}")
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError("ssl_keyfile needs ssl_certfile (the certificate it goes with)")
        user, password = self.sasl_plain_username, self.sasl_plain_password
        if (user is None) != (password is None):
            raise ValueError("give both sasl_plain_username and sasl_plain_password")
        if user is not None and (not user or ":" in user):
            raise ValueError("sasl_plain_username must be non-empty and hold no ':'")
        if user is not None and self.sasl_oauth_token is not None:
            raise ValueError("give Basic credentials (sasl_plain_*) or sasl_oauth_token, "
                             "not both")
        if isinstance(self.sasl_oauth_token, str) and not self.sasl_oauth_token:
            raise ValueError("sasl_oauth_token is empty")

    @classmethod
    def of(cls, security: "ConnectionSecurity | None" = None,
           **kwargs: Any) -> "ConnectionSecurity | None":
        """``security``, else one from kafka-python's keyword arguments (None if they
        are all None). Raises ValueError as the class does."""
        if security is not None:
            return security
        given = {k: v for k, v in kwargs.items() if v is not None}
        return cls(**given) if given else None

    def authorization(self) -> str | None:
        """The Authorization header's value for the next request (None: none)."""
        if self.sasl_plain_username is not None:
            pair = f"{self.sasl_plain_username}:{self.sasl_plain_password}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        token = self.sasl_oauth_token
        if callable(token):
            token = token()
        return None if token is None else f"Bearer {token}"

    def pool_kwargs(self, scheme: str) -> dict[str, Any]:
        """urllib3 connection pool arguments for a gateway URL of ``scheme``."""
        if scheme != "https":
            return {}
        return {k: v for k, v in (("ca_certs", self.ssl_cafile),
                                  ("cert_file", self.ssl_certfile),
                                  ("key_file", self.ssl_keyfile)) if v is not None}


def auth_error(status: int, doc: Mapping[str, Any]) -> NotAuthenticated | NotAuthorized | None:
    """The typed error of a 401 or 403 answer (its JSON body ``doc``); None for others."""
    message = str(doc.get("message", ""))
    if status == 401:
        reason = message.removeprefix("authentication failed: ") or "the gateway answered 401"
        return NotAuthenticated(reason)
    if status == 403:
        m = _DENIED.fullmatch(message)
        fields = m.groups() if m else ("?", "?", "?", message)
        principal, operation, kind, name = (doc.get(k, d) for k, d in zip(
            ("principal", "operation", "resource_type", "resource_name"), fields))
        return NotAuthorized(str(principal), str(operation), str(kind), str(name))
    return None
