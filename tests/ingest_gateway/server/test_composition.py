"""The composition root's parts (``server.lifecycle.gateway_parts``: the metrics, the
authenticator, the authorizer, quotas) are built once and are the same objects in the HTTP
app, its guard and the ``Gateway`` the Kafka listener is handed; an app run alone builds
its own. (The Kafka listener's metrics showing on HTTP's ``/metrics`` is
``kafka/test_tail_cache.py``'s, over a real gateway process.)"""

from __future__ import annotations

import asyncio

import conf
from ingest_gateway.http.app import create_app
from ingest_gateway.kafka.listener import serving
from ingest_gateway.security import passwords
from ingest_gateway.server import lifecycle
from log_layout import open_log


def _settings(tmp_path, secured: bool) -> conf.Settings:
    if not secured:
        return conf.load({}, environ={})
    path = str(tmp_path / "passwords")
    passwords.add(path, "alice", "correct horse")
    return conf.load({"authentication.method": "basic", "authentication.password.file": path,
                      "authorizer.enabled": "true", "authorizer.super.users": "User:alice"},
                     environ={})


def _served_gateway(app) -> object:
    """The Gateway the app's lifespan builds (started and stopped again)."""
    async def main():
        async with app.starlette.router.lifespan_context(app.starlette):
            return app.state.gateway
    return asyncio.run(main())


def _close(parts: lifecycle.GatewayParts) -> None:
    for part in (parts.authorizer, parts.quotas):
        if part is not None and hasattr(part, "close"):
            part.close()


def test_parts_follow_the_security_settings(tmp_path):
    log = open_log(str(tmp_path / "store"))
    off = lifecycle.gateway_parts(_settings(tmp_path, False), log)
    assert (off.authenticator, off.authorizer, off.quotas) == (None, None, None)
    on = lifecycle.gateway_parts(_settings(tmp_path, True), log)
    try:
        assert on.authenticator is not None and on.authorizer is not None
        assert on.quotas is not None  # a principal to count for
        assert on.metrics is not off.metrics  # one per gateway process
    finally:
        _close(on)


def test_the_app_and_the_gateway_use_the_parts_they_are_handed(tmp_path):
    settings = _settings(tmp_path, True)
    log = open_log(str(tmp_path / "store"))
    parts = lifecycle.gateway_parts(settings, log)
    try:
        app = create_app(settings, log, parts=parts)
        assert app.metrics is parts.metrics and app.state.metrics is parts.metrics
        assert app.app.authenticator is parts.authenticator  # the guard's
        assert app.app.authorizer is parts.authorizer and app.app.quotas is parts.quotas
        gateway = _served_gateway(app)
        assert gateway.metrics is parts.metrics
        assert gateway.authenticator is parts.authenticator
        assert gateway.authorizer is parts.authorizer and gateway.quotas is parts.quotas
    finally:
        _close(parts)


def test_an_app_run_alone_builds_its_own_parts(tmp_path):
    settings = _settings(tmp_path, True)
    app = create_app(settings, open_log(str(tmp_path / "store")))
    gateway = _served_gateway(app)
    assert gateway.metrics is app.metrics and app.app.authenticator is gateway.authenticator
    assert gateway.authenticator is not None and gateway.authorizer is not None


def test_one_set_of_verifiers_serves_both_logins(tmp_path):
    """HTTP's authenticator and the SASL Kafka listener's login check with the same
    password file and SCRAM credentials (the composition root's verifiers)."""
    path = str(tmp_path / "passwords")
    passwords.add(path, "alice", "correct horse")
    settings = conf.load({"authentication.method": "basic,scram",
                          "authentication.password.file": path,
                          "gateway.kafka.listeners": "SASL_PLAINTEXT://127.0.0.1:0"},
                         environ={})
    log = open_log(str(tmp_path / "store"))
    parts = lifecycle.gateway_parts(settings, log)
    try:
        v = parts.verifiers
        assert v.methods == ("basic", "scram") and v.scram is not None
        assert parts.authenticator.users is v.users and parts.authenticator.bearer is None

        async def main():
            async with lifecycle.running_gateway(settings, log, parts=parts) as gateway:
                assert gateway.verifiers is v
                async with serving(gateway) as listener:
                    login = listener.security.login
                    return login.users, login.scram, login.mechanisms
        users, scram, mechanisms = asyncio.run(main())
        assert users is v.users and scram is v.scram
        assert mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    finally:
        _close(parts)
        if parts.authenticator is not None:
            parts.authenticator.close()


def test_the_schema_codec_is_the_gateways_made_at_first_use(tmp_path):
    """One Schema Registry codec per gateway (Gateway.schema_codec), not kept on the
    app's state: the HTTP routes that take schemas get that one."""
    from ingest_gateway.http.schema_registry import registry_of

    settings = _settings(tmp_path, False)
    app = create_app(settings, open_log(str(tmp_path / "store")))
    gateway = _served_gateway(app)
    assert gateway._schema_codec is None  # nothing made until a route needs it
    codec = gateway.schema_codec()
    assert gateway.schema_codec() is codec
    request = type("R", (), {"app": app})()
    assert registry_of(request) is codec.registry
    assert not hasattr(app.state, "schema_codec") and not hasattr(app.state, "schema_registry")
    assert codec.registry.subjects() == []
    assert "_schemas" not in gateway.metadata.names()  # reading made no topic
