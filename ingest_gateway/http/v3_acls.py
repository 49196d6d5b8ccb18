"""REST Proxy v3 ACLs: Kafka's DescribeAcls, CreateAcls and DeleteAcls over the store's
ACLs (the ones every gateway's authorizer enforces), through ``server.acl_admin`` as
Kafka's requests go.

Routes (under ``/v3/clusters/{cluster_id}``)::

    GET    /acls?resource_type=&resource_name=&pattern_type=&principal=&host=
                &operation=&permission=        the ACLs the filter matches (KafkaAclList)
    POST   /acls          one ACL               201, Location: the ACL's own URL
    POST   /acls:batch    {"data": [ACL, ...]}  201, all or none (one new version)
    DELETE /acls?...      the filter: resource_type, pattern_type, operation and
                          permission required   200 {"data": [the ACLs deleted]}

An ACL is REST Proxy's ``AclData``: ``resource_type`` (TOPIC, GROUP, CLUSTER,
TRANSACTIONAL_ID), ``resource_name``, ``pattern_type`` (LITERAL, PREFIXED),
``principal`` (``User:<name>`` or ``User:*``), ``host`` (``*`` or an IP address),
``operation`` (ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE), ``permission`` (ALLOW, DENY);
values are read case-insensitively and answered in these spellings. A filter takes
``ANY`` for the four enumerations and ``MATCH`` as a pattern type (every ACL that
applies to the name: Kafka's ``AclBindingFilter``); a field left out matches any
value (GET). DELEGATION_TOKEN (Kafka's fifth resource type) is accepted in a filter
and matches nothing: sparklog keeps no delegation tokens.

Authorization is Kafka's: listing needs Describe on the cluster, creating and
deleting Alter on the cluster (``route_acls``). A create is written as one
exclusively created version of the store's ACL document, as ``sparklog acls --add``
writes it; this gateway's authorizer reads it before the answer, the others within
``authorizer.refresh.ms``.

A create body is declared once (``bodies.CreateAcl``, ``CreateAcls``: the check of its
shape and its OpenAPI schema). Refusals: a field missing or not a string, ``UNKNOWN``,
or a value Kafka's model does not allow (an operation the resource type does not
support, a Cluster not named ``kafka-cluster``, ``ANY`` in a create): 400
``invalid_acl`` with error_code 40002 (REST Proxy's code for a request Kafka refuses,
as its spec documents for a wrong cluster name), the message naming the field as REST
Proxy names it (``acl_refusal`` turns the declaration's refusal into that).
Differences from REST Proxy: principals are ``User:`` only (sparklog's principals
are users); ``acls:batch`` answers 201 as REST Proxy's spec documents (its server
answers 204); a field missing, not a string or not one of an enumeration's values is
40002 here, where REST Proxy's Jackson mapping answers 400 with error_code 400
(rest-utils' ``JsonMappingExceptionMapper``); values are read in any case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ingest_gateway.errors import BadRequest
from ingest_gateway.http.bodies import (AclDeleteQuery, AclQuery, CreateAcl, CreateAcls,
                                        convert, rest_name)
from ingest_gateway.http.body import read_json
from ingest_gateway.http.body_struct import Refusal
from ingest_gateway.http.params import query_param
from ingest_gateway.http.topics import check_cluster
from ingest_gateway.http.v3_links import cluster_url
from ingest_gateway.server import acl_admin
from ingest_gateway.server.acl_admin import (OPERATIONS, PATTERN_TYPES, PERMISSIONS,
                                             RESOURCE_TYPES, SUPPORTED_OPERATIONS, AclBinding,
                                             AclFilter, InvalidAcl)

#: the fields of an ACL, in REST Proxy's order and names
FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
          "permission")
#: sparklog's field names (``log_layout.acls``) -> REST Proxy's
_REST_FIELD = {"name": "resource_name"}
#: REST Proxy's resource type that sparklog has no resources of
NO_RESOURCES = "DELEGATION_TOKEN"
#: Kafka's AclPermissionType order (REST Proxy sorts by it): DENY before ALLOW
_PERMISSION_ORDER = ("Deny", "Allow")


def _key(text: str) -> str:
    return text.replace("_", "").replace("-", "").upper()


def _enum(field: str, raw: object, values: Iterable[str], extra: Iterable[str] = ()) -> str:
    """``raw`` (any case, ``_`` and ``-`` ignored) as one of ``values`` (sparklog's
    spelling) or of ``extra`` (REST Proxy's: ANY, MATCH); raises InvalidAcl naming the
    field and the values allowed, in REST Proxy's spelling."""
    allowed = {_key(v): v for v in (*values, *extra)}
    found = allowed.get(_key(raw)) if isinstance(raw, str) else None
    if found is None:
        names = ", ".join(rest_name(v) for v in allowed.values())
        unknown = isinstance(raw, str) and _key(raw) == "UNKNOWN"
        raise InvalidAcl(field, raw, "cannot be UNKNOWN" if unknown else
                         f"expected one of {names}")
    return found


def _rest_error(e: InvalidAcl) -> InvalidAcl:
    """``e`` naming the field as REST Proxy does."""
    return InvalidAcl(_REST_FIELD.get(e.field, e.field), e.value, e.reason)


def _short(value: Any) -> Any:
    """``value`` as a refusal quotes it: itself when short, else its repr cut short."""
    text = repr(value)
    return value if len(text) <= 80 else text[:77] + "..."


def acl_refusal(doc: Any) -> Refusal:
    """How a create body (``doc``) its declaration refuses is answered: a field of an ACL
    is REST Proxy's ``invalid_acl`` (40002) naming the field and its value, as the
    values Kafka's model refuses are; the body's own shape (not an object, ``data`` not a
    list of 1..MAX_ACL_BATCH objects) is BadRequest (40001), as before the declaration."""
    def refuse(path: str, what: str) -> Exception:
        m = _ACL_FIELD.match(path)
        if m is None:
            return BadRequest(f"field {path!r}: {what}" if path else
                              f"the body does not fit: {what}")
        if m.group(1) is None:
            return InvalidAcl(m.group(2), _short(doc.get(m.group(2))), what)
        acl = doc["data"][int(m.group(1))]  # which of the batch's ACLs, too
        return InvalidAcl(m.group(2), _short(acl.get(m.group(2))),
                          f"{what} (ACL data[{m.group(1)}])")
    return refuse


#: the path of an ACL's field, in a create (``principal``) or a batch (``data[3].principal``)
_ACL_FIELD = re.compile(r"^(?:data\[(\d+)\]\.)?(" + "|".join(FIELDS) + ")$")


def binding(acl: CreateAcl) -> AclBinding:
    """One ACL of a create request (REST Proxy's ``CreateAclRequestData``, its shape
    checked by its declaration); raises InvalidAcl naming the first field not allowed."""
    rtype = _enum("resource_type", acl.resource_type, RESOURCE_TYPES)
    op = _enum("operation", acl.operation, OPERATIONS)
    if op not in SUPPORTED_OPERATIONS[rtype]:
        raise InvalidAcl("operation", acl.operation, f"resource type {rest_name(rtype)} "
                         "supports " + ", ".join(rest_name(o) for o in OPERATIONS
                                                 if o in SUPPORTED_OPERATIONS[rtype]))
    try:
        return AclBinding.create(
            rtype, acl.resource_name, _enum("pattern_type", acl.pattern_type, PATTERN_TYPES),
            principal=acl.principal, host=acl.host, operation=op,
            permission=_enum("permission", acl.permission, PERMISSIONS))
    except InvalidAcl as e:
        raise _rest_error(e) from None


def _query_refusal(path: str, what: str) -> Exception:
    """A filter's refusal (its parameters are strings: only a required one can be
    missing): REST Proxy's ``invalid_acl``, naming the parameter."""
    if what == "is required":
        return InvalidAcl(path, None, "is required (ANY matches every value)")
    return InvalidAcl(path or "query", None, what)


def acl_filter(request: Request, *, required: bool) -> AclFilter | None:
    """The request's filter from its query, read as its declaration (``bodies.AclQuery``;
    ``required``: ``AclDeleteQuery``, resource_type, pattern_type, operation and permission
    given, as DeleteAcls needs); None: it can match nothing, a DELEGATION_TOKEN. An empty
    parameter is a parameter left out. Raises InvalidAcl, BadRequest (one given twice)."""
    given = {name: value for name in FIELDS if (value := query_param(request, name))}
    q = convert(given, AclDeleteQuery if required else AclQuery, _query_refusal)
    if q.resource_type and _key(q.resource_type) == _key(NO_RESOURCES):
        return None

    def enum(name: str, values: Iterable[str], extra: tuple[str, ...] = ("ANY",)) -> str | None:
        raw = getattr(q, name)
        value = _enum(name, raw, values, extra) if raw else "ANY"
        return None if value == "ANY" else value

    try:
        return AclFilter.create(
            enum("resource_type", RESOURCE_TYPES), q.resource_name,
            enum("pattern_type", PATTERN_TYPES, ("ANY", "MATCH")) or "ANY",
            principal=q.principal, host=q.host, operation=enum("operation", OPERATIONS),
            permission=enum("permission", PERMISSIONS))
    except InvalidAcl as e:
        raise _rest_error(e) from None


def _order(b: AclBinding) -> tuple:
    """REST Proxy's order: by each field, enumerations in Kafka's order."""
    return (RESOURCE_TYPES.index(b.resource_type), b.name, PATTERN_TYPES.index(b.pattern_type),
            b.principal, b.host, OPERATIONS.index(b.operation),
            _PERMISSION_ORDER.index(b.permission))


def acl_url(request: Request, cid: str, b: AclBinding) -> str:
    """The ACL's own URL: the list filtered to it, as REST Proxy builds it."""
    return f"{cluster_url(request, cid)}/acls?" + urlencode(
        {name: value for name, value in zip(FIELDS, _rest_values(b))}, safe="*")


def _rest_values(b: AclBinding) -> tuple[str, ...]:
    return (rest_name(b.resource_type), b.name, b.pattern_type, b.principal, b.host,
            rest_name(b.operation), rest_name(b.permission))


def acl_doc(request: Request, cid: str, b: AclBinding) -> dict[str, Any]:
    """REST Proxy's ``KafkaAcl``."""
    return {"kind": "KafkaAcl", "metadata": {"self": acl_url(request, cid, b)},
            "cluster_id": cid, **dict(zip(FIELDS, _rest_values(b)))}


def _gateway(request: Request) -> Any:
    return request.app.state.gateway


async def list_acls(request: Request) -> Response:
    cid = await check_cluster(request)
    f = acl_filter(request, required=False)
    found = [] if f is None else await acl_admin.describe(_gateway(request), f)
    return JSONResponse({"kind": "KafkaAclList",
                         "metadata": {"self": str(request.url), "next": None},
                         "data": [acl_doc(request, cid, b) for b in sorted(found, key=_order)]})


async def create_acl(request: Request) -> Response:
    cid = await check_cluster(request)
    doc = await read_json(request)
    b = binding(convert(doc, CreateAcl, acl_refusal(doc)))
    await acl_admin.create(_gateway(request), [b])
    return Response(status_code=201, headers={"Location": acl_url(request, cid, b)})


async def create_acls(request: Request) -> Response:
    await check_cluster(request)
    doc = await read_json(request)
    batch = convert(doc, CreateAcls, acl_refusal(doc))
    bindings = [binding(item) for item in batch.data]  # all valid before any is written
    await acl_admin.create(_gateway(request), bindings)
    return Response(status_code=201)


async def delete_acls(request: Request) -> Response:
    cid = await check_cluster(request)
    f = acl_filter(request, required=True)
    gone = [] if f is None else await acl_admin.delete(_gateway(request), f)
    return JSONResponse({"data": [acl_doc(request, cid, b) for b in sorted(gone, key=_order)]})


def routes() -> list[BaseRoute]:
    c = "/v3/clusters/{cluster_id}"
    return [
        Route(f"{c}/acls", list_acls, methods=["GET"]),
        Route(f"{c}/acls", create_acl, methods=["POST"]),
        Route(f"{c}/acls", delete_acls, methods=["DELETE"]),
        Route(f"{c}/acls:batch", create_acls, methods=["POST"]),
    ]
