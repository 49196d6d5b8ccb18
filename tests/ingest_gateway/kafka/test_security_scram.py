"""SCRAM-SHA-256/512, SaslHandshake v0 and KIP-368 re-authentication on the Kafka
listener, over real sockets against a gateway process.

confluent-kafka (librdkafka) logs in with SCRAM-SHA-256 and -512, over SASL_PLAINTEXT
and SASL_SSL (a listener offering SCRAM alone refuses PLAIN) (credentials written
to the store before the gateway starts, and through AlterUserScramCredentials with
its AdminClient), produces and consumes, and keeps working past its session lifetime
(it re-authenticates). Raw exchanges (scramp's RFC 5802 client, then bent) show the
refusals: a wrong proof, a changed nonce, truncated and garbage messages, a third
step, an unknown user that fails like a wrong password; the bare-token framing of
SaslHandshake v0; a session that is not re-authenticated in time closes; a
re-authentication as someone else fails.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest
import scramp
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as Handshake0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from ingest_gateway.security import passwords
from ingest_gateway.security.scram import credential
from jobs.gateway_process import wait_for
from log_layout import open_log, scram as scram_docs
from tests.ingest_gateway.kafka.kafka_gateway import (KafkaGatewayProcess, call, connect,
                                                      frame, read_frame)

PASSWORD = "scram-pw-1"
TOPIC = "scram-topic"
REAUTH_MS = 4000
REFRESH_MS = 200


@pytest.fixture(scope="module")
def scram_gw(tmp_path_factory):
    """A SASL_PLAINTEXT gateway offering PLAIN and SCRAM, sessions of REAUTH_MS; users
    alice (both SCRAM mechanisms, written to the store) and bob (PLAIN only)."""
    root = tmp_path_factory.mktemp("kafka-scram")
    store = str(root / "store")
    log = open_log(store)
    log.create_topic(TOPIC, {"partitions": 1})
    scram_docs.alter(log.store, upsert={
        ("alice", m): credential(m, PASSWORD, iterations=4096)
        for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
    pwfile = str(root / "passwords")
    passwords.add(pwfile, "bob", PASSWORD)
    gw = KafkaGatewayProcess(store, log_path=str(root / "gateway.log"), settings={
        "authentication.method": "basic,scram", "authentication.password.file": pwfile,
        "authorizer.refresh.ms": str(REFRESH_MS),
        "gateway.kafka.connections.max.reauth.ms": str(REAUTH_MS)})
    gw.settings["gateway.kafka.listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{gw.kafka_port}"
    with gw:
        yield gw


def conf(gw, mechanism: str, user: str = "alice", password: str = PASSWORD, **more) -> dict:
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "socket.timeout.ms": 10_000, **more}


def produce_one(gw, mechanism: str, value: bytes, **more) -> None:
    p = Producer(conf(gw, mechanism, **{"message.timeout.ms": 15_000, **more}))
    errors: list = []
    p.produce(TOPIC, value, partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0
    assert errors == [None]


def read_all(gw, mechanism: str, **more) -> list[bytes]:
    c = Consumer(conf(gw, mechanism, **{"group.id": "g-" + uuid.uuid4().hex,
                                        "enable.auto.commit": False, **more}))
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[bytes] = []
        while (m := c.poll(3)) is not None:
            assert not m.error(), m.error()
            got.append(m.value())
        return got
    finally:
        c.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_librdkafka_logs_in_with_scram_and_produces_and_consumes(scram_gw, mechanism):
    value = f"by-{mechanism}".encode()
    produce_one(scram_gw, mechanism, value)
    assert value in read_all(scram_gw, mechanism)


def test_a_wrong_scram_password_is_an_authentication_error(scram_gw):
    errors: list = []
    p = Producer(conf(scram_gw, "SCRAM-SHA-256", password="wrong", error_cb=errors.append))
    wait_for(lambda: p.poll(0.2) is not None and False or bool(errors), timeout=30,
             what="an authentication error")
    assert any("Authentication failed" in str(e) or e.code() == -169 for e in errors), errors


# -- raw exchanges ------------------------------------------------------------------------
def handshake(s: socket.socket, mechanism: str) -> int:
    return int(call(s, SaslHandshakeRequest(mechanism=mechanism), 1)[1].error_code)


def authenticate(s: socket.socket, token: bytes):
    return call(s, SaslAuthenticateRequest(auth_bytes=token), 2)[1]


def scram_login(gw, user: str = "alice", password: str = PASSWORD,
                mechanism: str = "SCRAM-SHA-256") -> tuple[socket.socket, object]:
    """A raw connection logged in with SCRAM; (socket, the final SaslAuthenticate answer)."""
    s = connect(gw)
    assert handshake(s, mechanism) == 0
    client = scramp.ScramClient([mechanism], user, password)
    first = authenticate(s, client.get_client_first().encode())
    assert int(first.error_code) == 0
    client.set_server_first(first.auth_bytes.decode())
    final = authenticate(s, client.get_client_final().encode())
    assert int(final.error_code) == 0, final.error_message
    client.set_server_final(final.auth_bytes.decode())  # checks the server's signature
    return s, final


def serves(s: socket.socket) -> bool:
    answer = call(s, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False), 12)
    return any(t.name == TOPIC for t in answer[1].topics)


def closed(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        return read_frame(s) is None
    except ConnectionError:
        return True


def test_a_raw_scram_login_proves_the_server_too_and_tells_the_session_lifetime(scram_gw):
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        s, final = scram_login(scram_gw, mechanism=mechanism)
        assert final.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        assert serves(s)
        s.close()


def _first_answer(s: socket.socket, client: scramp.ScramClient) -> str:
    answer = authenticate(s, client.get_client_first().encode())
    assert int(answer.error_code) == 0
    return answer.auth_bytes.decode()


def _refused(s: socket.socket, token: bytes) -> None:
    answer = authenticate(s, token)
    assert int(answer.error_code) == 58, answer
    assert "Authentication failed" in answer.error_message
    assert PASSWORD not in answer.error_message
    assert closed(s)


@pytest.mark.parametrize("bend", ["wrong-proof", "other-nonce", "no-proof", "truncated-final",
                                  "garbage-final", "not-utf8"])
def test_a_bent_client_final_fails_and_closes(scram_gw, bend):
    s = connect(scram_gw)
    assert handshake(s, "SCRAM-SHA-256") == 0
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", PASSWORD)
    client.set_server_first(_first_answer(s, client))
    final = client.get_client_final()
    without_proof, _, proof = final.rpartition(",p=")
    bent = {
        "wrong-proof": f"{without_proof},p={'A' * len(proof)}",
        "other-nonce": final.replace(",r=", ",r=x", 1),
        "no-proof": without_proof,
        "truncated-final": final[:len(final) // 2],
        "garbage-final": "\x00,,=,=,p=,r=",
        "not-utf8": None,
    }[bend]
    _refused(s, b"\xff\xfe\xfd" if bent is None else bent.encode())


@pytest.mark.parametrize("first", [b"", b"n,,", b"n,,n=alice", b"x,,n=alice,r=abc",
                                   b"n,,n=alice,r=abc,tokenauth=true",
                                   b"p=tls-unique,,n=alice,r=abc", b"\xff" * 40,
                                   b"n,,n=" + b"a" * 70_000 + b",r=abc"],
                         ids=["empty", "gs2-only", "no-nonce", "bad-gs2", "extension",
                              "channel-binding", "not-utf8", "over-64KiB"])
def test_a_malformed_client_first_fails_and_closes(scram_gw, first):
    s = connect(scram_gw)
    assert handshake(s, "SCRAM-SHA-512") == 0
    _refused(s, first)


def test_an_unknown_user_gets_a_challenge_and_fails_like_a_wrong_password(scram_gw):
    answers = []
    for user, password in (("nobody-here", PASSWORD), ("alice", "not-it")):
        s = connect(scram_gw)
        assert handshake(s, "SCRAM-SHA-256") == 0
        client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
        server_first = _first_answer(s, client)
        assert ",i=4096" in server_first
        client.set_server_first(server_first)
        answer = authenticate(s, client.get_client_final().encode())
        answers.append((int(answer.error_code), answer.error_message))
        assert closed(s)
    assert answers[0] == answers[1] and answers[0][0] == 58
    # the made-up salt is stable, so asking twice does not tell either
    salts = set()
    for _ in range(2):
        s = connect(scram_gw)
        handshake(s, "SCRAM-SHA-256")
        salts.add(_first_answer(s, scramp.ScramClient(["SCRAM-SHA-256"], "nobody-here",
                                                      "x")).split(",s=")[1].split(",")[0])
        s.close()
    assert len(salts) == 1


def test_a_third_step_and_a_request_before_the_end_are_refused(scram_gw):
    s, _ = scram_login(scram_gw)
    answer = authenticate(s, b"c=biws,r=again")  # the exchange is over: out of turn
    assert int(answer.error_code) == 34
    assert closed(s)
    s = connect(scram_gw)
    assert handshake(s, "SCRAM-SHA-256") == 0
    _first_answer(s, scramp.ScramClient(["SCRAM-SHA-256"], "alice", PASSWORD))
    s.sendall(frame(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False), 12))
    assert closed(s)  # before the login ends, as before it begins


# -- SaslHandshake v0: bare tokens ------------------------------------------------------
def bare(s: socket.socket, token: bytes) -> bytes | None:
    s.sendall(struct.pack(">i", len(token)) + token)
    return read_frame(s)


def test_handshake_v0_then_bare_plain_and_scram_tokens(scram_gw):
    s = connect(scram_gw)
    assert int(call(s, Handshake0(mechanism="PLAIN"), 0)[1].error_code) == 0
    assert bare(s, f"\0bob\0{PASSWORD}".encode()) == b""  # PLAIN's empty answer
    assert serves(s)
    s.close()
    s = connect(scram_gw)
    assert int(call(s, Handshake0(mechanism="SCRAM-SHA-512"), 0)[1].error_code) == 0
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", PASSWORD)
    client.set_server_first(bare(s, client.get_client_first().encode()).decode())
    client.set_server_final(bare(s, client.get_client_final().encode()).decode())
    assert serves(s)
    s.close()


def test_handshake_v0_failures_close_without_an_answer(scram_gw):
    s = connect(scram_gw)
    assert int(call(s, Handshake0(mechanism="PLAIN"), 0)[1].error_code) == 0
    assert bare(s, "\0bob\0wrong".encode()) is None
    s = connect(scram_gw)
    assert int(call(s, Handshake0(mechanism="PLAIN"), 0)[1].error_code) == 0
    s.sendall(struct.pack(">i", 1 << 20))  # a token larger than any SASL message
    assert closed(s)


# -- KIP-368 re-authentication -------------------------------------------------------------
def test_a_session_not_reauthenticated_in_time_is_closed(scram_gw):
    s, _ = scram_login(scram_gw)
    assert serves(s)
    time.sleep(REAUTH_MS / 1000 + 0.5)
    s.sendall(frame(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False), 12))
    assert closed(s)


def test_a_reauthentication_extends_the_session_and_keeps_the_principal(scram_gw):
    s, _ = scram_login(scram_gw)
    deadline = time.monotonic() + REAUTH_MS / 1000 * 2
    while time.monotonic() < deadline:  # re-authenticate at ~half the lifetime, twice over
        time.sleep(REAUTH_MS / 2000)
        assert handshake(s, "SCRAM-SHA-256") == 0
        client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", PASSWORD)
        client.set_server_first(_first_answer(s, client))
        final = authenticate(s, client.get_client_final().encode())
        assert int(final.error_code) == 0
        assert serves(s)
    s.close()
    # as someone else: refused, and closed
    s, _ = scram_login(scram_gw)
    assert handshake(s, "SCRAM-SHA-256") == 0
    scram_docs_user = "carol-" + uuid.uuid4().hex[:6]
    scram_docs.alter(open_log(scram_gw.store_url).store, upsert={
        (scram_docs_user, "SCRAM-SHA-256"): credential("SCRAM-SHA-256", PASSWORD)})
    time.sleep(REFRESH_MS * 2 / 1000)
    client = scramp.ScramClient(["SCRAM-SHA-256"], scram_docs_user, PASSWORD)
    client.set_server_first(_first_answer(s, client))
    answer = authenticate(s, client.get_client_final().encode())
    assert int(answer.error_code) == 58 and "principal" in answer.error_message
    assert closed(s)
    # with another mechanism: refused
    s, _ = scram_login(scram_gw)
    assert handshake(s, "SCRAM-SHA-512") == 33
    assert closed(s)


@pytest.mark.slow  # three session lifetimes of waiting (~10 s)
def test_librdkafka_reauthenticates_past_the_session_lifetime(scram_gw):
    p = Producer(conf(scram_gw, "SCRAM-SHA-512", **{"message.timeout.ms": 15_000}))
    errors: list = []
    for i in range(3):  # across two lifetimes, on the same connection
        p.produce(TOPIC, f"reauth-{i}".encode(), partition=0,
                  on_delivery=lambda err, _m: errors.append(err))
        assert p.flush(30) == 0
        time.sleep(REAUTH_MS / 1000 * 0.8)
    assert errors == [None, None, None]


# -- AlterUserScramCredentials / DescribeUserScramCredentials --------------------------------
def test_admin_client_alters_and_describes_credentials_that_then_log_in(scram_gw):
    admin = AdminClient(conf(scram_gw, "PLAIN", "bob"))
    user = "dave-" + uuid.uuid4().hex[:6]
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                               8192), b"dave-pw")])
    for f in futures.values():
        f.result(timeout=30)
    described = admin.describe_user_scram_credentials([user])[user].result(timeout=30)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256,
                                                              8192)]
    time.sleep(REFRESH_MS * 2 / 1000)
    p = Producer(conf(scram_gw, "SCRAM-SHA-256", user, "dave-pw",
                      **{"message.timeout.ms": 15_000}))
    p.produce(TOPIC, b"by-dave", partition=0)
    assert p.flush(30) == 0
    stored = scram_docs.describe(open_log(scram_gw.store_url).store).users[user]
    assert set(stored) == {"SCRAM-SHA-256"}
    # too few iterations is Kafka's UNACCEPTABLE_CREDENTIAL; deleting what is not there
    # RESOURCE_NOT_FOUND; deleting what is there works
    bad = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("erin", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_256, 1000), b"pw")])
    with pytest.raises(KafkaException, match="(?i)iterations"):
        bad["erin"].result(timeout=30)
    missing = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)])
    with pytest.raises(KafkaException, match="(?i)not exist"):
        missing[user].result(timeout=30)
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)]).values():
        f.result(timeout=30)
    assert user not in scram_docs.describe(open_log(scram_gw.store_url).store).users
    with pytest.raises(KafkaException, match="(?i)not exist"):
        admin.describe_user_scram_credentials([user])[user].result(timeout=30)


# -- SASL_SSL ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scram_ssl_gw(tmp_path_factory):
    """A SASL_SSL gateway offering SCRAM only (no password file at all)."""
    from bench.tls_certs import Pki

    root = tmp_path_factory.mktemp("kafka-scram-ssl")
    pki = Pki(root / "pki")
    store = str(root / "store")
    log = open_log(store)
    log.create_topic(TOPIC, {"partitions": 1})
    scram_docs.alter(log.store, upsert={("alice", "SCRAM-SHA-512"):
                                        credential("SCRAM-SHA-512", PASSWORD, iterations=8192)})
    gw = KafkaGatewayProcess(store, log_path=str(root / "gateway.log"), settings={
        "authentication.method": "scram", **pki.ssl_settings("none")})
    gw.settings["gateway.kafka.listeners"] = f"SASL_SSL://127.0.0.1:{gw.kafka_port}"
    with gw:
        gw.pki = pki
        yield gw


def test_scram_over_sasl_ssl(scram_ssl_gw):
    gw = scram_ssl_gw
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": gw.pki.ca}
    produce_one(gw, "SCRAM-SHA-512", b"over-tls", **tls)
    assert b"over-tls" in read_all(gw, "SCRAM-SHA-512", **tls)
    errors: list = []
    p = Producer(conf(gw, "SCRAM-SHA-512", password="wrong", error_cb=errors.append, **tls))
    wait_for(lambda: p.poll(0.2) is not None and False or bool(errors), timeout=30,
             what="an authentication error")
    # PLAIN is not offered where only scram is on
    errors = []
    p = Producer(conf(gw, "PLAIN", error_cb=errors.append, **tls))
    wait_for(lambda: p.poll(0.2) is not None and False or bool(errors), timeout=30,
             what="a mechanism error")
    assert any("PLAIN" in str(e) or "mechanism" in str(e).lower() for e in errors), errors


def test_hostile_scram_admin_values_get_kafkas_codes(scram_gw):
    """AlterUserScramCredentials with absurd values, raw: each user its own code, the
    connection kept; nothing stored for them."""
    from kio.schema.alter_user_scram_credentials.v0 import request as alter
    from kio.schema.describe_user_scram_credentials.v0 import request as describe

    def up(name, mechanism=1, iterations=4096, salt=b"s" * 16, salted=b"k" * 32):
        return alter.ScramCredentialUpsertion(name=name, mechanism=mechanism,
                                              iterations=iterations, salt=salt,
                                              salted_password=salted)

    s, _ = scram_login(scram_gw)
    req = alter.AlterUserScramCredentialsRequest(deletions=(
        alter.ScramCredentialDeletion(name="ghost", mechanism=2),
        alter.ScramCredentialDeletion(name="", mechanism=1),
        alter.ScramCredentialDeletion(name="weird", mechanism=-1),
    ), upsertions=(
        up("huge-iter", iterations=2**31 - 1), up("neg-iter", iterations=-5),
        up("no-salt", salt=b""), up("big-salt", salt=b"x" * 5000),
        up("no-key", salted=b""), up("mech0", mechanism=0), up("mech9", mechanism=9),
        up("twice"), up("twice"), up("fine"),
    ))
    answer = call(s, req, 0)[1]
    codes = {r.user: int(r.error_code) for r in answer.results}
    assert codes == {"ghost": 91, "": 93, "weird": 33, "huge-iter": 93, "neg-iter": 93,
                     "no-salt": 93, "big-salt": 93, "no-key": 93, "mech0": 33,
                     "mech9": 33, "twice": 92, "fine": 0}
    stored = scram_docs.describe(open_log(scram_gw.store_url).store).users
    assert "fine" in stored and not set(codes) - {"fine"} & set(stored)
    # describe: a user named twice, an unknown one, a known one
    answer = call(s, describe.DescribeUserScramCredentialsRequest(users=tuple(
        describe.UserName(name=n) for n in ("fine", "fine", "nobody", "alice"))), 0)[1]
    got = {r.user: (int(r.error_code), [(c.mechanism, c.iterations)
                                         for c in r.credential_infos])
           for r in answer.results}
    assert got == {"fine": (92, []), "nobody": (91, []),
                   "alice": (0, [(1, 4096), (2, 4096)])}
    assert serves(s)  # the connection kept
