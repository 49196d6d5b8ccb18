"""Process settings: ``conf/defaults.toml``, then ``SPARKLOG_*`` environment
variables, then explicit overrides (CLI flags), loaded once into frozen
dataclasses.

Keys are dotted and lower case (``gateway.linger.ms``); the environment
variable of a key is ``SPARKLOG_`` + the key upper-cased with dots as
underscores (``SPARKLOG_GATEWAY_LINGER_MS``). Keys ending in ``.ms`` are
durations (``conf.durations``: ``30s``, ``5m``; a bare number is milliseconds).
``gateway.hot.enable`` also takes ``auto`` (its default), resolved here by
``store.url``'s scheme (:func:`hot_enable_default`), so the settings hold the
effective value. A value that does not parse, or
a ``SPARKLOG_<SECTION>_*`` variable that names no key, stops start-up with a
:class:`~conf.errors.ConfigError` naming the key and the value.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conf.durations import parse_duration_ms
from conf.errors import ConfigError
from conf.topic import TOPIC_KEYS, TopicConfig

DEFAULTS_FILE = Path(__file__).with_name("defaults.toml")
#: store URL schemes ``gateway.hot.enable=auto`` turns the hot tier on for: S3 and HDFS,
#: where each request costs (a PUT, a NameNode round trip) whatever its size
HOT_STORE_SCHEMES = ("s3", "s3a", "hdfs", "webhdfs", "swebhdfs")
ENV_PREFIX = "SPARKLOG_"
#: the folder holding pyproject.toml: relative cache paths resolve against it
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    url: str
    fsync: bool
    s3_endpoint_url: str
    hdfs_http_port: int
    hdfs_user: str
    hdfs_kerberos: bool
    hdfs_delegation_token: str = dataclasses.field(repr=False)  # a secret: never printed
    manifest_versions_retained: int


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    host: str
    port: int
    linger_ms: int
    batch_size: int
    flush_messages: int
    buffer_memory: int
    max_request_size: int
    auto_create_topics_enable: bool
    session_timeout_ms: int
    max_control_request_size: int
    max_uncompressed_request_size: int
    max_json_nesting_depth: int
    max_connections: int
    request_read_timeout_ms: int
    connections_max_idle_ms: int
    consumer_instance_timeout_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_consumer_assignors: str
    group_consumer_heartbeat_interval_ms: int
    group_consumer_session_timeout_ms: int
    group_consumer_migration_policy: str
    broker_id: str
    advertised_listeners: str
    access_log: bool
    log_format: str
    access_control_allow_origin: str
    access_control_allow_methods: str
    access_control_allow_headers: str
    listeners: str
    kafka_listeners: str
    kafka_advertised_listeners: str
    socket_request_max_bytes: int
    kafka_connections_max_idle_ms: int
    kafka_connections_max_reauth_ms: int
    kafka_queued_max_request_bytes: int
    kafka_connection_queued_max_request_bytes: int
    kafka_tail_cache_bytes: int
    kafka_max_incremental_fetch_session_cache_slots: int
    hot_enable: bool
    hot_flush_interval_ms: int
    hot_flush_bytes: int
    hot_uploads_in_flight: int
    hot_checkpoint_interval_entries: int
    schema_registry_path: str


@dataclasses.dataclass(frozen=True)
class SslSettings:
    certfile: str
    keyfile: str
    keyfile_password: str = dataclasses.field(repr=False)  # a secret: never printed
    cafile: str
    client_auth: str


@dataclasses.dataclass(frozen=True)
class AuthenticationSettings:
    method: str
    password_file: str
    realm: str
    jwt_public_key_file: str
    jwt_issuer: str
    jwt_audience: str
    jwt_principal_claim: str
    jwt_algorithms: str
    mtls_principal: str


@dataclasses.dataclass(frozen=True)
class AuthorizerSettings:
    enabled: bool
    super_users: str
    allow_everyone_if_no_acl_found: bool
    refresh_ms: int


@dataclasses.dataclass(frozen=True)
class SparkSettings:
    master: str
    app_name: str
    delta_package: str
    s3a_package: str
    kafka_package: str
    jars_ivy: str
    ui_enabled: bool
    shuffle_partitions: int


@dataclasses.dataclass(frozen=True)
class MaintenanceSettings:
    interval_ms: int


@dataclasses.dataclass(frozen=True)
class Settings:
    store: StoreSettings
    gateway: GatewaySettings
    topic: TopicConfig
    spark: SparkSettings
    maintenance: MaintenanceSettings
    ssl: SslSettings
    authentication: AuthenticationSettings
    authorizer: AuthorizerSettings


_SECTIONS: dict[str, type] = {
    "store": StoreSettings,
    "gateway": GatewaySettings,
    "spark": SparkSettings,
    "maintenance": MaintenanceSettings,
    "ssl": SslSettings,
    "authentication": AuthenticationSettings,
    "authorizer": AuthorizerSettings,
}


def _coerce(key: str, raw: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ConfigError(key, raw, "expected true or false")
    if kind is int and key.endswith(".ms"):  # a duration: "5s" works, a bare 5 is 5 ms
        return parse_duration_ms(raw, key=key)
    if kind is int:
        try:
            value = raw if isinstance(raw, int) and not isinstance(raw, bool) else int(str(raw))
        except ValueError:
            raise ConfigError(key, raw, "expected an integer") from None
        if value < 0:
            raise ConfigError(key, raw, "must not be negative")
        return value
    return str(raw)


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """``SPARKLOG_*`` variables of known sections as dotted keys."""
    known = {f"{section}.{k}" for section, v in _defaults().items() for k in v}
    out: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX):].lower()
        section = rest.split("_", 1)[0]
        if section not in _defaults():
            continue  # SPARKLOG_HOME and friends are not settings
        key = rest.replace("_", ".")
        if key not in known:
            raise ConfigError(name, value, "names no sparklog setting")
        out[key] = value
    return out


def _defaults() -> dict[str, dict[str, Any]]:
    with DEFAULTS_FILE.open("rb") as f:
        return tomllib.load(f)


def hot_enable_default(store_url: str) -> bool:
    """What ``gateway.hot.enable=auto`` (its default) means for a store: on for S3 and
    HDFS (:data:`HOT_STORE_SCHEMES`), off for a local folder, ``file://`` and
    ``memory://`` (and any other scheme)."""
    return urlsplit(str(store_url)).scheme.lower() in HOT_STORE_SCHEMES


