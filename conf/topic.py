"""Topic configuration with Kafka's key names, defaults and validation.

A :class:`TopicConfig` is frozen; build one with :meth:`TopicConfig.from_kafka`
from a ``{"retention.ms": "3600000", ...}`` mapping (strings or native values,
as Kafka's admin API and REST Proxy pass them) and write it back with
:meth:`TopicConfig.to_kafka`. Unknown keys and bad values raise
:class:`~conf.errors.ConfigError` naming the key and the value.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Callable

from conf.errors import ConfigError

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
COMPRESSION_TYPES = ("producer", "none", "uncompressed", "gzip", "snappy", "lz4", "zstd")
#: the Arrow IPC codec a topic's segments are stored with (Arrow has no gzip or snappy:
#: the nearest in kind), by compression.type; Kafka fetches answer in the named codec
STORED_CODEC = {"gzip": "zstd", "snappy": "lz4", "lz4": "lz4", "zstd": "zstd"}
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

#: Kafka's legal topic names (kafka.common.internals.Topic): at most 249 chars. Anchored
#: with \A and \Z, not ^ and $: "$" also matches before a trailing newline, so
#: ``.match("t\n")`` succeeded and made a topic folder named "t\n".
TOPIC_NAME_RE = re.compile(r"\A[a-zA-Z0-9._-]{1,249}\Z")
MAX_PARTITIONS = 10_000
#: an integer config value as text: Kafka trims whitespace, then ASCII digits only
#: (Python's int() would also take "1_0" and non-ASCII digits such as "١")
_INT_TEXT = re.compile(r"-?[0-9]{1,19}")


def _int(minimum: int) -> Callable[[str, Any], int]:
    def parse(key: str, raw: Any) -> int:
        if isinstance(raw, bool):
            raise ConfigError(key, raw, "expected an integer")
        try:
            if isinstance(raw, int):
                value = raw
            elif _INT_TEXT.fullmatch(str(raw).strip()):
                value = int(str(raw).strip())
            else:
                raise ValueError(raw)
        except ValueError:
            raise ConfigError(key, raw, "expected an integer") from None
        if value < minimum:
            raise ConfigError(key, raw, f"must be at least {minimum}")
        return value

    return parse


def _ratio(key: str, raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(key, raw, "expected a number between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(key, raw, "expected a number between 0 and 1")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        value = str(raw).strip()
        if key == "cleanup.policy":  # Kafka accepts either order: "delete,compact"
            value = ",".join(sorted(p.strip() for p in value.split(",")))
        if value not in options:
            raise ConfigError(key, raw, f"expected one of {', '.join(options)}")
        return value

    return parse


#: Kafka key -> (attribute, default, parser, one line of doc)
TOPIC_KEYS: dict[str, tuple[str, Any, Callable[[str, Any], Any], str]] = {
    "partitions": ("partitions", 1, _int(1), "number of partitions"),
    "cleanup.policy": ("cleanup_policy", "delete", _choice(CLEANUP_POLICIES),
                       "delete (retention), compact (latest value per key) or both"),
    "retention.ms": ("retention_ms", 604_800_000, _int(-1),
                     "drop segments whose newest record is older than this; -1 = forever"),
    "retention.bytes": ("retention_bytes", -1, _int(-1),
                        "drop oldest segments while a partition is larger; -1 = no limit"),
    "segment.bytes": ("segment_bytes", 1_073_741_824, _int(14),
                      "roll-up and compaction write segments up to this size"),
    "segment.ms": ("segment_ms", 604_800_000, _int(1),
                   "roll-up merges at most this much time into one segment"),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0, _int(0),
                              "records younger than this are never compacted"),
    "delete.retention.ms": ("delete_retention_ms", 86_400_000, _int(0),
                            "how long tombstones survive compaction"),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", 0.5, _ratio,
                                  "clean a partition once this share of it is dirty"),
    "max.message.bytes": ("max_message_bytes", 1_048_588, _int(0),
                          "largest record (key + value + headers) accepted"),
    "compression.type": ("compression_type", "producer", _choice(COMPRESSION_TYPES),
                         "codec of the stored segments and of Kafka fetches: none, gzip, "
                         "snappy, lz4, zstd (producer = none; segments store gzip as zstd "
                         "and snappy as lz4)"),
    "file.delete.delay.ms": ("file_delete_delay_ms", 60_000, _int(0),
                             "grace period before unreferenced files are deleted"),
    "message.timestamp.type": ("message_timestamp_type", "CreateTime",
                               _choice(TIMESTAMP_TYPES),
                               "CreateTime (producer's) or LogAppendTime (gateway's)"),
}


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    """A topic's configuration; attribute names are Kafka's keys with ``_``."""

    partitions: int = 1
    cleanup_policy: str = "delete"
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    min_compaction_lag_ms: int = 0
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1_048_588
    compression_type: str = "producer"
    file_delete_delay_ms: int = 60_000
    message_timestamp_type: str = "CreateTime"

    @classmethod
    def from_kafka(cls, configs: Mapping[str, Any] | None = None, *,
                   base: "TopicConfig | None" = None) -> "TopicConfig":
        """Build from Kafka-named keys over ``base`` (default: Kafka's defaults).

        Raises ConfigError for an unknown key or a bad value.
        """
        values = dataclasses.asdict(base) if base is not None else {}
        for key, raw in (configs or {}).items():
            if key not in TOPIC_KEYS:
                raise ConfigError(key, raw, "unknown topic config; known: "
                                  + ", ".join(sorted(TOPIC_KEYS)))
            attr, _default, parse, _doc = TOPIC_KEYS[key]
            values[attr] = parse(key, raw)
        if values.get("partitions", 1) > MAX_PARTITIONS:
            raise ConfigError("partitions", values["partitions"],
                              f"at most {MAX_PARTITIONS} partitions")
        return cls(**values)

    def to_kafka(self) -> dict[str, str]:
        """The configuration as Kafka-named keys with string values."""
        return {key: str(getattr(self, attr)) for key, (attr, *_rest) in TOPIC_KEYS.items()}

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compression(self) -> str | None:
        """The Arrow IPC buffer codec, or None for uncompressed segments."""
        return STORED_CODEC.get(self.compression_type)


def validate_topic_name(name: Any) -> str:
    """Return ``name`` if it is a legal Kafka topic name, else raise.

    Legal: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``
    (which would be path tricks). Raises InvalidTopicName.
    """
    if not isinstance(name, str) or not TOPIC_NAME_RE.fullmatch(name) or name in (".", ".."):
        raise InvalidTopicName(name)
    return name


class InvalidTopicName(ConfigError):
    """A topic name Kafka would refuse (empty, too long, bad characters, ``..``)."""

    code = "invalid_topic_name"

    def __init__(self, name: Any, reason: str | None = None):
        if reason is not None:  # the caller knows better (a reserved name)
            pass
        elif not isinstance(name, str):
            reason = "a topic name must be a string"
        elif not name:
            reason = "a topic name must not be empty"
        elif len(name) > 249:
            reason = f"a topic name is at most 249 characters, this one has {len(name)}"
        elif name in (".", ".."):
            reason = "'.' and '..' are not topic names"
        else:
            reason = "a topic name may only contain ASCII letters, digits, '.', '_' and '-'"
        super().__init__("topic", name, reason)
        self.name = name
