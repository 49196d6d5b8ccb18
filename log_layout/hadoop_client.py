"""What Hadoop's Java client (Spark's) needs to act on HDFS as the store does: the
store's user and delegation token, as environment variables of its JVM.

:func:`hadoop_environment` gives, from the settings ``store.hdfs.*``:

``HADOOP_USER_NAME``
    ``store.hdfs.user``, the user of simple authentication: Hadoop's login takes it
    before the login name (``UserGroupInformation``). Kerberos logins ignore it.
``HADOOP_TOKEN``
    ``store.hdfs.delegation.token``. Hadoop's login (3.3 and later) adds the tokens
    this variable holds, comma-separated, in Hadoop's URL-safe string form, as it adds
    those of a ``HADOOP_TOKEN_FILE_LOCATION`` file. Two tokens: the one WebHDFS
    issued, as given (kind ``WEBHDFS delegation``: used on ``webhdfs://`` URLs), and
    the same identifier and password as kind ``HDFS_DELEGATION_TOKEN`` for the
    NameNode's RPC address, which is what Hadoop's RPC client looks for on ``hdfs://``
    URLs. A NameNode checks a token's identifier and password; kind and service only
    choose the connection a client sends it on.

The token string (Hadoop's ``Token.write``, base64url, padding optional)::

    vint n, identifier[n], vint m, password[m], Text kind, Text service
    Text = vint length, UTF-8 bytes;  vint = Hadoop's WritableUtils.writeVLong

The service of the RPC copy is Hadoop's ``SecurityUtil.buildTokenService``: the
NameNode's ``ip:port`` (default ``hadoop.security.token.service.use_ip=true``), also
given as ``host:port`` for clusters that set it false, and ``ha-hdfs:<name>`` for an
``hdfs://<name>`` URL without a port (an HA nameservice).

Why the environment, not Spark configurations or JVM system properties: Spark shows
its configurations and system properties in its UI, its event logs and ``spark-submit
--verbose``; it shows no environment variable.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from conf.errors import ConfigError

TOKEN_KEY = "store.hdfs.delegation.token"
#: the kind Hadoop's HDFS RPC client selects tokens by
HDFS_TOKEN_KIND = "HDFS_DELEGATION_TOKEN"
DEFAULT_RPC_PORT = 8020
_HDFS_SCHEMES = ("hdfs", "webhdfs", "swebhdfs")


def hadoop_environment(*, user: str, token: str, store_url: str,
                       locations: Iterable[str | None] = ()) -> dict[str, str]:
    """Environment variables for a JVM whose Hadoop client should act as the store's
    HDFS user (see the module docstring); {} when neither is set. ``locations``: other
    URLs the JVM will be given (a warehouse): an ``hdfs://`` one on the store's NameNode
    host gets the token for its RPC address too. Raises ConfigError (naming
    ``store.hdfs.delegation.token``, never its value) for a token that is not one."""
    env = {}
    if user:
        env["HADOOP_USER_NAME"] = user
    if token:
        identifier, password, _kind, _service = decode_token(token)
        copies = [encode_token(identifier, password, HDFS_TOKEN_KIND, service)
                  for service in rpc_services(store_url, locations)]
        env["HADOOP_TOKEN"] = ",".join([token, *copies])
    return env


def rpc_services(store_url: str, locations: Iterable[str | None] = ()) -> list[str]:
    """Hadoop's token services of the ``hdfs://`` URLs among the store's and
    ``locations`` on the store's NameNode host (the token is that NameNode's)."""
    store = urlsplit(store_url)
    if store.scheme not in _HDFS_SCHEMES or not store.hostname:
        return []
    out: list[str] = []
    for url in (store_url, *locations):
        parts = urlsplit(url or "")
        if parts.scheme != "hdfs" or parts.hostname != store.hostname:
            continue
        for service in _services(parts.hostname, parts.port):
            if service not in out:
                out.append(service)
    return out


def _services(host: str, port: int | None) -> list[str]:
    if port is None:  # an HA nameservice, or a NameNode on the default port
        names = [f"ha-hdfs:{host}"]
        port = DEFAULT_RPC_PORT
    else:
        names = []
    try:
        ip = str(ipaddress.ip_address(host))
        return [f"{ip}:{port}", *names]
    except ValueError:
        pass
    try:
        names.insert(0, f"{socket.gethostbyname(host)}:{port}")
    except OSError:  # not a host name here: a nameservice only the cluster knows
        pass
    return [*names, f"{host}:{port}"]


def decode_token(token: str) -> tuple[bytes, bytes, str, str]:
    """(identifier, password, kind, service) of a token string; raises ConfigError."""
    try:
        data = base64.urlsafe_b64decode(token.strip() + "=" * (-len(token.strip()) % 4))
        identifier, pos = _read_bytes(data, 0)
        password, pos = _read_bytes(data, pos)
        kind, pos = _read_bytes(data, pos)
        service, pos = _read_bytes(data, pos)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} bytes after the token")
        return identifier, password, kind.decode(), service.decode()
    except (ValueError, IndexError) as e:  # binascii.Error and UnicodeError are ValueErrors
        raise ConfigError(TOKEN_KEY, "<hidden>", "not a Hadoop delegation token string "
                          f"(as WebHDFS's GETDELEGATIONTOKEN gives): {e}") from None


def encode_token(identifier: bytes, password: bytes, kind: str, service: str) -> str:
    """Hadoop's URL-safe string of a token (``Token.encodeToUrlString``)."""
    data = b"".join(_vint(len(b)) + b for b in
                    (identifier, password, kind.encode(), service.encode()))
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _vint(n: int) -> bytes:
    """Hadoop's ``WritableUtils.writeVLong`` of a length (n >= 0): one byte up to 127,
    else a byte -112 - k and the k big-endian bytes of n."""
    if n <= 127:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([(-112 - len(body)) & 0xFF]) + body


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    """A vint length and that many bytes at ``pos``; (bytes, position after)."""
    first = data[pos] - 256 if data[pos] > 127 else data[pos]
    if first >= 0:
        n, pos = first, pos + 1
    elif -120 <= first < -112:
        size = -112 - first
        n, pos = int.from_bytes(data[pos + 1:pos + 1 + size], "big"), pos + 1 + size
    else:
        raise ValueError(f"a negative length at byte {pos}")
    if pos + n > len(data):
        raise ValueError(f"a length of {n} at byte {pos} runs past the end")
    return data[pos:pos + n], pos + n
