"""Every storage path of the log, in one place.

::

    <root>/
      <topic>/
        _topic.json                          topic metadata (partitions, configs as created)
        _config/<version:020d>.json          config changes, created exclusively; newest wins
        <partition>/
          <base_offset:020d>-<uniq>.arrow    immutable segment (see segment.py)
          _log/<version:020d>-<topic_id>.json  partition manifest versions (see manifest.py);
                                             an append's is its segment's file, which
                                             carries the JSON (locally a second name of
                                             it; elsewhere its only name)
      _cluster.json                          the store's cluster id (created on first use)
      _groups/<group>.json                   committed offsets of a consumer group
      _maintenance/history/<ns>-<uniq>.json  one file per maintenance run
      _security/acls/, quotas/, scram/       ACLs, quotas, SCRAM credentials (acls.py, quotas.py,
                                             scram.py)
      _transactions/<tid>/<version:020d>.json  one transactional id's state (transactions.py)
      _hot/<journal>/<seq:020d>.json         the hot tier: one gateway's flush commits, and
      _hot/<journal>/<seq:020d>-<uniq>.wal   the shared objects they name (hot_journal.py)
      _tables/                               the default warehouse of materialised tables
      .tmp-<uniq>                            a root file being written (see store.py)

Reserved names: topics share the root with the log's own files, and every
legal Kafka topic name (``[a-zA-Z0-9._-]{1,249}``, not ``.`` or ``..``) is a
legal file name, so the root names above are reserved: ``_cluster.json``,
``_groups``, ``_maintenance``, ``_brokers``, ``_security``, ``_tables``,
``_transactions``, ``_hot`` and any name
starting ``.tmp-``
(:data:`RESERVED_NAMES`, :data:`RESERVED_PREFIXES`). Creating, reading or
producing to a topic of such a name raises InvalidTopicName saying why (the
gateway answers 400, error_code 40003). Kafka reserves none of them, but none
is a name a Kafka user picks by habit (Kafka's own internal topics start
``__``, which stays free); moving the internal files under one folder instead
would break every existing store. A new internal name at the root must be
added here: ``tests/log_layout/test_topics.py`` lists a used store's root and
fails on any name a topic could take.

Offsets and versions are zero-padded to 20 digits so a listing sorts
numerically (Kafka's ``LogFileUtils`` does the same). ``<uniq>`` makes every
segment name unique, so two writers never collide on a file name and a file
once named by a manifest never changes.

``<topic_id>`` (Kafka's topic ids, KIP-516) is drawn when the topic is created
and kept in ``_topic.json``. Manifest names carry it, so a writer still alive
after its topic was deleted and created again under the same name commits only
to names of its own, dead incarnation: it can neither win a version of the new
topic nor be rebased into it, and its files are garbage for vacuum. Topics
created before ids have the id "" and manifest names without the suffix.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
import uuid

from conf.topic import InvalidTopicName, validate_topic_name

TOPIC_META = "_topic.json"
TOPIC_CONFIG_FOLDER = "_config"
MANIFEST_FOLDER = "_log"
SEGMENT_SUFFIX = ".arrow"
CLUSTER_META = "_cluster.json"
GROUPS_FOLDER = "_groups"
MAINTENANCE_HISTORY = "_maintenance/history.jsonl"
MAINTENANCE_FOLDER = "_maintenance"
#: top-level names the log keeps for itself: no topic may take them
BROKERS_FOLDER = "_brokers"
#: ACLs and quotas: a topic of this name, once deleted, would take every rule with it
SECURITY_FOLDER = "_security"
#: pipeline.tables' default warehouse, beside the log
TABLES_FOLDER = "_tables"
#: the transaction log: one versioned document per transactional id (transactions.py)
TRANSACTIONS_FOLDER = "_transactions"
#: the hot tier: each gateway's journal of shared flush objects (hot_journal.py)
HOT_FOLDER = "_hot"
#: the Schema Registry's topic (schema_registry.py): a compacted topic like any other,
#: not a reserved name (an older layout kept files under this folder; read once to
#: migrate them, they live beside the topic's own files without clashing)
SCHEMAS_TOPIC = "_schemas"
RESERVED_NAMES = frozenset({CLUSTER_META, GROUPS_FOLDER, MAINTENANCE_FOLDER, BROKERS_FOLDER,
                            SECURITY_FOLDER, TABLES_FOLDER, TRANSACTIONS_FOLDER, HOT_FOLDER})
#: ... nor start with these: temp files (``store.TMP_PREFIX``) are written beside
#: ``_cluster.json`` at the root (local_store.py imports this module, so it is spelled here)
RESERVED_PREFIXES = (".tmp-",)


def topic_folder(topic: str) -> str:
    """The topic's folder: its name, if legal and not one of the log's own root names.

    Raises InvalidTopicName (saying why for a reserved name).
    """
    validate_topic_name(topic)
    if topic in RESERVED_NAMES or topic.startswith(RESERVED_PREFIXES):
        raise InvalidTopicName(topic, f"{topic!r} is reserved for the store's own files "
                                      "(" + ", ".join(sorted(RESERVED_NAMES)) + ", .tmp-*)")
    return topic


def topic_meta(topic: str) -> str:
    return f"{topic_folder(topic)}/{TOPIC_META}"


def topic_config_folder(topic: str) -> str:
    return f"{topic_folder(topic)}/{TOPIC_CONFIG_FOLDER}"


def topic_config_name(version: int) -> str:
    return f"{version:020d}.json"


def partition_folder(topic: str, partition: int) -> str:
    return f"{topic_folder(topic)}/{int(partition)}"


def manifest_folder(topic: str, partition: int) -> str:
    return f"{partition_folder(topic, partition)}/{MANIFEST_FOLDER}"


def new_topic_id() -> str:
    """A fresh topic id: 16 random bytes in URL-safe base64, 22 characters (as Kafka's Uuid)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def manifest_name(version: int, topic_id: str = "") -> str:
    return f"{version:020d}-{topic_id}.json" if topic_id else f"{version:020d}.json"


def manifest_version(name: str, topic_id: str = "") -> int | None:
    """The version of a manifest (or config-change) file name of the topic
    incarnation ``topic_id``, or None if it is not one ("" = names without an id)."""
    if name.endswith(".json") and name[:20].isdigit() and (
            len(name) == 25 if not topic_id else
            len(name) == 26 + len(topic_id) and name[20] == "-" and name[21:-5] == topic_id):
        return int(name[:20])
    return None


_MANIFEST_NAME = re.compile(r"([0-9]{20})(?:-[A-Za-z0-9_-]{1,64})?\.json")


def any_manifest_version(name: str) -> int | None:
    """The version of a manifest file name of any incarnation of its topic, or None."""
    m = _MANIFEST_NAME.fullmatch(name)
    return int(m.group(1)) if m else None


class _Unique:
    """16 hex digits, unique across processes and hosts without a system call each:
    40 random bits drawn per process (again after a fork, and every 2**24 names),
    then a counter. (uuid4 reads the OS's random source every time: ~20 us of an
    append's ~0.8 ms.)"""

    def __init__(self) -> None:
        self._reseed()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._prefix, self._count = os.urandom(5).hex(), itertools.count()

    def __call__(self) -> str:
        n = next(self._count)  # atomic under the GIL
        if n >= 1 << 24:
            self._reseed()
            return self()
        return f"{self._prefix}{n:06x}"


unique_id = _Unique()


def new_segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}-{unique_id()}{SEGMENT_SUFFIX}"


