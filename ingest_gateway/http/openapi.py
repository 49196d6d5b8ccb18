"""The OpenAPI 3 document of the gateway, served at ``/openapi.json``.

It describes the real request and response shapes (schemathesis fuzzes a live
gateway against it in the tests, chaining calls by the document's links), so a
change of a handler's shape belongs here too. The request bodies declared in
``bodies`` (msgspec Structs, which also check them) give their own schemas. The consumer routes' path items
are in ``openapi_consumers``, the links in ``openapi_links``.
"""

from __future__ import annotations

import copy
from typing import Any

from ingest_gateway.http import bodies
from ingest_gateway.http.openapi_acls import acl_paths
from ingest_gateway.http.openapi_consumers import consumer_paths
from ingest_gateway.http.openapi_links import add_links
from ingest_gateway.http.openapi_txn import txn_paths
from ingest_gateway.http.openapi_v3 import v3_paths
from ingest_gateway.server import codec

_ERROR = {"$ref": "#/components/schemas/Error"}


def _resp(description: str, schema: dict[str, Any] | None = None,
          media: str = "application/json") -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {media: {"schema": schema}}
    return out


def _errors(*codes: int) -> dict[str, Any]:
    names = {400: "malformed request", 404: "unknown topic, partition or cluster",
             409: "idempotence conflict", 413: "record or request too large",
             415: "unsupported content type", 422: "invalid records", 429: "buffer full",
             503: "not leader (the body's leader names it), not coordinator (coordinator), "
                  "flush failed or shutting down: retriable"}
    return {str(c): _resp(names[c], _ERROR) for c in codes}


def _param(name: str, where: str, schema: dict[str, Any], description: str,
           required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path",
            "schema": schema, "description": description}


