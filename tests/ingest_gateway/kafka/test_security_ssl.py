"""The Kafka listener's SSL scheme over real sockets: client certificates required,
the verified certificate's CN is the principal the ACLs are checked against (no
authentication method: the authorizer alone), a certificate from an unknown CA does
not connect."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bench.tls_certs import Pki
from jobs.gateway_process import wait_for
from log_layout import open_log
from log_layout.acls import AclBinding, add_acls
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess

TOPIC = "ssl-orders"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("kafka-ssl-pki"))


@pytest.fixture(scope="module")
def ssl_gateway(tmp_path_factory, pki):
    root = tmp_path_factory.mktemp("kafka-ssl")
    store = str(root / "store")
    log = open_log(store)
    log.create_topic(TOPIC, {"partitions": 1})
    add_acls(log.store, [AclBinding.create("Topic", TOPIC, "LITERAL", principal="User:alice",
                                           host="*", operation=op, permission="Allow")
                         for op in ("Read", "Write")]
             + [AclBinding.create("Group", "unused", "LITERAL", principal="User:alice",
                                  host="*", operation="Read", permission="Allow")])
    gw = KafkaGatewayProcess(store, log_path=str(root / "gateway.log"), settings={
        "authorizer.enabled": "true", **pki.ssl_settings("required")})
    gw.settings["gateway.kafka.listeners"] = f"SSL://127.0.0.1:{gw.kafka_port}"
    with gw:
        yield gw


def conf_for(gw, pki: Pki, cert: tuple[str, str], **more) -> dict:
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": pki.ca, "ssl.certificate.location": cert[0],
            "ssl.key.location": cert[1], "socket.timeout.ms": 10_000, **more}


def deliver(gw, pki, cert, value: bytes) -> list:
    errors: list = []
    p = Producer(conf_for(gw, pki, cert, **{"message.timeout.ms": 10_000}))
    p.produce(TOPIC, value, partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0
    return errors


def test_the_certificate_cn_is_the_principal(ssl_gateway, pki):
    alice, mallory = pki.client("alice"), pki.client("mallory")
    assert deliver(ssl_gateway, pki, alice, b"from alice") == [None]
    refused = deliver(ssl_gateway, pki, mallory, b"from mallory")
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    c = Consumer(conf_for(ssl_gateway, pki, alice, **{"group.id": "unused"}))
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got: list = []

        def one() -> bool:
            m = c.poll(0.5)
            if m is not None:
                got.append(m.error() or m.value())
            return bool(got)

        wait_for(one, timeout=30, what="a record")
        assert got == [b"from alice"]
    finally:
        c.close()


def test_a_certificate_from_an_unknown_ca_does_not_connect(ssl_gateway, pki):
    errors: list = []
    p = Producer(conf_for(ssl_gateway, pki, pki.stranger("eve"), error_cb=errors.append))
    wait_for(lambda: p.poll(0.2) is not None or bool(errors), timeout=30, what="an error")
    assert any(e.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
               for e in errors), errors
