"""Topic configs over the Kafka protocol: DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs.

Config names and values are Kafka's (``conf.topic``), the same as the v3 configs
routes (``http/v3_configs.py``) and ``sparklog topics alter``: a change is one
``Log.alter_topic`` call (one exclusive config version: all of a resource's changes
apply, or none), and ``validate_only`` builds the new config over the current one
exactly as ``alter_topic`` would, without writing it.

**Sources.** A topic config equal to the gateway's ``[topic]`` setting (Kafka's
broker-level default) is ``DEFAULT_CONFIG`` (5), any other ``DYNAMIC_TOPIC_CONFIG``
(1); synonyms are not listed (``include_synonyms`` is ignored). ``partitions`` is
listed read-only (partitions grow with CreatePartitions, not a config).

**Broker resources** (type 4) are answered with the gateway's ``[topic]`` defaults
under Kafka's names (source ``DEFAULT_CONFIG``, read-only): what a Kafka broker's
``log.*`` defaults tell a client. Altering a broker resource answers
``INVALID_REQUEST``: gateway settings are loaded once at start-up (STYLE.md 6).

**Errors, per resource:** an unknown topic ``UNKNOWN_TOPIC_OR_PARTITION``; an
unknown config name or a bad value ``INVALID_CONFIG`` with ConfigError's sentence
(the key and the value); an unknown resource type or operation ``INVALID_REQUEST``.

**ACLs** (Kafka's): DescribeConfigs needs DescribeConfigs, the alter APIs AlterConfigs,
on the topic (a broker or broker logger: the cluster; a group: the group); a resource
denied answers TOPIC_, CLUSTER_ or GROUP_AUTHORIZATION_FAILED with Kafka's message,
the others are served.
"""

from __future__ import annotations

import logging
from typing import Any

import conf
from conf.errors import ConfigError
from conf.topic import validate_topic_name
from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.broker import ZERO, Broker
from ingest_gateway.kafka.wire import Header, error, make, response_module

log = logging.getLogger("sparklog.gateway.kafka")

API_DESCRIBE_CONFIGS, API_ALTER_CONFIGS, API_INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
#: Kafka 4.0's version floors up to what confluent-kafka 2.16 and kafka-python 3.0 use
OFFERED: dict[int, tuple[int, int]] = {
    API_DESCRIBE_CONFIGS: (1, 4),
    API_ALTER_CONFIGS: (0, 2),
    API_INCREMENTAL_ALTER_CONFIGS: (0, 1),
}

TOPIC, BROKER, GROUP = 2, 4, 32  # Kafka's ConfigResource.Type
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # Kafka's ConfigSource
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # Kafka's AlterConfigOp.OpType
#: configs that are not changed through the config APIs
READ_ONLY = ("partitions",)


class BadResource(ValueError):
    """A resource type or operation these APIs do not serve (INVALID_REQUEST)."""


def _authorize(broker: Broker, operation: str, kind: int, name: str) -> None:
    """Raises ``security.Denied`` unless the principal may do ``operation`` on the
    resource."""
    if kind == TOPIC:
        rtype = "Topic"
    elif kind == GROUP:
        rtype = "Group"
    else:  # a broker or broker logger: the cluster, as Kafka
        rtype, name = "Cluster", sec.CLUSTER_NAME
    sec.check(broker, operation, rtype, name)


def _defaults(broker: Broker) -> dict[str, str]:
    return broker.settings.topic.to_kafka()


async def describe_configs(broker: Broker, head: Header, req: Any) -> Any:
    """Each resource's configs (those named in ``configuration_keys``; None or empty:
    all), or its error code and message."""
    mod = response_module(API_DESCRIBE_CONFIGS, head.api_version)
    results = []
    for r in req.resources:
        code, message, configs = codes.NONE, None, ()
        try:
            _authorize(broker, "DescribeConfigs", r.resource_type, r.resource_name)
            values, defaults = await _described(broker, r.resource_type, r.resource_name)
            wanted = set(r.configuration_keys or ()) or None
            configs = tuple(
                make(mod.DescribeConfigsResourceResult, name=name, value=value,
                     read_only=name in READ_ONLY or r.resource_type == BROKER,
                     is_default=defaults.get(name) == value,
                     config_source=DEFAULT_CONFIG if defaults.get(name) == value
                     else DYNAMIC_TOPIC_CONFIG,
                     is_sensitive=False, synonyms=(), config_type=0, documentation=None)
                for name, value in values.items() if wanted is None or name in wanted)
        except Exception as e:  # noqa: BLE001 - per-resource error codes
            code, message = _code(e), str(e)
        results.append(make(mod.DescribeConfigsResult, error_code=error(code),
                            error_message=message, resource_type=r.resource_type,
                            resource_name=r.resource_name, configs=configs))
    return make(mod.DescribeConfigsResponse, throttle_time=ZERO, results=tuple(results))


async def _described(broker: Broker, kind: int, name: str) -> tuple[dict[str, str],
                                                                     dict[str, str]]:
    """(values, defaults) of a resource; raises BadResource, UnknownTopic,
    InvalidTopicName."""
    defaults = _defaults(broker)
    if kind == BROKER:
        return defaults, defaults
    if kind != TOPIC:
        raise BadResource(f"resource type {kind} is not served (topics: 2, brokers: 4)")
    validate_topic_name(name)
    info = await broker.batcher.run_blocking(lambda: broker.log.topic(name, refresh=True))
    return info.config.to_kafka(), defaults


