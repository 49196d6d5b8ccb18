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


def test_an_oauthbearer_session_ends_with_its_token(oauth_gateway, keys):
    """KIP-368: the session lifetime told is the token's remaining life (re-authentication
    is off on this listener), and a request after it closes the connection."""
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from tests.ingest_gateway.kafka.kafka_gateway import call, connect, frame, read_frame

    now = int(time.time())
    token = jwt.encode({"sub": "carol", "exp": now + 3, "iat": now}, keys[0], algorithm="ES256")
    s = connect(oauth_gateway)
    assert int(call(s, SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)[1].error_code) == 0
    answer = call(s, SaslAuthenticateRequest(
        auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()), 2)[1]
    assert int(answer.error_code) == 0
    lifetime_ms = answer.session_lifetime.total_seconds() * 1000
    assert 0 < lifetime_ms <= 3000, lifetime_ms
    req = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)
    assert call(s, req, 12)[0] == 7  # served while the token lives
    time.sleep(lifetime_ms / 1000 + 0.5)
    s.sendall(frame(req, 12))
    s.settimeout(10)
    assert read_frame(s) is None  # closed: the session ended with its token
