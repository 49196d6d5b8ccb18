"""The Schema Registry's compatibility levels and modes, global and per subject (the
``compatibility`` and ``mode`` fields of the subjects document, see
``log_layout.schema_registry``), as Confluent's ``/config`` and ``/mode`` answer them.

An absent subject level or mode means the global one; an absent global one means
``BACKWARD`` and ``READWRITE`` (Confluent's defaults). IMPORT mode may be set only
where no subject holds versions, unless forced (Confluent's ``?force=true``).
"""

from __future__ import annotations

from typing import Any

from ingest_gateway.server.schema_registry_errors import (
    check_subject, invalid_level, invalid_mode, no_subject_level, operation_not_permitted,
    subject_not_found)
from log_layout.schema_registry import SchemaStore

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
          "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_LEVEL, DEFAULT_MODE = "BACKWARD", "READWRITE"


def empty_subject() -> dict[str, Any]:
    """A subject's entry before its first version."""
    return {"versions": [], "next": 1}


def level_of(doc: dict[str, Any], subject: str | None) -> str:
    """The compatibility level that applies to ``subject`` (None: the global one)."""
    entry = doc.get("subjects", {}).get(subject) if subject else None
    return (entry or {}).get("compatibility") or doc.get("compatibility") or DEFAULT_LEVEL


def mode_of(doc: dict[str, Any], subject: str | None) -> str:
    """The mode that applies to ``subject`` (None: the global one)."""
    entry = doc.get("subjects", {}).get(subject) if subject else None
    return (entry or {}).get("mode") or doc.get("mode") or DEFAULT_MODE


class RegistryConfigs:
    """Levels and modes in ``schemas`` (raises RegistryError in Confluent's codes, and
    OSError or CorruptDocument when the store fails)."""

    def __init__(self, schemas: SchemaStore):
        self.schemas = schemas

    def config(self, subject: str | None = None, *, default_to_global: bool = False) -> dict[str, Any]:
        doc = self.schemas.registry()
        if subject is not None:
            check_subject(subject)
            entry = doc.get("subjects", {}).get(subject) or {}
            if not entry.get("compatibility") and not default_to_global:
                raise no_subject_level(f"Subject '{subject}' does not have subject-level "
                                       "compatibility configured")
        return {"compatibilityLevel": level_of(doc, subject)}

    def set_config(self, subject: str | None, body: Any) -> dict[str, Any]:
        level = body.get("compatibility") if isinstance(body, dict) else None
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise invalid_level("Invalid compatibility level. Valid values are none, backward, "
                                "forward, full, backward_transitive, forward_transitive, "
                                "and full_transitive")
        level = level.upper()

        def change(doc: dict[str, Any]) -> dict[str, Any] | None:
            if subject is None:
                if doc.get("compatibility") == level:
                    return None
                doc["compatibility"] = level
            else:
                entry = doc.setdefault("subjects", {}).setdefault(subject, empty_subject())
                if entry.get("compatibility") == level:
                    return None
                entry["compatibility"] = level
            return doc

        if subject is not None:
            check_subject(subject)
        self.schemas.update(change)
        return {"compatibility": level}

    def delete_config(self, subject: str | None) -> dict[str, Any]:
        doc = self.schemas.registry()
        previous = level_of(doc, subject)

        def change(doc: dict[str, Any]) -> dict[str, Any] | None:
            holder = doc if subject is None else doc.get("subjects", {}).get(subject)
            if not holder or "compatibility" not in holder:
                return None
            del holder["compatibility"]
            return doc

        if subject is not None:
            check_subject(subject)
            if subject not in doc.get("subjects", {}):
                raise subject_not_found(subject)
        self.schemas.update(change)
        return {"compatibilityLevel": previous}

    def mode(self, subject: str | None = None) -> dict[str, Any]:
        return {"mode": mode_of(self.schemas.registry(), subject)}

    def set_mode(self, subject: str | None, body: Any, *, force: bool = False) -> dict[str, Any]:
        mode = body.get("mode") if isinstance(body, dict) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise invalid_mode(f"Invalid mode. Valid values are {', '.join(MODES)}")
        mode = mode.upper()

        def change(doc: dict[str, Any]) -> dict[str, Any] | None:
            subjects = doc.setdefault("subjects", {})
            if mode == "IMPORT" and not force:
                held = [s for s, e in subjects.items() if e.get("versions") and
                        (subject is None or s == subject)]
                if held:
                    raise operation_not_permitted(
                        "Cannot import since found existing subjects (use force=true)")
            holder = doc if subject is None else subjects.setdefault(subject, empty_subject())
            if holder.get("mode") == mode:
                return None
            holder["mode"] = mode
            return doc

        if subject is not None:
            check_subject(subject)
        self.schemas.update(change)
        return {"mode": mode}

    def delete_mode(self, subject: str) -> dict[str, Any]:
        """Remove a subject's own mode; answers the mode it had."""
        check_subject(subject)
        doc = self.schemas.registry()
        if subject not in doc.get("subjects", {}):
            raise subject_not_found(subject)
        previous = mode_of(doc, subject)

        def change(doc: dict[str, Any]) -> dict[str, Any] | None:
            entry = doc.get("subjects", {}).get(subject)
            if not entry or "mode" not in entry:
                return None
            del entry["mode"]
            return doc

        self.schemas.update(change)
        return {"mode": previous}

