"""TLS on real sockets, with certificates made in the test (``certs``): an https
listener refuses plain HTTP, client certificates are asked for as ``ssl.client.auth``
says and one from an unknown CA is refused, the verified subject reaches the ASGI
scope, bad ``[ssl]`` settings fail at start-up naming the key, and the gateway, the
``Producer`` and the ``Consumer`` work over https."""

from __future__ import annotations

import json
import socket
import ssl
import uuid
import warnings

import pytest
import urllib3

import conf
from conf.errors import ConfigError
from ingest_gateway.client import Consumer, Producer
from ingest_gateway.security import tls
from jobs.gateway_process import GatewayProcess
from log_layout import open_log
from tests.ingest_gateway.http.auth_server import Served, whoami
from bench.tls_certs import Pki, key_pem, new_key


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def settings_for(pki: Pki, client_auth: str = "none", **more: str) -> conf.Settings:
    return conf.load({"gateway.listeners": "https://127.0.0.1:8443",
                      **pki.ssl_settings(client_auth), **more}, environ={})


def get(url: str, *, ca: str | None, cert: tuple[str, str] | None = None) -> dict:
    """GET url over a fresh pool; the JSON answer. Raises urllib3's errors."""
    pool = urllib3.PoolManager(retries=False, timeout=10, ca_certs=ca,
                               **({"cert_file": cert[0], "key_file": cert[1]} if cert else {}))
    try:
        r = pool.request("GET", url + "/whoami")
        assert r.status == 200, r.data
        return json.loads(r.data)
    finally:
        pool.clear()


def test_plain_http_to_an_https_listener_gets_no_http_answer(pki):
    with Served(whoami(None), settings_for(pki)) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while True:
                try:
                    chunk = s.recv(4096)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                got += chunk
        assert not got.startswith(b"HTTP/"), got[:100]
        # and a client that speaks TLS is served on the same listener
        assert get(srv.url, ca=pki.ca) == {"principal": "User:ANONYMOUS", "peer_subject": None}


def test_a_client_that_does_not_trust_the_gateway_refuses_it(pki):
    with Served(whoami(None), settings_for(pki)) as srv:
        with pytest.raises(urllib3.exceptions.SSLError):
            get(srv.url, ca=pki.stranger("x")[0])  # another CA's certificate as the CA


def test_client_auth_none_asks_for_no_certificate(pki):
    with Served(whoami(None), settings_for(pki, "none")) as srv:
        assert get(srv.url, ca=pki.ca, cert=pki.client("alice"))["peer_subject"] is None


def test_client_auth_required(pki):
    with Served(whoami(None), settings_for(pki, "required")) as srv:
        doc = get(srv.url, ca=pki.ca, cert=pki.client("alice"))
        assert doc["peer_subject"] == [["CN", "alice"], ["O", "sparklog tests"]]
        with pytest.raises((urllib3.exceptions.HTTPError, OSError)):
            get(srv.url, ca=pki.ca)  # no certificate
        with pytest.raises((urllib3.exceptions.HTTPError, OSError)):
            get(srv.url, ca=pki.ca, cert=pki.stranger("alice"))  # an unknown CA's


def test_client_auth_requested(pki):
    with Served(whoami(None), settings_for(pki, "requested")) as srv:
        assert get(srv.url, ca=pki.ca)["peer_subject"] is None  # none given: served
        doc = get(srv.url, ca=pki.ca, cert=pki.client("bob", org="a, b+c"))
        assert doc["peer_subject"] == [["CN", "bob"], ["O", "a, b+c"]]
        with pytest.raises((urllib3.exceptions.HTTPError, OSError)):
            get(srv.url, ca=pki.ca, cert=pki.stranger("bob"))  # given, and not trusted


def test_tls_below_1_2_is_refused(pki):
    ctx = tls.server_context(settings_for(pki))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    with Served(whoami(None), settings_for(pki)) as srv:
        client = ssl.create_default_context(cafile=pki.ca)
        try:
            with warnings.catch_warnings():  # offering TLS 1.0/1.1 is the point here
                warnings.simplefilter("ignore", DeprecationWarning)
                client.minimum_version = ssl.TLSVersion.TLSv1
                client.maximum_version = ssl.TLSVersion.TLSv1_1
        except (ValueError, ssl.SSLError):
            pytest.skip("this OpenSSL cannot even offer TLS 1.1")
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
            with pytest.raises((ssl.SSLError, OSError)):
                client.wrap_socket(raw, server_hostname="127.0.0.1")


