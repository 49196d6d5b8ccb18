"""Typed configuration: defaults, topic configs with Kafka's names, validation.

``conf.load()`` reads ``conf/defaults.toml``, then ``SPARKLOG_*`` environment
variables, then explicit overrides, into frozen dataclasses; a bad value raises
:class:`ConfigError` naming the key and the value.

Listeners use Kafka's names: ``gateway.listeners`` is the HTTP one (``http(s)://host:port``);
``gateway.kafka.listeners`` (``PLAINTEXT://host:port``, empty: none) adds Kafka's wire
protocol beside it, with ``gateway.socket.request.max.bytes`` bounding a request. A
separate key, not a second entry in ``gateway.listeners``, because one uvicorn server
serves one HTTP listener and the Kafka one is a different server on the same loop.
"""

from conf.durations import parse_duration_ms
from conf.errors import ConfigError, SparklogError
from conf.settings import (GatewaySettings, MaintenanceSettings, Settings, SparkSettings,
                           StoreSettings, load, PROJECT_ROOT)
from conf.topic import TOPIC_KEYS, InvalidTopicName, TopicConfig, validate_topic_name

__all__ = [
    "ConfigError", "SparklogError", "GatewaySettings", "MaintenanceSettings", "Settings",
    "SparkSettings", "StoreSettings", "load", "PROJECT_ROOT", "TOPIC_KEYS",
    "InvalidTopicName", "TopicConfig", "validate_topic_name", "parse_duration_ms",
]
