"""The OpenAPI path items of the REST Proxy v3 routes (``topics``, ``v3_configs``,
``v3_records``, ``v3_groups``, ``v3_replicas``) and of ``/docs``.

Merged into ``/openapi.json`` by ``openapi.document``. Shapes follow Confluent's
v3 reference (``kind``, ``metadata.self``/``resource_name``, ``{"related": url}``
links); sparklog's own extra fields are listed where they are answered.
"""

from __future__ import annotations

from typing import Any

from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import ref
from ingest_gateway.http.openapi_consumers import errors, p, resp

CLUSTER = p("cluster_id", "path", {"type": "string"}, "the cluster id (GET /v3/clusters)")
NAME = {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"}
TOPIC = {**p("topic", "path", NAME, "topic name"), "example": "fuzz"}
PARTITION = {**p("partition", "path", {"type": "integer", "minimum": 0}, "partition"),
             "example": 0}
GROUP = p("group", "path", NAME, "consumer group id")
CONSUMER = p("consumer", "path", {"type": "string"}, "consumer (member) id")
BROKER = {**p("broker_id", "path", {"type": "integer", "minimum": 0}, "broker id (a gateway "
                                                                      "slot; 0 standalone)"),
          "example": 0}
CONFIG = {**p("name", "path", {"type": "string", "maxLength": 255}, "a topic config name"),
          "example": "retention.ms"}

S, N, B = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
LINK = {"type": "object", "required": ["related"], "properties": {"related": S}}
META = {"type": "object", "required": ["self"], "properties": {"self": S, "resource_name": S}}
LIST_META = {"type": "object", "properties": {"self": S, "next": {**S, "nullable": True}}}


def res(kind: str, props: dict[str, Any]) -> dict[str, Any]:
    """A v3 resource: kind, metadata, then ``props``."""
    return {"type": "object", "required": ["kind", "metadata"],
            "properties": {"kind": {"type": "string", "example": kind}, "metadata": META,
                           **props}}


def lst(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["kind", "metadata", "data"],
            "properties": {"kind": S, "metadata": LIST_META,
                           "data": {"type": "array", "items": item}}}


def body(schema: dict[str, Any], required: bool = True, example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"required": required, "content": {"application/json": media}}


RECORD_EXAMPLE = {"key": {"type": "STRING", "data": "k"},
                  "value": {"type": "JSON", "data": {"a": 1}}}


CLUSTER_DOC = res("KafkaCluster", {"cluster_id": S, "controller": LINK, "acls": LINK,
                                   "brokers": LINK, "broker_configs": LINK,
                                   "consumer_groups": LINK, "topics": LINK,
                                   "partition_reassignments": LINK,
                                   "gateways": {"type": "array", "items": {"type": "object"}}})
BROKER_DOC = res("KafkaBroker", {"cluster_id": S, "broker_id": N,
                                 "host": {**S, "nullable": True}, "port": {**N, "nullable": True},
                                 "rack": {**S, "nullable": True}, "configs": LINK,
                                 "partition_replicas": LINK})
TOPIC_DOC = res("KafkaTopic", {
    "cluster_id": S, "topic_name": S, "is_internal": B, "replication_factor": N,
    "partitions_count": N, "partitions": LINK, "configs": LINK, "partition_reassignments": LINK,
    "topic_id": {**S, "nullable": True}, "created_ms": {**N, "nullable": True}})
PARTITION_DOC = res("KafkaPartition", {
    "cluster_id": S, "topic_name": S, "partition_id": N, "leader": {**LINK, "nullable": True},
    "replicas": LINK, "reassignment": LINK, "leader_epoch": N, "log_start_offset": N,
    "high_watermark": N, "bytes": N, "segments": N})
REPLICA_DOC = res("KafkaReplica", {"cluster_id": S, "topic_name": S, "partition_id": N,
                                   "broker_id": N, "is_leader": B, "is_in_sync": B,
                                   "broker": LINK})
CONFIG_DOC = res("KafkaTopicConfig", {
    "cluster_id": S, "topic_name": S, "name": S, "value": {**S, "nullable": True},
    "is_default": B, "is_read_only": B, "is_sensitive": B, "source": S,
    "synonyms": {"type": "array", "items": {"type": "object", "properties": {
        "name": S, "value": {**S, "nullable": True}, "source": S}}}})
GROUP_DOC = res("KafkaConsumerGroup", {
    "cluster_id": S, "consumer_group_id": S, "is_simple": B, "partition_assignor": S,
    "state": {"type": "string", "enum": ["STABLE", "PREPARING_REBALANCE", "EMPTY", "UNKNOWN"]},
    "type": S, "is_mixed_consumer_group": B, "coordinator": LINK, "consumers": LINK,
    "lag_summary": LINK, "lags": LINK, "generation": N})
CONSUMER_DOC = res("KafkaConsumer", {"cluster_id": S, "consumer_group_id": S, "consumer_id": S,
                                     "instance_id": {**S, "nullable": True}, "client_id": S,
                                     "assignments": LINK})
ASSIGNMENT_DOC = res("KafkaConsumerAssignment", {
    "cluster_id": S, "consumer_group_id": S, "consumer_id": S, "topic_name": S,
    "partition_id": N, "partition": LINK, "lag": LINK})
LAG_DOC = res("KafkaConsumerLag", {
    "cluster_id": S, "consumer_group_id": S, "topic_name": S, "partition_id": N,
    "consumer_id": S, "instance_id": {**S, "nullable": True}, "client_id": S,
    "current_offset": N, "log_end_offset": N, "lag": N})
SUMMARY_DOC = res("KafkaConsumerGroupLagSummary", {
    "cluster_id": S, "consumer_group_id": S, "max_lag_consumer_id": S,
    "max_lag_instance_id": {**S, "nullable": True}, "max_lag_client_id": S,
    "max_lag_topic_name": S, "max_lag_partition_id": N, "max_lag": N, "total_lag": N,
    "max_lag_consumer": {**LINK, "nullable": True}, "max_lag_partition": {**LINK,
                                                                          "nullable": True}})
SIZE = {"type": "object", "nullable": True, "properties": {"type": S, "size": N}}
REPORT = {"type": "object", "required": ["error_code"], "properties": {
    "error_code": N, "message": S, "cluster_id": S, "topic_name": S, "partition_id": N,
    "offset": N, "timestamp": {**S, "nullable": True}, "key": SIZE, "value": SIZE}}


def _get(summary: str, params: list, schema: dict[str, Any], *codes: int) -> dict[str, Any]:
    return {"parameters": params, "get": {"summary": summary, "responses": {
        "200": resp("ok", schema), **errors(*(codes or (400, 404)))}}}


def cluster_paths() -> dict[str, Any]:
    """Clusters, brokers, replicas, offsets and reassignments."""
    c = "/v3/clusters/{cluster_id}"
    part = f"{c}/topics/{{topic}}/partitions/{{partition}}"
    return {
        "/v3/clusters": {"get": {"summary": "the cluster (one)", "responses": {
            "200": resp("clusters", lst(CLUSTER_DOC))}}},
        c: _get("the cluster", [CLUSTER], CLUSTER_DOC, 404),
        f"{c}/brokers": _get("brokers (gateway slots; 0 standalone)", [CLUSTER],
                             lst(BROKER_DOC), 404),
        f"{c}/brokers/{{broker_id}}": _get("a broker", [CLUSTER, BROKER], BROKER_DOC),
        f"{c}/brokers/{{broker_id}}/partition-replicas": _get(
            "the partition replicas on a broker", [CLUSTER, BROKER], lst(REPLICA_DOC)),
        f"{part}/replicas": _get("a partition's replicas (one: the store replicates)",
                                 [CLUSTER, TOPIC, PARTITION], lst(REPLICA_DOC)),
        f"{part}/replicas/{{broker_id}}": _get("one replica", [CLUSTER, TOPIC, PARTITION, BROKER],
                                               REPLICA_DOC),
        f"{part}/offset": _get("earliest and latest offset", [CLUSTER, TOPIC, PARTITION],
                               res("KafkaPartitionWithOffsets", {
                                   "cluster_id": S, "topic_name": S, "partition_id": N,
                                   "earliest_offset": N, "latest_offset": N})),
        f"{c}/topics/-/partitions/-/reassignment": _get(
            "replica reassignments (never any)", [CLUSTER], lst({"type": "object"}), 404),
        f"{c}/topics/{{topic}}/partitions/-/reassignment": _get(
            "a topic's reassignments (never any)", [CLUSTER, TOPIC], lst({"type": "object"})),
        f"{part}/reassignment": {"parameters": [CLUSTER, TOPIC, PARTITION], "get": {
            "summary": "a partition's reassignment: always 404, none ever runs",
            "responses": errors(400, 404)}},
    }


def topic_paths() -> dict[str, Any]:
    """Topics, partitions, configs, records."""
    t = "/v3/clusters/{cluster_id}/topics"
    return {
        t: {"parameters": [CLUSTER],
            "get": {"summary": "topics", "responses": {"200": resp("topics", lst(TOPIC_DOC)),
                                                       **errors(404)}},
            "post": {"summary": "create a topic (validate_only: check only, 200)",
                     "requestBody": body(ref(bodies.CreateTopic)),
                     "responses": {"201": resp("created", TOPIC_DOC),
                                   "200": resp("validated, not created", {"type": "object"}),
                                   **errors(400, 404, 413)}}},
        f"{t}/{{topic}}": {
            "parameters": [CLUSTER, TOPIC],
            "get": {"summary": "a topic", "responses": {"200": resp("the topic", TOPIC_DOC),
                                                        **errors(400, 404)}},
            "patch": {"summary": "grow the partition count",
                      "requestBody": body(ref(bodies.PatchTopic)),
                      "responses": {"200": resp("the topic", TOPIC_DOC),
                                    **errors(400, 404, 413)}},
            "delete": {"summary": "delete a topic and its data",
                       "responses": {"204": resp("deleted"), **errors(400, 404)}}},
        f"{t}/{{topic}}/partitions": _get("partitions", [CLUSTER, TOPIC], lst(PARTITION_DOC)),
        f"{t}/{{topic}}/partitions/{{partition}}": _get("a partition", [CLUSTER, TOPIC, PARTITION],
                                                        PARTITION_DOC),
        f"{t}/-/configs": _get("every config of every topic", [CLUSTER], lst(CONFIG_DOC), 404),
        f"{t}/{{topic}}/configs": _get("a topic's configs", [CLUSTER, TOPIC], lst(CONFIG_DOC)),
        f"{t}/{{topic}}/configs:alter": {"parameters": [CLUSTER, TOPIC], "post": {
            "summary": "set or reset configs, all or none (validate_only: check only)",
            "requestBody": body(ref(bodies.AlterConfigs)),
            "responses": {"204": resp("changed"), **errors(400, 404, 413)}}},
        f"{t}/{{topic}}/configs/{{name}}": {
            "parameters": [CLUSTER, TOPIC, CONFIG],
            "get": {"summary": "one config", "responses": {"200": resp("config", CONFIG_DOC),
                                                           **errors(400, 404)}},
            "put": {"summary": "set one config", "requestBody": body(ref(bodies.PutConfig)),
                "responses": {"204": resp("set"), **errors(400, 404, 413)}},
            "delete": {"summary": "reset one config to the gateway's default",
                       "responses": {"204": resp("reset"), **errors(400, 404)}}},
        f"{t}/{{topic}}/records": {"parameters": [CLUSTER, TOPIC], "post": {
            "summary": "produce one record, or several as concatenated JSON (one delivery "
                       "report each, concatenated); a chunked body without Content-Length "
                       "is a stream: each report is sent as soon as its record is written",
            "requestBody": body(ref(bodies.V3Record), example=RECORD_EXAMPLE),
            "responses": {"200": resp("delivery report(s)", REPORT),
                          **errors(400, 404, 413, 415, 422, 429, 503)}}},
        f"{t}/{{topic}}/records:batch": {"parameters": [CLUSTER, TOPIC], "post": {
            "summary": "produce a batch of records, each with an id",
            "requestBody": body(ref(bodies.V3RecordsBatch), example={
                "entries": [{"id": "1", **RECORD_EXAMPLE}]}),
            "responses": {"207": resp("per entry: success or failure", {
                "type": "object", "properties": {
                    "successes": {"type": "array", "items": {"type": "object"}},
                    "failures": {"type": "array", "items": {"type": "object", "properties": {
                        "id": S, "error_code": N, "message": S}}}}}),
                **errors(400, 404, 413, 429, 503)}}},
    }


def group_paths() -> dict[str, Any]:
    """Consumer groups, consumers, assignments, lags."""
    g = "/v3/clusters/{cluster_id}/consumer-groups"
    c = f"{g}/{{group}}/consumers/{{consumer}}"
    return {
        g: _get("consumer groups", [CLUSTER], lst(GROUP_DOC), 404),
        f"{g}/{{group}}": _get("a consumer group", [CLUSTER, GROUP], GROUP_DOC),
        f"{g}/{{group}}/consumers": _get("its consumers", [CLUSTER, GROUP], lst(CONSUMER_DOC)),
        c: _get("a consumer", [CLUSTER, GROUP, CONSUMER], CONSUMER_DOC),
        f"{c}/assignments": _get("a consumer's partitions", [CLUSTER, GROUP, CONSUMER],
                                 lst(ASSIGNMENT_DOC)),
        f"{c}/assignments/{{topic}}/partitions/{{partition}}": _get(
            "one assigned partition", [CLUSTER, GROUP, CONSUMER, TOPIC, PARTITION],
            ASSIGNMENT_DOC),
        f"{g}/{{group}}/lags": _get("lag of each committed partition", [CLUSTER, GROUP],
                                    lst(LAG_DOC)),
        f"{g}/{{group}}/lags/{{topic}}/partitions/{{partition}}": _get(
            "one partition's lag", [CLUSTER, GROUP, TOPIC, PARTITION], LAG_DOC),
        f"{g}/{{group}}/lag-summary": _get("largest and total lag", [CLUSTER, GROUP],
                                           SUMMARY_DOC),
    }


def docs_paths() -> dict[str, Any]:
    html = resp("an HTML page", {"type": "string"}, "text/html")
    return {
        "/docs": {"get": {"summary": "interactive API page (Swagger UI) over /openapi.json",
                          "responses": {"200": html}}},
        "/redoc": {"get": {"summary": "API reference page (Redoc) over /openapi.json",
                           "responses": {"200": html}}},
        "/docs/static/{file}": {"get": {
            "summary": "the pages' vendored scripts and styles",
            "parameters": [{**p("file", "path", {"type": "string"}, "a file name"),
                            "example": "swagger-ui.css"}],
            "responses": {"200": resp("the file", {"type": "string"}, "text/css"),
                          **errors(404)}}},
    }


def v3_paths() -> dict[str, Any]:
    """Every v3 route's path item and the API pages'."""
    return {**cluster_paths(), **topic_paths(), **group_paths(), **docs_paths()}
