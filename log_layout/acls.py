"""Kafka's ACLs, kept in the store so every gateway enforces the same rules.

An ACL binding is Kafka's ``AclBinding``: a resource pattern and an access control
entry. Its fields, with the values Kafka allows (names compared case-insensitively
on input, ``_`` and ``-`` ignored, and stored in the spelling below):

- ``resource_type``: ``Topic``, ``Group``, ``Cluster``, ``TransactionalId`` (Kafka's),
  and ``Subject`` (a Schema Registry subject: Read, Write, Delete, DescribeConfigs,
  AlterConfigs; see below);
- ``name``: the resource's name, or ``*`` (LITERAL: every resource of the type);
  a Cluster's name is always ``kafka-cluster``, as in Kafka;
- ``pattern_type``: ``LITERAL`` (the name exactly) or ``PREFIXED`` (names that
  start with it);
- ``principal``: ``User:<name>``, or ``User:*`` for every user;
- ``host``: ``*`` or an IP address (stored in its compressed form: ``::1``);
- ``operation``: ``All``, ``Read``, ``Write``, ``Create``, ``Delete``, ``Alter``,
  ``Describe``, ``ClusterAction``, ``DescribeConfigs``, ``AlterConfigs``,
  ``IdempotentWrite``, limited per resource type as ``kafka-acls.sh`` limits them
  (:data:`SUPPORTED_OPERATIONS`; ``All`` fits every type);
- ``permission``: ``Allow`` or ``Deny``.

**Storage.** The whole set of bindings is one document, kept as numbered versions
under ``_security/acls/`` by ``versioned_doc`` (exclusive create per version, a
lost race re-applies its change on the winner's set, old versions pruned; a
reader finds the current one with one LIST and reads it only when its number
changed)::

    _security/acls/<version:020d>.json
    {"version": 8,
     "written_ms": 1764115200000,
     "acls": [{"resource_type": "Topic", "name": "clicks", "pattern_type": "LITERAL",
               "principal": "User:alice", "host": "*", "operation": "Read",
               "permission": "Allow"}, ...]}

``acls`` is sorted and has no duplicates (adding a binding that exists changes
nothing and creates no version, as Kafka answers such a create with success). A
binding in a document that does not validate (written by hand) makes the whole
document CorruptDocument: a gateway must not enforce half of someone's rules.

Filters (:class:`AclFilter`) select bindings to list or remove as Kafka's
``AclBindingFilter``: None is "any" for each field; the pattern type ``ANY`` takes
the name exactly whatever the pattern, ``MATCH`` every binding that would apply to
the name (the literal name, ``*``, and the prefixes of it).

**Subject ACLs are the Schema Registry's**, kept in the same document but outside
Kafka's model (Confluent keeps its registry's ACLs apart from Kafka's too): a filter
whose resource type is "any" matches Kafka's four types only, so Kafka's
DescribeAcls/DeleteAcls and REST Proxy's ``/acls`` never see or remove a ``Subject``
binding (they have no code or name for it); a filter naming ``Subject`` does, and
``sparklog acls`` lists every binding.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import time
from collections.abc import Iterable, Mapping
from typing import Any

from log_layout.errors import CorruptDocument, InvalidAcl
from log_layout.paths import SECURITY_FOLDER
from log_layout.store import Store
from log_layout.versioned_doc import Version, VersionedDoc, version_name

#: where the store's security documents live (``_security`` at the store's root, reserved
#: as a topic name by ``paths``)
ACLS_FOLDER = f"{SECURITY_FOLDER}/acls"

#: Kafka's resource types (what its protocol and REST Proxy's ACLs can name)
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
#: the Schema Registry's (module doc)
SUBJECT = "Subject"
ALL_RESOURCE_TYPES = (*RESOURCE_TYPES, SUBJECT)
PATTERN_TYPES = ("LITERAL", "PREFIXED")
#: pattern types a filter may use besides the two above
FILTER_PATTERN_TYPES = ("LITERAL", "PREFIXED", "ANY", "MATCH")
OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe",
              "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite")
PERMISSIONS = ("Allow", "Deny")
#: Kafka's ``AclEntry.supportedOperations`` (plus ``All``, which fits every type)
SUPPORTED_OPERATIONS: Mapping[str, frozenset[str]] = {
    "Topic": frozenset({"All", "Read", "Write", "Create", "Describe", "Delete", "Alter",
                        "DescribeConfigs", "AlterConfigs"}),
    "Group": frozenset({"All", "Read", "Describe", "Delete", "DescribeConfigs",
                        "AlterConfigs"}),
    "Cluster": frozenset({"All", "Create", "ClusterAction", "DescribeConfigs", "AlterConfigs",
                          "IdempotentWrite", "Alter", "Describe"}),
    "TransactionalId": frozenset({"All", "Describe", "Write"}),
    # Confluent's registry ACLs: read a subject's versions, register, delete, and its
    # compatibility level and mode (ReadCompatibility/WriteCompatibility there)
    SUBJECT: frozenset({"All", "Read", "Write", "Delete", "DescribeConfigs", "AlterConfigs"}),
}
#: the one name of the Cluster resource (Kafka's ``Resource.CLUSTER_NAME``)
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
#: longest resource or principal name accepted (Kafka has no limit; this keeps a typo
#: of a pasted file out of every gateway's memory)
MAX_NAME = 1000


def _key(text: str) -> str:
    return text.replace("_", "").replace("-", "").upper()


_CANONICAL = {field: {_key(v): v for v in values} for field, values in (
    ("resource_type", ALL_RESOURCE_TYPES), ("pattern_type", FILTER_PATTERN_TYPES),
    ("operation", OPERATIONS), ("permission", PERMISSIONS))}


def canonical(field: str, value: object, allowed: Iterable[str] | None = None) -> str:
    """``value`` in its stored spelling (``read`` -> ``Read``, ``transactional-id`` ->
    ``TransactionalId``); raises InvalidAcl naming ``field`` and the values allowed."""
    names = _CANONICAL[field]
    allowed = tuple(allowed) if allowed is not None else tuple(dict.fromkeys(names.values()))
    found = names.get(_key(value)) if isinstance(value, str) else None
    if found is None or found not in allowed:
        raise InvalidAcl(field, value, f"expected one of {', '.join(allowed)}")
    return found


def _name(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidAcl(field, value, "expected a non-empty string")
    if len(value) > MAX_NAME:
        raise InvalidAcl(field, value[:40] + "...", f"longer than {MAX_NAME} characters")
    if not value.isprintable():
        raise InvalidAcl(field, value, "holds a control character")
    return value


def parse_principal(value: object) -> str:
    """A principal as ACLs name it: ``User:<name>`` or ``User:*``; raises InvalidAcl."""
    text = _name("principal", value)
    kind, sep, who = text.partition(":")
    if not sep or kind != "User" or not who:
        raise InvalidAcl("principal", value, "expected User:<name> or User:* "
                                             "(Kafka's principalType:name, type User)")
    return text


def parse_host(value: object) -> str:
    """``*`` or an IP address in its compressed form (an IPv4-mapped IPv6 address as its
    IPv4 one, as the authorizer sees such a client); raises InvalidAcl."""
    if value == WILDCARD:
        return WILDCARD
    try:
        address = ipaddress.ip_address(value)  # type: ignore[arg-type]
        mapped = getattr(address, "ipv4_mapped", None)
        return str(mapped or address)
    except ValueError:
        raise InvalidAcl("host", value, "expected * or an IP address such as 10.0.0.7 "
                                        "(Kafka matches hosts by address, not name)") from None


@dataclasses.dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's ``AclBinding``).
    Build it with :meth:`create`, which validates; the fields are then canonical."""

    resource_type: str
    name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str

    @classmethod
    def create(cls, resource_type: str, name: str, pattern_type: str = "LITERAL", *,
               principal: str, host: str = WILDCARD, operation: str,
               permission: str = "Allow") -> "AclBinding":
        """A validated binding in canonical spelling; raises InvalidAcl naming the field."""
        rtype = canonical("resource_type", resource_type)
        pattern = canonical("pattern_type", pattern_type, PATTERN_TYPES)
        name = _name("name", name)
        if rtype == "Cluster" and (name != CLUSTER_NAME or pattern != "LITERAL"):
            raise InvalidAcl("name", name, f"the Cluster resource is the LITERAL name "
                                           f"{CLUSTER_NAME!r}")
        op = canonical("operation", operation)
        if op not in SUPPORTED_OPERATIONS[rtype]:
            raise InvalidAcl("operation", op, f"resource type {rtype} only supports "
                                              f"{', '.join(sorted(SUPPORTED_OPERATIONS[rtype]))}")
        return cls(rtype, name, pattern, parse_principal(principal), parse_host(host), op,
                   canonical("permission", permission))

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "AclBinding":
        """Raises InvalidAcl for a field that does not validate, KeyError for a missing one."""
        return cls.create(doc["resource_type"], doc["name"], doc["pattern_type"],
                          principal=doc["principal"], host=doc["host"],
                          operation=doc["operation"], permission=doc["permission"])

    def __str__(self) -> str:
        return (f"{self.permission} {self.principal} {self.operation} from {self.host} on "
                f"{self.resource_type} {self.pattern_type} {self.name!r}")


