"""A real gateway with a SASL_PLAINTEXT Kafka listener (PLAIN against its password file,
the ACL authorizer on), and the clients of its tests: a raw socket logged in as a user,
confluent-kafka settings for a user.

``sasl_gateway(root, users=..., acls=..., topics=...)`` makes the store (topics, ACLs,
and ``quotas`` if given), the password file and the gateway; ``admin`` is always a
user and the super user.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Mapping

from ingest_gateway.security import passwords
from log_layout import open_log, quotas as quota_docs
from log_layout.acls import AclBinding, add_acls
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect

PASSWORD = "s3cret-kafka-pw"


def allow(rtype: str, name: str, user: str, op: str, pattern: str = "LITERAL") -> AclBinding:
    return AclBinding.create(rtype, name, pattern, principal=f"User:{user}", host="*",
                             operation=op, permission="Allow")


@contextlib.contextmanager
def sasl_gateway(root, *, users: tuple[str, ...], acls: list[AclBinding],
                 topics: Mapping[str, int], quotas: Mapping[str, Mapping[str, int]] = {},
                 ) -> Iterator[KafkaGatewayProcess]:
    store = str(root / "store")
    log = open_log(store)
    for name, partitions in topics.items():
        log.create_topic(name, {"partitions": partitions})
    pwfile = str(root / "passwords")
    for user in ("admin", *users):
        passwords.add(pwfile, user, PASSWORD)
    add_acls(log.store, acls)
    for who, configs in quotas.items():
        quota_docs.alter_quotas(log.store, who, add=dict(configs))
    gw = KafkaGatewayProcess(store, log_path=str(root / "gateway.log"), settings={
        "authentication.method": "basic", "authentication.password.file": pwfile,
        "authorizer.enabled": "true", "authorizer.super.users": "User:admin"})
    gw.settings["gateway.kafka.listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{gw.kafka_port}"
    with gw:
        yield gw


def client_conf(gw: KafkaGatewayProcess, user: str, **more) -> dict:
    """confluent-kafka settings logging in as ``user``."""
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORD,
            "socket.timeout.ms": 10_000, **more}


def logged_in(gw: KafkaGatewayProcess, user: str) -> socket.socket:
    """A raw connection after a SASL PLAIN login as ``user``."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    s = connect(gw)
    assert int(call(s, SaslHandshakeRequest(mechanism="PLAIN"), 1)[1].error_code) == 0
    auth = call(s, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{PASSWORD}".encode()), 2)[1]
    assert int(auth.error_code) == 0
    return s


def still_serves(s: socket.socket) -> bool:
    """Whether the connection answers an ApiVersions (it was not closed)."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    answer = call(s, ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                  3, correlation_id=99)
    return answer[0] == 99 and int(answer[1].error_code) == 0
