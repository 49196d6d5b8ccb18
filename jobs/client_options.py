"""The flags of commands that talk to a gateway: TLS files and credentials.

``--ca-file`` (the CAs an ``https://`` gateway's certificate chains to),
``--cert-file`` / ``--key-file`` (a client certificate), ``--user NAME`` (HTTP Basic;
the password comes from ``SPARKLOG_PASSWORD`` or is asked on the terminal without
echo, never from an argument) and ``--token`` (a bearer token; ``SPARKLOG_TOKEN``
is better: an argument shows in ``ps``). :func:`client_kwargs` turns them into the
``Producer``/``Consumer``/``Session`` keyword arguments (kafka-python's names).
"""

from __future__ import annotations

import argparse
import os
from typing import Any, NamedTuple

from conf.errors import ConfigError

PASSWORD_ENV = "SPARKLOG_PASSWORD"
TOKEN_ENV = "SPARKLOG_TOKEN"


def add_client_flags(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the TLS and credential flags (module doc)."""
    g = parser.add_argument_group("TLS and authentication (gateways)")
    g.add_argument("--ca-file", metavar="PEM", default=argparse.SUPPRESS,
                   help="CA certificates an https gateway's certificate must chain to "
                        "(default: the system's)")
    g.add_argument("--cert-file", metavar="PEM", default=argparse.SUPPRESS,
                   help="a client certificate, for gateways that ask for one")
    g.add_argument("--key-file", metavar="PEM", default=argparse.SUPPRESS,
                   help="the client certificate's key (if not in --cert-file)")
    g.add_argument("--user", metavar="NAME", default=argparse.SUPPRESS,
                   help=f"HTTP Basic user; the password is ${PASSWORD_ENV}, else asked "
                        "on the terminal")
    g.add_argument("--token", metavar="JWT", default=argparse.SUPPRESS,
                   help=f"a bearer token (default: ${TOKEN_ENV}, which ps does not show)")


def _password(user: str) -> str:
    """``SPARKLOG_PASSWORD``, else asked on the terminal; ConfigError if neither."""
    password = os.environ.get(PASSWORD_ENV)
    if password:
        return password
    import getpass

    try:
        # getpass reads the terminal (/dev/tty), not stdin: produce's records stay intact
        with open("/dev/tty"):
            pass
        password = getpass.getpass(f"password for {user}: ")
    except OSError:
        raise ConfigError("--user", user, f"no terminal to ask the password on: set "
                                          f"{PASSWORD_ENV}") from None
    if not password:
        raise ConfigError("--user", user, "the password is empty")
    return password


def client_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The client keyword arguments of the flags given (module doc): ``ssl_cafile``,
    ``ssl_certfile``, ``ssl_keyfile``, ``sasl_plain_username``/``sasl_plain_password``
    or ``sasl_oauth_token``; {} for none. Raises ConfigError naming the flag of a file
    that is not there, or for --user with a token."""
    kw: dict[str, Any] = {}
    for flag, name in (("ca_file", "ssl_cafile"), ("cert_file", "ssl_certfile"),
                       ("key_file", "ssl_keyfile")):
        path = getattr(args, flag, None)
        if path is not None:
            if not os.path.isfile(path):
                raise ConfigError(f"--{flag.replace('_', '-')}", path, "no such file")
            kw[name] = path
    if "ssl_keyfile" in kw and "ssl_certfile" not in kw:
        raise ConfigError("--key-file", kw["ssl_keyfile"], "needs --cert-file")
    user = getattr(args, "user", None)
    token = getattr(args, "token", None) or os.environ.get(TOKEN_ENV) or None
    if user is not None and getattr(args, "token", None) is not None:
        raise ConfigError("--user", user, "give --user or --token, not both")
    if user is not None:
        if not user or ":" in user:
            raise ConfigError("--user", user, "a user name holds no ':'")
        kw["sasl_plain_username"], kw["sasl_plain_password"] = user, _password(user)
    elif token is not None:
        kw["sasl_oauth_token"] = token
    return kw


class Gateways(NamedTuple):
    """The gateways a command talks to: ``urls`` (``jobs.cli.gateway_url``'s
    comma-separated list) and ``security`` (:func:`client_kwargs`)."""

    urls: str
    security: dict[str, Any]

    def session(self, url: str, *, timeout_s: float) -> Any:
        """A Session to ``url`` with these TLS files and credentials and ``timeout_s``
        to connect and to read (an admin command says "no gateway" within seconds)."""
        from ingest_gateway.protocol.session import Session

        return Session(url, connect_timeout_s=timeout_s, read_timeout_s=timeout_s,
                       **self.security)


def gateways(args: argparse.Namespace, settings: Any) -> Gateways:
    """The ``--bootstrap-server`` gateways (else the settings') with this command's
    TLS and credential flags. Raises ConfigError as ``gateway_url`` and
    :func:`client_kwargs`."""
    from jobs.cli import gateway_url

    return Gateways(gateway_url(args, settings), client_kwargs(args))