TOPIC = {**_param("topic", "path", {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"},
                  "topic name"), "example": "fuzz"}
CLUSTER = _param("cluster_id", "path", {"type": "string"}, "the cluster id (GET /v3/clusters)")
PRODUCE_PARAMS = [
    _param("acks", "query", {"type": "string", "enum": ["0", "1", "all", "-1"]},
           "0: no offsets; 1: once batched; all (default): after the manifest commit"),
    _param("producer_id", "query", {"type": "integer", "minimum": 0,
                                    "maximum": 9223372036854775807},
           "idempotent producer id (with sequence)"),
    _param("producer_epoch", "query", {"type": "integer", "minimum": 0, "maximum": 32767},
           "idempotent producer epoch (default 0)"),
    _param("sequence", "query", {"type": "string", "pattern": r"^\d+(:\d+)?(,\d+:\d+)*$"},
           "first sequence of the request's records: N, or P:N,P:N across partitions"),
    _param("transactional_id", "query", {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"},
           "write into this id's ongoing transaction (with producer_id, producer_epoch, "
           "sequence; each partition added first: POST /v3/transactions/{tid}/partitions)"),
]


_AVRO_EXAMPLE = '{"type":"record","name":"R","fields":[{"name":"n","type":"int"}]}'
_JSON_SCHEMA_EXAMPLE = '{"type":"object","properties":{"n":{"type":"integer"}}}'
_PROTOBUF_EXAMPLE = 'syntax = "proto3"; message R { int32 n = 1; }'


def _schema_body(schema: str, value: Any) -> dict[str, Any]:
    """A v2 body in an embedded format with a schema, with an example of it."""
    return {"schema": bodies.ref(bodies.SchemaProduceRecords),
            "example": {"value_schema": schema, "records": [{"value": value}]}}


#: how a client may authenticate (``authentication.method``); mutual TLS needs no header
SECURITY_SCHEMES = {
    "basic": {"type": "http", "scheme": "basic",
              "description": "HTTP Basic against the gateway's password file "
                             "(authentication.method=basic)"},
    "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
               "description": "a JWT signed by the configured issuer's key "
                              "(authentication.method=bearer)"},
}


def document() -> dict[str, Any]:
    """The whole OpenAPI 3 document: every route, its links (``openapi_links``), the schemas."""
    paths = {**_topic_paths(), **_admin_paths(), **v3_paths(), **_operations_paths(),
             **consumer_paths(), **txn_paths(), **acl_paths()}
    add_links(paths)
    doc = {
        "openapi": "3.0.3",
        "info": {"title": "sparklog ingest gateway", "version": "1",
                 "description": "Kafka REST Proxy v2 and v3 (produce, consumers, topic "
                                "and group admin), an Arrow fast path, consumer groups."},
        "paths": paths,
        "components": {"schemas": {**bodies.components(), **_schemas()}, "securitySchemes": SECURITY_SCHEMES},
        # each is optional: a gateway without authentication.method takes none (README,
        # "Security"); with one, a request without credentials is answered 401 (40101),
        # an operation its ACLs do not allow 403 (40301)
        "security": [{}, {"basic": []}, {"bearer": []}],
    }
    # the path items share constant pieces: a caller may change its copy freely
    return copy.deepcopy(doc)


def _topic_paths() -> dict[str, Any]:
    """v2 topic reads and produce."""
    produce_body = {"required": True, "content": {
        codec.JSON_V2: {"schema": bodies.ref(bodies.ProduceRecords)},
        codec.PLAIN_JSON: {"schema": bodies.ref(bodies.ProduceRecords)},
        codec.BINARY_V2: {"schema": bodies.ref(bodies.BinaryProduceRecords)},
        codec.ARROW_STREAM: {"schema": {"type": "string", "format": "binary",
                                        "description": "Arrow IPC stream: value, key, partition, "
                                                       "timestamp, headers columns"}},
        # REST Proxy's embedded formats with a schema (server.schema_codec)
        codec.AVRO_V2: _schema_body(_AVRO_EXAMPLE, {"n": 1}),
        codec.JSONSCHEMA_V2: _schema_body(_JSON_SCHEMA_EXAMPLE, {"n": 1}),
        codec.PROTOBUF_V2: _schema_body(_PROTOBUF_EXAMPLE, {"n": 1}),
    }}
    produce_ok = {"description": "offsets per record (JSON) or per partition (Arrow)",
                  "content": {
                      codec.V2_RESPONSE_TYPE: {"schema": {"$ref": "#/components/schemas/ProduceResponse"}},
                      "application/json": {"schema": {"$ref": "#/components/schemas/ArrowProduceResponse"}},
                  }}
    produce_errors = _errors(400, 404, 409, 413, 415, 422, 429, 503)
    return {
        "/topics": {"get": {"summary": "topic names", "responses": {
            "200": _resp("names", {"type": "array", "items": {"type": "string"}},
                         codec.V2_RESPONSE_TYPE)}}},
        "/topics/{topic}": {
            "parameters": [TOPIC],
            "get": {"summary": "describe a topic", "responses": {
                "200": _resp("the topic", {"$ref": "#/components/schemas/TopicV2"},
                             codec.V2_RESPONSE_TYPE), **_errors(400, 404)}},
            "post": {"summary": "produce records", "parameters": PRODUCE_PARAMS,
                     "requestBody": produce_body,
                     "responses": {"200": produce_ok, **produce_errors}}},
        "/topics/{topic}/partitions": {
            "parameters": [TOPIC],
            "get": {"summary": "partitions of a topic", "responses": {
                "200": _resp("partitions", {"type": "array", "items": {
                    "$ref": "#/components/schemas/Partition"}}, codec.V2_RESPONSE_TYPE),
                **_errors(400, 404)}}},
        "/brokers": {"get": {"summary": "broker ids (gateway slots; 0 standalone)", "responses": {
            "200": _resp("ids", {"type": "object", "required": ["brokers"], "properties": {
                "brokers": {"type": "array", "items": {"type": "integer"}}}},
                codec.V2_RESPONSE_TYPE)}}},
        "/topics/{topic}/partitions/{partition}": {
            "parameters": [TOPIC, {**_param("partition", "path",
                                            {"type": "integer", "minimum": 0},
                                            "partition number"), "example": 0}],
            "get": {"summary": "one partition: leader broker id, replicas, offsets", "responses": {
                "200": _resp("the partition", {"$ref": "#/components/schemas/Partition"},
                             codec.V2_RESPONSE_TYPE), **_errors(400, 404)}},
            "post": {"summary": "produce records to one partition", "parameters": PRODUCE_PARAMS,
                     "requestBody": produce_body,
                     "responses": {"200": produce_ok, **produce_errors}}},
    }


def _admin_paths() -> dict[str, Any]:
    """Producer ids (the v3 API is ``openapi_v3``)."""
    return {
        "/v3/producers": {"post": {"summary": "a fresh idempotent producer id", "responses": {
            "200": _resp("id and epoch", {"type": "object", "required": ["producer_id"],
                                          "properties": {"producer_id": {"type": "integer"},
                                                         "producer_epoch": {"type": "integer"}}})}}},
    }


def _operations_paths() -> dict[str, Any]:
    """Liveness, readiness, metrics."""
    return {
        "/healthz": {"get": {"summary": "liveness", "parameters": [{
            "name": "assignment", "in": "query", "required": False, "schema": {"type": "string"},
            "description": "the broker application's driver names the newest assignment: a "
                           "gateway slot that has not seen it reads it now"}],
            "responses": {"200": _resp("alive", {"type": "object"})}}},
        "/readyz": {"get": {"summary": "readiness", "responses": {
            "200": _resp("ready", {"type": "object"}), **_errors(503)}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
            "200": _resp("text exposition", {"type": "string"}, "text/plain")}}},
        "/metadata": {"get": {
            "summary": "partition leaders and group coordinators (Kafka's Metadata and "
                       "FindCoordinator); a null url means the gateway asked",
            "parameters": [
                _param("topics", "query", {"type": "string"}, "comma list of topics"),
                _param("groups", "query", {"type": "string"}, "comma list of consumer groups")],
            "responses": {"200": _resp("who leads what", {"$ref": "#/components/schemas/Metadata"}),
                          **_errors(400)}}},
    }


