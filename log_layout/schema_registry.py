"""The Schema Registry's storage: the compacted topic ``_schemas``, as Confluent's Schema
Registry and Karapace keep theirs, so the registry follows the log's replication,
compaction and tombstones on every store (local, S3, HDFS).

The topic has one partition and ``cleanup.policy=compact``; it is created at the
first write (a ``_schemas`` created by hand with another policy is made compacted; only
its partition 0 is used). Its records are Confluent's (``schema_records``: ``SCHEMA``, ``CONFIG``,
``MODE``, ``DELETE_SUBJECT`` keys, JSON values, null values for hard deletes). Kafka
clients may list and consume it as Confluent's ``_schemas``; only the registry writes
it (the gateway refuses a Produce to it).

**State.** Each :class:`SchemaStore` replays the topic into a
``schema_records.RegistryState`` and keeps it by tailing from the offset it read up
to: when nothing changed a read costs one manifest check (the partition's newest
version), as ``versioned_doc`` did. The state gives the subjects document the
registry's operations read::

    {"compatibility": "BACKWARD", "mode": "READWRITE",
     "subjects": {"clicks-value": {"next": 3, "compatibility": "FULL", "mode": ...,
                  "versions": [{"version": 1, "id": 3, "deleted": false}, ...]}}}

Absent ``compatibility``/``mode`` mean the global ones; absent global ones mean
``BACKWARD`` and ``READWRITE`` (Confluent's defaults). ``next`` is one more than the
subject's greatest version (soft-deleted ones count; a hard-deleted subject starts
again at 1, as Confluent's).

**Writing** (:meth:`SchemaStore.update`): a change is a function of the document read
at the log end N; the records that take the old document to the new one are appended
in one append **conditional on the log end still being N**
(``PartitionWriter.append(if_next_offset=N)``: the partition's next manifest version,
created exclusively, is the compare-and-swap). A writer that loses the race tails the
winner's records and runs its change again, so a compatibility check always runs
against the versions it is appended after.

**Ids are global and one per schema**, even with many gateways registering at once:
inside a change, :meth:`SchemaStore.assign_id` answers the id a schema's content
already has in the state read, else the greatest id the log ever named plus one; the
id is written in the same conditional append as the version holding it. Two
registrars racing for one schema: the loser re-reads, finds the winner's version and
its id. Two racing for different schemas: the loser's next try takes the next number.
A crash before the append commits leaves nothing; after, the version is there whole.
A schema lives as long as a version holds it (soft-deleted ones too): a hard delete
of the last version holding it removes it (40403 by id, as Confluent's).

**Migration.** A store written by the earlier layout (files under ``_schemas/ids``,
``_schemas/registry``) is imported at the first open: its subjects document and the
schemas its versions name become one conditional append at offset 0 (so two
processes opening at once import it once). The old files are left as they were and
not read again.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from log_layout.errors import (CorruptDocument, Fenced, LogEndMoved, OffsetOutOfRange,
                               TopicExists, UnknownTopic)
from log_layout.partition import PartitionLog, PartitionWriter
from log_layout.paths import SCHEMAS_TOPIC
from log_layout.schema_records import (Reference, RegistryState, StoredSchema, fingerprint,
                                       records_for)
from log_layout.store import Store
from log_layout.topics import Log
from log_layout.versioned_doc import VersionedDoc

__all__ = ["SchemaStore", "StoredSchema", "Reference", "fingerprint", "SCHEMAS_TOPIC",
           "TOPIC_CONFIG"]

#: the topic's config when the registry creates it (Confluent's: one partition, compacted)
TOPIC_CONFIG = {"partitions": 1, "cleanup.policy": "compact"}
#: conditional appends tried before giving up (each loss means another registrar
#: committed first: only a registry under a storm of registrations loses often)
_ATTEMPTS = 1000
#: the earlier layout's folders (read once, to migrate)
OLD_IDS_FOLDER = f"{SCHEMAS_TOPIC}/ids"
OLD_REGISTRY_FOLDER = f"{SCHEMAS_TOPIC}/registry"


class SchemaStore:
    """The registry's records in the ``_schemas`` topic of ``log`` (a Log, or a Store a
    Log is opened on; see the module docstring). Thread-safe; one per process is plenty,
    but any number (in one process or many) see the same registry."""

    def __init__(self, log: Log | Store):
        self.log = log if isinstance(log, Log) else Log(log)
        self.store = self.log.store
        # one lock for the state and this process's writes: an update's change reads
        # schemas by id from the very state its document came from
        self._lock = threading.RLock()
        self._state = RegistryState()
        self._writer: PartitionWriter | None = None
        self._plog: PartitionLog | None = None
        self._local = threading.local()  # the ids an update in progress assigns
        self._migration_checked = False
        self._compact_checked = False  # the topic's policy, checked before a first write

    # -- the topic ----------------------------------------------------------------------
    def _partition(self, *, create: bool = True) -> PartitionLog | None:
        """Partition 0 of ``_schemas``; created if absent and ``create`` (a reader of a
        registry nobody wrote creates nothing: None). Raises OSError."""
        if self._plog is None:
            self._compact_checked = False
            try:
                self.log.topic(SCHEMAS_TOPIC, refresh=True)
            except UnknownTopic:
                if not create:
                    return None
                try:
                    self.log.create_topic(SCHEMAS_TOPIC, TOPIC_CONFIG)
                except TopicExists:
                    pass  # another process created it first
            self._plog = self.log.partition(SCHEMAS_TOPIC, 0)
        if create and not self._compact_checked:
            if not self.log.topic(SCHEMAS_TOPIC, refresh=True).config.compacted:
                # made by hand (CreateTopics) before the registry wrote: its deletes
                # would drop schemas (Confluent refuses to start over such a topic)
                self.log.alter_topic(SCHEMAS_TOPIC, {"cleanup.policy": "compact"})
            self._compact_checked = True
        return self._plog

    def _tail(self) -> RegistryState:
        """The state, after reading what was appended since it was read (one manifest
        check when nothing was). Raises OSError, CorruptSegment, CorruptDocument (an
        earlier layout that cannot be migrated)."""
        with self._lock:
            if not self._migration_checked:
                # the earlier layout is migrated by whoever opens it first, reader or not
                self._migration_checked = not self._has_old_layout()
            plog = self._partition(create=not self._migration_checked)
            if plog is None:
                return self._state  # no topic yet: the empty registry
            try:
                m = plog.snapshot()
            except UnknownTopic:  # deleted by an admin: the registry went with it
                self._plog = self._writer = None
                self._state = RegistryState()
                return self._state
            state = self._state
            if state.topic_id != plog.topic_id or m.next_offset < state.end:
                state = RegistryState(plog.topic_id)  # a new topic: replay it all
            if m.next_offset > state.end:
                try:
                    batches = list(plog.read(state.end, manifest=m))
                except OffsetOutOfRange:  # below the log start: replay from there
                    state = RegistryState(plog.topic_id)
                    batches = list(plog.read(m.log_start_offset, manifest=m))
                for batch in batches:
                    keys = batch.column("key").to_pylist()
                    values = batch.column("value").to_pylist()
                    for key, value in zip(keys, values):
                        state.apply(key, value)
                state.end = m.next_offset
            if not self._migration_checked:
                if state.end == 0:
                    self._migrate(state)
                self._migration_checked = True
            self._state = state
            return state

    # -- schemas by id ------------------------------------------------------------------
    def _current(self) -> RegistryState:
        """The state to answer from: inside an update's change, the one its document came
        from (tailing would move it under the change); else the tailed one."""
        return self._state if getattr(self._local, "pending", None) is not None \
            else self._tail()

    def schema(self, schema_id: int) -> StoredSchema | None:
        """The schema of ``schema_id``, or None: from the state last read when it holds
        the id (a hard delete elsewhere shows at the next ``registry()``), else after
        tailing. Raises OSError, CorruptSegment."""
        with self._lock:
            pending = getattr(self._local, "pending", None) or {}
            found = pending.get(schema_id) or self._state.by_id.get(schema_id)
            if found is None:  # registered elsewhere since this process last read?
                found = self._current().by_id.get(schema_id)
            return found

    def ids(self) -> list[int]:
        """Every id a version holds, ascending."""
        with self._lock:
            return sorted(self._current().by_id)

    def id_of(self, schema_type: str, schema: str,
              references: tuple[Reference, ...]) -> int | None:
        """The id a schema of this content already has, or None."""
        content = fingerprint(schema_type, schema, references)
        with self._lock:
            found = self._current().by_fingerprint.get(content)
            if found is None:
                pending = getattr(self._local, "pending", None) or {}
                found = next((i for i, s in sorted(pending.items())
                              if s.fingerprint == content), None)
            return found

    def assign_id(self, schema_type: str, schema: str,
                  references: tuple[Reference, ...]) -> int:
        """The schema's one id: its existing one, else a new one, written with the
        version of the update in progress (module docstring). Raises RuntimeError
        outside an update's change (an id exists only in a version's record)."""
        pending = self._pending("assign_id")
        known = self.id_of(schema_type, schema, references)
        if known is not None:
            return known
        number = max(self._state.max_id, *pending, 0) + 1
        pending[number] = StoredSchema(number, schema_type, schema, references)
        return number

    def import_id(self, schema: StoredSchema) -> bool:
        """Give ``schema`` its own id (IMPORT mode); False if the id holds another
        schema. Inside an update's change the id is written with its version; outside,
        this only checks. Raises OSError, CorruptSegment."""
        with self._lock:
            pending = getattr(self._local, "pending", None)
            existing = (pending or {}).get(schema.id) or self._current().by_id.get(schema.id)
            if existing is not None and existing.fingerprint != schema.fingerprint:
                return False
            if pending is not None and existing is None:
                pending[schema.id] = schema
            return True

    def _pending(self, what: str) -> dict[int, StoredSchema]:
        pending = getattr(self._local, "pending", None)
        if pending is None:
            raise RuntimeError(f"{what} runs inside SchemaStore.update's change")
        return pending

    # -- subjects, versions, configs ---------------------------------------------------
    def registry(self) -> dict[str, Any]:
        """The current subjects document (read only when the topic changed). Not to
        modify. Raises OSError, CorruptSegment."""
        with self._lock:
            return self._tail().doc

    def update(self, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
        """Apply ``change`` to a copy of the current document and append the records
        its result differs by (None: nothing to store), conditionally on the log end
        the document was read at. ``change`` is re-run on the newer document after a
        lost race, so it must decide from its argument (and assign_id/import_id) only.
        Returns the document now current. Raises whatever ``change`` raises,
        RuntimeError after too many lost races, OSError, CorruptSegment."""
        for _ in range(_ATTEMPTS):
            with self._lock:
                state = self._tail()
                self._local.pending = {}
                try:
                    new = change(copy.deepcopy(state.doc))
                    if new is None:
                        return state.doc
                    records = records_for(state, state.doc, new, self._local.pending)
                finally:
                    self._local.pending = None
                if not records:
                    return state.doc
                if self._append(records, state.end):
                    return self._tail().doc
        raise RuntimeError(f"no registry update committed in {_ATTEMPTS} attempts")

    def _append(self, records: list[tuple[bytes, bytes | None]], end: int) -> bool:
        """Append ``records`` if the log still ends at ``end``; False if it does not."""
        table = pa.table({"key": pa.array([k for k, _ in records], pa.binary()),
                          "value": pa.array([v for _, v in records], pa.binary())})
        plog = self._partition()
        assert plog is not None
        if self._writer is None or self._writer.fenced is not None \
                or self._writer.topic_id != plog.topic_id:
            self._writer = plog.writer()
        try:
            self._writer.append(table, if_next_offset=end)
        except LogEndMoved:
            return False
        except Fenced:  # a claim (or a re-created topic): write at the new epoch
            self._writer = None
            self._plog = None
            return False
        return True

    # -- the earlier layout --------------------------------------------------------------
    def _has_old_layout(self) -> bool:
        return bool(self.store.list(OLD_REGISTRY_FOLDER))

    def _migrate(self, state: RegistryState) -> None:
        """Import the earlier layout's documents into the empty topic (once: the append
        is conditional on offset 0). Raises CorruptDocument, OSError."""
        old = VersionedDoc(self.store, OLD_REGISTRY_FOLDER).newest(known=-1)
        if old is None or not old.doc.get("subjects") and not old.doc.get("compatibility") \
                and not old.doc.get("mode"):
            return
        schemas: dict[int, StoredSchema] = {}
        for entry in old.doc.get("subjects", {}).values():
            for v in entry.get("versions", ()):
                schemas.setdefault(v["id"], self._old_schema(v["id"]))
        try:
            records = records_for(state, {}, old.doc, schemas)
        except (KeyError, TypeError, AttributeError) as e:
            raise CorruptDocument(OLD_REGISTRY_FOLDER, f"cannot be migrated ({e})") from None
        if records:
            self._append(records, 0)  # lost: another process migrated it
            plog = self._partition()
            assert plog is not None
            m = plog.snapshot()
            for batch in plog.read(0, manifest=m):
                for key, value in zip(batch.column("key").to_pylist(),
                                      batch.column("value").to_pylist()):
                    state.apply(key, value)
            state.end = m.next_offset

    def _old_schema(self, schema_id: int) -> StoredSchema:
        path = f"{OLD_IDS_FOLDER}/{int(schema_id):020d}.json"
        try:
            doc = json.loads(self.store.read(path))
            return StoredSchema(int(doc["id"]), str(doc["schemaType"]), str(doc["schema"]),
                                tuple(Reference(str(r["name"]), str(r["subject"]),
                                                int(r["version"]))
                                      for r in doc.get("references") or ()))
        except FileNotFoundError:
            raise CorruptDocument(path, "named by a version but missing") from None
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptDocument(path, f"not a stored schema ({e})") from None
