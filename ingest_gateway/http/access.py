"""ACL checks a route makes itself: on what its body names, and on what it lists.

The guard (``guard``) checks what a route's path names before the route runs; a
fetch, a commit or a subscription names its topics in the body, and a listing shows
only what the principal may Describe, as Kafka's Metadata, ListGroups and OffsetFetch
leave out what a client may not see. Each function is free when the authorizer is
off (the gateway's ``authorizer`` None).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from starlette.requests import Request

from ingest_gateway.errors import NotAuthorized
from ingest_gateway.http.guard import host_of
from ingest_gateway.security.authentication import principal_of
from ingest_gateway.security.route_acls import CLUSTER

T = TypeVar("T")


def allowed(request: Request, operation: str, resource_type: str, name: str) -> bool:
    """Whether the request's principal may do ``operation`` on the resource."""
    authorizer = request.app.state.gateway.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(principal_of(request.scope), host_of(request.scope),
                                operation, resource_type, name)


def require(request: Request, operation: str, resource_type: str, name: str) -> None:
    """Raise NotAuthorized (403) unless the principal may do ``operation`` on it."""
    if not allowed(request, operation, resource_type, name):
        raise NotAuthorized(principal_of(request.scope), operation, resource_type, name)


def require_topics(request: Request, operation: str, topics: Iterable[str]) -> None:
    """:func:`require` on each topic (each named once)."""
    for topic in dict.fromkeys(topics):
        require(request, operation, "Topic", topic)


def visible(request: Request, resource_type: str, items: Iterable[T],
            name: Callable[[T], str] = str) -> list[T]:
    """The items whose resource the principal may Describe, in order."""
    items = list(items)
    if request.app.state.gateway.authorizer is None:
        return items
    return [item for item in items if allowed(request, "Describe", resource_type, name(item))]


def visible_offsets(request: Request, committed: Mapping[tuple[str, int], T]
                    ) -> dict[tuple[str, int], T]:
    """Committed offsets of the topics the principal may Describe (Kafka's OffsetFetch
    answers TOPIC_AUTHORIZATION_FAILED for the others; a listing leaves them out)."""
    topics = set(visible(request, "Topic", {t for t, _ in committed}))
    return {tp: o for tp, o in committed.items() if tp[0] in topics}


def readable_topics(request: Request, list_topics: Callable[[], Iterable[str]]
                    ) -> Callable[[], list[str]]:
    """``list_topics`` narrowed to the topics the request's principal may Read, for a
    pattern subscription listed again later (the principal and host are kept, the
    request is not)."""
    authorizer = request.app.state.gateway.authorizer
    if authorizer is None:
        return lambda: list(list_topics())
    principal, host = principal_of(request.scope), host_of(request.scope)
    return lambda: [t for t in list_topics()
                    if authorizer.authorize(principal, host, "Read", "Topic", t)]


def require_create(request: Request, topic: str) -> None:
    """CreateTopics: Create on the cluster, or on the topic (Kafka accepts either)."""
    if not allowed(request, "Create", "Cluster", CLUSTER):
        require(request, "Create", "Topic", topic)


def require_idempotent_producer(request: Request) -> None:
    """InitProducerId without a transactional id: IdempotentWrite on the cluster, or
    (Kafka 2.8+) Write on any topic."""
    authorizer = request.app.state.gateway.authorizer
    if authorizer is None or allowed(request, "IdempotentWrite", "Cluster", CLUSTER):
        return
    any_write = getattr(authorizer, "authorize_by_resource_type", None)
    if any_write is not None and any_write(principal_of(request.scope),
                                           host_of(request.scope), "Write", "Topic"):
        return
    raise NotAuthorized(principal_of(request.scope), "IdempotentWrite", "Cluster", CLUSTER)
