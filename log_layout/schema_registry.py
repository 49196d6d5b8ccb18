"""The Schema Registry's storage: schemas by global id, and the subjects' versions and
configs, kept in the store so every gateway serves the same registry.

Layout, under ``_schemas/`` at the store's root (reserved as a topic name by ``paths``)::

    _schemas/ids/<id:020d>.json            one schema, created exclusively, never rewritten
      {"id": 3, "schemaType": "AVRO", "schema": "{...}", "references": [...],
       "fingerprint": "<sha256 hex>"}
    _schemas/fingerprints/<sha256>.json    {"id": 3}: THE id of a schema's content
    _schemas/registry/<version:020d>.json  subjects, versions, configs (``versioned_doc``)
      {"compatibility": "BACKWARD", "mode": "READWRITE",
       "subjects": {"clicks-value": {"next": 3, "compatibility": "FULL", "mode": ...,
                    "versions": [{"version": 1, "id": 3, "deleted": false}, ...]}}}

**Ids are global and one per schema**, even with many gateways registering at once:

1. the fingerprint (sha256 of the schema's type, text and references) is looked up in
   ``fingerprints/``: a schema seen before keeps its id;
2. else an id file is created exclusively (``Store.put_exclusive``) under the next free
   number (a lost race tries the next number, listing the folder to catch up);
3. then the fingerprint file is created exclusively. A writer that loses this race
   deletes its id file (nobody was told that number) and answers the winner's id.

A crash between 2 and 3 leaves an id file no fingerprint names: it stays readable by
its id (harmless: nobody was given it) and the next registration of that schema takes a
new id. Id files are immutable, so readers cache them for ever.

**Subjects** live in one document written by ``versioned_doc``'s optimistic loop: a
change (register, delete, set a config) is a function of the current document, re-run
on the winner's after a lost race, so a compatibility check always runs against the
versions it is appended after. Version numbers of a subject grow from ``next``
(soft-deleted versions keep theirs; a hard-deleted subject starts again at 1, as
Confluent's). Absent ``compatibility``/``mode`` mean the global ones; absent global
ones mean ``BACKWARD`` and ``READWRITE`` (Confluent's defaults).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any

from log_layout.errors import CorruptDocument
from log_layout.paths import SCHEMAS_FOLDER
from log_layout.store import Store
from log_layout.versioned_doc import VersionedDoc

IDS_FOLDER = f"{SCHEMAS_FOLDER}/ids"
FINGERPRINTS_FOLDER = f"{SCHEMAS_FOLDER}/fingerprints"
REGISTRY_FOLDER = f"{SCHEMAS_FOLDER}/registry"
#: exclusive creates tried for a new id before giving up (each loss means another
#: writer took that number: only a registry under a storm of registrations loses often)
_ID_ATTEMPTS = 1000


@dataclasses.dataclass(frozen=True)
class Reference:
    """A schema's reference to another subject's version (Confluent's ``SchemaReference``)."""

    name: str
    subject: str
    version: int

    def to_doc(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclasses.dataclass(frozen=True)
class StoredSchema:
    """One schema as stored under its id."""

    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.schema_type, self.schema, self.references)

    def to_doc(self) -> dict[str, Any]:
        return {"id": self.id, "schemaType": self.schema_type, "schema": self.schema,
                "references": [r.to_doc() for r in self.references],
                "fingerprint": self.fingerprint}


def fingerprint(schema_type: str, schema: str, references: tuple[Reference, ...]) -> str:
    """The sha256 (hex) naming a schema's content: what makes two registrations one id."""
    text = json.dumps([schema_type, schema, [r.to_doc() for r in references]],
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _schema_of(path: str, raw: bytes) -> StoredSchema:
    try:
        doc = json.loads(raw)
        return StoredSchema(int(doc["id"]), str(doc["schemaType"]), str(doc["schema"]),
                            tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                                  for r in doc.get("references") or ()))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptDocument(path, f"not a stored schema ({e})") from None


class SchemaStore:
    """The registry's documents in ``store`` (see the module docstring). Thread-safe."""

    def __init__(self, store: Store):
        self.store = store
        self._doc = VersionedDoc(store, REGISTRY_FOLDER)
        self._lock = threading.Lock()
        self._by_id: dict[int, StoredSchema] = {}
        self._next_id = 1
        self._registry: tuple[int, dict[str, Any]] = (-1, {})

    # -- schemas by id ------------------------------------------------------------------
    def schema(self, schema_id: int) -> StoredSchema | None:
        """The schema of ``schema_id``, or None. Raises CorruptDocument, OSError."""
        with self._lock:
            found = self._by_id.get(schema_id)
        if found is not None:
            return found
        path = f"{IDS_FOLDER}/{schema_id:020d}.json"
        try:
            found = _schema_of(path, self.store.read(path))
        except FileNotFoundError:
            return None
        with self._lock:
            self._by_id[schema_id] = found
        return found

    def ids(self) -> list[int]:
        """Every id stored, ascending (one LIST)."""
        out = []
        for f in self.store.list(IDS_FOLDER):
            stem = f.name.removesuffix(".json")
            if stem.isdigit() and len(stem) == 20:
                out.append(int(stem))
        return sorted(out)

    def id_of(self, schema_type: str, schema: str,
              references: tuple[Reference, ...]) -> int | None:
        """The id a schema of this content already has, or None."""
        path = f"{FINGERPRINTS_FOLDER}/{fingerprint(schema_type, schema, references)}.json"
        try:
            raw = self.store.read(path)
        except FileNotFoundError:
            return None
        try:
            return int(json.loads(raw)["id"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptDocument(path, f"not a fingerprint document ({e})") from None

    def assign_id(self, schema_type: str, schema: str,
                  references: tuple[Reference, ...]) -> int:
        """The schema's one id: its existing one, else a new one (module docstring).
        Raises OSError, CorruptDocument, RuntimeError if no id could be created."""
        known = self.id_of(schema_type, schema, references)
        if known is not None:
            return known
        with self._lock:
            number = self._next_id
        for attempt in range(_ID_ATTEMPTS):
            candidate = StoredSchema(number, schema_type, schema, references)
            if self._create_id(candidate):
                break
            # lost to another writer: catch up with the folder, not one number at a time
            ids = self.ids()
            number = max(number + 1, (ids[-1] + 1) if ids else 1)
        else:
            raise RuntimeError(f"no schema id could be created in {_ID_ATTEMPTS} attempts")
        won = self._claim(candidate)
        if won == number:
            return number
        # another writer registered the same content meanwhile: its id is the one
        self.store.delete([f"{IDS_FOLDER}/{number:020d}.json"])
        with self._lock:
            self._by_id.pop(number, None)
        return won

    def import_id(self, schema: StoredSchema) -> bool:
        """Store ``schema`` under its own id (IMPORT mode); False if the id holds another
        schema. Raises OSError, CorruptDocument."""
        if not self._create_id(schema):
            existing = self.schema(schema.id)
            if existing is None or existing.fingerprint != schema.fingerprint:
                return False
        self._claim(schema)
        return True

    def _create_id(self, schema: StoredSchema) -> bool:
        path = f"{IDS_FOLDER}/{schema.id:020d}.json"
        if not self.store.put_exclusive(path, json.dumps(schema.to_doc(), indent=1).encode()):
            return False
        with self._lock:
            self._by_id[schema.id] = schema
            self._next_id = max(self._next_id, schema.id + 1)
        return True

    def _claim(self, schema: StoredSchema) -> int:
        """Name ``schema.id`` as its content's id unless another id already is; the id
        that is."""
        path = f"{FINGERPRINTS_FOLDER}/{schema.fingerprint}.json"
        if self.store.put_exclusive(path, json.dumps({"id": schema.id}).encode()):
            return schema.id
        found = self.id_of(schema.schema_type, schema.schema, schema.references)
        if found is None:  # deleted by hand between our create and our read
            raise CorruptDocument(path, "vanished while being read")
        return found

    # -- subjects, versions, configs ---------------------------------------------------
    def registry(self) -> dict[str, Any]:
        """The current subjects document (read only when its version changed)."""
        with self._lock:
            known, doc = self._registry
        newest = self._doc.newest(known=known)
        if newest is None:
            return doc
        with self._lock:
            self._registry = (newest.number, newest.doc)
        return newest.doc

    def update(self, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
        """Apply ``change`` to a copy of the current document and store its result (None:
        nothing to store). ``change`` is re-run on the winner's document after a lost
        race, so it must decide from its argument only. Returns the document now current.
        Raises whatever ``change`` raises, CorruptDocument, OSError."""
        def apply(current: Any) -> dict[str, Any] | None:
            return change(json.loads(json.dumps(current.doc)))  # a copy it may modify

        created = self._doc.update(apply)
        if created is None:
            return self.registry()
        with self._lock:
            self._registry = (created.number, created.doc)
        return created.doc
