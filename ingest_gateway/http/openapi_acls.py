"""The OpenAPI path items of the ACL routes (``v3_acls``), merged into ``/openapi.json``
by ``openapi.document``. Shapes are REST Proxy v3's (``AclData``, ``KafkaAclList``,
``CreateAclRequestData``); the enumerations list the values sparklog takes."""

from __future__ import annotations

from typing import Any

from ingest_gateway.http.openapi_consumers import errors, p, resp
from ingest_gateway.http.openapi_v3 import CLUSTER, LIST_META, S

RESOURCE_TYPE = {"type": "string", "enum": ["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"]}
PATTERN_TYPE = {"type": "string", "enum": ["LITERAL", "PREFIXED"]}
OPERATION = {"type": "string", "enum": [
    "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"]}
PERMISSION = {"type": "string", "enum": ["ALLOW", "DENY"]}
FIELDS = {"resource_type": RESOURCE_TYPE, "resource_name": {**S, "example": "orders"},
          "pattern_type": PATTERN_TYPE, "principal": {**S, "example": "User:alice"},
          "host": {**S, "example": "*"}, "operation": OPERATION, "permission": PERMISSION}
ACL = {"type": "object", "required": list(FIELDS), "properties": FIELDS}
ACL_DOC = {"type": "object", "properties": {
    "kind": {**S, "example": "KafkaAcl"},
    "metadata": {"type": "object", "properties": {"self": S}}, "cluster_id": S, **FIELDS}}


def _filter(required: bool) -> list[dict[str, Any]]:
    """The query of a search (GET) or a delete (``required``: the four enumerations)."""
    def enum(schema: dict[str, Any], *extra: str) -> dict[str, Any]:
        return {"type": "string", "enum": [*extra, *schema["enum"]]}

    return [
        p("resource_type", "query", enum(RESOURCE_TYPE, "ANY", "DELEGATION_TOKEN"),
          "ANY: every type (DELEGATION_TOKEN: none kept)", required),
        p("resource_name", "query", S, "the name; with MATCH, every ACL applying to it"),
        p("pattern_type", "query", enum(PATTERN_TYPE, "ANY", "MATCH"), "how names match",
          required),
        p("principal", "query", S, "User:<name> or User:*"),
        p("host", "query", S, "* or an IP address"),
        p("operation", "query", enum(OPERATION, "ANY"), "ANY: every operation", required),
        p("permission", "query", enum(PERMISSION, "ANY"), "ANY: both", required),
    ]


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


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
                            "data": {"type": "array", "items": ACL_DOC}}}),
                        **errors(400, 404)}},
            "post": {"summary": "create an ACL (Kafka's CreateAcls)", "requestBody": _body(ACL),
                     "responses": {**created, **errors(400, 404, 413)}},
            "delete": {"summary": "delete the ACLs matching the filter (Kafka's DeleteAcls)",
                       "parameters": _filter(True),
                       "responses": {"200": resp("the ACLs deleted", {
                           "type": "object", "properties": {
                               "data": {"type": "array", "items": ACL_DOC}}}),
                           **errors(400, 404)}}},
        f"{a}:batch": {"parameters": [CLUSTER], "post": {
            "summary": "create ACLs, all or none", "requestBody": _body({
                "type": "object", "required": ["data"], "properties": {
                    "data": {"type": "array", "minItems": 1, "maxItems": 10000,
                             "items": ACL}}}),
            "responses": {**created, **errors(400, 404, 413)}}},
    }