async def alter_configs(broker: Broker, head: Header, req: Any) -> Any:
    """Kafka's legacy AlterConfigs: the configs given replace the topic's whole set
    (every config not named goes back to its default, as Kafka's does)."""
    mod = response_module(API_ALTER_CONFIGS, head.api_version)
    out = []
    for r in req.resources:
        code, message = codes.NONE, None
        try:
            _authorize(broker, "AlterConfigs", r.resource_type, r.resource_name)
            _check_alterable(r.resource_type)
            given = {c.name: c.value for c in r.configs}
            changes = {k: v for k, v in _defaults(broker).items() if k not in READ_ONLY}
            changes.update(given)
            await _alter(broker, r.resource_name, changes, given, req.validate_only)
        except Exception as e:  # noqa: BLE001 - per-resource error codes
            code, message = _code(e), str(e)
        out.append(make(mod.AlterConfigsResourceResponse, error_code=error(code),
                        error_message=message, resource_type=r.resource_type,
                        resource_name=r.resource_name))
    return make(mod.AlterConfigsResponse, throttle_time=ZERO, responses=tuple(out))


async def incremental_alter_configs(broker: Broker, head: Header, req: Any) -> Any:
    """SET, DELETE (back to the default), APPEND and SUBTRACT (list configs such as
    ``cleanup.policy``: items of the comma-separated value) per config."""
    mod = response_module(API_INCREMENTAL_ALTER_CONFIGS, head.api_version)
    out = []
    for r in req.resources:
        code, message = codes.NONE, None
        try:
            _authorize(broker, "AlterConfigs", r.resource_type, r.resource_name)
            _check_alterable(r.resource_type)
            current, defaults = await _described(broker, TOPIC, r.resource_name)
            changes = {c.name: _apply_op(c.name, c.config_operation, c.value, current, defaults)
                       for c in r.configs}
            await _alter(broker, r.resource_name, changes, changes, req.validate_only)
        except Exception as e:  # noqa: BLE001 - per-resource error codes
            code, message = _code(e), str(e)
        out.append(make(mod.AlterConfigsResourceResponse, error_code=error(code),
                        error_message=message, resource_type=r.resource_type,
                        resource_name=r.resource_name))
    return make(mod.IncrementalAlterConfigsResponse, throttle_time=ZERO, responses=tuple(out))


def _check_alterable(kind: int) -> None:
    if kind == BROKER:
        raise BadResource("broker configs are the gateway's settings, loaded at start-up: "
                          "they are not altered over the Kafka protocol")
    if kind != TOPIC:
        raise BadResource(f"resource type {kind} is not served (topics: 2)")


def _apply_op(name: str, op: int, value: str | None, current: dict[str, str],
              defaults: dict[str, str]) -> str | None:
    """The new value of ``name`` after one IncrementalAlterConfigs operation; raises
    ConfigError (unknown name) or BadResource (unknown operation)."""
    if name not in current:
        raise ConfigError(name, value, "unknown topic config; known: "
                          + ", ".join(sorted(current)))
    if op == SET:
        return value
    if op == DELETE:
        return defaults.get(name)
    if op in (APPEND, SUBTRACT):
        items = [i for i in current[name].split(",") if i]
        given = [i.strip() for i in (value or "").split(",") if i.strip()]
        if op == APPEND:
            items += [i for i in given if i not in items]
        else:
            items = [i for i in items if i not in given]
        return ",".join(items)
    raise BadResource(f"config {name!r}: operation {op} is not SET (0), DELETE (1), "
                      f"APPEND (2) or SUBTRACT (3)")


async def _alter(broker: Broker, topic: str, changes: dict[str, Any], named: dict[str, Any],
                 validate_only: bool) -> None:
    """Apply ``changes`` to ``topic`` at once (``named``: what the client asked to change,
    checked against READ_ONLY); raises ConfigError, UnknownTopic, InvalidTopicName."""
    for name in named:
        if name in READ_ONLY:
            raise ConfigError(name, named[name], "read-only over the config APIs (partitions "
                              "grow with CreatePartitions)")
    none = [k for k, v in changes.items() if v is None]
    if none:
        raise ConfigError(none[0], None, "a value is required")
    validate_topic_name(topic)
    b, lg = broker.batcher, broker.log
    if validate_only:  # built over the current configs exactly as alter_topic would
        info = await b.run_blocking(lambda: lg.topic(topic, refresh=True))
        conf.TopicConfig.from_kafka(changes, base=info.config)
        return
    await b.run_blocking(lg.alter_topic, topic, changes)
    b.forget_topic(topic)


def _code(e: Exception) -> int:
    if isinstance(e, BadResource):
        return codes.INVALID_REQUEST
    code = codes.code_of(e)
    if code == codes.UNKNOWN_SERVER_ERROR:
        log.warning("config request failed: %s", e)
    return code


HANDLERS = {API_DESCRIBE_CONFIGS: describe_configs, API_ALTER_CONFIGS: alter_configs,
            API_INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs}
