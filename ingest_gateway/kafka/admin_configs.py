"""Topic configs over the Kafka protocol: DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs.

Config names and values are Kafka's (``conf.topic``), the same as the v3 configs
routes (``http/v3_configs.py``) and ``sparklog topics alter``: both call
``server.topic_admin.TopicAdmin`` (one exclusive config version a change: all of a
resource's changes apply, or none; ``validate_only`` writes nothing).

**Sources.** A topic config equal to the gateway's ``[topic]`` setting (Kafka's
broker-level default) is ``DEFAULT_CONFIG`` (5), any other ``DYNAMIC_TOPIC_CONFIG``
(1); synonyms are not listed (``include_synonyms`` is ignored). ``partitions`` is
listed read-only (partitions grow with CreatePartitions, not a config).

**Broker resources** (type 4) are answered with the gateway's ``[topic]`` defaults
under Kafka's names (source ``DEFAULT_CONFIG``, read-only): what a Kafka broker's
``log.*`` defaults tell a client. Altering a broker resource answers
``INVALID_REQUEST``: gateway settings are loaded once at start-up (STYLE.md 6).

**Replication throttles** (:data:`REPLICATION_THROTTLES`, Kafka's names on brokers and
topics) never apply: the store replicates, the gateways copy no replicas. An
IncrementalAlterConfigs that only DELETEs them (``kafka-reassign-partitions.sh --verify``
clearing its throttles) deletes what was never set: answered ``NONE``, changing
nothing, as Kafka answers a delete of an unset config; setting one is refused as other
broker configs are, or ``INVALID_CONFIG`` on a topic.

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

from conf.errors import ConfigError
from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.server.topic_admin import READ_ONLY

logger = logging.getLogger("sparklog.gateway.kafka")

API_DESCRIBE_CONFIGS, API_ALTER_CONFIGS, API_INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
#: Kafka 4.0's version floors up to what confluent-kafka 2.16 and kafka-python 3.0 use
OFFERED: dict[int, tuple[int, int]] = {
    API_DESCRIBE_CONFIGS: (1, 4),
    API_ALTER_CONFIGS: (0, 2),
    API_INCREMENTAL_ALTER_CONFIGS: (0, 1),
}

TOPIC, BROKER, GROUP = 2, 4, 32  # Kafka's ConfigResource.Type
#: Kafka's replication throttle configs (broker and topic): nothing here to throttle
REPLICATION_THROTTLES = frozenset({
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"})
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # Kafka's ConfigSource
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # Kafka's AlterConfigOp.OpType


class BadResource(ValueError):
    """A resource type or operation these APIs do not serve (INVALID_REQUEST)."""


def _authorize(ctx: KafkaContext, operation: str, kind: int, name: str) -> None:
    """Raises ``security.Denied`` unless the principal may do ``operation`` on the
    resource."""
    if kind == TOPIC:
        rtype = "Topic"
    elif kind == GROUP:
        rtype = "Group"
    else:  # a broker or broker logger: the cluster, as Kafka
        rtype, name = "Cluster", sec.CLUSTER_NAME
    sec.check(ctx, operation, rtype, name)


async def describe_configs(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Each resource's configs (those named in ``configuration_keys``; None or empty:
    all), or its error code and message."""
    mod = response_module(API_DESCRIBE_CONFIGS, head.api_version)
    results = []
    for r in req.resources:
        code, message, configs = codes.NONE, None, ()
        try:
            _authorize(ctx, "DescribeConfigs", r.resource_type, r.resource_name)
            values, defaults = await _described(ctx, r.resource_type, r.resource_name)
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


async def _described(ctx: KafkaContext, kind: int, name: str) -> tuple[dict[str, str],
                                                                     dict[str, str]]:
    """(values, defaults) of a resource; raises BadResource, UnknownTopic,
    InvalidTopicName."""
    defaults = ctx.topics.default_configs()
    if kind == BROKER:
        return defaults, defaults
    if kind != TOPIC:
        raise BadResource(f"resource type {kind} is not served (topics: 2, brokers: 4)")
    return await ctx.topics.configs(name), defaults


