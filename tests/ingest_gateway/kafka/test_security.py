"""Security on the Kafka listener, over real sockets: a gateway with a SASL_SSL listener
(certificates made in the test), SASL PLAIN against its password file and the ACL
authorizer on. confluent-kafka and kafka-python log in, produce and consume; a wrong
password is an authentication error; a request before the login closes the
connection; the ACLs are Kafka's per API (Write to produce, Read to fetch, Describe
for Metadata and ListOffsets); a super user may do everything. Settings that would let
a client bypass the login refuse to start."""

from __future__ import annotations

import asyncio
import socket
import ssl
import types
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

import conf
from bench.tls_certs import Pki
from ingest_gateway.kafka.listener import KafkaListener
from ingest_gateway.security import passwords
from jobs.gateway_process import wait_for
from log_layout import open_log
from log_layout.acls import AclBinding, add_acls
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, frame, read_frame

PASSWORD = "s3cret-kafka-pw"
TOPIC, SECRET = "sec-orders", "sec-hidden"


def allow(rtype: str, name: str, user: str, op: str) -> AclBinding:
    return AclBinding.create(rtype, name, "LITERAL", principal=f"User:{user}", host="*",
                             operation=op, permission="Allow")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("kafka-pki"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory, pki):
    """A gateway whose Kafka listener is SASL_SSL, with users admin (super user),
    writer (Write on TOPIC), reader (Read on TOPIC) and nobody (no ACL)."""
    root = tmp_path_factory.mktemp("kafka-sec")
    store = str(root / "store")
    log = open_log(store)
    for name in (TOPIC, SECRET):
        log.create_topic(name, {"partitions": 1})
    pwfile = str(root / "passwords")
    for user in ("admin", "writer", "reader", "nobody"):
        passwords.add(pwfile, user, PASSWORD)
    add_acls(log.store, [allow("Topic", TOPIC, "writer", "Write"),
                         allow("Topic", TOPIC, "reader", "Read"),
                         allow("Group", "unused", "writer", "Read"),
                         allow("Group", "unused", "reader", "Read"),
                         allow("Topic", SECRET, "admin", "Read")])
    gw = KafkaGatewayProcess(store, log_path=str(root / "gateway.log"), settings={
        "authentication.method": "basic", "authentication.password.file": pwfile,
        "authorizer.enabled": "true", "authorizer.super.users": "User:admin",
        **pki.ssl_settings("none")})
    gw.settings["gateway.kafka.listeners"] = f"SASL_SSL://127.0.0.1:{gw.kafka_port}"
    with gw:
        yield gw


def client_conf(gw, pki: Pki, user: str, password: str = PASSWORD, **more) -> dict:
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": pki.ca, "socket.timeout.ms": 10_000, **more}


def produce(gw, pki, user: str, topic: str, values: list[bytes]) -> list:
    """Deliver ``values`` as ``user``; the delivery errors (None: delivered)."""
    p = Producer(client_conf(gw, pki, user, **{"message.timeout.ms": 15_000, "acks": "all"}))
    errors: list = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0
    return errors


def consume(gw, pki, user: str, topic: str, n: int) -> tuple[list[bytes], list]:
    """Up to ``n`` values from offset 0 as ``user`` (assigned, no group); and the
    consumer errors met on the way."""
    c = Consumer(client_conf(gw, pki, user, **{"group.id": "unused", "enable.auto.commit":
                                                False}))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got, errors = [], []

        def progress() -> bool:
            m = c.poll(0.5)
            if m is not None:
                (errors if m.error() else got).append(m.error() or m.value())
            return len(got) >= n or bool(errors)

        wait_for(progress, timeout=30, what="records or an error")
        return got, errors
    finally:
        c.close()


def test_a_good_sasl_ssl_login_produces_and_consumes(secured, pki):
    values = [f"v{i}".encode() for i in range(5)]
    assert produce(secured, pki, "admin", TOPIC, values) == [None] * 5
    got, errors = consume(secured, pki, "admin", TOPIC, 5)
    assert errors == [] and got[:5] == values


def test_a_wrong_password_is_an_authentication_error(secured, pki):
    errors: list = []
    p = Producer(client_conf(secured, pki, "admin", "wrong-password",
                             error_cb=errors.append))
    try:
        p.poll(0)
        wait_for(lambda: p.poll(0.2) is not None and bool(errors) or bool(errors),
                 timeout=30, what="an authentication error")
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    finally:
        p.flush(0)


def tls_socket(gw, pki) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=pki.ca)
    raw = socket.create_connection(("127.0.0.1", gw.kafka_port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def test_before_the_login_only_api_versions_and_sasl_are_served(secured, pki):
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    with tls_socket(secured, pki) as s:
        _, answer = call(s, ApiVersionsRequest(client_software_name="t",
                                               client_software_version="1"), 3)
        offered = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert offered[17] == (0, 1) and offered[36] == (0, 2)
        s.sendall(frame(MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(
            int=0), name=TOPIC),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), 12))
        assert read_frame(s) is None  # closed, not answered


