"""The Schema Registry's ``Subject`` ACLs where REST Proxy registers schemas itself.

A REST Proxy produce in an embedded format with a schema given as text registers it
under its subject when the subject does not hold it yet: that needs Write on the
subject, as the principal registering it through the registry's own API would
(Confluent's REST Proxy calls its registry with the caller's credentials under RBAC).
Producing by a schema id the subject already holds needs no more than Write on the topic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingest_gateway.security.authentication import host_of, principal_of
from log_layout.acls import SUBJECT


def register_check(authorizer: Any, scope: Any) -> Callable[[str], None] | None:
    """``check(subject)`` raising NotAuthorized unless the request's principal may Write
    the subject; None with the authorizer off."""
    if authorizer is None:
        return None
    principal, host = principal_of(scope), host_of(scope)
    return lambda subject: authorizer.check(principal, host, "Write", SUBJECT, subject)
