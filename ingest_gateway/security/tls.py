"""TLS on the gateway: where it listens, its certificate, and client certificates.

``gateway.listeners`` is Kafka's name: ``http://host:port`` or ``https://host:port``;
empty means ``http://<gateway.host>:<gateway.port>``, as before there were listeners.
A gateway has one listener (uvicorn serves one scheme per server). An ``https://``
listener uses ``[ssl]``:

``ssl.certfile`` / ``ssl.keyfile`` / ``ssl.keyfile.password``
    the gateway's certificate chain and private key (PEM; the key may be in the
    certificate file, then ``ssl.keyfile`` is empty).
``ssl.cafile``
    the CAs that client certificates must chain to.
``ssl.client.auth``
    ``none`` (no certificate asked for), ``requested`` (asked for; a client without
    one is served, one with a certificate that does not chain to ``ssl.cafile`` is
    refused in the handshake) or ``required`` (no certificate, no connection).

The protocol floor is TLS 1.2 whatever OpenSSL's defaults are. Everything is checked
at start-up (:func:`check`): a missing or unreadable file, a key that does not match
or a wrong password is a ConfigError naming the key, not a failed first handshake.

:func:`peer_subject` is the verified client certificate's subject, which
``http_protocol`` puts into every request's ASGI scope as
``scope["sparklog.peer_subject"]``.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from typing import Any
from urllib.parse import urlsplit

from conf.errors import ConfigError

#: ``ssl.client.auth`` -> the server context's verify mode
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}
#: the ASGI scope key of the client certificate's subject (see :func:`peer_subject`)
PEER_SUBJECT = "sparklog.peer_subject"

#: a verified subject: (attribute, value) pairs, most specific first (RFC 4514 order)
Subject = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Listener:
    """Where the gateway listens: ``scheme`` (http or https), ``host``, ``port``."""

    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def listener(settings: Any) -> Listener:
    """The gateway's listener from ``gateway.listeners`` (else gateway.host and port).

    Raises ConfigError naming ``gateway.listeners`` for a value that is not one
    ``http(s)://host:port`` URL (no path, no user, a port of 1..65535).
    """
    gw = settings.gateway
    text = gw.listeners.strip()
    if not text:
        return Listener("http", gw.host, gw.port)
    if "," in text:
        raise ConfigError("gateway.listeners", text, "one listener per gateway: run a "
                          "gateway for each address")
    expected = "expected http://host:port or https://host:port"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ConfigError("gateway.listeners", text, f"{expected} ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None \
            or parts.path not in ("", "/") or parts.query or parts.fragment \
            or parts.username is not None or not 0 < port <= 65535:
        raise ConfigError("gateway.listeners", text, expected)
    return Listener(parts.scheme, parts.hostname, port)


def _readable(key: str, path: str) -> str:
    """``path`` if it names a readable file, else ConfigError naming ``key``."""
    if not os.path.isfile(path):
        raise ConfigError(key, path, "no such file")
    if not os.access(path, os.R_OK):
        raise ConfigError(key, path, "not readable by the gateway's user")
    return path


def check(settings: Any) -> Listener:
    """Check ``[ssl]`` against the listener and return the listener.

    Raises ConfigError naming the key: a bad ``ssl.client.auth``; an https listener
    without ``ssl.certfile``; a certificate, key or CA file that is missing,
    unreadable or not PEM; a key that does not match or a wrong password; a client
    certificate asked for without ``ssl.cafile``.
    """
    where = listener(settings)
    s = settings.ssl
    if s.client_auth not in CLIENT_AUTH:
        raise ConfigError("ssl.client.auth", s.client_auth, "expected none, requested or "
                                                            "required")
    if where.scheme != "https":
        return where
    if not s.certfile:
        raise ConfigError("ssl.certfile", "", f"the https listener {where.url} needs the "
                                              "gateway's certificate (PEM)")
    _readable("ssl.certfile", s.certfile)
    if s.keyfile:
        _readable("ssl.keyfile", s.keyfile)
    if s.client_auth != "none" and not s.cafile:
        raise ConfigError("ssl.cafile", "", f"ssl.client.auth={s.client_auth} needs the CAs "
                                            "that client certificates chain to")
    if s.cafile:
        _readable("ssl.cafile", s.cafile)
    server_context(settings)  # a bad PEM, key or password fails now, naming its key
    return where


def server_context(settings: Any) -> ssl.SSLContext:
    """The gateway's TLS context from ``[ssl]`` (TLS 1.2 at least); raises ConfigError
    naming the key whose file does not load."""
    s = settings.ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # a callable, even for no password: with None OpenSSL would prompt on the terminal
        ctx.load_cert_chain(s.certfile, s.keyfile or None, lambda: s.keyfile_password)
    except (ssl.SSLError, OSError) as e:
        reason = str(getattr(e, "reason", None) or e)
        if _encrypted(s.keyfile or s.certfile):  # OpenSSL 3 says only "PEM lib" then
            raise ConfigError("ssl.keyfile.password", "(hidden)", "does not decrypt "
                              f"{s.keyfile or s.certfile}") from None
        key = "ssl.keyfile" if s.keyfile else "ssl.certfile"
        raise ConfigError(key, s.keyfile or s.certfile, "the certificate and key do not "
                          f"load: {reason}") from None
    ctx.verify_mode = CLIENT_AUTH[s.client_auth]
    if s.cafile:
        try:
            ctx.load_verify_locations(s.cafile)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError("ssl.cafile", s.cafile, f"not PEM CA certificates: {e}") from None
    return ctx


def _encrypted(path: str) -> bool:
    """Whether the PEM file at ``path`` holds an encrypted private key."""
    try:
        with open(path, "rb") as f:
            return b"ENCRYPTED" in f.read(1 << 20)
    except OSError:
        return False


def uvicorn_ssl(settings: Any) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments for the listener: none for http; for https
    ssl_certfile, ssl_keyfile, ssl_keyfile_password, ssl_ca_certs, ssl_cert_reqs and an
    ``ssl_context_factory`` that builds :func:`server_context` (TLS 1.2 floor).
    Raises ConfigError as :func:`check`."""
    if check(settings).scheme != "https":
        return {}
    s = settings.ssl
    return {"ssl_certfile": s.certfile, "ssl_keyfile": s.keyfile or None,
            "ssl_keyfile_password": s.keyfile_password or None,
            "ssl_ca_certs": s.cafile or None, "ssl_cert_reqs": int(CLIENT_AUTH[s.client_auth]),
            # uvicorn's own context would leave the floor to OpenSSL's configuration
            "ssl_context_factory": lambda _config, _default: server_context(settings)}


def peer_subject(transport: Any) -> Subject | None:
    """The subject of the client certificate a TLS connection presented *and* the
    handshake verified against ``ssl.cafile``, as (attribute, value) pairs in RFC 4514
    order, most specific first (``(("CN", "alice"), ("O", "acme"))``); None on a plain
    connection or when no verified certificate was presented.

    Attribute names are RFC 4514's (CN, O, OU, C, ST, L, DC, UID, STREET) or an
    OID's dotted form for others; a multi-valued RDN gives one pair per value.
    """
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    # getpeercert() is {} unless the certificate was verified (ssl.client.auth=none
    # verifies nothing): only then is the binary form read, for its exact subject
    if not ssl_object.getpeercert():
        return None
    der = ssl_object.getpeercert(binary_form=True)
    from cryptography import x509

    subject = x509.load_der_x509_certificate(der).subject
    return tuple((attr.rfc4514_attribute_name, str(attr.value))
                 for rdn in reversed(subject.rdns) for attr in rdn)
