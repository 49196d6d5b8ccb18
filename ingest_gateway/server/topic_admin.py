"""Topic and topic-config admin: the one implementation REST Proxy and Kafka's admin APIs call.

The adapters (``http/topics.py``, ``http/v3_configs.py``, ``kafka/admin_topics.py``,
``kafka/admin_configs.py``) decode a request, check its ACLs, call one method here and
encode the answer or the typed error. Each change is one ``Log`` call (one exclusive
version in the store: all of a request's config changes apply, or none), run off the
event loop, after which the batcher forgets its cached view of the topic.

Semantics, Kafka's where Kafka has them:

- a topic's partition count is set at creation and grows only through
  :meth:`TopicAdmin.add_partitions` (Kafka's CreatePartitions, REST v3 ``PATCH`` with
  ``partitions_count``); the config APIs refuse ``partitions`` as read-only;
- ``validate_only`` builds exactly what the change would write, over the topic's current
  configs, and writes nothing;
- a config deleted goes back to the gateway's default (``topic.*`` settings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conf import TopicConfig
from conf.errors import ConfigError
from conf.topic import validate_topic_name
from ingest_gateway.errors import InvalidPartitions
from log_layout import TopicExists

#: configs the config APIs cannot change (the partition count grows with add_partitions)
READ_ONLY = ("partitions",)


class TopicAdmin:
    """Create, delete and grow topics; describe and alter their configs.

    ``log`` is the store's ``Log``; ``batcher`` the gateway's (its thread pool runs the
    store calls, and it is told to forget a topic that changed); ``defaults`` the
    ``topic.*`` settings a new topic starts from.
    """

    def __init__(self, log: Any, batcher: Any, defaults: TopicConfig):
        self.log, self.batcher, self.defaults = log, batcher, defaults

    async def create(self, name: str, configs: Mapping[str, Any] | None = None, *,
                     partitions: int | None = None, validate_only: bool = False) -> TopicConfig:
        """Create ``name`` with ``configs`` (Kafka's names) and ``partitions`` (None: the
        default); the config it has (or would have, with ``validate_only``). Raises
        InvalidTopicName, InvalidPartitions, ConfigError, TopicExists."""
        validate_topic_name(name)
        given = dict(configs or {})
        if partitions is not None:
            if isinstance(partitions, bool) or not isinstance(partitions, int) \
                    or partitions < 1:
                raise InvalidPartitions(name, partitions)
            given["partitions"] = partitions
        config = TopicConfig.from_kafka(given, base=self.defaults)
        if validate_only:
            if name in await self.batcher.run_blocking(self.log.topics):
                raise TopicExists(name)
            return config
        await self.batcher.run_blocking(self.log.create_topic, name, config)
        self.batcher.forget_topic(name)
        return config

    async def delete(self, name: str) -> None:
        """Delete ``name`` and its data. Raises InvalidTopicName, UnknownTopic."""
        validate_topic_name(name)
        await self.batcher.run_blocking(self.log.delete_topic, name)
        self.batcher.forget_topic(name)

    async def add_partitions(self, name: str, count: int, *,
                             validate_only: bool = False) -> None:
        """Grow ``name`` to ``count`` partitions. Raises InvalidPartitions (fewer than it
        has, or not a positive integer), UnknownTopic, InvalidTopicName."""
        validate_topic_name(name)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidPartitions(name, count)
        info = await self.batcher.run_blocking(lambda: self.log.topic(name, refresh=True))
        if count < info.partitions:
            raise InvalidPartitions(name, count, had=info.partitions)
        if validate_only or count == info.partitions:
            return
        try:
            await self.batcher.run_blocking(self.log.alter_topic, name, {"partitions": count})
        except ConfigError as e:  # a racing change shrank the margin: still Kafka's code
            if e.key == "partitions":
                raise InvalidPartitions(name, count, had=info.partitions) from None
            raise
        self.batcher.forget_topic(name)

    def default_configs(self) -> dict[str, str]:
        """The value every config of a new topic starts from (Kafka's names)."""
        return self.defaults.to_kafka()

    async def configs(self, name: str) -> dict[str, str]:
        """``name``'s configs as stored now (Kafka's names). Raises InvalidTopicName,
        UnknownTopic."""
        validate_topic_name(name)
        info = await self.batcher.run_blocking(lambda: self.log.topic(name, refresh=True))
        return info.config.to_kafka()

    async def alter_configs(self, name: str, changes: Mapping[str, str | None], *,
                            validate_only: bool = False) -> None:
        """Apply ``changes`` (Kafka's names -> values; None: back to the default) at once.
        Raises ConfigError (an unknown or read-only config, a bad value), UnknownTopic,
        InvalidTopicName."""
        validate_topic_name(name)
        defaults = self.default_configs()
        values: dict[str, Any] = {}
        for key, value in changes.items():
            if key in READ_ONLY:
                raise ConfigError(key, value, "read-only over the config APIs (a topic's "
                                  "partitions grow with CreatePartitions or PATCH "
                                  "partitions_count)")
            if value is None:
                if key not in defaults:
                    raise ConfigError(key, None, "unknown topic config; known: "
                                      + ", ".join(sorted(defaults)))
                value = defaults[key]
            values[key] = value
        if validate_only:  # built over the current configs exactly as alter_topic would
            info = await self.batcher.run_blocking(lambda: self.log.topic(name, refresh=True))
            TopicConfig.from_kafka(values, base=info.config)
            return
        await self.batcher.run_blocking(self.log.alter_topic, name, values)
        self.batcher.forget_topic(name)
