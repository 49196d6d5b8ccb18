"""Kafka's ACL authorizer over the ACLs kept in the store (``log_layout.acls``).

The rules are Kafka's ``StandardAuthorizer`` (``StandardAuthorizerData.authorize``):

1. a principal named in ``authorizer.super.users`` may do everything;
2. the ACLs that apply to a resource are those of its type whose pattern matches
   its name: LITERAL with the name itself or ``*``, PREFIXED with a prefix of it.
   If there are none (whoever they name), the answer is
   ``authorizer.allow.everyone.if.no.acl.found``;
3. of those, an ACL matches the request when its principal is the request's or
   ``User:*``, its host is the client's address or ``*``, and its operation is the
   one asked, or ``All``, or, for an Allow only, one that implies it: Read, Write,
   Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs (a Deny of
   Read does not deny Describe);
4. a matching Deny refuses, whatever allows; else a matching Allow allows; else
   (ACLs on the resource, none for this request) refused.

The ACLs are read from the store when the authorizer is made, then again every
``authorizer.refresh.ms`` on a background thread (one LIST per refresh; the
document is read only when its version changed). :meth:`Authorizer.authorize` does
no I/O: it looks the name up in an index built at each change (by resource type,
then literal name, ``*``, and the prefix lengths present), a few microseconds.
A refresh that fails (store unreachable, a document written wrong by hand) keeps
the rules already loaded and logs why; the first load's failure is raised, so a
gateway never starts with no rules.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from conf.errors import ConfigError
from ingest_gateway.errors import NotAuthorized
from log_layout import acls as acl_format
from log_layout.acls import (ALL_RESOURCE_TYPES, OPERATIONS, WILDCARD, WILDCARD_PRINCIPAL,
                             AclBinding)
from log_layout.errors import InvalidAcl

log = logging.getLogger(__name__)

#: operations an Allow of each of these implies (StandardAuthorizerData.IMPLIES_*)
IMPLIES_DESCRIBE = frozenset({"Describe", "Read", "Write", "Delete", "Alter"})
IMPLIES_DESCRIBE_CONFIGS = frozenset({"DescribeConfigs", "AlterConfigs"})
_OPERATIONS = frozenset(OPERATIONS) - {"All"}
#: Kafka's, and the Schema Registry's Subject (``http.schema_registry`` asks for it)
_RESOURCE_TYPES = frozenset(ALL_RESOURCE_TYPES)

#: one ACL as the index keeps it: (principal, host, operation, allow)
_Entry = tuple[str, str, str, bool]


class Refresher:
    """Calls ``refresh()`` every ``interval_ms`` on a daemon thread until :meth:`close`;
    an exception is logged and the next call comes at the next interval."""

    def __init__(self, name: str, refresh: Callable[[], Any], interval_ms: int):
        self._refresh, self._interval_s = refresh, max(interval_ms, 1) / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._refresh()
            except Exception:  # keep what was loaded: a store blip must not open or close doors
                log.warning("%s: refresh failed, keeping the rules loaded before",
                            self._thread.name, exc_info=True)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout_s``: a LIST in flight)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)


@dataclasses.dataclass(frozen=True)
class _ResourceIndex:
    """The ACLs of one resource type, by how their pattern matches a name."""

    literal: dict[str, tuple[_Entry, ...]]
    wildcard: tuple[_Entry, ...]
    prefixed: dict[str, tuple[_Entry, ...]]
    #: the lengths of the PREFIXED names, ascending: a lookup tries only these
    prefix_lengths: tuple[int, ...]

    @classmethod
    def build(cls, bindings: Iterable[AclBinding]) -> "_ResourceIndex":
        literal: dict[str, list[_Entry]] = {}
        prefixed: dict[str, list[_Entry]] = {}
        wildcard: list[_Entry] = []
        for b in bindings:
            entry = (b.principal, b.host, b.operation, b.permission == "Allow")
            if b.pattern_type == "PREFIXED":
                prefixed.setdefault(b.name, []).append(entry)
            elif b.name == WILDCARD:
                wildcard.append(entry)
            else:
                literal.setdefault(b.name, []).append(entry)
        return cls({n: tuple(e) for n, e in literal.items()}, tuple(wildcard),
                   {n: tuple(e) for n, e in prefixed.items()},
                   tuple(sorted({len(n) for n in prefixed})))

    def sections(self, name: str) -> list[tuple[_Entry, ...]]:
        """The ACLs whose pattern matches ``name``, in groups."""
        found = []
        hit = self.literal.get(name)
        if hit:
            found.append(hit)
        if self.wildcard:
            found.append(self.wildcard)
        for n in self.prefix_lengths:
            if n > len(name):
                break
            hit = self.prefixed.get(name[:n])
            if hit:
                found.append(hit)
        return found


def _index(bindings: Iterable[AclBinding]) -> dict[str, _ResourceIndex]:
    by_type: dict[str, list[AclBinding]] = {}
    for b in bindings:
        by_type.setdefault(b.resource_type, []).append(b)
    return {t: _ResourceIndex.build(bs) for t, bs in by_type.items()}


def _decide(entries: tuple[_Entry, ...], principal: str, host: str, operation: str) -> bool | None:
    """Kafka's ``findResult`` over one group of ACLs: False on a matching Deny, True if
    an Allow matches and no Deny, None if none matches."""
    allowed = None
    for who, where, op, allow in entries:
        if (who != principal and who != WILDCARD_PRINCIPAL) or (where != WILDCARD
                                                                 and where != host):
            continue
        if op != "All" and op != operation:
            # only an Allow implies: a Deny of Read does not deny Describe
            if not allow or not ((operation == "Describe" and op in IMPLIES_DESCRIBE) or (
                    operation == "DescribeConfigs" and op in IMPLIES_DESCRIBE_CONFIGS)):
                continue
        if not allow:
            return False
        allowed = True
    return allowed


def super_users(text: str) -> frozenset[str]:
    """``authorizer.super.users``, ``;``-separated as Kafka's; raises ConfigError naming an
    entry that is not ``User:<name>``."""
    users = [u.strip() for u in text.split(";") if u.strip()]
    for u in users:
        try:
            acl_format.parse_principal(u)
        except InvalidAcl as e:
            raise ConfigError("authorizer.super.users", text, f"{u!r}: {e.reason}") from None
    return frozenset(users)


class Authorizer:
    """Kafka's ACL authorizer over ``log``'s store (see the module doc).

    ``settings.authorizer`` gives ``enabled`` (off: everything is allowed and the store
    is never read), ``super.users``, ``allow.everyone.if.no.acl.found`` and
    ``refresh.ms``. ``background=False`` starts no thread: the caller calls
    :meth:`refresh`. Stop the thread with :meth:`close` (or ``with Authorizer(...)``).

    Raises ConfigError for a bad ``super.users`` entry; the first load's
    CorruptDocument or OSError.
    """

    def __init__(self, log: Any, settings: Any, *, background: bool = True):
        cfg = settings.authorizer
        self.enabled = bool(cfg.enabled)
        self.super_users = super_users(cfg.super_users)
        self.allow_if_no_acl = bool(cfg.allow_everyone_if_no_acl_found)
        self.refresh_ms = int(cfg.refresh_ms)
        self._store = log.store
        self._acls = acl_format.Acls(0, ())
        self._index: dict[str, _ResourceIndex] = {}
        self._version: int | None = None
        self._changed = threading.Condition()
        self._refresher: Refresher | None = None
        if self.enabled:
            self.refresh()
            if background:
                self._refresher = Refresher("sparklog-acl-refresh", self.refresh,
                                            self.refresh_ms)

    @property
    def version(self) -> int:
        """The version of the ACLs in force (0: none were ever written)."""
        return self._acls.version

    @property
    def acls(self) -> tuple[AclBinding, ...]:
        return self._acls.bindings

    def refresh(self) -> bool:
        """Read the ACLs again if their version changed (one LIST; one read if it did);
        True if it did. Raises CorruptDocument, OSError (the rules in force stay)."""
        found = acl_format.load(self._store, known=self._version)
        if found is None:
            return False
        index = _index(found.bindings)
        with self._changed:
            self._index, self._acls, self._version = index, found, found.version
            self._changed.notify_all()
        return True

    def wait_for_version(self, version: int, timeout_s: float) -> bool:
        """Wait until the ACLs in force are at least ``version`` (refreshed by the
        thread); False if ``timeout_s`` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: self.version >= version, timeout_s)

    def authorize(self, principal: str, host: str, operation: str, resource_type: str,
                  name: str) -> bool:
        """Whether ``principal`` connecting from ``host`` (an IP address as the socket
        gives it; an IPv4-mapped IPv6 one counts as the IPv4 address) may do
        ``operation`` on the ``resource_type`` named ``name``. Names as ``log_layout.acls``
        spells them (``Read``, ``Topic``); raises ValueError for another (a caller's
        bug), never for a denial."""
        if not self.enabled:
            return True
        if operation not in _OPERATIONS or resource_type not in _RESOURCE_TYPES:
            raise ValueError(f"cannot authorize operation {operation!r} on resource type "
                             f"{resource_type!r}: expected one of {sorted(_OPERATIONS)} on "
                             f"one of {sorted(_RESOURCE_TYPES)}")
        if principal in self.super_users:
            return True
        if host.startswith("::ffff:") and "." in host:
            # a dual-stack socket's IPv4 client; Java's getHostAddress (what Kafka
            # compares) gives the IPv4 address, which is what an ACL names
            host = host[7:]
        index = self._index.get(resource_type)
        sections = index.sections(name) if index is not None else []
        if not sections:
            return self.allow_if_no_acl
        allowed = False
        for entries in sections:
            decided = _decide(entries, principal, host, operation)
            if decided is False:
                return False
            allowed = allowed or bool(decided)
        return allowed

    def authorize_by_resource_type(self, principal: str, host: str, operation: str,
                                   resource_type: str) -> bool:
        """Whether ``principal`` may do ``operation`` on *some* resource of the type:
        Kafka's ``authorizeByResourceType`` (how InitProducerId accepts Write on any
        topic for IdempotentWrite). An Allow (of the operation or All, no implication)
        counts unless a Deny covers it: a Deny of the literal ``*``, of the same literal
        name, or of a prefix of its name or prefix. With no ACL of the type at all,
        ``allow.everyone.if.no.acl.found``. Raises ValueError as :meth:`authorize`."""
        if not self.enabled or principal in self.super_users:
            return True
        self.authorize(principal, host, operation, resource_type, WILDCARD)  # validates
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]
        relevant = [b for b in self._acls.bindings if b.resource_type == resource_type]
        if not relevant:
            return self.allow_if_no_acl
        mine = [b for b in relevant if b.principal in (principal, WILDCARD_PRINCIPAL)
                and b.host in (host, WILDCARD) and b.operation in (operation, "All")]
        denies = [b for b in mine if b.permission == "Deny"]
        if any(d.pattern_type == "LITERAL" and d.name == WILDCARD for d in denies):
            return False

        def denied(allow: AclBinding) -> bool:
            return any((d.pattern_type == "PREFIXED" and allow.name.startswith(d.name)) or
                       (d.pattern_type == "LITERAL" and allow.pattern_type == "LITERAL"
                        and d.name == allow.name) for d in denies)

        return any(not denied(b) for b in mine if b.permission == "Allow")

    def check(self, principal: str, host: str, operation: str, resource_type: str,
              name: str) -> None:
        """:meth:`authorize`, raising NotAuthorized (403) when refused."""
        if not self.authorize(principal, host, operation, resource_type, name):
            raise NotAuthorized(principal, operation, resource_type, name)

    def close(self) -> None:
        """Stop the refresh thread (if any); idempotent."""
        if self._refresher is not None:
            self._refresher.close()
            self._refresher = None

    def __enter__(self) -> "Authorizer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
