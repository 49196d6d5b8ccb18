"""Authentication: HTTP Basic against the argon2id password file, JWT bearer tokens and
client certificates, each accepted and refused, checked on real TLS sockets
(``auth_server``: the gateway's connection class and TLS settings) and against
hostile headers (hypothesis). The Producer, the Consumer and ``sparklog
produce/consume`` are run against ``sparklog gateway`` over https with Basic required."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import time
import uuid

import jwt
import pytest
import urllib3
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

import conf
from conf.errors import ConfigError
from ingest_gateway.client import Consumer, Producer
from ingest_gateway.errors import NotAuthenticated, NotAuthorized
from ingest_gateway.security import authentication as authn, passwords
from ingest_gateway.security.tls import PEER_SUBJECT
from jobs.gateway_process import ROOT, GatewayProcess, wait_for
from log_layout import open_log
from tests.clock import Clock
from tests.ingest_gateway.http.auth_server import Served, whoami
from bench.tls_certs import Pki, new_key, public_pem
from tests.jobs.cli_proc import assert_one_line_error, text

ALICE_PW = "correct horse battery staple"
ISSUER, AUDIENCE = "https://issuer.example", "sparklog"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """(signing key, its public key file, another key) for ES256 tokens."""
    folder = tmp_path_factory.mktemp("jwt")
    key, other = new_key(), new_key()
    (folder / "issuer.pem").write_bytes(public_pem(key))
    return key, str(folder / "issuer.pem"), other


@pytest.fixture
def pwfile(tmp_path) -> str:
    path = str(tmp_path / "passwords")
    passwords.add(path, "alice", ALICE_PW)
    passwords.add(path, "bob", "hunter2:with:colons")
    return path


def load(pki: Pki, client_auth: str = "requested", **auth: str) -> conf.Settings:
    return conf.load({"gateway.listeners": "https://127.0.0.1:8443",
                      **pki.ssl_settings(client_auth),
                      **{f"authentication.{k.replace('_', '.')}": v for k, v in auth.items()}},
                     environ={})


def token(key, **claims) -> str:
    now = int(time.time())
    doc = {"sub": "carol", "iss": ISSUER, "aud": AUDIENCE, "exp": now + 300, "iat": now,
           **claims}
    return jwt.encode({k: v for k, v in doc.items() if v is not None}, key, algorithm="ES256")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def scope(authorization: bytes | str | None = None, subject=None) -> dict:
    headers = [] if authorization is None else [
        (b"authorization", authorization.encode() if isinstance(authorization, str)
         else authorization)]
    return {"type": "http", "headers": headers, PEER_SUBJECT: subject}


def ask(srv: Served, pki: Pki, *, headers=None, cert=None) -> tuple[int, dict, dict]:
    pool = urllib3.PoolManager(retries=False, timeout=10, ca_certs=pki.ca,
                               **({"cert_file": cert[0], "key_file": cert[1]} if cert else {}))
    try:
        r = pool.request("GET", srv.url + "/whoami", headers=headers or {})
        return r.status, json.loads(r.data), r.headers  # case-insensitive
    finally:
        pool.clear()


# -- settings --------------------------------------------------------------------------
def test_no_method_means_no_authenticator(pki):
    assert authn.Authenticator.from_settings(load(pki)) is None
    assert authn.principal_of({}) == "User:ANONYMOUS"


@pytest.mark.parametrize("auth, client_auth, key", [
    ({"method": "basic,kerberos"}, "none", "authentication.method"),
    ({"method": "basic"}, "none", "authentication.password.file"),
    ({"method": "basic", "password_file": "/nonexistent"}, "none",
     "authentication.password.file"),
    ({"method": "bearer"}, "none", "authentication.jwt.public.key.file"),
    ({"method": "mtls"}, "none", "ssl.client.auth"),
    ({"method": "mtls", "mtls_principal": "OU"}, "required", "authentication.mtls.principal"),
])
def test_bad_authentication_settings_name_the_key(pki, auth, client_auth, key):
    with pytest.raises(ConfigError) as e:
        authn.Authenticator.from_settings(load(pki, client_auth, **auth))
    assert e.value.key == key


def test_mtls_needs_an_https_listener():
    with pytest.raises(ConfigError) as e:
        authn.Authenticator.from_settings(conf.load({"authentication.method": "mtls"},
                                                    environ={}))
    assert e.value.key == "gateway.listeners"


@pytest.mark.parametrize("algorithms", ["none", "HS256", "ES256,HS512", "RS256", "XX999"])
def test_refused_jwt_algorithms(pki, keys, algorithms):
    with pytest.raises(ConfigError) as e:  # RS256 alone: no algorithm fits an EC key
        authn.Authenticator.from_settings(load(pki, method="bearer", jwt_public_key_file=keys[1],
                                               jwt_algorithms=algorithms))
    assert e.value.key == "authentication.jwt.algorithms"


def test_a_malformed_password_file_is_refused_without_showing_it(pki, tmp_path):
    bad = tmp_path / "pw"
    bad.write_text("alice:plaintext-secret\n")
    with pytest.raises(ConfigError) as e:
        authn.Authenticator.from_settings(load(pki, method="basic", password_file=str(bad)))
    assert "line 1" in str(e.value) and "plaintext-secret" not in str(e.value)


# -- basic -----------------------------------------------------------------------------
def test_basic_accepts_the_right_password_once_checked(pki, pwfile, monkeypatch):
    a = authn.Authenticator.from_settings(load(pki, method="basic", password_file=pwfile))
    calls = []
    real = passwords.verify
    monkeypatch.setattr(passwords, "verify", lambda h, p: calls.append(1) or real(h, p))
    s = scope(basic("alice", ALICE_PW))
    assert a.authenticate(s) == "User:alice" and authn.principal_of(s) == "User:alice"
    assert a.authenticate(scope(basic("alice", ALICE_PW))) == "User:alice"
    assert a.authenticate(scope(basic("bob", "hunter2:with:colons"))) == "User:bob"
    assert len(calls) == 2  # alice's second request was remembered
    for user, password in (("alice", "Xq9-bad"), ("alice", "Xq9-bad"), ("mallory", ALICE_PW)):
        with pytest.raises(NotAuthenticated) as e:
            a.authenticate(scope(basic(user, password)))
        assert e.value.reason == "wrong user name or password"  # unknown or wrong: the same
        assert e.value.schemes == ("Basic",) and e.value.realm == "sparklog"
        assert password not in str(e.value)
    assert len(calls) == 5  # failures are never remembered; an unknown user costs a check


def test_a_changed_password_file_is_read_within_a_second(pki, pwfile, caplog):
    clock = Clock()
    a = authn.Authenticator.from_settings(load(pki, method="basic", password_file=pwfile),
                                          clock=lambda: clock() / 1000)
    assert a.authenticate(scope(basic("alice", ALICE_PW))) == "User:alice"
    passwords.add(pwfile, "alice", "new password")
    clock.t += 1100
    with pytest.raises(NotAuthenticated):
        a.authenticate(scope(basic("alice", ALICE_PW)))
    assert a.authenticate(scope(basic("alice", "new password"))) == "User:alice"
    passwords.remove(pwfile, "alice")
    clock.t += 1100
    with pytest.raises(NotAuthenticated):
        a.authenticate(scope(basic("alice", "new password")))
    os.unlink(pwfile)  # gone: nobody gets in (fail closed), without a 500, said once
    for _ in range(3):
        clock.t += 1100
        with pytest.raises(NotAuthenticated):
            a.authenticate(scope(basic("bob", "hunter2:with:colons")))
    said = [r for r in caplog.records if r.name == "sparklog.auth"]
    assert len(said) == 1 and "refusing every Basic login" in said[0].getMessage()
    assert "hunter2" not in caplog.text
    passwords.add(pwfile, "bob", "back again")
    clock.t += 1100
    assert a.authenticate(scope(basic("bob", "back again"))) == "User:bob"


def test_the_cache_is_bounded(pki, pwfile, monkeypatch):
    monkeypatch.setattr(authn, "CACHE_SIZE", 2)
    monkeypatch.setattr(passwords, "verify", lambda h, p: True)  # 50 ms each otherwise
    a = authn.Authenticator.from_settings(load(pki, method="basic", password_file=pwfile))
    for i in range(5):
        a.authenticate(scope(basic("alice", f"p{i}")))
    assert len(a.users._ok) == 2


@pytest.mark.parametrize("header", [
    b"Basic", b"Basic ", b"Basic !!!!", b"Basic " + base64.b64encode(b"no colon"),
    b"Basic " + base64.b64encode(b"\xff\xfe:\xff"), b"Basic " + base64.b64encode(b"a\x00:b"),
    b"Basic " + base64.b64encode(b":password"), b"Basic " + base64.b64encode(b"alice:"),
    b"Basic " + b"A" * (authn.MAX_HEADER_BYTES + 1), b"Digest username=alice", b"Bearer x",
    b"", b"\xff\xff", b"Basic YWxpY2U6" + b"=" * 50,
])
def test_hostile_basic_headers_are_401(pki, pwfile, header):
    a = authn.Authenticator.from_settings(load(pki, method="basic", password_file=pwfile))
    with pytest.raises(NotAuthenticated):
        a.authenticate(scope(header))


def test_two_authorization_headers_are_401(pki, pwfile):
    a = authn.Authenticator.from_settings(load(pki, method="basic", password_file=pwfile))
    s = {"headers": [(b"authorization", basic("alice", ALICE_PW).encode())] * 2}
    with pytest.raises(NotAuthenticated):
        a.authenticate(s)


@hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.binary(max_size=300),
                 st.binary(max_size=200).map(lambda b: b"Basic " + base64.b64encode(b)),
                 st.text(max_size=100).map(lambda t: ("Basic " + base64.b64encode(
                     t.encode("utf-8", "surrogatepass")).decode()).encode()),
                 st.binary(max_size=300).map(lambda b: b"Bearer " + b)))
def test_fuzzed_authorization_headers_never_fail_otherwise(fuzz_authenticator, header):
    try:
        assert fuzz_authenticator.authenticate(scope(header)).startswith("User:")
    except NotAuthenticated as e:
        assert e.schemes == ("Basic", "Bearer")


@pytest.fixture(scope="module")
def fuzz_authenticator(pki, keys, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fuzz") / "pw")
    passwords.add(path, "a", "b")
    return authn.Authenticator.from_settings(load(
        pki, method="basic,bearer", password_file=path, jwt_public_key_file=keys[1]))


# -- bearer ----------------------------------------------------------------------------
def _hs256_with_public_key(pem: bytes) -> str:
    """An HS256 token whose HMAC secret is the issuer's *public* key (alg confusion)."""
    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"sub": "mallory", "exp": int(time.time()) + 300}).encode())
    sig = b64(hmac.new(pem, head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + sig).decode()


def test_bearer_tokens(pki, keys):
    key, pub, other = keys
    a = authn.Authenticator.from_settings(load(
        pki, method="bearer", jwt_public_key_file=pub, jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE))
    assert a.authenticate(scope("Bearer " + token(key))) == "User:carol"
    assert a.authenticate(scope("bearer  " + token(key, exp=int(time.time()) - 10))) == \
        "User:carol"  # within the leeway; the scheme's case does not matter
    unsigned = jwt.encode({"sub": "mallory", "exp": int(time.time()) + 300}, None,
                          algorithm="none")
    refused = {
        "expired": token(key, exp=int(time.time()) - 3600),
        "not yet": token(key, nbf=int(time.time()) + 3600),
        "issuer": token(key, iss="https://evil.example"),
        "audience": token(key, aud="someone-else"),
        "no exp": token(key, exp=None),
        "other key": token(other),
        "alg none": unsigned,
        "alg confusion": _hs256_with_public_key(open(pub, "rb").read()),
        "no sub": token(key, sub=None),
        "sub not a string": token(key, sub=42),
        "garbage": "abc.def.ghi",
    }
    for why, bad in refused.items():
        with pytest.raises(NotAuthenticated) as e:
            a.authenticate(scope("Bearer " + bad))
        assert bad not in str(e.value) and e.value.schemes == ("Bearer",), why


def test_the_principal_claim(pki, keys):
    key, pub, _ = keys
    a = authn.Authenticator.from_settings(load(
        pki, method="bearer", jwt_public_key_file=pub, jwt_principal_claim="preferred_username"))
    assert a.authenticate(scope("Bearer " + token(key, preferred_username="dave"))) == \
        "User:dave"


# -- mtls and several methods, over real TLS ------------------------------------------
def test_mtls_principal_cn_and_dn(pki):
    cn = authn.Authenticator.from_settings(load(pki, "required", method="mtls"))
    with Served(whoami(cn), load(pki, "required", method="mtls")) as srv:
        assert ask(srv, pki, cert=pki.client("erin"))[1]["principal"] == "User:erin"
    dn = authn.Authenticator.from_settings(load(pki, "required", method="mtls",
                                                mtls_principal="dn"))
    with Served(whoami(dn), load(pki, "required")) as srv:
        got = ask(srv, pki, cert=pki.client("frank", org="a, b"))[1]["principal"]
        assert got == "User:CN=frank,O=a\\, b"


def test_several_methods(pki, keys, pwfile):
    key, pub, _ = keys
    settings = load(pki, "requested", method="basic,bearer,mtls", password_file=pwfile,
                    jwt_public_key_file=pub)
    a = authn.Authenticator.from_settings(settings)
    with Served(whoami(a), settings) as srv:
        cert = pki.client("gina")
        assert ask(srv, pki, headers={"Authorization": basic("alice", ALICE_PW)},
                   cert=cert)[1]["principal"] == "User:alice"  # the header decides
        assert ask(srv, pki, headers={"Authorization": "Bearer " + token(key)})[1][
            "principal"] == "User:carol"
        assert ask(srv, pki, cert=cert)[1]["principal"] == "User:gina"
        status, doc, headers = ask(srv, pki)
        assert status == 401 and doc["error_code"] == 40101
        assert headers["WWW-Authenticate"] == 'Basic realm="sparklog", Bearer realm="sparklog"'
        status, doc, _ = ask(srv, pki, headers={"Authorization": basic("alice", "nope")},
                             cert=cert)
        assert status == 401  # a wrong password is not rescued by the certificate


@hsettings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(min_size=1, max_size=200).filter(lambda b: b"\r" not in b and b"\n" not in b
                                                  and b"\0" not in b))
