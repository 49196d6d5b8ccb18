"""SASL OAUTHBEARER on a SASL_PLAINTEXT Kafka listener, over real sockets: a JWT checked
as an HTTP bearer token logs confluent-kafka in (principal: its ``sub``), the ACLs apply
to that principal, and a token signed by another key is an authentication error."""

from __future__ import annotations

import time

import jwt
import pytest
from confluent_kafka import KafkaError, Producer

from bench.tls_certs import new_key, public_pem
from jobs.gateway_process import wait_for
from log_layout import open_log
from log_layout.acls import AclBinding, add_acls
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess

TOPIC = "oauth-orders"


@pytest.fixture(scope="module")
def keys():
    return new_key(), new_key()


@pytest.fixture(scope="module")
def oauth_gateway(tmp_path_factory, keys):
    root = tmp_path_factory.mktemp("kafka-oauth")
    (root / "issuer.pem").write_bytes(public_pem(keys[0]))
    store = str(root / "store")
    log = open_log(store)
    log.create_topic(TOPIC, {"partitions": 1})
    add_acls(log.store, [AclBinding.create("Topic", TOPIC, "LITERAL", principal="User:carol",
                                           host="*", operation="Write", permission="Allow")])
    gw = KafkaGatewayProcess(store, log_path=str(root / "gateway.log"), settings={
        "authentication.method": "bearer",
        "authentication.jwt.public.key.file": str(root / "issuer.pem"),
        "authorizer.enabled": "true"})
    gw.settings["gateway.kafka.listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{gw.kafka_port}"
    with gw:
        yield gw


def producer(gw, key, sub: str, errors: list) -> Producer:
    def token(_config):
        now = time.time()
        return jwt.encode({"sub": sub, "exp": int(now) + 300, "iat": int(now)}, key,
                          algorithm="ES256"), now + 300

    return Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "OAUTHBEARER", "oauth_cb": token,
                     "message.timeout.ms": 10_000, "error_cb": errors.append})


def deliver(p: Producer) -> list:
    got: list = []
    p.produce(TOPIC, b"v", partition=0, on_delivery=lambda err, _m: got.append(err))
    assert p.flush(30) == 0
    return got


def test_a_good_token_logs_in_and_the_acls_apply_to_its_subject(oauth_gateway, keys):
    assert deliver(producer(oauth_gateway, keys[0], "carol", [])) == [None]
    refused = deliver(producer(oauth_gateway, keys[0], "dave", []))
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused


def test_a_token_signed_by_another_key_is_an_authentication_error(oauth_gateway, keys):
    errors: list = []
    p = producer(oauth_gateway, keys[1], "carol", errors)
    wait_for(lambda: p.poll(0.2) is not None or bool(errors), timeout=30,
             what="an authentication error")
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
