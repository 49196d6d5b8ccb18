"""The OpenAPI path items of the ACL routes (``v3_acls``), merged into ``/openapi.json``
by ``openapi.document``. Shapes are REST Proxy v3's (``AclData``, ``KafkaAclList``,
``CreateAclRequestData``): the create bodies and an ACL's fields are the declarations in
``bodies`` (``CreateAcl``, ``CreateAcls``), and so are the filters (``AclQuery``,
``AclDeleteQuery``: their query parameters)."""

from __future__ import annotations

from typing import Any

from ingest_gateway.http import bodies
from ingest_gateway.http.openapi_consumers import errors, resp
from ingest_gateway.http.openapi_v3 import CLUSTER, LIST_META, S


def _fields() -> dict[str, Any]:
    """An ACL's fields as the create body declares them (``bodies.CreateAcl``)."""
    return bodies.components()["CreateAcl"]["properties"]


def _acl_doc() -> dict[str, Any]:
    """REST Proxy's ``KafkaAcl``: the declared fields, with kind, metadata, cluster_id."""
    return {"type": "object", "properties": {
        "kind": {**S, "example": "KafkaAcl"},
        "metadata": {"type": "object", "properties": {"self": S}}, "cluster_id": S,
        **_fields()}}


def _filter(required: bool) -> list[dict[str, Any]]:
    """The query of a search (GET) or a delete (``required``: the four enumerations), as
    declared (``bodies.AclQuery``, ``AclDeleteQuery``)."""
    return bodies.query_parameters(bodies.AclDeleteQuery if required else bodies.AclQuery)


def _body(kind: type[bodies.Body]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": bodies.ref(kind)}}}


def acl_paths() -> dict[str, Any]:
    """The ACL routes' path items (Describe on the cluster to list, Alter to change)."""
    a = "/v3/clusters/{cluster_id}/acls"
    created = {"201": resp("created (and enforced by this gateway before the answer)")}
    return {
        a: {"parameters": [CLUSTER],
            "get": {"summary": "ACLs matching the filter (Kafka's DescribeAcls)",
                    "parameters": _filter(False),
                    "responses": {"200": resp("the ACLs", {
                        "type": "object", "properties": {
                            "kind": {**S, "example": "KafkaAclList"}, "metadata": LIST_META,
                            "data": {"type": "array", "items": _acl_doc()}}}),
                        **errors(400, 404)}},
            "post": {"summary": "create an ACL (Kafka's CreateAcls)",
                     "requestBody": _body(bodies.CreateAcl),
                     "responses": {**created, **errors(400, 404, 413)}},
            "delete": {"summary": "delete the ACLs matching the filter (Kafka's DeleteAcls)",
                       "parameters": _filter(True),
                       "responses": {"200": resp("the ACLs deleted", {
                           "type": "object", "properties": {
                               "data": {"type": "array", "items": _acl_doc()}}}),
                           **errors(400, 404)}}},
        f"{a}:batch": {"parameters": [CLUSTER], "post": {
            "summary": "create ACLs, all or none", "requestBody": _body(bodies.CreateAcls),
            "responses": {**created, **errors(400, 404, 413)}}},
    }