def test_fuzzed_headers_over_the_wire_are_never_a_500(served_basic, value):
    srv, pool = served_basic
    r = pool.request("GET", srv.url + "/whoami", headers={"Authorization": value})
    assert r.status in (200, 400, 401), r.status


@pytest.fixture(scope="module")
def served_basic(pki, fuzz_authenticator):
    with Served(whoami(fuzz_authenticator), load(pki, "none")) as srv:
        pool = urllib3.PoolManager(retries=False, timeout=10, ca_certs=pki.ca)
        yield srv, pool
        pool.clear()


# -- the clients against an https + Basic gateway --------------------------------------
@pytest.fixture(scope="module")
def secure_gateway(pki, tmp_path_factory):
    """``sparklog gateway`` over https with Basic required (alice), its log in a file."""
    folder = tmp_path_factory.mktemp("secure")
    pw = str(folder / "pw")
    passwords.add(pw, "alice", ALICE_PW)
    store = str(folder / "store")
    with GatewayProcess(store, scheme="https", ca_file=pki.ca, log_path=str(folder / "log"),
                        settings={**pki.ssl_settings(), "gateway.access.log": "true",
                                  "authentication.method": "basic",
                                  "authentication.password.file": pw}) as gw:
        gw.log = open_log(store)
        gw.log_file = folder / "log"
        yield gw


