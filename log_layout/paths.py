"""Every storage path of the log, in one place.

::

    <root>/
      <topic>/
        _topic.json                          topic metadata (partitions, configs as created)
        _config/<version:020d>.json          config changes, created exclusively; newest wins
        <partition>/
          <base_offset:020d>-<uniq>.arrow    immutable segment (see segment.py)
          _log/<version:020d>.json           partition manifest versions (see manifest.py)
      _groups/<group>.json                   committed offsets of a consumer group
      _maintenance/history/<ns>-<uniq>.json  one file per maintenance run

Offsets and versions are zero-padded to 20 digits so a listing sorts
numerically (Kafka's ``LogFileUtils`` does the same). ``<uniq>`` makes every
segment name unique, so two writers never collide on a file name and a file
once named by a manifest never changes.
"""

from __future__ import annotations

import re
import uuid

from conf.topic import validate_topic_name

TOPIC_META = "_topic.json"
TOPIC_CONFIG_FOLDER = "_config"
MANIFEST_FOLDER = "_log"
SEGMENT_SUFFIX = ".arrow"
GROUPS_FOLDER = "_groups"
MAINTENANCE_HISTORY = "_maintenance/history.jsonl"
MAINTENANCE_FOLDER = "_maintenance"
#: top-level names the log keeps for itself: no topic may take them
RESERVED_NAMES = frozenset({GROUPS_FOLDER, MAINTENANCE_FOLDER})


def topic_meta(topic: str) -> str:
    return f"{validate_topic_name(topic)}/{TOPIC_META}"


def topic_config_folder(topic: str) -> str:
    return f"{validate_topic_name(topic)}/{TOPIC_CONFIG_FOLDER}"


def topic_config_name(version: int) -> str:
    return f"{version:020d}.json"


def partition_folder(topic: str, partition: int) -> str:
    return f"{validate_topic_name(topic)}/{int(partition)}"


def manifest_folder(topic: str, partition: int) -> str:
    return f"{partition_folder(topic, partition)}/{MANIFEST_FOLDER}"


def manifest_name(version: int) -> str:
    return f"{version:020d}.json"


def manifest_version(name: str) -> int | None:
    """The version of a manifest file name, or None if it is not one."""
    if len(name) == 25 and name.endswith(".json") and name[:20].isdigit():
        return int(name[:20])
    return None


def new_segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}-{uuid.uuid4().hex[:16]}{SEGMENT_SUFFIX}"


_SEGMENT_NAME = re.compile(r"[0-9]{20}-[A-Za-z0-9_-]{1,64}\.arrow")


def is_segment_name(name: object) -> bool:
    """True for a segment file name: no folders, no path tricks."""
    return isinstance(name, str) and _SEGMENT_NAME.fullmatch(name) is not None


def group_offsets(group: str) -> str:
    return f"{GROUPS_FOLDER}/{validate_topic_name(group)}.json"