def test_a_failed_raw_login_answers_58_then_closes(secured, pki):
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    with tls_socket(secured, pki) as s:
        _, hs = call(s, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
        assert int(hs.error_code) == 33 and hs.mechanisms == ("PLAIN",)
        assert read_frame(s) is None
    with tls_socket(secured, pki) as s:
        _, hs = call(s, SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert int(hs.error_code) == 0
        _, auth = call(s, SaslAuthenticateRequest(auth_bytes=b"\0admin\0nope"), 2)
        assert int(auth.error_code) == 58 and "nope" not in (auth.error_message or "")
        assert read_frame(s) is None


def test_write_without_read_produces_but_cannot_consume(secured, pki):
    assert produce(secured, pki, "writer", TOPIC, [b"w1"]) == [None]
    got, errors = consume(secured, pki, "writer", TOPIC, 1)
    assert got == [] and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors


def test_read_without_write_consumes_but_cannot_produce(secured, pki):
    assert produce(secured, pki, "admin", TOPIC, [b"r1"]) == [None]
    got, errors = consume(secured, pki, "reader", TOPIC, 1)
    assert errors == [] and len(got) == 1
    refused = produce(secured, pki, "reader", TOPIC, [b"no"])
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused


def test_metadata_leaves_out_topics_not_described(secured, pki):
    c = Consumer(client_conf(secured, pki, "reader", **{"group.id": "unused"}))
    try:
        topics = c.list_topics(timeout=20).topics
        assert TOPIC in topics and SECRET not in topics
        named = c.list_topics(SECRET, timeout=20).topics[SECRET]
        assert named.error is not None \
            and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_kafka_python_logs_in_with_sasl_plain(secured, pki):
    kafka = pytest.importorskip("kafka")
    creds = dict(bootstrap_servers=secured.bootstrap, security_protocol="SASL_SSL",
                 sasl_mechanism="PLAIN", sasl_plain_username="admin",
                 sasl_plain_password=PASSWORD, ssl_cafile=pki.ca, ssl_check_hostname=False)
    producer = kafka.KafkaProducer(acks="all", **creds)
    try:
        meta = producer.send(TOPIC, b"from kafka-python", partition=0).get(timeout=30)
        assert meta.offset >= 0
    finally:
        producer.close(5)
    wrong = dict(creds, sasl_plain_password="wrong", bootstrap_timeout_ms=5000)
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(**wrong).close(1)


def logged_in(gw, pki, user: str) -> ssl.SSLSocket:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    s = tls_socket(gw, pki)
    assert int(call(s, SaslHandshakeRequest(mechanism="PLAIN"), 1)[1].error_code) == 0
    auth = call(s, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{PASSWORD}".encode()), 2)[1]
    assert int(auth.error_code) == 0
    return s


def test_denials_are_answered_with_kafkas_codes(secured, pki):
    import datetime

    from kio.schema.delete_topics.v5.request import DeleteTopicsRequest
    from kio.schema.heartbeat.v4.request import HeartbeatRequest

    delete = DeleteTopicsRequest(topic_names=(TOPIC,), timeout=datetime.timedelta(seconds=5))
    with logged_in(secured, pki, "writer") as s:  # Write, not Delete: per topic, kept open
        (answer,) = call(s, delete, 5)[1].responses
        assert int(answer.error_code) == 29  # TOPIC_AUTHORIZATION_FAILED
        assert int(call(s, delete, 5)[1].responses[0].error_code) == 29
    assert TOPIC in open_log(secured.store_url).topics()
    beat = HeartbeatRequest(group_id="someone-elses", generation_id=1, member_id="m",
                            group_instance_id=None)
    with logged_in(secured, pki, "reader") as s:  # no ACL on that group: Kafka's code
        _, answer = call(s, beat, 4)
        assert int(answer.error_code) == 30  # GROUP_AUTHORIZATION_FAILED
    with logged_in(secured, pki, "admin") as s:  # a super user is answered
        _, answer = call(s, beat, 4)
        assert int(answer.error_code) != 0  # not a member: the group's own error


@pytest.mark.parametrize("listener, more, key", [
    ("PLAINTEXT", {"authentication.method": "basic"}, "gateway.kafka.listeners"),
    ("SASL_PLAINTEXT", {}, "authentication.method"),
    ("SSL", {}, "ssl.certfile"),
    ("SSL", {"authentication.method": "basic", "ssl.client.auth": "requested"},
     "ssl.client.auth"),
])
def test_settings_that_would_bypass_the_login_refuse_to_start(tmp_path, pki, listener, more,
                                                              key):
    pwfile = str(tmp_path / "pw")
    passwords.add(pwfile, "admin", PASSWORD)
    ssl_settings = pki.ssl_settings("none") if listener == "SSL" and more else {}
    settings = conf.load({"gateway.kafka.listeners": f"{listener}://127.0.0.1:0",
                          "authentication.password.file": pwfile, **ssl_settings, **more},
                         environ={})
    with pytest.raises(conf.ConfigError) as e:
        asyncio.run(KafkaListener.start(types.SimpleNamespace(settings=settings,
                                                              authorizer=None,
                                                              verifiers=None)))
    assert e.value.key == key


def test_a_group_consumer_without_read_on_its_group_gets_group_authorization_failed(
        secured, pki):
    c = Consumer(client_conf(secured, pki, "reader", **{"group.id": "not-readers"}))
    try:
        c.subscribe([TOPIC])
        errors: list = []

        def failed() -> bool:
            m = c.poll(0.5)
            if m is not None and m.error():
                errors.append(m.error())
            return bool(errors)

        wait_for(failed, timeout=30, what="a consumer error")
        assert errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, errors
    finally:
        c.close()