def _hot_enable(raw: Any, store_url: Any) -> Any:
    """``gateway.hot.enable`` as a bool: as given, or, for ``auto``, what the store asks.
    Raises ConfigError for anything but true, false (or their spellings) and auto."""
    if isinstance(raw, str) and raw.strip().lower() == "auto":
        return hot_enable_default(store_url)
    try:
        return _coerce("gateway.hot.enable", raw, bool)
    except ConfigError:
        raise ConfigError("gateway.hot.enable", raw, "expected true, false or auto") from None


def load(overrides: Mapping[str, Any] | None = None, *,
         environ: Mapping[str, str] | None = None) -> Settings:
    """Load settings: defaults, then environment, then ``overrides``.

    ``overrides`` maps dotted keys (``"gateway.port"``) to values; ``None``
    values are ignored so CLI flags that were not given can be passed as is.
    Raises ConfigError naming the key and the value of the first bad setting.
    """
    tree = _defaults()
    merged: dict[str, Any] = {f"{s}.{k}": v for s, kv in tree.items() for k, v in kv.items()}
    merged.update(env_overrides(os.environ if environ is None else environ))
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in merged:
            raise ConfigError(key, value, "names no sparklog setting")
        merged[key] = value
    merged["gateway.hot.enable"] = _hot_enable(merged["gateway.hot.enable"],
                                               merged["store.url"])

    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        kwargs = {}
        for field in dataclasses.fields(cls):
            key = f"{section}.{field.name.replace('_', '.')}"
            kwargs[field.name] = _coerce(key, merged[key], _FIELD_TYPES[field.type])
        sections[section] = cls(**kwargs)
    topic = TopicConfig.from_kafka({k[len("topic."):]: v for k, v in merged.items()
                                    if k.startswith("topic.")})
    settings = Settings(topic=topic, **sections)
    gateway = settings.gateway
    if gateway.port > 65535:
        raise ConfigError("gateway.port", gateway.port, "must be at most 65535")
    if gateway.hot_uploads_in_flight < 1:
        raise ConfigError("gateway.hot.uploads.in.flight", gateway.hot_uploads_in_flight,
                          "must be at least 1")
    bad = [a for a in gateway.group_consumer_assignors.split(",") if a.strip() not in
           ("uniform", "range")] or not gateway.group_consumer_assignors.strip()
    if bad:
        raise ConfigError("gateway.group.consumer.assignors", gateway.group_consumer_assignors,
                          "must list assignors among uniform, range")
    if gateway.group_consumer_migration_policy not in ("bidirectional", "upgrade", "downgrade",
                                                       "disabled"):
        raise ConfigError("gateway.group.consumer.migration.policy",
                          gateway.group_consumer_migration_policy,
                          "must be bidirectional, upgrade, downgrade or disabled")
    for key in ("group.consumer.heartbeat.interval.ms", "group.consumer.session.timeout.ms"):
        if getattr(gateway, key.replace(".", "_")) < 1:
            raise ConfigError(f"gateway.{key}", getattr(gateway, key.replace(".", "_")),
                              "must be at least 1 ms")
    if gateway.kafka_connections_max_reauth_ms < 0:
        raise ConfigError("gateway.kafka.connections.max.reauth.ms",
                          gateway.kafka_connections_max_reauth_ms, "must be at least 0 (0: off)")
    path = gateway.schema_registry_path
    if path and (not path.startswith("/") or path.rstrip("/") == "" or "{" in path
                 or any(c.isspace() for c in path)):
        raise ConfigError("gateway.schema.registry.path", path,
                          "must be empty (off) or a path such as /schema-registry")
    if gateway.hot_flush_bytes < 1:
        raise ConfigError("gateway.hot.flush.bytes", gateway.hot_flush_bytes,
                          "must be at least 1")
    if gateway.kafka_max_incremental_fetch_session_cache_slots < 0:
        raise ConfigError("gateway.kafka.max.incremental.fetch.session.cache.slots",
                          gateway.kafka_max_incremental_fetch_session_cache_slots,
                          "must be at least 0")
    for key in ("kafka.queued.max.request.bytes", "kafka.connection.queued.max.request.bytes"):
        value = getattr(gateway, key.replace(".", "_"))
        if value < gateway.socket_request_max_bytes:
            raise ConfigError(f"gateway.{key}", value, "must be at least gateway.socket."
                              f"request.max.bytes ({gateway.socket_request_max_bytes})")
    return settings


# dataclass field types are strings under `from __future__ import annotations`
_FIELD_TYPES = {"int": int, "bool": bool, "str": str}

assert set(TOPIC_KEYS) == set(_defaults()["topic"]), "defaults.toml [topic] out of sync"
