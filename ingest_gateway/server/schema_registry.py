"""The Schema Registry's operations, as Confluent's Schema Registry answers them.

One implementation for the HTTP routes (``http.schema_registry``) and ``sparklog
schemas``. Storage: ``log_layout.schema_registry`` (Confluent's records in the compacted
``_schemas`` topic, each change one append conditional on the log end its document was
read at, so a change below re-runs on the newer state after a lost race); types and
compatibility: ``schema_types``. Answers are dicts in Confluent's JSON shapes; refusals are
:class:`RegistryError` with Confluent's HTTP status and ``error_code``. Confluent's
(and Karapace's) semantics:

- registering a schema a subject already holds (not deleted) answers its id and
  creates no version; a schema's id is the same in every subject;
- a new version is checked against the latest (or, ``_TRANSITIVE``, every) live
  version under the subject's level, else the global one (default ``BACKWARD``);
  ``NONE`` checks nothing; IMPORT mode checks nothing and takes the given id/version;
- READONLY (global or subject) refuses writes with 42205;
- soft delete hides versions (``?deleted=true`` shows them); a permanent delete needs a
  soft one first (40405 / 40407) and removes them;
- a version referenced by another live schema cannot be deleted (42206).
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from ingest_gateway.server import schema_types
from ingest_gateway.server.schema_registry_errors import (
    check_subject, incompatible, invalid_schema, invalid_version, operation_not_permitted,
    parse_version, reference_exists, schema_not_found, subject_not_found,
    subject_not_soft_deleted, subject_soft_deleted, unprocessable, version_not_found,
    version_not_soft_deleted)
from ingest_gateway.server.schema_registry_config import (RegistryConfigs, empty_subject,
                                                          level_of, mode_of)
from log_layout.schema_registry import Reference, SchemaStore, StoredSchema, fingerprint

PARSED_CACHE = 256  # parsed schemas kept by id (a few KB each, typically)
#: references one schema may have, and how deep references may chain
MAX_REFERENCES, MAX_REFERENCE_DEPTH = 100, 16


class SchemaRegistry:
    """The registry over a store (see the module docstring). Every method may also raise
    OSError or CorruptDocument when the store fails."""

    def __init__(self, schemas: SchemaStore):
        self.schemas = schemas
        self.configs = RegistryConfigs(schemas)  # compatibility levels and modes
        # parsed schemas by id (an id's text and references never change): a registration
        # compares against earlier versions without parsing them again
        self._parsed_ids: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    # -- reading -------------------------------------------------------------------------
    def _subject(self, doc: dict[str, Any], subject: str) -> dict[str, Any]:
        entry = doc.get("subjects", {}).get(subject)
        if entry is None or not entry.get("versions"):
            raise subject_not_found(subject)
        return entry

    @staticmethod
    def _live(entry: dict[str, Any], deleted: bool = False) -> list[dict[str, Any]]:
        return [v for v in entry["versions"] if deleted or not v["deleted"]]

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[str]:
        doc = self.schemas.registry()
        return sorted(s for s, e in doc.get("subjects", {}).items()
                      if s.startswith(prefix) and self._live(e, deleted))

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        entry = self._subject(self.schemas.registry(), subject)
        found = [v["version"] for v in self._live(entry, deleted)]
        if not found:
            raise subject_not_found(subject)
        return found

    def _version(self, entry: dict[str, Any], subject: str, version: str | int,
                 deleted: bool = False) -> dict[str, Any]:
        number = parse_version(version)
        live = self._live(entry, deleted)
        if number == -1:
            if not live:
                raise subject_not_found(subject)
            return live[-1]
        for v in entry["versions"]:
            if v["version"] == number and (deleted or not v["deleted"]):
                return v
        raise version_not_found(number)

    def _stored(self, schema_id: int) -> StoredSchema:
        found = self.schemas.schema(schema_id)
        if found is None:
            raise schema_not_found(f"Schema {schema_id} not found")
        return found

    def version(self, subject: str, version: str | int, *, deleted: bool = False) -> dict[str, Any]:
        """Confluent's ``Schema`` of a subject's version (``latest`` or -1: the newest)."""
        check_subject(subject)
        parse_version(version)  # an invalid version is 42202 before any lookup
        entry = self._subject(self.schemas.registry(), subject)
        v = self._version(entry, subject, version, deleted)
        return self._answer(subject, v["version"], self._stored(v["id"]))

    @staticmethod
    def _answer(subject: str, version: int, stored: StoredSchema) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": subject, "version": version, "id": stored.id,
                               "schema": stored.schema}
        if stored.schema_type != "AVRO":  # Confluent omits the default type
            out["schemaType"] = stored.schema_type
        if stored.references:
            out["references"] = [r.to_doc() for r in stored.references]
        return out

    def by_id(self, schema_id: int) -> dict[str, Any]:
        stored = self._stored(schema_id)
        out: dict[str, Any] = {"schema": stored.schema}
        if stored.schema_type != "AVRO":
            out["schemaType"] = stored.schema_type
        if stored.references:
            out["references"] = [r.to_doc() for r in stored.references]
        return out

    def all_schemas(self, *, prefix: str = "", deleted: bool = False,
                    latest_only: bool = False) -> list[dict[str, Any]]:
        """``GET /schemas``: every (live) version of the subjects starting with ``prefix``,
        as :meth:`version` answers it; only each subject's newest with ``latest_only``."""
        doc, out = self.schemas.registry(), []
        for subject, entry in sorted(doc.get("subjects", {}).items()):
            versions = self._live(entry, deleted) if subject.startswith(prefix) else []
            for v in versions[-1:] if latest_only else versions:
                out.append(self._answer(subject, v["version"], self._stored(v["id"])))
        return out

    def with_references(self, schema_id: int) -> tuple[StoredSchema, list[tuple[str, str, str]]]:
        """The schema of ``schema_id`` and the (reference name, type, text) of every schema
        its references reach, dependencies first (what a serializer needs: a Protobuf
        import is its reference's name). Raises 40403, 42201."""
        stored = self._stored(schema_id)
        return stored, self._resolved(self.schemas.registry(), stored.references)

    def id_versions(self, schema_id: int, *, deleted: bool = False) -> list[dict[str, Any]]:
        """The (subject, version) pairs holding ``schema_id``."""
        self._stored(schema_id)
        doc = self.schemas.registry()
        return [{"subject": s, "version": v["version"]}
                for s, e in sorted(doc.get("subjects", {}).items())
                for v in self._live(e, deleted) if v["id"] == schema_id]

    def referenced_by(self, subject: str, version: str | int) -> list[int]:
        doc = self.schemas.registry()
        return self._referrers(doc, subject, self._version(self._subject(doc, subject), subject,
                                                           version)["version"])

    def _referrers(self, doc: dict[str, Any], subject: str, number: int) -> list[int]:
        ids = {v["id"] for e in doc.get("subjects", {}).values() for v in self._live(e)}
        return sorted(i for i in ids if (s := self.schemas.schema(i)) is not None and
                      any(r.subject == subject and r.version == number for r in s.references))

    # -- input ---------------------------------------------------------------------------
    def _candidate(self, body: Any) -> tuple[str, str, tuple[Reference, ...]]:
        """(type, normalised text, references) of a request's schema; raises 42201/422."""
        if not isinstance(body, dict):
            raise unprocessable("the body must be a JSON object")
        text, kind = body.get("schema"), body.get("schemaType", "AVRO") or "AVRO"
        if not isinstance(text, str):
            raise invalid_schema("Empty or missing schema: 'schema' must be a string")
        if not isinstance(kind, str) or kind.upper() not in schema_types.TYPES:
            raise unprocessable(f"Invalid schemaType {kind!r}: one of "
                                f"{', '.join(schema_types.TYPES)}")
        refs_doc = body.get("references") or []
        if not isinstance(refs_doc, list) or len(refs_doc) > MAX_REFERENCES:
            raise unprocessable(f"'references' must be a list of at most {MAX_REFERENCES}")
        refs = []
        for r in refs_doc:
            if not isinstance(r, dict) or not isinstance(r.get("name"), str) or \
                    not isinstance(r.get("subject"), str) or \
                    not isinstance(r.get("version"), int) or isinstance(r.get("version"), bool):
                raise unprocessable("a reference is {\"name\": str, \"subject\": str, "
                                    "\"version\": int}")
            refs.append(Reference(r["name"], check_subject(r["subject"]), r["version"]))
        try:
            return kind.upper(), schema_types.normalize(kind.upper(), text), tuple(refs)
        except schema_types.InvalidSchemaText as e:
            raise invalid_schema(f"Invalid schema: {e}") from None

    def _resolved(self, doc: dict[str, Any], refs: tuple[Reference, ...],
                  depth: int = 0, seen: frozenset = frozenset()) -> list[tuple[str, str, str]]:
        """The (reference name, type, text) of every schema ``refs`` reach, dependencies
        first; raises 42201 for a missing reference, a cycle or a chain too deep."""
        out: list[tuple[str, str, str]] = []
        if depth > MAX_REFERENCE_DEPTH:
            raise invalid_schema(f"references nest deeper than {MAX_REFERENCE_DEPTH}")
        for r in refs:
            if (r.subject, r.version) in seen:
                raise invalid_schema(f"reference cycle through {r.subject!r} version {r.version}")
            entry = doc.get("subjects", {}).get(r.subject)
            match = [v for v in (entry or {}).get("versions", ())
                     if v["version"] == r.version and not v["deleted"]] if entry else []
            if r.version == -1 and entry:
                match = self._live(entry)[-1:]
            if not match:
                raise invalid_schema(f"Invalid schema: reference {r.name!r} names "
                                     f"{r.subject!r} version {r.version}, which does not exist")
            stored = self._stored(match[0]["id"])
            out += self._resolved(doc, stored.references, depth + 1,
                                  seen | {(r.subject, r.version)})
            out.append((r.name, stored.schema_type, stored.schema))
        return out

    def _parsed(self, doc: dict[str, Any], kind: str, text: str,
                refs: tuple[Reference, ...]) -> Any:
        try:
            resolved = self._resolved(doc, refs)
            # Protobuf's imports name their files: its references go by name
            referenced = [(n, t) for n, k, t in resolved if k == "PROTOBUF"] \
                if kind == "PROTOBUF" else [(k, t) for _n, k, t in resolved]
            return schema_types.parse(kind, text, referenced)
        except schema_types.InvalidSchemaText as e:
            raise invalid_schema(f"Invalid schema: {e}") from None

    def _parsed_id(self, doc: dict[str, Any], stored: StoredSchema) -> Any:
        with self._lock:
            found = self._parsed_ids.get(stored.id)
            if found is not None:
                self._parsed_ids.move_to_end(stored.id)
                return found
        parsed = self._parsed(doc, stored.schema_type, stored.schema, stored.references)
        with self._lock:
            self._parsed_ids[stored.id] = parsed
            while len(self._parsed_ids) > PARSED_CACHE:
                self._parsed_ids.popitem(last=False)
        return parsed

    # -- registering ---------------------------------------------------------------------
    def lookup(self, subject: str, body: Any, *, deleted: bool = False) -> dict[str, Any]:
        """The subject's version holding the body's schema (``POST /subjects/{s}``)."""
        check_subject(subject)
        kind, text, refs = self._candidate(body)
        doc = self.schemas.registry()
        entry = self._subject(doc, subject)
        self._parsed(doc, kind, text, refs)
        held = self._holding(self._live(entry, deleted), fingerprint(kind, text, refs))
        if held is None:
            raise schema_not_found("Schema not found")
        return self._answer(subject, held["version"], self._stored(held["id"]))

    def _holding(self, versions: list[dict[str, Any]], content: str) -> dict[str, Any] | None:
        """The version among ``versions`` whose schema has the fingerprint ``content``
        (compared by content, not id: an IMPORT may give one content a second id)."""
        for v in versions:
            stored = self.schemas.schema(v["id"])
            if stored is not None and stored.fingerprint == content:
                return v
        return None

    def register(self, subject: str, body: Any, *, normalize: bool = False) -> dict[str, Any]:
        """Register the body's schema under ``subject``; ``{"id": n}`` (Confluent's answer,
        plus the version). Raises 409 if incompatible, 42201, 42205 (read-only)."""
        check_subject(subject)
        kind, text, refs = self._candidate(body)
        doc = self.schemas.registry()
        self._writable(doc, subject)
        parsed = self._parsed(doc, kind, text, refs)
        importing = mode_of(doc, subject) == "IMPORT"
        wanted_id, wanted_version = body.get("id"), body.get("version")
        for name, value in (("id", wanted_id), ("version", wanted_version)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 1):
                raise unprocessable(f"'{name}' must be a positive integer")
        if wanted_id is not None and importing:
            if not self.schemas.import_id(StoredSchema(wanted_id, kind, text, refs)):
                raise operation_not_permitted(f"Overwrite new schema with id {wanted_id} "
                                              "is not permitted.")
            schema_id = wanted_id
        elif wanted_id is not None and self.schemas.id_of(kind, text, refs) != wanted_id:
            raise operation_not_permitted("Setting a schema id requires IMPORT mode")
        else:
            schema_id = None  # assigned once the checks pass
        answer: dict[str, Any] = {}
        content = fingerprint(kind, text, refs)

        def change(doc: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal schema_id
            entry = doc.setdefault("subjects", {}).setdefault(subject, empty_subject())
            self._writable(doc, subject)
            live = self._live(entry)
            held = self._holding(live, content)
            if held is not None:  # already a live version: its id, no new version
                answer.update(id=held["id"], version=held["version"])
                return None
            if mode_of(doc, subject) != "IMPORT":
                self._check(doc, subject, kind, parsed, live)
            if wanted_id is not None and importing:
                # written with the version (the check above only read): refused if the
                # id came to hold another schema meanwhile
                if not self.schemas.import_id(StoredSchema(wanted_id, kind, text, refs)):
                    raise operation_not_permitted(f"Overwrite new schema with id {wanted_id} "
                                                  "is not permitted.")
            else:
                # after the check, so a refusal takes no id; a lost race re-runs this on
                # the winner's state: the same id if it registered this content, else
                # the next free one (the id is written with this version)
                schema_id = self.schemas.assign_id(kind, text, refs)
            number = wanted_version if (importing and wanted_version) else entry["next"]
            if any(v["version"] == number for v in entry["versions"]):
                raise invalid_version(f"Version {number} already exists in {subject}")
            entry["versions"].append({"version": number, "id": schema_id, "deleted": False})
            entry["versions"].sort(key=lambda v: v["version"])
            entry["next"] = max(entry["next"], number + 1)
            answer.update(id=schema_id, version=number)
            return doc

        self.schemas.update(change)
        return answer

    def _check(self, doc: dict[str, Any], subject: str, kind: str, parsed: Any,
               live: list[dict[str, Any]]) -> None:
        reasons = self.compatibility_reasons(doc, subject, kind, parsed, live)
        if reasons:
            raise incompatible("Schema being registered is incompatible with an earlier "
                               "schema for subject \"" + subject + "\": " + "; ".join(reasons))

    def compatibility_reasons(self, doc: dict[str, Any], subject: str, kind: str, parsed: Any,
                              previous: list[dict[str, Any]]) -> list[str]:
        """Why ``parsed`` may not follow ``previous`` (oldest first) under the subject's
        level; empty: it may."""
        level = level_of(doc, subject)
        if level == "NONE" or not previous:
            return []
        against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
        reasons: list[str] = []
        for v in reversed(against):
            stored = self._stored(v["id"])
            if stored.schema_type != kind:
                reasons.append(f"version {v['version']} is {stored.schema_type}, not {kind}")
                continue
            old = self._parsed_id(doc, stored)
            if level.startswith(("BACKWARD", "FULL")):
                reasons += [f"version {v['version']} (new reads old): {r}" for r in
                            schema_types.incompatibilities(kind, parsed, old)]
            if level.startswith(("FORWARD", "FULL")):
                reasons += [f"version {v['version']} (old reads new): {r}" for r in
                            schema_types.incompatibilities(kind, old, parsed)]
        return reasons

    def check(self, subject: str, version: str | None, body: Any, *,
              verbose: bool = False) -> dict[str, Any]:
        """``POST /compatibility/subjects/{s}/versions[/{v}]``: would the body's schema be
        accepted after that version (``None``: after all of them, under the level)."""
        check_subject(subject)
        if version is not None:
            parse_version(version)  # 42202 before any lookup
        kind, text, refs = self._candidate(body)
        doc = self.schemas.registry()
        parsed = self._parsed(doc, kind, text, refs)
        entry = doc.get("subjects", {}).get(subject)
        live = self._live(entry) if entry else []
        if version is not None:
            if entry is None or not entry.get("versions"):
                raise subject_not_found(subject)
            live = [self._version(entry, subject, version)]
        reasons = self.compatibility_reasons(doc, subject, kind, parsed, live)
        out: dict[str, Any] = {"is_compatible": not reasons}
        if verbose:
            out["messages"] = reasons
        return out

    # -- deleting ------------------------------------------------------------------------
    def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        """The versions deleted (soft, or permanent after a soft delete)."""
        check_subject(subject)
        deleted: list[int] = []

        def change(doc: dict[str, Any]) -> dict[str, Any] | None:
            deleted.clear()
            subjects = doc.get("subjects", {})
            entry = subjects.get(subject)
            if entry is None or not entry.get("versions"):
                raise subject_not_found(subject)
            self._writable(doc, subject)
            if permanent:
                if any(not v["deleted"] for v in entry["versions"]):
                    raise subject_not_soft_deleted(
                        f"Subject '{subject}' was not deleted first before being permanently "
                        "deleted")
                deleted.extend(v["version"] for v in entry["versions"])
                del subjects[subject]
                return doc
            live = self._live(entry)
            if not live:
                raise subject_soft_deleted(f"Subject '{subject}' was soft deleted. Set "
                                           "permanent=true to delete permanently")
            for v in live:
                if self._referrers(doc, subject, v["version"]):
                    raise reference_exists(f"One or more references exist to the schema "
                                           f"{{subject={subject}, version={v['version']}}}")
                v["deleted"] = True
                deleted.append(v["version"])
            return doc

        self.schemas.update(change)
        return deleted

    def delete_version(self, subject: str, version: str, *, permanent: bool = False) -> int:
        check_subject(subject)
        number = parse_version(version)
        found: list[int] = []

        def change(doc: dict[str, Any]) -> dict[str, Any] | None:
            found.clear()
            entry = doc.get("subjects", {}).get(subject)
            if entry is None or not entry.get("versions"):
                raise subject_not_found(subject)
            self._writable(doc, subject)
            v = self._version(entry, subject, number, deleted=permanent and number != -1)
            if self._referrers(doc, subject, v["version"]):
                raise reference_exists(f"One or more references exist to the schema "
                                       f"{{subject={subject}, version={v['version']}}}")
            if permanent:
                if not v["deleted"]:
                    raise version_not_soft_deleted(
                        f"Subject '{subject}' Version {v['version']} was not deleted first "
                        "before being permanently deleted")
                entry["versions"].remove(v)
                if not entry["versions"] and not entry.get("compatibility") \
                        and not entry.get("mode"):
                    del doc["subjects"][subject]
            else:
                v["deleted"] = True
            found.append(v["version"])
            return doc

        self.schemas.update(change)
        return found[0]

    def _writable(self, doc: dict[str, Any], subject: str) -> None:
        if mode_of(doc, subject) == "READONLY":
            raise operation_not_permitted(f"Subject {subject} is in read-only mode")