def _schemas() -> dict[str, Any]:
    nullable_int = {"type": "integer", "nullable": True}
    nullable_str = {"type": "string", "nullable": True}
    endpoint = {"type": "object", "nullable": True,
                "properties": {"slot": nullable_int, "url": nullable_str}}
    return {
        "Error": {"type": "object", "required": ["error_code", "message", "error"], "properties": {
            "error_code": {"type": "integer"}, "message": {"type": "string"},
            "error": {"type": "string"},
            "leader": {**endpoint, "description": "not_leader: the partition's leader"},
            "coordinator": {**endpoint, "description": "not_coordinator: the group's"}}},
        "Metadata": {"type": "object", "required": ["cluster_id", "gateways", "topics",
                                                    "groups"], "properties": {
            "cluster_id": {"type": "string"}, "generation": nullable_int,
            "driver_epoch": nullable_int,
            "gateways": {"type": "array", "items": {"type": "object", "properties": {
                "slot": nullable_int, "url": nullable_str, "live": {"type": "boolean"}}}},
            "topics": {"type": "array", "items": {"type": "object", "properties": {
                "topic": {"type": "string"}, "error": {"type": "string"},
                "partitions": {"type": "array", "items": {"type": "object", "properties": {
                    "partition": {"type": "integer"}, "leader": endpoint}}}}}},
            "groups": {"type": "array", "items": {"type": "object", "properties": {
                "group": {"type": "string"}, "coordinator": endpoint}}}}},
        "ProduceResponse": {"type": "object", "required": ["offsets"], "properties": {
            "key_schema_id": nullable_int, "value_schema_id": nullable_int,
            "offsets": {"type": "array", "items": {"type": "object", "properties": {
                "partition": {"type": "integer"}, "offset": nullable_int,
                "error_code": nullable_int, "error": nullable_str}}}}},
        "ArrowProduceResponse": {"type": "object", "required": ["offsets"], "properties": {
            "offsets": {"type": "array", "items": {"type": "object", "properties": {
                "partition": {"type": "integer"}, "base_offset": nullable_int,
                "count": {"type": "integer"}, "error_code": nullable_int,
                "error": nullable_str}}}}},
        "Partition": {"type": "object", "required": ["partition", "leader", "replicas"],
                      "properties": {
            "partition": {"type": "integer"},
            "leader": {"type": "integer", "description": "broker id (-1: none yet)"},
            "replicas": {"type": "array", "items": {"type": "object", "properties": {
                "broker": {"type": "integer"}, "leader": {"type": "boolean"},
                "in_sync": {"type": "boolean"}}}},
            "leader_epoch": {"type": "integer"}, "log_start_offset": {"type": "integer"},
            "high_watermark": {"type": "integer"}, "bytes": {"type": "integer"},
            "segments": {"type": "integer"}}},
        "TopicV2": {"type": "object", "required": ["name", "partitions"], "properties": {
            "name": {"type": "string"}, "configs": {"type": "object"},
            "partitions": {"type": "array", "items": {"$ref": "#/components/schemas/Partition"}}}},
    }