def sparklog(*args: str, stdin: bytes = b"", env: dict[str, str]) -> subprocess.CompletedProcess:
    """``sparklog`` in a subprocess with ``env`` added (``cli_proc.sparklog`` with an
    environment: the password goes in SPARKLOG_PASSWORD, never in an argument)."""
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], input=stdin,
                          capture_output=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT, "COLUMNS": "200", **env})


def refused(gw, pki: Pki, log_file, offset: int, status: int) -> list[str]:
    """The requests ("METHOD /path") the access log says were answered ``status``, in
    the order answered, from byte ``offset`` of the gateway's log up to a marker request
    sent now: the gateway logs a request once its answer is sent, so every request
    answered before the marker is logged before it."""
    mark = uuid.uuid4().hex
    urllib3.PoolManager(ca_certs=pki.ca).request("GET", f"{gw.url}/healthz?mark={mark}")

    def logged() -> str:
        with open(log_file, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    wait_for(lambda: mark in logged(), timeout=30, what="the marker in the access log")
    pattern = re.compile(r'"(\S+) (\S+) HTTP/[\d.]+" (\d{3}) ')
    return [f"{m[1]} {m[2]}" for m in map(pattern.search, logged().splitlines())
            if m is not None and int(m[3]) == status]


def assert_sent_once(requests: list[str], clients: int) -> None:
    """Each refused request was sent once (a client that retried would send it again),
    and each of ``clients`` clients was refused."""
    assert len(requests) == len(set(requests)) and len(requests) >= clients, requests


def fresh_topic(srv) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    srv.log.create_topic(name, {"partitions": 1})
    return name


def test_producer_and_consumer_with_basic_over_https(secure_gateway, pki):
    srv = secure_gateway
    topic = fresh_topic(srv)
    creds = dict(ssl_cafile=pki.ca, sasl_plain_username="alice", sasl_plain_password=ALICE_PW)
    with Producer(srv.url, linger_ms=0, **creds) as producer:
        assert producer.send(topic, b"v1").result(30).offset == 0
    with Consumer(gateway=srv.url, group_id="g1", auto_offset_reset="earliest",
                  **creds) as consumer:
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = consumer.poll(0.5)
        consumer.commit()
    assert [r.value for r in got] == [b"v1"]
    wrong = dict(creds, sasl_plain_password="not " + ALICE_PW)
    logged_before = srv.log_file.stat().st_size
    with Producer(srv.url, linger_ms=0, **wrong) as producer:
        with pytest.raises(NotAuthenticated):
            producer.send(topic, b"v2")
    with Consumer(gateway=srv.url, group_id="g2", **wrong) as consumer:
        with pytest.raises(NotAuthenticated):
            consumer.subscribe([topic])
    # refused at once, not retried: each client sent its first request once, answered 401
    assert_sent_once(refused(srv, pki, srv.log_file, logged_before, 401), 2)
    metrics = urllib3.PoolManager(ca_certs=pki.ca).request(
        "GET", srv.url + "/metrics", headers={"Authorization": basic("alice", ALICE_PW)})
    assert metrics.status == 200 and b"not_authenticated" in metrics.data
    logged = srv.log_file.read_bytes()
    assert b"401" in logged  # the access log saw the refusals
    for secret in (ALICE_PW, base64.b64encode(f"alice:{ALICE_PW}".encode()).decode()):
        assert secret.encode() not in logged and secret.encode() not in metrics.data


def test_sparklog_produce_and_consume_with_basic_over_https(secure_gateway, pki):
    srv = secure_gateway
    topic = fresh_topic(srv)
    flags = ["--bootstrap-server", srv.url, "--ca-file", pki.ca, "--user", "alice"]
    env = {"SPARKLOG_PASSWORD": ALICE_PW}
    run = sparklog("produce", topic, *flags, stdin=b"one\ntwo\n", env=env)
    assert run.returncode == 0, text(run)
    # credentials imply --via-gateway: the store is never opened (none is given here)
    run = sparklog("consume", topic, *flags, "--from-beginning",
                   "--max-messages", "2", "--timeout-ms", "20000", "--format", "%v\\n", env=env)
    assert run.returncode == 0 and text(run)[0].split() == ["one", "two"], text(run)
    run = sparklog("produce", topic, *flags, stdin=b"three\n",
                   env={"SPARKLOG_PASSWORD": "Zz7-not-it"})
    line = assert_one_line_error(run, "authentication failed")
    assert "Zz7-not-it" not in line


@pytest.mark.slow  # nine CLI processes over TLS (56 s beside three workers)
def test_admin_commands_with_basic_over_https(secure_gateway, pki):
    srv = secure_gateway
    topic = fresh_topic(srv)
    flags = ["--bootstrap-server", srv.url, "--ca-file", pki.ca, "--user", "alice",
             "--store", srv.store_url]
    ok, wrong = {"SPARKLOG_PASSWORD": ALICE_PW}, {"SPARKLOG_PASSWORD": "Zz7-not-it"}
    run = sparklog("metadata", "--json", "--topic", topic, *flags, env=ok)
    assert run.returncode == 0, text(run)
    [t] = json.loads(text(run)[0])["topics"]
    assert t["partitions"][0]["gateway"] == srv.url  # the gateway answered, over https
    assert sparklog("groups", "list", *flags, env=ok).returncode == 0
    run = sparklog("topics", "describe", topic, *flags, env=ok)
    assert run.returncode == 0 and srv.url in text(run)[0], text(run)
    for command in (["metadata"], ["groups", "list"], ["topics", "describe", topic]):
        assert_one_line_error(sparklog(*command, *flags, env=wrong), "authentication failed")


def test_a_checked_token_is_remembered_until_its_exp(keys, monkeypatch):
    from ingest_gateway.security import bearer

    key, _pub, other = keys
    now = [time.time()]
    v = bearer.BearerVerifier(key.public_key(), ["ES256"], wall=lambda: now[0])
    calls = []
    real = jwt.decode
    monkeypatch.setattr(bearer.jwt, "decode", lambda *a, **k: calls.append(1) or real(*a, **k))
    good = token(key, exp=int(now[0]) + 60).encode()
    assert v.verify(good) == v.verify(good) == "carol" and len(calls) == 1
    now[0] += 61  # past its exp: checked again (and PyJWT's own clock still accepts it)
    assert v.verify(good) == "carol" and len(calls) == 2
    bad = token(other).encode()
    for _ in range(2):
        with pytest.raises(NotAuthenticated):
            v.verify(bad)
    assert len(calls) == 4  # a failure is never remembered


@pytest.mark.slow  # two https gateways of its own (21 s beside three workers)
def test_clients_with_a_certificate_a_token_and_no_acl(pki, keys, tmp_path):
    """mtls and bearer through the Producer and the Consumer; with the authorizer on and
    no ACL, a 403 is raised as NotAuthorized at once, not retried."""
    key, pub, other = keys
    store = str(tmp_path / "store")
    cert = pki.client("henry")
    settings = {**pki.ssl_settings("requested"), "authentication.method": "bearer,mtls",
                "authentication.jwt.public.key.file": pub}
    with GatewayProcess(store, scheme="https", ca_file=pki.ca, cert_file=cert[0],
                        key_file=cert[1], settings=settings) as gw:
        lg = open_log(store)
        lg.create_topic("t", {"partitions": 1})
        with Producer(gw.url, linger_ms=0, ssl_cafile=pki.ca, ssl_certfile=cert[0],
                      ssl_keyfile=cert[1]) as producer:
            assert producer.send("t", b"by certificate").result(30).offset == 0
        tokens = []
        with Consumer(gateway=gw.url, ssl_cafile=pki.ca, auto_offset_reset="earliest",
                      sasl_oauth_token=lambda: tokens.append(1) or token(key)) as consumer:
            consumer.assign([("t", 0)])
            got = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = consumer.poll(0.5)
        assert [r.value for r in got] == [b"by certificate"] and tokens  # asked per request
        with Producer(gw.url, ssl_cafile=pki.ca, sasl_oauth_token=token(other)) as producer:
            with pytest.raises(NotAuthenticated):
                producer.send("t", b"x")
    settings.update({"authorizer.enabled": "true", "gateway.access.log": "true"})
    log_file = tmp_path / "gateway.log"
    with GatewayProcess(store, scheme="https", ca_file=pki.ca, cert_file=cert[0],
                        key_file=cert[1], settings=settings, log_path=str(log_file)) as gw:
        with Producer(gw.url, ssl_cafile=pki.ca, sasl_oauth_token=token(key)) as producer:
            with pytest.raises(NotAuthorized) as e:
                producer.send("t", b"x")
        assert e.value.principal == "User:carol"
        with Consumer(gateway=gw.url, ssl_cafile=pki.ca, sasl_oauth_token=token(key)) as c:
            with pytest.raises(NotAuthorized):
                c.assign([("t", 0)])
                c.poll(1)
    # raised at once, not retried: the produce and the fetch were each refused once
        assert_sent_once(refused(gw, pki, log_file, 0, 403), 2)