async def alter_configs(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Kafka's legacy AlterConfigs: the configs given replace the topic's whole set
    (every config not named goes back to its default, as Kafka's does)."""
    mod = response_module(API_ALTER_CONFIGS, head.api_version)
    out = []
    for r in req.resources:
        code, message = codes.NONE, None
        try:
            _authorize(ctx, "AlterConfigs", r.resource_type, r.resource_name)
            _check_alterable(r.resource_type)
            given = _given({c.name: c.value for c in r.configs})
            # every config not named goes back to its default
            changes: dict[str, str | None] = {k: None for k in ctx.topics.default_configs()
                                              if k not in READ_ONLY}
            changes.update(given)
            await ctx.topics.alter_configs(r.resource_name, changes,
                                           validate_only=req.validate_only)
        except Exception as e:  # noqa: BLE001 - per-resource error codes
            code, message = _code(e), str(e)
        out.append(make(mod.AlterConfigsResourceResponse, error_code=error(code),
                        error_message=message, resource_type=r.resource_type,
                        resource_name=r.resource_name))
    return make(mod.AlterConfigsResponse, throttle_time=ZERO, responses=tuple(out))


async def incremental_alter_configs(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """SET, DELETE (back to the default), APPEND and SUBTRACT (list configs such as
    ``cleanup.policy``: items of the comma-separated value) per config."""
    mod = response_module(API_INCREMENTAL_ALTER_CONFIGS, head.api_version)
    out = []
    for r in req.resources:
        code, message = codes.NONE, None
        try:
            _authorize(ctx, "AlterConfigs", r.resource_type, r.resource_name)
            if _clears_throttles(r):  # never set: nothing to delete (module doc)
                raise _NothingToDo()
            _check_alterable(r.resource_type)
            current = (await _described(ctx, TOPIC, r.resource_name))[0]
            changes = {c.name: _apply_op(c.name, c.config_operation, c.value, current)
                       for c in r.configs}
            await ctx.topics.alter_configs(r.resource_name, changes,
                                           validate_only=req.validate_only)
        except _NothingToDo:
            pass
        except Exception as e:  # noqa: BLE001 - per-resource error codes
            code, message = _code(e), str(e)
        out.append(make(mod.AlterConfigsResourceResponse, error_code=error(code),
                        error_message=message, resource_type=r.resource_type,
                        resource_name=r.resource_name))
    return make(mod.IncrementalAlterConfigsResponse, throttle_time=ZERO, responses=tuple(out))


class _NothingToDo(Exception):
    """An alteration that changes nothing (deleting replication throttles never set)."""


def _clears_throttles(r: Any) -> bool:
    """Whether a resource's operations are only DELETEs of replication throttles."""
    return r.resource_type in (TOPIC, BROKER) and bool(r.configs) and all(
        c.config_operation == DELETE and c.name in REPLICATION_THROTTLES for c in r.configs)


def _check_alterable(kind: int) -> None:
    if kind == BROKER:
        raise BadResource("broker configs are the gateway's settings, loaded at start-up: "
                          "they are not altered over the Kafka protocol")
    if kind != TOPIC:
        raise BadResource(f"resource type {kind} is not served (topics: 2)")


def _apply_op(name: str, op: int, value: str | None, current: dict[str, str]) -> str | None:
    """The new value of ``name`` after one IncrementalAlterConfigs operation (None: back
    to its default); raises ConfigError (unknown name, no value to SET) or BadResource
    (unknown operation)."""
    if name not in current:
        raise ConfigError(name, value, "unknown topic config; known: "
                          + ", ".join(sorted(current)))
    if op == SET:
        return _given({name: value})[name]
    if op == DELETE:
        return None
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


def _given(values: dict[str, str | None]) -> dict[str, str]:
    """Values a client set; raises ConfigError for one without a value (Kafka refuses a
    null value for a topic config)."""
    for name, value in values.items():
        if value is None:
            raise ConfigError(name, None, "a value is required")
    return values  # type: ignore[return-value]


def _code(e: Exception) -> int:
    if isinstance(e, BadResource):
        return codes.INVALID_REQUEST
    code = codes.code_of(e)
    if code == codes.UNKNOWN_SERVER_ERROR:
        logger.warning("config request failed: %s", e)
    return code


HANDLERS = {API_DESCRIBE_CONFIGS: describe_configs, API_ALTER_CONFIGS: alter_configs,
            API_INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs}