# -- settings ------------------------------------------------------------------------------
@pytest.mark.parametrize("listeners", [
    "ftp://127.0.0.1:1", "https://127.0.0.1", "https://:8443", "http://h:99999",
    "https://h:1/path", "https://u:p@h:1", "https://h:1,https://h:2", "h:1", "https://h:x"])
def test_bad_listeners_are_refused_naming_the_key(listeners):
    with pytest.raises(ConfigError) as e:
        tls.check(conf.load({"gateway.listeners": listeners}, environ={}))
    assert e.value.key == "gateway.listeners"


def test_listeners(pki):
    plain = conf.load({"gateway.host": "0.0.0.0", "gateway.port": 9000}, environ={})
    assert tls.check(plain).url == "http://0.0.0.0:9000" and tls.uvicorn_ssl(plain) == {}
    v6 = conf.load({"gateway.listeners": "http://[::1]:9001"}, environ={})
    assert tls.listener(v6) == tls.Listener("http", "::1", 9001)
    kw = tls.uvicorn_ssl(settings_for(pki, "required"))
    assert kw["ssl_certfile"] == pki.server_cert and kw["ssl_ca_certs"] == pki.ca
    assert kw["ssl_cert_reqs"] == ssl.CERT_REQUIRED


@pytest.mark.parametrize("change, key", [
    ({"ssl.certfile": ""}, "ssl.certfile"),
    ({"ssl.certfile": "/nonexistent.pem"}, "ssl.certfile"),
    ({"ssl.keyfile": "/nonexistent.pem"}, "ssl.keyfile"),
    ({"ssl.cafile": "/nonexistent.pem"}, "ssl.cafile"),
    ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
    ({"ssl.client.auth": "required", "ssl.cafile": ""}, "ssl.cafile"),
])
def test_bad_ssl_settings_are_refused_naming_the_key(pki, change, key):
    with pytest.raises(ConfigError) as e:
        tls.check(conf.load({"gateway.listeners": "https://127.0.0.1:8443",
                             **pki.ssl_settings(), **change}, environ={}))
    assert e.value.key == key


def test_a_key_that_does_not_fit_or_decrypt_is_refused(pki, tmp_path):
    other = tmp_path / "other-key.pem"
    other.write_bytes(key_pem(new_key()))
    with pytest.raises(ConfigError) as e:
        tls.check(settings_for(pki, **{"ssl.keyfile": str(other)}))
    assert e.value.key == "ssl.keyfile"
    locked = Pki(tmp_path / "locked", key_password=b"open sesame")
    good = {"gateway.listeners": "https://127.0.0.1:8443", **locked.ssl_settings()}
    tls.check(conf.load({**good, "ssl.keyfile.password": "open sesame"}, environ={}))
    for wrong in ("nope", ""):
        with pytest.raises(ConfigError) as e:
            tls.check(conf.load({**good, "ssl.keyfile.password": wrong}, environ={}))
        assert e.value.key == "ssl.keyfile.password" and "nope" not in str(e.value)


# -- the gateway over https ------------------------------------------------------------------
@pytest.fixture(scope="module")
def https_gateway(pki, tmp_path_factory):
    store = str(tmp_path_factory.mktemp("store"))
    with GatewayProcess(store, scheme="https", ca_file=pki.ca,
                        settings=pki.ssl_settings()) as gw:
        gw.log = open_log(store)
        yield gw


def test_sparklog_gateway_serves_https(https_gateway, pki):
    status, doc, _ = https_gateway.request("GET", "/healthz")
    assert status == 200
    plain = urllib3.PoolManager(retries=False, timeout=10)
    with pytest.raises(urllib3.exceptions.HTTPError):
        plain.request("GET", f"http://127.0.0.1:{https_gateway.port}/healthz")


def test_producer_and_consumer_over_https(https_gateway, pki):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    https_gateway.log.create_topic(topic, {"partitions": 1})
    with Producer(https_gateway.url, ssl_cafile=pki.ca, linger_ms=0) as producer:
        meta = producer.send(topic, b"over tls", key=b"k").result(30)
    assert meta.offset == 0
    with Consumer(gateway=https_gateway.url, ssl_cafile=pki.ca,
                  auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        got = []
        for _ in range(50):
            got += consumer.poll(0.2)
            if got:
                break
    assert [(r.key, r.value) for r in got] == [(b"k", b"over tls")]
    with Producer(https_gateway.url, linger_ms=0, request_timeout_ms=2000,
                  delivery_timeout_ms=3000) as untrusting:  # the system's CAs: refused
        with pytest.raises(Exception) as e:
            untrusting.send(topic, b"x").result(30)
        assert "certificate" in str(e.value).lower() or "ssl" in str(e.value).lower()