_SEGMENT_NAME = re.compile(r"[0-9]{20}-[A-Za-z0-9_-]{1,64}\.arrow")


def is_segment_name(name: object) -> bool:
    """True for a segment file name: no folders, no path tricks."""
    return isinstance(name, str) and _SEGMENT_NAME.fullmatch(name) is not None


def carried_segment_file(manifest_file_name: str) -> str:
    """How a manifest names a segment carried by a version file (an append on a store
    without links, see segment_commit.CarriedAppend): the file's path from the
    partition folder, ``_log/<version>-<topic_id>.json``."""
    return f"{MANIFEST_FOLDER}/{manifest_file_name}"


def is_segment_file(name: object) -> bool:
    """True for what a manifest may name as a segment's file: a segment file name, a
    carried segment's version file (``carried_segment_file``) or a shared hot object
    (``hot_object_path``); no path tricks."""
    if not isinstance(name, str):
        return False
    folder, slash, rest = name.partition("/")
    if slash:
        if folder == HOT_FOLDER:
            return is_hot_object(name)
        return folder == MANIFEST_FOLDER and _MANIFEST_NAME.fullmatch(rest) is not None
    return _SEGMENT_NAME.fullmatch(name) is not None


# -- the hot tier (hot_journal.py) ----------------------------------------------------
_JOURNAL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_HOT_ENTRY = re.compile(r"([0-9]{20})\.json")
_HOT_OBJECT = re.compile(r"_hot/[A-Za-z0-9_-]{1,64}/[0-9]{20}-[0-9a-f]{16}\.wal")


def is_hot_file(name: str) -> bool:
    """Whether a manifest's segment file lives in the hot tier (its path is then from
    the store's root, not from the partition's folder)."""
    return name.startswith(HOT_FOLDER + "/")


def is_hot_object(name: object) -> bool:
    """True for a shared hot object's path as a manifest names it."""
    return isinstance(name, str) and _HOT_OBJECT.fullmatch(name) is not None


def journal_folder(journal: str) -> str:
    """A journal's folder; raises ValueError for a name that is not ``[A-Za-z0-9_-]``."""
    if not _JOURNAL_NAME.fullmatch(journal):
        raise ValueError(f"a journal name is 1 to 64 of [A-Za-z0-9_-], not {journal!r}")
    return f"{HOT_FOLDER}/{journal}"


def hot_entry_path(journal: str, seq: int) -> str:
    return f"{journal_folder(journal)}/{seq:020d}.json"


def hot_entry_seq(name: str) -> int | None:
    """The sequence number of a journal entry's file name, else None."""
    m = _HOT_ENTRY.fullmatch(name)
    return int(m.group(1)) if m else None


def hot_object_path(journal: str, seq: int) -> str:
    """A new shared object's path, unique (``seq`` is the journal position it was
    planned for; the entry that commits it may take a later one)."""
    return f"{journal_folder(journal)}/{seq:020d}-{unique_id()}.wal"


def new_journal_name(owner: str) -> str:
    """A journal name for a new writer process: ``owner`` (made safe) and a unique id,
    so two processes (or one restarted) never write the same journal."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", owner)[:40] or "gateway"
    return f"{safe}-{unique_id()}"


def group_offsets(group: str) -> str:
    return f"{GROUPS_FOLDER}/{validate_topic_name(group)}.json"


def transaction_folder(transactional_id: str) -> str:
    """The folder of a transactional id's versioned state document. The id follows the
    topic-name rules (``[a-zA-Z0-9._-]{1,249}``: it becomes a folder name); raises
    InvalidTopicName otherwise."""
    return f"{TRANSACTIONS_FOLDER}/{validate_topic_name(transactional_id)}"