@dataclasses.dataclass(frozen=True)
class AclFilter:
    """Selects bindings, as Kafka's ``AclBindingFilter``: None matches any value. Build it
    with :meth:`create`, which validates."""

    resource_type: str | None = None
    name: str | None = None
    pattern_type: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    permission: str | None = None

    @classmethod
    def create(cls, resource_type: str | None = None, name: str | None = None,
               pattern_type: str = "ANY", *, principal: str | None = None,
               host: str | None = None, operation: str | None = None,
               permission: str | None = None) -> "AclFilter":
        """Raises InvalidAcl naming the field that does not validate."""
        return cls(None if resource_type is None else canonical("resource_type", resource_type),
                   None if name is None else _name("name", name),
                   canonical("pattern_type", pattern_type),
                   None if principal is None else parse_principal(principal),
                   None if host is None else parse_host(host),
                   None if operation is None else canonical("operation", operation),
                   None if permission is None else canonical("permission", permission))

    @classmethod
    def exact(cls, binding: AclBinding) -> "AclFilter":
        """The filter matching ``binding`` only."""
        return cls(**dataclasses.asdict(binding))

    def matches(self, b: AclBinding) -> bool:
        """Kafka's ``ResourcePatternFilter.matches`` and ``AccessControlEntryFilter.matches``."""
        if self.resource_type is None and b.resource_type not in RESOURCE_TYPES:
            return False  # "any" is any of Kafka's types: Subject only when named
        if self.resource_type is not None and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in ("ANY", "MATCH") and self.pattern_type != b.pattern_type:
            return False
        if self.name is not None and not self._name_matches(b):
            return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation is None or self.operation == b.operation)
                and (self.permission is None or self.permission == b.permission))

    def _name_matches(self, b: AclBinding) -> bool:
        assert self.name is not None
        if self.pattern_type != "MATCH":
            return self.name == b.name
        if b.pattern_type == "LITERAL":
            return self.name == b.name or b.name == WILDCARD
        return self.name.startswith(b.name)


