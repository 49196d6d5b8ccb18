"""The OpenAPI path items of the consumer routes: fetch, REST consumer instances, groups.

Merged into ``/openapi.json`` by ``openapi.document``; they describe the real
shapes (schemathesis fuzzes a live gateway against them).
"""

from __future__ import annotations

from typing import Any

from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import ref
from ingest_gateway.http.requests import (ARROW, BINARY_V2, JSON_V2, MAX_COUNT, MAX_WAIT_MS,
                                          V2_RESPONSE)

# Shared pieces of the path items below (module constants: read, never changed).
err = {"$ref": "#/components/schemas/Error"}


def resp(desc: str, schema: Any = None, media: str = "application/json") -> dict[str, Any]:
    out: dict[str, Any] = {"description": desc}
    if schema is not None:
        out["content"] = {media: {"schema": schema}}
    return out


def errors(*codes: int) -> dict[str, Any]:
    return {str(c): resp("error", err) for c in codes}


def p(name: str, where: str, schema: dict[str, Any], desc: str, required: bool = False):
    return {"name": name, "in": where, "required": required or where == "path",
            "schema": schema, "description": desc}


name = {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"}
topic, group = p("topic", "path", name, "topic name"), p("group", "path", name, "group id")
partition = p("partition", "path", {"type": "integer", "minimum": 0}, "partition")
instance = p("instance", "path", name, "consumer instance id")
member = p("member", "path", {"type": "string"}, "member id (from join)")
i64 = {"type": "integer", "minimum": 0}
tp = {"type": "object", "required": ["topic", "partition"],
      "properties": {"topic": {"type": "string"}, "partition": {"type": "integer"}}}
ISOLATION = p("isolation_level", "query", {"type": "string", "enum": [
    "read_uncommitted", "read_committed"]}, "read_uncommitted (default): to the high "
    "watermark; read_committed: to the last stable offset, aborted transactions skipped")
tpo = {"type": "object", "required": ["topic", "partition", "offset"],
       "properties": {"topic": {"type": "string"}, "partition": {"type": "integer"},
                      "offset": {"type": "integer"}}}
record = {"type": "object", "properties": {
    "topic": {"type": "string"}, "key": {}, "value": {}, "partition": {"type": "integer"},
    "offset": {"type": "integer"}, "timestamp": {"type": "integer"},
    "headers": {"type": "array", "items": {"type": "object"}}}}
records = {"200": {"description": "records", "content": {
    V2_RESPONSE: {"schema": {"type": "array", "items": record}},
    ARROW: {"schema": {"type": "string", "format": "binary"}}}}}
#: a REST instance's records: the media type of its format (Accept of another: 406 40601)
instance_records = {"200": {"description": "records, in the instance's format", "content": {
    BINARY_V2: {"schema": {"type": "array", "items": record}},
    JSON_V2: {"schema": {"type": "array", "items": record}},
    ARROW: {"schema": {"type": "string", "format": "binary"}}}},
    "406": resp("Accept names another embedded format than the instance's "
                "(consumer_format_mismatch, 40601)", err)}
tps = {"type": "object", "required": ["partitions"],
       "properties": {"partitions": {"type": "array", "items": tp}}}
member_state = {"type": "object", "required": ["member_id", "generation", "assignment"],
                "properties": {"group": {"type": "string"}, "member_id": {"type": "string"},
                               "generation": {"type": "integer"},
                               "rebalance": {"type": "boolean"},
                               "assigned": {"type": "boolean"},
                               "strategy": {"type": "string", "nullable": True},
                               "heartbeat_interval_ms": {"type": "integer"},
                               "assignment": {"type": "array", "items": tp}}}
offsets = {"type": "object", "properties": {"offsets": {"type": "array", "items": tpo}}}
not_json = resp("the first record to hand out is not strict JSON (record_not_json, "
                "naming topic, partition, offset): read it as binary or seek past it", err)


def json_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


base = "/consumers/{group}/instances/{instance}"


def fetch_paths() -> dict[str, Any]:
    """The fetch routes (``fetch_routes``)."""
    return {
        "/topics/{topic}/partitions/{partition}/messages": {"get": {
            "summary": "fetch records from an offset; long-poll with wait_ms/min_bytes",
            "parameters": [topic, partition,
                           p("offset", "query", i64, "first offset", required=True),
                           p("count", "query", {"type": "integer", "minimum": 1,
                                                "maximum": MAX_COUNT}, "max records (1)"),
                           p("max_bytes", "query", {"type": "integer", "minimum": 1},
                             "max bytes (at least one record)"),
                           p("wait_ms", "query", {"type": "integer", "minimum": 0,
                                                  "maximum": MAX_WAIT_MS}, "long-poll wait"),
                           p("min_bytes", "query", i64, "answer once this much is there"),
                           ISOLATION],
            "responses": {**records, **errors(400, 404, 415),
                          "416": resp("offset out of range", err), "422": not_json}}},
        "/topics/{topic}/partitions/{partition}/offsets": {"get": {
            "summary": "log start offset and high watermark",
            "parameters": [topic, partition, ISOLATION],
            "responses": {"200": resp("offsets", {"type": "object", "properties": {
                "beginning_offset": {"type": "integer"}, "end_offset": {"type": "integer"}}},
                V2_RESPONSE), **errors(400, 404)}}},
        "/fetch": {"post": {
            "summary": "many partitions in one long-poll; an Arrow stream with batch metadata",
            "requestBody": json_body(ref(bodies.Fetch)),
            "responses": {"200": resp("Arrow IPC stream", {"type": "string", "format": "binary"},
                                      ARROW), **errors(400, 404)}}},
        "/fetch/waiting": {"get": {"summary": "fetches parked waiting for a commit",
                                   "responses": {"200": resp("count", {"type": "object"})}}},
    }


def instance_paths() -> dict[str, Any]:
    """The REST Proxy consumer instance routes (``rest_consumers``)."""
    return {
        "/consumers/{group}": {"post": {
            "summary": "create a consumer instance (REST Proxy v2)", "parameters": [group],
            "requestBody": json_body(ref(bodies.CreateInstance), required=False),
            "responses": {"200": resp("instance", {"type": "object", "properties": {
                "instance_id": {"type": "string"}, "base_uri": {"type": "string"}}},
                V2_RESPONSE), **errors(400, 409)}}},
        "/consumers/{group}/": {"post": {
            "summary": "create a consumer instance (the same, as REST Proxy's reference "
                       "writes it)", "parameters": [group],
            "requestBody": json_body(ref(bodies.CreateInstance), required=False),
            "responses": {"200": resp("instance", {"type": "object"}, V2_RESPONSE),
                          **errors(400, 409)}}},
        f"{base}/subscription": {
            "parameters": [group, instance],
            "post": {"summary": "subscribe to topics or to a topic_pattern (a regular "
                                "expression matched against whole names); joins the group",
                     "requestBody": json_body(ref(bodies.Subscribe)),
                     "responses": {"204": resp("subscribed"), **errors(400, 404, 409)}},
            "get": {"summary": "subscribed topics",
                    "responses": {"200": resp("topics", {"type": "object"}, V2_RESPONSE),
                                  **errors(400, 404)}},
            "delete": {"summary": "unsubscribe (leaves the group)",
                       "responses": {"204": resp("unsubscribed"), **errors(400, 404)}}},
        f"{base}/assignments": {
            "parameters": [group, instance],
            "get": {"summary": "partitions owned now",
                    "responses": {"200": resp("partitions", tps, V2_RESPONSE),
                                  **errors(400, 404, 409)}},
            "post": {"summary": "assign partitions by hand (no group membership)",
                     "requestBody": json_body(ref(bodies.Partitions)),
                     "responses": {"204": resp("assigned"), **errors(400, 404, 409)}}},
        **instance_read_paths(),
    }


def instance_read_paths() -> dict[str, Any]:
    """A REST consumer instance's records, seeks (``rest_positions``), commits, heartbeat
    and deletion."""
    return {
        f"{base}/positions/beginning": {"post": {
            "summary": "seek to the log start of assigned partitions",
            "parameters": [group, instance], "requestBody": json_body(ref(bodies.Partitions)),
            "responses": {"204": resp("positions set"), **errors(400, 404, 409)}}},
        f"{base}/positions/end": {"post": {
            "summary": "seek to the high watermark of assigned partitions",
            "parameters": [group, instance], "requestBody": json_body(ref(bodies.Partitions)),
            "responses": {"204": resp("positions set"), **errors(400, 404, 409)}}},
        f"{base}/records": {"get": {
            "summary": "records of the assigned partitions (long-poll up to timeout ms)",
            "parameters": [group, instance,
                           p("timeout", "query", {"type": "integer", "minimum": 0,
                                                  "maximum": MAX_WAIT_MS}, "wait (ms)"),
                           p("max_bytes", "query", {"type": "integer", "minimum": 1}, "bytes"),
                           p("max_records", "query", {"type": "integer", "minimum": 1,
                                                      "maximum": MAX_COUNT}, "records")],
            "responses": {**instance_records, **errors(400, 404, 409, 415),
                          "422": not_json}}},
        f"{base}/positions": {"post": {
            "summary": "seek: the next offsets to fetch of assigned partitions",
            "parameters": [group, instance],
            "requestBody": json_body(ref(bodies.Offsets)),
            "responses": {"204": resp("positions set"), **errors(400, 404, 409)}}},
        f"{base}/offsets": {
            "parameters": [group, instance],
            "post": {"summary": "commit the given offsets, or everything consumed",
                     "requestBody": json_body(ref(bodies.InstanceCommit), required=False),
                     "responses": {"204": resp("committed"), **errors(400, 404, 409)}},
            "get": {"summary": "committed offsets (of the partitions the query or, as REST "
                               "Proxy's clients send them, the body names)",
                    "parameters": [p("partitions", "query", {"type": "string"},
                                     "TOPIC:PARTITION,...")],
                    "requestBody": json_body(ref(bodies.InstanceCommitted), required=False),
                    "responses": {"200": resp("offsets", offsets, V2_RESPONSE),
                                  **errors(400, 404)}}},
        f"{base}/heartbeat": {"post": {
            "summary": "keep the instance's membership alive", "parameters": [group, instance],
            "responses": {"200": resp("state", {"type": "object"}), **errors(400, 404, 409)}}},
        base: {"delete": {"summary": "destroy the instance (leaves the group)",
                          "parameters": [group, instance],
                          "responses": {"204": resp("gone"), **errors(400, 404)}}},
    }


def group_paths() -> dict[str, Any]:
    """The group protocol routes (``group_routes``)."""
    return {
        "/groups": {"get": {"summary": "consumer groups",
                            "responses": {"200": resp("names", {"type": "object"})}}},
        "/groups/{group}": {"get": {
            "summary": "members, assignment, committed offsets and lag", "parameters": [group],
            "responses": {"200": resp("description", {"type": "object"}), **errors(400, 404)}}},
        "/groups/{group}/members": {"post": {
            "summary": "join (or rejoin with member_id)", "parameters": [group],
            "requestBody": json_body(ref(bodies.JoinGroup)),
            "responses": {"200": resp("member state", member_state),
                          **errors(400, 404, 409)}}},
        "/groups/{group}/members/{member}/heartbeat": {"post": {
            "summary": "heartbeat", "parameters": [group, member],
            "requestBody": json_body(ref(bodies.Heartbeat), required=False),
            "responses": {"200": resp("member state", member_state),
                          **errors(400, 404, 409)}}},
        "/groups/{group}/members/{member}": {"delete": {
            "summary": "leave", "parameters": [group, member],
            "responses": {"204": resp("left"), **errors(400, 404)}}},
        "/groups/{group}/offsets": {
            "parameters": [group],
            "post": {"summary": "commit (member_id and generation fence zombies)",
                     "requestBody": json_body(ref(bodies.CommitGroupOffsets)),
                     "responses": {"204": resp("committed"), **errors(400, 404, 409)}},
            "get": {"summary": "committed offsets",
                    "parameters": [p("partitions", "query", {"type": "string"},
                                     "TOPIC:PARTITION,...")],
                    "responses": {"200": resp("offsets", offsets), **errors(400, 404)}}},
    }


def consumer_paths() -> dict[str, Any]:
    """Every consumer route's path item."""
    return {**fetch_paths(), **instance_paths(), **group_paths()}
