"""Typed configuration: defaults, topic configs with Kafka's names, validation.

``conf.load()`` reads ``conf/defaults.toml``, then ``SPARKLOG_*`` environment
variables, then explicit overrides, into frozen dataclasses; a bad value raises
:class:`ConfigError` naming the key and the value.
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
