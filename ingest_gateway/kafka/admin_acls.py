"""DescribeAcls, CreateAcls and DeleteAcls over the Kafka protocol: what ``kafka-acls.sh``
sends.

The ACLs are the store's, read and written by ``server.acl_admin`` (as REST v3's
routes do), the ones every gateway's authorizer
enforces and ``sparklog acls`` and REST v3's ``/acls`` routes manage: a create or a delete
is one exclusively created version of the ACL document (all of a request's creations,
or all of one filter's deletions, at once), after which this gateway's authorizer reads
it before answering (the others within ``authorizer.refresh.ms``), as the REST routes do.

Kafka's codes on the wire (``AclOperation``, ``AclPermissionType``, ``ResourceType``,
``PatternType``) map to ``log_layout.acls``' names; a filter's ANY (and MATCH for the
pattern type) is Kafka's ``AclBindingFilter``. Delegation-token and user resources are
accepted in a filter and match nothing (sparklog keeps neither); a creation naming one,
UNKNOWN or ANY, or a value Kafka's model does not allow (an operation the resource type
does not support, a cluster not named ``kafka-cluster``, a principal other than
``User:``) answers ``INVALID_REQUEST`` with why, as Kafka's controller does; a filter with
UNKNOWN answers ``INVALID_REQUEST``.

ACLs (Kafka's): DescribeAcls needs Describe on the cluster, the others Alter on the
cluster; else ``CLUSTER_AUTHORIZATION_FAILED`` (the answer's, or each creation's and
filter's).
"""

from __future__ import annotations

import logging
from typing import Any

from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.server import acl_admin
from ingest_gateway.server.acl_admin import AclBinding, AclFilter, InvalidAcl

logger = logging.getLogger("sparklog.gateway.kafka")

API_DESCRIBE_ACLS, API_CREATE_ACLS, API_DELETE_ACLS = 29, 30, 31
#: Kafka 4.0's version floors up to the newest kio reads
OFFERED: dict[int, tuple[int, int]] = {
    API_DESCRIBE_ACLS: (1, 3),
    API_CREATE_ACLS: (1, 3),
    API_DELETE_ACLS: (1, 3),
}
ANY, MATCH = 1, 2
#: Kafka's codes -> log_layout.acls' names
RESOURCE_TYPES = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId"}
#: DELEGATION_TOKEN, USER: valid in Kafka, no such resources here
NO_RESOURCES = (6, 7)
PATTERN_TYPES = {3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter",
              8: "Describe", 9: "ClusterAction", 10: "DescribeConfigs", 11: "AlterConfigs",
              12: "IdempotentWrite"}
PERMISSIONS = {2: "Deny", 3: "Allow"}
_BACK = {"rt": {v: k for k, v in RESOURCE_TYPES.items()},
         "pt": {v: k for k, v in PATTERN_TYPES.items()},
         "op": {v: k for k, v in OPERATIONS.items()},
         "perm": {v: k for k, v in PERMISSIONS.items()}}


class _Refused(ValueError):
    """A creation or filter Kafka refuses (INVALID_REQUEST, the message says why)."""


def _one(table: dict[int, str], code: int, what: str, any_ok: bool) -> str | None:
    """The name of ``code`` in ``table``; None for ANY (when ``any_ok``)."""
    if any_ok and code == ANY:
        return None
    if code in table:
        return table[code]
    raise _Refused(f"{what} {code} is not allowed here")


def _filter(f: Any, pattern_field: str) -> AclFilter | None:
    """The AclFilter of a request's filter; None when it can match nothing here (a
    delegation-token or user resource). Raises _Refused, InvalidAcl."""
    rtype = f.resource_type_filter
    if rtype in NO_RESOURCES:
        return None
    pattern = getattr(f, pattern_field)
    if pattern not in (ANY, MATCH, *PATTERN_TYPES):
        raise _Refused(f"pattern type {pattern} is not allowed in a filter")
    return AclFilter.create(
        _one(RESOURCE_TYPES, rtype, "resource type", True), f.resource_name_filter,
        {ANY: "ANY", MATCH: "MATCH"}.get(pattern) or PATTERN_TYPES[pattern],
        principal=f.principal_filter, host=f.host_filter,
        operation=_one(OPERATIONS, f.operation, "operation", True),
        permission=_one(PERMISSIONS, f.permission_type, "permission type", True))