@dataclasses.dataclass(frozen=True)
class Acls:
    """The store's ACLs at one version (0: none ever written)."""

    version: int
    bindings: tuple[AclBinding, ...]

    def matching(self, filters: Iterable[AclFilter] | None = None) -> list[AclBinding]:
        """The bindings any of ``filters`` matches (all of them without filters), sorted."""
        if filters is None:
            return list(self.bindings)
        fs = list(filters)
        return [b for b in self.bindings if any(f.matches(b) for f in fs)]


def _docs(store: Store) -> VersionedDoc:
    return VersionedDoc(store, ACLS_FOLDER)


def _decode(version: int, doc: Mapping[str, Any]) -> Acls:
    path = f"{ACLS_FOLDER}/{version_name(version)}"
    raw = doc.get("acls", [])
    if not isinstance(raw, list):
        raise CorruptDocument(path, "'acls' is not a list")
    try:
        bindings = {AclBinding.from_json(item) for item in raw}
    except (InvalidAcl, KeyError, TypeError, AttributeError) as e:
        raise CorruptDocument(path, f"an ACL does not validate: {e}") from None
    return Acls(version, tuple(sorted(bindings)))


def _encode(bindings: Iterable[AclBinding], version: int, now_ms: int | None) -> dict[str, Any]:
    return {"version": version,
            "written_ms": time.time_ns() // 1_000_000 if now_ms is None else now_ms,
            "acls": [b.to_json() for b in sorted(set(bindings))]}


def load(store: Store, *, known: int | None = None) -> Acls | None:
    """The current ACLs; None if their version is ``known`` (one LIST, no read). Raises
    CorruptDocument, OSError when the store cannot be reached."""
    found = _docs(store).newest(known=known)
    return None if found is None else _decode(found.number, found.doc)


def list_acls(store: Store, filters: Iterable[AclFilter] | None = None) -> list[AclBinding]:
    """The bindings any of ``filters`` matches (all without filters), sorted."""
    acls = load(store)
    assert acls is not None
    return acls.matching(filters)


def _change(store: Store, apply, now_ms: int | None) -> list[AclBinding]:
    """Run ``apply(current set) -> (new set, changed bindings)`` as a new version."""
    changed: list[AclBinding] = []

    def change(current: Version) -> dict[str, Any] | None:
        nonlocal changed
        new, changed = apply(set(_decode(current.number, current.doc).bindings))
        return _encode(new, current.number + 1, now_ms) if changed else None

    _docs(store).update(change)
    return sorted(changed)


def add_acls(store: Store, bindings: Iterable[AclBinding], *,
             now_ms: int | None = None) -> list[AclBinding]:
    """Add bindings; returns those that were not there yet (sorted). Never loses a
    concurrent change (see the module doc). Raises CorruptDocument, OSError."""
    wanted = set(bindings)
    return _change(store, lambda cur: (cur | wanted, wanted - cur), now_ms)


def remove_acls(store: Store, filters: Iterable[AclFilter], *,
                now_ms: int | None = None) -> list[AclBinding]:
    """Remove every binding any of ``filters`` matches; returns those removed (sorted).
    Raises CorruptDocument, OSError."""
    fs = list(filters)

    def apply(cur: set[AclBinding]) -> tuple[set[AclBinding], set[AclBinding]]:
        gone = {b for b in cur if any(f.matches(b) for f in fs)}
        return cur - gone, gone

    return _change(store, apply, now_ms)
