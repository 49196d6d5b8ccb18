"""The Schema Registry's records in its ``_schemas`` topic, in Confluent's and Karapace's
format, and the registry state they replay into.

Keys and values are JSON (UTF-8, compact, keys in Confluent's canonical order so that
the same key is always the same bytes, which is what compaction compares), as
Karapace writes them (``src/karapace/core/key_format.py``: ``SCHEMA_KEY_ORDER``,
``CONFIG_KEY_ORDER``; ``src/karapace/core/schema_registry.py``:
``send_schema_message``, ``send_config_message``, ``send_delete_subject_message``;
read by ``src/karapace/core/schema_reader.py``, github:Aiven-Open/karapace at
3bbc1f8d) and Confluent's ``SchemaKey``/``SchemaValue``, ``ConfigKey``,
``ModeKey``, ``DeleteSubjectKey``::

    {"keytype":"SCHEMA","subject":"clicks-value","version":1,"magic":1}
        {"subject":"clicks-value","version":1,"id":3,"schema":"{...}","deleted":false,
         "schemaType":"PROTOBUF", "references":[{"name":..,"subject":..,"version":..}]}
        (schemaType only when not AVRO, references only when there are some)
    {"keytype":"CONFIG","subject":null,"magic":0}      {"compatibilityLevel":"FULL"}
    {"keytype":"MODE","subject":"clicks-value","magic":0}   {"mode":"READONLY"}
    {"keytype":"DELETE_SUBJECT","subject":"clicks-value","magic":0}
        {"subject":"clicks-value","version":4}   (versions <= 4 soft-deleted)

A null value is a tombstone: a hard-deleted version, a removed config or mode. A
record of any other keytype (Confluent's ``NOOP``) or that does not parse is skipped,
as Karapace skips what it does not manage.

:class:`RegistryState` replays records in offset order into the subjects document the
registry's operations read (``log_layout.schema_registry``) and the schemas by id.
Replaying the compacted log gives the same state as replaying the whole one: each
key's latest record decides, and a ``DELETE_SUBJECT`` marks only the versions present
when it is read (the same versions whether or not compaction ran, since a version
is written again only after a hard delete, which also removes the marker).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any


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
    """One schema as registered under its id."""

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


#: the levels and modes a record may set (Confluent's); a record naming another is skipped
LEVELS = frozenset({"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD",
                    "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"})
MODES = frozenset({"READWRITE", "READONLY", "IMPORT"})


def _json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _json({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(keytype: str, subject: str | None) -> bytes:
    """A ``CONFIG``, ``MODE`` or ``DELETE_SUBJECT`` key (``subject`` None: global)."""
    return _json({"keytype": keytype, "subject": subject, "magic": 0})


def schema_value(subject: str, version: int, schema: StoredSchema, deleted: bool) -> bytes:
    value: dict[str, Any] = {"subject": subject, "version": version, "id": schema.id,
                             "schema": schema.schema, "deleted": deleted}
    if schema.references:
        value["references"] = [r.to_doc() for r in schema.references]
    if schema.schema_type != "AVRO":
        value["schemaType"] = schema.schema_type
    return _json(value)


def config_value(level: str) -> bytes:
    return _json({"compatibilityLevel": level})


def mode_value(mode: str) -> bytes:
    return _json({"mode": mode})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _json({"subject": subject, "version": version})


def _stored(value: dict[str, Any]) -> StoredSchema:
    return StoredSchema(int(value["id"]), str(value.get("schemaType") or "AVRO"),
                        str(value["schema"]),
                        tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                              for r in value.get("references") or ()))


class RegistryState:
    """The registry as replayed from ``_schemas`` up to offset ``end`` (exclusive)."""

    def __init__(self, topic_id: str = "") -> None:
        self.topic_id = topic_id
        self.end = 0
        #: (subject, version) -> (its schema, deleted)
        self.versions: dict[tuple[str, int], tuple[StoredSchema, bool]] = {}
        self.levels: dict[str | None, str] = {}  # CONFIG, by subject (None: global)
        self.modes: dict[str | None, str] = {}  # MODE
        self.delete_markers: set[str] = set()  # subjects with a DELETE_SUBJECT record
        #: the greatest id any record read named, tombstoned since or not: new ids are
        #: above it (Confluent's and Karapace's rule: max id seen + 1)
        self.max_id = 0
        self.skipped = 0  # records of no keytype managed here, or not parsing
        self._derived: tuple[dict[str, Any], dict[int, StoredSchema], dict[str, int]] | None \
            = None

    # -- replay -----------------------------------------------------------------------
    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Replay one record (see the module docstring for what is skipped)."""
        self._derived = None
        try:
            k = json.loads(key) if key is not None else None
            v = json.loads(value) if value is not None else None
            if not isinstance(k, dict) or (v is not None and not isinstance(v, dict)):
                raise ValueError("not a JSON object")
            keytype, subject = k.get("keytype"), k.get("subject")
            if subject is not None and not isinstance(subject, str):
                raise ValueError("subject is not a string")
            if keytype == "SCHEMA":
                self._schema(str(subject), int(k["version"]), v)
            elif keytype in ("CONFIG", "MODE"):
                held = self.levels if keytype == "CONFIG" else self.modes
                if v is None:
                    held.pop(subject, None)
                else:
                    setting = str(v["compatibilityLevel" if keytype == "CONFIG"
                                    else "mode"]).upper()
                    if setting not in (LEVELS if keytype == "CONFIG" else MODES):
                        raise ValueError(f"no such {keytype.lower()}: {setting}")
                    held[subject] = setting
            elif keytype == "DELETE_SUBJECT":
                self._delete_subject(str(subject), v)
            else:
                self.skipped += 1
        except (ValueError, KeyError, TypeError):
            self.skipped += 1

    def _schema(self, subject: str, version: int, v: dict[str, Any] | None) -> None:
        if v is None:
            self.versions.pop((subject, version), None)
            return
        stored = _stored(v)
        self.max_id = max(self.max_id, stored.id)
        self.versions[(subject, version)] = (stored, bool(v.get("deleted", False)))

    def _delete_subject(self, subject: str, v: dict[str, Any] | None) -> None:
        if v is None:
            self.delete_markers.discard(subject)
            return
        upto = int(v["version"])
        self.delete_markers.add(subject)
        for (s, number), (stored, _) in list(self.versions.items()):
            if s == subject and number <= upto:
                self.versions[(s, number)] = (stored, True)

    # -- what the registry reads ------------------------------------------------------
    def _derive(self) -> tuple[dict[str, Any], dict[int, StoredSchema], dict[str, int]]:
        if self._derived is not None:
            return self._derived
        subjects: dict[str, dict[str, Any]] = {}

        def entry(subject: str) -> dict[str, Any]:
            return subjects.setdefault(subject, {"versions": [], "next": 1})

        by_id: dict[int, StoredSchema] = {}
        by_fingerprint: dict[str, int] = {}
        for (subject, number), (stored, deleted) in sorted(self.versions.items()):
            e = entry(subject)
            e["versions"].append({"version": number, "id": stored.id, "deleted": deleted})
            e["next"] = max(e["next"], number + 1)
            by_id[stored.id] = stored
        for schema_id in sorted(by_id):  # the smallest id of a content is its id
            by_fingerprint.setdefault(by_id[schema_id].fingerprint, schema_id)
        doc: dict[str, Any] = {"subjects": subjects}
        for held, field in ((self.levels, "compatibility"), (self.modes, "mode")):
            for subject, setting in held.items():
                (doc if subject is None else entry(subject))[field] = setting
        self._derived = (doc, by_id, by_fingerprint)
        return self._derived

    @property
    def doc(self) -> dict[str, Any]:
        """The subjects document (``schema_registry`` module docstring). Not to modify."""
        return self._derive()[0]

    @property
    def by_id(self) -> dict[int, StoredSchema]:
        """Every schema a live or soft-deleted version holds, by id. Not to modify."""
        return self._derive()[1]

    @property
    def by_fingerprint(self) -> dict[str, int]:
        return self._derive()[2]