def _wire(b: AclBinding) -> dict[str, Any]:
    return {"resource_type": _BACK["rt"][b.resource_type], "resource_name": b.name,
            "pattern_type": _BACK["pt"][b.pattern_type], "principal": b.principal,
            "host": b.host, "operation": _BACK["op"][b.operation],
            "permission_type": _BACK["perm"][b.permission]}


async def describe_acls(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_DESCRIBE_ACLS, head.api_version)
    code, message, found = sec.refused(ctx, "Describe", "Cluster"), None, []
    if code:
        message = "Cluster authorization failed."
    else:
        try:
            f = _filter(req, "pattern_type_filter")
            found = [] if f is None else await acl_admin.describe(ctx.gateway, f)
        except (_Refused, InvalidAcl) as e:
            code, message = codes.INVALID_REQUEST, str(e)
    by_resource: dict[tuple, list[Any]] = {}
    for b in found:
        w = _wire(b)
        key = (w["resource_type"], w["resource_name"], w["pattern_type"])
        by_resource.setdefault(key, []).append(make(
            mod.AclDescription, principal=w["principal"], host=w["host"],
            operation=w["operation"], permission_type=w["permission_type"]))
    resources = tuple(make(mod.DescribeAclsResource, resource_type=rt, resource_name=name,
                           pattern_type=pt, acls=tuple(entries))
                      for (rt, name, pt), entries in by_resource.items())
    return make(mod.DescribeAclsResponse, throttle_time=ZERO, error_code=error(code),
                error_message=message, resources=resources)


def _binding(c: Any) -> AclBinding:
    """The binding of one creation; raises _Refused, InvalidAcl."""
    if c.resource_type in NO_RESOURCES:
        raise _Refused(f"resource type {c.resource_type}: sparklog keeps no delegation "
                       "tokens or user resources")
    return AclBinding.create(
        _one(RESOURCE_TYPES, c.resource_type, "resource type", False), c.resource_name,
        _one(PATTERN_TYPES, c.resource_pattern_type, "pattern type", False),
        principal=c.principal, host=c.host,
        operation=_one(OPERATIONS, c.operation, "operation", False),
        permission=_one(PERMISSIONS, c.permission_type, "permission type", False))


async def create_acls(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_CREATE_ACLS, head.api_version)
    denied = sec.refused(ctx, "Alter", "Cluster")
    results: list[tuple[int, str | None]] = []
    valid = []
    for c in req.creations:
        if denied:
            results.append((denied, "Cluster authorization failed."))
            continue
        try:
            valid.append(_binding(c))
            results.append((codes.NONE, None))
        except (_Refused, InvalidAcl) as e:
            results.append((codes.INVALID_REQUEST, str(e)))
    if valid:
        try:
            await acl_admin.create(ctx.gateway, valid)
        except Exception as e:  # noqa: BLE001 - every valid creation's error code
            code = codes.code_of(e)
            logger.warning("CreateAcls failed: %s", e)
            results = [(code, str(e)) if c == codes.NONE else (c, m) for c, m in results]
    return make(mod.CreateAclsResponse, throttle_time=ZERO, results=tuple(
        make(mod.AclCreationResult, error_code=error(c), error_message=m) for c, m in results))


async def delete_acls(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_DELETE_ACLS, head.api_version)
    denied = sec.refused(ctx, "Alter", "Cluster")
    out = []
    for f in req.filters:
        code, message, gone = denied, "Cluster authorization failed." if denied else None, []
        if not denied:
            try:
                flt = _filter(f, "pattern_type_filter")
                gone = [] if flt is None else await acl_admin.delete(ctx.gateway, flt)
            except (_Refused, InvalidAcl) as e:
                code, message = codes.INVALID_REQUEST, str(e)
            except Exception as e:  # noqa: BLE001 - this filter's error code
                code, message = codes.code_of(e), str(e)
        out.append(make(mod.DeleteAclsFilterResult, error_code=error(code),
                        error_message=message, matching_acls=tuple(
                            make(mod.DeleteAclsMatchingAcl, error_code=error(codes.NONE),
                                 error_message=None, **_wire(b)) for b in gone)))
    return make(mod.DeleteAclsResponse, throttle_time=ZERO, filter_results=tuple(out))


HANDLERS = {API_DESCRIBE_ACLS: describe_acls, API_CREATE_ACLS: create_acls,
            API_DELETE_ACLS: delete_acls}
