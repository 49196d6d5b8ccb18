"""ACL admin: the one implementation REST v3's ``/acls`` routes and Kafka's DescribeAcls,
CreateAcls and DeleteAcls call.

The bindings live in the store (``log_layout.acls``, the same documents ``sparklog
acls`` writes); every call runs on the batcher's pool, off the event loop. A write is
followed by this gateway's authorizer reading the ACLs again (one LIST, one read), so
the next request is judged by them at once; other gateways see them at their next
refresh (``authorizer.refresh.ms``).

The binding and filter types and the names of the resource types, operations,
permissions and pattern types are ``log_layout.acls``'; they are re-exported here, so
the adapters need nothing of the store's modules but the types.
"""

from __future__ import annotations

from collections.abc import Sequence

from ingest_gateway.server.gateway import Gateway
from log_layout import acls
from log_layout.acls import (CLUSTER_NAME, OPERATIONS, PATTERN_TYPES, PERMISSIONS,
                             RESOURCE_TYPES, SUPPORTED_OPERATIONS, AclBinding, AclFilter)
from log_layout.errors import InvalidAcl

__all__ = ["CLUSTER_NAME", "OPERATIONS", "PATTERN_TYPES", "PERMISSIONS", "RESOURCE_TYPES",
           "SUPPORTED_OPERATIONS", "AclBinding", "AclFilter", "InvalidAcl",
           "describe", "create", "delete"]


async def _enforce_now(gateway: Gateway) -> None:
    if gateway.authorizer is not None:
        await gateway.batcher.run_blocking(gateway.authorizer.refresh)


async def describe(gateway: Gateway, flt: AclFilter) -> list[AclBinding]:
    """The bindings ``flt`` matches. Raises StoreError."""
    return await gateway.batcher.run_blocking(acls.list_acls, gateway.log.store, [flt])


async def create(gateway: Gateway, bindings: Sequence[AclBinding]) -> None:
    """Add ``bindings`` (all or none: one commit), then enforce them here. Raises
    StoreError."""
    await gateway.batcher.run_blocking(acls.add_acls, gateway.log.store, list(bindings))
    await _enforce_now(gateway)


async def delete(gateway: Gateway, flt: AclFilter) -> list[AclBinding]:
    """Remove the bindings ``flt`` matches and return them (enforced here at once when
    any went). Raises StoreError."""
    gone = await gateway.batcher.run_blocking(acls.remove_acls, gateway.log.store, [flt])
    if gone:
        await _enforce_now(gateway)
    return gone