def records_for(state: RegistryState, old: dict[str, Any], new: dict[str, Any],
                schemas: dict[int, StoredSchema]) -> list[tuple[bytes, bytes | None]]:
    """The records that take the registry from the subjects document ``old`` (the
    state's) to ``new``: a changed level or mode, a new or re-flagged version, a
    tombstone for what ``new`` removes. ``schemas`` holds the new ids' schemas.
    Raises KeyError naming a version's id that no schema is known for."""
    out: list[tuple[bytes, bytes | None]] = []
    tombstones: list[tuple[bytes, bytes | None]] = []
    for field, keytype, encode in (("compatibility", "CONFIG", config_value),
                                   ("mode", "MODE", mode_value)):
        if old.get(field) != new.get(field):
            out.append((config_key(keytype, None),
                        encode(new[field]) if new.get(field) else None))
    old_subjects, new_subjects = old.get("subjects", {}), new.get("subjects", {})
    for subject in sorted(set(old_subjects) | set(new_subjects)):
        was, now = old_subjects.get(subject) or {}, new_subjects.get(subject) or {}
        for field, keytype, encode in (("compatibility", "CONFIG", config_value),
                                       ("mode", "MODE", mode_value)):
            if was.get(field) != now.get(field):
                record = (config_key(keytype, subject),
                          encode(now[field]) if now.get(field) else None)
                (out if now.get(field) else tombstones).append(record)
        before = {v["version"]: v for v in was.get("versions", ())}
        after = {v["version"]: v for v in now.get("versions", ())}
        for number, v in sorted(after.items()):
            prior = before.get(number)
            if prior is not None and (prior["id"], prior["deleted"]) == (v["id"], v["deleted"]):
                continue
            stored = schemas.get(v["id"]) or state.by_id.get(v["id"])
            if stored is None:
                raise KeyError(f"no schema is known for id {v['id']}")
            out.append((schema_key(subject, number),
                        schema_value(subject, number, stored, bool(v["deleted"]))))
        tombstones += [(schema_key(subject, n), None) for n in sorted(set(before) - set(after))]
        live_before = [n for n, v in before.items() if not v["deleted"]]
        if after and live_before and all(v["deleted"] for v in after.values()):
            # a soft-deleted subject, as Karapace records it (its reader marks the
            # versions from this; the versions' own records say it too)
            out.append((config_key("DELETE_SUBJECT", subject),
                        delete_subject_value(subject, max(after))))
        if not after and subject in state.delete_markers:
            tombstones.append((config_key("DELETE_SUBJECT", subject), None))
    return out + tombstones
